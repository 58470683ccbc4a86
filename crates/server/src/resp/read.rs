//! Reading replies back: the shapes `reply::Reply` writes, RESP2 and RESP3.
//!
//! The dispatcher merges the replies of several shards (MGET's values, DBSIZE's counts,
//! INFO's texts), so it reads what shards wrote: a value's kind, its header number and where
//! it ends. Bounds-checked throughout: a malformed buffer gives `None`, never a panic.

/// One value's first line: its type byte, the number on the line (length, count or
/// integer; 0 for simple strings and errors) and where its body starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub kind: u8,
    pub n: i64,
    pub body: usize,
}

/// Most nested aggregates `skip` follows (replies Meridian writes nest a few levels).
pub const NESTING_MAX: usize = 64;

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|p| from + p)
}

fn parse_int(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Reads the header of the value at `pos`.
pub fn head(buf: &[u8], pos: usize) -> Option<Head> {
    let kind = *buf.get(pos)?;
    let end = line_end(buf, pos + 1)?;
    let line = buf.get(pos + 1..end)?;
    let n = match kind {
        b'+' | b'-' | b',' | b'#' | b'_' | b'(' => 0,
        _ => parse_int(line)?,
    };
    Some(Head {
        kind,
        n,
        body: end + 2,
    })
}

/// The text of a simple string or error at `pos` (without the type byte and CRLF).
pub fn line(buf: &[u8], pos: usize) -> Option<&[u8]> {
    let end = line_end(buf, pos + 1)?;
    buf.get(pos + 1..end)
}

/// Where the value at `pos` ends (one past its last byte).
pub fn skip(buf: &[u8], pos: usize) -> Option<usize> {
    // Values still to skip, as an explicit stack of counts: no recursion.
    let mut pending: Vec<i64> = Vec::new();
    let mut at = pos;
    loop {
        let h = head(buf, at)?;
        at = match h.kind {
            b'$' | b'=' | b'!' => {
                if h.n < 0 {
                    h.body
                } else {
                    let end = h.body.checked_add(usize::try_from(h.n).ok()?)?;
                    if buf.get(end..end + 2)? != b"\r\n" {
                        return None;
                    }
                    end + 2
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let items = if matches!(h.kind, b'%' | b'|') {
                    h.n.checked_mul(2)?
                } else {
                    h.n
                };
                if items > 0 {
                    if pending.len() >= NESTING_MAX {
                        return None;
                    }
                    pending.push(items);
                    at = h.body;
                    continue;
                }
                h.body
            }
            b':' | b'+' | b'-' | b',' | b'#' | b'_' | b'(' => h.body,
            _ => return None,
        };
        // One value done: count it against the innermost open aggregate.
        loop {
            match pending.last_mut() {
                None => return Some(at),
                Some(n) => {
                    *n -= 1;
                    if *n > 0 {
                        break;
                    }
                    pending.pop();
                }
            }
        }
    }
}

/// The elements of the aggregate at `pos` as byte ranges, and where it ends. `None` when the
/// value is not an array, set or push (or is malformed).
pub fn elements(buf: &[u8], pos: usize) -> Option<(Vec<(usize, usize)>, usize)> {
    let h = head(buf, pos)?;
    if !matches!(h.kind, b'*' | b'~' | b'>') {
        return None;
    }
    spans(buf, h.body, usize::try_from(h.n.max(0)).ok()?)
}

/// The spans of the `n` replies from `at` on, and where the last ends.
fn spans(buf: &[u8], mut at: usize, n: usize) -> Option<(Vec<(usize, usize)>, usize)> {
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let end = skip(buf, at)?;
        out.push((at, end));
        at = end;
    }
    Some((out, at))
}

/// The items of the array, set or map at `pos`, a map's keys and values alternating (a RESP3
/// map `%n` holds 2n items; in RESP2 the same reply is an array of 2n), and where it ends.
pub fn flat_items(buf: &[u8], pos: usize) -> Option<(Vec<(usize, usize)>, usize)> {
    let h = head(buf, pos)?;
    if h.kind != b'%' {
        return elements(buf, pos);
    }
    spans(
        buf,
        h.body,
        usize::try_from(h.n.max(0)).ok()?.checked_mul(2)?,
    )
}

/// The payload of a bulk or verbatim string at `pos` (a verbatim string's `txt:` prefix
/// removed); `None` for a null or another kind.
pub fn bulk(buf: &[u8], pos: usize) -> Option<&[u8]> {
    let h = head(buf, pos)?;
    if !matches!(h.kind, b'$' | b'=') || h.n < 0 {
        return None;
    }
    let body = buf.get(h.body..h.body.checked_add(usize::try_from(h.n).ok()?)?)?;
    if h.kind == b'=' {
        return body.get(4..);
    }
    Some(body)
}

/// The integer at `pos`, if it is one.
pub fn int(buf: &[u8], pos: usize) -> Option<i64> {
    let h = head(buf, pos)?;
    (h.kind == b':').then_some(h.n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_every_shape() {
        let cases: &[&[u8]] = &[
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":12\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"_\r\n",
            b"*0\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"%1\r\n+k\r\n*2\r\n,1.5\r\n#t\r\n",
            b"=7\r\ntxt:abc\r\n",
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
        ];
        for c in cases {
            let mut two = c.to_vec();
            two.extend_from_slice(b":9\r\n");
            assert_eq!(
                skip(&two, 0),
                Some(c.len()),
                "{}",
                String::from_utf8_lossy(c)
            );
            assert_eq!(int(&two, c.len()), Some(9));
        }
        for bad in [
            &b"$5\r\nab\r\n"[..],
            b"*2\r\n:1\r\n",
            b"?x\r\n",
            b"$3\r\nabcd\r\n",
            b"",
        ] {
            assert_eq!(skip(bad, 0), None, "{}", String::from_utf8_lossy(bad));
        }
        let deep = "*1\r\n".repeat(NESTING_MAX + 1) + ":1\r\n";
        assert_eq!(skip(deep.as_bytes(), 0), None);
    }

    #[test]
    fn elements_and_payloads() {
        let b = b"*3\r\n$1\r\na\r\n$-1\r\n:5\r\n";
        let (els, end) = elements(b, 0).unwrap();
        assert_eq!(end, b.len());
        assert_eq!(els.len(), 3);
        assert_eq!(bulk(b, els[0].0), Some(&b"a"[..]));
        assert_eq!(bulk(b, els[1].0), None);
        assert_eq!(int(b, els[2].0), Some(5));
        assert_eq!(bulk(b"=7\r\ntxt:abc\r\n", 0), Some(&b"abc"[..]));
        assert_eq!(line(b"-ERR boom\r\n", 0), Some(&b"ERR boom"[..]));
    }
}
