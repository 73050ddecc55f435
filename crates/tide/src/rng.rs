//! A tiny deterministic PRNG (SplitMix64) and integer-only draws, so the generator gives the
//! same stream on every run and machine: no floating point, no wall clock, no OS entropy.

/// SplitMix64 (Steele, Lea and Flood, 2014): one `u64` of state, full period 2^64.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// An independent stream for `purpose` derived from `seed` (so adding draws to one process
    /// never shifts another).
    pub fn stream(seed: u64, purpose: u64) -> Self {
        SplitMix64::new(mix(seed, purpose))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; `0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (requires `lo <= hi`).
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.saturating_sub(lo).max(0) as u64 + 1;
        lo + self.below(span) as i64
    }

    /// True with probability `threshold / 2^64`.
    pub fn chance(&mut self, threshold: u64) -> bool {
        self.next_u64() < threshold
    }

    /// Pick an index with integer `weights` (all zero: index 0).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        0
    }
}

/// Hash two words into one (a SplitMix64 step): for per-item sub-seeds.
pub fn mix(a: u64, b: u64) -> u64 {
    SplitMix64::new(a ^ b.wrapping_mul(GOLDEN).rotate_left(17)).next_u64()
}

/// `num / den` as a probability threshold on the 2^64 scale (saturating at certainty).
pub fn threshold(num: u128, den: u128) -> u64 {
    if den == 0 {
        return 0;
    }
    let t = (num << 64) / den;
    u64::try_from(t).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // First outputs of SplitMix64 seeded with 1234567 (from the reference implementation).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
    }

    #[test]
    fn draws_stay_in_range() {
        let mut r = SplitMix64::new(7);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let x = r.between(-3, 3);
            assert!((-3..=3).contains(&x));
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(threshold(1, 1), u64::MAX);
        assert_eq!(threshold(1, 2), 1 << 63);
    }
}
