//! Counter-based randomness: every random number the runtime draws is a function of the
//! run's seed and a name (a parameter's, or the data order's epoch), never of thread
//! timing or of the parallel plan. So initialisation is identical for every plan and a
//! resumed run draws what the uninterrupted run drew.

/// FNV-1a 64-bit hash (Fowler–Noll–Vo; offset basis and prime from the reference).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The seed of the stream named `name` under the run seed `seed`.
pub fn derive_seed(seed: u64, name: &str) -> u64 {
    let mut bytes = seed.to_le_bytes().to_vec();
    bytes.extend_from_slice(name.as_bytes());
    fnv1a(&bytes)
}

/// SplitMix64 (Steele, Lea and Flood 2014, constants of the reference implementation):
/// small, fast and statistically sound for initialisation and shuffling.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1]: 53 random bits, never 0 (so its logarithm is finite).
    pub fn next_f64(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `0..n` (n > 0), by rejection to avoid modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// `count` normal samples of mean 0 and standard deviation `std` (Box–Muller).
    pub fn normals(&mut self, count: usize, std: f64) -> Vec<f32> {
        let mut out = Vec::with_capacity(count + 1);
        while out.len() < count {
            let (u1, u2) = (self.next_f64(), self.next_f64());
            let r = (-2.0 * u1.ln()).sqrt() * std;
            let t = std::f64::consts::TAU * u2;
            out.push((r * t.cos()) as f32);
            out.push((r * t.sin()) as f32);
        }
        out.truncate(count);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a = SplitMix64::new(derive_seed(1, "x")).normals(1000, 1.0);
        let b = SplitMix64::new(derive_seed(1, "x")).normals(1000, 1.0);
        let c = SplitMix64::new(derive_seed(1, "y")).normals(1000, 1.0);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mean: f32 = a.iter().sum::<f32>() / 1000.0;
        let var: f32 = a.iter().map(|x| x * x).sum::<f32>() / 1000.0;
        assert!(mean.abs() < 0.1 && (var - 1.0).abs() < 0.15, "{mean} {var}");
        let mut r = SplitMix64::new(3);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}
