//! Framing of RESP replies (RESP2 and RESP3) on a link: how long the next complete reply is.
//!
//! Incremental: `frame` answers `Ok(None)` until a whole reply is buffered, and never scans
//! more than the buffer. Bounded: nesting deeper than `NESTING_MAX`, lines longer than
//! `LINE_BYTES_MAX` and bulk lengths above `BULK_BYTES_MAX` are protocol errors.

/// Deepest nesting of aggregates accepted.
pub const NESTING_MAX: usize = 64;
/// Longest header line (type byte, number, CRLF) or simple string accepted.
pub const LINE_BYTES_MAX: usize = 64 * 1024;
/// Largest bulk string accepted (Redis's `proto-max-bulk-len` default).
pub const BULK_BYTES_MAX: i64 = 512 * 1024 * 1024;

/// Why bytes are not a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("unknown reply type byte {0:#04x}")]
    Type(u8),
    #[error("bad length or count")]
    Length,
    #[error("line longer than {LINE_BYTES_MAX} bytes")]
    Line,
    #[error("nested deeper than {NESTING_MAX}")]
    Nesting,
}

/// Finds `\r\n` at or after `from`; `Ok(None)` when the line is not complete yet.
fn line_end(buf: &[u8], from: usize) -> Result<Option<usize>, ReplyError> {
    let rest = buf.get(from..).unwrap_or_default();
    match rest.windows(2).position(|w| w == b"\r\n") {
        Some(p) if p > LINE_BYTES_MAX => Err(ReplyError::Line),
        Some(p) => Ok(Some(from + p)),
        None if rest.len() > LINE_BYTES_MAX => Err(ReplyError::Line),
        None => Ok(None),
    }
}

fn number(line: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(ReplyError::Length)
}

/// The length of the complete reply at the start of `buf`, `Ok(None)` when more bytes are
/// needed.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, ReplyError> {
    // Values still expected in each open aggregate, innermost last.
    let mut open: Vec<i64> = Vec::new();
    let mut at = 0usize;
    loop {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(end) = line_end(buf, at + 1)? else {
            return Ok(None);
        };
        let line = buf.get(at + 1..end).unwrap_or_default();
        let body = end + 2;
        at = match kind {
            b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => body,
            b'$' | b'=' | b'!' => {
                let n = number(line)?;
                if n < 0 {
                    if n != -1 {
                        return Err(ReplyError::Length);
                    }
                    body
                } else {
                    if n > BULK_BYTES_MAX {
                        return Err(ReplyError::Length);
                    }
                    let stop = body + n as usize;
                    match buf.get(stop..stop + 2) {
                        None => return Ok(None),
                        Some(b"\r\n") => stop + 2,
                        Some(_) => return Err(ReplyError::Length),
                    }
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = number(line)?;
                let items = if matches!(kind, b'%' | b'|') {
                    n.checked_mul(2).ok_or(ReplyError::Length)?
                } else {
                    n
                };
                if items > 0 {
                    if open.len() >= NESTING_MAX {
                        return Err(ReplyError::Nesting);
                    }
                    open.push(items);
                    at = body;
                    continue;
                }
                if items < -1 {
                    return Err(ReplyError::Length);
                }
                body
            }
            other => return Err(ReplyError::Type(other)),
        };
        loop {
            match open.last_mut() {
                None => return Ok(Some(at)),
                Some(n) => {
                    *n -= 1;
                    if *n > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
        // An attribute (`|`) precedes the reply it describes: that reply follows.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_every_shape_and_waits_for_the_rest() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-MOVED 1 127.0.0.1:7000\r\n",
            b":-5\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"_\r\n",
            b"*2\r\n$1\r\na\r\n*2\r\n:1\r\n,2.5\r\n",
            b"%1\r\n+k\r\n~1\r\n#t\r\n",
            b"=7\r\ntxt:abc\r\n",
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
        ];
        for c in cases {
            let mut two = c.to_vec();
            two.extend_from_slice(b"+next\r\n");
            assert_eq!(
                frame(&two),
                Ok(Some(c.len())),
                "{}",
                String::from_utf8_lossy(c)
            );
            for cut in 0..c.len() {
                assert_eq!(
                    frame(&c[..cut]),
                    Ok(None),
                    "{} cut at {cut}",
                    String::from_utf8_lossy(c)
                );
            }
        }
        assert_eq!(frame(b"?x\r\n"), Err(ReplyError::Type(b'?')));
        assert_eq!(frame(b"$3\r\nabcd\r\n"), Err(ReplyError::Length));
        assert_eq!(frame(b"$-2\r\n"), Err(ReplyError::Length));
        assert_eq!(frame(b"*x\r\n"), Err(ReplyError::Length));
        let deep = "*1\r\n".repeat(NESTING_MAX + 1) + ":1\r\n";
        assert_eq!(frame(deep.as_bytes()), Err(ReplyError::Nesting));
        let long = vec![b'+'; LINE_BYTES_MAX + 2];
        assert_eq!(frame(&long), Err(ReplyError::Line));
    }
}
