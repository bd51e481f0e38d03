//! Per-group costs of a mixed plan: a group's cluster, device and memory (`Ctx`), its layer
//! costs, the send that crosses to another group, and each stage's time and memory on a
//! group as lines in its blocks and fully recomputed blocks (`StageLine`), anchored on four
//! estimates of the whole pipeline on that group.
//!
//! Every number comes from `plait_cost`; this module knows nothing of layouts, of the
//! search or of the simulator.

use plait_cost::comm::{Group, Groups};
use plait_cost::estimate::{estimate_from_costs, layer_costs, policy_recompute, LayerCosts};
use plait_cost::layer::Workload;
use plait_cost::{DeviceModel, Estimate};
use plait_spec::{ClusterSpec, ParallelConfig, Recompute, StageMap};

use super::MixedRequest;
/// A group's cluster, device and memory.
pub(super) struct Ctx<'a> {
    pub(super) cluster: &'a ClusterSpec,
    pub(super) device: &'a DeviceModel,
    pub(super) capacity: f64,
}

pub(super) fn ctxs<'a>(req: &'a MixedRequest) -> Vec<Ctx<'a>> {
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
pub(super) fn group_costs(
    req: &MixedRequest,
    ctx: &Ctx,
    c: &ParallelConfig,
) -> (LayerCosts, LayerCosts) {
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
pub(super) fn cross_send_s(req: &MixedRequest, ctx: &Ctx, c: &ParallelConfig) -> (f64, f64) {
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
pub(super) struct StageLine {
    pub(super) t0: f64,
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
    pub(super) fn time_s(&self, b: u64, x: u64) -> f64 {
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
    pub(super) fn min_recompute(&self, b: u64, all_full: bool) -> Option<u64> {
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
    pub(super) fn min_ratio(&self, b: u64) -> f64 {
        let x = if self.may_recompute { b } else { 0 };
        self.bytes(b, x) / self.capacity
    }
}

fn uniform_map(p: u64, blocks: u64, recompute: u64) -> StageMap {
    StageMap {
        chunk_blocks: vec![blocks; p as usize],
        recompute_blocks: vec![recompute; p as usize],
        placement: plait_spec::Placement::Looped,
    }
}

/// The lines of every stage of `c` on group `ctx`.
pub(super) fn stage_lines(
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
