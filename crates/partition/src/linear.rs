//! Fast splits for graphs whose ideal lattice is too large, and the lower bound reported
//! with them.
//!
//! * Heuristic: fix a topological order of the units; its prefixes are ideals, so any split
//!   of the order into consecutive runs is a valid pipeline. The best such split is an exact
//!   O(n² · layers) dynamic program. Several orders are tried (smallest unit first, depth
//!   first, breadth first, longest path first) and the best is kept. Also gives the upper
//!   bound that prunes the exact search.
//! * Lower bound: the larger of (a) the cheapest device any single unit can run on and
//!   (b) the fractional relaxation — split the total work over k accelerators and c CPUs,
//!   each unit's work moved to a CPU in the order of its accelerator/CPU time ratio,
//!   ignoring communication and contiguity.
//!
//! Knows units and limits, not the lattice.

use std::collections::BTreeSet;

use crate::exact::{Budget, Split};
use crate::segment::Segment;
use crate::units::Units;

/// Best split of `order` into consecutive runs (each run on one accelerator or one CPU),
/// among those with max-load ≤ `bound`.
pub(crate) fn split_order(units: &Units, order: &[u32], b: Budget, bound: f64) -> Option<Split> {
    let cuts: Vec<usize> = (0..=order.len()).collect();
    split_at_cuts(units, order, &cuts, b, bound)
}

/// Best split of `order` into consecutive runs that start and end only at the positions
/// `cuts` (increasing, from 0 to `order.len()`), among those with max-load ≤ `bound`: an
/// exact dynamic program over the cut positions, O(|cuts| · run length · layers).
pub(crate) fn split_at_cuts(
    units: &Units,
    order: &[u32],
    cuts: &[usize],
    b: Budget,
    bound: f64,
) -> Option<Split> {
    let n = order.len();
    debug_assert!(cuts.first() == Some(&0) && cuts.last() == Some(&n));
    let m = cuts.len();
    let (k, c) = (b.devices, b.cpus);
    let layers = (k + 1) * (c + 1);
    let at = |a: usize, cc: usize| a * (c + 1) + cc;
    let mut dp = vec![vec![f64::INFINITY; m]; layers];
    // (cut index of the start of the last run, run on a CPU); start == end means "device
    // left unused".
    let mut back = vec![vec![(u32::MAX, false); m]; layers];
    dp[at(0, 0)][0] = 0.0;
    let mut seg = Segment::new(units);
    for ci in 0..m {
        let i = cuts[ci];
        // dp[..][ci] is final: take "leave a device unused".
        for a in 0..=k {
            for cc in 0..=c {
                let here = at(a, cc);
                if a > 0 && dp[at(a - 1, cc)][ci] < dp[here][ci] {
                    dp[here][ci] = dp[at(a - 1, cc)][ci];
                    back[here][ci] = (ci as u32, false);
                }
                if cc > 0 && dp[at(a, cc - 1)][ci] < dp[here][ci] {
                    dp[here][ci] = dp[at(a, cc - 1)][ci];
                    back[here][ci] = (ci as u32, true);
                }
            }
        }
        if (0..layers).all(|l| !dp[l][ci].is_finite()) {
            continue;
        }
        let (mut acc, mut cpu, mut mem) = (0.0, 0.0, 0.0);
        let mut acc_ok = k > 0;
        let mut added = vec![];
        let mut cj = ci + 1;
        for j in i + 1..=n {
            let v = order[j - 1] as usize;
            acc += units.acc[v];
            cpu += units.cpu[v];
            mem += units.mem[v];
            acc_ok = acc_ok && units.supported[v] && mem <= b.memory && acc <= bound;
            let cpu_ok = c > 0 && cpu <= bound;
            if !acc_ok && !cpu_ok {
                break;
            }
            if acc_ok {
                seg.add(v);
                added.push(v);
            }
            if cuts[cj] != j {
                continue;
            }
            let acc_cost = acc + seg.comm;
            for a in 0..=k {
                for cc in 0..=c {
                    let here = at(a, cc);
                    if a > 0 && acc_ok {
                        let cand = dp[at(a - 1, cc)][ci].max(acc_cost);
                        if cand < dp[here][cj] {
                            dp[here][cj] = cand;
                            back[here][cj] = (ci as u32, false);
                        }
                    }
                    if cc > 0 && cpu_ok {
                        let cand = dp[at(a, cc - 1)][ci].max(cpu);
                        if cand < dp[here][cj] {
                            dp[here][cj] = cand;
                            back[here][cj] = (ci as u32, true);
                        }
                    }
                }
            }
            cj += 1;
        }
        seg.clear(added.iter().copied());
    }
    let end = m - 1;
    // Final position: also allow unused devices.
    let mut best = dp[at(k, c)][end];
    for a in 0..=k {
        for cc in 0..=c {
            if dp[at(a, cc)][end] < best {
                best = dp[at(a, cc)][end];
            }
        }
    }
    if !best.is_finite() {
        return None;
    }
    let (mut a, mut cc) = (0..=k)
        .flat_map(|a| (0..=c).map(move |cc| (a, cc)))
        .find(|&(a, cc)| dp[at(a, cc)][end] == best)
        .expect("the best layer exists");
    let mut segments = vec![];
    let mut cj = end;
    while cuts[cj] > 0 {
        let (ci, on_cpu) = back[at(a, cc)][cj];
        let ci = ci as usize;
        if ci < cj {
            segments.push((order[cuts[ci]..cuts[cj]].to_vec(), on_cpu));
        }
        if on_cpu {
            cc -= 1;
        } else {
            a -= 1;
        }
        cj = ci;
    }
    segments.reverse();
    for (s, _) in &mut segments {
        s.sort_unstable();
    }
    Some(Split {
        max_load: best,
        segments,
    })
}

/// Topological orders of the unit DAG to try.
pub(crate) fn orders(units: &Units) -> Vec<Vec<u32>> {
    let n = units.number();
    let identity: Vec<u32> = (0..n as u32).collect();
    // Depth first: always continue from the most recently readied unit.
    let dfs = kahn(units, |ready, _| {
        *ready.iter().next_back().expect("non-empty")
    });
    // Breadth first by level (longest path from a source), ties by number.
    let mut level = vec![0usize; n];
    for v in 0..n {
        for &s in &units.succs[v] {
            level[s as usize] = level[s as usize].max(level[v] + 1);
        }
    }
    let mut by_level: Vec<u32> = identity.clone();
    by_level.sort_by_key(|&v| (level[v as usize], v));
    // Critical path first: the ready unit with the longest remaining path to a sink.
    let mut tail = vec![0.0f64; n];
    for v in (0..n).rev() {
        let own = units.acc[v].min(units.cpu[v]);
        let longest = units.succs[v]
            .iter()
            .map(|&s| tail[s as usize])
            .fold(0.0, f64::max);
        tail[v] = own + longest;
    }
    let critical = kahn(units, |ready, _| {
        *ready
            .iter()
            .max_by(|&&a, &&b| {
                tail[a as usize]
                    .total_cmp(&tail[b as usize])
                    .then(b.cmp(&a))
            })
            .expect("non-empty")
    });
    let mut all = vec![identity, dfs, by_level, critical];
    all.sort();
    all.dedup();
    all
}

/// Kahn's algorithm with a custom pick among the ready units.
fn kahn(units: &Units, pick: impl Fn(&BTreeSet<u32>, usize) -> u32) -> Vec<u32> {
    let n = units.number();
    let mut indeg: Vec<usize> = units.preds.iter().map(Vec::len).collect();
    let mut ready: BTreeSet<u32> = (0..n as u32).filter(|&v| indeg[v as usize] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while !ready.is_empty() {
        let v = pick(&ready, out.len());
        ready.remove(&v);
        out.push(v);
        for &s in &units.succs[v as usize] {
            indeg[s as usize] -= 1;
            if indeg[s as usize] == 0 {
                ready.insert(s);
            }
        }
    }
    out
}

/// The best split over [`orders`].
///
/// Each pass costs about `units² / 2 × layers` steps; when the devices and CPUs make the
/// passes more than [`HEURISTIC_WORK`], they use fewer of them (the larger count halved until
/// it fits): still a valid split, and an upper bound the exact search improves on.
pub(crate) fn heuristic(units: &Units, b: Budget) -> Option<Split> {
    let orders = orders(units);
    let b = within_work(units.number(), b, orders.len());
    let mut best: Option<Split> = None;
    for order in orders {
        let bound = best.as_ref().map_or(f64::INFINITY, |s| s.max_load);
        if let Some(s) = split_order(units, &order, b, bound) {
            if best.as_ref().is_none_or(|x| s.max_load < x.max_load) {
                best = Some(s);
            }
        }
    }
    best
}

/// Steps (start, end, layer) the heuristic's passes may take together: about 1.5 s
/// (measured: 10⁹ take 5 s). Four passes over a 177-unit graph with 177 devices and 177
/// CPUs would take 2·10⁹.
pub(crate) const HEURISTIC_WORK: f64 = 3e8;

/// `b` with its devices and CPUs cut (the larger halved, repeatedly) until `passes` passes
/// over `n` units fit [`HEURISTIC_WORK`]; never below one device (or one CPU when it had no
/// device).
pub(crate) fn within_work(n: usize, mut b: Budget, passes: usize) -> Budget {
    let work =
        |b: &Budget| (n * n) as f64 / 2.0 * ((b.devices + 1) * (b.cpus + 1)) as f64 * passes as f64;
    while work(&b) > HEURISTIC_WORK && b.devices + b.cpus > 1 {
        if b.cpus > b.devices || (b.devices == 1 && b.cpus > 1) {
            b.cpus = (b.cpus / 2).max(usize::from(b.devices == 0));
        } else if b.devices > 1 {
            b.devices /= 2;
        } else {
            break;
        }
    }
    b
}

/// A lower bound of the optimal max-load (see the module docs); ∞ if some unit fits no
/// device.
pub(crate) fn lower_bound(units: &Units, b: Budget) -> f64 {
    let n = units.number();
    let acc: Vec<f64> = (0..n)
        .map(|v| {
            if units.supported[v] && units.mem[v] <= b.memory {
                units.acc[v]
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let cpu: Vec<f64> = (0..n)
        .map(|v| {
            if b.cpus > 0 {
                units.cpu[v]
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let single = (0..n).map(|v| acc[v].min(cpu[v])).fold(0.0, f64::max);
    if !single.is_finite() {
        return f64::INFINITY;
    }
    // Fractional relaxation: is max-load T possible if work could be split at will?
    let forced_cpu: f64 = (0..n)
        .filter(|&v| acc[v].is_infinite())
        .map(|v| cpu[v])
        .sum();
    let mut movable: Vec<usize> = (0..n).filter(|&v| acc[v].is_finite()).collect();
    // Most accelerator time saved per CPU second first.
    movable.sort_by(|&x, &y| {
        let rx = acc[x] / cpu[x];
        let ry = acc[y] / cpu[y];
        ry.total_cmp(&rx).then(x.cmp(&y))
    });
    let total_acc: f64 = movable.iter().map(|&v| acc[v]).sum();
    let (k, c) = (b.devices as f64, b.cpus as f64);
    let possible = |t: f64| -> bool {
        let mut cpu_room = c * t - forced_cpu;
        if cpu_room < 0.0 {
            return false;
        }
        let mut acc_left = total_acc;
        for &v in &movable {
            if cpu_room <= 0.0 || !cpu[v].is_finite() {
                break;
            }
            let part = if cpu[v] <= cpu_room {
                1.0
            } else {
                cpu_room / cpu[v]
            };
            acc_left -= part * acc[v];
            cpu_room -= part * cpu[v];
        }
        acc_left <= k * t
    };
    let (mut lo, mut hi) = (0.0f64, total_acc.max(forced_cpu / c.max(1.0)) + 1.0);
    if !possible(hi) {
        hi = total_acc + forced_cpu + 1.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if possible(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    single.max(lo)
}
