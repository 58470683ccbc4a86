//! The RESP wire protocol: the resumable request parser and the reply builder.
//!
//! Requests are arrays of bulk strings (or inline lines) in both RESP2 and RESP3; only replies
//! differ by protocol version, and every reply byte is produced by `reply::Reply`.

pub mod parse;
pub mod read;
pub mod reply;

/// Appends one command as a client sends it: an array of bulk strings (MIGRATE's requests to
/// its target, `meridian admin` and `meridian import-rdb`).
pub fn put_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}
