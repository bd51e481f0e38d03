//! The optimal split: dynamic program over the ideal lattice (Tarnawski et al., NeurIPS'20),
//! made fast by never materialising ideal pairs.
//!
//! `dp[a][c][I]` is the least max-load that covers ideal `I` with `a` accelerators and `c`
//! CPUs, each taking one contiguous segment `I \ J` of a chain of ideals. For one ideal `I`
//! the candidate `J`s are enumerated by a depth-first search that removes maximal units in
//! decreasing unit number, so every sub-ideal is met exactly once and the segment `I \ J`
//! only grows along a path. Latency, memory and CPU time of the segment are additive, hence
//! monotone along a path: a branch stops as soon as they reach the best candidate so far or
//! the upper bound of a known split (the heuristic's); boundary communication is updated
//! incrementally ([`Segment`]). Ideals whose lower bound (total work over devices) already
//! exceeds the bound are skipped. Ideals of one DP layer are solved in parallel (rayon); the
//! result does not depend on the thread count.
//!
//! Knows units, the lattice and the limits; not file formats nor nodes.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::lattice::Lattice;
use crate::segment::Segment;
use crate::units::Units;

/// What a split is asked to respect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub devices: usize,
    pub cpus: usize,
    pub memory: f64,
}

/// A split of the units: segments in pipeline order, each on an accelerator (`false`) or a
/// CPU (`true`).
#[derive(Debug, Clone)]
pub(crate) struct Split {
    pub max_load: f64,
    pub segments: Vec<(Vec<u32>, bool)>,
}

/// Per-unit weights summed over each ideal by the lattice, in this order.
pub(crate) const WEIGHT_ACC: usize = 0;
pub(crate) const WEIGHT_CPU: usize = 1;
pub(crate) const WEIGHT_MIN: usize = 2;

/// The weights behind the lower bounds of [`Skip`], and the largest accelerator/CPU time
/// ratio `r` of a unit:
/// * accelerator work `a'`: a unit's accelerator latency, or `r ×` its CPU latency if it
///   cannot run on an accelerator (0 when `r` is unbounded);
/// * CPU latency;
/// * the smaller of the accelerator latency (where it can run there) and the CPU latency
///   (where there are CPUs).
///
/// With `a` accelerators and `c` CPUs at load ≤ T, a set's `a'` is at most `(a + c·r)·T`:
/// the part on accelerators is at most `a·T`, and the part moved to CPUs costs at least
/// `1/r` of its accelerator time there, so at most `c·r·T` of it.
pub(crate) fn weights(u: &Units, b: &Budget) -> ([Vec<f64>; 3], f64) {
    let placeable = |v: usize| u.supported[v] && u.mem[v] <= b.memory;
    let mut ratio = 0.0f64;
    for v in (0..u.number()).filter(|&v| placeable(v) && u.acc[v] > 0.0) {
        ratio = ratio.max(u.acc[v] / u.cpu[v]);
    }
    if b.cpus == 0 {
        ratio = 0.0;
    }
    let work: Vec<f64> = (0..u.number())
        .map(|v| {
            if placeable(v) {
                u.acc[v]
            } else if ratio.is_finite() && b.cpus > 0 {
                ratio * u.cpu[v]
            } else if b.cpus > 0 {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let cpu: Vec<f64> = u.cpu.clone();
    let min = (0..u.number())
        .map(|v| {
            let a = if placeable(v) {
                u.acc[v]
            } else {
                f64::INFINITY
            };
            let c = if b.cpus > 0 { u.cpu[v] } else { f64::INFINITY };
            a.min(c)
        })
        .collect();
    ([work, cpu, min], ratio)
}

struct Layer<'a> {
    units: &'a Units,
    lattice: &'a Lattice,
    budget: Budget,
    /// dp of the layer with one accelerator fewer / one CPU fewer (None if a = 0 / c = 0).
    prev_acc: Option<&'a [f64]>,
    prev_cpu: Option<&'a [f64]>,
    bound: f64,
}

struct Search<'a> {
    seg: Segment<'a>,
    best: f64,
    /// (segment on a CPU, J)
    choice: (bool, u32),
}

impl Layer<'_> {
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &self,
        s: &mut Search,
        j: u32,
        min_unit: u32,
        acc: f64,
        cpu: f64,
        mem: f64,
        acc_alive: bool,
        cpu_alive: bool,
    ) {
        if acc_alive {
            if let Some(prev) = self.prev_acc {
                let cand = prev[j as usize].max(acc + s.seg.comm);
                if cand < s.best {
                    s.best = cand;
                    s.choice = (false, j);
                }
            }
        }
        if cpu_alive {
            if let Some(prev) = self.prev_cpu {
                let cand = prev[j as usize].max(cpu);
                if cand < s.best {
                    s.best = cand;
                    s.choice = (true, j);
                }
            }
        }
        let down = self.lattice.down_of(j);
        let first = down.partition_point(|&(v, _)| v >= min_unit);
        let u = self.units;
        for &(v, sub) in &down[first..] {
            s.seg.steps += 1;
            let vu = v as usize;
            let na = acc + u.acc[vu];
            let nm = mem + u.mem[vu];
            let a_ok = acc_alive
                && u.supported[vu]
                && nm <= self.budget.memory
                && na < s.best
                && na <= self.bound;
            let nc = cpu + u.cpu[vu];
            let c_ok = cpu_alive && nc < s.best && nc <= self.bound;
            if !a_ok && !c_ok {
                continue;
            }
            if a_ok {
                s.seg.add(vu);
            }
            self.visit(s, sub, v, na, nc, nm, a_ok, c_ok);
            if a_ok {
                s.seg.remove(vu);
            }
        }
    }

    /// Best value and choice for ideal `i`: the segments ending at `i` grown from the
    /// empty one (every unit of `i` may be its last, hence no lower unit bound).
    fn solve(&self, s: &mut Search, i: u32) -> (f64, (bool, u32)) {
        s.best = f64::INFINITY;
        s.choice = (false, i);
        s.seg.clear(std::iter::empty());
        let (acc_alive, cpu_alive) = (self.prev_acc.is_some(), self.prev_cpu.is_some());
        self.visit(s, i, u32::MAX, 0.0, 0.0, 0.0, acc_alive, cpu_alive);
        (s.best, s.choice)
    }
}

/// Which ideals of layer (a, c) may matter. A lower bound of the max-load of covering a set
/// with `a` accelerators and `c` CPUs is the largest of: its least work over `a + c`
/// devices, its accelerator work `a'` over `a + c·r` (see [`weights`]), and (without
/// accelerators) its CPU time over `c`. Ideals whose own bound, or whose rest's bound with
/// the devices left, exceeds `bound` are skipped. In the last layer only the full ideal
/// matters.
struct Skip<'a> {
    lattice: &'a Lattice,
    a: usize,
    c: usize,
    left_a: usize,
    left_c: usize,
    bound: f64,
    ratio: f64,
    total: [f64; 3],
}

fn lower(sums: [f64; 3], a: usize, c: usize, ratio: f64) -> f64 {
    let (af, cf) = (a as f64, c as f64);
    let mut lb = if a + c > 0 {
        sums[WEIGHT_MIN] / (af + cf)
    } else if sums[WEIGHT_MIN] > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let capacity = af + cf * ratio;
    if capacity > 0.0 && capacity.is_finite() {
        lb = lb.max(sums[WEIGHT_ACC] / capacity);
    } else if a + c > 0 && capacity == 0.0 && sums[WEIGHT_ACC] > 0.0 {
        lb = f64::INFINITY;
    }
    if a == 0 && c > 0 {
        lb = lb.max(sums[WEIGHT_CPU] / cf);
    }
    lb
}

impl Skip<'_> {
    fn sums(&self, i: u32) -> [f64; 3] {
        let s = &self.lattice.sums;
        [s[0][i as usize], s[1][i as usize], s[2][i as usize]]
    }

    /// `I` is too large: every super-ideal is too large as well.
    fn too_large(&self, i: u32) -> bool {
        lower(self.sums(i), self.a, self.c, self.ratio) > self.bound
    }

    fn skip(&self, i: u32) -> bool {
        if self.left_a + self.left_c == 0 {
            return i != self.lattice.full();
        }
        if self.too_large(i) {
            return true;
        }
        let here = self.sums(i);
        // Sums of the rest, with a little slack for rounding of the subtraction.
        let rest = [0, 1, 2].map(|w| (self.total[w] - here[w]) * (1.0 - 1e-9));
        lower(rest, self.left_a, self.left_c, self.ratio) > self.bound
    }
}

/// Non-negative floats order like their bit patterns, so an atomic minimum of the bits is
/// the minimum of the values (the result does not depend on the order of updates).
fn atomic_min(slot: &AtomicU64, v: f64) {
    slot.fetch_min(v.to_bits(), Ordering::Relaxed);
}

struct Push<'a> {
    units: &'a Units,
    lattice: &'a Lattice,
    budget: Budget,
    bound: f64,
    skip: &'a Skip<'a>,
    out: &'a [AtomicU64],
}

impl Push<'_> {
    /// Extends the segment `U = I \ J` upwards by units above `max_unit`, relaxing every
    /// super-ideal `I` reached with `max(prev(J), load(U))`.
    fn visit(
        &self,
        seg: &mut Segment,
        i: u32,
        max_unit: Option<u32>,
        (acc, cpu, mem): (f64, f64, f64),
        (prev_acc, prev_cpu): (f64, f64),
    ) {
        let u = self.units;
        let first = match max_unit {
            Some(m) => self.lattice.up_of(i).partition_point(|&(v, _)| v <= m),
            None => 0,
        };
        for &(v, sup) in &self.lattice.up_of(i)[first..] {
            seg.steps += 1;
            if self.skip.too_large(sup) {
                continue;
            }
            let vu = v as usize;
            let na = acc + u.acc[vu];
            let nm = mem + u.mem[vu];
            let a_ok = prev_acc < self.bound
                && u.supported[vu]
                && nm <= self.budget.memory
                && na <= self.bound;
            let nc = cpu + u.cpu[vu];
            let c_ok = prev_cpu < self.bound && nc <= self.bound;
            if !a_ok && !c_ok {
                continue;
            }
            if a_ok {
                seg.add(vu);
            }
            if !self.skip.skip(sup) {
                let mut best = f64::INFINITY;
                if a_ok {
                    best = prev_acc.max(na + seg.comm);
                }
                if c_ok {
                    best = best.min(prev_cpu.max(nc));
                }
                atomic_min(&self.out[sup as usize], best);
            }
            self.visit(
                seg,
                sup,
                Some(v),
                (na, nc, nm),
                (
                    if a_ok { prev_acc } else { f64::INFINITY },
                    if c_ok { prev_cpu } else { f64::INFINITY },
                ),
            );
            if a_ok {
                seg.remove(vu);
            }
        }
    }
}

/// The optimal split among those with max-load ≤ `bound` (pass the load of any known split,
/// or ∞), or `None` if there is none.
///
/// Layers are computed by the number of devices used, fewest first; as soon as some layer
/// covers all units at a load ≤ `target` (a lower bound of the optimum), that split is optimal
/// and the search stops: devices beyond those that can lower the load cost nothing.
///
/// Each layer is computed either by pulling (for every ideal `I`, search its sub-ideals) or
/// by pushing (for every ideal `J` with a useful value, search its super-ideals), whichever
/// side has fewer ideals to start from; both give the same values. The split itself is
/// recovered afterwards by pulling along the optimal chain only.
pub(crate) fn solve(
    units: &Units,
    lattice: &Lattice,
    ratio: f64,
    budget: Budget,
    bound: f64,
    target: f64,
    work_limit: u64,
) -> Result<Option<Split>, WorkExceeded> {
    // Extension steps over all layers; a layer that starts past `work_limit` is not
    // finished and the search gives up (the caller falls back to the heuristic).
    let work = AtomicU64::new(0);
    let over = || work.load(Ordering::Relaxed) > work_limit;
    let (k, c) = (budget.devices, budget.cpus);
    let layers = (k + 1) * (c + 1);
    let at = |a: usize, cc: usize| a * (c + 1) + cc;
    let n = lattice.len();
    let full = lattice.full();
    let total = [0, 1, 2].map(|w| lattice.sums[w][full as usize]);
    let mut dp: Vec<Vec<f64>> = vec![vec![]; layers];
    let mut base = vec![f64::INFINITY; n];
    base[0] = 0.0;
    dp[at(0, 0)] = base;
    let mut reached = None;
    // Layers by the number of devices they use (a + cc = d), fewest first. Once the best load
    // of the full ideal stops falling, ask (each time d has doubled) whether any split with
    // all the devices is below it; if none is, it is the optimum and the search stops.
    let mut best: (f64, (usize, usize)) = (f64::INFINITY, (k, c));
    let mut next_check = 1;
    for d in 1..=k + c {
        let before = best.0;
        for a in d.saturating_sub(c)..=d.min(k) {
            let cc = d - a;
            let skip = Skip {
                lattice,
                a,
                c: cc,
                left_a: k - a,
                left_c: c - cc,
                bound,
                ratio,
                total,
            };
            let prev_acc = (a > 0).then(|| dp[at(a - 1, cc)].as_slice());
            let prev_cpu = (cc > 0).then(|| dp[at(a, cc - 1)].as_slice());
            let useful = |j: usize| {
                prev_acc.is_some_and(|p| p[j] < bound) || prev_cpu.is_some_and(|p| p[j] < bound)
            };
            let sources = (0..n).filter(|&j| useful(j)).count();
            let targets = (0..n as u32).filter(|&i| !skip.skip(i)).count();
            let values: Vec<f64> = if sources < targets {
                let out: Vec<AtomicU64> = (0..n)
                    .map(|_| AtomicU64::new(f64::INFINITY.to_bits()))
                    .collect();
                let push = Push {
                    units,
                    lattice,
                    budget,
                    bound,
                    skip: &skip,
                    out: &out,
                };
                (0..n as u32)
                    .into_par_iter()
                    .filter(|&j| useful(j as usize))
                    .for_each_init(
                        || Segment::new(units),
                        |seg, j| {
                            if over() {
                                return;
                            }
                            let pa = prev_acc.map_or(f64::INFINITY, |p| p[j as usize]);
                            let pc = prev_cpu.map_or(f64::INFINITY, |p| p[j as usize]);
                            seg.clear(std::iter::empty());
                            push.visit(seg, j, None, (0.0, 0.0, 0.0), (pa, pc));
                            work.fetch_add(std::mem::take(&mut seg.steps), Ordering::Relaxed);
                        },
                    );
                out.into_iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let mut x = f64::from_bits(v.into_inner());
                        if skip.skip(i as u32) {
                            return f64::INFINITY;
                        }
                        if let Some(p) = prev_acc {
                            x = x.min(p[i]);
                        }
                        if let Some(p) = prev_cpu {
                            x = x.min(p[i]);
                        }
                        x
                    })
                    .collect()
            } else {
                let layer = Layer {
                    units,
                    lattice,
                    budget,
                    prev_acc,
                    prev_cpu,
                    bound,
                };
                (0..n as u32)
                    .into_par_iter()
                    .map_init(
                        || Search {
                            seg: Segment::new(units),
                            best: f64::INFINITY,
                            choice: (false, 0),
                        },
                        |s, i| {
                            if skip.skip(i) || over() {
                                f64::INFINITY
                            } else {
                                let v = layer.solve(s, i).0;
                                work.fetch_add(std::mem::take(&mut s.seg.steps), Ordering::Relaxed);
                                v
                            }
                        },
                    )
                    .collect()
            };
            if over() {
                return Err(WorkExceeded);
            }
            let here = values[full as usize];
            dp[at(a, cc)] = values;
            if here < best.0 {
                best = (here, (a, cc));
            }
            if here <= target {
                reached = Some((a, cc));
                break;
            }
        }
        if reached.is_some() {
            break;
        }
        if d < k + c && d >= next_check && best.0.is_finite() && best.0 == before {
            next_check = 2 * d;
            let t = best.0 * (1.0 - BELOW_SLACK);
            if !below(units, lattice, budget, ratio, t) {
                reached = Some(best.1);
                break;
            }
        }
    }
    let (a, cc) = reached.unwrap_or((k, c));
    let max_load = dp[at(a, cc)][full as usize];
    if !max_load.is_finite() {
        return Ok(None);
    }
    // Walk back from (a, cc, all units), pulling the best sub-ideal at each step.
    let mut segments = vec![];
    let (mut a, mut cc, mut i) = (a, cc, full);
    let mut search = Search {
        seg: Segment::new(units),
        best: f64::INFINITY,
        choice: (false, 0),
    };
    while i != 0 {
        let layer = Layer {
            units,
            lattice,
            budget,
            prev_acc: (a > 0).then(|| dp[at(a - 1, cc)].as_slice()),
            prev_cpu: (cc > 0).then(|| dp[at(a, cc - 1)].as_slice()),
            bound,
        };
        let (_, (on_cpu, j)) = layer.solve(&mut search, i);
        if j != i {
            segments.push((difference(lattice, i, j), on_cpu));
        }
        if on_cpu {
            cc -= 1;
        } else {
            a -= 1;
        }
        i = j;
    }
    segments.reverse();
    Ok(Some(Split { max_load, segments }))
}

/// The exact search stopped at its work limit, unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WorkExceeded;

/// Units of ideal `i` not in its sub-ideal `j`: walk down from `i` removing the largest
/// maximal unit not in `j`.
fn difference(lattice: &Lattice, i: u32, j: u32) -> Vec<u32> {
    // Members of j: descend from j to the empty ideal.
    let mut in_j = std::collections::HashSet::new();
    let mut x = j;
    while x != 0 {
        let &(v, sub) = lattice
            .down_of(x)
            .first()
            .expect("a non-empty ideal has a maximal unit");
        in_j.insert(v);
        x = sub;
    }
    let mut out = vec![];
    let mut x = i;
    while x != 0 {
        let &(v, sub) = lattice
            .down_of(x)
            .first()
            .expect("a non-empty ideal has a maximal unit");
        if !in_j.contains(&v) {
            out.push(v);
        }
        x = sub;
    }
    out.sort_unstable();
    out
}

/// Relative margin under a load that [`below`] must beat: summation orders differ between
/// the searches, so a split "below" by less than this is the same split.
const BELOW_SLACK: f64 = 1e-9;

/// Whether some split of all units into at most `budget.devices` accelerator and
/// `budget.cpus` CPU segments has every load below `t`: the fewest accelerators covering each
/// ideal with each number of CPUs, one pass over the lattice (sub-ideals are enumerated
/// first, level by level). Costs about one layer of [`solve`] however many devices there
/// are, which is what lets [`solve`] stop once more devices cannot lower the load.
fn below(units: &Units, lattice: &Lattice, budget: Budget, ratio: f64, t: f64) -> bool {
    let (k, c) = (budget.devices, budget.cpus);
    let n = lattice.len();
    let full = lattice.full();
    let total = [0, 1, 2].map(|w| lattice.sums[w][full as usize]);
    // An ideal that all the devices cannot cover below t, or whose rest they cannot, is in
    // no chain that matters (the bounds of [`Skip`]).
    let useless = |i: usize| {
        let here = [0, 1, 2].map(|w| lattice.sums[w][i]);
        let rest = [0, 1, 2].map(|w| (total[w] - here[w]) * (1.0 - 1e-9));
        lower(here, k, c, ratio) >= t || (i != full as usize && lower(rest, k, c, ratio) >= t)
    };
    const NONE: u32 = u32::MAX;
    // fewest[cc][i]: fewest accelerators covering ideal i with at most cc CPUs.
    let mut fewest = vec![vec![NONE; n]; c + 1];
    for row in fewest.iter_mut() {
        row[0] = 0;
    }
    let mut seg = Segment::new(units);
    struct Walk<'a, 'b> {
        units: &'a Units,
        lattice: &'a Lattice,
        memory: f64,
        t: f64,
        seg: &'b mut Segment<'a>,
        /// Best (accelerators) per CPU count for the ideal being solved.
        best: Vec<u32>,
    }
    impl Walk<'_, '_> {
        #[allow(clippy::too_many_arguments)]
        fn visit(
            &mut self,
            fewest: &[Vec<u32>],
            j: u32,
            min_unit: u32,
            acc: f64,
            cpu: f64,
            mem: f64,
            acc_alive: bool,
            cpu_alive: bool,
        ) {
            if acc_alive && acc + self.seg.comm < self.t {
                for (cc, row) in fewest.iter().enumerate() {
                    let f = row[j as usize];
                    if f != NONE {
                        self.best[cc] = self.best[cc].min(f + 1);
                    }
                }
            }
            if cpu_alive {
                for cc in 1..fewest.len() {
                    let f = fewest[cc - 1][j as usize];
                    if f != NONE {
                        self.best[cc] = self.best[cc].min(f);
                    }
                }
            }
            let down = self.lattice.down_of(j);
            let first = down.partition_point(|&(v, _)| v >= min_unit);
            let u = self.units;
            for &(v, sub) in &down[first..] {
                let vu = v as usize;
                let na = acc + u.acc[vu];
                let nm = mem + u.mem[vu];
                let a_ok = acc_alive && u.supported[vu] && nm <= self.memory && na < self.t;
                let nc = cpu + u.cpu[vu];
                let c_ok = cpu_alive && nc < self.t;
                if !a_ok && !c_ok {
                    continue;
                }
                if a_ok {
                    self.seg.add(vu);
                }
                self.visit(fewest, sub, v, na, nc, nm, a_ok, c_ok);
                if a_ok {
                    self.seg.remove(vu);
                }
            }
        }
    }
    let mut walk = Walk {
        units,
        lattice,
        memory: budget.memory,
        t,
        seg: &mut seg,
        best: vec![NONE; c + 1],
    };
    for i in 1..n as u32 {
        if useless(i as usize) {
            continue;
        }
        walk.best.iter_mut().for_each(|b| *b = NONE);
        walk.seg.clear(std::iter::empty());
        walk.visit(&fewest, i, u32::MAX, 0.0, 0.0, 0.0, true, c > 0);
        for cc in 0..=c {
            let mut b = walk.best[cc];
            if cc > 0 {
                b = b.min(fewest[cc - 1][i as usize]);
            }
            fewest[cc][i as usize] = b;
        }
    }
    fewest[c][lattice.full() as usize] <= k as u32
}
