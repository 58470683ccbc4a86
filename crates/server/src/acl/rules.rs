//! The ACL rule language: users, selectors, and the rules of ACL SETUSER and the ACL file,
//! applied and described as Redis 7.0's `acl.c` does (`ACLSetUser`, `ACLSetSelector`,
//! `ACLDescribeUser`).
//!
//! Pure data over a `Catalog` of commands: no shard, no clients, no I/O, so the parser can be
//! fuzzed on its own. Every command Redis 7.0 knows has a bit (unimplemented ones too, so
//! that rules written for Redis load and categories count as Redis counts them); the last
//! bit stands for commands added later (set by `+@all`/`allcommands` only).

use std::collections::BTreeMap;

use hashbrown::HashMap;

use crate::cmd::command::KeySpec;
use crate::cmd::table::CommandMeta;

/// Redis's ACL categories, in its order (ACL CAT, COMMAND INFO, rule descriptions).
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The category bit of `name` (any case), if it is one.
pub fn category_bit(name: &[u8]) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Words of a command bitmap: 512 bits, the last one reserved (`FUTURE_BIT`).
pub const COMMAND_WORDS: usize = 8;
/// The bit that stands for commands that do not exist yet (Redis's
/// `USER_COMMAND_BITS_COUNT-1`): set only by `+@all`, it makes a description start with
/// `+@all` rather than `-@all`.
pub const FUTURE_BIT: usize = COMMAND_WORDS * 64 - 1;

/// How a command's channels are named (Redis's `commands_with_channels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelArgs {
    None,
    /// SUBSCRIBE, SSUBSCRIBE: every argument from 1 is a channel.
    Subscribe,
    /// PSUBSCRIBE: every argument from 1 is a pattern, matched literally against the user's.
    PatternSubscribe,
    /// PUBLISH, SPUBLISH: argument 1.
    Publish,
}

/// One command as ACL sees it.
#[derive(Debug)]
pub struct CatalogEntry {
    /// Lowercase full name ("get", "client|list").
    pub name: &'static str,
    pub meta: &'static CommandMeta,
    /// Category bits (`category_bit`).
    pub categories: u32,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub key_specs: Vec<KeySpec>,
    pub channels: ChannelArgs,
}

/// Every command ACL rules can name, by id (its index).
#[derive(Debug)]
pub struct Catalog {
    pub entries: Vec<CatalogEntry>,
    /// Top-level ids, in table order.
    pub top: Vec<usize>,
    /// Every id in Redis's walk order: each top-level command, then its subcommands.
    order: Vec<usize>,
    by_name: HashMap<&'static str, usize>,
}

impl Catalog {
    /// Builds the catalog from command metadata (a container before its subcommands).
    /// Fails when there are more commands than bits.
    pub fn new(metas: &[&'static CommandMeta]) -> Result<Catalog, String> {
        if metas.len() >= FUTURE_BIT {
            return Err(format!(
                "{} commands do not fit {FUTURE_BIT} ACL bits",
                metas.len()
            ));
        }
        let mut entries: Vec<CatalogEntry> = Vec::with_capacity(metas.len());
        let mut by_name = HashMap::new();
        let mut top = Vec::new();
        for (id, &meta) in metas.iter().enumerate() {
            let categories = meta
                .acl_categories
                .iter()
                .filter_map(|c| category_bit(c.as_bytes()))
                .fold(0, |a, b| a | b);
            let parent = match meta.name.split_once('|') {
                Some((container, _)) => Some(
                    *by_name
                        .get(container)
                        .ok_or_else(|| format!("'{}' comes before its container", meta.name))?,
                ),
                None => {
                    top.push(id);
                    None
                }
            };
            if let Some(p) = parent {
                if let Some(e) = entries.get_mut(p) {
                    let e: &mut CatalogEntry = e;
                    e.children.push(id);
                }
            }
            let channels = match meta.name {
                "subscribe" | "ssubscribe" => ChannelArgs::Subscribe,
                "psubscribe" => ChannelArgs::PatternSubscribe,
                "publish" | "spublish" => ChannelArgs::Publish,
                _ => ChannelArgs::None,
            };
            by_name.insert(meta.name, id);
            entries.push(CatalogEntry {
                name: meta.name,
                meta,
                categories,
                parent,
                children: Vec::new(),
                key_specs: crate::cmd::command::key_specs(meta.info_head_resp2),
                channels,
            });
        }
        let order = top
            .iter()
            .flat_map(|&t| {
                std::iter::once(t).chain(
                    entries
                        .get(t)
                        .map(|e| e.children.clone())
                        .unwrap_or_default(),
                )
            })
            .collect();
        Ok(Catalog {
            entries,
            top,
            order,
            by_name,
        })
    }

    /// Redis's `ACLLookupCommand`: "name" or "container|sub", any case.
    pub fn lookup(&self, name: &[u8]) -> Option<usize> {
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        if lower.matches('|').count() > 1 {
            return None;
        }
        self.by_name.get(lower.as_str()).copied()
    }

    pub fn get(&self, id: usize) -> Option<&CatalogEntry> {
        self.entries.get(id)
    }

    /// Ids in Redis's walk order: each top-level command, then its subcommands.
    pub fn walk(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().copied()
    }
}

/// A command bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandBits([u64; COMMAND_WORDS]);

impl CommandBits {
    pub fn get(&self, id: usize) -> bool {
        self.0
            .get(id / 64)
            .is_some_and(|w| w & (1u64 << (id % 64)) != 0)
    }

    fn put(&mut self, id: usize, on: bool) {
        if let Some(w) = self.0.get_mut(id / 64) {
            if on {
                *w |= 1u64 << (id % 64);
            } else {
                *w &= !(1u64 << (id % 64));
            }
        }
    }

    fn all() -> CommandBits {
        CommandBits([u64::MAX; COMMAND_WORDS])
    }
}

/// Read and write permission of a key pattern (`~` both, `%R~`, `%W~`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPerm {
    pub read: bool,
    pub write: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub perm: KeyPerm,
}

/// What one selector allows. The root selector is the user's rules outside parentheses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub root: bool,
    pub allkeys: bool,
    pub allchannels: bool,
    pub allcommands: bool,
    pub commands: CommandBits,
    /// First arguments allowed for an otherwise denied command (`+select|0`), by id.
    pub firstargs: BTreeMap<usize, Vec<Vec<u8>>>,
    pub keys: Vec<KeyPattern>,
    pub channels: Vec<Vec<u8>>,
}

/// Why a rule was refused: Redis's `ACLSetUserStringError` texts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("Syntax error")]
    Syntax,
    #[error("Unknown command or category name in ACL")]
    UnknownCommand,
    #[error(
        "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
    )]
    KeyAfterAll,
    #[error(
        "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"
    )]
    ChannelAfterAll,
    #[error("The password you are trying to remove from the user does not exist")]
    NoSuchPassword,
    #[error(
        "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
    )]
    BadHash,
    #[error("Allowing first-arg of a subcommand is not supported")]
    FirstArgOfSubcommand,
}

/// Redis's `ACLStringHasSpaces`: whitespace or NUL.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&c| c == 0 || crate::cmd::args::is_c_space(c))
}

impl Selector {
    /// An empty selector: no commands, keys or channels (channels all when
    /// `acl-pubsub-default` is `allchannels`).
    pub fn new(root: bool, pubsub_all: bool) -> Selector {
        Selector {
            root,
            allkeys: false,
            allchannels: pubsub_all,
            allcommands: false,
            commands: CommandBits::default(),
            firstargs: BTreeMap::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Whether this selector allows every command on every key and channel.
    pub fn is_unrestricted(&self) -> bool {
        self.allkeys && self.allchannels && self.allcommands
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        self.commands.put(id, on);
        if !on {
            self.allcommands = false;
        }
    }

    /// Redis's `ACLChangeSelectorPerm`: the command and all its subcommands.
    fn change_perm(&mut self, cat: &Catalog, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.firstargs.remove(&id);
        if let Some(e) = cat.get(id) {
            for &c in &e.children {
                self.set_bit(c, allow);
            }
        }
    }

    /// Redis's `ACLSetSelectorCommandBitsForCategoryLogic` (module commands aside).
    fn change_category(&mut self, cat: &Catalog, bit: u32, allow: bool) {
        for &t in &cat.top {
            let Some(e) = cat.get(t) else { continue };
            if e.categories & bit != 0 {
                self.change_perm(cat, t, allow);
            }
            for &c in &e.children {
                if cat.get(c).is_some_and(|s| s.categories & bit != 0) {
                    self.change_perm(cat, c, allow);
                }
            }
        }
    }

    fn all_commands(&mut self, allow: bool) {
        self.commands = if allow {
            CommandBits::all()
        } else {
            CommandBits::default()
        };
        self.allcommands = allow;
        self.firstargs.clear();
    }

    /// Redis's `ACLSetSelector`: one selector rule.
    pub fn apply(&mut self, cat: &Catalog, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.all_commands(true);
        } else if is("nocommands") || is("-@all") {
            self.all_commands(false);
        } else if let Some(&first @ (b'~' | b'%')) = op.first() {
            self.add_key_pattern(first, op)?;
        } else if let Some(pat) = op.strip_prefix(b"&") {
            if self.allchannels {
                return Err(RuleError::ChannelAfterAll);
            }
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pat) {
                self.channels.push(pat.to_vec());
            }
            self.allchannels = false;
        } else if let Some(name) = op.strip_prefix(b"+@").or_else(|| op.strip_prefix(b"-@")) {
            let bit = category_bit(name).ok_or(RuleError::UnknownCommand)?;
            self.change_category(cat, bit, op.first() == Some(&b'+'));
        } else if let Some(name) = op.strip_prefix(b"+") {
            self.allow_command(cat, name)?;
        } else if let Some(name) = op.strip_prefix(b"-") {
            let id = cat.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(cat, id, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// `~pattern`, `%R~pattern`, `%W~pattern`, `%RW~pattern`.
    fn add_key_pattern(&mut self, first: u8, op: &[u8]) -> Result<(), RuleError> {
        if self.allkeys {
            return Err(RuleError::KeyAfterAll);
        }
        let mut perm = KeyPerm {
            read: true,
            write: true,
        };
        let mut offset = 1;
        if first == b'%' {
            perm = KeyPerm {
                read: false,
                write: false,
            };
            while let Some(&c) = op.get(offset) {
                if c.eq_ignore_ascii_case(&b'r') && !perm.read {
                    perm.read = true;
                } else if c.eq_ignore_ascii_case(&b'w') && !perm.write {
                    perm.write = true;
                } else if c == b'~' {
                    offset += 1;
                    break;
                } else {
                    return Err(RuleError::Syntax);
                }
                offset += 1;
            }
            if !perm.read && !perm.write {
                return Err(RuleError::Syntax);
            }
        }
        let pattern = op.get(offset..).unwrap_or_default();
        if has_spaces(pattern) {
            return Err(RuleError::Syntax);
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(k) => {
                k.perm.read |= perm.read;
                k.perm.write |= perm.write;
            }
            None => self.keys.push(KeyPattern {
                pattern: pattern.to_vec(),
                perm,
            }),
        }
        self.allkeys = false;
        Ok(())
    }

    /// `+command`, `+container|sub`, `+command|first-arg`.
    fn allow_command(&mut self, cat: &Catalog, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&c| c == b'|') else {
            let id = cat.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(cat, id, true);
            return Ok(());
        };
        let (base, sub) = (
            name.get(..bar).unwrap_or_default(),
            name.get(bar + 1..).unwrap_or_default(),
        );
        let id = cat.lookup(base).ok_or(RuleError::UnknownCommand)?;
        let entry = cat.get(id).ok_or(RuleError::UnknownCommand)?;
        if entry.parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !entry.children.is_empty() {
            let sub_id = cat.lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change_perm(cat, sub_id, true);
        } else {
            tracing::warn!(
                "Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and may get disabled in the future (offender: +{})",
                String::from_utf8_lossy(name)
            );
            let list = self.firstargs.entry(id).or_default();
            if !list.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                list.push(sub.to_vec());
            }
        }
        Ok(())
    }

    /// Redis's `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, then the categories
    /// that fit best, then single commands, so that applying the text gives this bitmap.
    /// Bytes: a first argument may be any bytes but a space.
    pub fn describe_commands(&self, cat: &Catalog) -> Vec<u8> {
        let mut rules: Vec<u8> = Vec::new();
        let additive = !self.commands.get(FUTURE_BIT);
        let mut fake = Selector::new(false, false);
        if additive {
            rules.extend_from_slice(b"-@all ");
            fake.all_commands(false);
        } else {
            rules.extend_from_slice(b"+@all ");
            fake.all_commands(true);
        }
        let mut temp = Selector::new(false, false);
        temp.commands = self.commands;
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best: Option<usize> = None;
            let (mut mindiff, mut maxsame) = (u64::MAX, 0u64);
            for (j, _) in CATEGORIES.iter().enumerate() {
                if applied.get(j).copied().unwrap_or(true) {
                    continue;
                }
                let (on, off) = temp.count_category(cat, 1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(b) = best else { break };
            let name = CATEGORIES.get(b).copied().unwrap_or_default();
            fake.change_category(cat, 1 << b, additive);
            temp.change_category(cat, 1 << b, !additive);
            rules.extend_from_slice(if additive { b"+@" } else { b"-@" });
            rules.extend_from_slice(name.as_bytes());
            rules.push(b' ');
            if let Some(a) = applied.get_mut(b) {
                *a = true;
            }
        }
        for id in cat.walk() {
            let Some(e) = cat.get(id) else { continue };
            let user_bit = self.commands.get(id);
            if user_bit != fake.commands.get(id) {
                rules.push(if user_bit { b'+' } else { b'-' });
                rules.extend_from_slice(e.name.as_bytes());
                rules.push(b' ');
                fake.change_perm(cat, id, user_bit);
            }
            if !user_bit {
                for arg in self.firstargs.get(&id).into_iter().flatten() {
                    rules.push(b'+');
                    rules.extend_from_slice(e.name.as_bytes());
                    rules.push(b'|');
                    rules.extend_from_slice(arg);
                    rules.push(b' ');
                }
            }
        }
        rules.pop();
        rules
    }

    /// Commands of category `bit` this selector allows and denies.
    fn count_category(&self, cat: &Catalog, bit: u32) -> (u64, u64) {
        let (mut on, mut off) = (0, 0);
        for id in cat.walk() {
            if cat.get(id).is_some_and(|e| e.categories & bit != 0) {
                if self.commands.get(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// The key patterns as rules ("~a %R~b").
    pub fn describe_keys(&self) -> Vec<u8> {
        if self.allkeys {
            return b"~*".to_vec();
        }
        join(self.keys.iter().map(describe_key))
    }

    /// The channel patterns as rules ("&a &b").
    pub fn describe_channels(&self) -> Vec<u8> {
        if self.allchannels {
            return b"&*".to_vec();
        }
        join(self.channels.iter().map(|c| [&b"&"[..], c].concat()))
    }

    /// Redis's `ACLDescribeSelector`: keys, channels, then command rules.
    pub fn describe(&self, cat: &Catalog) -> Vec<u8> {
        let mut res: Vec<u8> = Vec::new();
        if self.allkeys {
            res.extend_from_slice(b"~* ");
        } else {
            for k in &self.keys {
                res.extend_from_slice(&describe_key(k));
                res.push(b' ');
            }
        }
        if self.allchannels {
            res.extend_from_slice(b"&* ");
        } else {
            res.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                res.push(b'&');
                res.extend_from_slice(c);
                res.push(b' ');
            }
        }
        res.extend_from_slice(&self.describe_commands(cat));
        res
    }
}

fn describe_key(k: &KeyPattern) -> Vec<u8> {
    let prefix: &[u8] = match (k.perm.read, k.perm.write) {
        (true, true) => b"~",
        (true, false) => b"%R~",
        _ => b"%W~",
    };
    [prefix, &k.pattern].concat()
}

/// Rules joined by single spaces.
fn join(parts: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in parts.enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(&p);
    }
    out
}

/// A password as Redis keeps it: the lowercase hex SHA-256 of the cleartext.
pub type PasswordHash = [u8; 64];

/// Redis's `ACLHashPassword`.
pub fn hash_password(cleartext: &[u8]) -> PasswordHash {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, cleartext);
    let mut out = [b'0'; 64];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in digest.as_ref().iter().enumerate() {
        if let Some(pair) = out.get_mut(i * 2..i * 2 + 2) {
            pair.copy_from_slice(&[
                HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'),
                HEX.get(usize::from(b & 0xf)).copied().unwrap_or(b'0'),
            ]);
        }
    }
    out
}

/// Redis's `ACLCheckPasswordHash`: 64 lowercase hex characters.
fn parse_hash(text: &[u8]) -> Result<PasswordHash, RuleError> {
    let hash: PasswordHash = text.try_into().map_err(|_| RuleError::BadHash)?;
    if hash
        .iter()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    {
        Ok(hash)
    } else {
        Err(RuleError::BadHash)
    }
}

/// Redis's `time_independent_strcmp` on two hashes: no early exit.
pub fn hashes_equal(a: &PasswordHash, b: &PasswordHash) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// User flags in the order descriptions print them (Redis's `ACLUserFlags`).
pub const USER_FLAGS: [&str; 5] = [
    "on",
    "off",
    "nopass",
    "skip-sanitize-payload",
    "sanitize-payload",
];
const ON: u8 = 1;
const OFF: u8 = 2;
const NOPASS: u8 = 4;
const SKIP_SANITIZE: u8 = 8;
const SANITIZE: u8 = 16;

/// One ACL user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: Vec<u8>,
    /// Bits of `USER_FLAGS` (a new user is `off`).
    flags: u8,
    pub passwords: Vec<PasswordHash>,
    /// The rules given outside parentheses.
    pub root: Selector,
    /// Selectors added with `(...)`, in order.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A new user: off, no password, no permissions.
    pub fn new(name: &[u8], pubsub_all: bool) -> User {
        User {
            name: name.to_vec(),
            flags: OFF,
            passwords: Vec::new(),
            root: Selector::new(true, pubsub_all),
            selectors: Vec::new(),
        }
    }

    /// Redis's default user: `on nopass ~* &* +@all`.
    pub fn default_user(cat: &Catalog) -> User {
        let mut u = User::new(b"default", false);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = u.apply(cat, op.as_bytes(), false);
        }
        u
    }

    pub fn enabled(&self) -> bool {
        self.flags & ON != 0
    }

    pub fn disabled(&self) -> bool {
        self.flags & OFF != 0
    }

    pub fn nopass(&self) -> bool {
        self.flags & NOPASS != 0
    }

    /// Flags in description order.
    pub fn flag_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        USER_FLAGS
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.flags & (1 << i) != 0)
            .map(|(_, n)| *n)
    }

    /// Whether some selector allows everything (the check can be skipped).
    pub fn is_unrestricted(&self) -> bool {
        self.all_selectors().any(Selector::is_unrestricted)
    }

    /// The root selector, then the others, in the order checks try them.
    pub fn all_selectors(&self) -> impl Iterator<Item = &Selector> {
        std::iter::once(&self.root).chain(self.selectors.iter())
    }

    /// Redis's `ACLSetUser`: one rule. `pubsub_all` is `acl-pubsub-default allchannels`.
    pub fn apply(&mut self, cat: &Catalog, op: &[u8], pubsub_all: bool) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if op.is_empty() {
            return Ok(());
        }
        if is("on") {
            self.flags = (self.flags | ON) & !OFF;
        } else if is("off") {
            self.flags = (self.flags | OFF) & !ON;
        } else if is("skip-sanitize-payload") {
            self.flags = (self.flags | SKIP_SANITIZE) & !SANITIZE;
        } else if is("sanitize-payload") {
            self.flags = (self.flags | SANITIZE) & !SKIP_SANITIZE;
        } else if is("nopass") {
            self.flags |= NOPASS;
            self.passwords.clear();
        } else if is("resetpass") {
            self.flags &= !NOPASS;
            self.passwords.clear();
        } else if let Some(&first @ (b'>' | b'#')) = op.first() {
            let rest = op.get(1..).unwrap_or_default();
            let hash = if first == b'>' {
                hash_password(rest)
            } else {
                parse_hash(rest)?
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.flags &= !NOPASS;
        } else if let Some(&first @ (b'<' | b'!')) = op.first() {
            let rest = op.get(1..).unwrap_or_default();
            let hash = if first == b'<' {
                hash_password(rest)
            } else {
                parse_hash(rest)?
            };
            let at = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op.first() == Some(&b'(') && op.last() == Some(&b')') {
            let inner = op.get(1..op.len() - 1).unwrap_or_default();
            let args = crate::resp::parse::sds_split_args(inner).ok_or(RuleError::Syntax)?;
            let mut s = Selector::new(false, pubsub_all);
            for a in &args {
                s.apply(cat, a)?;
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.clear();
        } else if is("reset") {
            for op in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply(cat, op.as_bytes(), pubsub_all)?;
            }
            if pubsub_all {
                self.apply(cat, b"allchannels", pubsub_all)?;
            }
            for op in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply(cat, op.as_bytes(), pubsub_all)?;
            }
        } else {
            self.root.apply(cat, op)?;
        }
        Ok(())
    }

    /// Redis's `ACLDescribeUser` (the rules of ACL LIST and the ACL file).
    pub fn describe(&self, cat: &Catalog) -> Vec<u8> {
        let mut res: Vec<u8> = Vec::new();
        for f in self.flag_names() {
            res.extend_from_slice(f.as_bytes());
            res.push(b' ');
        }
        for p in &self.passwords {
            res.push(b'#');
            res.extend_from_slice(p);
            res.push(b' ');
        }
        res.extend_from_slice(&self.root.describe(cat));
        for s in &self.selectors {
            res.extend_from_slice(b" (");
            res.extend_from_slice(&s.describe(cat));
            res.push(b')');
        }
        res
    }
}

/// Redis's `ACLMergeSelectorArguments`: rules of a selector split over several arguments
/// ("(~a" "+get)") joined with spaces. `Err(i)`: the selector opened at argument `i` is
/// never closed. As in Redis, a selector whose first rule ends with `)` (a key pattern
/// `~a)`) or any rule holding quotes does not survive ACL LIST/SAVE then LOAD: the file
/// format cannot carry it (the `acl_rules` fuzz target excludes those cases).
pub fn merge_selector_args(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(args.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, &a) in args.iter().enumerate() {
        if a.first() == Some(&b'(') && a.last() != Some(&b')') && open.is_none() {
            open = Some((i, a.to_vec()));
            continue;
        }
        if let Some((_, sel)) = open.as_mut() {
            sel.push(b' ');
            sel.extend_from_slice(a);
            if a.last() == Some(&b')') {
                if let Some((_, done)) = open.take() {
                    out.push(done);
                }
            }
            continue;
        }
        out.push(a.to_vec());
    }
    match open {
        Some((i, _)) => Err(i),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> &'static Catalog {
        crate::acl::catalog()
    }

    fn user(rules: &[&str]) -> Result<User, RuleError> {
        let mut u = User::new(b"u", false);
        for r in rules {
            u.apply(cat(), r.as_bytes(), false)?;
        }
        Ok(u)
    }

    fn describe(rules: &[&str]) -> String {
        String::from_utf8(user(rules).unwrap().describe(cat())).unwrap()
    }

    #[test]
    fn descriptions_match_redis() {
        // Each expectation is what redis-server 7.0.15 answers to ACL LIST.
        assert_eq!(describe(&[]), "off resetchannels -@all");
        assert_eq!(
            describe(&["reset"]),
            "off sanitize-payload resetchannels -@all"
        );
        assert_eq!(describe(&["%R"]), "off %R~ resetchannels -@all");
        assert_eq!(describe(&["%RW~"]), "off ~ resetchannels -@all");
        assert_eq!(describe(&["%r~a"]), "off %R~a resetchannels -@all");
        assert_eq!(
            describe(&["~a", "%R~a", "%W~b", "%R~b"]),
            "off ~a ~b resetchannels -@all"
        );
        assert_eq!(
            describe(&["+select|0", "+select|1"]),
            "off resetchannels -@all +select|0 +select|1"
        );
        assert_eq!(
            describe(&["+@all", "-@dangerous"]),
            "off resetchannels +@all -@dangerous"
        );
        // Redis walks its command dict in hash order (random per process): it printed
        // "+set -get" here; single commands come in table order in Meridian.
        assert_eq!(
            describe(&["-@all", "+@read", "+set", "-get"]),
            "off resetchannels -@all +@read -get +set"
        );
        assert_eq!(
            describe(&["+@all", "-client", "+client|id"]),
            "off resetchannels +@all -client +client|id"
        );
        assert_eq!(
            describe(&["(~a +get)", "(%R~b +set)"]),
            "off resetchannels -@all (~a resetchannels -@all +get) (%R~b resetchannels -@all +set)"
        );
        let d = User::default_user(cat()).describe(cat());
        assert_eq!(d, b"on nopass ~* &* +@all");
    }

    #[test]
    fn errors_match_redis() {
        for (rule, err) in [
            ("%", RuleError::Syntax),
            ("%~x", RuleError::Syntax),
            ("%RR~x", RuleError::Syntax),
            ("~a b", RuleError::Syntax),
            ("+client|list|x", RuleError::FirstArgOfSubcommand),
            ("+client|", RuleError::Syntax),
            ("-select|0", RuleError::UnknownCommand),
            ("+config|nope", RuleError::UnknownCommand),
            ("+@nope", RuleError::UnknownCommand),
            ("(nope)", RuleError::Syntax),
            ("<p3", RuleError::NoSuchPassword),
            ("#abc", RuleError::BadHash),
            ("bogus", RuleError::Syntax),
        ] {
            assert_eq!(user(&[rule]), Err(err), "{rule}");
        }
        assert_eq!(user(&["&*", "&a"]), Err(RuleError::ChannelAfterAll));
        assert_eq!(user(&["allkeys", "~a"]), Err(RuleError::KeyAfterAll));
        assert_eq!(
            merge_selector_args(&[b"(~a", b"+get"]),
            Err(0),
            "an unclosed selector names its first argument"
        );
        assert_eq!(
            merge_selector_args(&[b"on", b"(~a", b"+get)", b"off"]),
            Ok(vec![b"on".to_vec(), b"(~a +get)".to_vec(), b"off".to_vec()])
        );
    }

    #[test]
    fn passwords_hash_like_redis() {
        let u = user(&[">p1", ">p1", ">p2"]).unwrap();
        assert_eq!(u.passwords.len(), 2);
        assert_eq!(
            &u.passwords[0][..],
            b"f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a"
        );
        assert!(hashes_equal(&hash_password(b"p2"), &u.passwords[1]));
        assert!(!u.nopass());
    }

    use proptest::prelude::*;

    const VOCABULARY: &[&str] = &[
        "on",
        "off",
        "nopass",
        "resetpass",
        ">p1",
        ">p2",
        "<p1",
        "reset",
        "allkeys",
        "resetkeys",
        "~k*",
        "%R~r*",
        "%W~w*",
        "%RW~x",
        "allchannels",
        "resetchannels",
        "&news.*",
        "&a",
        "+@all",
        "-@all",
        "+@read",
        "-@write",
        "+@hash",
        "-@dangerous",
        "+@fast",
        "-@slow",
        "+get",
        "-get",
        "+client|id",
        "-client",
        "+client",
        "+select|0",
        "+select|1",
        "+config|get",
        "-config|set",
        "(~s* +set)",
        "(%R~t +@read -@fast)",
        "clearselectors",
        "skip-sanitize-payload",
        "sanitize-payload",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// What ACL LIST prints loads back (through the ACL file parser) as the same user.
        #[test]
        fn descriptions_load_back(rules in proptest::collection::vec(proptest::sample::select(VOCABULARY), 0..12), all in any::<bool>()) {
            let mut u = User::new(b"u", all);
            for r in &rules {
                let _ = u.apply(cat(), r.as_bytes(), all);
            }
            let line = [&b"user u "[..], &u.describe(cat())].concat();
            let users = crate::acl::parse_acl_file(&line, "t", all).unwrap();
            let back = &users[&b"u"[..]];
            prop_assert_eq!(back.describe(cat()), u.describe(cat()));
            prop_assert_eq!(back.root.commands, u.root.commands);
            prop_assert_eq!(&back.root.keys, &u.root.keys);
            prop_assert_eq!(&back.passwords, &u.passwords);
            prop_assert_eq!(back.selectors.len(), u.selectors.len());
        }
    }

    /// Every description applies back to the same bitmap (Redis aborts when it would not).
    #[test]
    fn descriptions_round_trip() {
        for rules in [
            &["+@all", "-@dangerous", "+flushall"][..],
            &["-@all", "+@read", "-@fast", "+get", "+client|id"],
            &["+@all", "-@read", "+@hash", "-hget"],
            &["+@write", "+@sortedset", "-zadd", "+select|1"],
        ] {
            let u = user(rules).unwrap();
            let text = u.root.describe_commands(cat());
            let mut back = Selector::new(true, false);
            for op in text.split(|&c| c == b' ') {
                back.apply(cat(), op).unwrap();
            }
            let text = String::from_utf8_lossy(&text);
            assert_eq!(back.commands, u.root.commands, "{rules:?} -> {text}");
            assert_eq!(back.firstargs, u.root.firstargs, "{text}");
        }
    }
}
