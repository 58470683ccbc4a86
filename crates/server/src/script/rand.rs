//! Redis's `redisLrand48`/`redisSrand48` (src/rand.c): the generator behind `math.random` in
//! scripts, so that a seed gives the same sequence as in Redis on every platform.

/// The 48-bit linear congruential state.
#[derive(Debug, Clone)]
pub struct Lrand48 {
    x: u64,
}

const A: u64 = 0x5_DEEC_E66D;
const C: u64 = 0xB;
const MASK48: u64 = (1 << 48) - 1;
/// Redis's REDIS_LRAND48_MAX: the values are below 2^31.
pub const LRAND48_MAX: i32 = i32::MAX;

impl Default for Lrand48 {
    fn default() -> Self {
        // X0 X1 X2 of rand.c: 0x1234 0xABCD 0x330E.
        Lrand48 {
            x: 0x1234_ABCD_330E,
        }
    }
}

impl Lrand48 {
    pub fn seed(&mut self, seed: i32) {
        let s = seed as u32;
        self.x = (u64::from(s) << 16) | 0x330E;
    }

    pub fn next_value(&mut self) -> i32 {
        self.x = A.wrapping_mul(self.x).wrapping_add(C) & MASK48;
        (self.x >> 17) as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_lrand48() {
        // glibc's lrand48 with the default seed and after srand48(1) produce these.
        let mut r = Lrand48::default();
        assert_eq!(r.next_value(), 851401618);
        r.seed(1);
        assert_eq!(r.next_value(), 89400484);
        assert_eq!(r.next_value(), 976015093);
    }
}
