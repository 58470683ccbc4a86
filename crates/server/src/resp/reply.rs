//! `Reply`: the one place reply bytes are produced, for RESP2 and RESP3.
//!
//! Handlers append replies to the connection's reusable output buffer; nothing allocates per
//! reply beyond the buffer's amortized growth. Error texts come from `crate::error`, so every
//! wire text stays identical to Redis's.

use crate::error::CmdError;

/// Protocol version negotiated by HELLO: replies differ, requests do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Proto {
    #[default]
    Resp2,
    Resp3,
}

/// The output buffer of one connection and the protocol its replies use.
#[derive(Debug, Default)]
pub struct Reply {
    pub buf: Vec<u8>,
    pub proto: Proto,
}

impl Reply {
    pub fn new() -> Reply {
        Reply {
            buf: Vec::with_capacity(16 * 1024),
            proto: Proto::Resp2,
        }
    }

    pub fn is_resp3(&self) -> bool {
        self.proto == Proto::Resp3
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Truncates back to `len` (used to discard a partially written reply).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    fn line(&mut self, prefix: u8, n: i64) {
        self.buf.push(prefix);
        let mut b = itoa::Buffer::new();
        self.buf.extend_from_slice(b.format(n).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A status reply; `s` must not contain CR or LF.
    pub fn simple(&mut self, s: &str) {
        self.simple_bytes(s.as_bytes());
    }

    pub fn simple_bytes(&mut self, s: &[u8]) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error reply from a typed error.
    pub fn error(&mut self, e: &CmdError) {
        self.buf.push(b'-');
        e.write_text(&mut self.buf);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error reply from its full text (without the leading '-'), e.g. "ERR syntax error".
    /// CR and LF in `text` are replaced by spaces, as Redis does.
    pub fn error_text(&mut self, text: &str) {
        self.buf.push(b'-');
        self.buf.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, n: i64) {
        self.line(b':', n);
    }

    pub fn bulk(&mut self, b: &[u8]) {
        self.line(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string holding the decimal text of `n` (GET of an integer value).
    pub fn bulk_int(&mut self, n: i64) {
        let mut b = itoa::Buffer::new();
        let s = b.format(n);
        self.bulk(s.as_bytes());
    }

    /// The null bulk string: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, n: usize) {
        self.line(b'*', n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, an array of `2n` in RESP2.
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.line(b'*', 2 * n as i64),
            Proto::Resp3 => self.line(b'%', n as i64),
        }
    }

    /// A set of `n` elements: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.line(b'*', n as i64),
            Proto::Resp3 => self.line(b'~', n as i64),
        }
    }

    /// A push frame header (`>n` in RESP3, an array in RESP2).
    pub fn push(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.line(b'*', n as i64),
            Proto::Resp3 => self.line(b'>', n as i64),
        }
    }

    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, v: bool) {
        match self.proto {
            Proto::Resp2 => self.int(i64::from(v)),
            Proto::Resp3 => self
                .buf
                .extend_from_slice(if v { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// A double: `,` in RESP3, a bulk string in RESP2, formatted as Redis's `%.17g`.
    pub fn double(&mut self, v: f64) {
        let s = format_double(v);
        match self.proto {
            Proto::Resp2 => self.bulk(s.as_bytes()),
            Proto::Resp3 => {
                self.buf.push(b',');
                self.buf.extend_from_slice(s.as_bytes());
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }

    /// A verbatim string (`=` with a 3-letter format in RESP3, a bulk string in RESP2).
    pub fn verbatim(&mut self, format: &[u8; 3], text: &[u8]) {
        match self.proto {
            Proto::Resp2 => self.bulk(text),
            Proto::Resp3 => {
                self.line(b'=', text.len() as i64 + 4);
                self.buf.extend_from_slice(format);
                self.buf.push(b':');
                self.buf.extend_from_slice(text);
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Raw protocol bytes, already encoded.
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
}

/// Formats a double as Redis does for replies (`%.17g`, with `inf`/`-inf`/`nan`).
pub fn format_double(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    format_g17(v)
}

/// C's `%.17g`: 17 significant digits, shortest of fixed or exponent form, zeros trimmed.
pub fn format_g17(v: f64) -> String {
    format_g(v, 17)
}

/// C's `%.<precision>g` of a finite double (`%.14g` is Lua 5.1's number format).
pub fn format_g(v: f64, precision: i32) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".to_string()
        } else {
            "0".to_string()
        };
    }
    let e = format!("{:.*e}", (precision - 1) as usize, v);
    // e looks like "-1.2345678901234567e5"
    let (mantissa, exp) = match e.split_once('e') {
        Some((m, x)) => (m.to_string(), x.parse::<i32>().unwrap_or(0)),
        None => (e.clone(), 0),
    };
    if exp < -4 || exp >= precision {
        let m = trim_fraction_zeros(&mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (precision - 1 - exp).max(0) as usize;
        let f = format!("{:.*}", decimals, v);
        trim_fraction_zeros(&f)
    }
}

fn trim_fraction_zeros(s: &str) -> String {
    if !s.contains('.') {
        return s.to_string();
    }
    let t = s.trim_end_matches('0');
    t.strip_suffix('.').unwrap_or(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_and_resp3_shapes() {
        let mut r = Reply::new();
        r.null();
        r.map(2);
        r.boolean(true);
        assert_eq!(r.buf, b"$-1\r\n*4\r\n:1\r\n");
        let mut r = Reply {
            proto: Proto::Resp3,
            ..Reply::new()
        };
        r.null();
        r.map(2);
        r.boolean(true);
        r.double(1.5);
        assert_eq!(r.buf, b"_\r\n%2\r\n#t\r\n,1.5\r\n");
    }

    #[test]
    fn doubles_print_like_c_percent_17g() {
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(0.1), "0.10000000000000001");
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_double(1e20), "1e+20");
        assert_eq!(format_double(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(format_double(f64::INFINITY), "inf");
        assert_eq!(format_double(-0.0), "-0");
        assert_eq!(format_double(123456.0), "123456");
    }

    #[test]
    fn error_text_has_no_newlines() {
        let mut r = Reply::new();
        r.error_text("ERR a\r\nb");
        assert_eq!(r.buf, b"-ERR a  b\r\n");
    }
}
