//! The exact search over (layers placed, class of the last device, devices used per class):
//! the incumbent beam, best-first branch and bound with dominance per state (Pareto labels
//! under a latency SLO), the label and work budgets, and the greedy dives when a budget
//! stops it.
//!
//! It searches class paths only: concrete devices, the `Placement` answer and the reasons
//! for infeasibility belong to `place` (the parent module).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::classes::{Combine, Core, Metric};
/// Stage candidates the exact search may evaluate before it stops and reports its bound
/// (about 1 s on one core of the development machine).
const MAX_WORK: u64 = 30_000_000;
/// Greedy dives from the best open states when the search stops early.
const DIVES: usize = 64;
/// States kept per layer boundary by the incumbent beam.
const BEAM_WIDTH: usize = 16;
/// Relative slack for comparing a bound against the incumbent: bounds and costs are sums
/// of the same terms in different orders, so they may differ in the last bits.
const REL_EPS: f64 = 1e-12;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Label {
    /// Layers placed (the next stage starts at layer j).
    j: u32,
    /// Class of the last stage's device (NONE at the root).
    c: u32,
    /// First layer of the last stage.
    first: u32,
    parent: u32,
    key: u128,
    g: f64,
    lat: f64,
    dead: bool,
}

#[derive(PartialEq)]
struct Open {
    f: f64,
    j: u32,
    idx: u32,
    tight: bool,
}
impl Eq for Open {}
impl Ord for Open {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: smallest f first, then deepest, then oldest.
        o.f.total_cmp(&self.f)
            .then(self.j.cmp(&o.j))
            .then(o.idx.cmp(&self.idx))
    }
}
impl PartialOrd for Open {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A placement as (class, first layer, last layer) per stage.
pub(super) type Path = Vec<(usize, usize, usize)>;

pub(super) struct Outcome {
    pub(super) best: Option<(f64, Path)>,
    pub(super) lower_bound: f64,
    pub(super) proven: bool,
    pub(super) labels: usize,
    pub(super) expanded: usize,
    pub(super) budget_exhausted: bool,
}

struct Search<'c, 'a> {
    core: &'c Core<'a>,
    metric: Metric,
    comb: Combine,
    /// Latency SLO (tracked only under `Combine::Max` with `Metric::Time`).
    slo: Option<f64>,
    h: Vec<f64>,
    next: Vec<f64>,
    hlat: Vec<f64>,
    nextlat: Vec<f64>,
    /// Stage candidates evaluated so far (the search's unit of work).
    work: std::cell::Cell<u64>,
}

impl Search<'_, '_> {
    fn counts(&self, key: u128) -> Vec<usize> {
        let radix = self.core.radix.as_deref().unwrap_or(&[]);
        self.core
            .classes
            .iter()
            .enumerate()
            .map(|(c, cl)| match radix.get(c) {
                Some(&r) => ((key / r) % (cl.members.len() as u128 + 1)) as usize,
                None => 0,
            })
            .collect()
    }

    fn radix(&self, c: usize) -> u128 {
        self.core.radix.as_ref().map_or(0, |r| r[c])
    }

    /// The availability-aware bound of a label: (objective bound, latency bound).
    fn tight_bound(&self, l: &Label, counts: &[usize]) -> (f64, f64) {
        let (n, nc) = (self.core.n, self.core.nc());
        let j = l.j as usize;
        if j == n {
            return (l.g, l.lat);
        }
        let mut f = f64::INFINITY;
        let mut fl = f64::INFINITY;
        for (d, &used) in counts.iter().enumerate().take(nc) {
            if used >= self.core.classes[d].members.len() {
                continue;
            }
            let (tr, trl) = if l.c == NONE {
                (0.0, 0.0)
            } else {
                let c = l.c as usize;
                match self.core.transfer(self.metric, c, d, j - 1) {
                    Some(tr) => (tr, tr),
                    None => continue,
                }
            };
            f = f.min(self.comb.of(l.g, self.comb.of(tr, self.h[j * nc + d])));
            if self.slo.is_some() {
                fl = fl.min(l.lat + trl + self.hlat[j * nc + d]);
            }
        }
        (f, fl)
    }

    fn slo_ok(&self, lat_bound: f64) -> bool {
        self.slo.is_none_or(|s| lat_bound <= s)
    }

    /// Children of `l` (index `li`), each with its cheap bound; goals go to `on_goal`.
    fn expand(
        &self,
        l: &Label,
        li: u32,
        counts: &[usize],
        ub: &mut f64,
        mut on_goal: impl FnMut(&Label, f64),
        out: &mut Vec<(Label, f64)>,
    ) {
        let (n, nc) = (self.core.n, self.core.nc());
        let j = l.j as usize;
        for (d, &used) in counts.iter().enumerate().take(nc) {
            if used >= self.core.classes[d].members.len() {
                continue;
            }
            let tr = if l.c == NONE {
                0.0
            } else {
                match self.core.transfer(self.metric, l.c as usize, d, j - 1) {
                    Some(x) => x,
                    None => continue,
                }
            };
            let g1 = self.comb.of(l.g, tr);
            let lat1 = l.lat + if self.metric == Metric::Time { tr } else { 0.0 };
            if self.comb.of(g1, self.h[j * nc + d]) >= *ub * (1.0 - REL_EPS) {
                continue;
            }
            if self.slo.is_some() && !self.slo_ok(lat1 + self.hlat[j * nc + d]) {
                continue;
            }
            let key = l.key + self.radix(d);
            self.core.stages(self.metric, d, j, |k, cost, time| {
                self.work.set(self.work.get() + 1);
                let g2 = self.comb.of(g1, cost);
                let lat2 = lat1 + time;
                if g2 >= *ub * (1.0 - REL_EPS) {
                    return false; // costs only grow with k
                }
                if self.slo.is_some_and(|s| lat2 > s) {
                    return false;
                }
                let child = Label {
                    j: (k + 1) as u32,
                    c: d as u32,
                    first: j as u32,
                    parent: li,
                    key,
                    g: g2,
                    lat: lat2,
                    dead: false,
                };
                if k + 1 == n {
                    *ub = g2;
                    on_goal(&child, g2);
                    return true;
                }
                let f = self.comb.of(g2, self.next[k * nc + d]);
                if f >= *ub * (1.0 - REL_EPS) {
                    return true;
                }
                if self.slo.is_some() && !self.slo_ok(lat2 + self.nextlat[k * nc + d]) {
                    return true;
                }
                out.push((child, f));
                true
            });
        }
    }

    fn path(arena: &[Label], goal: &Label) -> Path {
        let mut out = Vec::new();
        let mut cur = *goal;
        loop {
            if cur.c == NONE {
                break;
            }
            out.push((cur.c as usize, cur.first as usize, cur.j as usize - 1));
            if cur.parent == NONE {
                break;
            }
            cur = arena[cur.parent as usize];
        }
        out.reverse();
        out
    }

    fn root(&self) -> Label {
        Label {
            j: 0,
            c: NONE,
            first: 0,
            parent: NONE,
            key: 0,
            g: 0.0,
            lat: 0.0,
            dead: false,
        }
    }

    /// The incumbent: a beam of the best `BEAM_WIDTH` labels per layer boundary.
    fn beam(&self, ub: &mut f64, best: &mut Option<(f64, Path)>) {
        let n = self.core.n;
        let mut arena: Vec<Label> = Vec::new();
        let mut buckets: Vec<Vec<(Label, f64)>> = vec![Vec::new(); n];
        buckets[0].push((self.root(), 0.0));
        let mut out = Vec::new();
        // The beam keeps no dominance map: it only proposes an incumbent.
        for j in 0..n {
            let mut b = std::mem::take(&mut buckets[j]);
            b.sort_by(|x, y| x.1.total_cmp(&y.1));
            b.dedup_by(|x, y| x.0.c == y.0.c && x.0.key == y.0.key);
            b.truncate(BEAM_WIDTH);
            for (l, _) in b {
                let li = arena.len() as u32;
                arena.push(l);
                let counts = self.counts(l.key);
                out.clear();
                let mut goal = None;
                self.expand(&l, li, &counts, ub, |g, v| goal = Some((*g, v)), &mut out);
                if let Some((g, v)) = goal {
                    *best = Some((v, Self::path(&arena, &g)));
                }
                for &(c, f) in &out {
                    let bj = c.j as usize;
                    let bucket = &mut buckets[bj];
                    bucket.push((c, f));
                    if bucket.len() > 8 * BEAM_WIDTH {
                        bucket.sort_by(|x, y| x.1.total_cmp(&y.1));
                        bucket.truncate(BEAM_WIDTH);
                    }
                }
            }
        }
    }

    /// Greedy descent from label `start`: always the child with the smallest bound.
    fn dive(
        &self,
        arena: &mut Vec<Label>,
        start: u32,
        ub: &mut f64,
        best: &mut Option<(f64, Path)>,
    ) {
        let mut cur = start;
        let mut out = Vec::new();
        loop {
            let l = arena[cur as usize];
            let counts = self.counts(l.key);
            out.clear();
            let mut goal = None;
            self.expand(&l, cur, &counts, ub, |g, v| goal = Some((*g, v)), &mut out);
            if let Some((g, v)) = goal {
                *best = Some((v, Self::path(arena, &g)));
            }
            let pick = out
                .iter()
                .filter(|(_, f)| *f < *ub * (1.0 - REL_EPS))
                .min_by(|a, b| a.1.total_cmp(&b.1).then(b.0.j.cmp(&a.0.j)));
            match pick {
                Some(&(c, _)) => {
                    cur = arena.len() as u32;
                    arena.push(c);
                }
                None => return,
            }
        }
    }

    fn run(&self, max_labels: usize) -> Outcome {
        let nc = self.core.nc();
        let mut ub = f64::INFINITY;
        let mut best: Option<(f64, Path)> = None;
        self.beam(&mut ub, &mut best);
        let root = self.root();
        let root_bound = self.tight_bound(&root, &vec![0; nc]).0;
        if self.core.radix.is_none() {
            // The used-count key does not fit: the beam's answer with the relaxation's bound.
            let lb = root_bound.min(ub);
            let proven = best.is_some() && lb >= ub * (1.0 - REL_EPS);
            return Outcome {
                best,
                lower_bound: lb,
                proven,
                labels: 0,
                expanded: 0,
                budget_exhausted: !proven,
            };
        }
        let mut arena: Vec<Label> = vec![root];
        let mut seen: HashMap<(u32, u32, u128), Vec<u32>> = HashMap::new();
        let mut heap = BinaryHeap::new();
        heap.push(Open {
            f: root_bound,
            j: 0,
            idx: 0,
            tight: true,
        });
        let mut expanded = 0usize;
        let mut out = Vec::new();
        let mut lower_bound = f64::INFINITY;
        let mut exhausted = false;
        while let Some(o) = heap.pop() {
            if o.f >= ub * (1.0 - REL_EPS) {
                lower_bound = ub;
                break;
            }
            let l = arena[o.idx as usize];
            if l.dead {
                continue;
            }
            let counts = self.counts(l.key);
            if !o.tight {
                let (f, fl) = self.tight_bound(&l, &counts);
                if f >= ub * (1.0 - REL_EPS) || !self.slo_ok(fl) {
                    continue;
                }
                heap.push(Open {
                    f: f.max(o.f),
                    j: o.j,
                    idx: o.idx,
                    tight: true,
                });
                continue;
            }
            if arena.len() >= max_labels || self.work.get() >= MAX_WORK {
                lower_bound = o.f.min(ub);
                exhausted = true;
                // Dive greedily from the best open states for a better incumbent.
                let mut starts = vec![o.idx];
                while starts.len() < DIVES {
                    match heap.pop() {
                        Some(x) if !arena[x.idx as usize].dead => starts.push(x.idx),
                        Some(_) => {}
                        None => break,
                    }
                }
                for s in starts {
                    self.dive(&mut arena, s, &mut ub, &mut best);
                }
                break;
            }
            expanded += 1;
            out.clear();
            let mut goal = None;
            self.expand(
                &l,
                o.idx,
                &counts,
                &mut ub,
                |g, v| goal = Some((*g, v)),
                &mut out,
            );
            if let Some((g, v)) = goal {
                best = Some((v, Self::path(&arena, &g)));
            }
            for &(c, f) in &out {
                if f >= ub * (1.0 - REL_EPS) {
                    continue;
                }
                let key = (c.j, c.c, c.key);
                let entry = seen.entry(key).or_default();
                let dominated = entry.iter().any(|&e| {
                    let e = &arena[e as usize];
                    e.g <= c.g && (self.slo.is_none() || e.lat <= c.lat)
                });
                if dominated {
                    continue;
                }
                entry.retain(|&e| {
                    let el = &mut arena[e as usize];
                    let beaten = c.g <= el.g && (self.slo.is_none() || c.lat <= el.lat);
                    if beaten {
                        el.dead = true;
                    }
                    !beaten
                });
                let idx = arena.len() as u32;
                entry.push(idx);
                arena.push(c);
                heap.push(Open {
                    f,
                    j: c.j,
                    idx,
                    tight: false,
                });
            }
        }
        if !exhausted && lower_bound == f64::INFINITY {
            // The open list emptied: everything was searched.
            lower_bound = ub;
        }
        let proven = !exhausted;
        Outcome {
            best,
            lower_bound,
            proven,
            labels: arena.len(),
            expanded,
            budget_exhausted: exhausted,
        }
    }
}

pub(super) fn solve(
    core: &Core,
    metric: Metric,
    comb: Combine,
    slo: Option<f64>,
    max_labels: usize,
) -> Outcome {
    let (h, next) = core.relaxed(metric, comb);
    let (hlat, nextlat) = if slo.is_some() {
        core.relaxed(Metric::Time, Combine::Sum)
    } else {
        (Vec::new(), Vec::new())
    };
    Search {
        core,
        metric,
        comb,
        slo,
        h,
        next,
        hlat,
        nextlat,
        work: std::cell::Cell::new(0),
    }
    .run(max_labels)
}
