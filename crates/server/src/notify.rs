//! Keyspace notifications, as Redis 7.0's `notify.c`: an event about a key is published on
//! `__keyspace@<db>__:<key>` (message: the event) when class `K` is on and on
//! `__keyevent@<db>__:<event>` (message: the key) when `E` is, if the event's class is among
//! the `notify-keyspace-events` flags.
//!
//! Data side: the shard publishes through its `notify_hook` (installed by the server, which
//! owns Pub/Sub), so expiry, key creation and ops from other sites notify from here without
//! importing the command layer. With notifications off (the default) an event costs one
//! test of a plain field: nothing is built or locked.

use meridian_crdt::string::StrEdit;
use meridian_crdt::{
    Applied, Delta, Effect, Expire, HashOp, HllOp, ListOp, Stamp, StreamOp, ZSetOp,
};

use crate::shard::Shard;

/// `K`: `__keyspace@<db>__:<key>` messages.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: `__keyevent@<db>__:<event>` messages.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (DEL, EXPIRE, RENAME...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key was evicted.
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: a read found no key (not part of `A`, as in Redis).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (Meridian has no modules: accepted, never fired).
pub const MODULE: u32 = 1 << 13;
/// `n`: a key was created (not part of `A`, as in Redis).
pub const NEW: u32 = 1 << 14;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The flags of a `notify-keyspace-events` value (Redis's `keyspaceEventsStringToFlags`);
/// `None` for a character that names no class.
pub fn parse(classes: &str) -> Option<u32> {
    let mut flags = 0;
    for c in classes.chars() {
        flags |= match c {
            'A' => ALL,
            'g' => GENERIC,
            '$' => STRING,
            'l' => LIST,
            's' => SET,
            'h' => HASH,
            'z' => ZSET,
            'x' => EXPIRED,
            'e' => EVICTED,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            't' => STREAM,
            'm' => KEY_MISS,
            'd' => MODULE,
            'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// What `CONFIG GET notify-keyspace-events` shows (Redis's `keyspaceEventsFlagsToString`:
/// with every class of `A` on, `A` alone, so an `n` beside it is not shown).
pub fn to_text(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (f, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & f != 0 {
                s.push(c);
            }
        }
    }
    for (f, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

/// The text a value is kept as in `Config`: `to_text`, plus the `n` that `to_text` hides
/// beside `A`, so the flags read back whole.
pub fn to_stored(flags: u32) -> String {
    let mut s = to_text(flags);
    if flags & ALL == ALL && flags & NEW != 0 {
        s.insert(1, 'n');
    }
    s
}

impl Shard {
    /// Reads the flags from `notify-keyspace-events` (at start and on CONFIG SET).
    pub fn set_notify_flags(&mut self) {
        let flags = parse(&self.config.notify_keyspace_events).unwrap_or(0);
        // Without K or E nothing is ever published: keep every class off, so that no event
        // gets past its first test.
        self.notify_flags = if flags & (KEYSPACE | KEYEVENT) == 0 {
            0
        } else {
            flags
        };
    }

    /// Whether events of `class` are published at all.
    #[inline]
    pub fn notifies(&self, class: u32) -> bool {
        self.notify_flags & class != 0
    }

    /// Publishes `event` about `key` of `db` if its class is on (Redis's
    /// `notifyKeyspaceEvent`).
    #[inline]
    pub fn notify(&self, class: u32, event: &str, db: usize, key: &[u8]) {
        if self.notify_flags & class != 0 {
            self.publish_event(event, db, key);
        }
    }

    /// `event` about `key`, then `del` when the write left the key without a value (the
    /// last element popped or removed), as Redis's type commands do.
    #[inline]
    pub fn notify_then_del(&mut self, class: u32, event: &str, db: usize, key: &[u8]) {
        if self.notify_flags & (class | GENERIC) != 0 {
            self.notify(class, event, db, key);
            if self.notify_flags & GENERIC != 0 && !self.key_exists_quiet(db, key) {
                self.publish_event("del", db, key);
            }
        }
    }

    /// Before a command rebuilds `key` whole over an old value (STORE variants: Redis's
    /// `setKey` overwrites, so no `new` event): turns `n` off while `existed`. Returns the
    /// flags to put back into `notify_flags` after the rebuild.
    pub fn hold_new(&mut self, existed: bool) -> u32 {
        let saved = self.notify_flags;
        if existed {
            self.notify_flags &= !NEW;
        }
        saved
    }

    /// Whether `key` holds a value now (no expiry, statistics or LRU touched).
    pub fn key_exists_quiet(&self, db: usize, key: &[u8]) -> bool {
        self.peek(db, key).is_some()
    }

    #[cold]
    fn publish_event(&self, event: &str, db: usize, key: &[u8]) {
        let Some(hook) = &self.notify_hook else {
            return;
        };
        let now_ms = self.now_ms();
        if self.notify_flags & KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{db}__:").into_bytes();
            channel.extend_from_slice(key);
            (hook.0)(&channel, event.as_bytes(), false, &self.config, now_ms);
        }
        if self.notify_flags & KEYEVENT != 0 {
            let channel = format!("__keyevent@{db}__:{event}");
            (hook.0)(channel.as_bytes(), key, false, &self.config, now_ms);
        }
    }
}

/// What a remote op's events depend on, read before it is applied.
#[derive(Debug, Clone, Copy)]
pub struct RemoteBefore {
    existed: bool,
    expire_at_ms: Option<u64>,
    /// For a stream group write: whether the group existed (create or set id).
    group_existed: bool,
}

impl Shard {
    /// Reads what `notify_remote` needs of `key` before `effect` applies (only called while
    /// some class is on).
    pub fn remote_before<B: AsRef<[u8]>>(
        &self,
        db: usize,
        key: &[u8],
        effect: &Effect<B>,
    ) -> RemoteBefore {
        let hash = self.hash_key(key);
        let state = self
            .dbs
            .get(db)
            .and_then(|d| d.get(hash, key))
            .map(|e| &e.state)
            .filter(|s| !s.is_empty());
        let group_existed = match effect {
            Effect::Stream(StreamOp::GroupEpoch { group, .. }) => state
                .and_then(|s| s.stream())
                .is_some_and(|st| st.group(group.as_ref()).is_some()),
            _ => false,
        };
        RemoteBefore {
            existed: state.is_some(),
            expire_at_ms: state.and_then(|s| s.expire_at_ms()),
            group_existed,
        }
    }

    /// The events of an op another site originated, applied here (docs/replication.md,
    /// "Keyspace notifications"): `new` if it created the key, the event of the command
    /// the op comes from (as far as the op tells it), then `del` if it left the key without
    /// a value. A removal stamped at or after the key's deadline is that site's expiry:
    /// `expired`. An op that changed nothing here notifies nothing.
    pub fn notify_remote<B: AsRef<[u8]>>(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: Stamp,
        effect: &Effect<B>,
        before: RemoteBefore,
        applied: Applied,
    ) {
        if applied.ignored {
            return;
        }
        let exists = self.key_exists_quiet(db, key);
        if !before.existed && exists {
            self.notify(NEW, "new", db, key);
        }
        let event: Option<(u32, &str)> = match effect {
            Effect::Remove { .. } => {
                if before.existed && !exists {
                    let expired = before
                        .expire_at_ms
                        .is_some_and(|at| stamp.hlc.physical_ms() >= at);
                    if expired {
                        self.notify(EXPIRED, "expired", db, key);
                    } else {
                        self.notify(GENERIC, "del", db, key);
                    }
                }
                return;
            }
            Effect::Assign { .. } => Some((STRING, "set")),
            Effect::StrEdit(StrEdit::Append(_)) => Some((STRING, "append")),
            Effect::StrEdit(StrEdit::SetRange { .. }) => Some((STRING, "setrange")),
            // SETBIT and BITFIELD (SET and INCRBY) both notify `setbit` in Redis.
            Effect::StrEdit(StrEdit::SetBits { .. } | StrEdit::IncrBits { .. }) => {
                Some((STRING, "setbit"))
            }
            Effect::Incr {
                delta: Delta::Int(_),
                ..
            } => Some((STRING, "incrby")),
            Effect::Incr {
                delta: Delta::Float(_),
                ..
            } => Some((STRING, "incrbyfloat")),
            Effect::Expire {
                expire: Expire::Persist,
                ..
            } => Some((GENERIC, "persist")),
            Effect::Expire { .. } => Some((GENERIC, "expire")),
            Effect::SetAdd { .. } => Some((SET, "sadd")),
            Effect::SetRem { .. } => Some((SET, "srem")),
            Effect::Hash(HashOp::Set { .. }) => Some((HASH, "hset")),
            Effect::Hash(HashOp::Incr {
                delta: Delta::Int(_),
                ..
            }) => Some((HASH, "hincrby")),
            Effect::Hash(HashOp::Incr { .. }) => Some((HASH, "hincrbyfloat")),
            Effect::Hash(HashOp::Del { .. }) => Some((HASH, "hdel")),
            Effect::ZSet(ZSetOp::Add { .. }) => Some((ZSET, "zadd")),
            Effect::ZSet(ZSetOp::Incr { .. }) => Some((ZSET, "zincr")),
            Effect::ZSet(ZSetOp::Rem { .. }) => Some((ZSET, "zrem")),
            Effect::List(ListOp::Insert { .. }) => {
                Some((LIST, self.list_insert_event(db, key, stamp)))
            }
            Effect::List(ListOp::Remove { .. }) => Some((LIST, "lrem")),
            Effect::List(ListOp::Replace { .. }) => Some((LIST, "lset")),
            // Housekeeping, not a command's: a TTL that timed nothing goes.
            Effect::Hll(HllOp::Cache) | Effect::ExpireRetire { .. } => None,
            Effect::Hll(HllOp::Load { .. }) => Some((STRING, "set")),
            Effect::Hll(_) => Some((STRING, "pfadd")),
            Effect::Stream(op) => stream_event(op, before.group_existed).map(|e| (STREAM, e)),
        };
        if let Some((class, event)) = event {
            self.notify(class, event, db, key);
        }
        if before.existed && !exists {
            self.notify(GENERIC, "del", db, key);
        }
    }

    /// `rpush` when the elements an insert stamped `stamp` end the list, `lpush` when they
    /// head it, else `linsert`.
    fn list_insert_event(&self, db: usize, key: &[u8], stamp: Stamp) -> &'static str {
        let hash = self.hash_key(key);
        let Some(l) = self
            .dbs
            .get(db)
            .and_then(|d| d.get(hash, key))
            .and_then(|e| e.state.list())
        else {
            return "linsert";
        };
        // A push that makes the whole list reads as an RPUSH: the op does not say which end.
        if l.last().is_some_and(|e| e.id.stamp == stamp) {
            "rpush"
        } else if l.first().is_some_and(|e| e.id.stamp == stamp) {
            "lpush"
        } else {
            "linsert"
        }
    }
}

/// The event of a stream op (reads and acknowledgements have none, as in Redis).
fn stream_event<B: AsRef<[u8]>>(op: &StreamOp<B>, group_existed: bool) -> Option<&'static str> {
    match op {
        StreamOp::Add { .. } | StreamOp::Load { .. } => Some("xadd"),
        StreamOp::Trim { .. } => Some("xtrim"),
        StreamOp::Delete { .. } => Some("xdel"),
        StreamOp::SetId { .. } => Some("xsetid"),
        StreamOp::GroupEpoch { .. } if group_existed => Some("xgroup-setid"),
        StreamOp::GroupEpoch { .. } => Some("xgroup-create"),
        StreamOp::GroupDestroy { .. } => Some("xgroup-destroy"),
        StreamOp::ConsumerCreate { .. } => Some("xgroup-createconsumer"),
        StreamOp::ConsumerDelete { .. } => Some("xgroup-delconsumer"),
        StreamOp::Deliver { .. } | StreamOp::Ack { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_text_as_redis() {
        let t = |s: &str| to_text(parse(s).unwrap());
        assert_eq!(t("gKE"), "gKE");
        assert_eq!(t("$lshzxeKE"), "$lshzxeKE");
        assert_eq!(t("KA"), "AK");
        assert_eq!(t("EA"), "AE");
        assert_eq!(t("KEA"), "AKE");
        assert_eq!(t("Am"), "Am");
        assert_eq!(t("An"), "A");
        assert_eq!(t("En"), "nE");
        assert_eq!(t(""), "");
        assert_eq!(t("xgK"), "gxK");
        assert!(parse("Q").is_none());
        assert!(parse("KEA ").is_none());
    }

    #[test]
    fn stored_text_keeps_every_flag() {
        for s in ["", "KEA", "AnKE", "Kn", "mE", "gd$"] {
            let f = parse(s).unwrap();
            assert_eq!(parse(&to_stored(f)), Some(f), "{s}");
        }
        assert_eq!(to_stored(parse("nAK").unwrap()), "AnK");
    }
}
