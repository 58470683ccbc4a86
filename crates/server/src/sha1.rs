//! SHA-1 (FIPS 180-4): script names (EVAL's sha, `redis.sha1hex`, 40 lowercase hex digits)
//! and DEBUG DIGEST's mixing, as Redis computes them. Not a security primitive here: it only
//! names scripts and fingerprints data.

/// The lowercase hex SHA-1 of `data`.
pub fn sha1_hex(data: &[u8]) -> [u8; 40] {
    hex(sha1(data))
}

/// A 20-byte digest in 40 lowercase hex digits (DEBUG DIGEST writes its own so).
pub fn hex(digest: [u8; 20]) -> [u8; 40] {
    let mut out = [0u8; 40];
    let hex = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest) {
        if let [hi, lo] = pair {
            *hi = hex(byte >> 4);
            *lo = hex(byte & 0xf);
        }
    }
    out
}

/// The 20-byte SHA-1 digest of `data`.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let bit_len = (data.len() as u64).wrapping_mul(8);
    let mut tail = Vec::with_capacity(128);
    let full = data.len() - data.len() % 64;
    tail.extend_from_slice(data.get(full..).unwrap_or_default());
    tail.push(0x80);
    while tail.len() % 64 != 56 {
        tail.push(0);
    }
    tail.extend_from_slice(&bit_len.to_be_bytes());
    let blocks = data.get(..full).unwrap_or_default().chunks_exact(64);
    for block in blocks.chain(tail.chunks_exact(64)) {
        let mut w = [0u32; 80];
        for (wi, word) in w.iter_mut().zip(block.chunks_exact(4)) {
            *wi = u32::from_be_bytes(word.try_into().unwrap_or([0; 4]));
        }
        for i in 16..80 {
            let at = |j: usize| w.get(j).copied().unwrap_or(0);
            let v = (at(i - 3) ^ at(i - 8) ^ at(i - 14) ^ at(i - 16)).rotate_left(1);
            if let Some(slot) = w.get_mut(i) {
                *slot = v;
            }
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (hv, v) in h.iter_mut().zip([a, b, c, d, e]) {
            *hv = hv.wrapping_add(v);
        }
    }
    let mut out = [0u8; 20];
    for (o, hv) in out.chunks_exact_mut(4).zip(h) {
        o.copy_from_slice(&hv.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        // redis.sha1hex vectors from Redis's own test suite, plus multi-block inputs.
        assert_eq!(&sha1_hex(b""), b"da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            &sha1_hex(b"abc"),
            b"a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(
            &sha1_hex(b"Pizza & Mandolino"),
            b"74822d82031af7493c20eefa13bd07ec4fada82f"
        );
        assert_eq!(
            &sha1_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            b"84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            &sha1_hex(&[b'a'; 1000]),
            b"291e9a6c66994949b57ba5e650361e98fc36b1ba"
        );
    }
}
