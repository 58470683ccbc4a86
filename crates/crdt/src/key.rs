//! One key's CRDT state: typed value, TTL register, and the removal context.
