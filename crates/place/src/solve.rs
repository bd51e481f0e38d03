//! The exact solver: best-first branch and bound over (layers placed, last device class,
//! devices used per class), bounded below by a relaxation that may reuse devices.
//!
//! * **Symmetry.** Devices that can swap places without changing any cost (same layer
//!   times, same memory, the same links to every other device) form a class; the symmetric
//!   group acts on each class, so a set of used devices is known up to symmetry by how many
//!   of each class it holds, and the last device by its class. The search state is
//!   `(j, class of the last device, counts)`: the dynamic program over (layer prefix, last
//!   device, used set), quotiented by the symmetry, and exactly that DP when all devices
//!   differ.
//! * **Bound.** `h[j][c]`: the best completion of layers `j..` starting a stage on class
//!   `c`, computed backwards when devices may be reused (a relaxation: every placement is a
//!   relaxed placement). A state's bound is its cost so far combined with the best
//!   transfer-plus-`h` over the classes it can still use. Costs never decrease along a
//!   path (sums of non-negative terms, or maxima), so the bound is admissible and the first
//!   time the smallest open bound reaches the incumbent, the incumbent is optimal.
//! * **Incumbent.** A beam over layer boundaries (the best few states per boundary by
//!   bound) finds a placement before the exact search starts, so a search stopped by its
//!   label budget still answers, with the bound it proved (`optimal: false`).
//! * **SLO.** Under the throughput objective with a latency SLO, each state keeps a Pareto
//!   set of (bottleneck, latency) labels; a label whose latency plus the relaxed remaining
//!   latency exceeds the SLO is cut.
//!
//! Deterministic: no clock, no threads, fixed expansion order, index tie-breaks.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use crate::problem::Problem;

/// Labels (search states) the exact search may create before it stops and reports its
/// bound: about 30 MB at 64 bytes per label plus its map entry, and under a second on one
/// core of the development machine (a shared 2-core VM).
pub const DEFAULT_MAX_LABELS: usize = 400_000;
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

/// What the placement minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// One request's end-to-end time: every stage's compute plus every transfer.
    Latency,
    /// A pipelined stream: the largest stage time or transfer (its inverse is the rate).
    Throughput,
}

impl Objective {
    pub fn keyword(self) -> &'static str {
        match self {
            Objective::Latency => "latency",
            Objective::Throughput => "throughput",
        }
    }
}

impl std::str::FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "latency" => Ok(Objective::Latency),
            "throughput" => Ok(Objective::Throughput),
            _ => Err(format!(
                "unknown objective `{s}` (allowed: latency, throughput)"
            )),
        }
    }
}

/// Solver options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub objective: Objective,
    /// Latency limit of one request (seconds); with the throughput objective, the best
    /// bottleneck among placements whose latency meets it.
    pub slo_s: Option<f64>,
    /// Label budget of the exact search.
    pub max_labels: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            objective: Objective::Latency,
            slo_s: None,
            max_labels: DEFAULT_MAX_LABELS,
        }
    }
}

/// One stage of a placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    pub device: String,
    pub device_index: usize,
    pub kind: String,
    pub first_layer: usize,
    pub last_layer: usize,
    pub first_layer_name: String,
    pub last_layer_name: String,
    /// Sum of the stage's layer times on its device.
    pub compute_s: f64,
    /// Transfer of the stage's output to the next stage (0 for the last stage).
    pub transfer_s: f64,
    pub memory_bytes: f64,
    pub device_memory_bytes: f64,
}

/// What the search did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchStats {
    pub devices: usize,
    /// Classes of interchangeable devices the search works over.
    pub device_classes: usize,
    pub labels: usize,
    pub expanded: usize,
    /// The label budget ran out before optimality was proven.
    pub budget_exhausted: bool,
}

/// The answer of [`place`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub feasible: bool,
    pub objective: Objective,
    /// The objective's value of the placement (`null` when infeasible).
    pub value_s: Option<f64>,
    /// Proven optimal (or, when infeasible, proven infeasible).
    pub optimal: bool,
    /// The best proven lower bound on the objective (equals `value_s` when optimal).
    pub lower_bound_s: Option<f64>,
    /// The placement's latency (sum of stage times and transfers).
    pub latency_s: Option<f64>,
    /// The placement's bottleneck (largest stage time or transfer).
    pub bottleneck_s: Option<f64>,
    pub slo_s: Option<f64>,
    pub stages: Vec<Stage>,
    /// Why no placement exists (infeasible answers).
    pub reason: Option<String>,
    /// Bytes all layers need together.
    pub memory_needed_bytes: f64,
    /// Infeasible by memory: the least factor every device's memory would need to grow by
    /// for some placement to fit (≥ 1).
    pub min_memory_scale: Option<f64>,
    pub search: SearchStats,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Metric {
    /// Stage cost = compute seconds, transfers cost seconds, memory must fit.
    Time,
    /// Stage cost = stage memory over device memory; transfers free; memory unchecked.
    MemoryScale,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Combine {
    Sum,
    Max,
}

impl Combine {
    #[inline]
    fn of(self, a: f64, b: f64) -> f64 {
        match self {
            Combine::Sum => a + b,
            Combine::Max => a.max(b),
        }
    }
}

const NONE: u32 = u32::MAX;

struct Class {
    members: Vec<usize>,
    memory_bytes: f64,
}

/// The problem over device classes.
struct Core<'a> {
    p: &'a Problem,
    classes: Vec<Class>,
    /// `t[c * n + j]`: time of layer j on class c (∞: cannot run).
    t: Vec<f64>,
    /// `links[c * nc + d]`: Pareto-optimal (bytes/s, latency) links between a device of
    /// class c and one of class d (c == d: two distinct members).
    links: Vec<Vec<(f64, f64)>>,
    /// Mixed radix of the used-count key; `None` when it does not fit 128 bits.
    radix: Option<Vec<u128>>,
    n: usize,
    /// Largest stage time or transfer allowed (`Metric::Time`; ∞: no limit).
    cap: f64,
}

fn pareto(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    // Highest bandwidth first, then lowest latency; keep a link only if its latency beats
    // every faster one.
    v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(v.len());
    for l in v {
        if out.last().is_none_or(|o| l.1 < o.1) {
            out.push(l);
        }
    }
    out
}

impl<'a> Core<'a> {
    fn new(p: &'a Problem) -> Core<'a> {
        let n = p.layers.len();
        let nd = p.devices.len();
        // Kind profiles: kinds with identical time columns are one profile.
        let mut profile_of_kind = vec![usize::MAX; p.kinds.len()];
        let mut profiles: HashMap<Vec<Option<u64>>, usize> = HashMap::new();
        for d in &p.devices {
            if profile_of_kind[d.kind] == usize::MAX {
                let col: Vec<Option<u64>> = p
                    .layers
                    .iter()
                    .map(|l| l.time_s[d.kind].map(f64::to_bits))
                    .collect();
                let next = profiles.len();
                profile_of_kind[d.kind] = *profiles.entry(col).or_insert(next);
            }
        }
        // Adjacency: Pareto-optimal link lists per ordered pair (sparse map).
        let mut adj: HashMap<(usize, usize), Vec<(f64, f64)>> = HashMap::new();
        for l in &p.links {
            adj.entry((l.a, l.b))
                .or_default()
                .push((l.bytes_per_s, l.latency_s));
            adj.entry((l.b, l.a))
                .or_default()
                .push((l.bytes_per_s, l.latency_s));
        }
        for v in adj.values_mut() {
            *v = pareto(std::mem::take(v));
        }
        // Per device: (neighbour, its links as bit patterns), sorted.
        type Neighbours = Vec<(usize, Vec<(u64, u64)>)>;
        let mut nbrs: Vec<Neighbours> = vec![Vec::new(); nd];
        for (&(a, b), v) in &adj {
            nbrs[a].push((
                b,
                v.iter().map(|x| (x.0.to_bits(), x.1.to_bits())).collect(),
            ));
        }
        for v in &mut nbrs {
            v.sort();
        }
        // Signature: necessary condition for two devices to be interchangeable.
        type Sig = (usize, u64, Vec<Vec<(u64, u64)>>);
        let sig = |d: usize| -> Sig {
            let mut lists: Vec<Vec<(u64, u64)>> = nbrs[d].iter().map(|x| x.1.clone()).collect();
            lists.sort();
            (
                profile_of_kind[p.devices[d].kind],
                p.devices[d].memory_bytes.to_bits(),
                lists,
            )
        };
        let link_of = |a: usize, b: usize| adj.get(&(a, b));
        let swappable = |a: usize, b: usize| -> bool {
            // Same links to every third device (both neighbour lists, either direction).
            let na = &nbrs[a];
            let nb = &nbrs[b];
            let third = |v: &Neighbours, x: usize, y: usize| {
                v.iter()
                    .filter(|e| e.0 != x && e.0 != y)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            third(na, a, b) == third(nb, a, b)
        };
        let mut classes: Vec<Class> = Vec::new();
        let mut by_sig: HashMap<Sig, Vec<usize>> = HashMap::new();
        for d in 0..nd {
            let s = sig(d);
            let cands = by_sig.entry(s).or_default();
            let found = cands
                .iter()
                .copied()
                .find(|&c| swappable(classes[c].members[0], d));
            match found {
                Some(c) => classes[c].members.push(d),
                None => {
                    cands.push(classes.len());
                    classes.push(Class {
                        members: vec![d],
                        memory_bytes: p.devices[d].memory_bytes,
                    });
                }
            }
        }
        let nc = classes.len();
        let mut t = vec![f64::INFINITY; nc * n];
        for (c, cl) in classes.iter().enumerate() {
            let kind = p.devices[cl.members[0]].kind;
            for (j, l) in p.layers.iter().enumerate() {
                if let Some(x) = l.time_s[kind] {
                    t[c * n + j] = x;
                }
            }
        }
        let mut links = vec![Vec::new(); nc * nc];
        for c in 0..nc {
            for d in 0..nc {
                let a = classes[c].members[0];
                let b = if c == d {
                    match classes[c].members.get(1) {
                        Some(&b) => b,
                        None => continue,
                    }
                } else {
                    classes[d].members[0]
                };
                if let Some(v) = link_of(a, b) {
                    links[c * nc + d] = v.clone();
                }
            }
        }
        let mut radix = Some(Vec::with_capacity(nc));
        let mut acc: u128 = 1;
        for cl in &classes {
            if let Some(r) = radix.as_mut() {
                r.push(acc);
            }
            match acc.checked_mul(cl.members.len() as u128 + 1) {
                Some(x) => acc = x,
                None => {
                    radix = None;
                    break;
                }
            }
        }
        Core {
            p,
            classes,
            t,
            links,
            radix,
            n,
            cap: f64::INFINITY,
        }
    }

    /// The same problem with every stage time and transfer limited to `cap`.
    fn with_cap(&self, cap: f64) -> Core<'a> {
        Core {
            p: self.p,
            classes: self
                .classes
                .iter()
                .map(|c| Class {
                    members: c.members.clone(),
                    memory_bytes: c.memory_bytes,
                })
                .collect(),
            t: self.t.clone(),
            links: self.links.clone(),
            radix: self.radix.clone(),
            n: self.n,
            cap,
        }
    }

    fn nc(&self) -> usize {
        self.classes.len()
    }

    /// Transfer after layer `k` from class `c` to class `d`, or `None` without a link.
    #[inline]
    fn transfer(&self, metric: Metric, c: usize, d: usize, k: usize) -> Option<f64> {
        let links = &self.links[c * self.nc() + d];
        if links.is_empty() {
            return None;
        }
        if metric == Metric::MemoryScale {
            return Some(0.0);
        }
        let l = &self.p.layers[k];
        let mut best = f64::INFINITY;
        for &(bw, lat) in links {
            best = best.min(l.output_messages * lat + l.output_bytes / bw);
        }
        (best <= self.cap).then_some(best)
    }

    /// Stage costs of layers `j..=k` on class `c` for k = j, j+1, … while the stage can
    /// run (and, for `Metric::Time`, fits): calls `f(k, cost, compute_s)`.
    #[inline]
    fn stages(
        &self,
        metric: Metric,
        c: usize,
        j: usize,
        mut f: impl FnMut(usize, f64, f64) -> bool,
    ) {
        let cap = self.classes[c].memory_bytes;
        let row = &self.t[c * self.n..(c + 1) * self.n];
        let mut time = 0.0;
        let mut mem = 0.0;
        for (k, &x) in row.iter().enumerate().skip(j) {
            if x == f64::INFINITY {
                return;
            }
            time += x;
            mem += self.p.layers[k].memory_bytes;
            let cost = match metric {
                Metric::Time => {
                    if mem > cap || time > self.cap {
                        return;
                    }
                    time
                }
                Metric::MemoryScale => {
                    if mem == 0.0 {
                        0.0
                    } else if cap > 0.0 {
                        mem / cap
                    } else {
                        return;
                    }
                }
            };
            if !f(k, cost, time) {
                return;
            }
        }
    }

    /// The relaxation: `h[j * nc + c]` for j in 0..n, and `next[k * nc + c]`: the best
    /// transfer after layer k from class c combined with `h[k+1]` (∞ for k = n − 1).
    fn relaxed(&self, metric: Metric, comb: Combine) -> (Vec<f64>, Vec<f64>) {
        let (n, nc) = (self.n, self.nc());
        let mut h = vec![f64::INFINITY; n * nc];
        let mut next = vec![f64::INFINITY; n * nc];
        for j in (0..n).rev() {
            for c in 0..nc {
                let mut best = f64::INFINITY;
                self.stages(metric, c, j, |k, cost, _| {
                    let v = if k + 1 == n {
                        cost
                    } else {
                        comb.of(cost, next[k * nc + c])
                    };
                    best = best.min(v);
                    true
                });
                h[j * nc + c] = best;
            }
            if j > 0 {
                let k = j - 1;
                for c in 0..nc {
                    let mut best = f64::INFINITY;
                    for d in 0..nc {
                        if let Some(tr) = self.transfer(metric, c, d, k) {
                            best = best.min(comb.of(tr, h[j * nc + d]));
                        }
                    }
                    next[k * nc + c] = best;
                }
            }
        }
        (h, next)
    }
}

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
type Path = Vec<(usize, usize, usize)>;

struct Outcome {
    best: Option<(f64, Path)>,
    lower_bound: f64,
    proven: bool,
    labels: usize,
    expanded: usize,
    budget_exhausted: bool,
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

fn solve(
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

/// Evaluates a placement given as (device index, first layer, last layer) per stage:
/// its stages with their costs, its latency and its bottleneck. `None` if it is not a
/// valid placement (layers not covered in order, a device repeated or unable to run its
/// layers, memory exceeded, consecutive devices not linked).
pub fn evaluate(p: &Problem, stages: &[(usize, usize, usize)]) -> Option<(Vec<Stage>, f64, f64)> {
    let n = p.layers.len();
    let mut used = vec![false; p.devices.len()];
    let mut expect = 0;
    let mut out: Vec<Stage> = Vec::with_capacity(stages.len());
    for (i, &(d, a, b)) in stages.iter().enumerate() {
        if d >= p.devices.len() || a != expect || b < a || b >= n || used[d] {
            return None;
        }
        used[d] = true;
        expect = b + 1;
        let dev = &p.devices[d];
        let mut compute = 0.0;
        let mut mem = 0.0;
        for l in &p.layers[a..=b] {
            compute += l.time_s[dev.kind]?;
            mem += l.memory_bytes;
        }
        if mem > dev.memory_bytes {
            return None;
        }
        let transfer = match stages.get(i + 1) {
            None => 0.0,
            Some(&(e, _, _)) => {
                let l = &p.layers[b];
                p.links
                    .iter()
                    .filter(|k| (k.a == d && k.b == e) || (k.a == e && k.b == d))
                    .map(|k| k.transfer_s(l.output_bytes, l.output_messages))
                    .min_by(f64::total_cmp)?
            }
        };
        out.push(Stage {
            device: dev.name.clone(),
            device_index: d,
            kind: p.kinds[dev.kind].clone(),
            first_layer: a,
            last_layer: b,
            first_layer_name: p.layers[a].name.clone(),
            last_layer_name: p.layers[b].name.clone(),
            compute_s: compute,
            transfer_s: transfer,
            memory_bytes: mem,
            device_memory_bytes: dev.memory_bytes,
        });
    }
    if expect != n {
        return None;
    }
    let latency: f64 = out.iter().map(|s| s.compute_s + s.transfer_s).sum();
    let bottleneck = out
        .iter()
        .map(|s| s.compute_s.max(s.transfer_s))
        .fold(0.0, f64::max);
    Some((out, latency, bottleneck))
}

/// The concrete devices of a class path: each class hands out its members in order.
fn devices_of(core: &Core, path: &Path) -> Vec<(usize, usize, usize)> {
    let mut next = vec![0usize; core.nc()];
    path.iter()
        .map(|&(c, a, b)| {
            let d = core.classes[c].members[next[c]];
            next[c] += 1;
            (d, a, b)
        })
        .collect()
}

fn fmt_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.3} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.3} MB", b / 1e6)
    } else {
        format!("{b:.4} bytes")
    }
}

/// Places the layer chain of `p` over its devices, optimally where the search finishes.
pub fn place(p: &Problem, opts: &Options) -> Placement {
    let core = Core::new(p);
    let (comb, slo) = match opts.objective {
        Objective::Latency => (Combine::Sum, None),
        Objective::Throughput => (Combine::Max, opts.slo_s),
    };
    let max_labels = opts.max_labels.max(1);
    let mut out = solve(&core, Metric::Time, comb, slo, max_labels);
    if opts.objective == Objective::Throughput {
        // Among the placements with the best bottleneck, the one with the least latency:
        // minimise latency with every stage and transfer held to that bottleneck.
        // Only for a proven bottleneck, with a quarter of the budget: a tie-break, not a
        // second search.
        if let Some(value) = out.best.as_ref().map(|b| b.0).filter(|_| out.proven) {
            let capped = core.with_cap(value);
            let second = solve(
                &capped,
                Metric::Time,
                Combine::Sum,
                slo,
                (max_labels / 4).max(1),
            );
            if let Some((_, p2)) = second.best {
                out.best = Some((value, p2));
            }
            out.labels += second.labels;
            out.expanded += second.expanded;
        }
    }
    let memory_needed_bytes: f64 = p.layers.iter().map(|l| l.memory_bytes).sum();
    let mut stats = SearchStats {
        devices: p.devices.len(),
        device_classes: core.nc(),
        labels: out.labels,
        expanded: out.expanded,
        budget_exhausted: out.budget_exhausted,
    };
    let mut answer = Placement {
        feasible: false,
        objective: opts.objective,
        value_s: None,
        optimal: false,
        lower_bound_s: None,
        latency_s: None,
        bottleneck_s: None,
        slo_s: opts.slo_s,
        stages: Vec::new(),
        reason: None,
        memory_needed_bytes,
        min_memory_scale: None,
        search: stats.clone(),
    };
    if let Some((value, path)) = &out.best {
        let concrete = devices_of(&core, path);
        if let Some((stages, latency, bottleneck)) = evaluate(p, &concrete) {
            // The latency objective with an SLO: the best latency either meets it or nothing does.
            if let (Objective::Latency, Some(s)) = (opts.objective, opts.slo_s) {
                if latency > s && out.proven {
                    answer.reason = Some(format!(
                        "no placement meets the latency SLO of {s} s: the lowest latency any placement reaches is {latency:.6} s"
                    ));
                    answer.optimal = true;
                    answer.lower_bound_s = Some(latency);
                    return answer;
                }
            }
            answer.feasible = true;
            answer.value_s = Some(*value);
            answer.optimal = out.proven;
            answer.lower_bound_s = Some(if out.proven { *value } else { out.lower_bound });
            answer.latency_s = Some(latency);
            answer.bottleneck_s = Some(bottleneck);
            answer.stages = stages;
            return answer;
        }
        // Cannot happen: the search only builds valid placements.
        answer.reason = Some("internal error: the search returned an invalid placement".into());
        return answer;
    }
    if !out.proven {
        answer.reason = Some(format!(
            "the search stopped at its budget of {max_labels} labels before finding a placement; not proven infeasible"
        ));
        return answer;
    }
    // Proven infeasible: say why.
    answer.optimal = true;
    let nc = core.nc();
    let n = p.layers.len();
    let mut too_big: Option<String> = None;
    for (j, l) in p.layers.iter().enumerate() {
        let runners: Vec<usize> = (0..nc).filter(|&c| core.t[c * n + j].is_finite()).collect();
        if runners.is_empty() {
            answer.reason = Some(format!(
                "layer {j} (`{}`) has no time on any device kind present ({})",
                l.name,
                p.kinds.join(", ")
            ));
            return answer;
        }
        let cap = runners
            .iter()
            .map(|&c| core.classes[c].memory_bytes)
            .fold(0.0, f64::max);
        if l.memory_bytes > cap && too_big.is_none() {
            too_big = Some(format!(
                "layer {j} (`{}`) needs {} but the largest device that runs it has {}",
                l.name,
                fmt_bytes(l.memory_bytes),
                fmt_bytes(cap)
            ));
        }
    }
    if slo.is_some() && too_big.is_none() {
        let free = solve(&core, Metric::Time, comb, None, max_labels);
        if free.best.is_some() {
            let lat = solve(&core, Metric::Time, Combine::Sum, None, max_labels);
            let best = lat.best.map(|b| b.0).unwrap_or(f64::NAN);
            answer.reason = Some(format!(
                "no placement meets the latency SLO of {} s: the lowest latency any placement reaches is {best:.6} s{}",
                opts.slo_s.unwrap_or(0.0),
                if lat.proven { "" } else { " (not proven the lowest)" }
            ));
            answer.lower_bound_s = Some(free.lower_bound);
            return answer;
        }
    }
    // Memory or links: the smallest memory growth that makes some chain fit.
    let scale = solve(&core, Metric::MemoryScale, Combine::Max, None, max_labels);
    stats.labels += scale.labels;
    stats.expanded += scale.expanded;
    answer.search = stats;
    match scale.best {
        None if scale.proven => {
            answer.reason = Some(
                "no chain of directly linked devices can run the layers in order (check the links and the kinds that run each layer)".into(),
            );
        }
        None => {
            answer.reason = Some("no placement fits memory; the search for the least memory growth stopped at its budget".into());
        }
        Some((s, _)) => {
            let total_cap: f64 = p.devices.iter().map(|d| d.memory_bytes).sum();
            let why = too_big.unwrap_or_else(|| {
                format!(
                    "the layers need {} together and no chain of linked devices holds them (all devices: {})",
                    fmt_bytes(memory_needed_bytes),
                    fmt_bytes(total_cap)
                )
            });
            answer.reason = Some(format!(
                "{why}; the best chain needs every device's memory × {s:.4}{}",
                if scale.proven {
                    ""
                } else {
                    " (or less: not proven)"
                }
            ));
            answer.min_memory_scale = Some(s);
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Device, Layer, Link};

    fn chain(
        times: &[&[f64]],
        mem: &[f64],
        devs: &[(usize, f64)],
        links: &[(usize, usize, f64, f64)],
    ) -> Problem {
        let kinds = (0..times[0].len()).map(|k| format!("k{k}")).collect();
        let layers = times
            .iter()
            .zip(mem)
            .enumerate()
            .map(|(i, (t, &m))| Layer {
                name: format!("l{i}"),
                time_s: t.iter().map(|&x| Some(x)).collect(),
                memory_bytes: m,
                output_bytes: 1.0,
                output_messages: 1.0,
            })
            .collect();
        let devices = devs
            .iter()
            .enumerate()
            .map(|(i, &(k, m))| Device {
                name: format!("d{i}"),
                kind: k,
                memory_bytes: m,
            })
            .collect();
        let links = links
            .iter()
            .map(|&(a, b, bw, lat)| Link {
                a,
                b,
                bytes_per_s: bw,
                latency_s: lat,
            })
            .collect();
        Problem::new(kinds, layers, devices, links, "test").unwrap()
    }

    #[test]
    fn one_device_takes_all_when_it_fits() {
        let p = chain(&[&[1.0], &[2.0]], &[1.0, 1.0], &[(0, 10.0)], &[]);
        let a = place(&p, &Options::default());
        assert!(a.feasible && a.optimal);
        assert_eq!(a.value_s, Some(3.0));
        assert_eq!(a.stages.len(), 1);
    }

    #[test]
    fn memory_forces_a_split_and_throughput_balances() {
        // Two identical devices, each holds 2 of 4 layers; link costs 1 + 1/1 = 2 s... use a fast link.
        let p = chain(
            &[&[1.0], &[1.0], &[1.0], &[1.0]],
            &[1.0; 4],
            &[(0, 2.0), (0, 2.0)],
            &[(0, 1, 1e9, 0.0)],
        );
        let a = place(
            &p,
            &Options {
                objective: Objective::Throughput,
                ..Options::default()
            },
        );
        assert!(a.feasible && a.optimal, "{a:?}");
        assert!((a.value_s.unwrap() - 2.0).abs() < 1e-6);
        assert_eq!(a.search.device_classes, 1);
    }

    #[test]
    fn infeasible_memory_reports_the_growth_needed() {
        let p = chain(
            &[&[1.0], &[1.0]],
            &[3.0, 3.0],
            &[(0, 2.0), (0, 2.0)],
            &[(0, 1, 1.0, 0.0)],
        );
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert!((a.min_memory_scale.unwrap() - 1.5).abs() < 1e-12, "{a:?}");
        assert!(a
            .reason
            .unwrap()
            .contains("layer 0 (`l0`) needs 3.0000 bytes"));
    }

    #[test]
    fn unlinked_devices_cannot_share_the_chain() {
        // Memory: either device alone would need twice its memory.
        let p = chain(&[&[1.0], &[1.0]], &[2.0, 2.0], &[(0, 2.0), (0, 2.0)], &[]);
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert_eq!(a.min_memory_scale, Some(2.0));
        // Kinds: layer 0 runs only on kind 0, layer 1 only on kind 1, and no link joins them.
        let mut p = chain(
            &[&[1.0, 1.0], &[1.0, 1.0]],
            &[1.0, 1.0],
            &[(0, 9.0), (1, 9.0)],
            &[],
        );
        p.layers[0].time_s[1] = None;
        p.layers[1].time_s[0] = None;
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert!(a
            .reason
            .unwrap()
            .contains("no chain of directly linked devices"));
    }

    #[test]
    fn slo_trades_bottleneck_for_latency() {
        // Fast device with a slow link vs one slow device alone.
        // Split over d0 (kind 0) and d1 (kind 0): bottleneck 1, latency 1 + 5 + 1 = 7.
        // All on d2 (kind 1, big memory): bottleneck = latency = 4.
        let p = chain(
            &[&[1.0, 2.0], &[1.0, 2.0]],
            &[1.0, 1.0],
            &[(0, 1.0), (0, 1.0), (1, 10.0)],
            &[(0, 1, 1.0, 4.0)],
        );
        let free = place(
            &p,
            &Options {
                objective: Objective::Throughput,
                ..Options::default()
            },
        );
        // Split: transfer 4 + 1/1 = 5 is the bottleneck; d2 alone takes 4.
        assert_eq!(free.value_s, Some(4.0));
        let p2 = chain(
            &[&[1.0, 1.2], &[1.0, 1.2]],
            &[1.0, 1.0],
            &[(0, 1.0), (0, 1.0), (1, 10.0)],
            &[(0, 1, 1.0, 0.5)],
        );
        let thr = Options {
            objective: Objective::Throughput,
            ..Options::default()
        };
        let free = place(&p2, &thr);
        assert_eq!(free.value_s, Some(1.5));
        assert_eq!(free.latency_s, Some(3.5));
        let slo = place(
            &p2,
            &Options {
                slo_s: Some(3.0),
                ..thr
            },
        );
        assert!(slo.optimal);
        assert_eq!(slo.value_s, Some(2.4));
        assert_eq!(slo.stages.len(), 1);
        let none = place(
            &p2,
            &Options {
                slo_s: Some(1.0),
                ..thr
            },
        );
        assert!(!none.feasible);
        let r = none.reason.unwrap();
        assert!(
            r.contains("lowest latency any placement reaches is 2.4"),
            "{r}"
        );
    }
}
