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

static int call_wrapped(lua_State *L) {
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, 2);
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

/* wrap(f, where): a C closure around f; `where` (boolean) picks raise_where. */
int meridian_wrap_raising(lua_State *L) {
    int where = lua_toboolean(L, 2);
    luaL_checktype(L, 1, LUA_TFUNCTION);
    lua_settop(L, 1);
    lua_pushcclosure(L, where ? raise_where : raise_plain, 1);
    return 1;
}
