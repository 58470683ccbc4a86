//! Conversions between Redis replies and Lua values, with Redis 7.0's rules
//! (script_lua.c: `redisProtocolToLuaType_*` and `luaReplyToRedisReply`).
//!
//! A command run by `redis.call` replies into a buffer like any client's; the C side of
//! `redis.call` (`meridian_lualib::call_functions`) turns those bytes into Lua values
//! (integers become numbers, nil bulk/array `false`, status `{ok=...}`, errors `{err=...}`,
//! RESP3 maps/sets/doubles/big numbers/verbatim strings their tables). `lua_to_reply` writes
//! a script's return value to the caller.

use mlua::{Lua, Table, Value};

use crate::resp::reply::Reply;

/// Nesting of a script's return value Redis answers before it writes "reached lua stack limit"
/// in place of the deeper element: Lua's C stack limit (LUAI_MAXCSTACK, 8000 slots) less what
/// the call holds, one slot per level.
pub const REPLY_DEPTH_MAX: usize = 7990;

/// An error table as `luaPushErrorBuff` builds it from "-CODE msg" text: `{err="CODE msg"}`.
pub fn error_table(lua: &Lua, text: &[u8]) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(error_text(text))?)?;
    Ok(t)
}

/// Redis's error-table text for `text` ("-CODE msg" or a plain message): the code first
/// ("ERR" when none), trailing CR/LF trimmed.
pub fn error_text(text: &[u8]) -> Vec<u8> {
    let (code, msg): (&[u8], &[u8]) = match text.strip_prefix(b"-") {
        Some(rest) => match memchr::memchr(b' ', rest) {
            Some(i) => (
                rest.get(..i).unwrap_or_default(),
                rest.get(i + 1..).unwrap_or_default(),
            ),
            None => (b"ERR", rest),
        },
        None => (b"ERR", text),
    };
    let mut end = msg.len();
    let mut start = 0;
    while start < end && matches!(msg.get(start), Some(b'\r' | b'\n')) {
        start += 1;
    }
    while end > start && matches!(msg.get(end - 1), Some(b'\r' | b'\n')) {
        end -= 1;
    }
    let mut out = Vec::with_capacity(code.len() + 1 + end - start);
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(msg.get(start..end).unwrap_or_default());
    out
}

/// C's `(long long)` of a double on x86-64: out of range (and NaN) give i64::MIN.
pub fn number_to_i64(d: f64) -> i64 {
    // 2^63 as a double: every double at or above it (or below -2^63) is out of range.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if d.is_nan() || !(-LIMIT..LIMIT).contains(&d) {
        i64::MIN
    } else {
        d as i64
    }
}

/// Bytes up to the first NUL: what Redis keeps of a string it copies with `sdsnew`.
fn c_string(b: &[u8]) -> &[u8] {
    match memchr::memchr(0, b) {
        Some(i) => b.get(..i).unwrap_or_default(),
        None => b,
    }
}

fn crlf_to_spaces(b: &[u8]) -> Vec<u8> {
    b.iter()
        .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
        .collect()
}

/// Writes an error reply from an error table's `err` text, as `addReplyErrorFormatEx("-%s")`.
pub fn write_error(out: &mut Reply, msg: &[u8]) {
    out.raw(b"-");
    out.raw(&crlf_to_spaces(msg));
    out.raw(b"\r\n");
}

/// The error code of an error text ("ERR", "WRONGTYPE"...), for errorstats.
pub fn error_code(msg: &[u8]) -> String {
    let end = memchr::memchr(b' ', msg).unwrap_or(msg.len());
    String::from_utf8_lossy(msg.get(..end).unwrap_or_default()).into_owned()
}

/// Containers being written (`Pending::Items` on the stack) past which a table met is
/// answered as too deep: each holds its table in one of the reference slots mlua keeps on
/// a Lua thread's stack (`LUAI_MAXCSTACK`, 8,000, of which the engine and the run hold a few:
/// cached scripts and functions live in the registry instead); running out panics. A chain
/// of one-element tables holds none (a container whose last element was taken is dropped),
/// so Redis's own limit, `REPLY_DEPTH_MAX`, decides there; only a table nested this deep
/// with elements left at every level meets this one (Redis's limit there is its C stack's,
/// about 7,990).
pub const REPLY_CONTAINERS_HELD_MAX: usize = 7_900;

/// One value still to be written: a Lua value at its depth, or the elements `next..=len`
/// of a container at `depth` (an array, or a map's or set's entries laid out in a table of
/// their own), taken one at a time. Taking a container's elements all at once held each in
/// a reference slot: a script returning 8,000 strings panicked the shard.
enum Pending {
    Value(Value, usize),
    Items {
        t: Table,
        next: i64,
        len: i64,
        depth: usize,
    },
}

/// Writes a script's return value to the caller (`luaReplyToRedisReply`). `script_resp3` is
/// the protocol the script chose with `redis.setresp` (it decides how booleans convert).
/// Returns the error codes of error replies written (for errorstats), unless marked ignored.
/// Holds at most one Lua value per container being written, whatever their width.
///
/// Every read is raw (no metamethod runs): the script's run has ended, and code it left in a
/// metatable would run unbounded on the shard (Redis reads the error table's
/// `ignore_error_stats_update` through `__index`; an `__index` that loops kept Redis busy
/// there, and Meridian answered nothing, not even SCRIPT KILL).
pub fn lua_to_reply(lua: &Lua, value: Value, out: &mut Reply, script_resp3: bool) -> Vec<String> {
    let mut errors = Vec::new();
    let mut stack = vec![Pending::Value(value, 0)];
    while let Some(p) = stack.pop() {
        let (v, depth) = match p {
            Pending::Value(v, depth) => (v, depth),
            Pending::Items {
                t,
                next,
                len,
                depth,
            } => {
                let v = t.raw_get::<Value>(next).unwrap_or(Value::Nil);
                if next < len {
                    stack.push(Pending::Items {
                        t,
                        next: next + 1,
                        len,
                        depth,
                    });
                }
                (v, depth + 1)
            }
        };
        if depth >= REPLY_DEPTH_MAX
            || (matches!(v, Value::Table(_)) && stack.len() >= REPLY_CONTAINERS_HELD_MAX)
        {
            out.raw(b"-ERR reached lua stack limit\r\n");
            continue;
        }
        match v {
            Value::String(s) => out.bulk(&s.as_bytes()),
            Value::Boolean(b) => {
                if script_resp3 {
                    out.boolean(b);
                } else if b {
                    out.int(1);
                } else {
                    out.null();
                }
            }
            Value::Integer(i) => out.int(i),
            Value::Number(d) => out.int(number_to_i64(d)),
            Value::Table(t) => table_to_reply(lua, t, depth, out, &mut stack, &mut errors),
            _ => out.null(),
        }
    }
    errors
}

/// The entries of a RESP3 map (keys and values in turn) or set (keys) in a new array
/// table, in `next` order, and how many entries there were.
fn entries(lua: &Lua, m: &Table, values: bool) -> mlua::Result<(Table, i64)> {
    let flat = lua.create_table()?;
    let mut n = 0i64;
    let mut at = 0i64;
    for pair in m.pairs::<Value, Value>() {
        let (k, v) = pair?;
        at += 1;
        flat.raw_set(at, k)?;
        if values {
            at += 1;
            flat.raw_set(at, v)?;
        }
        n += 1;
    }
    Ok((flat, n))
}

fn table_to_reply(
    lua: &Lua,
    t: Table,
    depth: usize,
    out: &mut Reply,
    stack: &mut Vec<Pending>,
    errors: &mut Vec<String>,
) {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        let msg = c_string(&e.as_bytes()).to_vec();
        write_error(out, &msg);
        let ignored = matches!(
            t.raw_get::<Value>("ignore_error_stats_update"),
            Ok(Value::Boolean(true))
        );
        if !ignored {
            errors.push(error_code(&msg));
        }
        return;
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        out.simple_bytes(&crlf_to_spaces(c_string(&s.as_bytes())));
        return;
    }
    if let Ok(d) = t.raw_get::<Value>("double") {
        if let Some(d) = match d {
            Value::Number(d) => Some(d),
            Value::Integer(i) => Some(i as f64),
            _ => None,
        } {
            if d.is_nan() {
                // printf's "%.17g" keeps NaN's sign (0/0 in Lua is -nan on x86-64).
                let text: &[u8] = if d.is_sign_negative() {
                    b"-nan"
                } else {
                    b"nan"
                };
                if out.is_resp3() {
                    out.raw(b",");
                    out.raw(text);
                    out.raw(b"\r\n");
                } else {
                    out.bulk(text);
                }
            } else {
                out.double(d);
            }
            return;
        }
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        let n = crlf_to_spaces(&s.as_bytes());
        if out.is_resp3() {
            out.raw(b"(");
            out.raw(&n);
            out.raw(b"\r\n");
        } else {
            out.bulk(&n);
        }
        return;
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        if let (Ok(Value::String(f)), Ok(Value::String(s))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
        {
            let f = c_string(&f.as_bytes()).to_vec();
            let mut format = [b' '; 3];
            for (d, s) in format.iter_mut().zip(f.iter()) {
                *d = *s;
            }
            out.verbatim(&format, &s.as_bytes());
            return;
        }
    }
    for (field, is_map) in [("map", true), ("set", false)] {
        if let Ok(Value::Table(m)) = t.raw_get::<Value>(field) {
            let Ok((flat, n)) = entries(lua, &m, is_map) else {
                // Past the scripts' memory limit while laying the entries out (Lua's text).
                out.raw(b"-ERR not enough memory\r\n");
                return;
            };
            let len = if is_map {
                out.map(n as usize);
                2 * n
            } else {
                out.set(n as usize);
                n
            };
            if len > 0 {
                stack.push(Pending::Items {
                    t: flat,
                    next: 1,
                    len,
                    depth,
                });
            }
            return;
        }
    }
    // An array ends at its first nil, as `lua_rawgeti` finds it (Redis's count).
    let mut len = 0i64;
    while !matches!(t.raw_get::<Value>(len + 1), Ok(Value::Nil) | Err(_)) {
        len += 1;
    }
    out.array(len as usize);
    if len > 0 {
        stack.push(Pending::Items {
            t,
            next: 1,
            len,
            depth,
        });
    }
}
