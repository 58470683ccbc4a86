//! The hot path of a script in C (csrc/meridian_bridge.c): `redis.call`/`redis.pcall`, and
//! running a script with its KEYS and ARGV.
//!
//! Through mlua's API, each `redis.call` cost a callback with a `MultiValue` of its arguments,
//! a reference per value, and a dozen API round trips to build the reply's Lua values; KEYS
//! and ARGV cost two more per element. Here a C function reads the arguments in place, hands
//! them to the host as pointers and lengths ([`CallArgs`]), and builds the reply's Lua values
//! from the RESP bytes the host's command wrote, with the plain Lua API.

use std::cell::RefCell;
use std::os::raw::{c_int, c_void};
use std::rc::Rc;

use mlua::ffi::lua_State;
use mlua::{Function, LightUserData, Lua, Table, Value};

unsafe extern "C-unwind" {
    fn meridian_bridge_functions(l: *mut lua_State) -> c_int;
    fn meridian_run(l: *mut lua_State) -> c_int;
}

/// One argument as the C side passes it (`meridian_arg`).
#[repr(C)]
#[derive(Clone, Copy)]
struct RawArg {
    ptr: *const u8,
    len: usize,
    num: f64,
    kind: c_int,
}

const ARG_STRING: c_int = 0;
const ARG_NUMBER: c_int = 1;

/// A byte string between C and Rust (`meridian_bytes`).
#[repr(C)]
#[derive(Clone, Copy)]
struct RawBytes {
    ptr: *const u8,
    len: usize,
}

/// A run's keys then arguments (`meridian_run_items`).
#[repr(C)]
struct RawRun {
    items: *const RawBytes,
    nkeys: usize,
    nargs: usize,
}

/// Keys and arguments of a run passed from the stack up to this count (more: a vector).
const RUN_ITEMS_ON_STACK: usize = 8;

/// One argument of a `redis.call`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CallArg<'a> {
    Bytes(&'a [u8]),
    Number(f64),
    /// Neither a string nor a number (a table, nil, a boolean...).
    Other,
}

/// The arguments of one `redis.call`, read in place from the Lua stack.
#[derive(Clone, Copy)]
pub struct CallArgs<'a> {
    raw: &'a [RawArg],
}

impl<'a> CallArgs<'a> {
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<CallArg<'a>> {
        let a = self.raw.get(i)?;
        Some(match a.kind {
            ARG_STRING if !a.ptr.is_null() => {
                // SAFETY: the C side set `ptr`/`len` from `lua_tolstring` of a string argument
                // of the running C function; the string stays on the Lua stack (so alive and
                // unchanged: Lua strings are immutable) until that function returns, which is
                // after the host call this `CallArgs` is lent to (its lifetime bounds 'a).
                CallArg::Bytes(unsafe { std::slice::from_raw_parts(a.ptr, a.len) })
            }
            ARG_STRING => CallArg::Bytes(&[]),
            ARG_NUMBER => CallArg::Number(a.num),
            _ => CallArg::Other,
        })
    }
}

/// What the host did with a `redis.call`; `out` (the host's buffer) holds its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallOutcome {
    /// A command ran: `out` is its RESP reply.
    Reply = 0,
    /// A check refused the command and counted the error: `out` is the error text, and the
    /// error table gets `ignore_error_stats_update`.
    Refused = 1,
    /// The call itself is wrong (bad arguments, no script running): `out` is the error text.
    Failed = 2,
}

/// The host's side of `redis.call`: runs the arguments as a command, writes the reply or the
/// error text to the buffer.
pub type CallHost = dyn Fn(CallArgs<'_>, &mut Vec<u8>) -> CallOutcome;

/// What the C closures point to (a light userdata upvalue): kept alive by the Lua state's app
/// data for as long as the state lives.
struct Bridge {
    host: Box<CallHost>,
    /// The last reply or error text; the C side reads it until the next call.
    out: RefCell<Vec<u8>>,
}

/// Keeps the bridge alive with the state (app data is dropped with it).
struct BridgeKeeper(#[allow(dead_code)] Rc<Bridge>);

/// Called by the C closures (csrc/meridian_bridge.c), never from Rust.
///
/// # Safety
/// `bridge` is the light userdata `call_functions` made (or null), `args` points to `argc`
/// initialised `meridian_arg`s whose strings stay alive until this returns (or is null with
/// `argc` 0), and `out` points to a writable `meridian_bytes` (or is null).
#[unsafe(no_mangle)]
unsafe extern "C" fn meridian_bridge_call(
    bridge: *mut c_void,
    args: *const RawArg,
    argc: usize,
    out: *mut RawBytes,
) -> c_int {
    if bridge.is_null() || out.is_null() {
        return CallOutcome::Failed as c_int;
    }
    // SAFETY: `bridge` is the light userdata `call_functions` gave the closures: a pointer to
    // the `Bridge` in an `Rc` that the state's app data keeps alive while the state (and so
    // the closures) exists. Only shared references are made to it.
    let bridge = unsafe { &*(bridge as *const Bridge) };
    let raw: &[RawArg] = if argc == 0 || args.is_null() {
        &[]
    } else {
        // SAFETY: the C side passes an array of `argc` initialised `meridian_arg`s that lives
        // on its stack (or in a userdata on the Lua stack) until this returns.
        unsafe { std::slice::from_raw_parts(args, argc) }
    };
    let Ok(mut buf) = bridge.out.try_borrow_mut() else {
        return CallOutcome::Failed as c_int;
    };
    buf.clear();
    let host = &bridge.host;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        host(CallArgs { raw }, &mut buf)
    }))
    .unwrap_or_else(|_| {
        buf.clear();
        buf.extend_from_slice(b"ERR internal error running the command");
        CallOutcome::Failed
    });
    // SAFETY: `out` points to the C caller's `meridian_bytes`. The bytes stay valid until
    // the next call changes the buffer: the C side reads them before anything runs a
    // `redis.call` again.
    unsafe {
        *out = RawBytes {
            ptr: buf.as_ptr(),
            len: buf.len(),
        };
    }
    outcome as c_int
}

/// `redis.call` and `redis.pcall` for `host`: C functions that read their arguments in place,
/// call `host`, and return the reply as Lua values (Redis 7.0's conversion rules: integers as
/// numbers, nil bulk and nil array `false`, status `{ok=...}`, errors `{err=...}` with
/// `ignore_error_stats_update`, RESP3 types as their tables). `redis.call` raises an error
/// reply, or the error table of a refused or failed call; `redis.pcall` returns it. One pair
/// per Lua state.
pub fn call_functions(
    lua: &Lua,
    host: impl Fn(CallArgs<'_>, &mut Vec<u8>) -> CallOutcome + 'static,
) -> mlua::Result<(Function, Function)> {
    if lua.app_data_ref::<BridgeKeeper>().is_some() {
        return Err(mlua::Error::runtime("redis.call bridge already made"));
    }
    let bridge = Rc::new(Bridge {
        host: Box::new(host),
        out: RefCell::new(Vec::new()),
    });
    let ptr = Rc::as_ptr(&bridge) as *mut c_void;
    lua.set_app_data(BridgeKeeper(bridge));
    // SAFETY: a `lua_CFunction` compiled against the same Lua headers as the interpreter
    // mlua links, using only the public Lua C API.
    let make = unsafe { lua.create_c_function(meridian_bridge_functions) }?;
    make.call(LightUserData(ptr))
}

/// Runs scripts with their keys and arguments (csrc: `meridian_run`).
#[derive(Clone, Debug)]
pub struct Runner {
    run: Function,
}

impl Runner {
    pub fn new(lua: &Lua) -> mlua::Result<Runner> {
        // SAFETY: as in `call_functions`.
        let run = unsafe { lua.create_c_function(meridian_run) }?;
        Ok(Runner { run })
    }

    /// Calls `f` under the message handler `handler`. With `globals`, sets its `KEYS` and
    /// `ARGV` (raw) to arrays of `keys` and `args` and calls `f()` (EVAL); without, calls
    /// `f(KEYS, ARGV)` (FCALL). Returns `(true, first result)` or `(false, handler's value)`.
    pub fn run(
        &self,
        f: &Function,
        handler: &Function,
        globals: Option<&Table>,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> mlua::Result<(bool, Value)> {
        let raw_bytes = |s: &&[u8]| RawBytes {
            ptr: s.as_ptr(),
            len: s.len(),
        };
        // A few items (the usual script) on the stack, more in a vector.
        let mut on_stack = [RawBytes {
            ptr: std::ptr::null(),
            len: 0,
        }; RUN_ITEMS_ON_STACK];
        let spilled: Vec<RawBytes>;
        let n = keys.len() + args.len();
        let items: &[RawBytes] = if n <= RUN_ITEMS_ON_STACK {
            for (d, s) in on_stack.iter_mut().zip(keys.iter().chain(args.iter())) {
                *d = raw_bytes(s);
            }
            on_stack.get(..n).unwrap_or_default()
        } else {
            spilled = keys.iter().chain(args.iter()).map(raw_bytes).collect();
            &spilled
        };
        let raw = RawRun {
            items: items.as_ptr(),
            nkeys: keys.len(),
            nargs: args.len(),
        };
        let g = match globals {
            Some(t) => Value::Table(t.clone()),
            None => Value::Nil,
        };
        // The C function reads `raw` (and through it `items`, `keys`, `args`) only while this
        // call runs; all outlive it.
        let ptr = &raw as *const RawRun as *mut c_void;
        // Exactly two results: read off the stack as a pair, no `MultiValue`.
        self.run
            .call::<(bool, Value)>((f, handler, g, LightUserData(ptr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host that echoes its arguments as a RESP reply chosen by the first one.
    fn lua_with_host() -> Lua {
        let lua = Lua::new();
        let (call, pcall) = call_functions(&lua, |args, out| {
            let Some(CallArg::Bytes(first)) = args.get(0) else {
                out.extend_from_slice(
                    b"Lua redis lib command arguments must be strings or integers",
                );
                return CallOutcome::Failed;
            };
            match first {
                b"refuse" => {
                    out.extend_from_slice(b"-NOPERM no");
                    CallOutcome::Refused
                }
                b"count" => {
                    let mut n = 0.0;
                    for i in 1..args.len() {
                        if let Some(CallArg::Number(d)) = args.get(i) {
                            n += d;
                        }
                    }
                    out.extend_from_slice(format!(":{n}\r\n").as_bytes());
                    CallOutcome::Reply
                }
                raw => {
                    out.extend_from_slice(raw);
                    CallOutcome::Reply
                }
            }
        })
        .unwrap();
        lua.globals().set("call", call).unwrap();
        lua.globals().set("pcall_", pcall).unwrap();
        lua
    }

    #[test]
    fn replies_become_lua_values() {
        let lua = lua_with_host();
        let check = |code: &str, want: &str| {
            let got: String = lua.load(code).eval().unwrap();
            assert_eq!(got, want, "{code}");
        };
        check("return call('$3\\r\\nabc\\r\\n')", "abc");
        check("return tostring(call('$-1\\r\\n'))", "false");
        check("return tostring(call('*-1\\r\\n'))", "false");
        check("return call('+OK\\r\\n').ok", "OK");
        check("return tostring(call('count', 1, 2.0, 'x'))", "3");
        check("return tostring(call(':-42\\r\\n'))", "-42");
        check(
            "local t = call('*3\\r\\n$1\\r\\na\\r\\n_\\r\\n:7\\r\\n') return t[1]..tostring(t[2])..t[3]",
            "anil7",
        );
        check("return tostring(call('_\\r\\n'))", "nil");
        check("return tostring(call('#t\\r\\n'))", "true");
        check("return tostring(call(',1.5\\r\\n').double)", "1.5");
        check("return tostring(call(',-inf\\r\\n').double)", "-inf");
        check("return call('(123\\r\\n').big_number", "123");
        check(
            "local v = call('=9\\r\\ntxt:hello\\r\\n').verbatim_string return v.format..'/'..v.string",
            "txt/hello",
        );
        check(
            "local m = call('%1\\r\\n$1\\r\\nk\\r\\n:2\\r\\n').map return tostring(m.k)",
            "2",
        );
        check(
            "local s = call('~2\\r\\n$1\\r\\na\\r\\n$1\\r\\nb\\r\\n').set return tostring(s.a and s.b)",
            "true",
        );
        check(
            "return call('|1\\r\\n$1\\r\\nk\\r\\n$1\\r\\nv\\r\\n$1\\r\\nx\\r\\n')",
            "x",
        );
        // Many arguments go through a userdata array; as many as the Lua stack holds still
        // leave room for the reply.
        let many = (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        check(&format!("return tostring(call('count', {many}))"), "4950");
        check(
            "local a = {} for i = 1, 7997 do a[i] = 1 end return tostring(call('count', 2, unpack(a)))",
            "7999",
        );
        check(
            "local a = {} for i = 1, 7997 do a[i] = 1 end return call('*1\\r\\n$1\\r\\nx\\r\\n', unpack(a))[1]",
            "x",
        );
    }

    #[test]
    fn errors_are_tables_raised_by_call_returned_by_pcall() {
        let lua = lua_with_host();
        let check = |code: &str, want: &str| {
            let got: String = lua.load(code).eval().unwrap();
            assert_eq!(got, want, "{code}");
        };
        check(
            "local ok, e = pcall(call, '-WRONGTYPE bad\\r\\n') return e.err..'|'..tostring(e.ignore_error_stats_update)",
            "WRONGTYPE bad|true",
        );
        check(
            "local e = pcall_('-NOCODE\\r\\n') return e.err",
            "ERR NOCODE",
        );
        check(
            "local ok, e = pcall(call, 'refuse') return e.err..'|'..tostring(e.ignore_error_stats_update)",
            "NOPERM no|true",
        );
        check(
            "local e = pcall_({}) return e.err..'|'..tostring(e.ignore_error_stats_update)",
            "ERR Lua redis lib command arguments must be strings or integers|nil",
        );
    }

    #[test]
    fn run_sets_keys_and_argv_or_passes_them() {
        let lua = Lua::new();
        let runner = Runner::new(&lua).unwrap();
        let handler = lua
            .create_function(|_, e: Value| Ok(format!("handled {e:?}")))
            .unwrap();
        let f = lua
            .load("return KEYS[1]..ARGV[2]..#KEYS..#ARGV")
            .into_function()
            .unwrap();
        let g = lua.globals();
        let (ok, v) = runner
            .run(&f, &handler, Some(&g), &[b"k"], &[b"a", b"b"])
            .unwrap();
        assert!(ok);
        assert_eq!(v.as_string().unwrap().to_str().unwrap(), "kb12");
        let f = lua
            .load("local k, a = ... return k[1]..a[1]")
            .into_function()
            .unwrap();
        let (ok, v) = runner.run(&f, &handler, None, &[b"x"], &[b"y"]).unwrap();
        assert!(ok);
        assert_eq!(v.as_string().unwrap().to_str().unwrap(), "xy");
        // More items than fit on the stack.
        let f = lua
            .load("return #KEYS..'/'..#ARGV..'/'..KEYS[5]..ARGV[7]")
            .into_function()
            .unwrap();
        let keys: Vec<Vec<u8>> = (1..=6).map(|i| format!("k{i}").into_bytes()).collect();
        let args: Vec<Vec<u8>> = (1..=7).map(|i| format!("a{i}").into_bytes()).collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let (ok, v) = runner.run(&f, &handler, Some(&g), &keys, &args).unwrap();
        assert!(ok);
        assert_eq!(v.as_string().unwrap().to_str().unwrap(), "6/7/k5a7");
        let f = lua.load("error('boom')").into_function().unwrap();
        let (ok, v) = runner.run(&f, &handler, None, &[], &[]).unwrap();
        assert!(!ok);
        assert!(
            v.as_string()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("handled")
        );
    }
}
