//! Text conveniences of the socket tests that compare replies as strings: arguments as
//! `&str`, replies rendered lossily.

use super::Raw;

/// A reply's bytes as text.
pub fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Sends a command and returns its reply as text.
pub fn call(c: &mut Raw, args: &[&str]) -> String {
    c.call_text(args)
}

/// Sends a command without reading its reply.
pub fn send(c: &mut Raw, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
    c.send_cmd(&a);
}

/// Reads the next reply as text.
pub fn read(c: &mut Raw) -> String {
    s(&c.read_reply())
}
