/*
 * Meridian (Apache-2.0): C closures that raise the error a wrapped function reports.
 *
 * Meridian's Rust functions for the `redis` API cannot raise a Lua table as an error, yet
 * Redis raises error tables ({err=...}) from redis.call and friends. Each Rust function
 * returns (value, error) instead; the closures below call it and raise `error` when it is not
 * nil. They are C functions, like Redis's own: a tail call to them keeps the caller's frame,
 * so error locations name the script's line, and `raise_where` prefixes string errors with
 * the caller's position as luaL_error does.
 */
#include "lua.h"
#include "lauxlib.h"

/* More arguments than this reach the packed variant (upvalue 2) as one table, so a call
 * with thousands of arguments does not need a reference per argument on the Rust side. */
#define PACK_ARGS_MIN 64

static int call_wrapped(lua_State *L) {
    int n = lua_gettop(L);
    /* No luaL_checkstack: a C function always has LUA_MINSTACK (20) free slots above its
     * arguments, and this pushes at most three before the call pops them all; checking
     * would refuse calls with as many arguments as Redis accepts. */
    if (n > PACK_ARGS_MIN && !lua_isnil(L, lua_upvalueindex(2))) {
        int i;
        lua_createtable(L, n, 0);
        lua_insert(L, 1);
        for (i = n; i >= 1; i--) lua_rawseti(L, 1, i);
        lua_pushvalue(L, lua_upvalueindex(2));
        lua_insert(L, 1);
        lua_pushinteger(L, n);
        lua_call(L, 2, 2);
    } else {
        lua_pushvalue(L, lua_upvalueindex(1));
        lua_insert(L, 1);
        lua_call(L, n, 2);
    }
    return lua_isnil(L, -1);
}

static int raise_plain(lua_State *L) {
    if (!call_wrapped(L)) lua_error(L);
    lua_pop(L, 1);
    return 1;
}

static int raise_where(lua_State *L) {
    if (!call_wrapped(L)) {
        if (lua_type(L, -1) == LUA_TSTRING) {
            luaL_where(L, 1);
            lua_insert(L, -2);
            lua_concat(L, 2);
        }
        lua_error(L);
    }
    lua_pop(L, 1);
    return 1;
}

static int pass_plain(lua_State *L) {
    call_wrapped(L);
    lua_pop(L, 1);
    return 1;
}

/* wrap(f, mode, packed): a C closure around f. mode: "plain" raises the error value,
 * "where" also prefixes a string error with the caller's position, "pass" never raises and
 * returns the value. packed (optional): the variant of f taking (table of args, count). */
int meridian_wrap_raising(lua_State *L) {
    const char *mode = luaL_checkstring(L, 2);
    lua_CFunction fn = raise_plain;
    luaL_checktype(L, 1, LUA_TFUNCTION);
    if (mode[0] == 'w') fn = raise_where;
    else if (mode[0] == 'p' && mode[1] == 'a') fn = pass_plain;
    lua_settop(L, 3);
    lua_remove(L, 2);
    lua_pushcclosure(L, fn, 2);
    return 1;
}
