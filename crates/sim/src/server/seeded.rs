//! Deterministic draws for the HTTP layer (natural stop lengths, fault decisions, ids).
//!
//! Every draw is a pure function of `(seed, stream, index)`, mixed with SplitMix64
//! (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014), so the
//! same seed and the same request order give the same decisions on every run and platform.

/// SplitMix64's finaliser: a bijective 64-bit mix.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 64-bit draw for `(seed, stream, index)`; `stream` separates independent decisions.
pub(crate) fn draw(seed: u64, stream: u64, index: u64) -> u64 {
    mix64(mix64(seed ^ mix64(stream)) ^ index)
}

/// A uniform draw in `[0, 1)` with 53 bits of precision.
pub(crate) fn unit(seed: u64, stream: u64, index: u64) -> f64 {
    (draw(seed, stream, index) >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform integer in `[lo, hi]` (inclusive); returns `lo` when `hi <= lo`.
pub(crate) fn uniform_u32(seed: u64, stream: u64, index: u64, lo: u32, hi: u32) -> u32 {
    if hi <= lo {
        return lo;
    }
    let span = u64::from(hi - lo) + 1;
    // Multiply-shift maps the 64-bit draw onto the span without a modulo bias worth noting
    // (bias < span / 2^64).
    lo + ((u128::from(draw(seed, stream, index)) * u128::from(span)) >> 64) as u32
}

/// FNV-1a over bytes, for hashing request content into a seed.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let mut seen = [false; 5];
        for i in 0..1000 {
            let v = uniform_u32(7, 1, i, 3, 7);
            assert!((3..=7).contains(&v));
            seen[(v - 3) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(uniform_u32(7, 1, 0, 9, 9), 9);
        assert_eq!(uniform_u32(7, 1, 0, 9, 2), 9);
    }

    #[test]
    fn unit_mean_is_about_one_half() {
        let n = 100_000;
        let mean: f64 = (0..n).map(|i| unit(42, 2, i)).sum::<f64>() / n as f64;
        // Standard error of the mean of U(0,1) over 1e5 draws is 0.0009; allow 5 sigma.
        assert!((mean - 0.5).abs() < 0.0045, "mean {mean}");
    }

    #[test]
    fn fnv1a_matches_reference_vector() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (reference test vector of the FNV spec).
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
