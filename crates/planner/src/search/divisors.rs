//! Divisors of any `u64`, in time bounded whatever the number: factor once (trial division
//! by the primes below 2^10, then Miller–Rabin and Pollard's rho on what is left), then build
//! the divisors from the prime factors. A `u64` has at most 103,680 divisors
//! (897,612,484,786,617,600), so the list is bounded too.
//!
//! Trial division up to √n — what the search used before — takes 3·10⁹ steps for a prime
//! near 2^63 and several such calls per plan (`plan --gbs 2^63−1 --gpus 2^63−1` ran past
//! 120 s).

/// Divisors of `n` in increasing order (`[]` for 0).
pub(crate) fn divisors(n: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let mut out = vec![1u64];
    for (p, e) in factor(n) {
        let len = out.len();
        let mut power = 1u64;
        for _ in 0..e {
            // p^e divides n, so every product below is at most n.
            power *= p;
            for i in 0..len {
                out.push(out[i] * power);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Prime factorisation of `n ≥ 1`: (prime, exponent) pairs by increasing prime.
pub(crate) fn factor(n: u64) -> Vec<(u64, u32)> {
    let mut primes = Vec::new();
    let mut rest = n;
    let mut p = 2u64;
    while p < 1024 && p * p <= rest {
        while rest.is_multiple_of(p) {
            primes.push(p);
            rest /= p;
        }
        p += if p == 2 { 1 } else { 2 };
    }
    if rest > 1 {
        split(rest, &mut primes);
    }
    primes.sort_unstable();
    let mut out: Vec<(u64, u32)> = Vec::new();
    for q in primes {
        match out.last_mut() {
            Some((last, e)) if *last == q => *e += 1,
            _ => out.push((q, 1)),
        }
    }
    out
}

/// Pushes the prime factors of `n > 1` (which has no factor below 1024 unless prime).
fn split(n: u64, primes: &mut Vec<u64>) {
    if is_prime(n) {
        primes.push(n);
        return;
    }
    let d = rho(n);
    split(d, primes);
    split(n / d, primes);
}

fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    ((a as u128 * b as u128) % m as u128) as u64
}

fn pow_mod(mut b: u64, mut e: u64, m: u64) -> u64 {
    let mut r = 1u64 % m;
    b %= m;
    while e > 0 {
        if e & 1 == 1 {
            r = mul_mod(r, b, m);
        }
        b = mul_mod(b, b, m);
        e >>= 1;
    }
    r
}

/// Deterministic Miller–Rabin: the first twelve primes as bases decide every `u64`
/// (Sorenson and Webster 2015: no strong pseudoprime to all of them below 3.3·10²⁴).
fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for p in BASES {
        if n.is_multiple_of(p) {
            return n == p;
        }
    }
    let s = (n - 1).trailing_zeros();
    let d = (n - 1) >> s;
    'bases: for a in BASES {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A non-trivial factor of the odd composite `n` (Pollard's rho, Brent's cycle detection,
/// fixed seeds: deterministic). Expected O(n^¼) steps: about 55,000 for a product of two
/// primes near 2^32.
fn rho(n: u64) -> u64 {
    for c in 1.. {
        let f = |x: u64| (mul_mod(x, x, n) + c) % n;
        let (mut x, mut y, mut d) = (2u64, 2u64, 1u64);
        let mut power = 1u64;
        let mut lam = 0u64;
        while d == 1 {
            if power == lam {
                x = y;
                power *= 2;
                lam = 0;
            }
            y = f(y);
            lam += 1;
            d = gcd(x.abs_diff(y), n);
        }
        if d != n {
            return d;
        }
    }
    unreachable!("some seed splits every composite")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_trial_division(n: u64) -> Vec<u64> {
        (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
    }

    #[test]
    fn small_numbers_match_trial_division() {
        for n in 1..=5000 {
            assert_eq!(divisors(n), by_trial_division(n), "{n}");
        }
        assert!(divisors(0).is_empty());
    }

    #[test]
    fn two_to_the_63_minus_1() {
        let n = i64::MAX as u64;
        assert_eq!(
            factor(n),
            vec![(7, 2), (73, 1), (127, 1), (337, 1), (92737, 1), (649657, 1)]
        );
        let d = divisors(n);
        // (2 + 1) · 2^5 divisors, each dividing n, increasing, from 1 to n.
        assert_eq!(d.len(), 96);
        assert!(d.windows(2).all(|w| w[0] < w[1]));
        assert!(d.iter().all(|x| n.is_multiple_of(*x)));
        assert_eq!((d[0], d[1], d[2], d[3]), (1, 7, 49, 73));
        assert_eq!(d[95], n);
        assert_eq!(d[94], n / 7);
    }

    #[test]
    fn primes_and_hard_composites() {
        // The largest u64 prime, a product of two primes near 2^32, a prime square.
        let p = 18_446_744_073_709_551_557u64;
        assert_eq!(divisors(p), vec![1, p]);
        let (a, b) = (4_294_967_291u64, 4_294_967_279u64);
        assert_eq!(divisors(a * b), vec![1, b, a, a * b]);
        assert_eq!(factor(a * a), vec![(a, 2)]);
        assert_eq!(
            factor(u64::MAX),
            vec![
                (3, 1),
                (5, 1),
                (17, 1),
                (257, 1),
                (641, 1),
                (65537, 1),
                (6_700_417, 1)
            ]
        );
        // 2^63: 64 divisors, the powers of two.
        let d = divisors(1 << 63);
        assert_eq!(d, (0..64).map(|k| 1u64 << k).collect::<Vec<_>>());
        // The u64 with the most divisors.
        assert_eq!(divisors(897_612_484_786_617_600).len(), 103_680);
    }
}
