//! Compiles the C libraries Redis 7.0 links into its Lua (csrc/, MIT-licensed) against the
//! headers of the same Lua 5.1 that `mlua`'s `vendored` feature builds. Only the headers of
//! this second `lua-src` build are used; the interpreter linked is mlua-sys's.

fn main() {
    let lua = lua_src::Build::new().build(lua_src::Lua51);
    let mut build = cc::Build::new();
    build
        .include(lua.include_dir())
        .include("csrc")
        // Redis's deps/Makefile flags for these files: cjson registers a global table.
        .define("ENABLE_CJSON_GLOBAL", None)
        .define("LUA_ANSI", None)
        .warnings(false)
        .opt_level(2);
    for f in [
        "csrc/lua_cjson.c",
        "csrc/strbuf.c",
        "csrc/fpconv.c",
        "csrc/lua_cmsgpack.c",
        "csrc/lua_bit.c",
        "csrc/lua_struct.c",
        "csrc/meridian_raise.c",
        "csrc/meridian_bridge.c",
    ] {
        build.file(f);
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-changed=csrc");
    build.compile("meridian_lualib");
}
