//! A small blocking RESP2 client: one connection, one request at a time or a pipeline.
//!
//! Replies are parsed whole from a buffer that grows to at most `REPLY_BYTES_MAX`; nesting is
//! capped at `DEPTH_MAX`. The socket can live in a site's namespace (`netns::in_netns`).

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::netns;

/// Largest reply the drill accepts (a SCAN page or a small collection is far below this).
pub const REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Deepest nesting of arrays accepted in a reply.
pub const DEPTH_MAX: usize = 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text for the ledger (bulk strings lossy, arrays space-separated).
    pub fn text(&self) -> String {
        match self {
            Reply::Simple(s) => s.clone(),
            Reply::Error(e) => format!("-{e}"),
            Reply::Int(i) => i.to_string(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            Reply::Bulk(None) | Reply::Array(None) => "(nil)".to_string(),
            Reply::Array(Some(v)) => v.iter().map(Reply::text).collect::<Vec<_>>().join(" "),
        }
    }

    pub fn bulk_str(&self) -> Option<String> {
        match self {
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            Reply::Simple(s) => Some(s.clone()),
            _ => None,
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The items of an array of bulk strings, as text.
    pub fn strings(&self) -> Vec<String> {
        match self {
            Reply::Array(Some(v)) => v.iter().filter_map(Reply::bulk_str).collect(),
            _ => Vec::new(),
        }
    }
}

/// Why a reply could not be parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    Incomplete,
    Protocol(String),
}

/// Parses one reply at the start of `buf`: the reply and the bytes it used.
pub fn parse(buf: &[u8]) -> Result<(Reply, usize), ParseError> {
    parse_at(buf, 0, 0)
}

fn line_end(buf: &[u8], from: usize) -> Result<usize, ParseError> {
    let rest = buf.get(from..).ok_or(ParseError::Incomplete)?;
    rest.windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
        .ok_or(ParseError::Incomplete)
}

fn parse_int(bytes: &[u8]) -> Result<i64, ParseError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            ParseError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(bytes)))
        })
}

fn parse_at(buf: &[u8], pos: usize, depth: usize) -> Result<(Reply, usize), ParseError> {
    if depth > DEPTH_MAX {
        return Err(ParseError::Protocol("reply nested too deep".into()));
    }
    let kind = *buf.get(pos).ok_or(ParseError::Incomplete)?;
    let end = line_end(buf, pos + 1)?;
    let line = buf.get(pos + 1..end).ok_or(ParseError::Incomplete)?;
    let after = end + 2;
    match kind {
        b'+' => Ok((
            Reply::Simple(String::from_utf8_lossy(line).into_owned()),
            after,
        )),
        b'-' => Ok((
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            after,
        )),
        b':' => Ok((Reply::Int(parse_int(line)?), after)),
        b'$' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok((Reply::Bulk(None), after));
            }
            let n = usize::try_from(n).map_err(|_| ParseError::Protocol("bulk length".into()))?;
            if n > REPLY_BYTES_MAX {
                return Err(ParseError::Protocol(format!("bulk of {n} bytes")));
            }
            let data = buf.get(after..after + n).ok_or(ParseError::Incomplete)?;
            if buf
                .get(after + n..after + n + 2)
                .ok_or(ParseError::Incomplete)?
                != b"\r\n"
            {
                return Err(ParseError::Protocol("bulk without CRLF".into()));
            }
            Ok((Reply::Bulk(Some(data.to_vec())), after + n + 2))
        }
        b'*' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok((Reply::Array(None), after));
            }
            let n = usize::try_from(n).map_err(|_| ParseError::Protocol("array length".into()))?;
            if n > REPLY_BYTES_MAX / 4 {
                return Err(ParseError::Protocol(format!("array of {n} items")));
            }
            let mut items = Vec::with_capacity(n.min(1024));
            let mut p = after;
            for _ in 0..n {
                let (r, next) = parse_at(buf, p, depth + 1)?;
                items.push(r);
                p = next;
            }
            Ok((Reply::Array(Some(items)), p))
        }
        other => Err(ParseError::Protocol(format!(
            "unexpected reply type byte {other:#04x}"
        ))),
    }
}

/// Encodes one command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One client connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects to `addr` from namespace `ns` (None: this process's namespace).
    pub fn connect(ns: Option<&str>, addr: SocketAddr, timeout: Duration) -> io::Result<Conn> {
        let stream = netns::in_netns(ns, || TcpStream::connect_timeout(&addr, timeout))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(4096),
        })
    }

    pub fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let mut out = Vec::with_capacity(64);
        encode(args, &mut out);
        self.stream.write_all(&out)
    }

    /// Reads one reply (blocking up to the read timeout per read).
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        let mut chunk = [0u8; 16 * 1024];
        // Bounded: each pass either parses or reads at least one byte, and the buffer is capped.
        loop {
            match parse(&self.buf) {
                Ok((r, used)) => {
                    self.buf.drain(..used);
                    return Ok(r);
                }
                Err(ParseError::Protocol(e)) => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                Err(ParseError::Incomplete) => {}
            }
            if self.buf.len() > REPLY_BYTES_MAX {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply too large",
                ));
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
            self.buf
                .extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&str]) -> io::Result<Reply> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&bytes)?;
        self.read_reply()
    }

    /// Sends commands in one write and reads as many replies.
    pub fn pipeline(&mut self, cmds: &[Vec<String>]) -> io::Result<Vec<Reply>> {
        let mut out = Vec::new();
        for c in cmds {
            let args: Vec<&[u8]> = c.iter().map(|a| a.as_bytes()).collect();
            encode(&args, &mut out);
        }
        self.stream.write_all(&out)?;
        cmds.iter().map(|_| self.read_reply()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_waits_for_more() {
        let (r, n) = parse(b"*3\r\n$1\r\na\r\n:5\r\n$-1\r\n+x").unwrap();
        assert_eq!(
            r,
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"a".to_vec())),
                Reply::Int(5),
                Reply::Bulk(None)
            ]))
        );
        assert_eq!(n, 20);
        assert_eq!(parse(b"$5\r\nab"), Err(ParseError::Incomplete));
        assert_eq!(
            parse(b"-ERR x\r\n").unwrap().0,
            Reply::Error("ERR x".into())
        );
        assert!(matches!(parse(b"?\r\n"), Err(ParseError::Protocol(_))));
        let deep = "*1\r\n".repeat(DEPTH_MAX + 2);
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(ParseError::Protocol(_))
        ));
    }
}
