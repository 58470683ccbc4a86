//! LZF, as Redis 7.0 builds it (`lzf_c.c`, `lzf_d.c`, `lzfP.h`: HLOG 16, VERY_FAST,
//! CHECK_INPUT).
//!
//! `compress` is a port of `lzf_compress` step for step, so that a DUMP here compresses to
//! the bytes Redis writes. One difference: Redis leaves its hash table uninitialized, so a
//! stale slot from an earlier call may, rarely, offer it a different (still valid) match;
//! here every call starts from an empty table.
//!
//! Compressed format: `000LLLLL` + L+1 literal bytes; `LLLooooo oooooooo` a back reference
//! of L+2 bytes at offset o+1; `111ooooo LLLLLLLL oooooooo` one of L+9 bytes.

use std::cell::RefCell;

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

/// The hash table of `compress`: per slot, the call's generation (high 32 bits) and the
/// input position plus one (low 32 bits; inputs are shorter than 4 GiB). A slot of another
/// generation is empty, so the table is never cleared.
struct Table {
    slots: Vec<u64>,
    generation: u32,
}

thread_local! {
    static TABLE: RefCell<Table> = const { RefCell::new(Table { slots: Vec::new(), generation: 0 }) };
}

fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// Compresses `input` into at most `out_len` bytes, as `lzf_compress` does; `None` when it
/// does not fit (or either length is 0, or the input is 4 GiB or more).
pub fn compress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    if input.is_empty() || out_len == 0 || u32::try_from(input.len()).is_err() {
        return None;
    }
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if t.slots.is_empty() {
            t.slots = vec![0; HSIZE];
        }
        t.generation = t.generation.wrapping_add(1);
        if t.generation == 0 {
            // Wrapped: clear once so that no slot of the old generation 1 passes for new.
            t.slots.iter_mut().for_each(|s| *s = 0);
            t.generation = 1;
        }
        let generation = t.generation;
        compress_with(input, out_len, &mut t.slots, generation)
    })
}

fn compress_with(
    input: &[u8],
    out_len: usize,
    htab: &mut [u64],
    generation: u32,
) -> Option<Vec<u8>> {
    let in_len = input.len();
    let at = |i: usize| -> u32 { u32::from(input.get(i).copied().unwrap_or(0)) };
    let mut out = vec![0u8; out_len];
    // `op` is the next output byte; the literal run's header is at `op - lit - 1`.
    let mut op: usize = 1;
    let mut ip: usize = 0;
    let mut lit: usize = 0;
    let mut hval: u32 = (at(0) << 8) | at(1);
    let set_slot = |htab: &mut [u64], h: u32, pos: usize| {
        if let Some(s) = htab.get_mut(idx(h)) {
            *s = (u64::from(generation) << 32) | (pos as u64 + 1);
        }
    };
    while ip + 2 < in_len {
        hval = (hval << 8) | at(ip + 2);
        let slot = htab.get(idx(hval)).copied().unwrap_or(0);
        let reference = if slot >> 32 == u64::from(generation) && slot & 0xffff_ffff != 0 {
            Some((slot & 0xffff_ffff) as usize - 1)
        } else {
            None
        };
        set_slot(htab, hval, ip);
        let matched = reference.filter(|&r| {
            r < ip && ip - r - 1 < MAX_OFF && r > 0 && input.get(r..r + 3) == input.get(ip..ip + 3)
        });
        if let Some(r) = matched {
            let off = ip - r - 1;
            let mut len: usize = 2;
            let maxlen = (in_len - ip - len).min(MAX_REF);
            // "first a faster conservative test", then "the exact but rare test".
            if op + 3 + 1 >= out_len && op - usize::from(lit == 0) + 3 + 1 >= out_len {
                return None;
            }
            set_byte(&mut out, op - lit - 1, (lit as u8).wrapping_sub(1));
            op -= usize::from(lit == 0);
            let same =
                |k: usize| input.get(r + k).is_some() && input.get(r + k) == input.get(ip + k);
            let mut done = false;
            if maxlen > 16 {
                for _ in 0..16 {
                    len += 1;
                    if !same(len) {
                        done = true;
                        break;
                    }
                }
            }
            if !done {
                loop {
                    len += 1;
                    if !(len < maxlen && same(len)) {
                        break;
                    }
                }
            }
            len -= 2;
            ip += 1;
            if len < 7 {
                set_byte(&mut out, op, ((off >> 8) + (len << 5)) as u8);
                op += 1;
            } else {
                set_byte(&mut out, op, ((off >> 8) + (7 << 5)) as u8);
                set_byte(&mut out, op + 1, (len - 7) as u8);
                op += 2;
            }
            set_byte(&mut out, op, off as u8);
            op += 1;
            lit = 0;
            op += 1;
            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            ip -= 2;
            hval = (at(ip) << 8) | at(ip + 1);
            hval = (hval << 8) | at(ip + 2);
            set_slot(htab, hval, ip);
            ip += 1;
            hval = (hval << 8) | at(ip + 2);
            set_slot(htab, hval, ip);
            ip += 1;
        } else {
            if op >= out_len {
                return None;
            }
            lit += 1;
            set_byte(&mut out, op, at(ip) as u8);
            op += 1;
            ip += 1;
            if lit == MAX_LIT {
                set_byte(&mut out, op - lit - 1, (lit - 1) as u8);
                lit = 0;
                op += 1;
            }
        }
    }
    if op + 3 > out_len {
        return None;
    }
    while ip < in_len {
        lit += 1;
        set_byte(&mut out, op, at(ip) as u8);
        op += 1;
        ip += 1;
        if lit == MAX_LIT {
            set_byte(&mut out, op - lit - 1, (lit - 1) as u8);
            lit = 0;
            op += 1;
        }
    }
    set_byte(&mut out, op - lit - 1, (lit as u8).wrapping_sub(1));
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

fn set_byte(out: &mut [u8], i: usize, v: u8) {
    if let Some(b) = out.get_mut(i) {
        *b = v;
    }
}

/// Decompresses `input` into exactly `out_len` bytes (`lzf_decompress` with CHECK_INPUT,
/// and Redis's check that the result has the declared length); `None` on any mismatch.
/// The output grows as bytes are produced: a declared length the input cannot produce is
/// never allocated.
pub fn decompress(input: &[u8], out_len: usize) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len.min(input.len().saturating_mul(4)));
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(*input.get(i)?);
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            if out.len() + n > out_len {
                return None;
            }
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
            if out.len() + len + 2 > out_len {
                return None;
            }
            let start = out.len().checked_sub(back)?;
            for k in 0..len + 2 {
                let b = *out.get(start + k)?;
                out.push(b);
            }
        }
    }
    (out.len() == out_len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_does_not_fit() {
        let text =
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let c = compress(text, text.len() - 4).unwrap();
        assert!(c.len() < 10, "{c:?}");
        assert_eq!(decompress(&c, text.len()).unwrap(), text.to_vec());
        assert_eq!(decompress(&c, text.len() + 1), None);
        assert_eq!(decompress(&c, text.len() - 1), None);
        assert_eq!(compress(b"abcdefghijklmnopqrstuvwxyz", 22), None);
        assert_eq!(compress(b"", 10), None);
    }

    #[test]
    fn matches_redis_bytes() {
        // What Redis 7.0.15 DUMPs for SET k <40 x 'a'> and for "hello world" three times:
        // the literal at position 0 never starts a back reference (`ref > in_data`).
        let c = compress(&[b'a'; 40], 36).unwrap();
        assert_eq!(c, b"\x01aa\xe0\x1b\x00\x01aa".to_vec());
        assert_eq!(decompress(&c, 40).unwrap(), vec![b'a'; 40]);
        let text = b"hello world hello world hello world";
        let c = compress(text, text.len() - 4).unwrap();
        assert_eq!(c, b"\x0chello world h\xe0\x0b\x0b\x01ld".to_vec());
    }

    #[test]
    fn hostile_inputs_are_refused() {
        // A back reference before the start, a literal past the input, a length beyond the
        // declared one.
        assert_eq!(decompress(&[0x20, 0x00], 3), None);
        assert_eq!(decompress(&[0x05, b'a'], 6), None);
        assert_eq!(decompress(&[0x00, b'a', 0xe0, 0xff, 0x00], 100), None);
        assert_eq!(decompress(&[], 0), Some(Vec::new()));
    }
}
