//! RESP request parser: multibulk (`*N\r\n$len\r\n…`) and inline (telnet) commands.
//!
//! A resumable state machine over the connection's read buffer that accepts and refuses
//! exactly what Redis 7.0.15 `processMultibulkBuffer` / `processInlineBuffer` do, with
//! Redis's error texts. Arguments are offsets into the caller's buffer (inline arguments
//! live in the parser's scratch). No `unwrap`, `expect` or panicking index on input bytes.

use std::fmt;

use memchr::memchr2;
use smallvec::SmallVec;

/// Longest inline line, and longest `*N` / `$N` header line (Redis `PROTO_INLINE_MAX_SIZE`).
pub const PROTO_INLINE_BYTES_MAX: usize = 64 * 1024;
/// Bulks of at least this size are "big" (Redis `PROTO_MBULK_BIG_ARG`); see [`Parser::bytes_hint`].
pub const PROTO_MBULK_BIG_ARG: usize = 32 * 1024;
/// Most arguments of a multibulk request before AUTH.
pub const UNAUTH_ARGC_MAX: i64 = 10;
/// Longest bulk argument before AUTH.
pub const UNAUTH_BULK_BYTES_MAX: i64 = 16 * 1024;
/// Never pre-allocate argv from a declared count beyond this (CVE-2021-32675).
pub const ARGV_PREALLOC_MAX: usize = 1024;

/// Default `proto-max-bulk-len`.
const BULK_BYTES_MAX_DEFAULT: i64 = 512 * 1024 * 1024;
/// Redis caps the multibulk count at `INT_MAX`.
const MBULK_COUNT_MAX: i64 = i32::MAX as i64;
/// Spans capacity kept between commands; more is released after a huge command.
const SPANS_KEEP_MAX: usize = 4 * ARGV_PREALLOC_MAX;
/// Scratch capacity kept between inline commands.
const SCRATCH_KEEP_MAX: usize = PROTO_INLINE_BYTES_MAX;

/// Limits that may change over a connection's life (AUTH, `CONFIG SET proto-max-bulk-len`).
#[derive(Clone, Copy, Debug)]
pub struct ParseLimits {
    /// `proto-max-bulk-len`: longest bulk argument.
    pub bulk_bytes_max: i64,
    /// False before AUTH when a password is required: applies the `UNAUTH_*` limits.
    pub authenticated: bool,
}

impl Default for ParseLimits {
    fn default() -> ParseLimits {
        ParseLimits {
            bulk_bytes_max: BULK_BYTES_MAX_DEFAULT,
            authenticated: true,
        }
    }
}

/// A protocol error: reply [`ProtoError::message`] and close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    InvalidMultibulkLength,
    InvalidBulkLength,
    /// The byte found where a bulk's `$` was due.
    ExpectedDollar(u8),
    UnbalancedQuotes,
    TooBigInline,
    TooBigMbulkCount,
    TooBigBulkCount,
    UnauthenticatedMultibulkLength,
    UnauthenticatedBulkLength,
}

impl ProtoError {
    /// The exact wire text, without the leading `-` and the trailing CRLF.
    ///
    /// `ExpectedDollar` carries a raw byte, which Redis writes as is; a byte of 0x80 and
    /// above becomes U+FFFD here, so use [`ProtoError::message_bytes`] to write the reply.
    pub fn message(&self) -> String {
        String::from_utf8_lossy(&self.message_bytes()).into_owned()
    }

    /// The exact wire bytes, without the leading `-` and the trailing CRLF.
    pub fn message_bytes(&self) -> Vec<u8> {
        let text: &[u8] = match self {
            ProtoError::InvalidMultibulkLength => b"ERR Protocol error: invalid multibulk length",
            ProtoError::InvalidBulkLength => b"ERR Protocol error: invalid bulk length",
            ProtoError::ExpectedDollar(got) => {
                // addReplyErrorFormat turns CR and LF into spaces.
                let got = match got {
                    b'\r' | b'\n' => b' ',
                    other => *other,
                };
                let mut text = b"ERR Protocol error: expected '$', got '".to_vec();
                text.push(got);
                text.push(b'\'');
                return text;
            }
            ProtoError::UnbalancedQuotes => b"ERR Protocol error: unbalanced quotes in request",
            ProtoError::TooBigInline => b"ERR Protocol error: too big inline request",
            ProtoError::TooBigMbulkCount => b"ERR Protocol error: too big mbulk count string",
            ProtoError::TooBigBulkCount => b"ERR Protocol error: too big bulk count string",
            ProtoError::UnauthenticatedMultibulkLength => {
                b"ERR Protocol error: unauthenticated multibulk length"
            }
            ProtoError::UnauthenticatedBulkLength => {
                b"ERR Protocol error: unauthenticated bulk length"
            }
        };
        text.to_vec()
    }
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ProtoError {}

/// What [`Parser::next`] found at the start of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A complete command; `consumed` bytes of the buffer (from its start) belong to it.
    Command { consumed: usize },
    /// Bytes to drop with no command (a lone "\r\n", "*0\r\n", "*-10\r\n", an empty inline line).
    Skip { consumed: usize },
    /// Need more input.
    Incomplete,
    /// Protocol error: reply the message and close the connection.
    Error(ProtoError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing examined yet.
    Idle,
    /// Reading the `*N` line.
    Count,
    /// Reading `$len` lines and bulks; `argc` of them still due.
    Args,
    /// Reading an inline line.
    Inline,
    /// A `Command` or `Skip` was returned; the next call starts a new command.
    Done,
    /// An error was returned; it is returned again on every call.
    Failed(ProtoError),
}

/// Where the search for the current line's terminator stands.
enum Line {
    /// The terminator's offset; the bytes Redis needs after it are present.
    Found(usize),
    Incomplete,
    /// No terminator within `PROTO_INLINE_BYTES_MAX` bytes of the line start.
    TooBig,
}

/// Resumable RESP request parser. One per connection.
///
/// Offsets are relative to the current command's first byte, which is `buf[0]` on every
/// call. Bytes are examined at most once: header lines are searched from where the last
/// search stopped, and bulk payloads are never scanned.
pub struct Parser {
    limits: ParseLimits,
    state: State,
    /// Bulks still due in the current multibulk.
    argc: i64,
    /// First byte not yet parsed.
    pos: usize,
    /// Where the terminator search of the current line resumes.
    scan: usize,
    /// The current line's terminator, once found.
    line_end: Option<usize>,
    /// The current line's search hit a NUL first: like Redis's `strchr`, it never ends.
    stalled: bool,
    /// Length of the bulk being read, once its `$len` line is parsed.
    bulk_len: Option<usize>,
    /// Arguments parsed so far, as `(start, end)` offsets into the buffer or the scratch.
    spans: Vec<(usize, usize)>,
    /// Whether `spans` point into `scratch` (inline commands).
    in_scratch: bool,
    /// Inline arguments after quote and escape processing.
    scratch: Vec<u8>,
    /// Bytes handed to the terminator search, for the linearity tests.
    #[cfg(test)]
    examined: usize,
}

impl Parser {
    pub fn new(limits: ParseLimits) -> Parser {
        Parser {
            limits,
            state: State::Idle,
            argc: 0,
            pos: 0,
            scan: 0,
            line_end: None,
            stalled: false,
            bulk_len: None,
            spans: Vec::new(),
            in_scratch: false,
            scratch: Vec::new(),
            #[cfg(test)]
            examined: 0,
        }
    }

    /// Takes effect at the next check (AUTH succeeded, `proto-max-bulk-len` changed).
    pub fn set_limits(&mut self, limits: ParseLimits) {
        self.limits = limits;
    }

    /// Parses the next command. `buf` must start at the first byte not yet consumed and
    /// contain every byte passed before from that point (the caller appends reads and drops
    /// consumed prefixes). Never re-scans bytes already examined: work is linear in input
    /// even when one huge argument arrives in many small reads.
    pub fn next(&mut self, buf: &[u8]) -> Parsed {
        if self.state == State::Done {
            self.reset();
        }
        if self.state == State::Idle {
            match buf.first() {
                None => return Parsed::Incomplete,
                Some(b'*') => self.state = State::Count,
                Some(_) => self.state = State::Inline,
            }
        }
        let parsed = match self.state {
            State::Count => self.count(buf),
            State::Args => self.args_step(buf),
            State::Inline => self.inline(buf),
            State::Failed(error) => Parsed::Error(error),
            State::Idle | State::Done => Parsed::Incomplete,
        };
        match parsed {
            Parsed::Command { .. } | Parsed::Skip { .. } => self.state = State::Done,
            Parsed::Error(error) => self.state = State::Failed(error),
            Parsed::Incomplete => {}
        }
        parsed
    }

    /// After `Parsed::Command`, the arguments of that command as slices of `buf` (same buf
    /// as passed to next) or of the parser's own scratch (inline commands). Clears `out`
    /// first.
    pub fn args<'a>(&'a self, buf: &'a [u8], out: &mut SmallVec<[&'a [u8]; 8]>) {
        out.clear();
        let source = if self.in_scratch {
            self.scratch.as_slice()
        } else {
            buf
        };
        out.extend(
            self.spans
                .iter()
                .map(|&(start, end)| source.get(start..end).unwrap_or_default()),
        );
    }

    /// Total bytes the current incomplete command needs in the buffer, when a big bulk
    /// (at least `PROTO_MBULK_BIG_ARG` bytes) is being read, so the caller can reserve once.
    pub fn bytes_hint(&self) -> Option<usize> {
        match (self.state, self.bulk_len) {
            (State::Args, Some(len)) if len >= PROTO_MBULK_BIG_ARG => {
                self.pos.checked_add(len)?.checked_add(2)
            }
            _ => None,
        }
    }

    fn reset(&mut self) {
        self.state = State::Idle;
        self.argc = 0;
        self.pos = 0;
        self.scan = 0;
        self.line_end = None;
        self.stalled = false;
        self.bulk_len = None;
        self.spans.clear();
        if self.spans.capacity() > SPANS_KEEP_MAX {
            self.spans.shrink_to(ARGV_PREALLOC_MAX);
        }
        self.in_scratch = false;
        self.scratch.clear();
        if self.scratch.capacity() > SCRATCH_KEEP_MAX {
            self.scratch.shrink_to(SCRATCH_KEEP_MAX);
        }
    }

    /// Searches the line starting at `start` for `term`, like Redis's `strchr`: a NUL ends
    /// the search for good. `after` is how many bytes must follow the terminator (Redis
    /// skips the byte after '\r' without checking it). The search window is the first
    /// `PROTO_INLINE_BYTES_MAX + 1` bytes of the line, so the outcome does not depend on
    /// how the input was split into reads.
    #[inline]
    fn line(&mut self, buf: &[u8], start: usize, term: u8, after: usize) -> Line {
        if self.line_end.is_none() && !self.stalled {
            let from = self.scan.max(start);
            let to = buf
                .len()
                .min(start.saturating_add(PROTO_INLINE_BYTES_MAX + 1));
            if let Some(window) = buf.get(from..to) {
                let found = find_terminator(window, term);
                #[cfg(test)]
                {
                    self.examined += found.map_or(window.len(), |i| i + 1);
                }
                match found {
                    Some(i) if window.get(i) == Some(&term) => self.line_end = Some(from + i),
                    Some(_) => self.stalled = true,
                    None => self.scan = to,
                }
            }
        }
        match self.line_end {
            Some(end) if end.saturating_add(after) < buf.len() => Line::Found(end),
            Some(_) => Line::Incomplete,
            None if buf.len().saturating_sub(start) > PROTO_INLINE_BYTES_MAX => Line::TooBig,
            None => Line::Incomplete,
        }
    }

    /// Moves past a header line ending at the '\r' at `end`.
    fn end_line(&mut self, end: usize) {
        self.pos = end + 2;
        self.scan = self.pos;
        self.line_end = None;
        self.stalled = false;
    }

    /// The `*N` line.
    fn count(&mut self, buf: &[u8]) -> Parsed {
        let end = match self.line(buf, 0, b'\r', 1) {
            Line::Found(end) => end,
            Line::Incomplete => return Parsed::Incomplete,
            Line::TooBig => return Parsed::Error(ProtoError::TooBigMbulkCount),
        };
        let count = match buf.get(1..end).and_then(string2ll) {
            Some(count) if count <= MBULK_COUNT_MAX => count,
            _ => return Parsed::Error(ProtoError::InvalidMultibulkLength),
        };
        if count > UNAUTH_ARGC_MAX && !self.limits.authenticated {
            return Parsed::Error(ProtoError::UnauthenticatedMultibulkLength);
        }
        self.end_line(end);
        if count <= 0 {
            return Parsed::Skip { consumed: self.pos };
        }
        self.argc = count;
        let prealloc = usize::try_from(count)
            .unwrap_or(ARGV_PREALLOC_MAX)
            .min(ARGV_PREALLOC_MAX);
        self.spans.reserve(prealloc);
        self.state = State::Args;
        self.args_step(buf)
    }

    /// `$len` lines and bulk payloads until the command is complete or input runs out.
    fn args_step(&mut self, buf: &[u8]) -> Parsed {
        while self.argc > 0 {
            let len = match self.bulk_len {
                Some(len) => len,
                None => match self.bulk_header(buf) {
                    Ok(Some(len)) => len,
                    Ok(None) => return Parsed::Incomplete,
                    Err(error) => return Parsed::Error(error),
                },
            };
            let start = self.pos;
            let end = start.saturating_add(len);
            // The two bytes after the payload are skipped unchecked, as Redis does.
            if buf.len() < end.saturating_add(2) {
                return Parsed::Incomplete;
            }
            self.spans.push((start, end));
            self.pos = end + 2;
            self.bulk_len = None;
            self.argc -= 1;
        }
        Parsed::Command { consumed: self.pos }
    }

    /// Parses a `$len` line at `self.pos`; `Ok(None)` when it is not complete yet.
    fn bulk_header(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtoError> {
        let start = self.pos;
        let end = match self.line(buf, start, b'\r', 1) {
            Line::Found(end) => end,
            Line::Incomplete => return Ok(None),
            Line::TooBig => return Err(ProtoError::TooBigBulkCount),
        };
        match buf.get(start) {
            Some(b'$') => {}
            Some(&other) => return Err(ProtoError::ExpectedDollar(other)),
            None => return Ok(None),
        }
        let len = match buf.get(start + 1..end).and_then(string2ll) {
            Some(len) if (0..=self.limits.bulk_bytes_max).contains(&len) => len,
            _ => return Err(ProtoError::InvalidBulkLength),
        };
        if len > UNAUTH_BULK_BYTES_MAX && !self.limits.authenticated {
            return Err(ProtoError::UnauthenticatedBulkLength);
        }
        let len = usize::try_from(len).map_err(|_| ProtoError::InvalidBulkLength)?;
        self.end_line(end);
        self.bulk_len = Some(len);
        Ok(Some(len))
    }

    /// An inline command: one line, split like `sdssplitargs`.
    fn inline(&mut self, buf: &[u8]) -> Parsed {
        let newline = match self.line(buf, 0, b'\n', 0) {
            Line::Found(newline) => newline,
            Line::Incomplete => return Parsed::Incomplete,
            Line::TooBig => return Parsed::Error(ProtoError::TooBigInline),
        };
        let mut end = newline;
        if newline > 0 && buf.get(newline - 1) == Some(&b'\r') {
            end -= 1;
        }
        let line = buf.get(..end).unwrap_or_default();
        self.in_scratch = true;
        if let Err(error) = split_args(line, &mut self.scratch, &mut self.spans) {
            return Parsed::Error(error);
        }
        self.pos = newline + 1;
        if self.spans.is_empty() {
            Parsed::Skip { consumed: self.pos }
        } else {
            Parsed::Command { consumed: self.pos }
        }
    }
}

/// First `term` or NUL in `window`. Header lines are short: a plain loop over the first
/// bytes beats `memchr2`'s setup, which takes over for long windows.
#[inline]
fn find_terminator(window: &[u8], term: u8) -> Option<usize> {
    const SHORT_BYTES: usize = 24;
    let (head, tail) = window.split_at(window.len().min(SHORT_BYTES));
    match head.iter().position(|&b| b == term || b == 0) {
        Some(i) => Some(i),
        None => memchr2(term, 0, tail).map(|i| i + head.len()),
    }
}

/// Redis `string2ll`: optional '-', no '+', no leading zeros except "0" itself, no spaces,
/// fewer than 21 bytes, within `i64`.
#[inline]
fn string2ll(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut value: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(value)
    } else {
        i64::try_from(value).ok()
    }
}

/// C `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Arguments `peek_command` walks at most: a longer command is not looked at.
pub const PEEK_ARGS_MAX: usize = 16;
/// Digits of a `*N` or `$N` header `peek_command` reads at most.
const PEEK_DIGITS_MAX: usize = 10;

/// The first two arguments of the complete multibulk command at the start of `buf`, and its
/// length in bytes, read without a `Parser`'s state: a look-ahead for hints only. None for
/// anything the look-ahead does not need (an inline command, an incomplete or malformed one,
/// one of fewer than two or more than `PEEK_ARGS_MAX` arguments); the parser proper judges
/// those. Reads only the header lines: O(arguments), whatever the bulks' sizes.
pub fn peek_command(buf: &[u8]) -> Option<(&[u8], &[u8], usize)> {
    if buf.first() != Some(&b'*') {
        return None;
    }
    let (argc, mut pos) = peek_len(buf, 1)?;
    if !(2..=PEEK_ARGS_MAX).contains(&argc) {
        return None;
    }
    let (mut name, mut key): (&[u8], &[u8]) = (&[], &[]);
    for i in 0..argc {
        if buf.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, start) = peek_len(buf, pos + 1)?;
        let end = start.checked_add(len)?;
        if buf.get(end..end.checked_add(2)?) != Some(b"\r\n".as_slice()) {
            return None;
        }
        let arg = buf.get(start..end)?;
        match i {
            0 => name = arg,
            1 => key = arg,
            _ => {}
        }
        pos = end + 2;
    }
    Some((name, key, pos))
}

/// The decimal number at `buf[at..]` up to its `\r\n`, and where the bytes after it start.
fn peek_len(buf: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut n = 0usize;
    for (i, &b) in buf.get(at..)?.iter().enumerate().take(PEEK_DIGITS_MAX + 1) {
        match b {
            b'0'..=b'9' if i < PEEK_DIGITS_MAX => n = n * 10 + usize::from(b - b'0'),
            b'\r' if i > 0 => {
                return (buf.get(at + i + 1) == Some(&b'\n')).then_some((n, at + i + 2));
            }
            _ => return None,
        }
    }
    None
}

/// Redis `sdssplitargs` over a C string (a NUL byte ends the line, as the C string's
/// terminator does): the arguments, or `None` for unbalanced quotes. Script shebang lines and
/// ACL selectors use it.
pub fn sds_split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let line = match memchr::memchr(0, line) {
        Some(i) => line.get(..i).unwrap_or_default(),
        None => line,
    };
    let mut out = Vec::new();
    let mut spans = Vec::new();
    split_args(line, &mut out, &mut spans).ok()?;
    Some(
        spans
            .iter()
            .map(|&(a, b)| out.get(a..b).unwrap_or_default().to_vec())
            .collect(),
    )
}

/// Redis `sdssplitargs` over one line that holds no NUL (the end of `line` plays the role of
/// the C string's terminator). Arguments are appended to `out`, their spans to `spans`.
///
/// As in Redis, blanks between arguments are any `isspace` byte, but inside an unquoted
/// argument only ' ', '\t', '\r' and '\n' end it ("a\vb" is one argument).
fn split_args(
    line: &[u8],
    out: &mut Vec<u8>,
    spans: &mut Vec<(usize, usize)>,
) -> Result<(), ProtoError> {
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut p = 0;
    loop {
        while at(p) != 0 && is_c_space(at(p)) {
            p += 1;
        }
        if at(p) == 0 {
            return Ok(());
        }
        let start = out.len();
        let (mut in_double, mut in_single, mut done) = (false, false, false);
        while !done {
            let c = at(p);
            if in_double {
                let hex = (c == b'\\' && at(p + 1) == b'x')
                    .then(|| Some(hex_value(at(p + 2))? * 16 + hex_value(at(p + 3))?))
                    .flatten();
                if let Some(byte) = hex {
                    out.push(byte);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    out.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    // A closing quote must be followed by a space or nothing at all.
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return Err(ProtoError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtoError::UnbalancedQuotes);
                } else {
                    out.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    out.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return Err(ProtoError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(ProtoError::UnbalancedQuotes);
                } else {
                    out.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    other => out.push(other),
                }
            }
            if at(p) != 0 {
                p += 1;
            }
        }
        spans.push((start, out.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn peek_command_reads_the_name_the_key_and_the_length() {
        let buf = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET";
        let (name, key, len) = peek_command(buf).unwrap();
        assert_eq!((name, key, len), (&b"SET"[..], &b"key"[..], 33));
        // The next command is incomplete: the parser proper waits for it.
        assert_eq!(peek_command(&buf[len..]), None);
        assert_eq!(
            peek_command(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
            Some((&b"GET"[..], &b"k"[..], 20))
        );
        // Empty arguments are arguments.
        assert_eq!(
            peek_command(b"*2\r\n$0\r\n\r\n$0\r\n\r\n"),
            Some((&b""[..], &b""[..], 16))
        );
    }

    #[test]
    fn peek_command_leaves_everything_else_to_the_parser() {
        for buf in [
            &b""[..],
            b"GET key\r\n",
            b"*1\r\n$4\r\nPING\r\n",
            b"*2\r\n$3\r\nGET\r\n$1\r\nkk\r\n",
            b"*2\r\n$3\r\nGET\r\n$-1\r\n",
            b"*2\r\n$3\r\nGET\r\n:1\r\n",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk",
            b"*-1\r\n",
            b"*2\n$3\r\nGET\r\n$1\r\nk\r\n",
            b"*\r\n",
            b"*99999999999999999999\r\n",
            b"*2\r\n$99999999999\r\nGET\r\n",
            b"*2\r\n$18446744073709551615\r\n",
        ] {
            assert_eq!(
                peek_command(buf),
                None,
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
        // At the limit of arguments and one past it.
        let command = |argc: usize| {
            let mut b = format!("*{argc}\r\n").into_bytes();
            for _ in 0..argc {
                b.extend_from_slice(b"$1\r\nx\r\n");
            }
            b
        };
        assert!(peek_command(&command(PEEK_ARGS_MAX)).is_some());
        assert_eq!(peek_command(&command(PEEK_ARGS_MAX + 1)), None);
        // Every prefix of a command is incomplete, never a panic.
        let full = command(3);
        for n in 0..full.len() {
            assert_eq!(peek_command(&full[..n]), None);
        }
    }
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Ev {
        Cmd(Vec<Vec<u8>>),
        Skip(usize),
        Err(ProtoError),
    }

    fn cmd(args: &[&[u8]]) -> Ev {
        Ev::Cmd(args.iter().map(|a| a.to_vec()).collect())
    }

    /// The caller's loop: append each chunk, parse until Incomplete, drop consumed prefixes.
    /// Returns the events and the parser (for inspection).
    fn feed_with(input: &[u8], cuts: &[usize], limits: ParseLimits) -> (Vec<Ev>, Parser) {
        let mut parser = Parser::new(limits);
        let mut buf = Vec::new();
        let mut events = Vec::new();
        let mut at = 0;
        let mut bounds: Vec<usize> = cuts.iter().copied().filter(|&c| c < input.len()).collect();
        bounds.push(input.len());
        for bound in bounds {
            if bound < at {
                continue;
            }
            buf.extend_from_slice(&input[at..bound]);
            at = bound;
            loop {
                match parser.next(&buf) {
                    Parsed::Command { consumed } => {
                        {
                            let mut args = SmallVec::new();
                            parser.args(&buf, &mut args);
                            events.push(Ev::Cmd(args.iter().map(|a| a.to_vec()).collect()));
                        }
                        buf.drain(..consumed);
                    }
                    Parsed::Skip { consumed } => {
                        events.push(Ev::Skip(consumed));
                        buf.drain(..consumed);
                    }
                    Parsed::Incomplete => break,
                    Parsed::Error(error) => {
                        events.push(Ev::Err(error));
                        return (events, parser);
                    }
                }
            }
        }
        (events, parser)
    }

    fn whole(input: &[u8], limits: ParseLimits) -> Vec<Ev> {
        feed_with(input, &[], limits).0
    }

    fn bytewise(input: &[u8], limits: ParseLimits) -> Vec<Ev> {
        let cuts: Vec<usize> = (1..input.len()).collect();
        feed_with(input, &cuts, limits).0
    }

    /// Whole, byte by byte and in a few pseudo-random splits: all give `expected`.
    fn check_with(input: &[u8], expected: &[Ev], limits: ParseLimits) {
        assert_eq!(
            whole(input, limits),
            expected,
            "whole: {:?}",
            String::from_utf8_lossy(input)
        );
        if input.len() <= 4096 {
            assert_eq!(bytewise(input, limits), expected, "bytewise");
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ input.len() as u64;
        for _ in 0..4 {
            let cuts = random_cuts(&mut seed, input.len(), 64);
            assert_eq!(feed_with(input, &cuts, limits).0, expected, "cuts {cuts:?}");
        }
    }

    fn check(input: &[u8], expected: &[Ev]) {
        check_with(input, expected, ParseLimits::default());
    }

    fn xorshift(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    fn random_cuts(seed: &mut u64, len: usize, max_chunk: usize) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0;
        while at < len {
            at += 1 + (xorshift(seed) as usize % max_chunk);
            cuts.push(at);
        }
        cuts
    }

    fn unauth() -> ParseLimits {
        ParseLimits {
            authenticated: false,
            ..ParseLimits::default()
        }
    }

    fn mbulk(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    #[test]
    fn every_error_has_redis_text() {
        let table = [
            (
                ProtoError::InvalidMultibulkLength,
                "ERR Protocol error: invalid multibulk length",
            ),
            (
                ProtoError::InvalidBulkLength,
                "ERR Protocol error: invalid bulk length",
            ),
            (
                ProtoError::ExpectedDollar(b'f'),
                "ERR Protocol error: expected '$', got 'f'",
            ),
            (
                ProtoError::ExpectedDollar(b'\r'),
                "ERR Protocol error: expected '$', got ' '",
            ),
            (
                ProtoError::UnbalancedQuotes,
                "ERR Protocol error: unbalanced quotes in request",
            ),
            (
                ProtoError::TooBigInline,
                "ERR Protocol error: too big inline request",
            ),
            (
                ProtoError::TooBigMbulkCount,
                "ERR Protocol error: too big mbulk count string",
            ),
            (
                ProtoError::TooBigBulkCount,
                "ERR Protocol error: too big bulk count string",
            ),
            (
                ProtoError::UnauthenticatedMultibulkLength,
                "ERR Protocol error: unauthenticated multibulk length",
            ),
            (
                ProtoError::UnauthenticatedBulkLength,
                "ERR Protocol error: unauthenticated bulk length",
            ),
        ];
        for (error, text) in table {
            assert_eq!(error.message(), text);
            assert_eq!(error.message_bytes(), text.as_bytes());
            assert_eq!(error.to_string(), text);
        }
        assert_eq!(
            ProtoError::ExpectedDollar(0xff).message_bytes().get(39),
            Some(&0xff)
        );
    }

    #[test]
    fn table() {
        use ProtoError::*;
        let ping = cmd(&[b"PING"]);
        let cases: Vec<(&[u8], Vec<Ev>)> = vec![
            // Multibulk basics and pipelining.
            (b"*1\r\n$4\r\nPING\r\n", vec![ping.clone()]),
            (
                b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n",
                vec![ping.clone(), cmd(&[b"GET", b"k"]), cmd(&[b"SET", b"k", b""])],
            ),
            (b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI", vec![ping.clone()]),
            // The two bytes after a bulk and after '\r' are not checked.
            (b"*1\r\n$4\r\nPINGxx", vec![ping.clone()]),
            (b"*1\rX$4\r\nPING\r\n", vec![ping.clone()]),
            // Binary bulks.
            (
                b"*2\r\n$3\r\nSET\r\n$6\r\na\0\r\nb\n\r\n",
                vec![cmd(&[b"SET", b"a\0\r\nb\n"])],
            ),
            // Ignored requests; the connection stays usable.
            (b"\r\n*1\r\n$4\r\nPING\r\n", vec![Ev::Skip(2), ping.clone()]),
            (b"\n", vec![Ev::Skip(1)]),
            (b"   \t\r\n", vec![Ev::Skip(6)]),
            (b"*0\r\n*1\r\n$4\r\nPING\r\n", vec![Ev::Skip(4), ping.clone()]),
            (b"*-10\r\nPING\r\n", vec![Ev::Skip(6), ping.clone()]),
            // Multibulk count.
            (b"*3000000000\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*2147483648\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*2147483647\r\n", vec![]),
            (b"*20000000\r\n", vec![]),
            (b"*abc\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*+1\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*01\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"* 1\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*1 \r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*-0\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*-\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*-9223372036854775808\r\n", vec![Ev::Skip(23)]),
            (b"*-9223372036854775809\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            (b"*1\n\r\n", vec![Ev::Err(InvalidMultibulkLength)]),
            // Waits for the byte after '\r' before judging the line.
            (b"*abc\r", vec![]),
            // Bulk length.
            (b"*1\r\n$-10\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$2000000000\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$blabla\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$99999999999999999999\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$9223372036854775807\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$01\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$+1\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$\r\n", vec![Ev::Err(InvalidBulkLength)]),
            (b"*1\r\n$0\r\n\r\n", vec![cmd(&[b""])]),
            // Expected '$'.
            (
                b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
                vec![Ev::Err(ExpectedDollar(b'f'))],
            ),
            (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz", vec![]),
            (b"*1\r\n\r\n", vec![Ev::Err(ExpectedDollar(b'\r'))]),
            (b"*1\r\n+OK\r\n", vec![Ev::Err(ExpectedDollar(b'+'))]),
            // strchr stops at NUL: such a line never ends (until the size limit).
            (b"*1\0\r\n", vec![]),
            (b"*1\r\n$1\0\r\n", vec![]),
            (b"PING\0\n", vec![]),
            // Inline.
            (b"PING\r\n", vec![ping.clone()]),
            (b"PING\n", vec![ping.clone()]),
            (b"PING", vec![]),
            (b"PING\r\r\n", vec![ping.clone()]),
            (b"  SET   k\tv  \r\n", vec![cmd(&[b"SET", b"k", b"v"])]),
            (b"SET \"a b\" 'c d'\r\n", vec![cmd(&[b"SET", b"a b", b"c d"])]),
            (
                b"ECHO \"\\x41\\x4a\\n\\r\\t\\b\\a\\\\\\\"\\q\\xZZ\"\r\n",
                vec![cmd(&[b"ECHO", b"AJ\n\r\t\x08\x07\\\"qxZZ"])],
            ),
            (b"ECHO 'it\\'s \\n \"x\"'\n", vec![cmd(&[b"ECHO", b"it's \\n \"x\""])]),
            (b"ECHO \"\" ''\n", vec![cmd(&[b"ECHO", b"", b""])]),
            (b"ECHO a\"b c\"d'e'\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"ECHO a\"b c\" x\n", vec![cmd(&[b"ECHO", b"ab c", b"x"])]),
            (b"ECHO \"x\"\x0by\n", vec![cmd(&[b"ECHO", b"x", b"y"])]),
            (b"ECHO a\x0bb\x0c\n", vec![cmd(&[b"ECHO", b"a\x0bb\x0c"])]),
            (b"\x0b\x0cPING\n", vec![ping.clone()]),
            (b"ECHO \"\\x00\"\n", vec![cmd(&[b"ECHO", b"\0"])]),
            (b"SET a \"foo\r\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"SET a \"foo\"bar\r\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"SET a 'foo\r\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"SET a 'foo'bar\r\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"SET a \"foo\\\"\n", vec![Ev::Err(UnbalancedQuotes)]),
            (b"SET a \"foo\\\n", vec![Ev::Err(UnbalancedQuotes)]),
            // Mixed inline and multibulk.
            (
                b"PING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nECHO \"x y\"\n",
                vec![ping.clone(), cmd(&[b"ECHO", b"hi"]), cmd(&[b"ECHO", b"x y"])],
            ),
            // Commands before an error are returned first.
            (b"PING\r\n*1\r\n+oops\r\n", vec![ping.clone(), Ev::Err(ExpectedDollar(b'+'))]),
        ];
        for (input, expected) in cases {
            check(input, &expected);
        }
    }

    #[test]
    fn inline_limit_at_and_past() {
        let mut at_limit = vec![b'a'; PROTO_INLINE_BYTES_MAX];
        check(&at_limit, &[]);
        at_limit.push(b'a');
        check(&at_limit, &[Ev::Err(ProtoError::TooBigInline)]);

        // A line whose '\n' is byte PROTO_INLINE_BYTES_MAX is accepted, one later is not.
        let mut line = vec![b'a'; PROTO_INLINE_BYTES_MAX];
        line.push(b'\n');
        check(&line, &[cmd(&[&[b'a'; PROTO_INLINE_BYTES_MAX]])]);
        let mut line = vec![b'a'; PROTO_INLINE_BYTES_MAX + 1];
        line.push(b'\n');
        check(&line, &[Ev::Err(ProtoError::TooBigInline)]);

        // A NUL stalls the line until the limit.
        let mut nul = b"PING\0".to_vec();
        nul.resize(PROTO_INLINE_BYTES_MAX, b'\n');
        check(&nul, &[]);
        nul.push(b'\n');
        check(&nul, &[Ev::Err(ProtoError::TooBigInline)]);
    }

    #[test]
    fn header_line_limits_at_and_past() {
        let mut count = b"*".to_vec();
        count.resize(PROTO_INLINE_BYTES_MAX, b'1');
        check(&count, &[]);
        count.push(b'1');
        check(&count, &[Ev::Err(ProtoError::TooBigMbulkCount)]);

        let mut bulk = b"*1\r\n$".to_vec();
        bulk.resize(4 + PROTO_INLINE_BYTES_MAX, b'1');
        check(&bulk, &[]);
        bulk.push(b'1');
        check(&bulk, &[Ev::Err(ProtoError::TooBigBulkCount)]);

        let mut nul = b"*1\0\r\n".to_vec();
        nul.resize(PROTO_INLINE_BYTES_MAX + 1, b'\n');
        check(&nul, &[Ev::Err(ProtoError::TooBigMbulkCount)]);
    }

    #[test]
    fn bulk_len_max_at_and_past() {
        let small = ParseLimits {
            bulk_bytes_max: 8,
            authenticated: true,
        };
        check_with(b"*1\r\n$8\r\n12345678\r\n", &[cmd(&[b"12345678"])], small);
        check_with(
            b"*1\r\n$9\r\n",
            &[Ev::Err(ProtoError::InvalidBulkLength)],
            small,
        );
        check(b"*1\r\n$536870912\r\n", &[]);
        check(
            b"*1\r\n$536870913\r\n",
            &[Ev::Err(ProtoError::InvalidBulkLength)],
        );
    }

    #[test]
    fn unauthenticated_limits_at_and_past() {
        let ten: Vec<&[u8]> = vec![b"x"; 10];
        check_with(&mbulk(&ten), &[cmd(&ten)], unauth());
        check_with(
            b"*11\r\n",
            &[Ev::Err(ProtoError::UnauthenticatedMultibulkLength)],
            unauth(),
        );
        // The absolute maximum is checked first.
        check_with(
            b"*3000000000\r\n",
            &[Ev::Err(ProtoError::InvalidMultibulkLength)],
            unauth(),
        );
        check_with(
            b"*1\r\n$600000000\r\n",
            &[Ev::Err(ProtoError::InvalidBulkLength)],
            unauth(),
        );

        let value = vec![b'v'; 16384];
        check_with(&mbulk(&[&value]), &[cmd(&[&value])], unauth());
        check_with(
            b"*1\r\n$16385\r\n",
            &[Ev::Err(ProtoError::UnauthenticatedBulkLength)],
            unauth(),
        );
        check(b"*11\r\n", &[]);
        check(b"*1\r\n$16385\r\n", &[]);
    }

    #[test]
    fn limits_change_between_commands() {
        let mut input = mbulk(&[b"AUTH", b"pw"]);
        let big = vec![b'x'; 20000];
        input.extend(mbulk(&[b"SET", b"k", &big]));
        let mut parser = Parser::new(unauth());
        let Parsed::Command { consumed } = parser.next(&input) else {
            panic!("no command")
        };
        parser.set_limits(ParseLimits::default());
        let rest = &input[consumed..];
        assert_eq!(
            parser.next(rest),
            Parsed::Command {
                consumed: rest.len()
            }
        );
        let mut args = SmallVec::new();
        parser.args(rest, &mut args);
        assert_eq!(args.get(2).map(|a| a.len()), Some(20000));
    }

    #[test]
    fn huge_declared_count_does_not_preallocate() {
        let (events, parser) =
            feed_with(b"*20000000\r\n$3\r\nfoo\r\n", &[], ParseLimits::default());
        assert!(events.is_empty());
        assert!(parser.spans.capacity() <= ARGV_PREALLOC_MAX);
        assert_eq!(parser.spans.len(), 1);
    }

    #[test]
    fn error_is_sticky() {
        let mut parser = Parser::new(ParseLimits::default());
        let error = Parsed::Error(ProtoError::InvalidMultibulkLength);
        assert_eq!(parser.next(b"*x\r\n"), error);
        assert_eq!(parser.next(b"*x\r\nPING\r\n"), error);
    }

    #[test]
    fn big_value_in_small_reads_is_linear() {
        let value = vec![b'v'; 1 << 20];
        let input = mbulk(&[b"SET", b"key", &value]);
        let mut parser = Parser::new(ParseLimits::default());
        let mut buf = Vec::new();
        let mut calls = 0;
        let mut hinted = None;
        for chunk in input.chunks(16 * 1024) {
            buf.extend_from_slice(chunk);
            calls += 1;
            match parser.next(&buf) {
                Parsed::Incomplete => hinted = hinted.or(parser.bytes_hint()),
                Parsed::Command { consumed } => assert_eq!(consumed, input.len()),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(calls, input.len().div_ceil(16 * 1024));
        assert_eq!(hinted, Some(input.len()));
        // Only the header lines were ever searched.
        assert!(parser.examined < 64, "examined {} bytes", parser.examined);
        let mut args = SmallVec::new();
        parser.args(&buf, &mut args);
        assert_eq!(args.get(2).map(|a| a.len()), Some(1 << 20));
    }

    #[test]
    fn many_args_in_small_reads_examine_each_byte_once() {
        let args: Vec<Vec<u8>> = (0..20_000).map(|i| format!("k{i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let input = mbulk(&refs);
        let cuts: Vec<usize> = (1..=input.len() / 1000).map(|i| i * 1000).collect();
        let (events, parser) = feed_with(&input, &cuts, ParseLimits::default());
        assert_eq!(events, vec![cmd(&refs)]);
        assert!(
            parser.examined <= input.len(),
            "examined {} of {}",
            parser.examined,
            input.len()
        );
    }

    #[test]
    fn split_invariance_on_corpus() {
        let mut corpus: Vec<Vec<u8>> = vec![
            b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nPING\r\n\r\n*0\r\nECHO 'a b'\r\n*-1\r\n".to_vec(),
            b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n".to_vec(),
            b"ECHO \"\\x41\" 'q\\'' x\r\n*1\r\n$4\r\nPING\r\nSET a \"b\r\n".to_vec(),
            b"*1\r\n$4\r\nPINGxx*1\rX$1\r\n\0\r\n".to_vec(),
        ];
        let mut seed = 42u64;
        for _ in 0..50 {
            let len = (xorshift(&mut seed) % 300) as usize;
            let alphabet = b"*$\r\n0123-abc \"'\\x";
            corpus.push(
                (0..len)
                    .map(|_| alphabet[(xorshift(&mut seed) % alphabet.len() as u64) as usize])
                    .collect(),
            );
        }
        for input in &corpus {
            for limits in [ParseLimits::default(), unauth()] {
                let expected = whole(input, limits);
                assert_eq!(bytewise(input, limits), expected);
                for max in [2, 7, 33] {
                    let cuts = random_cuts(&mut seed, input.len(), max);
                    assert_eq!(feed_with(input, &cuts, limits).0, expected);
                }
            }
        }
    }

    fn arb_command() -> impl Strategy<Value = Vec<u8>> {
        let arg = proptest::collection::vec(any::<u8>(), 0..40);
        prop_oneof![
            4 => proptest::collection::vec(arg, 1..6).prop_map(|args| {
                let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
                mbulk(&refs)
            }),
            2 => "[a-zA-Z0-9 \"'\\\\]{0,30}\r?\n".prop_map(String::into_bytes),
            1 => proptest::collection::vec(any::<u8>(), 0..20),
            1 => proptest::sample::select(vec![&b"*0\r\n"[..], b"\r\n", b"*-3\r\n", b"*11\r\n", b"*1\r\n$20000\r\n"])
                .prop_map(<[u8]>::to_vec),
        ]
    }

    proptest! {
        #[test]
        fn split_invariance(
            commands in proptest::collection::vec(arb_command(), 1..12),
            cuts in proptest::collection::vec(0usize..2000, 0..30),
            authenticated in any::<bool>(),
        ) {
            let input = commands.concat();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let limits = ParseLimits { authenticated, ..ParseLimits::default() };
            let expected = whole(&input, limits);
            prop_assert_eq!(feed_with(&input, &cuts, limits).0, expected.clone());
            prop_assert_eq!(bytewise(&input, limits), expected);
        }
    }
}
