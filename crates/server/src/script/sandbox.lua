-- Meridian's Lua sandbox: Redis 7.0's script environment on a stock Lua 5.1.
--
-- Runs once per Lua state, with the stock globals and the libraries loaded, before any user
-- code. Arguments: `api` (the Rust functions), `mode` ("eval" or "function").
-- Returns a table of handles the Rust side keeps (see `script::engine`).
--
-- Redis 7.0 patches Lua with read-only tables and marks every table reachable from the
-- globals read-only. Stock Lua has no such flag, so a protected table is hidden behind a
-- proxy: an empty table whose metatable reads through to the real one and refuses writes.
-- Every reference scripts can reach (globals, library fields, `_G`, the string metatable's
-- `__index`) is the proxy; the functions that could write a table without
-- metamethods (rawset, setmetatable, table.insert/remove/sort/setn) refuse proxies, and the
-- ones that read raw (rawget, next, pairs) read through them.

local api, mode = ...

local G = _G
local type, error, tostring, select = type, error, tostring, select
local rawequal = rawequal
local o_rawset, o_rawget, o_next = rawset, rawget, next
local o_setmetatable, o_getmetatable = setmetatable, getmetatable
local o_pcall = pcall
local string_lib = string

local READONLY = "Attempt to modify a readonly table"

local real_of = o_setmetatable({}, { __mode = "k" }) -- proxy -> real table
local proxy_of = {} -- real table -> proxy
local shown_mt = {} -- proxy -> the metatable getmetatable shows (a proxy), if any

local function refuse_newindex()
    -- As Lua's VM does for a read-only table: the position is the writing code's.
    error(READONLY, 2)
end

local function protect(t)
    if real_of[t] then
        return t
    end
    local p = proxy_of[t]
    if p then
        return p
    end
    p = {}
    proxy_of[t] = p
    real_of[p] = t
    for k, v in o_next, t do
        if type(v) == "table" then
            o_rawset(t, k, protect(v))
        end
    end
    local mt = o_getmetatable(t)
    if type(mt) == "table" then
        shown_mt[p] = protect(mt)
    end
    o_setmetatable(p, { __index = t, __newindex = refuse_newindex })
    return p
end

-- Globals Redis allows (script_lua.c allow lists); everything else goes.
local allowed = {
    string = true, cjson = true, bit = true, cmsgpack = true, math = true, table = true,
    struct = true, redis = true, __redis__err__handler = true,
    xpcall = true, tostring = true, setmetatable = true, next = true,
    assert = true, tonumber = true, rawequal = true, collectgarbage = true,
    getmetatable = true, rawset = true, pcall = true, coroutine = true, type = true,
    _G = true, select = true, unpack = true, gcinfo = true, pairs = true, rawget = true,
    loadstring = true, ipairs = true, _VERSION = true, load = true, error = true,
}
local drop = {}
for k in o_next, G do
    if not allowed[k] then
        drop[#drop + 1] = k
    end
end
for _, k in ipairs(drop) do
    o_rawset(G, k, nil)
end

-- Raw access that sees through proxies and refuses to write them.
do
    local rawset, rawget, next, pairs = o_rawset, o_rawget, o_next, pairs
    G.rawset = function(t, k, v)
        if real_of[t] then
            error(READONLY, 0)
        end
        return rawset(t, k, v)
    end
    G.rawget = function(t, k)
        local r = real_of[t]
        if r then
            return rawget(r, k)
        end
        return rawget(t, k)
    end
    local function see_next(t, k)
        local r = real_of[t]
        if r then
            return next(r, k)
        end
        return next(t, k)
    end
    G.next = see_next
    G.pairs = function(t)
        local f, s, c = pairs(t)
        if real_of[t] then
            return see_next, t, nil
        end
        return f, s, c
    end
end

do
    local setmetatable, getmetatable = o_setmetatable, o_getmetatable
    G.setmetatable = function(t, mt)
        if real_of[t] then
            error(READONLY, 0)
        end
        return setmetatable(t, mt)
    end
    G.getmetatable = function(t)
        if real_of[t] then
            return shown_mt[t]
        end
        local mt = getmetatable(t)
        if type(t) ~= "table" and type(mt) == "table" then
            -- A basic type's metatable (strings': {__index = string}) is shared by every
            -- script of every user: read-only, as Redis's (CVE-2025-46818: a script that
            -- set the string metatable's __index ran its code inside later scripts).
            return protect(mt)
        end
        return mt
    end
end

do
    local t = G.table
    local insert, remove, sort, setn = t.insert, t.remove, t.sort, t.setn
    t.insert = function(tt, ...)
        if real_of[tt] then
            error(READONLY, 0)
        end
        return insert(tt, ...)
    end
    t.remove = function(tt, ...)
        if real_of[tt] then
            error(READONLY, 0)
        end
        return remove(tt, ...)
    end
    t.sort = function(tt, ...)
        if real_of[tt] then
            error(READONLY, 0)
        end
        return sort(tt, ...)
    end
    t.setn = function(tt, ...)
        if real_of[tt] then
            error(READONLY, 0)
        end
        return setn(tt, ...)
    end
end

-- Redis's pcall: an error table raised by redis.call comes back as its message.
do
    local pcall = o_pcall
    local function settle(ok, ...)
        if ok then
            return ok, ...
        end
        local e = ...
        if type(e) == "table" then
            local m = e.err
            if type(m) == "string" or type(m) == "number" then
                return false, m
            end
        end
        return false, e
    end
    G.pcall = function(f, ...)
        return settle(pcall(f, ...))
    end
end

-- Rust functions report errors as a second result; these C closures raise them as Redis's
-- C code does (from a C frame, so the script's own frame survives a tail call).
local wrap = api.wrap_raising
local function raising_table(f)
    return wrap(f, "plain")
end
local function raising_at_caller(f)
    return wrap(f, "where")
end

G.math.random = raising_at_caller(api.random)
G.math.randomseed = raising_at_caller(api.randomseed)

local function add_log(r)
    r.log = raising_table(api.log)
    r.LOG_DEBUG = 0
    r.LOG_VERBOSE = 1
    r.LOG_NOTICE = 2
    r.LOG_WARNING = 3
    r.REDIS_VERSION_NUM = api.REDIS_VERSION_NUM
    r.REDIS_VERSION = api.REDIS_VERSION
end

local redis = {}
-- C functions already (meridian_bridge.c): they raise, or return, the error tables themselves.
redis.call = api.call
redis.pcall = api.pcall
add_log(redis)
redis.setresp = raising_table(api.setresp)
redis.sha1hex = raising_table(api.sha1hex)
redis.error_reply = api.error_reply
redis.status_reply = api.status_reply
redis.set_repl = raising_table(api.set_repl)
redis.REPL_NONE = 0
redis.REPL_AOF = 1
redis.REPL_SLAVE = 2
redis.REPL_REPLICA = 2
redis.REPL_ALL = 3
redis.acl_check_cmd = raising_table(api.acl_check_cmd)
if mode == "eval" then
    -- Without a debugging session these do nothing, as in Redis.
    redis.breakpoint = function()
        return false
    end
    redis.debug = function() end
    redis.replicate_commands = function()
        return true
    end
    G.__redis__err__handler = api.error_handler
end
G.redis = redis

-- A read of a missing global is an error; so is any write (the globals are read-only).
local function missing_global(_, k)
    if type(k) ~= "string" and type(k) ~= "number" then
        error("Second argument to luaProtectedTableError must be a string or number", 2)
    end
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end
o_setmetatable(G, { __index = missing_global })

local handles = {}
local PG = protect(G)
handles.globals = PG
handles.real_globals = G

-- Strings index the (protected) string library.
o_rawset(o_getmetatable(""), "__index", proxy_of[string_lib])

if mode == "function" then
    -- The library-load environment: `redis` offers only register_function and logging.
    local lib_redis = {}
    lib_redis.register_function = raising_table(api.register_function)
    add_log(lib_redis)
    o_setmetatable(lib_redis, { __index = missing_global })
    local lib_api = { redis = lib_redis }
    o_setmetatable(lib_api, { __index = missing_global })
    handles.library_api = protect(lib_api)
    -- Library code runs with these globals: empty, read-only, reading through `__index`,
    -- which the Rust side points at the library API while loading and at the globals after.
    local env_mt = { __index = handles.library_api, __newindex = refuse_newindex }
    local env = o_setmetatable({}, env_mt)
    real_of[env] = env
    handles.library_env = env
    handles.library_env_mt = env_mt
end

local xpcall = xpcall
handles.run_load = function(f, handler)
    return xpcall(f, handler)
end
return handles
