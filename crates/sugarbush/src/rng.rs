//! The season's only source of randomness: SplitMix64 (for seeding and key mixing) and
//! xoshiro256** (for the streams), written out here so the bytes can never change with a
//! dependency upgrade. Every draw is integer arithmetic: no floats, no `exp`/`ln` from a libm
//! that could differ between machines.

/// The SplitMix64 finaliser: a bijection on `u64` (distinct inputs give distinct outputs).
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 (Steele, Lea, Flood 2014), used to seed xoshiro.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
}

/// xoshiro256** 1.0 (Blackman, Vigna 2018).
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A stream seeded through SplitMix64, as the xoshiro authors recommend.
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        Self { s }
    }

    /// An independent stream for one purpose (`tag`) and one entity (`index`) of a season.
    pub(crate) fn stream(seed: u64, tag: u64, index: u64) -> Self {
        let key = mix64(seed ^ 0x5a17_b0c5_0000_0000)
            ^ mix64(tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix64(index));
        Self::from_seed(key)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; `n == 0` gives 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`hi < lo` gives `lo`).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + self.below(span) as i64
    }

    /// True with probability `ppm` parts per million.
    pub(crate) fn chance_ppm(&mut self, ppm: u64) -> bool {
        self.below(1_000_000) < ppm
    }

    /// Picks an index by integer weights.
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            let w = u64::from(*w);
            if x < w {
                return i;
            }
            x -= w;
        }
        weights.len().saturating_sub(1)
    }

    /// Binomial(n, 1/2) by counting coin flips: mean n/2, variance n/4.
    pub(crate) fn coin_flips(&mut self, n: u64) -> u64 {
        let mut left = n;
        let mut heads = 0u64;
        while left >= 64 {
            heads += u64::from(self.next_u64().count_ones());
            left -= 64;
        }
        if left > 0 {
            let mask = (1u64 << left) - 1;
            heads += u64::from((self.next_u64() & mask).count_ones());
        }
        heads
    }

    /// A value in `lo..=hi` skewed towards `lo`: `lo + (hi - lo) * u^power`, `u` uniform.
    /// Integer arithmetic on a 2^20 grid.
    pub(crate) fn skewed(&mut self, lo: i64, hi: i64, power: u32) -> i64 {
        const ONE: u128 = 1 << 20;
        let u = u128::from(self.below(ONE as u64));
        let mut p = ONE;
        for _ in 0..power {
            p = p * u / ONE;
        }
        lo + (((hi - lo) as u128 * p) / ONE) as i64
    }

    /// A triangular-ish value in `lo..=hi`: the mean of two uniforms.
    pub(crate) fn hump(&mut self, lo: i64, hi: i64) -> i64 {
        let a = self.range(lo, hi);
        let b = self.range(lo, hi);
        (a + b) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_values() {
        // Reference outputs of SplitMix64 seeded with 1234567 (from the published C code).
        let mut sm = SplitMix64::new(1_234_567);
        assert_eq!(sm.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(sm.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(sm.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn xoshiro_is_a_pure_function_of_its_seed() {
        let a: Vec<u64> = {
            let mut r = Rng::stream(7, 1, 2);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Rng::stream(7, 1, 2);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = Rng::stream(7, 1, 3);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut r = Rng::from_seed(42);
        for _ in 0..10_000 {
            let x = r.range(-5, 5);
            assert!((-5..=5).contains(&x));
            let y = r.skewed(10, 20, 3);
            assert!((10..=20).contains(&y));
            let z = r.hump(3, 9);
            assert!((3..=9).contains(&z));
            assert!(r.below(7) < 7);
            assert!(r.weighted(&[1, 0, 5]) != 1);
        }
        assert_eq!(r.coin_flips(0), 0);
        assert!(r.coin_flips(100) <= 100);
    }

    #[test]
    fn mix64_is_injective_on_a_sample() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..10_000u64 {
            assert!(seen.insert(mix64(i)));
        }
    }
}
