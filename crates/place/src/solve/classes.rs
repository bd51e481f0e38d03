//! The problem over device classes: devices that swap without changing any cost (same layer
//! times, memory and links to every other device) form a class; per class the layer times,
//! the Pareto-optimal links between classes, the stage costs of a layer range, the
//! transfers, and the relaxation `h` (best completion when devices may be reused) that
//! bounds the search.
//!
//! It knows nothing of the search order, labels or budgets, nor of how answers are worded.

use std::collections::HashMap;

use crate::problem::Problem;
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Metric {
    /// Stage cost = compute seconds, transfers cost seconds, memory must fit.
    Time,
    /// Stage cost = stage memory over device memory; transfers free; memory unchecked.
    MemoryScale,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Combine {
    Sum,
    Max,
}

impl Combine {
    #[inline]
    pub(super) fn of(self, a: f64, b: f64) -> f64 {
        match self {
            Combine::Sum => a + b,
            Combine::Max => a.max(b),
        }
    }
}

pub(super) struct Class {
    pub(super) members: Vec<usize>,
    pub(super) memory_bytes: f64,
}

/// The problem over device classes.
pub(super) struct Core<'a> {
    p: &'a Problem,
    pub(super) classes: Vec<Class>,
    /// `t[c * n + j]`: time of layer j on class c (∞: cannot run).
    pub(super) t: Vec<f64>,
    /// `links[c * nc + d]`: Pareto-optimal (bytes/s, latency) links between a device of
    /// class c and one of class d (c == d: two distinct members).
    links: Vec<Vec<(f64, f64)>>,
    /// Mixed radix of the used-count key; `None` when it does not fit 128 bits.
    pub(super) radix: Option<Vec<u128>>,
    pub(super) n: usize,
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
    pub(super) fn new(p: &'a Problem) -> Core<'a> {
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
    pub(super) fn with_cap(&self, cap: f64) -> Core<'a> {
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

    pub(super) fn nc(&self) -> usize {
        self.classes.len()
    }

    /// Transfer after layer `k` from class `c` to class `d`, or `None` without a link.
    #[inline]
    pub(super) fn transfer(&self, metric: Metric, c: usize, d: usize, k: usize) -> Option<f64> {
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
    pub(super) fn stages(
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
    pub(super) fn relaxed(&self, metric: Metric, comb: Combine) -> (Vec<f64>, Vec<f64>) {
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
