//! Redis Cluster's key-to-slot function and the slot-to-shard table.
//!
//! `slot(key)` is CRC16/XMODEM of the key (or of its `{hash tag}` when the braces hold at
//! least one byte) modulo 16384. `SlotMap` says which shard owns each slot.

/// Number of hash slots (Redis Cluster).
pub const SLOTS: usize = 16384;

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The hash slot of `key`, honouring `{hash tags}` as Redis does.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    CRC16.checksum(hashed) % SLOTS as u16
}

/// The part of `key` between the first '{' and the next '}', when it is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    if close == 0 { None } else { rest.get(..close) }
}

/// Which shard owns each slot.
#[derive(Debug, Clone)]
pub struct SlotMap {
    // Invariant: exactly SLOTS entries, each < the number of shards.
    owner: Vec<u8>,
}

impl SlotMap {
    /// Slots split into `shards` contiguous ranges, as Redis Cluster's default layout.
    pub fn contiguous(shards: u8) -> SlotMap {
        let n = usize::from(shards.max(1));
        let owner = (0..SLOTS).map(|s| (s * n / SLOTS) as u8).collect();
        SlotMap { owner }
    }

    pub fn shard_of_slot(&self, slot: u16) -> u8 {
        self.owner.get(usize::from(slot)).copied().unwrap_or(0)
    }

    pub fn shard_of_key(&self, key: &[u8]) -> u8 {
        self.shard_of_slot(slot(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_slots_match_redis() {
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "empty first tag: whole key hashed"
        );
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn contiguous_map_covers_all_shards() {
        let m = SlotMap::contiguous(4);
        assert_eq!(m.shard_of_slot(0), 0);
        assert_eq!(m.shard_of_slot(16383), 3);
        assert_eq!(SlotMap::contiguous(1).shard_of_key(b"x"), 0);
    }
}
