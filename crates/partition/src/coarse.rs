//! The size-aware path for large graphs: coarsen, solve the coarse graph, refine.
//!
//! Above [`COARSEN_ABOVE`] units neither search scales: the exact search stores every ideal
//! as a bitset of `units / 64` words (10⁶ ideals of a 10⁵-unit graph would be 12.5 GB), and
//! the heuristic's dynamic program over a topological order is quadratic in the units (a
//! 10⁴-node chain took 1.3–10 s, a 10⁵-node one past 100 s). So, as Celeritas does for
//! large dataflow graphs (Liu et al. 2023: coarsen by merging neighbours along a
//! topological order, place the coarse graph, then refine), the units are merged into at
//! about [`coarse_size`] *super-units* — runs of consecutive units of their topological
//! numbering, of about equal accelerator time, each holding at most an eighth of a device's
//! memory and never mixing units an accelerator can and cannot run (so somewhat more than
//! the target when memory or such units force extra cuts; the tables are sized by the
//! actual count). A run of a
//! topological order merged keeps the graph acyclic, and every split of the super-units is
//! a split of the units (a down-closed set of super-units is down-closed in the units);
//! boundary communication is carried over exactly (a node's output crosses a stage
//! boundary of super-units iff it crosses it between the units).
//!
//! The super-units are split by the same machinery as a small graph (heuristic orders,
//! then the exact search when their lattice is at most [`COARSE_MAX_IDEALS`] ideals), and
//! the answer is refined on the units: the stages laid out as one topological order of the
//! units, every cut may move up to [`refine_window`] units either way, and the best split
//! of that order over those cut positions (an exact dynamic program) is kept — never worse
//! than the coarse answer, since its cuts are among the positions. Rounds repeat while
//! they lower the load (at most [`REFINE_ROUNDS`]).
//!
//! What is claimed of the answer is what is proven: its max load, and the lower bound of
//! the *uncoarsened* problem (`linear::lower_bound` over the units), so the reported gap
//! bounds the distance to the true optimum.

use std::collections::BTreeMap;

use crate::exact::{Budget, Split};
use crate::linear;
use crate::units::{comm_groups, Units};

/// Units above which a graph is coarsened. Below it every graph is solved as before
/// (exactly when its lattice has at most `max_ideals` ideals): the placement graphs of
/// Tarnawski et al. have at most a few hundred units, and at 2,048 units the exact search's
/// bitsets are 32 words an ideal (256 MB at the 10⁶-ideal cap) and a heuristic pass over a
/// topological order about 4·10⁶ (start, end) pairs per device layer — both still well
/// under a second on a chain.
pub const COARSEN_ABOVE: usize = 2048;

/// Target number of super-units of a coarsened graph (the runs are cut at equal shares of
/// the accelerator time, at most twice the mean length, so there are about this many).
pub const TARGET_SUPER_UNITS: usize = 1024;

/// Most ideals the exact search enumerates over the super-units (lattices of 37,000 ideals
/// solve in 0.4 s; a wide coarse graph would otherwise spend seconds reaching the cap).
pub const COARSE_MAX_IDEALS: usize = 50_000;

/// Whether the units form a chain (unit `v` follows `v − 1` and nothing else).
pub(crate) fn is_chain(units: &Units) -> bool {
    (0..units.number()).all(|v| {
        let p = &units.preds[v];
        (v == 0 && p.is_empty()) || (v > 0 && p.len() == 1 && p[0] as usize == v - 1)
    })
}

/// Whether the dynamic program over all cut positions of a chain of `n` units is affordable:
/// bounded by the load found, each run spans about `n / devices` units, so about
/// `n² / devices × layers` steps: at most [`CHAIN_PASS_BUDGET`] (measured: 10⁹ such steps
/// take 7 s, so this is about a second; a 10⁴-unit chain over 8 devices needs 1.1·10⁸).
pub(crate) fn chain_pass_affordable(n: usize, devices: usize, layers: usize) -> bool {
    let n = n as f64;
    n * (n / devices.max(1) as f64) * layers as f64 <= CHAIN_PASS_BUDGET
}

/// Steps (start, end, layer) the proving pass over a chain may take.
const CHAIN_PASS_BUDGET: f64 = 1.5e8;

/// Refinement rounds at most.
pub const REFINE_ROUNDS: usize = 4;

/// (start, end) pairs times device layers a heuristic pass over the super-units may cost
/// (measured: about 5 ns each, so about 1.5 s).
const PAIR_LAYER_BUDGET: f64 = 3e8;

/// (start, cut position) pairs times device layers one refinement round may cost.
const REFINE_BUDGET: f64 = 3e8;

/// Table rows (devices + 1) × (CPUs + 1) when no more than `n` of either can be used.
pub fn layers_within(devices: usize, cpus: usize, n: usize) -> usize {
    (devices.min(n) + 1) * (cpus.min(n) + 1)
}

/// Super-units for a split over `devices` accelerators and `cpus` CPUs: at most
/// [`TARGET_SUPER_UNITS`], fewer when many devices make a heuristic pass over them
/// (pairs × layers, the devices counted up to the super-units) too long; never fewer than
/// 64.
pub fn coarse_size(devices: usize, cpus: usize) -> usize {
    let mut c = TARGET_SUPER_UNITS;
    while c > 64 && (c * c) as f64 * layers_within(devices, cpus, c) as f64 > PAIR_LAYER_BUDGET {
        c = (c * 9 / 10).max(64);
    }
    c
}

/// A coarsened graph: the super-units (whose `members` are the nodes of their units), and
/// which units each holds.
pub(crate) struct Coarse {
    pub units: Units,
    pub blocks: Vec<Vec<u32>>,
}

/// Merges `fine` into at most about `target` super-units (see the module docs).
pub(crate) fn coarsen(fine: &Units, budget: &Budget, target: usize) -> Coarse {
    let n = fine.number();
    let total: f64 = fine.acc.iter().sum();
    let per_block = total / target.max(1) as f64;
    let max_len = n.div_ceil(target.max(1)).max(1) * 2;
    let mem_cap = budget.memory / 8.0;
    let mut blocks: Vec<Vec<u32>> = vec![];
    let mut cur: Vec<u32> = vec![];
    let (mut acc, mut mem) = (0.0, 0.0);
    for v in 0..n {
        let start_new = !cur.is_empty()
            && (acc + fine.acc[v] > per_block
                || mem + fine.mem[v] > mem_cap
                || cur.len() >= max_len
                || fine.supported[v] != fine.supported[cur[0] as usize]);
        if start_new {
            blocks.push(std::mem::take(&mut cur));
            acc = 0.0;
            mem = 0.0;
        }
        cur.push(v as u32);
        acc += fine.acc[v];
        mem += fine.mem[v];
    }
    if !cur.is_empty() {
        blocks.push(cur);
    }
    let mut block_of = vec![0u32; n];
    for (b, members) in blocks.iter().enumerate() {
        for &v in members {
            block_of[v as usize] = b as u32;
        }
    }
    let m = blocks.len();
    let mut succs: Vec<Vec<u32>> = vec![vec![]; m];
    let mut preds: Vec<Vec<u32>> = vec![vec![]; m];
    for (v, ds) in fine.succs.iter().enumerate() {
        for &d in ds {
            let (a, b) = (block_of[v], block_of[d as usize]);
            if a != b {
                succs[a as usize].push(b);
                preds[b as usize].push(a);
            }
        }
    }
    for v in succs.iter_mut().chain(preds.iter_mut()) {
        v.sort_unstable();
        v.dedup();
    }
    let sum = |w: &[f64]| -> Vec<f64> {
        blocks
            .iter()
            .map(|b| b.iter().map(|&v| w[v as usize]).sum())
            .collect()
    };
    let mut groups: BTreeMap<(u32, Vec<u32>), f64> = BTreeMap::new();
    for g in &fine.comm {
        let owner = block_of[g.owner as usize];
        let mut targets: Vec<u32> = g
            .targets
            .iter()
            .map(|&t| block_of[t as usize])
            .filter(|&t| t != owner)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        if !targets.is_empty() {
            *groups.entry((owner, targets)).or_insert(0.0) += g.cost;
        }
    }
    let (comm, owned_by, targeted_by) = comm_groups(groups, m);
    let units = Units {
        members: blocks
            .iter()
            .map(|b| {
                b.iter()
                    .flat_map(|&v| fine.members[v as usize].iter().copied())
                    .collect()
            })
            .collect(),
        preds,
        succs,
        acc: sum(&fine.acc),
        cpu: sum(&fine.cpu),
        mem: sum(&fine.mem),
        supported: blocks
            .iter()
            .map(|b| b.iter().all(|&v| fine.supported[v as usize]))
            .collect(),
        comm,
        owned_by,
        targeted_by,
    };
    Coarse { units, blocks }
}

impl Coarse {
    /// The split of the super-units as a split of the units.
    pub fn expand(&self, s: &Split) -> Split {
        Split {
            max_load: s.max_load,
            segments: s
                .segments
                .iter()
                .map(|(seg, cpu)| {
                    let mut units: Vec<u32> = seg
                        .iter()
                        .flat_map(|&b| self.blocks[b as usize].iter().copied())
                        .collect();
                    units.sort_unstable();
                    (units, *cpu)
                })
                .collect(),
        }
    }

    /// The longest super-unit, in units.
    pub fn longest(&self) -> usize {
        self.blocks.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// How far (in units) a cut may move in one refinement round: the longest super-unit (so
/// a cut can reach any position of the super-units on either side), less when the round's
/// work — `cuts × (2w + 1)` start positions, each reaching about as many cut positions, times
/// the layers — would exceed [`REFINE_BUDGET`] or its table `max_cells`; 0 (no refinement)
/// when even a window of one does.
pub fn refine_window(
    longest: usize,
    devices: usize,
    cpus: usize,
    cuts: usize,
    max_cells: usize,
) -> usize {
    let fits = |w: usize| {
        let positions = cuts * (2 * w + 1) + 2;
        let layers = layers_within(devices, cpus, positions);
        let work = (cuts * (2 * w + 1) * (2 * w + 1)) as f64 * layers as f64;
        work <= REFINE_BUDGET && layers.saturating_mul(positions) <= max_cells
    };
    let mut w = longest;
    while w > 0 && !fits(w) {
        w = if w > 8 { w * 3 / 4 } else { w - 1 };
    }
    w
}

/// `split` (of the units, feasible) with its cuts moved to the best positions within
/// `window` units, round after round while the load falls; never worse than `split`.
/// Returns the split and the rounds that lowered the load.
pub(crate) fn refine(units: &Units, split: Split, b: Budget, window: usize) -> (Split, usize) {
    // No split has more segments than cut positions: more devices change nothing.
    let positions = split.segments.len() * (2 * window + 1) + 2;
    let b = Budget {
        devices: b.devices.min(positions),
        cpus: b.cpus.min(positions),
        ..b
    };
    let mut best = split;
    let mut improved = 0;
    if window == 0 {
        return (best, 0);
    }
    for _ in 0..REFINE_ROUNDS {
        // The stages in pipeline order, each in unit order, is a topological order (every
        // prefix of stages is down-closed, and units are numbered topologically).
        let order: Vec<u32> = best
            .segments
            .iter()
            .flat_map(|(s, _)| s.iter().copied())
            .collect();
        let n = order.len();
        let mut cuts = vec![0, n];
        let mut at = 0;
        for (s, _) in &best.segments {
            at += s.len();
            cuts.extend(at.saturating_sub(window)..=(at + window).min(n));
        }
        cuts.sort_unstable();
        cuts.dedup();
        // A little slack so that the current split (whose cuts are all candidates) is
        // found despite a different summation order.
        let bound = best.max_load * (1.0 + 1e-9) + f64::MIN_POSITIVE;
        match linear::split_at_cuts(units, &order, &cuts, b, bound) {
            Some(s) if s.max_load < best.max_load * (1.0 - 1e-12) => {
                best = s;
                improved += 1;
            }
            _ => break,
        }
    }
    (best, improved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_shrink_with_the_devices_and_stay_within_their_budgets() {
        assert_eq!(coarse_size(8, 0), TARGET_SUPER_UNITS);
        let mut last = TARGET_SUPER_UNITS;
        for devices in [64, 512, 4096, 1 << 20, usize::MAX] {
            let c = coarse_size(devices, 0);
            assert!((64..=last).contains(&c), "{devices}: {c}");
            let work = (c * c) as f64 * layers_within(devices, 0, c) as f64;
            assert!(c == 64 || work <= PAIR_LAYER_BUDGET, "{devices}: {c}");
            last = c;
        }
        // Huge device and CPU counts: both counted up to the super-units.
        let c = coarse_size(usize::MAX, usize::MAX);
        assert!((64..last).contains(&c), "{c}");
        assert!(
            (c * c) as f64 * layers_within(usize::MAX, usize::MAX, c) as f64 <= PAIR_LAYER_BUDGET
        );
    }

    #[test]
    fn refine_windows_fit_their_work_and_table() {
        let cells = 1 << 24;
        assert_eq!(refine_window(100, 8, 0, 8, cells), 100);
        for (devices, cpus, cuts) in [
            (200, 0, 200),
            (100_000, 0, 700),
            (8, 8, 16),
            (usize::MAX, 1, 64),
        ] {
            let w = refine_window(400, devices, cpus, cuts, cells);
            assert!(w <= 400);
            if w > 0 {
                let positions = cuts * (2 * w + 1) + 2;
                let layers = layers_within(devices, cpus, positions);
                assert!(layers * positions <= cells, "{devices} {cpus} {cuts}: {w}");
                assert!((cuts * (2 * w + 1) * (2 * w + 1)) as f64 * layers as f64 <= REFINE_BUDGET);
            }
        }
    }
}
