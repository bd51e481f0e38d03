//! The lattice of ideals (down-closed sets) of the unit DAG, enumerated level by level up to
//! a cap, with its Hasse diagram stored downwards: for each ideal, its maximal units `v`
//! and the ideal without `v`, by decreasing `v`.
//!
//! Every contiguous stage is the difference of two nested ideals, so a pipeline split is a
//! chain ∅ = I₀ ⊂ I₁ ⊂ … ⊂ I_m = all units (Tarnawski et al., NeurIPS'20, §3).
//! Knows the DAG only, not costs or devices.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate word hasher (the FxHash of rustc): bitsets are already well mixed, and
/// SipHash would dominate the enumeration time.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, w: u64) {
        // Constant of rustc's FxHasher (rustc-hash crate, 64-bit seed).
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }
}

type WordMap<V> = HashMap<Box<[u64]>, V, BuildHasherDefault<WordHasher>>;

/// The ideals of a DAG whose edges go from lower to higher unit numbers.
#[derive(Debug, Clone)]
pub(crate) struct Lattice {
    /// `down[down_start[i]..down_start[i+1]]`: (unit, ideal without it), unit decreasing.
    pub down_start: Vec<u32>,
    pub down: Vec<(u32, u32)>,
    /// `up[up_start[i]..up_start[i+1]]`: (unit, ideal with it added), unit increasing.
    pub up_start: Vec<u32>,
    pub up: Vec<(u32, u32)>,
    /// Sum of a per-unit weight over each ideal, for each weight given to [`Lattice::build`].
    pub sums: Vec<Vec<f64>>,
}

impl Lattice {
    pub fn len(&self) -> usize {
        self.down_start.len() - 1
    }

    /// The ideal of all units (the last one enumerated).
    pub fn full(&self) -> u32 {
        (self.len() - 1) as u32
    }

    pub fn up_of(&self, ideal: u32) -> &[(u32, u32)] {
        &self.up[self.up_start[ideal as usize] as usize..self.up_start[ideal as usize + 1] as usize]
    }

    pub fn down_of(&self, ideal: u32) -> &[(u32, u32)] {
        &self.down
            [self.down_start[ideal as usize] as usize..self.down_start[ideal as usize + 1] as usize]
    }

    /// Enumerates the ideals of the DAG given by `preds` (every predecessor numbered below
    /// its successor); `weights[w][u]` are summed over each ideal. `None` if there are more
    /// than `cap` ideals.
    pub fn build(preds: &[Vec<u32>], weights: &[&[f64]], cap: usize) -> Option<Lattice> {
        let n = preds.len();
        let words = n.div_ceil(64).max(1);
        let mut level: Vec<Box<[u64]>> = vec![vec![0u64; words].into_boxed_slice()];
        let mut level_first_id = 0u32;
        // Per ideal: (unit, parent) edges, collected by ideal id.
        let mut down_lists: Vec<Vec<(u32, u32)>> = vec![vec![]];
        let mut sums: Vec<Vec<f64>> = weights.iter().map(|_| vec![0.0]).collect();
        let contains = |set: &[u64], u: usize| set[u / 64] >> (u % 64) & 1 == 1;
        for _size in 0..n {
            let mut next: WordMap<u32> = WordMap::default();
            let mut next_sets: Vec<Box<[u64]>> = vec![];
            let next_first_id = down_lists.len() as u32;
            for (k, set) in level.iter().enumerate() {
                let id = level_first_id + k as u32;
                for v in 0..n {
                    if contains(set, v) || !preds[v].iter().all(|&p| contains(set, p as usize)) {
                        continue;
                    }
                    let mut bigger = set.clone();
                    bigger[v / 64] |= 1 << (v % 64);
                    let child = match next.get(&bigger) {
                        Some(&c) => c,
                        None => {
                            let c = down_lists.len() as u32;
                            if c as usize >= cap {
                                return None;
                            }
                            down_lists.push(vec![]);
                            for (w, s) in weights.iter().zip(sums.iter_mut()) {
                                s.push(s[id as usize] + w[v]);
                            }
                            next.insert(bigger.clone(), c);
                            next_sets.push(bigger);
                            c
                        }
                    };
                    down_lists[child as usize].push((v as u32, id));
                }
            }
            level = next_sets;
            level_first_id = next_first_id;
        }
        let ideals = down_lists.len();
        let mut up_count = vec![0u32; ideals + 1];
        for d in &down_lists {
            for &(_, parent) in d {
                up_count[parent as usize + 1] += 1;
            }
        }
        for i in 0..ideals {
            up_count[i + 1] += up_count[i];
        }
        let up_start = up_count.clone();
        let mut up = vec![(0u32, 0u32); up_start[ideals] as usize];
        for (child, d) in down_lists.iter().enumerate() {
            for &(v, parent) in d {
                let slot = &mut up_count[parent as usize];
                up[*slot as usize] = (v, child as u32);
                *slot += 1;
            }
        }
        for i in 0..ideals {
            up[up_start[i] as usize..up_start[i + 1] as usize].sort_unstable();
        }
        let mut down_start = Vec::with_capacity(down_lists.len() + 1);
        let mut down = vec![];
        down_start.push(0u32);
        for mut d in down_lists {
            d.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
            down.extend_from_slice(&d);
            down_start.push(down.len() as u32);
        }
        Some(Lattice {
            down_start,
            down,
            up_start,
            up,
            sums,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diamond_has_six_ideals() {
        // 0 → 1, 0 → 2, 1 → 3, 2 → 3: ∅, {0}, {0,1}, {0,2}, {0,1,2}, all.
        let preds = vec![vec![], vec![0], vec![0], vec![1, 2]];
        let w = [1.0, 2.0, 4.0, 8.0];
        let l = Lattice::build(&preds, &[&w], 100).unwrap();
        assert_eq!(l.len(), 6);
        assert_eq!(l.sums[0][l.full() as usize], 15.0);
        assert_eq!(l.down_of(l.full()), &[(3, 4)]);
        assert_eq!(l.up_of(1), &[(1, 2), (2, 3)]);
        assert!(Lattice::build(&preds, &[&w], 5).is_none());
    }

    #[test]
    fn antichain_has_all_subsets() {
        let preds = vec![vec![]; 5];
        let l = Lattice::build(&preds, &[], 1000).unwrap();
        assert_eq!(l.len(), 32);
    }
}
