//! Access control as Redis 7.0 does it: users, authentication (AUTH, HELLO AUTH,
//! `requirepass`), permission checks before every command, the ACL log, and the ACL file.
//!
//! Users are per site and never replicated: each site has its own `default` user and its
//! own ACL file (docs/replication.md). A connection holds a `UserRef`; ACL SETUSER changes
//! the user in place, so every connection authenticated as it sees the new rules at its
//! next command. The check costs one `Cell<bool>` load for a user that may run everything
//! (the default user), and walks the user's selectors otherwise.
//!
//! # Layout
//! - `rules`: the rule language (users, selectors, descriptions), pure data.
//! - here: the shard's users, `authenticate`, `check`, the ACL log, the ACL file.

pub mod rules;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::OnceLock;

use rules::{Catalog, ChannelArgs, RuleError, Selector, User};

/// The catalog of every command ACL rules can name, built once from the command table.
pub fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| match Catalog::new(&crate::cmd::table().metas) {
        Ok(c) => c,
        // The shipped table is checked by a unit test; an inconsistent build is a bug.
        Err(e) => panic!("ACL catalog: {e}"),
    })
}

/// A user as connections hold it.
#[derive(Debug)]
pub struct UserSlot {
    user: RefCell<User>,
    /// Cached `User::is_unrestricted`, refreshed on every change: the check's fast path.
    unrestricted: Cell<bool>,
}

/// Shared handle on a user (ACL SETUSER updates it in place).
pub type UserRef = Rc<UserSlot>;

impl UserSlot {
    fn new(user: User) -> UserRef {
        let unrestricted = user.is_unrestricted();
        Rc::new(UserSlot {
            user: RefCell::new(user),
            unrestricted: Cell::new(unrestricted),
        })
    }

    pub fn get(&self) -> std::cell::Ref<'_, User> {
        self.user.borrow()
    }

    fn set(&self, user: User) {
        self.unrestricted.set(user.is_unrestricted());
        *self.user.borrow_mut() = user;
    }

    /// Whether the user may run every command on every key and channel: no check needed.
    pub fn is_unrestricted(&self) -> bool {
        self.unrestricted.get()
    }

    /// The user's name, as CLIENT LIST and ACL WHOAMI show it.
    pub fn name(&self) -> Vec<u8> {
        self.user.borrow().name.clone()
    }
}

/// Why a command was refused, with the argv index of the key or channel (Redis's
/// `ACL_DENIED_*`, ordered as Redis ranks them when it picks the error to report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

impl Denied {
    fn rank(self) -> (u8, usize) {
        match self {
            Denied::Command => (1, 0),
            Denied::Key(i) => (2, i),
            Denied::Channel(i) => (4, i),
        }
    }

    /// The `-NOPERM` text of a refused command (`processCommand`).
    pub fn noperm_text(self, fullname: &str) -> String {
        match self {
            Denied::Command => {
                format!("NOPERM this user has no permissions to run the '{fullname}' command")
            }
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".to_string(),
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".to_string(),
        }
    }

    /// What a script's refused command says after "The user executing the script "
    /// (`getAclErrorMessage`).
    pub fn script_reason(self) -> &'static str {
        match self {
            Denied::Command => "can't run this command or subcommand",
            Denied::Key(_) => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        }
    }

    /// The reason EXEC gives when the rules changed after queuing (`execCommand`).
    pub fn exec_reason(self) -> &'static str {
        match self {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        }
    }
}

/// Whether `user` may run command `id` with `argv` (Redis's `ACLCheckAllUserCommandPerm`):
/// the first selector that allows it wins; otherwise the highest-ranked refusal.
pub fn check(cat: &Catalog, user: &User, id: usize, argv: &[&[u8]]) -> Result<(), Denied> {
    let Some(entry) = cat.get(id) else {
        return Err(Denied::Command);
    };
    let mut keys: Option<Vec<crate::cmd::command::KeyRef>> = None;
    let mut worst: Option<Denied> = None;
    for s in user.all_selectors() {
        match check_selector(s, entry, id, argv, &mut keys) {
            Ok(()) => return Ok(()),
            Err(d) => {
                if worst.is_none_or(|w| d.rank() > w.rank()) {
                    worst = Some(d);
                }
            }
        }
    }
    Err(worst.unwrap_or(Denied::Command))
}

/// Redis's `ACLUserCheckCmdWithUnrestrictedKeyAccess` for reads: some selector allows the
/// command and reading every key (`allkeys`, or a read pattern `*`). SORT's BY and GET
/// need it.
pub fn may_read_every_key(cat: &Catalog, user: &User, id: usize, argv: &[&[u8]]) -> bool {
    let Some(entry) = cat.get(id) else {
        return false;
    };
    let mut keys = None;
    user.all_selectors().any(|s| {
        check_selector(s, entry, id, argv, &mut keys).is_ok()
            && (s.allkeys || s.keys.iter().any(|k| k.perm.read && k.pattern == b"*"))
    })
}

/// Redis's `ACLSelectorCheckCmd`. `keys` caches the command's keys across selectors.
fn check_selector(
    s: &Selector,
    entry: &rules::CatalogEntry,
    id: usize,
    argv: &[&[u8]],
    keys: &mut Option<Vec<crate::cmd::command::KeyRef>>,
) -> Result<(), Denied> {
    use crate::cmd::table::Flags;
    if !s.allcommands && !entry.meta.flags.contains(Flags::NO_AUTH) && !s.commands.get(id) {
        let idx = if entry.parent.is_some() { 2 } else { 1 };
        let arg = argv.get(idx).copied();
        let allowed = argv.len() >= 2
            && s.firstargs.get(&id).is_some_and(|list| {
                arg.is_some_and(|a| list.iter().any(|f| f.eq_ignore_ascii_case(a)))
            });
        if !allowed {
            return Err(Denied::Command);
        }
    }
    let has_keys = entry.key_specs.iter().any(|k| !k.has_flag("not_key"))
        || matches!(entry.name, "sort" | "sort_ro");
    if !s.allkeys && has_keys {
        let found = keys.get_or_insert_with(|| {
            crate::cmd::command::keys_with_specs(entry.meta, &entry.key_specs, argv)
                .unwrap_or_default()
        });
        for (pos, flags) in found.iter() {
            let key = argv.get(*pos).copied().unwrap_or_default();
            let read = flags.contains(&"access");
            let write = flags
                .iter()
                .any(|f| matches!(*f, "insert" | "delete" | "update"));
            let ok = s.keys.iter().any(|p| {
                (!read || p.perm.read)
                    && (!write || p.perm.write)
                    && crate::glob::matches(&p.pattern, key, false)
            });
            if !ok {
                return Err(Denied::Key(*pos));
            }
        }
    }
    if !s.allchannels && entry.channels != ChannelArgs::None {
        let (from, to) = match entry.channels {
            ChannelArgs::Publish => (1, 2.min(argv.len())),
            _ => (1, argv.len()),
        };
        let pattern = entry.channels == ChannelArgs::PatternSubscribe;
        for i in from..to {
            let ch = argv.get(i).copied().unwrap_or_default();
            if !channel_allowed(&s.channels, ch, pattern) {
                return Err(Denied::Channel(i));
            }
        }
    }
    Ok(())
}

/// Redis's `ACLCheckChannelAgainstList`: a pattern subscription must equal one of the
/// user's patterns; a channel must match one.
fn channel_allowed(list: &[Vec<u8>], channel: &[u8], is_pattern: bool) -> bool {
    list.iter().any(|p| {
        if is_pattern {
            p == channel
        } else {
            crate::glob::matches(p, channel, false)
        }
    })
}

/// Whether `user` may hold these subscriptions (after ACL SETUSER changed its channels;
/// Redis's `ACLKillPubsubClientsIfNeeded`).
pub fn subscriptions_allowed(user: &User, subs: &crate::client::Subscriptions) -> bool {
    if user.all_selectors().any(|s| s.allchannels) {
        return true;
    }
    let all: Vec<Vec<u8>> = user
        .all_selectors()
        .flat_map(|s| s.channels.iter().cloned())
        .collect();
    subs.patterns.iter().all(|p| channel_allowed(&all, p, true))
        && subs
            .channels
            .iter()
            .chain(subs.shard_channels.iter())
            .all(|c| channel_allowed(&all, c, false))
}

/// What the ACL log records (Redis's `ACL_DENIED_*` plus `auth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the refused command ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Multi,
    /// A command a script ran (`redis.call`).
    Lua,
}

impl Context {
    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// One ACL LOG entry.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Entries closer in time than this and otherwise equal are counted as one (Redis's
/// `ACL_LOG_GROUPING_MAX_TIME_DELTA`).
pub const LOG_GROUPING_MS_MAX: u64 = 60_000;
/// Most recent entries a new one is compared with (Redis scans 10).
pub const LOG_MATCH_SCAN_MAX: usize = 10;

/// The ACL log, newest first, at most `acllog-max-len` entries.
#[derive(Debug, Default)]
pub struct AclLog {
    pub entries: VecDeque<LogEntry>,
}

impl AclLog {
    /// Redis's `addACLLogEntry`: bumps a matching recent entry or adds one, then trims.
    pub fn add(&mut self, entry: LogEntry, len_max: usize) {
        let found = self.entries.iter().take(LOG_MATCH_SCAN_MAX).position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.ctime_ms.abs_diff(entry.ctime_ms) <= LOG_GROUPING_MS_MAX
                && e.object == entry.object
                && e.username == entry.username
        });
        if let Some(i) = found {
            if let Some(mut e) = self.entries.remove(i) {
                e.count += 1;
                e.ctime_ms = entry.ctime_ms;
                e.client_info = entry.client_info;
                self.entries.push_front(e);
            }
            return;
        }
        self.entries.push_front(entry);
        self.entries.truncate(len_max);
    }
}

/// Why ACL LOAD or the ACL file at start failed: Redis's texts, one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AclFileError(pub String);

/// The shard's users and ACL log.
#[derive(Debug)]
pub struct Acl {
    /// By name: ACL LIST and USERS list them in this (byte) order, as Redis's radix tree.
    users: BTreeMap<Vec<u8>, UserRef>,
    default: UserRef,
    pub log: AclLog,
}

impl Default for Acl {
    fn default() -> Acl {
        Acl::new()
    }
}

impl Acl {
    /// Only the default user (`on nopass ~* &* +@all`).
    pub fn new() -> Acl {
        let default = UserSlot::new(User::default_user(catalog()));
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), default.clone());
        Acl {
            users,
            default,
            log: AclLog::default(),
        }
    }

    pub fn default_user(&self) -> &UserRef {
        &self.default
    }

    pub fn user(&self, name: &[u8]) -> Option<&UserRef> {
        self.users.get(name)
    }

    pub fn users(&self) -> impl Iterator<Item = &UserRef> {
        self.users.values()
    }

    /// Whether a new connection starts authenticated: the default user needs no password
    /// and is on (Redis's `clientSetDefaultAuth`).
    pub fn default_is_open(&self) -> bool {
        let d = self.default.get();
        d.nopass() && !d.disabled()
    }

    /// Redis's `ACLCheckUserCredentials`: the user, when it exists, is on and the password
    /// matches one of its hashes (all compared, none with an early exit) or it is nopass.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<UserRef> {
        let slot = self.users.get(name)?;
        {
            let u = slot.get();
            if u.disabled() {
                return None;
            }
            if !u.nopass() {
                let hash = rules::hash_password(password);
                let matched = u
                    .passwords
                    .iter()
                    .fold(false, |m, p| rules::hashes_equal(p, &hash) | m);
                if !matched {
                    return None;
                }
            }
        }
        Some(slot.clone())
    }

    /// Redis's `ACLStringSetUser`: applies `args` (selectors merged) to a copy of the user
    /// (a new one when missing), then stores it, or changes nothing and returns the error
    /// text. The second value says whether the user's channels shrank (its subscribers
    /// must be checked).
    pub fn set_user(
        &mut self,
        name: &[u8],
        args: &[&[u8]],
        pubsub_all: bool,
    ) -> Result<bool, String> {
        let merged = rules::merge_selector_args(args).map_err(|i| {
            format!(
                "Unmatched parenthesis in acl selector starting at '{}'.",
                String::from_utf8_lossy(args.get(i).copied().unwrap_or_default())
            )
        })?;
        let existing = self.users.get(name).cloned();
        let mut user = match &existing {
            Some(slot) => slot.get().clone(),
            None => User::new(name, pubsub_all),
        };
        for op in &merged {
            user.apply(catalog(), op, pubsub_all).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {e}",
                    String::from_utf8_lossy(op)
                )
            })?;
        }
        let channels_changed = existing
            .as_ref()
            .is_some_and(|slot| channels_of(&slot.get()) != channels_of(&user));
        match existing {
            Some(slot) => slot.set(user),
            None => {
                self.users.insert(name.to_vec(), UserSlot::new(user));
            }
        }
        Ok(channels_changed)
    }

    /// Removes a user (never `default`); its connections must be closed by the caller.
    pub fn remove_user(&mut self, name: &[u8]) -> Option<UserRef> {
        if name == b"default" {
            return None;
        }
        self.users.remove(name)
    }

    /// `requirepass`: the default user's passwords become this one (or nopass when empty).
    pub fn set_requirepass(&mut self, password: &[u8]) {
        let mut u = self.default.get().clone();
        let _ = u.apply(catalog(), b"resetpass", false);
        let mut op = b">".to_vec();
        op.extend_from_slice(password);
        let _ = if password.is_empty() {
            u.apply(catalog(), b"nopass", false)
        } else {
            u.apply(catalog(), &op, false)
        };
        self.default.set(u);
    }

    /// ACL LIST lines (`user <name> <rules>`), in name order.
    pub fn list(&self) -> Vec<Vec<u8>> {
        self.users
            .values()
            .map(|slot| {
                let u = slot.get();
                [&b"user "[..], &u.name, b" ", &u.describe(catalog())].concat()
            })
            .collect()
    }

    /// Redis's `ACLLoadFromFile`: parses the whole file into a fresh set of users; on any
    /// error nothing changes and the error lists every problem. Returns the users that
    /// were replaced (their connections must be closed), the default user excepted: it
    /// keeps its identity and takes the file's rules (or the built-in ones when the file
    /// does not name it).
    pub fn load_file(
        &mut self,
        path: &std::path::Path,
        pubsub_all: bool,
    ) -> Result<Vec<UserRef>, AclFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read(path).map_err(|e| {
            AclFileError(format!(
                "Error loading ACLs, opening file '{shown}': {}",
                io_text(&e)
            ))
        })?;
        let users = parse_acl_file(&text, &shown, pubsub_all)?;
        let mut old = std::mem::take(&mut self.users);
        let new_default = users
            .get(b"default".as_slice())
            .cloned()
            .unwrap_or_else(|| User::default_user(catalog()));
        self.default.set(new_default);
        old.remove(b"default".as_slice());
        for (name, user) in users {
            if name == b"default" {
                continue;
            }
            self.users.insert(name, UserSlot::new(user));
        }
        self.users.insert(b"default".to_vec(), self.default.clone());
        Ok(old.into_values().collect())
    }

    /// Redis's `ACLSaveToFile`: every user as a `user` line, written to a temporary file
    /// then renamed over `path`.
    pub fn save_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut text: Vec<u8> = Vec::new();
        for line in self.list() {
            text.extend_from_slice(&line);
            text.push(b'\n');
        }
        let tmp = path.with_file_name(format!(
            "{}.tmp-{}-{}",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id(),
            crate::time::wall_ms()
        ));
        let written = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// The channel rules of every selector, to tell whether a change may revoke subscriptions.
fn channels_of(u: &User) -> Vec<(bool, Vec<Vec<u8>>)> {
    u.all_selectors()
        .map(|s| (s.allchannels, s.channels.clone()))
        .collect()
}

/// `strerror`'s text of the common cases, as Redis prints it.
fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".to_string(),
        _ => e.to_string(),
    }
}

/// Most bytes of an ACL file read (a file of users, not of data).
pub const ACL_FILE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Parses an ACL file as Redis's `ACLLoadFromFile` does: `user <name> <rules...>` lines
/// (split on single spaces), blank lines skipped, every error collected.
pub fn parse_acl_file(
    text: &[u8],
    shown: &str,
    pubsub_all: bool,
) -> Result<BTreeMap<Vec<u8>, User>, AclFileError> {
    if text.len() > ACL_FILE_BYTES_MAX {
        return Err(AclFileError(format!(
            "{shown}: larger than {ACL_FILE_BYTES_MAX} bytes"
        )));
    }
    let mut errors = String::new();
    let mut users: BTreeMap<Vec<u8>, User> = BTreeMap::new();
    for (i, raw) in text.split(|&c| c == b'\n').enumerate() {
        let linenum = i + 1;
        let line = trim(raw, b" \t\r\n");
        if line.is_empty() {
            continue;
        }
        let argv: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        let (Some(&kw), Some(&name)) = (argv.first(), argv.get(1)) else {
            errors.push_str(&format!(
                "{shown}:{linenum} should start with user keyword followed by the username. "
            ));
            continue;
        };
        if kw != b"user" {
            errors.push_str(&format!(
                "{shown}:{linenum} should start with user keyword followed by the username. "
            ));
            continue;
        }
        if rules::has_spaces(name) {
            errors.push_str(&format!(
                "'{shown}:{linenum}: username '{}' contains invalid characters. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        if users.contains_key(name) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {linenum}. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        let mut user = User::new(name, pubsub_all);
        let rest = argv.get(2..).unwrap_or_default();
        let merged = match rules::merge_selector_args(rest) {
            Ok(m) => m,
            Err(_) => {
                errors.push_str(&format!(
                    "{shown}:{linenum}: Unmatched parenthesis in selector definition."
                ));
                Vec::new()
            }
        };
        let mut syntax_error = false;
        for op in &merged {
            let op = trim(op, b"\t\r\n");
            if let Err(e) = user.apply(catalog(), op, pubsub_all) {
                if e == RuleError::UnknownCommand {
                    errors.push_str(&format!(
                        "{shown}:{linenum}: Error in applying operation '{}': {e}. ",
                        String::from_utf8_lossy(op)
                    ));
                } else if !syntax_error {
                    errors.push_str(&format!("{shown}:{linenum}: {e}. "));
                    syntax_error = true;
                }
            }
        }
        users.insert(name.to_vec(), user);
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
        );
        Err(AclFileError(errors))
    }
}

fn trim<'a>(b: &'a [u8], set: &[u8]) -> &'a [u8] {
    let start = b.iter().position(|c| !set.contains(c)).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !set.contains(c))
        .map_or(start, |e| e + 1);
    b.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> &'static Catalog {
        catalog()
    }

    fn id(name: &str) -> usize {
        cat().lookup(name.as_bytes()).unwrap()
    }

    fn user(rules: &[&str]) -> User {
        let mut u = User::new(b"u", false);
        for r in rules {
            u.apply(cat(), r.as_bytes(), false).unwrap();
        }
        u
    }

    fn run(u: &User, argv: &[&str]) -> Result<(), Denied> {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let name = String::from_utf8_lossy(argv[0]).to_ascii_lowercase();
        let sub = argv
            .get(1)
            .map(|s| format!("{name}|{}", String::from_utf8_lossy(s).to_ascii_lowercase()));
        let cmd = sub
            .filter(|s| cat().lookup(s.as_bytes()).is_some())
            .unwrap_or(name);
        check(cat(), u, id(&cmd), &argv)
    }

    #[test]
    fn the_catalog_fits_the_bitmap() {
        assert!(cat().entries.len() < rules::FUTURE_BIT);
        assert!(cat().lookup(b"CLIENT|LIST").is_some());
        assert!(cat().lookup(b"client|list|x").is_none());
    }

    #[test]
    fn commands_keys_and_channels() {
        let u = user(&[
            "+get",
            "+set",
            "%R~r*",
            "%W~w*",
            "~rw*",
            "&news.*",
            "+publish",
            "+psubscribe",
        ]);
        assert_eq!(run(&u, &["GET", "r1"]), Ok(()));
        assert_eq!(run(&u, &["GET", "w1"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["SET", "w1", "v"]), Ok(()));
        assert_eq!(run(&u, &["SET", "r1", "v"]), Err(Denied::Key(1)));
        // SET ... GET reads too.
        assert_eq!(run(&u, &["SET", "w1", "v", "GET"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["SET", "rw1", "v", "GET"]), Ok(()));
        assert_eq!(run(&u, &["DEL", "rw1"]), Err(Denied::Command));
        assert_eq!(run(&u, &["PUBLISH", "news.a", "m"]), Ok(()));
        assert_eq!(run(&u, &["PUBLISH", "sport", "m"]), Err(Denied::Channel(1)));
        // Pattern subscriptions must equal a pattern of the user.
        assert_eq!(run(&u, &["PSUBSCRIBE", "news.*"]), Ok(()));
        assert_eq!(run(&u, &["PSUBSCRIBE", "news.a"]), Err(Denied::Channel(1)));
        // AUTH and the other no-auth commands need no permission.
        assert_eq!(run(&u, &["AUTH", "x"]), Ok(()));
    }

    #[test]
    fn selectors_and_first_args() {
        let u = user(&["+get", "~a*", "(+set ~b*)", "+select|0"]);
        assert_eq!(run(&u, &["GET", "a1"]), Ok(()));
        assert_eq!(run(&u, &["SET", "b1", "v"]), Ok(()));
        // The root selector says "command", the second "key": the key is reported.
        assert_eq!(run(&u, &["SET", "a1", "v"]), Err(Denied::Key(1)));
        assert_eq!(run(&u, &["SELECT", "0"]), Ok(()));
        assert_eq!(run(&u, &["SELECT", "1"]), Err(Denied::Command));
        let c = user(&["+client|id"]);
        assert_eq!(run(&c, &["CLIENT", "ID"]), Ok(()));
        assert_eq!(run(&c, &["CLIENT", "KILL", "x"]), Err(Denied::Command));
    }

    #[test]
    fn log_groups_and_trims() {
        let mut log = AclLog::default();
        let entry = |obj: &str, t: u64| LogEntry {
            count: 1,
            reason: Reason::Auth,
            context: Context::Toplevel,
            object: obj.as_bytes().to_vec(),
            username: b"u".to_vec(),
            ctime_ms: t,
            client_info: String::new(),
        };
        for t in 0..1000 {
            log.add(entry("AUTH", t), 128);
        }
        assert_eq!(log.entries.len(), 1);
        assert_eq!(log.entries[0].count, 1000);
        // A minute later it is a new entry; the log keeps at most its length.
        log.add(entry("AUTH", 200_000), 128);
        assert_eq!(log.entries.len(), 2);
        for i in 0..200 {
            log.add(entry(&format!("k{i}"), 0), 128);
        }
        assert_eq!(log.entries.len(), 128);
        assert_eq!(log.entries[0].object, b"k199");
    }

    #[test]
    fn acl_file_errors_like_redis() {
        let e = parse_acl_file(b"user a on +bogus\nfoo\n", "f.acl", false).unwrap_err();
        assert_eq!(
            e.0,
            "f.acl:1: Error in applying operation '+bogus': Unknown command or category name in ACL. \
             f.acl:2 should start with user keyword followed by the username. \
             WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
        );
        let ok = parse_acl_file(
            b"user default on nopass ~* &* +@all\n\nuser b on >x (~k +get)\n",
            "f",
            false,
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
    }
}
