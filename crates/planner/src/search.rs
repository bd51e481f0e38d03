//! The search: every well-formed configuration of the GPUs is screened with the analytic
//! estimate (layer costs cached per shape, a memory lower bound pruning hopeless degrees),
//! stages that do not fit get the fewest fully recomputed blocks that make them fit, and
//! the best candidates get an optimal block layout and are re-ranked by the event
//! simulator.
//!
//! Deterministic: candidates are enumerated in a fixed order, evaluated in parallel into
//! that order, and ties are broken by the enumeration index, so the plan does not depend
//! on the thread count.

use std::collections::HashMap;

use rayon::prelude::*;

use plait_cost::estimate::{estimate_from_costs, layer_costs, policy_recompute, LayerCosts};
use plait_cost::layer::Workload;
use plait_cost::{comm::Groups, DeviceModel, Estimate};
use plait_spec::{
    ClusterSpec, ModelSpec, ParallelConfig, Recompute, Schedule, StageMap, TrainSpec,
};

use crate::export::Layout;
use crate::layout::{
    fit_recompute, partition_blocks, state_bytes, state_bytes_per_param, MapShape,
};
use crate::simulate::simulate_mapped;
use crate::{Plan, PlanError};

mod divisors;
mod infeasible;
mod order;

use divisors::divisors;
use infeasible::{infeasible, no_candidates};
use order::annotate;
pub use order::{robust_order, TIE_SHARE};

/// Dimensions the user fixed; `None` means "search it".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pins {
    pub dp: Option<u64>,
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub vp: Option<u64>,
    pub cp: Option<u64>,
    pub ep: Option<u64>,
    pub mbs: Option<u64>,
    pub zero: Option<u8>,
    pub sp: Option<bool>,
    /// `None`: per-stage recompute chosen by the planner (`auto`).
    pub recompute: Option<Recompute>,
    pub schedule: Option<Schedule>,
}

/// What to plan.
#[derive(Clone)]
pub struct Request<'a> {
    pub model: &'a ModelSpec,
    pub cluster: &'a ClusterSpec,
    pub train: &'a TrainSpec,
    pub device: &'a DeviceModel,
    pub gpus: u64,
    pub pins: Pins,
    /// Plans to return.
    pub top: usize,
    /// Candidates re-ranked by the simulator (at least `top`).
    pub simulate: usize,
    /// Block layouts the plans may use (an engine may not express every layout).
    pub shape: MapShape,
    /// Extra filter on plans beyond what `train.engine` runs (which the search always
    /// checks): applied to every configuration with its even layout, and again to the final
    /// layouts.
    pub allow: Option<&'a (dyn Fn(&Layout) -> bool + Sync)>,
}

impl<'a> Request<'a> {
    pub fn new(
        model: &'a ModelSpec,
        cluster: &'a ClusterSpec,
        train: &'a TrainSpec,
        device: &'a DeviceModel,
        gpus: u64,
    ) -> Self {
        Request {
            model,
            cluster,
            train,
            device,
            gpus,
            pins: Pins::default(),
            top: 5,
            simulate: 16,
            // The block layouts the engine it plans under can express.
            shape: crate::export::export_target(train.engine)
                .map_or(MapShape::Any, crate::export::map_shape),
            allow: None,
        }
    }
}

/// Counts of the search, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SearchStats {
    /// Well-formed configurations enumerated.
    pub candidates: usize,
    /// Rejected by the memory lower bound before any estimate.
    pub pruned: usize,
    /// Analytic estimates computed (including recompute refinements).
    pub estimated: usize,
    /// Configurations that fit.
    pub feasible: usize,
    /// Candidates simulated event by event.
    pub simulated: usize,
}

/// Why nothing fits, and what would.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Infeasible {
    pub reason: String,
    /// The least per-GPU memory any configuration of these GPUs needs.
    pub min_memory_bytes: f64,
    /// The smallest GPU count above the one asked for with a configuration (under the same
    /// pins) that fits by the analytic estimate, if one up to 2^20 GPUs exists: every count
    /// that some well-formed configuration occupies is tried, in increasing order.
    pub min_gpus: Option<u64>,
    /// Lower bound on GPUs from the model state alone (16 bytes per parameter, fully
    /// sharded).
    pub min_gpus_lower_bound: u64,
}

/// The answer of a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub plans: Vec<Plan>,
    pub search: SearchStats,
    pub infeasible: Option<Infeasible>,
}

/// Key of the layer-cost cache: everything a layer's cost depends on besides the model,
/// device and batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct ShapeKey {
    tp: u64,
    cp: u64,
    ep: u64,
    mbs: u64,
    sp: bool,
    recompute: u8,
}

fn recompute_code(r: Recompute) -> u8 {
    match r {
        Recompute::None => 0,
        Recompute::Selective => 1,
        Recompute::Full => 2,
    }
}

impl ShapeKey {
    pub(super) fn of(c: &ParallelConfig, recompute: Recompute) -> Self {
        ShapeKey {
            tp: c.tp,
            cp: c.cp,
            ep: c.ep,
            mbs: c.mbs,
            sp: c.sp,
            recompute: recompute_code(recompute),
        }
    }
}

fn pinned<T: Copy + PartialEq>(pin: Option<T>, all: Vec<T>) -> Vec<T> {
    match pin {
        Some(v) => all.into_iter().filter(|&x| x == v).collect(),
        None => all,
    }
}

/// Largest micro-batch the search tries: Megatron-LM runs with micro-batches of 1–16
/// sequences; beyond that the activation memory grows with no GEMM-efficiency gain left.
const MAX_MBS: u64 = 16;
/// Largest number of chunks per rank tried for the interleaved schedule (Megatron-LM's
/// published runs use 2–6; more chunks multiply p2p traffic).
const MAX_VP: u64 = 8;
/// Shortest per-rank sequence slice worth context parallelism: below ~1 k tokens the ring
/// attention's per-step transfers are no longer hidden by the attention compute.
pub(super) const MIN_CP_TOKENS: u64 = 1024;

/// Every well-formed configuration of `req`, in a fixed order.
pub fn enumerate(req: &Request) -> Vec<ParallelConfig> {
    let (m, t, pins) = (req.model, req.train, &req.pins);
    let n = req.gpus;
    let mut out = Vec::new();
    let recomputes = match pins.recompute {
        Some(r) => vec![r],
        None => vec![Recompute::None, Recompute::Selective, Recompute::Full],
    };
    for tp in pinned(pins.tp, divisors(n)) {
        if !m.heads.is_multiple_of(tp) || !m.ffn_hidden.is_multiple_of(tp) {
            continue;
        }
        for pp in pinned(pins.pp, divisors(n / tp)) {
            if pp > m.layers {
                continue;
            }
            for cp in pinned(pins.cp, divisors(n / (tp * pp))) {
                if cp > 1 && (pins.cp.is_none() && t.seq / cp < MIN_CP_TOKENS) {
                    continue;
                }
                let dp = n / (tp * pp * cp);
                if pins.dp.is_some_and(|d| d != dp) {
                    continue;
                }
                let eps = match m.moe {
                    Some(moe) => divisors(moe.experts)
                        .into_iter()
                        .filter(|e| (dp * cp).is_multiple_of(*e))
                        .collect(),
                    None => vec![1],
                };
                for ep in pinned(pins.ep, eps) {
                    if !t.gbs.is_multiple_of(dp) {
                        continue;
                    }
                    let per_replica = t.gbs / dp;
                    // Only micro-batches up to MAX_MBS (or the pinned one) are tried: test
                    // those, not every divisor of the batch (which may be near 2^64).
                    let mbss = (1..=MAX_MBS)
                        .chain(pins.mbs.filter(|&b| b > MAX_MBS))
                        .filter(|&b| per_replica.is_multiple_of(b))
                        .collect();
                    for mbs in pinned(pins.mbs, mbss) {
                        let micro = per_replica / mbs;
                        let zeros: Vec<u8> = if dp * cp > 1 {
                            vec![0, 1, 2, 3]
                        } else {
                            vec![0]
                        };
                        for zero in pinned(pins.zero, zeros) {
                            let sps = if tp > 1 {
                                vec![false, true]
                            } else {
                                vec![false]
                            };
                            for sp in pinned(pins.sp, sps) {
                                for (schedule, vp) in schedules(m.layers, pp, micro, pins) {
                                    for &recompute in &recomputes {
                                        let c = ParallelConfig {
                                            dp,
                                            tp,
                                            pp,
                                            vp,
                                            cp,
                                            ep,
                                            mbs,
                                            zero,
                                            sp,
                                            recompute,
                                            schedule,
                                        };
                                        if c.validate(m, t, n).is_ok() && allowed(req, &c, None) {
                                            out.push(c);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether `req.allow` accepts `c` with `map` (its even layout when None).
/// Whether the engine the request plans under runs `c` (with `map`, or its even layout),
/// and the caller's extra filter accepts it.
fn allowed(req: &Request, c: &ParallelConfig, map: Option<&StageMap>) -> bool {
    let even;
    let stage_map = match map {
        Some(m) => m,
        None => {
            even = StageMap::uniform(req.model.layers, c);
            &even
        }
    };
    let layout = Layout {
        config: c,
        stage_map,
        microbatches: c.microbatches(req.train),
    };
    crate::export::engine_supports(req.train.engine, &layout).is_ok()
        && req.allow.is_none_or(|allow| allow(&layout))
}

/// The (schedule, chunks) pairs worth trying for `pp` ranks and `micro` micro-batches.
fn schedules(layers: u64, pp: u64, micro: u64, pins: &Pins) -> Vec<(Schedule, u64)> {
    if pp == 1 {
        let s = pins.schedule.unwrap_or(Schedule::OneFOneB);
        return if s == Schedule::Interleaved || pins.vp.is_some_and(|v| v != 1) {
            vec![]
        } else {
            vec![(s, 1)]
        };
    }
    let mut out = Vec::new();
    for s in [
        Schedule::OneFOneB,
        Schedule::Gpipe,
        Schedule::ZbH1,
        Schedule::Scp,
    ] {
        if pins.schedule.is_none_or(|p| p == s) && pins.vp.is_none_or(|v| v == 1) {
            out.push((s, 1));
        }
    }
    if pins.schedule.is_none_or(|p| p == Schedule::Interleaved) && micro.is_multiple_of(pp) {
        for v in 2..=MAX_VP {
            if layers.is_multiple_of(pp * v) && pins.vp.is_none_or(|p| p == v) {
                out.push((Schedule::Interleaved, v));
            }
        }
    }
    out
}

/// A lower bound on any stage's weights + gradients + optimizer bytes per GPU: the average
/// stage holds the blocks' parameters over tp × pp (ZeRO-sharded over dp × cp).
pub(super) fn model_state_lower_bound(m: &ModelSpec, t: &TrainSpec, c: &ParallelConfig) -> f64 {
    let blocks = m.blocks_params() as f64;
    let expert = m.blocks_expert_params() as f64;
    let dense = blocks - expert;
    // A frozen base (LoRA) holds its weights only; the adapters are left out of the bound.
    let frozen = t.lora_adapters().is_some();
    let per = |params: f64, shards: f64| {
        if frozen {
            state_bytes(c.zero, params, 0.0, shards)
        } else {
            params * state_bytes_per_param(c.zero, shards)
        }
    };
    let dpc = (c.dp * c.cp) as f64;
    per(dense / (c.tp * c.pp) as f64, dpc)
        + per(expert / (c.tp * c.pp * c.ep) as f64, dpc / c.ep as f64)
}

/// One screened candidate, kept small: tens of thousands are alive at once.
#[derive(Debug, Clone)]
pub(super) struct Screened {
    index: usize,
    config: ParallelConfig,
    /// The layout with per-stage recompute when fitting needed one; None: even.
    fitted: Option<StageMap>,
    time_s: f64,
    fits: bool,
    peak_bytes: f64,
}

impl Screened {
    pub(super) fn map(&self, layers: u64) -> StageMap {
        self.fitted
            .clone()
            .unwrap_or_else(|| StageMap::uniform(layers, &self.config))
    }
}

/// Plans `req`: the best `req.top` plans by simulated iteration time, or why nothing fits.
pub fn plan(req: &Request, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Outcome, PlanError> {
    crate::pins::check_pins(req)?;
    let configs = enumerate(req);
    let mut stats = SearchStats {
        candidates: configs.len(),
        ..SearchStats::default()
    };
    let capacity = req.cluster.gpu.memory_bytes - req.cluster.memory_reserve_bytes;
    let hopeful: Vec<(usize, ParallelConfig)> = configs
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, c)| model_state_lower_bound(req.model, req.train, c) <= capacity)
        .collect();
    stats.pruned = configs.len() - hopeful.len();

    // Layer costs per shape (they depend on tp, cp, ep, mbs, sp and the recompute policy
    // only), computed once, in parallel, and shared.
    let mut shapes: Vec<(ShapeKey, ParallelConfig)> = hopeful
        .iter()
        .flat_map(|(_, c)| {
            [policy_recompute(c.recompute), Recompute::Full]
                .map(|r| (ShapeKey::of(c, r), ParallelConfig { recompute: r, ..*c }))
        })
        .collect();
    shapes.sort_unstable_by_key(|(k, _)| *k);
    shapes.dedup_by_key(|(k, _)| *k);
    let cache: HashMap<ShapeKey, LayerCosts> = shapes
        .par_iter()
        .map(|(k, cfg)| {
            let g = Groups::new(req.cluster, cfg);
            let w = Workload::new(cfg, req.train);
            (*k, layer_costs(req.model, req.device, &g, &w))
        })
        .collect();

    let done = std::sync::atomic::AtomicUsize::new(0);
    let total = hopeful.len();
    let screened: Vec<(usize, Option<Screened>)> = hopeful
        .par_iter()
        .map(|&(index, c)| {
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_multiple_of(4096) {
                progress(n, total);
            }
            screen(req, &cache, index, c)
        })
        .collect();
    progress(total, total);
    stats.estimated = screened.iter().map(|(n, _)| n).sum();
    let (mut fits, rest): (Vec<Screened>, Vec<Screened>) = screened
        .into_iter()
        .filter_map(|(_, s)| s)
        .partition(|s| s.fits);
    stats.feasible = fits.len();

    if configs.is_empty() {
        return Ok(Outcome {
            plans: Vec::new(),
            search: stats,
            infeasible: Some(no_candidates(req)),
        });
    }
    fits.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.index.cmp(&b.index)));

    // Second level: optimal block layout, then the event simulator, batch after batch of
    // the best screened candidates until `top` plans survive (the simulator's memory peak
    // must fit) or the candidates run out.
    let batch = req.simulate.max(req.top);
    let mut plans: Vec<(usize, Plan)> = Vec::new();
    for group in fits.chunks(batch) {
        let refined: Vec<Result<Option<(usize, Plan)>, PlanError>> =
            group.par_iter().map(|s| refine(req, &cache, s)).collect();
        stats.simulated += refined.len();
        for r in refined {
            if let Some(p) = r? {
                plans.push(p);
            }
        }
        if plans.len() >= req.top {
            break;
        }
    }
    if plans.is_empty() {
        return Ok(Outcome {
            plans: Vec::new(),
            search: stats,
            infeasible: Some(infeasible(req, &rest)),
        });
    }
    plans.sort_by(|(ia, a), (ib, b)| {
        a.estimate
            .iteration_time_s
            .total_cmp(&b.estimate.iteration_time_s)
            .then(ia.cmp(ib))
    });
    robust_order(&mut plans);
    plans.truncate(req.top);
    let mut plans: Vec<Plan> = plans.into_iter().map(|(_, p)| p).collect();
    annotate(&mut plans);
    Ok(Outcome {
        plans,
        search: stats,
        infeasible: None,
    })
}

/// One screened candidate through the second level: the best block layout that fits (the
/// DP's, else its own), simulated; None when the simulated peak does not fit or the engine
/// filter refuses it.
fn refine(
    req: &Request,
    cache: &HashMap<ShapeKey, LayerCosts>,
    s: &Screened,
) -> Result<Option<(usize, Plan)>, PlanError> {
    let own = s.map(req.model.layers);
    let partitioned = partition_blocks(req, &cache_for(cache, &s.config), &s.config, &own)
        .filter(|m| allowed(req, &s.config, Some(m)));
    for map in partitioned.into_iter().chain(std::iter::once(own)) {
        if !allowed(req, &s.config, Some(&map)) {
            continue;
        }
        let sim = simulate_mapped(
            req.model,
            req.cluster,
            req.train,
            &s.config,
            req.device,
            &map,
        )?;
        if sim.estimate.fits {
            return Ok(Some((
                s.index,
                Plan {
                    config: s.config,
                    microbatches: s.config.microbatches(req.train),
                    closed_form_iteration_time_s: sim.closed_form.iteration_time_s,
                    estimate: sim.estimate.clone(),
                    stage_map: map,
                    notes: Vec::new(),
                    simulated: Some(std::sync::Arc::new(sim)),
                },
            )));
        }
    }
    Ok(None)
}

/// The (policy, full) layer costs of `c` from the cache.
fn cache_for(
    cache: &HashMap<ShapeKey, LayerCosts>,
    c: &ParallelConfig,
) -> (LayerCosts, LayerCosts) {
    (
        cache[&ShapeKey::of(c, policy_recompute(c.recompute))],
        cache[&ShapeKey::of(c, Recompute::Full)],
    )
}

/// Estimates `c` with the even layout; when some stage does not fit under a none or
/// selective policy, also with the fewest fully recomputed blocks per stage that fit.
/// Returns the number of estimates made and the candidates worth keeping.
fn screen(
    req: &Request,
    cache: &HashMap<ShapeKey, LayerCosts>,
    index: usize,
    c: ParallelConfig,
) -> (usize, Option<Screened>) {
    let (policy, full) = cache_for(cache, &c);
    let map = StageMap::uniform(req.model.layers, &c);
    let est = |map: &StageMap| {
        estimate_from_costs(
            req.model,
            req.cluster,
            req.train,
            &c,
            req.device,
            &policy,
            &full,
            map,
        )
    };
    let summary = |e: &Estimate, fitted: Option<StageMap>| Screened {
        index,
        config: c,
        fitted,
        time_s: e.iteration_time_s,
        fits: e.fits,
        peak_bytes: e.peak_memory_bytes,
    };
    let e = est(&map);
    // scp differs from 1F1B only in where it recomputes: without recompute it is 1F1B.
    let scp_without_recompute =
        c.schedule.is_1f1b_without_recompute() && c.recompute != Recompute::Full;
    if c.recompute == Recompute::Full || (e.fits && !scp_without_recompute) {
        return (1, Some(summary(&e, None)));
    }
    if e.fits {
        return (1, None);
    }
    // Does not fit: the fewest fully recomputed blocks per stage that would.
    match fit_recompute(req, &c, &map, &e, &policy, &full) {
        Some(fitted) => {
            let f = est(&fitted);
            let recomputes = fitted.recompute_blocks.iter().any(|&x| x > 0);
            if scp_without_recompute && !recomputes {
                return (2, None);
            }
            let keep = if f.fits || f.peak_memory_bytes < e.peak_memory_bytes {
                summary(&f, Some(fitted))
            } else {
                summary(&e, None)
            };
            (2, Some(keep))
        }
        None => (1, Some(summary(&e, None))),
    }
}

#[cfg(test)]
mod tests;
