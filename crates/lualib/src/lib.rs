//! The C libraries Redis 7.0 ships with its Lua interpreter, registered into an `mlua` state.
//!
//! `cjson`, `cmsgpack`, `bit` and `struct` are compiled from Redis's own copies (csrc/, MIT) so
//! that scripts see the same encodings, number formatting, limits and error texts as in Redis.
//! This crate is the only crate in the workspace with `unsafe` code (besides one jemalloc call
//! in the server's `alloc.rs`): the `extern` declarations and the calls that hand their entry
//! points to Lua, and [`Lender`], which lends the host's values to Rust callbacks for the
//! length of a script run. Everything else stays in safe Rust.
#![allow(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod bridge;
pub mod lend;

use std::os::raw::c_int;

pub use bridge::{CallArg, CallArgs, CallOutcome, Runner, call_functions};
pub use lend::Lender;

use mlua::ffi::lua_State;

unsafe extern "C-unwind" {
    fn luaopen_cjson(l: *mut lua_State) -> c_int;
    fn luaopen_cmsgpack(l: *mut lua_State) -> c_int;
    fn luaopen_bit(l: *mut lua_State) -> c_int;
    fn luaopen_struct(l: *mut lua_State) -> c_int;
    fn meridian_wrap_raising(l: *mut lua_State) -> c_int;
}

/// The libraries, in the order Redis loads them (`luaLoadLibraries`), with the module name
/// each `luaopen_*` receives as its argument.
const LIBRARIES: [(&str, mlua::ffi::lua_CFunction); 4] = [
    ("cjson", luaopen_cjson),
    ("struct", luaopen_struct),
    ("cmsgpack", luaopen_cmsgpack),
    ("bit", luaopen_bit),
];

/// Loads `cjson`, `struct`, `cmsgpack` and `bit` into `lua`: each registers a global table of
/// its name in the state's current globals, as in Redis.
pub fn open(lua: &mlua::Lua) -> mlua::Result<()> {
    for (name, open) in LIBRARIES {
        // SAFETY: each entry point is a `lua_CFunction` compiled against the headers of the
        // same Lua 5.1 that mlua links (build.rs); Lua calls it with a valid state, and it
        // uses only the public Lua C API on it. A Lua error it raises longjmps, over C frames
        // only, back to the protected call that `Function::call` sets up.
        let f = unsafe { lua.create_c_function(open) }?;
        f.call::<()>(name)?;
    }
    Ok(())
}

/// A Lua function `wrap(f, mode, packed)` returning a C closure around `f`
/// (csrc/meridian_raise.c): the closure calls `f`, which returns `(value, error)`, and raises
/// `error` when it is not nil (mode "plain"; "where" prefixes a string error with the
/// caller's position, as luaL_error does; "pass" never raises), or returns `value`. With
/// more than 64 arguments it calls `packed(args_table, count)` instead, when given. Lets Rust
/// functions raise any Lua value, from a C frame, as Redis's C functions do.
pub fn raising_wrapper(lua: &mlua::Lua) -> mlua::Result<mlua::Function> {
    // SAFETY: as in `open`: a `lua_CFunction` compiled against the same Lua headers, using
    // only the public Lua C API.
    unsafe { lua.create_c_function(meridian_wrap_raising) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> mlua::Lua {
        let lua = mlua::Lua::new();
        open(&lua).unwrap();
        lua
    }

    #[test]
    fn cjson_formats_numbers_as_redis_does() {
        let lua = lua();
        let s: String = lua
            .load("return cjson.encode({1, 2.5, 1/3, 1e300})")
            .eval()
            .unwrap();
        assert_eq!(s, "[1,2.5,0.33333333333333,1e+300]");
        let e = lua
            .load("return cjson.encode(function() end)")
            .eval::<String>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Cannot serialise function: type not supported"),
            "{e}"
        );
    }

    #[test]
    fn cmsgpack_bit_and_struct_are_there() {
        let lua = lua();
        let v: i64 = lua
            .load("return cmsgpack.unpack(cmsgpack.pack(12345))")
            .eval()
            .unwrap();
        assert_eq!(v, 12345);
        let v: i64 = lua.load("return bit.band(0xff, 0x0f)").eval().unwrap();
        assert_eq!(v, 15);
        let v: String = lua.load("return struct.pack('>I2', 258)").eval().unwrap();
        assert_eq!(v.as_bytes(), b"\x01\x02");
    }
}
