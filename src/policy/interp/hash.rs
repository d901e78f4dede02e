//! The stable hash and random source of decisions. Both are fixed algorithms with
//! published constants so that the JIT (or a host in another language) can reproduce
//! every bucket and draw bit for bit.

/// FNV-1a, 64-bit (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Fnv1a {
    /// A fresh hasher.
    pub fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a::new()
    }
}

/// The sticky split bucket in `0..10_000`:
/// `FNV-1a-64(seed as 8 little-endian bytes ‖ rule name ‖ 0xFF ‖ key) mod 10_000`.
pub fn bucket(seed: u64, rule: &str, key: &str) -> u32 {
    let mut h = Fnv1a::new();
    h.write(&seed.to_le_bytes());
    h.write(rule.as_bytes());
    h.write(&[0xff]);
    h.write(key.as_bytes());
    (h.finish() % 10_000) as u32
}

/// SplitMix64 (Steele, Lea, Flood 2014): the decision's random source, seeded per
/// decision. `random` splits draw `next() % 10_000`; `weighted`/`sample` picks draw
/// [`SplitMix64::unit`].
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A float in [0, 1): the top 53 bits of [`SplitMix64::next_u64`] times 2^-53.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_vectors() {
        let mut h = Fnv1a::new();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv1a::new();
        h.write(b"foobar");
        assert_eq!(h.finish(), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn splitmix_matches_reference() {
        // First output for seed 0 (reference implementation by Vigna).
        assert_eq!(SplitMix64::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        let u = SplitMix64::new(7).unit();
        assert!((0.0..1.0).contains(&u));
    }

    #[test]
    fn buckets_are_stable_and_spread() {
        assert_eq!(bucket(0, "r", "k"), bucket(0, "r", "k"));
        let mut hits = 0;
        for i in 0..10_000 {
            if bucket(0, "search", &format!("key-{i}")) < 500 {
                hits += 1;
            }
        }
        assert!((400..600).contains(&hits), "{hits}");
    }
}
