//! The search: every well-formed configuration of the GPUs is screened with the analytic
//! estimate (layer costs cached per shape, a memory lower bound pruning hopeless degrees),
//! stages that do not fit get the fewest fully recomputed blocks that make them fit, and
//! the best candidates get an optimal block layout and are re-ranked by the event
//! simulator.
//!
//! Deterministic: candidates are enumerated in a fixed order, evaluated in parallel into
//! that order, and ties are broken by the enumeration index, so the plan does not depend
//! on the thread count.

use std::collections::{HashMap, HashSet};

use foldhash::fast::FixedState;

use rayon::prelude::*;

use plait_cost::estimate::{estimate_from_costs, policy_recompute};
use plait_cost::{Estimate, Scenario, ShapeKey};
use plait_spec::{
    CpComm, Degree, ModelSpec, MoeDispatcher, ParallelConfig, Recompute, Schedule, StageMap,
    TrainSpec,
};

use crate::export::Layout;
use crate::layout::{fit_recompute, partition_blocks, state_bytes, state_bytes_per_param};
use crate::simulate::simulate_in;
use crate::{Plan, PlanError};

mod divisors;
mod infeasible;
mod order;

use divisors::divisors;
use infeasible::{infeasible, no_candidates};
use order::annotate;
pub use order::{robust_order, TIE_SHARE};

pub use crate::request::{Pins, Request};

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
#[non_exhaustive]
pub struct Infeasible {
    pub cause: Cause,
    pub reason: String,
    /// The least per-GPU memory any configuration of these GPUs needs.
    pub min_memory_bytes: f64,
    /// The smallest GPU count above the one asked for with a configuration (under the same
    /// pins) that fits by the analytic estimate, if one up to 2^20 GPUs exists: every count
    /// that some well-formed configuration occupies is tried, in increasing order.
    pub min_gpus: Option<u64>,
    /// When no configuration of the GPUs asked for is well formed: the largest smaller GPU
    /// count (up to 2^20) with a configuration that fits, found the same way.
    pub max_gpus_below: Option<u64>,
    /// Lower bound on GPUs from the model state alone (16 bytes per parameter, fully
    /// sharded).
    pub min_gpus_lower_bound: u64,
}

/// Why a search has no plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// No configuration of the GPUs asked for is well formed under the pins (degrees must
    /// divide the GPUs, the heads and the batch).
    NoWellFormedConfiguration,
    /// Configurations exist, but none fits in memory.
    OutOfMemory,
}

/// The answer of a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    pub plans: Vec<Plan>,
    pub search: SearchStats,
    pub infeasible: Option<Infeasible>,
}

/// The configurations of `c` with knob `set` at each value of `all` that `pin` allows, in
/// the order of `all`.
fn each<T: Copy + PartialEq>(
    c: ParallelConfig,
    pin: Option<T>,
    all: impl IntoIterator<Item = T>,
    set: impl Fn(&mut ParallelConfig, T),
) -> Vec<ParallelConfig> {
    all.into_iter()
        .filter(|&v| pin.is_none_or(|p| p == v))
        .map(|v| {
            let mut c = c;
            set(&mut c, v);
            c
        })
        .collect()
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

/// One step of the enumeration: the choices of one knob (or of knobs chosen together),
/// in order, for a configuration whose earlier knobs are set.
type Step = fn(&Request, ParallelConfig) -> Vec<ParallelConfig>;

/// The knobs in the order the enumeration nests them, outermost first: a configuration is
/// one choice per step, so the order of the steps and of each step's choices is the
/// enumeration order (and so the tie-break between equally fast plans).
const STEPS: [Step; 11] = [
    step_pinned,
    step_tp,
    step_pp,
    step_cp_dp,
    step_ep,
    step_mbs,
    step_zero,
    step_sp,
    step_schedule,
    step_recompute,
    step_moe_comm,
];

/// The degrees the steps choose. Any other degree keeps its pin, or 1 (`step_pinned`): a
/// degree declared in `plait_spec::Degree` runs where the user pins it before the search
/// is taught to try it.
const SEARCHED: [Degree; 6] = crate::TAUGHT_DEGREES;

/// The degrees the search does not choose, at their pins; the GPUs they take are what the
/// steps below share out (`ParallelConfig::replica_gpus`).
fn step_pinned(req: &Request, mut c: ParallelConfig) -> Vec<ParallelConfig> {
    for &d in Degree::ALL.iter().filter(|d| !SEARCHED.contains(d)) {
        if let Some(v) = req.pins.degree(d) {
            *c.degree_mut(d) = v;
        }
    }
    vec![c]
}

/// Every well-formed configuration of `req`, in a fixed order.
pub fn enumerate(req: &Request) -> Vec<ParallelConfig> {
    let mut out = vec![ParallelConfig::default()];
    for step in STEPS {
        out = out.into_iter().flat_map(|c| step(req, c)).collect();
    }
    out.retain(|c| c.validate(req.model, req.train, req.gpus).is_ok() && allowed(req, c, None));
    out
}

/// Tensor-parallel degrees that split the heads and the MLP.
fn step_tp(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let m = req.model;
    let tps = divisors(req.gpus / c.replica_gpus())
        .into_iter()
        .filter(|&tp| m.heads.is_multiple_of(tp) && m.ffn_hidden.is_multiple_of(tp));
    each(c, req.pins.tp, tps, |c, v| c.tp = v)
}

/// Pipelines of at most one stage per layer.
fn step_pp(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let pps = divisors(req.gpus / c.replica_gpus())
        .into_iter()
        .filter(|&pp| pp <= req.model.layers);
    each(c, req.pins.pp, pps, |c, v| c.pp = v)
}

/// Context-parallel degrees (unpinned: only those leaving each rank `MIN_CP_TOKENS`), with
/// the ring, or the pinned communication (`plan` turns a ring into Ulysses' all-to-all or the
/// key/value all-gather where that runs the shape's blocks faster); dp takes the GPUs left.
/// A pinned communication other than the ring asks for context parallelism.
fn step_cp_dp(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let (n, pins) = (req.gpus, &req.pins);
    let wants_cp = pins.cp_comm.is_some_and(|k| k != CpComm::P2p);
    let too_short = |cp: u64| cp > 1 && pins.cp.is_none() && req.train.seq / cp < MIN_CP_TOKENS;
    let cps = divisors(n / c.replica_gpus())
        .into_iter()
        .filter(|&cp| !too_short(cp) && (cp > 1 || !wants_cp));
    let mut out = Vec::new();
    for c in each(c, pins.cp, cps, |c, v| {
        c.cp = v;
        c.dp = n / c.replica_gpus();
    }) {
        let cp_comm = match pins.cp_comm {
            Some(k) if c.cp > 1 => k,
            _ => CpComm::P2p,
        };
        out.push(ParallelConfig { cp_comm, ..c });
    }
    out.retain(|c| pins.dp.is_none_or(|d| d == c.dp));
    out
}

/// Expert-parallel degrees with the experts' tensor parallelism (1 without experts): the
/// experts split as the dense layers (expert tp = tp, ep dividing dp × cp) or, with tp,
/// unsplit (expert tp 1, ep dividing tp × dp × cp, Megatron's choice for fine-grained
/// experts); none when the batch does not split over dp.
fn step_ep(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    if !req.train.gbs.is_multiple_of(c.dp) {
        return Vec::new();
    }
    let Some(moe) = req.model.moe else {
        return each(c, req.pins.ep, [1], |c, v| c.ep = v);
    };
    // A pinned expert tp equal to the default is the default; unpinned, the search tries
    // the default and, above tp 1, the other of 1 and tp.
    let default = c.default_expert_tp();
    let etps: Vec<Option<u64>> = match req.pins.etp {
        Some(pin) => vec![pin.filter(|&v| v != default)],
        None if c.tp > 1 => vec![None, Some(if default == 1 { c.tp } else { 1 })],
        None => vec![None],
    };
    // `enumerate` drops the expert tps `validate` refuses (not dividing tp).
    let mut out = Vec::new();
    for etp in etps {
        let c = ParallelConfig { etp, ..c };
        let room = c.expert_ranks();
        let eps = divisors(moe.experts)
            .into_iter()
            .filter(|e| room.is_multiple_of(*e));
        out.extend(each(c, req.pins.ep, eps, |c, v| c.ep = v));
    }
    out
}

/// Micro-batches that divide each replica's share of the batch.
fn step_mbs(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let pins = &req.pins;
    let per_replica = req.train.gbs / c.dp;
    // Only micro-batches up to MAX_MBS (or the pinned one) are tried: test those, not every
    // divisor of the batch (which may be near 2^64).
    let mbss = (1..=MAX_MBS)
        .chain(pins.mbs.filter(|&b| b > MAX_MBS))
        .filter(|&b| per_replica.is_multiple_of(b));
    each(c, pins.mbs, mbss, |c, v| c.mbs = v)
}

/// ZeRO stages (0 only without data or context parallel ranks to shard over), each with
/// the groups its states are sharded over.
fn step_zero(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    // Offloaded optimizer state is each rank's ZeRO shard (`ParallelConfig::check_offloads`):
    // ZeRO-1 at least, even over one rank.
    let offloads = req.train.optimizer_offload > 0.0;
    let zeros: &[u8] = match (c.dp * c.cp > 1, offloads) {
        (true, false) => &[0, 1, 2, 3],
        (true, true) => &[1, 2, 3],
        (false, false) => &[0],
        (false, true) => &[1],
    };
    each(c, req.pins.zero, zeros.iter().copied(), |c, v| c.zero = v)
        .into_iter()
        .flat_map(|c| shards(req, c))
        .collect()
}

/// Shard groups of the ZeRO states: all of dp, and under ZeRO-3 with dp spanning more
/// than one NVLink domain, hybrid sharding over the dp ranks of one domain (FSDP's
/// HYBRID_SHARD default: shard inside a node, replicate across), which keeps the per-unit
/// gathers on NVLink. Under ZeRO-1/2 the copies' all-reduce moves as many bytes through
/// each NIC as the full ring and the states are larger (Llama 3 8B on 16,384 H100 at
/// ZeRO-2: 549 ms hybrid against 486 ms), so there it is costed only when pinned.
fn shards(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let per_domain = req.cluster.gpus_per_node;
    let inner = c.tp * c.cp;
    let domain_shard = (c.zero >= 3 && per_domain.is_multiple_of(inner))
        .then(|| per_domain / inner)
        .filter(|&s| s >= 2 && s < c.dp && c.dp.is_multiple_of(s));
    let choices: Vec<Option<u64>> = match req.pins.dp_shard {
        // A pinned shard equal to dp is the default.
        Some(pin) => vec![pin.filter(|&s| s != c.dp)],
        None => std::iter::once(None)
            .chain(domain_shard.map(Some))
            .collect(),
    };
    // A loop rather than `map(|dp_shard| ParallelConfig { dp_shard, ..c })`: that closure
    // trips a rustc internal error (broken MIR on `Form::Of` in a struct update) on rustc 1.95.0.
    let mut out = Vec::with_capacity(choices.len());
    for dp_shard in choices {
        out.push(ParallelConfig { dp_shard, ..c });
    }
    out
}

/// Sequence parallelism (off only without tensor parallelism).
fn step_sp(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let sps: &[bool] = if c.tp > 1 { &[false, true] } else { &[false] };
    each(c, req.pins.sp, sps.iter().copied(), |c, v| c.sp = v)
}

/// Schedules with their chunks per rank (`schedules` applies the pins), less those the
/// engine refuses whatever the rest of the plan.
fn step_schedule(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let micro = req.train.gbs / c.dp / c.mbs;
    let pairs = schedules(req.model.layers, c.pp, micro, &req.pins)
        .into_iter()
        .filter(|&(schedule, vp)| {
            // Not a struct update: see `shards` on rustc 1.95.0's internal error.
            let mut probe = c;
            probe.schedule = schedule;
            probe.vp = vp;
            !crate::export::refuses_schedule(req.train.engine, &probe, micro)
        });
    each(c, None, pairs, |c, (schedule, vp)| {
        c.schedule = schedule;
        c.vp = vp;
    })
}

/// Recompute policies.
fn step_recompute(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    let all = [Recompute::None, Recompute::Selective, Recompute::Full];
    // Pinned selective modules apply where selective recomputation is tried.
    let modules = req.pins.recompute_modules.unwrap_or_default();
    each(c, req.pins.recompute, all, |c, v| {
        c.recompute = v;
        if v == Recompute::Selective {
            c.recompute_modules = modules;
        }
    })
}

/// How the experts' tokens move where they cross ranks (ep > 1): the pinned dispatcher, else
/// `alltoall`, which `plan` turns into the fastest the engine runs for the configuration's
/// shape (`twins`); Megatron-Core's all-to-all overlap pinned, else on wherever it runs.
/// Unpinned, the overlap is not tried off as well: its only cost in the model is the
/// contention on the time it hides, less than that time, and it changes no memory, so
/// where it runs it is never slower. (`screen` falls back to the plain 1F1B where only
/// recomputed blocks fit, which the overlap forbids.)
fn step_moe_comm(req: &Request, c: ParallelConfig) -> Vec<ParallelConfig> {
    if c.ep == 1 {
        // A pinned overlap or flex dispatcher asks for expert parallelism.
        let pinned = req.pins.moe_a2a_overlap == Some(true)
            || req
                .pins
                .moe_dispatcher
                .is_some_and(|d| d != MoeDispatcher::AllToAll);
        return if pinned { vec![] } else { vec![c] };
    }
    let mut c = ParallelConfig {
        moe_dispatcher: req.pins.moe_dispatcher.unwrap_or_default(),
        ..c
    };
    c.moe_a2a_overlap = match req.pins.moe_a2a_overlap {
        Some(pinned) => pinned,
        None => ParallelConfig {
            moe_a2a_overlap: true,
            ..c
        }
        .check_moe_a2a_overlap(req.model, req.train)
        .is_ok(),
    };
    vec![c]
}

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
        && c.check_offloads(req.model, req.train).is_ok()
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
    // Each kind the schedule crate lists for searching, with the chunk counts its rules
    // accept: a fixed count, one, or (where more than one chunk is accepted) each count up
    // to `MAX_VP` that splits the layers evenly; a pinned count is tried even above it.
    for &s in Schedule::SEARCHED.iter() {
        if pins.schedule.is_some_and(|p| p != s) || !s.accepts_microbatches(micro, pp) {
            continue;
        }
        let (lo, hi) = match (s.fixed_chunks(), pins.vp) {
            (Some(n), _) => (n, n),
            (None, Some(p)) if s.accepts_chunks(2) => (p.max(2), p),
            (None, None) if s.accepts_chunks(2) => (2, MAX_VP),
            (None, _) => (1, 1),
        };
        for v in lo..=hi {
            if pins.vp.is_none_or(|p| p == v)
                && s.accepts_chunks(v)
                && (v == 1 || layers.is_multiple_of(pp * v))
            {
                out.push((s, v));
            }
        }
    }
    out
}

/// A lower bound on any stage's weights + gradients + optimizer bytes per GPU: the average
/// stage holds the blocks' parameters over tp × pp (ZeRO-sharded over dp × cp). The
/// parameter counts are taken once per search (`of`), the bound per candidate (`bytes`).
pub(super) struct ModelStateBound {
    dense: f64,
    expert: f64,
    /// A frozen base (LoRA) holds its weights only; the adapters are left out of the bound.
    frozen: bool,
    optimizer: plait_cost::estimate::OptimizerHome,
}

impl ModelStateBound {
    pub(super) fn of(m: &ModelSpec, t: &TrainSpec) -> Self {
        let blocks = m.blocks_params() as f64;
        let expert = m.blocks_expert_params() as f64;
        ModelStateBound {
            dense: blocks - expert,
            expert,
            frozen: t.lora_adapters().is_some(),
            optimizer: plait_cost::estimate::OptimizerHome::of(t),
        }
    }

    pub(super) fn bytes(&self, c: &ParallelConfig) -> f64 {
        let per = |params: f64, shards: f64| {
            if self.frozen {
                state_bytes(c.zero, params, 0.0, shards, self.optimizer)
            } else {
                params * state_bytes_per_param(c.zero, shards, self.optimizer)
            }
        };
        let (dense_shards, expert_shards) = c.state_shards();
        per(self.dense / (c.tp * c.pp) as f64, dense_shards as f64)
            + per(
                self.expert / (c.tp * c.pp * c.ep) as f64,
                expert_shards as f64,
            )
    }
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

/// The twins of configuration `c` whose blocks move data otherwise, where the request
/// leaves it open and the engine runs them: for a ring over cp, Ulysses' all-to-all where
/// the heads split over cp and the key/value all-gather; for `alltoall` experts over ep,
/// the engine's other dispatchers (Megatron-Core's DeepEP and HybridEP); and their
/// combinations. The same weights, activations and collectives outside those, so the
/// fastest blocks make the fastest configuration.
fn twins(req: &Request, c: &ParallelConfig) -> Vec<ParallelConfig> {
    let cp_comms: Vec<CpComm> =
        if req.pins.cp_comm.is_none() && c.cp > 1 && c.cp_comm == CpComm::P2p {
            vec![CpComm::P2p, CpComm::A2a, CpComm::Allgather]
        } else {
            vec![c.cp_comm]
        };
    // Only the dispatchers the cost model tells apart for this expert group.
    let dispatchers: Vec<MoeDispatcher> = if req.pins.moe_dispatcher.is_none()
        && c.ep > 1
        && c.moe_dispatcher == MoeDispatcher::AllToAll
    {
        let spanning = plait_cost::comm::Groups::new(req.cluster, c).ep.spans_nodes;
        plait_cost::layer::distinct_dispatchers(req.train.engine, spanning)
    } else {
        vec![c.moe_dispatcher]
    };
    let mut out = Vec::new();
    for &cp_comm in &cp_comms {
        for &moe_dispatcher in &dispatchers {
            let t = ParallelConfig {
                cp_comm,
                moe_dispatcher,
                ..*c
            };
            if t != *c
                && (t.cp_comm != CpComm::A2a || t.heads_split_over_cp(req.model))
                && allowed(req, &t, None)
            {
                out.push(t);
            }
        }
    }
    out
}

/// Costs each distinct shape of `shapes` (configuration, recompute) once, in parallel, into
/// `scenario`'s memo.
fn cost_shapes(scenario: &Scenario, shapes: impl Iterator<Item = (ParallelConfig, Recompute)>) {
    let mut seen: HashSet<ShapeKey, FixedState> = HashSet::default();
    let shapes: Vec<(ParallelConfig, Recompute)> = shapes
        .filter(|(c, r)| seen.insert(ShapeKey::of(c, *r)))
        .collect();
    shapes.par_iter().for_each(|(c, r)| {
        scenario.layer_costs(c, *r);
    });
}

/// A mean block's forward, backward and recompute under `c`'s recompute policy.
fn block_s(scenario: &Scenario, c: &ParallelConfig) -> f64 {
    let b = scenario.layer_costs(c, policy_recompute(c.recompute)).block;
    b.forward.total_s() + b.backward.total_s() + b.recompute.total_s()
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
    let bound = ModelStateBound::of(req.model, req.train);
    let hopeful: Vec<(usize, ParallelConfig)> = configs
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, c)| bound.bytes(c) <= capacity)
        .collect();
    stats.pruned = configs.len() - hopeful.len();

    // Layer costs per shape (they depend on tp, cp, ep, mbs, sp and the recompute policy
    // only), computed once, in parallel, into the scenario's memo that the screening, the
    // layouts and the simulations below all read.
    let scenario = req.scenario();
    // The other ways to move each shape's sequence (Ulysses, the all-gather) and its
    // experts' tokens (DeepEP, HybridEP) that its engine runs, asked once per shape: an
    // engine's rule on the communication does not depend on the knobs a shape leaves out
    // (dp, pp, vp, ZeRO, schedule, the all-to-all overlap).
    let mut twins_of: HashMap<ShapeKey, (ParallelConfig, Vec<ParallelConfig>), FixedState> =
        HashMap::default();
    for (_, c) in &hopeful {
        if c.cp > 1 || c.ep > 1 {
            twins_of
                .entry(ShapeKey::of(c, policy_recompute(c.recompute)))
                .or_insert_with(|| (*c, twins(req, c)));
        }
    }
    // The candidates' shapes under their recompute policy and under full recompute; the
    // twins' under the policy first, under full recompute once they win.
    let shapes = hopeful
        .iter()
        .flat_map(|(_, c)| [(*c, policy_recompute(c.recompute)), (*c, Recompute::Full)])
        .chain(
            twins_of
                .values()
                .flat_map(|(_, ts)| ts)
                .map(|t| (*t, policy_recompute(t.recompute))),
        );
    cost_shapes(&scenario, shapes);
    // The shape's fastest blocks make the fastest configuration (the ring and the
    // all-to-all on a tie).
    let fastest: HashMap<ShapeKey, ParallelConfig, FixedState> = twins_of
        .into_iter()
        .map(|(key, (ring, twins))| {
            let best = twins.into_iter().fold(ring, |best, t| {
                if block_s(&scenario, &t) < block_s(&scenario, &best) {
                    t
                } else {
                    best
                }
            });
            (key, best)
        })
        .collect();
    cost_shapes(&scenario, fastest.values().map(|t| (*t, Recompute::Full)));
    scenario.freeze();
    let hopeful: Vec<(usize, ParallelConfig)> = hopeful
        .into_iter()
        .map(|(i, c)| {
            let key =
                (c.cp > 1 || c.ep > 1).then(|| ShapeKey::of(&c, policy_recompute(c.recompute)));
            match key.and_then(|k| fastest.get(&k)) {
                Some(best) => (
                    i,
                    ParallelConfig {
                        cp_comm: best.cp_comm,
                        moe_dispatcher: best.moe_dispatcher,
                        ..c
                    },
                ),
                None => (i, c),
            }
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
            screen(req, &scenario, index, c)
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
    // the best screened candidates (`simulate` at a time) until `top` plans survive (the
    // simulator's memory peak must fit) or the candidates run out. Each batch's survivors
    // are ordered among themselves and follow the earlier batches', so the plans for a
    // `top` are the first of those for any larger `top`.
    let batch = req.simulate.max(1);
    let mut plans: Vec<(usize, Plan)> = Vec::new();
    let mut batch_ends: Vec<usize> = Vec::new();
    for group in fits.chunks(batch) {
        let refined: Vec<Result<Option<(usize, Plan)>, PlanError>> = group
            .par_iter()
            .map(|s| refine(req, &scenario, s))
            .collect();
        stats.simulated += refined.len();
        for r in refined {
            if let Some(p) = r? {
                plans.push(p);
            }
        }
        batch_ends.push(plans.len());
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
    let mut start = 0;
    for end in batch_ends {
        let part = &mut plans[start..end];
        start = end;
        part.sort_by(|(ia, a), (ib, b)| {
            a.estimate
                .iteration_time_s
                .total_cmp(&b.estimate.iteration_time_s)
                .then(ia.cmp(ib))
        });
        robust_order(part);
    }
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
    scenario: &Scenario,
    s: &Screened,
) -> Result<Option<(usize, Plan)>, PlanError> {
    let own = s.map(req.model.layers);
    let partitioned = partition_blocks(
        &req.layout_inputs(),
        &scenario.policy_and_full(&s.config),
        &s.config,
        &own,
    )
    .filter(|m| allowed(req, &s.config, Some(m)));
    for map in partitioned.into_iter().chain(std::iter::once(own)) {
        if !allowed(req, &s.config, Some(&map)) {
            continue;
        }
        let sim = simulate_in(scenario, &s.config, &map)?;
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

/// Estimates `c` with the even layout; when some stage does not fit under a none or
/// selective policy, also with the fewest fully recomputed blocks per stage that fit.
/// Returns the number of estimates made and the candidates worth keeping.
fn screen(
    req: &Request,
    scenario: &Scenario,
    index: usize,
    c: ParallelConfig,
) -> (usize, Option<Screened>) {
    let (policy, full) = scenario.policy_and_full(&c);
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
    // The all-to-all overlap the search chose runs without recomputed blocks: where only
    // those would fit, the plain 1F1B in its place.
    if c.moe_a2a_overlap && req.pins.moe_a2a_overlap.is_none() {
        let plain = ParallelConfig {
            moe_a2a_overlap: false,
            ..c
        };
        let (n, s) = screen(req, scenario, index, plain);
        return (n + 1, s);
    }
    // Activation offloading and whole-layer CUDA graphs run without recomputed blocks
    // (`ParallelConfig::check_cpu_offload`, `check_cuda_graphs`): what does not fit stays so.
    if req.train.cpu_offload_layers > 0 || req.train.cuda_graphs != plait_spec::CudaGraphs::None {
        return (1, Some(summary(&e, None)));
    }
    // Does not fit: the fewest fully recomputed blocks per stage that would.
    match fit_recompute(&req.layout_inputs(), &c, &map, &e, &policy, &full) {
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
