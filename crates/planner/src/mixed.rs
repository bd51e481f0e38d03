//! Training on mixed clusters: several groups of identical nodes (`plait_spec::MixedCluster`,
//! e.g. 64 H100 + 64 A100) as one pipeline whose stages run on different GPU kinds.
//!
//! A mixed plan is one [`ParallelConfig`] for the whole pipeline (one tp, as Megatron-LM,
//! DeepSpeed and torchtitan require), an order of the groups along the pipeline, and an
//! uneven block layout. Each pipeline replica spans the groups in the same way, so data
//! parallelism stays inside a GPU kind: group g holds `gpus_g / (dp × tp)` stages of every
//! replica, and each stage reduces its gradients over the dp ranks of its own group.
//!
//! Nothing here re-derives a cost: stage k on group g is stage k of the whole pipeline
//! estimated by `plait_cost` on g's cluster and GPU (`estimate_from_costs`: compute, tp
//! communication, activation and state memory for stage k's position, its dp reduction
//! within g); the simulator bridge (`crate::simulate::costs`) gives each rank's instruction
//! costs the same way. What this module adds:
//! * the transfers between groups, priced by `plait_cost::comm::Group::p2p_s` on the link
//!   between groups;
//! * the layout: a bottleneck search over contiguous block ranges where each stage's time
//!   and memory are those of its own GPU kind (linear in its blocks and fully recomputed
//!   blocks, as `layout.rs` models them, anchored on four estimates) and each stage must fit
//!   its own GPU's memory, choosing the fewest fully recomputed blocks that do;
//! * the search over (dp, tp, mbs, ZeRO, sp, schedule, recompute policy, group order),
//!   screened by the closed form and re-ranked by the event simulator;
//! * the comparison with the best plan of each group alone (the homogeneous planner) and
//!   an explanation of the difference.

use std::collections::HashMap;

use rayon::prelude::*;
use serde::Serialize;

use plait_cost::comm::{Group, Groups};
use plait_cost::estimate::{estimate_from_costs, layer_costs, policy_recompute, LayerCosts};
use plait_cost::layer::{LayerCost, Workload};
use plait_cost::pipeline::{pipeline_time, StageTime};
use plait_cost::{DeviceModel, Estimate};
use plait_schedule::{generate, simulate, validate, Costs, Schedule, Simulation};
use plait_spec::{
    schedule_spec, ClusterSpec, MixedCluster, ModelSpec, ParallelConfig, Recompute,
    Schedule as Kind, SpecError, StageMap, TrainSpec, GIB,
};

use crate::export::{engine_supports, Layout};
use crate::layout::MapShape;
use crate::search::Pins;
use crate::PlanError;

/// Largest micro-batch the mixed search tries (a subset of the homogeneous search's 16:
/// every group's memory must hold it, and the order loop multiplies the work).
const MAX_MIXED_MBS: u64 = 8;

/// A mixed plan's shape: the configuration every stage runs and which group holds which
/// stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MixedConfig {
    /// pp is the whole pipeline (all groups); vp = cp = ep = 1.
    pub config: ParallelConfig,
    /// Groups along the pipeline (indices into the cluster's groups), first holds the
    /// embedding.
    pub order: Vec<usize>,
    /// Stages of each entry of `order`: its GPUs / (dp × tp).
    pub stages: Vec<u64>,
}

impl MixedConfig {
    /// The shape of `c` (its dp, tp, …; its pp is recomputed) over `mixed` with the groups
    /// in `order`; an error naming the degree when a group does not split into whole stages.
    pub fn new(
        mixed: &MixedCluster,
        c: &ParallelConfig,
        order: &[usize],
    ) -> Result<MixedConfig, SpecError> {
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..mixed.groups.len()).collect::<Vec<_>>() {
            return Err(SpecError::new(
                "--order",
                "order",
                "must name every group once",
                mixed
                    .groups
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ));
        }
        if c.vp != 1 || c.cp != 1 || c.ep != 1 || c.schedule == Kind::Interleaved {
            return Err(SpecError::new(
                "--config",
                "vp",
                format!(
                    "{c}: mixed plans run one chunk per rank, no context or expert parallelism"
                ),
                "vp1 cp1 ep1 with gpipe|1f1b|zb-h1|scp",
            ));
        }
        let per = c.dp * c.tp;
        let mut stages = Vec::with_capacity(order.len());
        for &g in order {
            let grp = &mixed.groups[g];
            if per == 0 || !grp.gpus().is_multiple_of(per) {
                return Err(SpecError::new(
                    "--config",
                    "dp",
                    format!(
                        "group {} has {} GPUs, which dp×tp = {}×{} does not split into whole pipeline stages",
                        grp.name,
                        grp.gpus(),
                        c.dp,
                        c.tp
                    ),
                    format!("dp×tp dividing every group's GPUs ({})", gpu_counts(mixed)),
                ));
            }
            stages.push(grp.gpus() / per);
        }
        let pp: u64 = stages.iter().sum();
        Ok(MixedConfig {
            config: ParallelConfig { pp, ..*c },
            order: order.to_vec(),
            stages,
        })
    }

    /// The group of every stage.
    pub fn stage_groups(&self) -> Vec<usize> {
        self.order
            .iter()
            .zip(&self.stages)
            .flat_map(|(&g, &s)| std::iter::repeat_n(g, s as usize))
            .collect()
    }

    /// `h100 ×4 → a100 ×4 | dp2 tp8 pp8 mbs1 …`.
    pub fn describe(&self, mixed: &MixedCluster) -> String {
        let parts: Vec<String> = self
            .order
            .iter()
            .zip(&self.stages)
            .map(|(&g, s)| format!("{}×{s}", mixed.groups[g].name))
            .collect();
        format!("{} | {}", parts.join(" → "), self.config)
    }
}

fn gpu_counts(mixed: &MixedCluster) -> String {
    mixed
        .groups
        .iter()
        .map(|g| format!("{} {}", g.name, g.gpus()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to plan on a mixed cluster.
#[derive(Clone)]
pub struct MixedRequest<'a> {
    pub model: &'a ModelSpec,
    pub mixed: &'a MixedCluster,
    /// The device model of each group's GPU, in group order.
    pub devices: &'a [DeviceModel],
    pub train: &'a TrainSpec,
    /// Fixed dimensions (pp, vp, cp and ep follow from the shape and are not searched).
    pub pins: Pins,
    pub top: usize,
    /// Candidates re-ranked by the simulator.
    pub simulate: usize,
    /// Also plan each group alone (the homogeneous alternatives).
    pub homogeneous: bool,
}

impl<'a> MixedRequest<'a> {
    pub fn new(
        model: &'a ModelSpec,
        mixed: &'a MixedCluster,
        devices: &'a [DeviceModel],
        train: &'a TrainSpec,
    ) -> Self {
        MixedRequest {
            model,
            mixed,
            devices,
            train,
            pins: Pins::default(),
            top: 3,
            simulate: 8,
            homogeneous: true,
        }
    }

    fn shape(&self) -> MapShape {
        crate::export::export_target(self.train.engine)
            .map_or(MapShape::Any, crate::export::map_shape)
    }
}

/// One stage of a mixed estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedStage {
    pub stage: usize,
    pub group: String,
    pub gpu: String,
    pub blocks: u64,
    pub recompute_blocks: u64,
    /// Forward + backward + sends of one micro-batch.
    pub time_per_microbatch_s: f64,
    /// Sends that cross to another group, per micro-batch (0 inside a group).
    pub cross_group_p2p_s: f64,
    pub peak_memory_bytes: f64,
    pub memory_capacity_bytes: f64,
    pub fits: bool,
}

/// A mixed plan's estimate: the whole pipeline as one `Estimate` (its stages each from its
/// own group; `memory_capacity_bytes` and `fits` those of the tightest stage; MFU over the
/// peaks of all GPUs) and the per-stage view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedEstimate {
    pub estimate: Estimate,
    pub stages: Vec<MixedStage>,
    /// The stage with the longest time per micro-batch.
    pub bottleneck_stage: usize,
    /// Whether `estimate` comes from the event simulator (else the closed forms).
    pub simulated: bool,
    pub reason: Option<String>,
}

/// A mixed plan: its shape, layout and estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedPlan {
    pub mixed_config: MixedConfig,
    pub description: String,
    pub stage_map: StageMap,
    pub estimate: MixedEstimate,
    /// The same configuration with Megatron-LM's even layout, simulated (None when it does
    /// not fit): what balancing the layers by GPU kind buys.
    pub even_layout_iteration_time_s: Option<f64>,
    #[serde(skip)]
    pub simulated: Option<std::sync::Arc<MixedSimulated>>,
}

/// A simulated mixed plan (for pictures).
#[derive(Debug, Clone, PartialEq)]
pub struct MixedSimulated {
    pub schedule: Schedule,
    pub costs: Costs,
    pub simulation: Simulation,
    pub estimate: MixedEstimate,
}

/// The best plan of one group alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Homogeneous {
    pub group: String,
    pub gpus: u64,
    pub plan: Option<crate::Plan>,
    pub infeasible: Option<String>,
}

/// Why no mixed plan exists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedInfeasible {
    pub reason: String,
    /// The least ratio of a stage's memory to its GPU's any candidate reaches (every block
    /// recomputed, memory-balanced layout); None when no candidate shape exists at all.
    pub min_memory_ratio: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MixedStats {
    /// Configurations (dp, tp, mbs, ZeRO, sp, schedule, recompute) × group orders tried.
    pub candidates: usize,
    /// With a layout that fits every stage.
    pub feasible: usize,
    pub simulated: usize,
}

/// The answer of a mixed search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedOutcome {
    pub plans: Vec<MixedPlan>,
    pub homogeneous: Vec<Homogeneous>,
    /// Sentences explaining the best mixed plan and how it compares.
    pub explanation: Vec<String>,
    pub search: MixedStats,
    pub infeasible: Option<MixedInfeasible>,
}

// ---------------------------------------------------------------------------------------
// Per-group costs.

/// A group's cluster, device and memory.
struct Ctx<'a> {
    cluster: &'a ClusterSpec,
    device: &'a DeviceModel,
    capacity: f64,
}

fn ctxs<'a>(req: &'a MixedRequest) -> Vec<Ctx<'a>> {
    req.mixed
        .groups
        .iter()
        .zip(req.devices)
        .map(|(g, d)| Ctx {
            cluster: &g.cluster,
            device: d,
            capacity: g.cluster.gpu.memory_bytes,
        })
        .collect()
}

/// Layer costs of `c` on group `ctx` under its policy and under full recompute.
fn group_costs(req: &MixedRequest, ctx: &Ctx, c: &ParallelConfig) -> (LayerCosts, LayerCosts) {
    let g = Groups::new(ctx.cluster, c);
    let with = |recompute: Recompute| {
        let w = Workload::new(&ParallelConfig { recompute, ..*c }, req.train);
        layer_costs(req.model, ctx.device, &g, &w)
    };
    (with(policy_recompute(c.recompute)), with(Recompute::Full))
}

fn stage_s(e: &Estimate, k: usize) -> f64 {
    let s = &e.stages[k];
    s.forward_s + s.backward_s + s.p2p_s
}

/// One point-to-point send of a micro-batch's activation shard across groups, and what the
/// same send costs inside group `ctx` (to swap one for the other).
fn cross_send_s(req: &MixedRequest, ctx: &Ctx, c: &ParallelConfig) -> (f64, f64) {
    let w = Workload::new(c, req.train);
    let shard = w.mbs * w.seq_local * req.model.hidden as f64 * w.e / c.tp as f64;
    let inside = Groups::new(ctx.cluster, c).pp.p2p_s(shard);
    // The link as a network between two one-GPU "nodes": comm's own point-to-point model.
    let link_cluster = ClusterSpec {
        gpus_per_node: 1,
        inter_node: req.mixed.link,
        ..ctx.cluster.clone()
    };
    let across = Group::place(&link_cluster, 2, 1).p2p_s(shard);
    (across, inside)
}

/// Stage k's time and memory on one group as functions of its blocks b and fully
/// recomputed blocks x, from four estimates of the whole pipeline on that group.
#[derive(Debug, Clone, Copy)]
struct StageLine {
    t0: f64,
    t_block: f64,
    t_full: f64,
    m0: f64,
    m_block: f64,
    /// Memory at 3 blocks with one fully recomputed (the full block's transient included).
    m31: f64,
    m_full: f64,
    may_recompute: bool,
    capacity: f64,
}

impl StageLine {
    fn time_s(&self, b: u64, x: u64) -> f64 {
        self.t0 + b as f64 * self.t_block + x as f64 * self.t_full
    }

    fn bytes(&self, b: u64, x: u64) -> f64 {
        if x == 0 {
            self.m0 + b as f64 * self.m_block
        } else {
            self.m31 + (b as f64 - 3.0) * self.m_block + (x as f64 - 1.0) * self.m_full
        }
    }

    /// Fewest fully recomputed blocks of `b` that fit, or None.
    fn min_recompute(&self, b: u64, all_full: bool) -> Option<u64> {
        if all_full && self.may_recompute {
            return (self.bytes(b, b) <= self.capacity).then_some(b);
        }
        if self.bytes(b, 0) <= self.capacity {
            return Some(0);
        }
        if !self.may_recompute || self.m_full >= 0.0 {
            return None;
        }
        let over = self.bytes(b, 1) - self.capacity;
        let x = 1 + (over / -self.m_full).ceil().max(0.0) as u64;
        (x.min(b)..=b).find(|&x| self.bytes(b, x) <= self.capacity)
    }

    /// Least memory over capacity with `b` blocks (all recomputed where allowed).
    fn min_ratio(&self, b: u64) -> f64 {
        let x = if self.may_recompute { b } else { 0 };
        self.bytes(b, x) / self.capacity
    }
}

fn uniform_map(p: u64, blocks: u64, recompute: u64) -> StageMap {
    StageMap {
        chunk_blocks: vec![blocks; p as usize],
        recompute_blocks: vec![recompute; p as usize],
    }
}

/// The lines of every stage of `c` on group `ctx`.
fn stage_lines(
    req: &MixedRequest,
    ctx: &Ctx,
    c: &ParallelConfig,
    costs: &(LayerCosts, LayerCosts),
) -> Vec<StageLine> {
    let est = |b: u64, x: u64| {
        estimate_from_costs(
            req.model,
            ctx.cluster,
            req.train,
            c,
            ctx.device,
            &costs.0,
            &costs.1,
            &uniform_map(c.pp, b, x),
        )
    };
    let (e10, e20, e31, e32) = (est(1, 0), est(2, 0), est(3, 1), est(3, 2));
    (0..c.pp as usize)
        .map(|k| {
            let t_block = stage_s(&e20, k) - stage_s(&e10, k);
            let mem = |e: &Estimate| e.stages[k].peak_memory_bytes;
            let m_block = mem(&e20) - mem(&e10);
            StageLine {
                t0: stage_s(&e10, k) - t_block,
                t_block,
                t_full: stage_s(&e32, k) - stage_s(&e31, k),
                m0: mem(&e10) - m_block,
                m_block,
                m31: mem(&e31),
                m_full: mem(&e32) - mem(&e31),
                may_recompute: !c.schedule.spares_rank(k as u64, c.pp),
                capacity: ctx.capacity,
            }
        })
        .collect()
}

/// The least bottleneck over contiguous layouts of `layers` blocks on `p` stages (each at
/// least one block), where `cost(k, b)` is nondecreasing in b (None: does not fit). Binary
/// search over the candidate values with a greedy feasibility test (each stage takes the
/// most blocks under the bound, leaving one for each later stage), which is exact for
/// costs that depend only on the stage and its block count.
fn bottleneck(
    p: usize,
    layers: u64,
    cost: &dyn Fn(usize, u64) -> Option<f64>,
) -> Option<(Vec<u64>, f64)> {
    if p == 0 || layers < p as u64 {
        return None;
    }
    let most = layers - p as u64 + 1;
    let feasible = |limit: f64| -> Option<Vec<u64>> {
        let mut blocks = Vec::with_capacity(p);
        let mut placed = 0;
        for k in 0..p {
            let later = (p - 1 - k) as u64;
            let cap = layers - placed - later;
            if k + 1 == p {
                cost(k, cap).filter(|&t| t <= limit)?;
                blocks.push(cap);
                break;
            }
            let ok = |b: u64| cost(k, b).is_some_and(|t| t <= limit);
            if !ok(1) {
                return None;
            }
            // Largest b in [1, cap] with ok(b) (ok is monotone).
            let (mut lo, mut hi) = (1, cap);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if ok(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            blocks.push(lo);
            placed += lo;
        }
        Some(blocks)
    };
    let mut values: Vec<f64> = (0..p)
        .flat_map(|k| (1..=most).filter_map(move |b| cost(k, b)))
        .collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let last = *values.last()?;
    feasible(last)?;
    let (mut lo, mut hi) = (0, values.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if feasible(values[mid]).is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    feasible(values[lo]).map(|b| (b, values[lo]))
}

// ---------------------------------------------------------------------------------------
// Evaluation of one mixed plan.

/// Engines recompute the same number of blocks on every stage (scp's last never).
fn uniform_recompute(c: &ParallelConfig, map: &mut StageMap) {
    let x = *map.recompute_blocks.iter().max().unwrap_or(&0);
    for k in 0..c.pp {
        map.recompute_blocks[k as usize] = if c.schedule.spares_rank(k, c.pp) {
            0
        } else {
            x.min(map.chunk_blocks[k as usize])
        };
    }
}

/// Per stage: the sends that cross groups (before and after it).
fn crossings(groups: &[usize]) -> Vec<(bool, bool)> {
    (0..groups.len())
        .map(|k| {
            (
                k > 0 && groups[k - 1] != groups[k],
                k + 1 < groups.len() && groups[k + 1] != groups[k],
            )
        })
        .collect()
}

/// The whole pipeline from one estimate per group (`ests[g]`: the pipeline estimated on
/// group g's hardware), each stage taken from its own group, with the cross-group sends.
fn combine(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    map: &StageMap,
    ests: &[Estimate],
    costs: &[(LayerCosts, LayerCosts)],
    sends: &[(f64, f64)],
) -> MixedEstimate {
    let c = &mc.config;
    let groups = mc.stage_groups();
    let cross = crossings(&groups);
    let mb = c.microbatches(req.train);
    let mut out = ests[groups[0]].clone();
    let mut stage_times = Vec::with_capacity(groups.len());
    let mut stages = Vec::with_capacity(groups.len());
    let mut view = Vec::with_capacity(groups.len());
    for (k, &g) in groups.iter().enumerate() {
        let mut s = ests[g].stages[k].clone();
        let (across, inside) = sends[g];
        let n_cross = u8::from(cross[k].0) + u8::from(cross[k].1);
        let cross_s = f64::from(n_cross) * across;
        s.p2p_s += f64::from(n_cross) * (across - inside);
        let (policy, full) = &costs[g];
        let x = map.recompute_blocks[k].min(s.blocks) as f64;
        let wgrad = (s.blocks as f64 - x) * policy.block.weight_grad_s
            + x * full.block.weight_grad_s
            + if k == 0 {
                policy.embedding.weight_grad_s
            } else {
                0.0
            }
            + if k + 1 == groups.len() {
                policy.head.weight_grad_s
            } else {
                0.0
            };
        stage_times.push(StageTime {
            forward_s: s.forward_s,
            backward_s: s.backward_s,
            weight_grad_s: wgrad,
            p2p_s: s.p2p_s,
        });
        let grp = &req.mixed.groups[g];
        view.push(MixedStage {
            stage: k,
            group: grp.name.clone(),
            gpu: grp.cluster.gpu.name.clone(),
            blocks: s.blocks,
            recompute_blocks: map.recompute_blocks[k],
            time_per_microbatch_s: s.forward_s + s.backward_s + s.p2p_s,
            cross_group_p2p_s: cross_s,
            peak_memory_bytes: s.peak_memory_bytes,
            memory_capacity_bytes: ctxs[g].capacity,
            fits: s.peak_memory_bytes <= ctxs[g].capacity,
        });
        stages.push(s);
    }
    let (pipe_s, _) = pipeline_time(c.schedule, &stage_times, mb, 1);
    let slowest = (0..stages.len())
        .max_by(|&a, &b| {
            stage_times[a]
                .total_s()
                .total_cmp(&stage_times[b].total_s())
        })
        .unwrap_or(0);
    // The slowest stage's work by kind, from its group's layer costs (as the homogeneous
    // estimate files it).
    let (policy, full) = &costs[groups[slowest]];
    let n = stages[slowest].blocks as f64;
    let x = (map.recompute_blocks[slowest] as f64).min(n);
    let layers: [(&LayerCost, f64); 4] = [
        (&policy.block, n - x),
        (&full.block, x),
        (&policy.embedding, f64::from(u8::from(slowest == 0))),
        (
            &policy.head,
            f64::from(u8::from(slowest + 1 == stages.len())),
        ),
    ];
    let mbf = mb as f64;
    let sum =
        |f: &dyn Fn(&LayerCost) -> f64| mbf * layers.iter().map(|(l, n)| n * f(l)).sum::<f64>();
    let b = &mut out.breakdown;
    b.compute_s = sum(&|l| l.forward.compute_s + l.backward.compute_s);
    b.recompute_s = sum(&|l| l.recompute.compute_s);
    b.tp_comm_s = sum(&|l| l.forward.tp_comm_s + l.backward.tp_comm_s + l.recompute.tp_comm_s);
    b.cp_comm_s = 0.0;
    b.ep_comm_s = sum(&|l| l.forward.ep_comm_s + l.backward.ep_comm_s + l.recompute.ep_comm_s);
    b.pp_comm_s = mbf * stage_times[slowest].p2p_s;
    // Closed-form screening only: each group's worst exposed reduction (the simulator
    // replaces it with the reduction of the stage that finishes last).
    b.dp_comm_exposed_s = groups
        .iter()
        .map(|&g| ests[g].breakdown.dp_comm_exposed_s)
        .fold(0.0, f64::max);
    b.optimizer_s = stages.iter().map(|s| s.optimizer_s).fold(0.0, f64::max);
    let work = b.compute_s + b.recompute_s + b.tp_comm_s + b.ep_comm_s + b.pp_comm_s;
    b.pipeline_bubble_s = (pipe_s - work).max(0.0);
    out.stages = stages;
    out.iteration_time_s = out.breakdown.total_s();
    finish(req, ctxs, &mut out, &mut view);
    MixedEstimate {
        estimate: out,
        stages: view,
        bottleneck_stage: slowest,
        simulated: false,
        reason: None,
    }
    .with_reason()
}

/// Throughput, MFU over every GPU's peak, and memory against each stage's own GPU.
fn finish(req: &MixedRequest, ctxs: &[Ctx], e: &mut Estimate, view: &mut [MixedStage]) {
    let t = e.iteration_time_s;
    let gpus = req.mixed.gpus() as f64;
    let peak: f64 = req
        .mixed
        .groups
        .iter()
        .zip(ctxs)
        .map(|(g, c)| g.gpus() as f64 * c.device.peak_flops_per_s)
        .sum();
    let flops = e.model_flops_per_iteration;
    e.tokens_per_s = req.train.gbs as f64 * req.train.seq as f64 / t;
    e.tflops_per_gpu = flops / t / gpus / 1e12;
    e.mfu = flops / t / peak;
    for (v, s) in view.iter_mut().zip(&e.stages) {
        v.peak_memory_bytes = s.peak_memory_bytes;
        v.fits = s.peak_memory_bytes <= v.memory_capacity_bytes;
    }
    let worst = (0..view.len())
        .max_by(|&a, &b| {
            let r = |k: usize| view[k].peak_memory_bytes / view[k].memory_capacity_bytes;
            r(a).total_cmp(&r(b))
        })
        .unwrap_or(0);
    e.worst_stage = worst;
    e.memory = e.stages[worst].memory;
    e.peak_memory_bytes = e.stages[worst].peak_memory_bytes;
    e.peak_memory_high_bytes = e.peak_memory_bytes
        + plait_cost::estimate::ALLOCATOR_FRAGMENTATION
            * (e.memory.activations_bytes + e.memory.transient_bytes);
    e.memory_capacity_bytes = view[worst].memory_capacity_bytes;
    e.fits = view.iter().all(|v| v.fits);
}

impl MixedEstimate {
    fn with_reason(mut self) -> Self {
        self.reason = self.stages.iter().find(|s| !s.fits).map(|s| {
            format!(
                "stage {} ({}, {} blocks, {} recomputed) needs {:.1} GiB per GPU but its {} has {:.1} GiB",
                s.stage,
                s.group,
                s.blocks,
                s.recompute_blocks,
                s.peak_memory_bytes / GIB,
                s.gpu,
                s.memory_capacity_bytes / GIB
            )
        });
        self
    }
}

/// Checks a mixed plan given by the user: degrees and layout.
fn check(req: &MixedRequest, mc: &MixedConfig, map: &StageMap) -> Result<(), PlanError> {
    let c = &mc.config;
    c.validate(req.model, req.train, c.gpus())?;
    map.validate(req.model.layers, c)?;
    if req.devices.len() != req.mixed.groups.len() {
        return Err(PlanError::Graph(format!(
            "{} device models for {} groups",
            req.devices.len(),
            req.mixed.groups.len()
        )));
    }
    Ok(())
}

/// The closed-form estimate of a mixed plan with its blocks laid out by `map`.
pub fn estimate_mixed(
    req: &MixedRequest,
    mc: &MixedConfig,
    map: &StageMap,
) -> Result<MixedEstimate, PlanError> {
    check(req, mc, map)?;
    let ctxs = ctxs(req);
    let costs: Vec<_> = ctxs
        .iter()
        .map(|x| group_costs(req, x, &mc.config))
        .collect();
    Ok(closed_form(req, &ctxs, mc, map, &costs).0)
}

/// Closed form with the per-group estimates it came from (with their bands).
fn closed_form(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    map: &StageMap,
    costs: &[(LayerCosts, LayerCosts)],
) -> (MixedEstimate, Vec<Estimate>) {
    let c = &mc.config;
    let ests: Vec<Estimate> = ctxs
        .iter()
        .zip(costs)
        .map(|(x, (p, f))| {
            estimate_from_costs(req.model, x.cluster, req.train, c, x.device, p, f, map)
        })
        .collect();
    let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
    (combine(req, ctxs, mc, map, &ests, costs, &sends), ests)
}

/// Simulates a mixed plan event by event: each rank's instruction costs from its own
/// group (the homogeneous bridge), the cross-group sends on the link, one schedule.
pub fn simulate_mixed(
    req: &MixedRequest,
    mc: &MixedConfig,
    map: &StageMap,
) -> Result<MixedSimulated, PlanError> {
    check(req, mc, map)?;
    let ctxs = ctxs(req);
    let c = &mc.config;
    let costs: Vec<_> = ctxs.iter().map(|x| group_costs(req, x, c)).collect();
    let (closed, ests) = closed_form(req, &ctxs, mc, map, &costs);
    // Bands: each group's relative band at the optimistic and pessimistic levels.
    let mut low: f64 = 1.0;
    let mut high: f64 = 1.0;
    for x in &ctxs {
        let e = plait_cost::estimate_mapped(req.model, x.cluster, req.train, c, x.device, map)?;
        low = low.min(e.iteration_time_low_s / e.iteration_time_s);
        high = high.max(e.iteration_time_high_s / e.iteration_time_s);
    }
    let spec = schedule_spec(c, req.train, map)?;
    let schedule = generate(&spec)?;
    validate(&schedule)?;
    let groups = mc.stage_groups();
    let per_group: Vec<Costs> = ctxs
        .iter()
        .zip(&ests)
        .map(|(x, e)| crate::simulate::costs(req.model, x.cluster, req.train, c, x.device, e, map))
        .collect();
    let cross = crossings(&groups);
    let ranks = groups
        .iter()
        .enumerate()
        .map(|(k, &g)| {
            let mut r = per_group[g].ranks[k].clone();
            let across = cross_send_s(req, &ctxs[g], c).0;
            if cross[k].1 {
                r.chunks[0].send_activation_s = across;
            }
            if cross[k].0 {
                r.chunks[0].send_gradient_s = across;
            }
            r
        })
        .collect();
    let costs = Costs { ranks };
    let simulation = simulate(&schedule, &costs)?;
    let mut e = crate::simulate::refine(&closed.estimate, &simulation, req.train);
    let centre = e.iteration_time_s;
    e = e.with_band(centre * low, centre * high);
    let mut view = closed.stages.clone();
    finish(req, &ctxs, &mut e, &mut view);
    let estimate = MixedEstimate {
        estimate: e,
        stages: view,
        bottleneck_stage: closed.bottleneck_stage,
        simulated: true,
        reason: None,
    }
    .with_reason();
    Ok(MixedSimulated {
        schedule,
        costs,
        simulation,
        estimate,
    })
}

// ---------------------------------------------------------------------------------------
// Layout and search.

/// The best layout of `mc` (bottleneck per micro-batch, every stage fitting its GPU), from
/// per-group stage lines, or None when no layout fits.
fn layout_from_lines(
    req: &MixedRequest,
    mc: &MixedConfig,
    lines: &[Vec<StageLine>],
    sends: &[(f64, f64)],
) -> Option<StageMap> {
    let c = &mc.config;
    let groups = mc.stage_groups();
    let cross = crossings(&groups);
    let stage: Vec<StageLine> = groups
        .iter()
        .enumerate()
        .map(|(k, &g)| {
            let mut l = lines[g][k];
            let n = f64::from(u8::from(cross[k].0) + u8::from(cross[k].1));
            l.t0 += n * (sends[g].0 - sends[g].1);
            l
        })
        .collect();
    let all_full = c.recompute == Recompute::Full;
    let p = groups.len();
    let blocks: Vec<u64> = if req.shape() == MapShape::Even {
        StageMap::uniform(req.model.layers, c).chunk_blocks
    } else {
        let cost = |k: usize, b: u64| {
            let x = stage[k].min_recompute(b, all_full)?;
            Some(stage[k].time_s(b, x))
        };
        bottleneck(p, req.model.layers, &cost)?.0
    };
    let recompute: Option<Vec<u64>> = blocks
        .iter()
        .enumerate()
        .map(|(k, &b)| stage[k].min_recompute(b, all_full))
        .collect();
    let mut map = StageMap {
        chunk_blocks: blocks,
        recompute_blocks: recompute?,
    };
    if req.shape() != MapShape::Any {
        uniform_recompute(c, &mut map);
    }
    Some(map)
}

/// The least memory ratio of `mc`'s memory-balanced layout (every block recomputed where
/// allowed), and the stage that sets it.
fn memory_floor(mc: &MixedConfig, layers: u64, lines: &[Vec<StageLine>]) -> Option<(f64, usize)> {
    let groups = mc.stage_groups();
    let cost = |k: usize, b: u64| Some(lines[groups[k]][k].min_ratio(b));
    let (blocks, value) = bottleneck(groups.len(), layers, &cost)?;
    let k = (0..groups.len())
        .max_by(|&a, &b| {
            lines[groups[a]][a]
                .min_ratio(blocks[a])
                .total_cmp(&lines[groups[b]][b].min_ratio(blocks[b]))
        })
        .unwrap_or(0);
    Some((value, k))
}

/// The best layout of a mixed shape (the planner's layout, for a configuration the user
/// gives): None when no layout fits every stage.
pub fn layout_mixed(req: &MixedRequest, mc: &MixedConfig) -> Result<Option<StageMap>, PlanError> {
    let c = &mc.config;
    c.validate(req.model, req.train, c.gpus())?;
    let ctxs = ctxs(req);
    let lines: Vec<_> = ctxs
        .iter()
        .map(|x| stage_lines(req, x, c, &group_costs(req, x, c)))
        .collect();
    let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
    Ok(layout_from_lines(req, mc, &lines, &sends).map(|m| fit_exactly(req, &ctxs, mc, m)))
}

/// Raises recompute counts where the exact estimate exceeds a stage's memory (the lines
/// are exact up to rounding; this guards the rounding).
fn fit_exactly(req: &MixedRequest, ctxs: &[Ctx], mc: &MixedConfig, mut map: StageMap) -> StageMap {
    let c = &mc.config;
    let costs: Vec<_> = ctxs.iter().map(|x| group_costs(req, x, c)).collect();
    for _ in 0..4 {
        let (e, _) = closed_form(req, ctxs, mc, &map, &costs);
        let mut changed = false;
        for s in e.stages.iter().filter(|s| !s.fits) {
            let k = s.stage;
            if !c.schedule.spares_rank(k as u64, c.pp)
                && map.recompute_blocks[k] < map.chunk_blocks[k]
            {
                map.recompute_blocks[k] += 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    map
}

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Every order of `n` groups, lexicographic.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for first in 0..n {
        for rest in permutations(n - 1) {
            let mut v = vec![first];
            v.extend(rest.into_iter().map(|r| if r >= first { r + 1 } else { r }));
            out.push(v);
        }
    }
    out
}

/// Every configuration of the mixed search, in a fixed order (orders come later).
fn enumerate(req: &MixedRequest) -> (Vec<ParallelConfig>, Vec<String>) {
    let (m, t, pins) = (req.model, req.train, &req.pins);
    let counts: Vec<u64> = req.mixed.groups.iter().map(|g| g.gpus()).collect();
    let common = counts.iter().fold(0, |a, &b| gcd(a, b));
    let node = req
        .mixed
        .groups
        .iter()
        .map(|g| g.cluster.gpus_per_node)
        .min()
        .unwrap_or(1);
    let mut out = Vec::new();
    let mut why = Vec::new();
    let pick = |pin: Option<u64>, v: u64| pin.is_none_or(|p| p == v);
    for dp in divisors(common) {
        if !pick(pins.dp, dp) || !t.gbs.is_multiple_of(dp) {
            continue;
        }
        for tp in divisors(common / dp) {
            if !pick(pins.tp, tp) || tp > node {
                continue;
            }
            let pp: u64 = counts.iter().map(|n| n / (dp * tp)).sum();
            if pp > m.layers || pins.pp.is_some_and(|p| p != pp) {
                continue;
            }
            let per_replica = t.gbs / dp;
            for mbs in (1..=MAX_MIXED_MBS).chain(pins.mbs.filter(|&b| b > MAX_MIXED_MBS)) {
                if !pick(pins.mbs, mbs) || !per_replica.is_multiple_of(mbs) {
                    continue;
                }
                let zeros: &[u8] = if dp > 1 { &[0, 1, 2, 3] } else { &[0] };
                for &zero in zeros {
                    if pins.zero.is_some_and(|z| z != zero) {
                        continue;
                    }
                    for sp in [false, true] {
                        if (sp && tp == 1) || pins.sp.is_some_and(|s| s != sp) {
                            continue;
                        }
                        for schedule in [Kind::OneFOneB, Kind::Gpipe, Kind::ZbH1, Kind::Scp] {
                            if pins.schedule.is_some_and(|s| s != schedule) {
                                continue;
                            }
                            let recomputes = match pins.recompute {
                                Some(r) => vec![r],
                                None => vec![Recompute::None, Recompute::Selective],
                            };
                            for recompute in recomputes {
                                let c = ParallelConfig {
                                    dp,
                                    tp,
                                    pp,
                                    vp: 1,
                                    cp: 1,
                                    ep: 1,
                                    mbs,
                                    zero,
                                    sp,
                                    recompute,
                                    schedule,
                                };
                                if let Err(e) = c.validate(m, t, c.gpus()) {
                                    why.push(e.problem);
                                    continue;
                                }
                                let map = StageMap::uniform(m.layers, &c);
                                let layout = Layout {
                                    config: &c,
                                    stage_map: &map,
                                    microbatches: c.microbatches(t),
                                };
                                if let Err(e) = engine_supports(t.engine, &layout) {
                                    why.push(e);
                                    continue;
                                }
                                out.push(c);
                            }
                        }
                    }
                }
            }
        }
    }
    (out, why)
}

/// One screened mixed candidate.
struct Screened {
    index: usize,
    mc: MixedConfig,
    map: StageMap,
    time_s: f64,
}

/// Plans `req`: the best mixed plans by simulated iteration time, each group's best plan
/// alone, and the explanation; or why no mixed plan exists.
pub fn plan_mixed(req: &MixedRequest) -> Result<MixedOutcome, PlanError> {
    let ctxs = ctxs(req);
    if req.devices.len() != ctxs.len() {
        return Err(PlanError::Graph("one device model per group".into()));
    }
    let (configs, why) = enumerate(req);
    let orders = permutations(req.mixed.groups.len());
    // Layer costs per (group, tp, mbs, sp, policy), computed once.
    type Key = (usize, u64, u64, bool, u8);
    let key = |g: usize, c: &ParallelConfig| -> Key { (g, c.tp, c.mbs, c.sp, c.recompute as u8) };
    let mut keys: Vec<(Key, ParallelConfig)> = Vec::new();
    for c in &configs {
        for g in 0..ctxs.len() {
            let k = key(g, c);
            if !keys.iter().any(|(x, _)| *x == k) {
                keys.push((k, *c));
            }
        }
    }
    let cache: HashMap<Key, (LayerCosts, LayerCosts)> = keys
        .par_iter()
        .map(|(k, c)| (*k, group_costs(req, &ctxs[k.0], c)))
        .collect();
    type Found = (Vec<Screened>, Option<(f64, String)>);
    let found: Vec<Found> = configs
        .par_iter()
        .enumerate()
        .map(|(i, c)| {
            let costs: Vec<_> = (0..ctxs.len()).map(|g| cache[&key(g, c)]).collect();
            let lines: Vec<_> = ctxs
                .iter()
                .zip(&costs)
                .map(|(x, lc)| stage_lines(req, x, c, lc))
                .collect();
            let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
            let mut kept = Vec::new();
            let mut floor: Option<(f64, String)> = None;
            for (o, order) in orders.iter().enumerate() {
                let Ok(mc) = MixedConfig::new(req.mixed, c, order) else {
                    continue;
                };
                let Some(map) = layout_from_lines(req, &mc, &lines, &sends) else {
                    if let Some((r, k)) = memory_floor(&mc, req.model.layers, &lines) {
                        if floor.as_ref().is_none_or(|f| r < f.0) {
                            let g = &req.mixed.groups[mc.stage_groups()[k]];
                            floor = Some((
                                r,
                                format!(
                                    "{}: stage {k} on {} ({:.1} GiB of {:.1})",
                                    mc.describe(req.mixed),
                                    g.name,
                                    r * g.cluster.gpu.memory_bytes / GIB,
                                    g.cluster.gpu.memory_bytes / GIB
                                ),
                            ));
                        }
                    }
                    continue;
                };
                let (e, _) = closed_form(req, &ctxs, &mc, &map, &costs);
                if !e.estimate.fits {
                    continue;
                }
                let layout = Layout {
                    config: &mc.config,
                    stage_map: &map,
                    microbatches: mc.config.microbatches(req.train),
                };
                if engine_supports(req.train.engine, &layout).is_err() {
                    continue;
                }
                kept.push(Screened {
                    index: i * orders.len() + o,
                    time_s: e.estimate.iteration_time_s,
                    mc,
                    map,
                });
            }
            (kept, floor)
        })
        .collect();
    let mut stats = MixedStats {
        candidates: configs.len() * orders.len(),
        ..MixedStats::default()
    };
    let mut screened: Vec<Screened> = Vec::new();
    let mut floor: Option<(f64, String)> = None;
    for (kept, f) in found {
        screened.extend(kept);
        if let Some(f) = f {
            if floor.as_ref().is_none_or(|g| f.0 < g.0) {
                floor = Some(f);
            }
        }
    }
    stats.feasible = screened.len();
    screened.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.index.cmp(&b.index)));
    screened.truncate(req.simulate.max(req.top));
    stats.simulated = screened.len();
    let simulated: Vec<Result<(usize, MixedPlan), PlanError>> = screened
        .par_iter()
        .map(|s| {
            let map = fit_exactly(req, &ctxs, &s.mc, s.map.clone());
            let sim = simulate_mixed(req, &s.mc, &map)?;
            Ok((
                s.index,
                MixedPlan {
                    description: s.mc.describe(req.mixed),
                    mixed_config: s.mc.clone(),
                    stage_map: map,
                    estimate: sim.estimate.clone(),
                    even_layout_iteration_time_s: None,
                    simulated: Some(std::sync::Arc::new(sim)),
                },
            ))
        })
        .collect();
    let mut plans: Vec<(usize, MixedPlan)> = Vec::new();
    for r in simulated {
        let (i, p) = r?;
        if p.estimate.estimate.fits {
            plans.push((i, p));
        }
    }
    // Times within 0.1 % of each other count as a tie, broken by the tightest stage's
    // memory (headroom for what the model leaves out), then by enumeration order.
    let bin = |p: &MixedPlan| (p.estimate.estimate.iteration_time_s.ln() / 1e-3).floor() as i64;
    let ratio = |p: &MixedPlan| {
        p.estimate.estimate.peak_memory_bytes / p.estimate.estimate.memory_capacity_bytes
    };
    plans.sort_by(|a, b| {
        bin(&a.1)
            .cmp(&bin(&b.1))
            .then(ratio(&a.1).total_cmp(&ratio(&b.1)))
            .then(a.0.cmp(&b.0))
    });
    plans.truncate(req.top);
    let mut plans: Vec<MixedPlan> = plans.into_iter().map(|(_, p)| p).collect();
    if let Some(best) = plans.first_mut() {
        let even = StageMap::uniform(req.model.layers, &best.mixed_config.config);
        let even = fit_exactly(
            req,
            &ctxs,
            &best.mixed_config,
            even_fit(req, &ctxs, &best.mixed_config, even),
        );
        best.even_layout_iteration_time_s = simulate_mixed(req, &best.mixed_config, &even)
            .ok()
            .filter(|s| s.estimate.estimate.fits)
            .map(|s| s.estimate.estimate.iteration_time_s);
    }
    let homogeneous = if req.homogeneous {
        homogeneous(req, &ctxs)?
    } else {
        Vec::new()
    };
    let infeasible = plans
        .is_empty()
        .then(|| infeasible(req, &configs, &why, floor));
    let explanation = match plans.first() {
        Some(best) => explain(req, &ctxs, best, &homogeneous),
        None => Vec::new(),
    };
    Ok(MixedOutcome {
        plans,
        homogeneous,
        explanation,
        search: stats,
        infeasible,
    })
}

/// The even layout with the fewest fully recomputed blocks per stage that fit.
fn even_fit(req: &MixedRequest, ctxs: &[Ctx], mc: &MixedConfig, mut map: StageMap) -> StageMap {
    let c = &mc.config;
    let lines: Vec<_> = ctxs
        .iter()
        .map(|x| stage_lines(req, x, c, &group_costs(req, x, c)))
        .collect();
    for (k, g) in mc.stage_groups().into_iter().enumerate() {
        let b = map.chunk_blocks[k];
        map.recompute_blocks[k] = lines[g][k]
            .min_recompute(b, c.recompute == Recompute::Full)
            .unwrap_or(b);
    }
    if req.shape() != MapShape::Any {
        uniform_recompute(c, &mut map);
    }
    map
}

fn infeasible(
    req: &MixedRequest,
    configs: &[ParallelConfig],
    why: &[String],
    floor: Option<(f64, String)>,
) -> MixedInfeasible {
    if configs.is_empty() {
        let first = why
            .first()
            .map(|w| format!("; e.g. {w}"))
            .unwrap_or_default();
        return MixedInfeasible {
            reason: format!(
                "no mixed configuration exists: dp×tp must split every group into whole pipeline stages ({}), dp divide the batch of {} sequences, tp stay inside a node and the stages number at most the model's {} layers{first}",
                gpu_counts(req.mixed),
                req.train.gbs,
                req.model.layers
            ),
            min_memory_ratio: None,
        };
    }
    match floor {
        Some((ratio, at)) => MixedInfeasible {
            reason: format!(
                "no mixed plan fits memory: even recomputing every block with the memory-balanced layout, the least any configuration needs is {ratio:.2}× a GPU's memory ({at})"
            ),
            min_memory_ratio: Some(ratio),
        },
        None => MixedInfeasible {
            reason: "no mixed plan fits memory and runs under the engine".into(),
            min_memory_ratio: None,
        },
    }
}

fn homogeneous(req: &MixedRequest, ctxs: &[Ctx]) -> Result<Vec<Homogeneous>, PlanError> {
    let mut out = Vec::new();
    for (g, x) in req.mixed.groups.iter().zip(ctxs) {
        let mut r = crate::Request::new(req.model, x.cluster, req.train, x.device, g.gpus());
        r.top = 1;
        let o = crate::plan(&r, &|_, _| {})?;
        out.push(Homogeneous {
            group: g.name.clone(),
            gpus: g.gpus(),
            plan: o.plans.into_iter().next(),
            infeasible: o.infeasible.map(|i| i.reason),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Explanation.

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

fn explain(
    req: &MixedRequest,
    ctxs: &[Ctx],
    best: &MixedPlan,
    homo: &[Homogeneous],
) -> Vec<String> {
    let e = &best.estimate;
    let mc = &best.mixed_config;
    let layers = req.model.layers;
    let mut out = Vec::new();
    // Where the blocks went, and why: a block's time on each GPU kind.
    let mut parts = Vec::new();
    let mut first = 0usize;
    for (&g, &s) in mc.order.iter().zip(&mc.stages) {
        let stages = &e.stages[first..first + s as usize];
        let blocks: u64 = stages.iter().map(|s| s.blocks).sum();
        let (policy, _) = group_costs(req, &ctxs[g], &mc.config);
        let per_block = policy.block.forward.total_s()
            + policy.block.backward.total_s()
            + policy.block.recompute.total_s();
        let counts: Vec<String> = stages.iter().map(|s| s.blocks.to_string()).collect();
        parts.push((
            g,
            first,
            first + s as usize - 1,
            blocks,
            counts.join("/"),
            per_block,
        ));
        first += s as usize;
    }
    let text: Vec<String> = parts
        .iter()
        .map(|(g, a, b, blocks, counts, per)| {
            format!(
                "{} ({}) holds {blocks} of {layers} blocks ({counts}; a block's forward+backward {} per micro-batch)",
                req.mixed.groups[*g].name,
                if a == b { format!("stage {a}") } else { format!("stages {a}–{b}") },
                ms(*per)
            )
        })
        .collect();
    out.push(format!("Layout: {}.", text.join("; ")));
    if let (Some(fast), Some(slow)) = (
        parts.iter().min_by(|a, b| a.5.total_cmp(&b.5)),
        parts.iter().max_by(|a, b| a.5.total_cmp(&b.5)),
    ) {
        if fast.0 != slow.0 {
            let per_stage =
                |p: &(usize, usize, usize, u64, String, f64)| p.3 as f64 / (p.2 - p.1 + 1) as f64;
            out.push(format!(
                "{} computes a block {:.2}× faster than {}, so its stages hold {:.2}× the blocks ({:.1} vs {:.1} per stage); the rest of the imbalance is the embedding and head, memory and whole blocks.",
                req.mixed.groups[fast.0].name,
                slow.5 / fast.5,
                req.mixed.groups[slow.0].name,
                per_stage(fast) / per_stage(slow),
                per_stage(fast),
                per_stage(slow)
            ));
        }
    }
    let k = e.bottleneck_stage;
    let bs = &e.stages[k];
    let b = &e.estimate.breakdown;
    out.push(format!(
        "The pipeline is bound by stage {k} on {} ({} blocks, {} per micro-batch × {} micro-batches); the bubble is {:.1} % of the {:.3} s step, exposed data-parallel time {:.3} s.",
        bs.group,
        bs.blocks,
        ms(bs.time_per_microbatch_s),
        e.estimate.microbatches,
        100.0 * b.pipeline_bubble_s / e.estimate.iteration_time_s,
        e.estimate.iteration_time_s,
        b.dp_comm_exposed_s
    ));
    if let Some(cross) = e.stages.iter().find(|s| s.cross_group_p2p_s > 0.0) {
        out.push(format!(
            "Between groups the link ({:.1} GB/s per GPU{}) carries a micro-batch's activation or gradient in {} ({:.1} % of the bottleneck stage's time).",
            req.mixed.link.bandwidth_bytes_per_s / 1e9,
            if req.mixed.link_is_default { ", the slower group's network" } else { "" },
            ms(cross.cross_group_p2p_s),
            100.0 * cross.cross_group_p2p_s / bs.time_per_microbatch_s
        ));
    }
    if let Some(even) = best.even_layout_iteration_time_s {
        out.push(format!(
            "An even split ({:.1} blocks per stage) would take {:.3} s: the balanced layout is {:.1} % faster.",
            layers as f64 / mc.config.pp as f64,
            even,
            100.0 * (even / e.estimate.iteration_time_s - 1.0)
        ));
    }
    for h in homo {
        match &h.plan {
            Some(p) => {
                let (t, mixed_t) = (p.estimate.iteration_time_s, e.estimate.iteration_time_s);
                let ratio = t / mixed_t;
                let verdict = if ratio > 1.0 {
                    format!("the mixed plan is {:.2}× faster", ratio)
                } else {
                    format!("{} alone is {:.2}× faster", h.group, 1.0 / ratio)
                };
                let hb = &p.estimate.breakdown;
                let diffs = [
                    (
                        "compute of the slowest stage",
                        b.compute_s + b.recompute_s - hb.compute_s - hb.recompute_s,
                    ),
                    ("tensor-parallel communication", b.tp_comm_s - hb.tp_comm_s),
                    ("pipeline transfers", b.pp_comm_s - hb.pp_comm_s),
                    (
                        "pipeline bubble",
                        b.pipeline_bubble_s - hb.pipeline_bubble_s,
                    ),
                    (
                        "exposed data-parallel time",
                        b.dp_comm_exposed_s - hb.dp_comm_exposed_s,
                    ),
                    ("optimizer step", b.optimizer_s - hb.optimizer_s),
                ];
                let (what, by) = if ratio > 1.0 {
                    diffs
                        .iter()
                        .min_by(|a, b| a.1.total_cmp(&b.1))
                        .copied()
                        .unwrap_or(("", 0.0))
                } else {
                    diffs
                        .iter()
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                        .copied()
                        .unwrap_or(("", 0.0))
                };
                out.push(format!(
                    "Against {} alone ({} GPUs, {}: {:.3} s, {:.0} tokens/s, MFU {:.1} %): {verdict} ({:.0} tokens/s, MFU {:.1} % of all {} GPUs' peak); the largest difference is the {what} ({:+.3} s).",
                    h.group,
                    h.gpus,
                    p.config,
                    t,
                    p.estimate.tokens_per_s,
                    100.0 * p.estimate.mfu,
                    e.estimate.tokens_per_s,
                    100.0 * e.estimate.mfu,
                    req.mixed.gpus(),
                    by
                ));
            }
            None => out.push(format!(
                "{} alone ({} GPUs) has no plan: {}.",
                h.group,
                h.gpus,
                h.infeasible.as_deref().unwrap_or("nothing fits")
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bottleneck_equals_brute_force() {
        // Stage k costs (k + 1) × b, stage 2 cannot hold more than 2 blocks.
        let cost = |k: usize, b: u64| {
            if k == 2 && b > 2 {
                None
            } else {
                Some((k + 1) as f64 * b as f64)
            }
        };
        let (blocks, v) = bottleneck(3, 9, &cost).unwrap();
        assert_eq!(blocks.iter().sum::<u64>(), 9);
        let mut best = f64::INFINITY;
        for a in 1..=7u64 {
            for b in 1..=(8 - a) {
                let c = 9 - a - b;
                if c == 0 {
                    continue;
                }
                let t = [cost(0, a), cost(1, b), cost(2, c)];
                if t.iter().all(Option::is_some) {
                    best = best.min(t.iter().map(|x| x.unwrap()).fold(0.0, f64::max));
                }
            }
        }
        assert_eq!(v, best);
        assert!(bottleneck(3, 2, &cost).is_none());
    }

    #[test]
    fn permutations_are_complete() {
        let p = permutations(3);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0], vec![0, 1, 2]);
        assert_eq!(p[5], vec![2, 1, 0]);
    }
}
