//! The command table: data describing every command, joined with its handler.
//!
//! `meta::META` (generated from Redis 7.0's own `COMMAND INFO`/`COMMAND DOCS` by
//! `tools/gen-commands.py`) gives each command's name, arity, flags, key positions and the
//! exact reply bytes for `COMMAND INFO`/`COMMAND DOCS`. Each command family lists
//! `(name, handler)` pairs; `Table::build` joins the two. Dispatch, `COMMAND`, MULTI queuing,
//! MONITOR and (later) routing and replication all read this one table.

use hashbrown::HashMap;

use super::Handler;

/// Command flags, as Redis names them in `COMMAND INFO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Flags(pub u32);

impl Flags {
    pub const WRITE: Flags = Flags(1 << 0);
    pub const READONLY: Flags = Flags(1 << 1);
    pub const DENYOOM: Flags = Flags(1 << 2);
    pub const ADMIN: Flags = Flags(1 << 3);
    pub const PUBSUB: Flags = Flags(1 << 4);
    pub const NOSCRIPT: Flags = Flags(1 << 5);
    pub const BLOCKING: Flags = Flags(1 << 6);
    pub const LOADING: Flags = Flags(1 << 7);
    pub const STALE: Flags = Flags(1 << 8);
    pub const SKIP_MONITOR: Flags = Flags(1 << 9);
    pub const SKIP_SLOWLOG: Flags = Flags(1 << 10);
    pub const FAST: Flags = Flags(1 << 11);
    pub const NO_AUTH: Flags = Flags(1 << 12);
    pub const MAY_REPLICATE: Flags = Flags(1 << 13);
    pub const NO_MANDATORY_KEYS: Flags = Flags(1 << 14);
    pub const NO_MULTI: Flags = Flags(1 << 15);
    pub const MOVABLE_KEYS: Flags = Flags(1 << 16);
    pub const ALLOW_BUSY: Flags = Flags(1 << 17);
    pub const PROTECTED: Flags = Flags(1 << 18);
    pub const NO_ASYNC_LOADING: Flags = Flags(1 << 19);
    pub const SENTINEL: Flags = Flags(1 << 20);
    pub const ONLY_SENTINEL: Flags = Flags(1 << 21);

    /// Flag names in Redis's spelling, in bit order.
    pub const NAMES: [(&'static str, Flags); 22] = [
        ("write", Flags::WRITE),
        ("readonly", Flags::READONLY),
        ("denyoom", Flags::DENYOOM),
        ("admin", Flags::ADMIN),
        ("pubsub", Flags::PUBSUB),
        ("noscript", Flags::NOSCRIPT),
        ("blocking", Flags::BLOCKING),
        ("loading", Flags::LOADING),
        ("stale", Flags::STALE),
        ("skip_monitor", Flags::SKIP_MONITOR),
        ("skip_slowlog", Flags::SKIP_SLOWLOG),
        ("fast", Flags::FAST),
        ("no_auth", Flags::NO_AUTH),
        ("may_replicate", Flags::MAY_REPLICATE),
        ("no_mandatory_keys", Flags::NO_MANDATORY_KEYS),
        ("no_multi", Flags::NO_MULTI),
        ("movablekeys", Flags::MOVABLE_KEYS),
        ("allow_busy", Flags::ALLOW_BUSY),
        ("protected", Flags::PROTECTED),
        ("no_async_loading", Flags::NO_ASYNC_LOADING),
        ("sentinel", Flags::SENTINEL),
        ("only_sentinel", Flags::ONLY_SENTINEL),
    ];

    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Commands Redis 7.0 flags MAY_REPLICATE (`commands/*.json`), which `COMMAND INFO` does not
/// show and so `meta` lacks: CLIENT PAUSE WRITE holds them back like writes.
pub const MAY_REPLICATE_COMMANDS: &[&str] =
    &["pfcount", "publish", "spublish", "eval", "evalsha", "fcall"];

/// Whether Redis 7.0 flags the command WRITE or MAY_REPLICATE: what CLIENT PAUSE WRITE holds
/// back and what a read-only script may not call (`scriptVerifyWriteCommandAllow`).
pub fn writes_or_may_replicate(meta: &CommandMeta) -> bool {
    meta.flags.contains(Flags::WRITE)
        || meta.flags.contains(Flags::MAY_REPLICATE)
        || MAY_REPLICATE_COMMANDS.contains(&meta.name)
}

/// Static description of one command or subcommand (generated data).
#[derive(Debug)]
pub struct CommandMeta {
    /// Lowercase full name: "get", or "client|list" for a subcommand.
    pub name: &'static str,
    /// Redis arity: exact argc when positive, minimum argc when negative (name included).
    pub arity: i32,
    pub flags: Flags,
    /// Legacy key positions (0 when the command takes no key; last may be negative).
    pub first_key: i32,
    pub last_key: i32,
    pub key_step: i32,
    /// ACL categories without '@' ("read", "string", "fast"...).
    pub acl_categories: &'static [&'static str],
    /// Elements 2 to 9 of this command's `COMMAND INFO` entry (arity through key specs), as
    /// Redis encodes them in RESP2 and RESP3; the name and the subcommands are added at reply
    /// time so that only implemented subcommands are listed.
    pub info_head_resp2: &'static [u8],
    pub info_head_resp3: &'static [u8],
    /// Number of `COMMAND DOCS` fields in `docs_resp2`/`docs_resp3` (subcommands excluded).
    pub docs_fields: usize,
    /// This command's `COMMAND DOCS` field pairs (summary, since, group, ...), RESP2 and RESP3.
    pub docs_resp2: &'static [u8],
    pub docs_resp3: &'static [u8],
}

/// One command as dispatch sees it.
#[derive(Debug)]
pub struct CommandSpec {
    pub meta: &'static CommandMeta,
    /// None for a container (CLIENT, CONFIG...) whose subcommands carry the handlers.
    pub handler: Option<Handler>,
    /// Index into per-command statistics.
    pub idx: usize,
    /// Whether this is a container whose argv[1] picks a subcommand.
    pub is_container: bool,
    /// This command's index in `Table::metas`: its bit in ACL command bitmaps.
    pub acl_id: usize,
}

/// The joined table. Built once per process.
#[derive(Debug)]
pub struct Table {
    pub specs: Vec<CommandSpec>,
    /// Every command's metadata, implemented or not, in the order given to `build` (a
    /// container before its subcommands): what ACL rules can name (`crate::acl`).
    pub metas: Vec<&'static CommandMeta>,
    by_name: HashMap<&'static str, usize>,
}

/// Longest command name looked up; longer names are unknown without further work.
pub const COMMAND_NAME_BYTES_MAX: usize = 64;

impl Table {
    /// Joins `metas` with `handlers`. A handler with no metadata is a programming error
    /// reported as `Err` (a unit test keeps the shipped table consistent).
    pub fn build(
        metas: impl IntoIterator<Item = &'static CommandMeta>,
        handlers: &[(&'static str, Handler)],
    ) -> Result<Table, String> {
        let mut by_meta: HashMap<&'static str, &'static CommandMeta> = HashMap::new();
        let mut all: Vec<&'static CommandMeta> = Vec::new();
        let mut acl_ids: HashMap<&'static str, usize> = HashMap::new();
        for m in metas {
            by_meta.insert(m.name, m);
            acl_ids.insert(m.name, all.len());
            all.push(m);
        }
        let acl_id = |name: &str| acl_ids.get(name).copied().unwrap_or(usize::MAX);
        let mut specs = Vec::new();
        let mut by_name = HashMap::new();
        for &(name, handler) in handlers {
            let meta = by_meta
                .get(name)
                .ok_or_else(|| format!("handler '{name}' has no command metadata"))?;
            if let Some((container, _)) = name.split_once('|') {
                match by_name.get(container) {
                    // A container that also runs by itself (COMMAND): keep its handler.
                    Some(&i) => {
                        if let Some(spec) = specs.get_mut(i) {
                            let spec: &mut CommandSpec = spec;
                            spec.is_container = true;
                        }
                    }
                    None => {
                        let cmeta = by_meta.get(container).ok_or_else(|| {
                            format!("subcommand '{name}' has no container metadata")
                        })?;
                        by_name.insert(cmeta.name, specs.len());
                        specs.push(CommandSpec {
                            meta: cmeta,
                            handler: None,
                            idx: specs.len(),
                            is_container: true,
                            acl_id: acl_id(cmeta.name),
                        });
                    }
                }
            }
            match by_name.get(name).copied() {
                // A container placeholder registered by a subcommand before its own handler.
                Some(i)
                    if specs
                        .get(i)
                        .is_some_and(|s| s.handler.is_none() && !name.contains('|')) =>
                {
                    if let Some(spec) = specs.get_mut(i) {
                        spec.handler = Some(handler);
                    }
                }
                Some(_) => return Err(format!("command '{name}' registered twice")),
                None => {
                    by_name.insert(meta.name, specs.len());
                    let is_container = false;
                    specs.push(CommandSpec {
                        meta,
                        handler: Some(handler),
                        idx: specs.len(),
                        is_container,
                        acl_id: acl_id(meta.name),
                    });
                }
            }
        }
        Ok(Table {
            specs,
            metas: all,
            by_name,
        })
    }

    /// Looks a command up by name, case-insensitively, without allocating.
    pub fn lookup(&self, name: &[u8]) -> Option<&CommandSpec> {
        let mut buf = [0u8; COMMAND_NAME_BYTES_MAX];
        let dst = buf.get_mut(..name.len())?;
        for (d, s) in dst.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        let lower = std::str::from_utf8(dst).ok()?;
        if lower.contains('|') {
            // "client|list" names a subcommand, never a command a client may type.
            return None;
        }
        self.by_name.get(lower).and_then(|&i| self.specs.get(i))
    }

    /// Looks a subcommand of `container` up ("client" + "list" → "client|list").
    pub fn lookup_sub(&self, container: &str, sub: &[u8]) -> Option<&CommandSpec> {
        let mut buf = [0u8; COMMAND_NAME_BYTES_MAX];
        let total = container.len() + 1 + sub.len();
        let dst = buf.get_mut(..total)?;
        let (head, tail) = dst.split_at_mut(container.len());
        head.copy_from_slice(container.as_bytes());
        let (bar, rest) = tail.split_at_mut(1);
        bar.copy_from_slice(b"|");
        for (d, s) in rest.iter_mut().zip(sub) {
            *d = s.to_ascii_lowercase();
        }
        let lower = std::str::from_utf8(dst).ok()?;
        self.by_name.get(lower).and_then(|&i| self.specs.get(i))
    }

    /// Top-level commands (containers included, subcommands excluded), in table order.
    pub fn top_level(&self) -> impl Iterator<Item = &CommandSpec> {
        self.specs.iter().filter(|s| !s.meta.name.contains('|'))
    }

    /// Subcommands of a container.
    pub fn subcommands<'a>(
        &'a self,
        container: &'a str,
    ) -> impl Iterator<Item = &'a CommandSpec> + 'a {
        self.specs.iter().filter(move |s| {
            s.meta
                .name
                .split_once('|')
                .is_some_and(|(c, _)| c == container)
        })
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}
