//! FUNCTION libraries (functions.c, function_lua.c): loading a library's code, the registry
//! of libraries and functions, and the FUNCTION DUMP/RESTORE payload (Redis's RDB encoding of
//! functions, so payloads move between Redis and Meridian both ways).

use std::collections::BTreeMap;
use std::time::Instant;

use hashbrown::HashMap;
use mlua::{Lua, MultiValue, Value};

use super::engine::Engine;
use super::{Loading, ScriptFlags};

/// The one engine, as FUNCTION LIST and STATS name it.
pub const ENGINE_NAME: &str = "LUA";

/// RDB opcode of a library in a payload (RDB_OPCODE_FUNCTION2), and of 7.0-rc libraries.
pub const OPCODE_FUNCTION2: u8 = 245;
pub const OPCODE_FUNCTION_RC: u8 = 246;
/// The RDB version Redis 7.0 writes in DUMP payloads (and the highest it reads).
pub const RDB_VERSION: u16 = 10;
/// Libraries one RESTORE payload may hold.
pub const RESTORE_LIBRARIES_MAX: usize = 100_000;

/// One registered function.
#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: ScriptFlags,
    /// In the Lua registry (as `CachedScript::function`, for the same reason); shared by the
    /// copies a FUNCTION RESTORE or LOAD makes of the libraries before it commits.
    pub callback: std::rc::Rc<mlua::RegistryKey>,
}

/// One library: its full code (shebang included) and its functions.
#[derive(Debug, Clone)]
pub struct Library {
    pub name: String,
    pub code: Vec<u8>,
    pub functions: Vec<FunctionInfo>,
}

/// The loaded libraries. Library names are case-sensitive; function names are unique across
/// libraries regardless of case (Redis's dictionaries).
#[derive(Debug, Default, Clone)]
pub struct Libraries {
    libs: BTreeMap<String, Library>,
    /// Lowercased function name → library name.
    functions: HashMap<String, String>,
}

impl Libraries {
    pub fn len(&self) -> usize {
        self.libs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.libs.is_empty()
    }

    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Library> {
        self.libs.values()
    }

    pub fn get(&self, name: &str) -> Option<&Library> {
        self.libs.get(name)
    }

    /// FCALL's lookup (case-insensitive).
    pub fn function(&self, name: &[u8]) -> Option<&FunctionInfo> {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        let lib = self.libs.get(self.functions.get(&lower)?)?;
        lib.functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&lower))
    }

    pub fn remove(&mut self, name: &str) -> Option<Library> {
        let lib = self.libs.remove(name)?;
        for f in &lib.functions {
            self.functions.remove(&f.name.to_ascii_lowercase());
        }
        Some(lib)
    }

    /// The first function of `lib` whose name another library already uses.
    pub fn collision<'a>(&self, lib: &'a Library) -> Option<&'a str> {
        lib.functions
            .iter()
            .find(|f| self.functions.contains_key(&f.name.to_ascii_lowercase()))
            .map(|f| f.name.as_str())
    }

    pub fn insert(&mut self, lib: Library) {
        for f in &lib.functions {
            self.functions
                .insert(f.name.to_ascii_lowercase(), lib.name.clone());
        }
        self.libs.insert(lib.name.clone(), lib);
    }

    pub fn clear(&mut self) {
        self.libs.clear();
        self.functions.clear();
    }
}

/// Library and function names: `[A-Za-z0-9_]+` (functionsVerifyName).
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// A library's shebang (`functionExtractLibMetaData`): engine, name, and the offset where the
/// code given to the engine starts (its newline, so line numbers hold).
pub fn parse_metadata(code: &[u8]) -> Result<(String, String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".to_string());
    }
    let Some(end) = memchr::memchr(b'\n', code) else {
        return Err("Invalid library metadata".to_string());
    };
    let parts = crate::resp::parse::sds_split_args(code.get(..end).unwrap_or_default())
        .filter(|p| !p.is_empty())
        .ok_or("Invalid library metadata")?;
    let engine = parts
        .first()
        .map(|p| String::from_utf8_lossy(p.get(2..).unwrap_or_default()).into_owned())
        .unwrap_or_default();
    let mut name = None;
    for p in parts.iter().skip(1) {
        if p.len() >= 5 && p.get(..5).is_some_and(|h| h.eq_ignore_ascii_case(b"name=")) {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".to_string(),
                );
            }
            name = Some(String::from_utf8_lossy(p.get(5..).unwrap_or_default()).into_owned());
            continue;
        }
        return Err(format!(
            "Invalid metadata value given: {}",
            String::from_utf8_lossy(p)
        ));
    }
    let name = name.ok_or("Library name was not given")?;
    Ok((engine, name, end))
}

/// The functions a library's code registers while it loads (app data of the Lua state).
#[derive(Debug, Default)]
pub struct LibraryBuild {
    pub functions: Vec<FunctionInfo>,
}

fn fail(lua: &Lua, text: &str) -> mlua::Result<(Value, Value)> {
    Ok((
        Value::Nil,
        Value::Table(super::convert::error_table(lua, text.as_bytes())?),
    ))
}

/// `lua_isstring`: a string or a number, as a string.
fn string_arg(lua: &Lua, v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        Value::Number(d) => Some(super::engine::lua_number_string(*d)),
        Value::Integer(i) => {
            let _ = lua;
            Some(i.to_string())
        }
        _ => None,
    }
}

/// `redis.register_function(name, callback)` or `redis.register_function{...}`.
pub fn register_function(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if lua.app_data_ref::<LibraryBuild>().is_none() {
        return fail(
            lua,
            "redis.register_function can only be called on FUNCTION LOAD command",
        );
    }
    let (name, description, callback, flags) = match args.len() {
        1 => {
            let Some(Value::Table(t)) = args.front() else {
                return fail(
                    lua,
                    "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
                );
            };
            let mut name = None;
            let mut desc = None;
            let mut callback = None;
            let mut flags = ScriptFlags::default();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Some(key) = string_arg(lua, &k) else {
                    return fail(
                        lua,
                        "named argument key given to redis.register_function is not a string",
                    );
                };
                if key.eq_ignore_ascii_case("function_name") {
                    match string_arg(lua, &v) {
                        Some(s) => name = Some(s),
                        None => {
                            return fail(
                                lua,
                                "function_name argument given to redis.register_function must be a string",
                            );
                        }
                    }
                } else if key.eq_ignore_ascii_case("description") {
                    match string_arg(lua, &v) {
                        Some(s) => desc = Some(s.into_bytes()),
                        None => {
                            return fail(
                                lua,
                                "description argument given to redis.register_function must be a string",
                            );
                        }
                    }
                } else if key.eq_ignore_ascii_case("callback") {
                    match v {
                        Value::Function(f) => callback = Some(f),
                        _ => {
                            return fail(
                                lua,
                                "callback argument given to redis.register_function must be a function",
                            );
                        }
                    }
                } else if key.eq_ignore_ascii_case("flags") {
                    let Value::Table(ft) = v else {
                        return fail(
                            lua,
                            "flags argument to redis.register_function must be a table representing function flags",
                        );
                    };
                    let mut j = 1i64;
                    loop {
                        let f: Value = ft.get(j)?;
                        if f.is_nil() {
                            break;
                        }
                        let ok = string_arg(lua, &f).is_some_and(|s| flags.set(&s, true));
                        if !ok {
                            return fail(lua, "unknown flag given");
                        }
                        j += 1;
                    }
                } else {
                    return fail(lua, "unknown argument given to redis.register_function");
                }
            }
            let Some(name) = name else {
                return fail(
                    lua,
                    "redis.register_function must get a function name argument",
                );
            };
            let Some(callback) = callback else {
                return fail(lua, "redis.register_function must get a callback argument");
            };
            (name, desc, callback, flags)
        }
        2 => {
            let mut it = args.iter();
            let Some(name) = it.next().and_then(|v| string_arg(lua, v)) else {
                return fail(
                    lua,
                    "first argument to redis.register_function must be a string",
                );
            };
            let Some(Value::Function(f)) = it.next() else {
                return fail(
                    lua,
                    "second argument to redis.register_function must be a function",
                );
            };
            (name, None, f.clone(), ScriptFlags::default())
        }
        _ => return fail(lua, "wrong number of arguments to redis.register_function"),
    };
    if !valid_name(name.as_bytes()) {
        return fail(lua, BAD_NAME);
    }
    let Some(mut build) = lua.app_data_mut::<LibraryBuild>() else {
        return fail(
            lua,
            "redis.register_function can only be called on FUNCTION LOAD command",
        );
    };
    if build.functions.iter().any(|f| f.name == name) {
        return fail(lua, "Function already exists in the library");
    }
    let callback = match lua.create_registry_value(callback) {
        Ok(key) => std::rc::Rc::new(key),
        Err(e) => return fail(lua, &e.to_string()),
    };
    build.functions.push(FunctionInfo {
        name,
        description,
        flags,
        callback,
    });
    Ok((Value::Nil, Value::Nil))
}

/// Compiles and runs a library's code (`functionsCreateWithLibraryCtx` up to the checks
/// against other libraries): the library with its functions, or Redis's error text.
/// `timeout_ms` 0 means no time limit.
pub fn build(engine: &Engine, code: &[u8], timeout_ms: u64) -> Result<Library, String> {
    let (engine_name, name, shebang_end) = parse_metadata(code)?;
    if !valid_name(name.as_bytes()) {
        return Err(BAD_NAME.to_string());
    }
    if !engine_name.eq_ignore_ascii_case(ENGINE_NAME) {
        return Err(format!("Engine '{engine_name}' not found"));
    }
    let st = &*engine.0;
    let lua = &st.lua;
    let (Some(env), Some(env_mt), Some(api)) =
        (&st.library_env, &st.library_env_mt, &st.library_api)
    else {
        return Err("Engine 'LUA' not found".to_string());
    };
    let body = code.get(shebang_end..).unwrap_or_default();
    let f = engine
        .compile(body, "@user_function", Some(env))
        .map_err(|e| format!("Error compiling function: {}", compile_message(&e)))?;
    let lua_err = |e: mlua::Error| format!("Error registering functions: {e}");
    env_mt.raw_set("__index", api.clone()).map_err(lua_err)?;
    lua.set_app_data(LibraryBuild::default());
    lua.set_app_data(Loading {
        started: Instant::now(),
        timeout_ms,
        timed_out: false,
    });
    let ran = engine.run_load(&f);
    let built = lua.remove_app_data::<LibraryBuild>().unwrap_or_default();
    lua.remove_app_data::<Loading>();
    env_mt
        .raw_set("__index", st.globals.clone())
        .map_err(lua_err)?;
    let (ok, err) = ran.map_err(lua_err)?;
    if !ok {
        let msg = match err {
            Value::Table(t) => t
                .get::<Option<mlua::String>>("err")
                .ok()
                .flatten()
                .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                .unwrap_or_default(),
            other => format!("ERR {other:?}"),
        };
        return Err(format!("Error registering functions: {msg}"));
    }
    if built.functions.is_empty() {
        return Err("No functions registered".to_string());
    }
    Ok(Library {
        name,
        code: code.to_vec(),
        functions: built.functions,
    })
}

/// Lua's compile message (mlua wraps it).
pub fn compile_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => super::engine::interrupt_message(other),
    }
}

/// FUNCTION LOAD [REPLACE]: builds the library and links it into `libs`. Returns its name.
pub fn load(
    engine: &Engine,
    libs: &mut Libraries,
    code: &[u8],
    replace: bool,
    timeout_ms: u64,
) -> Result<String, String> {
    let (engine_name, name, _) = parse_metadata(code)?;
    if !valid_name(name.as_bytes()) {
        return Err(BAD_NAME.to_string());
    }
    if !engine_name.eq_ignore_ascii_case(ENGINE_NAME) {
        return Err(format!("Engine '{engine_name}' not found"));
    }
    if libs.get(&name).is_some() && !replace {
        return Err(format!("Library '{name}' already exists"));
    }
    let lib = build(engine, code, timeout_ms)?;
    let old = libs.remove(&lib.name);
    if let Some(f) = libs.collision(&lib) {
        let err = format!("Function {f} already exists");
        if let Some(old) = old {
            libs.insert(old);
        }
        return Err(err);
    }
    libs.insert(lib);
    Ok(name)
}

// ---------------------------------------------------------------------------------------
// FUNCTION DUMP / RESTORE payloads

/// Redis's CRC-64 (Jones polynomial, reflected), as in DUMP payloads.
const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// FUNCTION DUMP: every library as RDB_OPCODE_FUNCTION2 and its code (raw strings: a valid
/// payload Redis reads too), then the RDB version and the CRC-64.
pub fn dump(libs: &Libraries) -> Vec<u8> {
    payload(libs.iter().map(|l| l.code.as_slice()))
}

/// The FUNCTION DUMP payload of libraries given by their code (also what `meridian
/// import-rdb` sends FUNCTION RESTORE for an RDB file's libraries).
pub fn payload<'a>(codes: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        meridian_rdb::encode::put_len(&mut out, code.len() as u64);
        out.extend_from_slice(code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Why a payload could not be decoded (the texts FUNCTION RESTORE answers).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    #[error("can not read data type")]
    Type,
    #[error("given type is not a function")]
    NotFunction,
    #[error("Failed loading library payload")]
    Payload,
    #[error("Failed loading library name")]
    Name,
    #[error("Failed loading engine name")]
    EngineName,
    #[error("Failed loading library description indicator")]
    DescriptionIndicator,
    #[error("Failed loading library description")]
    Description,
    #[error("Failed loading library blob")]
    Blob,
    #[error("too many libraries in the payload")]
    TooMany,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// An RDB length: `(value, is_encoded)`.
    fn len(&mut self) -> Option<(u64, bool)> {
        let b = self.byte()?;
        match b >> 6 {
            0 => Some((u64::from(b & 0x3f), false)),
            1 => Some(((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?), false)),
            3 => Some((u64::from(b & 0x3f), true)),
            _ => match b {
                0x80 => {
                    let s = self.take(4)?;
                    Some((u64::from(u32::from_be_bytes(s.try_into().ok()?)), false))
                }
                0x81 => {
                    let s = self.take(8)?;
                    Some((u64::from_be_bytes(s.try_into().ok()?), false))
                }
                _ => None,
            },
        }
    }

    /// An RDB string: raw, integer-encoded or LZF-compressed.
    fn string(&mut self) -> Option<Vec<u8>> {
        let (len, encoded) = self.len()?;
        if !encoded {
            return Some(self.take(usize::try_from(len).ok()?)?.to_vec());
        }
        match len {
            0 => Some((self.byte()? as i8).to_string().into_bytes()),
            1 => {
                let s = self.take(2)?;
                Some(
                    i16::from_le_bytes(s.try_into().ok()?)
                        .to_string()
                        .into_bytes(),
                )
            }
            2 => {
                let s = self.take(4)?;
                Some(
                    i32::from_le_bytes(s.try_into().ok()?)
                        .to_string()
                        .into_bytes(),
                )
            }
            3 => {
                let (clen, _) = self.len()?;
                let (ulen, _) = self.len()?;
                let compressed = self.take(usize::try_from(clen).ok()?)?;
                lzf_decompress(compressed, usize::try_from(ulen).ok()?)
            }
            _ => None,
        }
    }
}

/// LZF decompression (Redis's lzf_d.c) into exactly `out_len` bytes; `None` on any mismatch.
pub fn lzf_decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    // The output is bounded by the payload's own size: LZF expands at most ~256x per byte
    // pair, and a length beyond that is a corrupt payload, not an allocation to attempt.
    if out_len > input.len().saturating_mul(256).saturating_add(64) {
        return None;
    }
    let mut out = Vec::with_capacity(out_len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(*input.get(i)?);
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            out.extend_from_slice(input.get(i..i + n)?);
            i += n;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(i)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
            i += 1;
            let start = out.len().checked_sub(back)?;
            for k in 0..len + 2 {
                let b = *out.get(start + k)?;
                out.push(b);
            }
        }
        if out.len() > out_len {
            return None;
        }
    }
    (out.len() == out_len).then_some(out)
}

/// Decodes a FUNCTION RESTORE payload into the libraries' codes, without compiling them.
pub fn decode_payload(data: &[u8]) -> Result<Vec<Vec<u8>>, PayloadError> {
    if data.len() < 10 {
        return Err(PayloadError::Footer);
    }
    let body_end = data.len() - 10;
    let footer = data.get(body_end..).ok_or(PayloadError::Footer)?;
    let version = match footer {
        [lo, hi, ..] => u16::from_le_bytes([*lo, *hi]),
        _ => return Err(PayloadError::Footer),
    };
    if version > RDB_VERSION {
        return Err(PayloadError::Footer);
    }
    let crc = CRC64.checksum(data.get(..data.len() - 8).ok_or(PayloadError::Footer)?);
    if footer.get(2..) != Some(&crc.to_le_bytes()[..]) {
        return Err(PayloadError::Footer);
    }
    let mut r = Reader {
        buf: data.get(..body_end).ok_or(PayloadError::Footer)?,
        pos: 0,
    };
    let mut codes = Vec::new();
    while r.pos < body_end {
        if codes.len() >= RESTORE_LIBRARIES_MAX {
            return Err(PayloadError::TooMany);
        }
        let t = r.byte().ok_or(PayloadError::Type)?;
        match t {
            OPCODE_FUNCTION2 => codes.push(r.string().ok_or(PayloadError::Payload)?),
            OPCODE_FUNCTION_RC => {
                let name = r.string().ok_or(PayloadError::Name)?;
                let engine = r.string().ok_or(PayloadError::EngineName)?;
                let (has_desc, _) = r.len().ok_or(PayloadError::DescriptionIndicator)?;
                if has_desc != 0 {
                    r.string().ok_or(PayloadError::Description)?;
                }
                let blob = r.string().ok_or(PayloadError::Blob)?;
                let mut code = b"#!".to_vec();
                code.extend_from_slice(&engine);
                code.extend_from_slice(b" name=");
                code.extend_from_slice(&name);
                code.push(b'\n');
                code.extend_from_slice(&blob);
                codes.push(code);
            }
            _ => return Err(PayloadError::NotFunction),
        }
    }
    Ok(codes)
}

/// How RESTORE treats libraries already loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePolicy {
    Flush,
    Append,
    Replace,
}

/// FUNCTION RESTORE: builds every library of the payload, then joins them by `policy`;
/// nothing changes unless all of it succeeds.
pub fn restore(
    engine: &Engine,
    libs: &mut Libraries,
    data: &[u8],
    policy: RestorePolicy,
) -> Result<(), String> {
    let codes = decode_payload(data).map_err(|e| e.to_string())?;
    restore_codes(engine, libs, &codes, policy)
}

/// FUNCTION RESTORE of libraries given by their code (an RDB file's `FUNCTION2` records):
/// builds every one, then links them into `libs` by `policy`; on an error `libs` is as it was.
pub fn restore_codes(
    engine: &Engine,
    libs: &mut Libraries,
    codes: &[Vec<u8>],
    policy: RestorePolicy,
) -> Result<(), String> {
    let mut incoming = Libraries::default();
    for code in codes {
        load(engine, &mut incoming, code, false, 0)?;
    }
    if policy == RestorePolicy::Flush {
        *libs = incoming;
        return Ok(());
    }
    let mut next = libs.clone();
    for lib in incoming.iter() {
        if next.get(&lib.name).is_some() {
            if policy == RestorePolicy::Append {
                return Err(format!("Library {} already exists", lib.name));
            }
            next.remove(&lib.name);
        }
    }
    for lib in incoming.iter() {
        if let Some(f) = next.collision(lib) {
            return Err(format!("Function {f} already exists"));
        }
    }
    for lib in incoming.libs.into_values() {
        next.insert(lib);
    }
    *libs = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_of_codes_is_what_function_restore_reads() {
        let codes = vec![b"#!lua name=a\n".to_vec(), vec![b'x'; 300]];
        let p = payload(codes.iter().map(Vec::as_slice));
        assert_eq!(decode_payload(&p).unwrap(), codes);
    }

    #[test]
    fn metadata() {
        assert_eq!(
            parse_metadata(b"#!lua name=mylib\nreturn 1").unwrap(),
            ("lua".to_string(), "mylib".to_string(), 16)
        );
        assert_eq!(
            parse_metadata(b"return 1").unwrap_err(),
            "Missing library metadata"
        );
        assert_eq!(
            parse_metadata(b"#!lua name=x").unwrap_err(),
            "Invalid library metadata"
        );
        assert_eq!(
            parse_metadata(b"#!lua\n").unwrap_err(),
            "Library name was not given"
        );
        assert_eq!(
            parse_metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(
            parse_metadata(b"#!lua foo=bar\n").unwrap_err(),
            "Invalid metadata value given: foo=bar"
        );
    }

    #[test]
    fn payload_round_trip_and_corruption() {
        let mut libs = Libraries::default();
        let engine = Engine::new(super::super::engine::Mode::Function).unwrap();
        load(
            &engine,
            &mut libs,
            b"#!lua name=lib1\nredis.register_function('f1', function() return 1 end)",
            false,
            0,
        )
        .unwrap();
        let payload = dump(&libs);
        assert_eq!(decode_payload(&payload).unwrap().len(), 1);
        let mut bad = payload.clone();
        bad[3] ^= 1;
        assert_eq!(decode_payload(&bad), Err(PayloadError::Footer));
        assert_eq!(decode_payload(b"short"), Err(PayloadError::Footer));
        // A payload whose body is a non-function opcode, with a valid footer.
        let mut body = vec![0u8];
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = CRC64.checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_payload(&body), Err(PayloadError::NotFunction));
    }

    /// Every truncation and many bit flips of a valid payload: a clear error or a decode,
    /// never a panic (the fuzz target `function_payload` explores further).
    #[test]
    fn damaged_payloads_are_refused_cleanly() {
        let mut libs = Libraries::default();
        let engine = Engine::new(super::super::engine::Mode::Function).unwrap();
        for i in 0..3 {
            let code = format!(
                "#!lua name=l{i}\nredis.register_function('f{i}', function() return {i} end)"
            );
            load(&engine, &mut libs, code.as_bytes(), false, 0).unwrap();
        }
        let payload = dump(&libs);
        assert_eq!(decode_payload(&payload).unwrap().len(), 3);
        for cut in 0..payload.len() {
            assert!(decode_payload(&payload[..cut]).is_err(), "cut at {cut}");
        }
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let mut damaged = payload.clone();
            let at = (rng as usize) % damaged.len();
            damaged[at] ^= 1 << ((rng >> 40) % 8);
            // The checksum covers everything but itself: any flip before it is caught.
            if at < damaged.len() - 8 {
                assert_eq!(decode_payload(&damaged), Err(PayloadError::Footer));
            } else {
                assert!(decode_payload(&damaged).is_err());
            }
        }
        // A well-formed footer around a body that lies about its string length.
        let mut body = vec![OPCODE_FUNCTION2, 0x80, 0xff, 0xff, 0xff, 0xff, b'x'];
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = CRC64.checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_payload(&body), Err(PayloadError::Payload));
    }

    #[test]
    fn lzf() {
        // "aaaaaaaaaa": one literal 'a', then a back reference of length 9 at distance 1.
        let c = [0x00, b'a', 0xe0, 0x00, 0x00];
        assert_eq!(lzf_decompress(&c, 10).unwrap(), b"aaaaaaaaaa");
        assert!(lzf_decompress(&c, 11).is_none());
        assert!(lzf_decompress(&[0xe0, 0x00, 0x05], 9).is_none());
    }
}
