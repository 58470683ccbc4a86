/*
 * Meridian (Apache-2.0): the hot path of a script, in C against the Lua API.
 *
 * - `redis.call` / `redis.pcall`: read the arguments off the Lua stack in place, hand them
 *   to the host (Rust, src/bridge.rs) as pointers and lengths, and turn the RESP reply the
 *   host's command wrote back into Lua values (Redis 7.0's conversion rules, script_lua.c's
 *   redisProtocolToLuaType): one C function per call instead of a dozen API round trips.
 * - `run`: sets KEYS and ARGV (or passes them as arguments, for FCALL) and calls the script
 *   under its message handler, as Redis's luaCallFunction does.
 *
 * Errors raised here are Lua errors (longjmp) over C frames only: the host function returns
 * before anything that can raise runs, and nothing here holds a resource across a raise.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"

/* One argument of redis.call as the host sees it (src/bridge.rs: RawArg). */
typedef struct {
    const char *ptr;
    size_t len;
    double num;
    int kind;
} meridian_arg;

/* A byte string (src/bridge.rs: RawBytes). */
typedef struct {
    const char *ptr;
    size_t len;
} meridian_bytes;

enum { ARG_STRING = 0, ARG_NUMBER = 1, ARG_OTHER = 2 };
/* The host's answer: the reply's RESP bytes; or an error text for an error table, with
 * `ignore_error_stats_update` (the host counted it already) or without. */
enum { CALL_REPLY = 0, CALL_REFUSED = 1, CALL_FAILED = 2 };

/* Implemented in Rust (src/bridge.rs). `out` is valid until the host's next call. */
extern int meridian_bridge_call(void *bridge, const meridian_arg *args, size_t argc,
                                meridian_bytes *out);

/* Arguments read into a C array on the stack up to this count; more go to a userdata. */
#define ARGS_ON_STACK 16

static void set_field(lua_State *L, const char *k, size_t klen, const char *v, size_t vlen) {
    lua_pushlstring(L, k, klen);
    lua_pushlstring(L, v, vlen);
    lua_rawset(L, -3);
}

/* The line at `*pos` (up to CR), `*pos` moved past its CRLF; NULL when there is none. */
static const char *resp_line(const char *buf, size_t len, size_t *pos, size_t *line_len) {
    const char *start = buf + *pos;
    const char *cr;
    if (*pos >= len) return NULL;
    cr = memchr(start, '\r', len - *pos);
    if (!cr) return NULL;
    *line_len = (size_t)(cr - start);
    *pos += *line_len + 2;
    return start;
}

/* A decimal integer, or `dflt` when the text is not one (as the Rust parse of i64). */
static long long resp_int(const char *s, size_t n, long long dflt) {
    unsigned long long v = 0;
    size_t i = 0;
    int neg = 0;
    if (n == 0) return dflt;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        i = 1;
        if (n == 1) return dflt;
    }
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return dflt;
        if (v > (9223372036854775808ULL - d) / 10) return dflt;
        v = v * 10 + d;
    }
    if (!neg && v > 9223372036854775807ULL) return dflt;
    if (neg) return v == 9223372036854775808ULL ? (-9223372036854775807LL - 1) : -(long long)v;
    return (long long)v;
}

/* Redis's error-table text for "-CODE msg": "CODE msg" ("ERR msg" without a code), leading
 * and trailing CR/LF of the message trimmed; pushed as a string. */
static void push_error_text(lua_State *L, const char *text, size_t n) {
    const char *code = "ERR", *msg = text, *sp;
    size_t code_len = 3, msg_len = n;
    luaL_Buffer b;
    if (n > 0 && text[0] == '-') {
        sp = memchr(text + 1, ' ', n - 1);
        if (sp) {
            code = text + 1;
            code_len = (size_t)(sp - code);
            msg = sp + 1;
            msg_len = n - (size_t)(msg - text);
        } else {
            msg = text + 1;
            msg_len = n - 1;
        }
    }
    while (msg_len > 0 && (msg[0] == '\r' || msg[0] == '\n')) {
        msg++;
        msg_len--;
    }
    while (msg_len > 0 && (msg[msg_len - 1] == '\r' || msg[msg_len - 1] == '\n')) msg_len--;
    luaL_buffinit(L, &b);
    luaL_addlstring(&b, code, code_len);
    luaL_addchar(&b, ' ');
    luaL_addlstring(&b, msg, msg_len);
    luaL_pushresult(&b);
}

/* {err = <text>} with `ignore_error_stats_update = true` when `ignore`. */
static void push_error_table(lua_State *L, const char *text, size_t n, int ignore) {
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "err");
    push_error_text(L, text, n);
    lua_rawset(L, -3);
    if (ignore) {
        lua_pushliteral(L, "ignore_error_stats_update");
        lua_pushboolean(L, 1);
        lua_rawset(L, -3);
    }
}

static double resp_double(const char *s, size_t n) {
    char tmp[128];
    char *end;
    double d;
    if (n == 3 && memcmp(s, "inf", 3) == 0) return HUGE_VAL;
    if (n == 4 && memcmp(s, "-inf", 4) == 0) return -HUGE_VAL;
    if ((n == 3 && memcmp(s, "nan", 3) == 0) || (n == 4 && memcmp(s, "-nan", 4) == 0))
        return NAN;
    if (n == 0 || n >= sizeof(tmp)) return 0.0;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    d = strtod(tmp, &end);
    return *end == '\0' ? d : 0.0;
}

/* Pushes the reply at `*pos` as a Lua value; returns 0 (pushing nothing) when the buffer
 * holds no complete reply there. Replies come from the server's own commands, whose nesting
 * is a few levels; each level checks the Lua stack. */
static int push_reply(lua_State *L, const char *buf, size_t len, size_t *pos) {
    char kind;
    const char *l;
    size_t n_l;
    long long n, i;
    if (*pos >= len) return 0;
    kind = buf[*pos];
    (*pos)++;
    l = resp_line(buf, len, pos, &n_l);
    if (!l) return 0;
    luaL_checkstack(L, 4, "reached lua stack limit");
    switch (kind) {
    case '+':
        lua_createtable(L, 0, 1);
        set_field(L, "ok", 2, l, n_l);
        break;
    case '-':
        /* The line with its '-': push_error_text reads the code after it. */
        push_error_table(L, l - 1, n_l + 1, 1);
        break;
    case ':':
        lua_pushnumber(L, (lua_Number)resp_int(l, n_l, 0));
        break;
    case '$':
        n = resp_int(l, n_l, -1);
        if (n < 0) {
            lua_pushboolean(L, 0);
        } else {
            size_t avail = *pos <= len ? len - *pos : 0;
            size_t take = (size_t)n <= avail ? (size_t)n : 0;
            lua_pushlstring(L, buf + *pos, take);
            *pos += (size_t)n + 2;
        }
        break;
    case '=': {
        size_t avail, body_len;
        const char *body;
        n = resp_int(l, n_l, 0);
        if (n < 0) n = 0;
        avail = *pos <= len ? len - *pos : 0;
        body_len = (size_t)n <= avail ? (size_t)n : 0;
        body = buf + *pos;
        *pos += (size_t)n + 2;
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "verbatim_string");
        lua_createtable(L, 0, 2);
        set_field(L, "string", 6, body_len > 4 ? body + 4 : "", body_len > 4 ? body_len - 4 : 0);
        set_field(L, "format", 6, body, body_len < 3 ? 0 : 3);
        lua_rawset(L, -3);
        break;
    }
    case '*':
    case '~':
    case '>':
        n = resp_int(l, n_l, -1);
        if (n < 0) {
            lua_pushboolean(L, 0);
        } else if (kind == '~') {
            lua_createtable(L, 0, 1);
            lua_pushliteral(L, "set");
            lua_newtable(L);
            for (i = 0; i < n; i++) {
                if (!push_reply(L, buf, len, pos)) break;
                if (lua_isnil(L, -1)) {
                    lua_pop(L, 1);
                    continue;
                }
                lua_pushboolean(L, 1);
                lua_rawset(L, -3);
            }
            lua_rawset(L, -3);
        } else {
            lua_createtable(L, n < 1024 ? (int)n : 1024, 0);
            /* A short buffer ends the elements (the rest would all be nil). */
            for (i = 0; i < n; i++) {
                if (!push_reply(L, buf, len, pos)) break;
                lua_rawseti(L, -2, (int)(i + 1));
            }
        }
        break;
    case '%':
        n = resp_int(l, n_l, 0);
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "map");
        lua_newtable(L);
        for (i = 0; i < n; i++) {
            if (!push_reply(L, buf, len, pos)) break;
            if (!push_reply(L, buf, len, pos)) lua_pushnil(L);
            if (lua_isnil(L, -2)) {
                lua_pop(L, 2);
                continue;
            }
            lua_rawset(L, -3);
        }
        lua_rawset(L, -3);
        break;
    case '|':
        /* Attributes are not shown to scripts: skip them, then the reply itself. */
        n = resp_int(l, n_l, 0);
        for (i = 0; i < n * 2; i++) {
            if (!push_reply(L, buf, len, pos)) break;
            lua_pop(L, 1);
        }
        return push_reply(L, buf, len, pos);
    case '_':
        lua_pushnil(L);
        break;
    case '#':
        lua_pushboolean(L, n_l == 1 && l[0] == 't');
        break;
    case ',':
        lua_createtable(L, 0, 1);
        lua_pushliteral(L, "double");
        lua_pushnumber(L, resp_double(l, n_l));
        lua_rawset(L, -3);
        break;
    case '(':
        lua_createtable(L, 0, 1);
        set_field(L, "big_number", 10, l, n_l);
        break;
    default:
        lua_pushnil(L);
        break;
    }
    return 1;
}

static int bridge_call(lua_State *L, int raise) {
    void *bridge = lua_touserdata(L, lua_upvalueindex(1));
    int argc = lua_gettop(L), i, code;
    meridian_arg on_stack[ARGS_ON_STACK];
    meridian_arg *args = on_stack;
    meridian_bytes out = {NULL, 0};
    if (argc > ARGS_ON_STACK) {
        /* Above the arguments, which keep their stack indexes. */
        args = (meridian_arg *)lua_newuserdata(L, sizeof(meridian_arg) * (size_t)argc);
    }
    for (i = 0; i < argc; i++) {
        meridian_arg *a = &args[i];
        a->ptr = NULL;
        a->len = 0;
        a->num = 0;
        switch (lua_type(L, i + 1)) {
        case LUA_TSTRING:
            a->kind = ARG_STRING;
            a->ptr = lua_tolstring(L, i + 1, &a->len);
            break;
        case LUA_TNUMBER:
            a->kind = ARG_NUMBER;
            a->num = (double)lua_tonumber(L, i + 1);
            break;
        default:
            a->kind = ARG_OTHER;
            break;
        }
    }
    code = meridian_bridge_call(bridge, args, (size_t)argc, &out);
    /* The arguments are no longer needed: their slots go to the reply's values (a call with
     * thousands of arguments leaves no room under the Lua stack limit otherwise). */
    lua_settop(L, 0);
    if (code == CALL_REPLY) {
        size_t pos = 0;
        if (!push_reply(L, out.ptr, out.len, &pos)) lua_pushnil(L);
        if (raise && out.len > 0 && out.ptr[0] == '-') return lua_error(L);
        return 1;
    }
    push_error_table(L, out.ptr, out.len, code == CALL_REFUSED);
    if (raise) return lua_error(L);
    return 1;
}

static int bridge_raise(lua_State *L) {
    return bridge_call(L, 1);
}

static int bridge_pass(lua_State *L) {
    return bridge_call(L, 0);
}

/* bridge_functions(bridge): redis.call and redis.pcall for the host behind `bridge` (a light
 * userdata the Rust side keeps alive as long as the Lua state). */
int meridian_bridge_functions(lua_State *L) {
    luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, bridge_raise, 1);
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, bridge_pass, 1);
    return 2;
}

/* The items of a run (src/bridge.rs: RawRun): keys then arguments. */
typedef struct {
    const meridian_bytes *items;
    size_t nkeys;
    size_t nargs;
} meridian_run_items;

static void push_array(lua_State *L, const meridian_bytes *items, size_t n) {
    size_t i;
    lua_createtable(L, n < 1024 ? (int)n : 1024, 0);
    for (i = 0; i < n; i++) {
        lua_pushlstring(L, items[i].ptr, items[i].len);
        lua_rawseti(L, -2, (int)(i + 1));
    }
}

/* run(f, handler, globals, items): with `globals` a table, sets its KEYS and ARGV (raw) and
 * calls f(); with `globals` nil, calls f(KEYS, ARGV). Returns (true, first result) or
 * (false, the handler's value), as Redis's lua_pcall with one result. */
int meridian_run(lua_State *L) {
    const meridian_run_items *run;
    int status;
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    luaL_checktype(L, 4, LUA_TLIGHTUSERDATA);
    run = (const meridian_run_items *)lua_touserdata(L, 4);
    lua_settop(L, 3);
    luaL_checkstack(L, 6, "run");
    lua_pushvalue(L, 2); /* 4: handler */
    lua_pushvalue(L, 1); /* 5: f */
    if (lua_istable(L, 3)) {
        lua_pushliteral(L, "KEYS");
        push_array(L, run->items, run->nkeys);
        lua_rawset(L, 3);
        lua_pushliteral(L, "ARGV");
        push_array(L, run->items + run->nkeys, run->nargs);
        lua_rawset(L, 3);
        status = lua_pcall(L, 0, 1, 4);
    } else {
        push_array(L, run->items, run->nkeys);
        push_array(L, run->items + run->nkeys, run->nargs);
        status = lua_pcall(L, 2, 1, 4);
    }
    lua_pushboolean(L, status == 0);
    lua_insert(L, -2);
    return 2;
}
