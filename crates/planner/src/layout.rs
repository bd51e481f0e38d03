//! Block layout of one configuration: how many blocks each pipeline stage holds and how
//! many of them it recomputes in full.
//!
//! * [`fit_recompute`] — per stage, the fewest fully recomputed blocks that fit memory.
//!   Stage k of 1F1B holds p − k micro-batches, so later stages need less (or none): the
//!   optimal form of Merak's stage-aware recomputation.
//! * [`partition_blocks`] — a dynamic program over (stage, blocks placed) that minimises
//!   the bottleneck stage time, each stage under its own memory limit (its in-flight
//!   micro-batches, its embedding or head), choosing its recompute count on the way.
//!
//! Blocks are balanced by the mean block, except in hybrids (Nemotron-H's Mamba-2,
//! attention-only and MLP-only layers, whose costs differ severalfold): there a stage is
//! costed by the kinds of the very blocks it would hold.

use plait_cost::estimate::{
    estimate_from_costs, zero3_gather_buffer_bytes, zero_state_bytes_per_param, LayerCosts,
    OptimizerHome,
};
use plait_cost::layer::LayerCost;
use plait_cost::Estimate;
use plait_spec::{ModelSpec, ParallelConfig, Recompute, StageMap};

/// What the layout search needs of a plan request: the model on its cluster, the training
/// spec, the device model and the layouts the engine can express (`Request::layout_inputs`).
#[derive(Clone, Copy)]
pub struct LayoutInputs<'a> {
    pub model: &'a plait_spec::ModelSpec,
    pub cluster: &'a plait_spec::ClusterSpec,
    pub train: &'a plait_spec::TrainSpec,
    pub device: &'a plait_cost::DeviceModel,
    pub shape: MapShape,
}

/// Layouts an engine can express.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MapShape {
    /// Any number of blocks per stage (plait's own runtime).
    #[default]
    Any,
    /// Any number of blocks per stage, the same full-recompute count on every stage
    /// (Megatron-LM's `--pipeline-model-parallel-layout` with `--recompute-num-layers`).
    UniformRecompute,
    /// Even blocks and the same recompute count on every stage.
    Even,
}

/// Bytes per parameter of weights + gradients + optimizer states under ZeRO `zero` over
/// `shards` data-parallel ranks.
pub(crate) fn state_bytes_per_param(zero: u8, shards: f64, optimizer: OptimizerHome) -> f64 {
    zero_state_bytes_per_param(zero, shards, optimizer)
        .iter()
        .sum()
}

/// Weights of `params` plus gradients and optimizer states of the `trainable` among them
/// (frozen LoRA bases keep only their weights).
pub(crate) fn state_bytes(
    zero: u8,
    params: f64,
    trainable: f64,
    shards: f64,
    optimizer: OptimizerHome,
) -> f64 {
    let [w, g, o] = zero_state_bytes_per_param(zero, shards, optimizer);
    params * w + trainable * (g + o)
}

/// One stage's memory and time as functions of its block count and recompute count,
/// anchored on the even layout's estimate of that stage.
struct StageModel {
    /// Blocks of the stage in the estimate it is anchored on.
    anchor_blocks: f64,
    /// Peak bytes of the anchor without its activations and transient.
    anchor_fixed_bytes: f64,
    /// Activation bytes per micro-batch besides the blocks (embedding, head).
    extra_activation_bytes: f64,
    extra_transient_bytes: f64,
    inflight: f64,
    /// Time per micro-batch besides the blocks (embedding, head, p2p).
    extra_s: f64,
    /// scp's last stage keeps all activations.
    may_recompute: bool,
    /// Hybrids: model-state bytes of the anchor's own blocks (its kinds), replaced by those
    /// of the blocks a layout gives the stage. `None`: blocks are counted as mean blocks.
    anchor_state_bytes: Option<f64>,
}

/// What a block costs under the configuration's policy and under full recompute.
struct BlockModel {
    policy: LayerCost,
    full: LayerCost,
    state_bytes: f64,
}

fn pass_s(l: &LayerCost) -> f64 {
    l.forward.total_s() + l.backward.total_s() + l.recompute.total_s()
}

impl BlockModel {
    fn new(
        c: &ParallelConfig,
        optimizer: OptimizerHome,
        policy: &LayerCosts,
        full: &LayerCosts,
    ) -> Self {
        Self::of(c, optimizer, policy.block, full.block)
    }

    /// The mean of blocks `first..first + count` of `model`, kind by kind.
    fn of_range(
        c: &ParallelConfig,
        optimizer: OptimizerHome,
        (policy, full): (&LayerCosts, &LayerCosts),
        model: &plait_spec::ModelSpec,
        first: u64,
        count: u64,
    ) -> Self {
        Self::of(
            c,
            optimizer,
            LayerCost::weighted_mean(&policy.blocks(model, first, count)),
            LayerCost::weighted_mean(&full.blocks(model, first, count)),
        )
    }

    fn of(
        c: &ParallelConfig,
        optimizer: OptimizerHome,
        policy: LayerCost,
        full: LayerCost,
    ) -> Self {
        let (dense_shards, expert_shards) = c.state_shards();
        let (dense_shards, expert_shards) = (dense_shards as f64, expert_shards as f64);
        let b = &policy;
        BlockModel {
            policy,
            full,
            state_bytes: state_bytes(
                c.zero,
                b.params,
                b.trainable_params,
                dense_shards,
                optimizer,
            ) + state_bytes(
                c.zero,
                b.expert_params,
                b.trainable_expert_params,
                expert_shards,
                optimizer,
            ),
        }
    }
}

impl StageModel {
    fn new(
        c: &ParallelConfig,
        e: &Estimate,
        map: &StageMap,
        k: usize,
        policy: &LayerCosts,
    ) -> Self {
        let p = c.pp as usize;
        let s = &e.stages[k];
        let m = &s.memory;
        let (first, last) = (k == 0, k + 1 == p);
        let ends = |f: &dyn Fn(&LayerCost) -> f64| {
            f64::from(u8::from(first)) * f(&policy.embedding)
                + f64::from(u8::from(last)) * f(&policy.head)
        };
        StageModel {
            anchor_blocks: map.rank_blocks(k as u64, c.pp) as f64,
            // ZeRO-3's gathered weights sit in the estimate's transient; they do not depend
            // on the stage's block count.
            anchor_fixed_bytes: m.weights_bytes
                + m.gradients_bytes
                + m.optimizer_bytes
                + m.reserve_bytes
                + zero3_gather_buffer_bytes(c, &policy.block),
            extra_activation_bytes: ends(&|l| l.activation_bytes),
            extra_transient_bytes: ends(&|l| l.transient_bytes).max(policy.block.transient_bytes),
            inflight: m.inflight_microbatches,
            extra_s: ends(&pass_s) + s.p2p_s,
            may_recompute: !c.schedule.spares_rank(k as u64, p as u64),
            anchor_state_bytes: None,
        }
    }

    /// The stage of a hybrid: its anchor's model state counted by the kinds of the
    /// anchor's own blocks.
    fn by_kind(mut self, anchor: &BlockModel) -> Self {
        self.anchor_state_bytes = Some(self.anchor_blocks * anchor.state_bytes);
        self
    }

    /// Peak bytes with `b` blocks of which `x` are fully recomputed.
    fn bytes(&self, blk: &BlockModel, b: f64, x: f64) -> f64 {
        let act = (b - x) * blk.policy.activation_bytes
            + x * blk.full.activation_bytes
            + self.extra_activation_bytes;
        let transient = if x > 0.0 {
            self.extra_transient_bytes.max(blk.full.transient_bytes)
        } else {
            self.extra_transient_bytes
        };
        let state = match self.anchor_state_bytes {
            Some(anchor) => b * blk.state_bytes - anchor,
            None => (b - self.anchor_blocks) * blk.state_bytes,
        };
        self.anchor_fixed_bytes + state + self.inflight * act + transient
    }

    /// Fewest fully recomputed blocks among `b` that fit `capacity`, or None.
    fn min_recompute(&self, blk: &BlockModel, b: u64, capacity: f64) -> Option<u64> {
        let bf = b as f64;
        if self.bytes(blk, bf, 0.0) <= capacity {
            return Some(0);
        }
        if !self.may_recompute {
            return None;
        }
        let saving = self.inflight * (blk.policy.activation_bytes - blk.full.activation_bytes);
        if saving <= 0.0 {
            return None;
        }
        let over = self.bytes(blk, bf, 1.0) - capacity;
        let x = 1 + (over / saving).ceil().max(0.0) as u64;
        // Rounding guard: step up until it fits.
        (x.min(b)..=b).find(|&x| self.bytes(blk, bf, x as f64) <= capacity)
    }

    fn time_s(&self, blk: &BlockModel, b: u64, x: u64) -> f64 {
        (b - x) as f64 * pass_s(&blk.policy) + x as f64 * pass_s(&blk.full) + self.extra_s
    }
}

/// Whether the stages' blocks are costed one by one where they differ: a hybrid's kinds,
/// or blocks kept in bf16 beside low-precision ones (else the mean block stands for all).
fn by_block(model: &ModelSpec, policy: &LayerCosts) -> bool {
    model.is_hybrid() || policy.bf16_layers != (0, 0)
}

/// Per stage, the fewest fully recomputed blocks that make `map`'s stages fit, given the
/// estimate `e` of `c` under `map`; None when some stage cannot fit even recomputing all.
pub fn fit_recompute(
    req: &LayoutInputs,
    c: &ParallelConfig,
    map: &StageMap,
    e: &Estimate,
    policy: &LayerCosts,
    full: &LayerCosts,
) -> Option<StageMap> {
    let blk = BlockModel::new(c, OptimizerHome::of(req.train), policy, full);
    let capacity = req.cluster.gpu.memory_bytes;
    let mut out = map.clone();
    let hybrid = by_block(req.model, policy);
    for k in 0..c.pp as usize {
        let stage = StageModel::new(c, e, map, k, policy);
        let b = map.rank_blocks(k as u64, c.pp);
        out.recompute_blocks[k] = if hybrid && c.vp == 1 {
            // The stage's own blocks, kind by kind (one chunk per rank: blocks are
            // contiguous from the stages before it).
            let first: u64 = (0..k as u64).map(|j| map.rank_blocks(j, c.pp)).sum();
            let own = BlockModel::of_range(
                c,
                OptimizerHome::of(req.train),
                (policy, full),
                req.model,
                first,
                b,
            );
            stage.by_kind(&own).min_recompute(&own, b, capacity)?
        } else {
            stage.min_recompute(&blk, b, capacity)?
        };
    }
    if req.shape != MapShape::Any {
        uniform_recompute(c, &mut out);
    }
    Some(out)
}

/// Engines recompute the same number of blocks on every stage: raise every count to the
/// largest (capped by the stage's blocks), except on scp's last stage, which never
/// recomputes.
fn uniform_recompute(c: &ParallelConfig, map: &mut StageMap) {
    let x = *map.recompute_blocks.iter().max().unwrap_or(&0);
    let p = c.pp as usize;
    for k in 0..p {
        let spared = c.schedule.spares_rank(k as u64, p as u64);
        map.recompute_blocks[k] = if spared {
            0
        } else {
            x.min(map.rank_blocks(k as u64, c.pp))
        };
    }
}

/// The layout of `c` (one chunk per rank) that minimises the slowest stage's time per
/// micro-batch with every stage fitting memory; None when it is not better than `map` or
/// the configuration has several chunks per rank (kept even, as Megatron-LM requires).
pub fn partition_blocks(
    req: &LayoutInputs,
    (policy, full): &(LayerCosts, LayerCosts),
    c: &ParallelConfig,
    map: &StageMap,
) -> Option<StageMap> {
    if c.vp > 1 || c.pp == 1 || req.shape == MapShape::Even {
        return None;
    }
    let e = estimate_from_costs(
        req.model,
        req.cluster,
        req.train,
        c,
        req.device,
        policy,
        full,
        map,
    );
    let capacity = req.cluster.gpu.memory_bytes;
    let blk = BlockModel::new(c, OptimizerHome::of(req.train), policy, full);
    let p = c.pp as usize;
    let layers = req.model.layers as usize;
    let hybrid = by_block(req.model, policy);
    let stages: Vec<StageModel> = (0..p)
        .map(|k| {
            let s = StageModel::new(c, &e, map, k, policy);
            if hybrid {
                let first: u64 = (0..k as u64).map(|j| map.rank_blocks(j, c.pp)).sum();
                let b = map.rank_blocks(k as u64, c.pp);
                s.by_kind(&BlockModel::of_range(
                    c,
                    OptimizerHome::of(req.train),
                    (policy, full),
                    req.model,
                    first,
                    b,
                ))
            } else {
                s
            }
        })
        .collect();
    // (time, recompute count) of stage k holding b blocks, None if it cannot fit.
    let all_full = c.recompute == Recompute::Full;
    let stage_cost = |s: &StageModel, blk: &BlockModel, b: u64| {
        let x = if all_full && s.may_recompute {
            (s.bytes(blk, b as f64, b as f64) <= capacity).then_some(b)?
        } else {
            s.min_recompute(blk, b, capacity)?
        };
        Some((s.time_s(blk, b, x), x))
    };
    // cost[k][b]: by the mean block, the same wherever the stage's blocks start.
    let cost: Vec<Vec<Option<(f64, u64)>>> = stages
        .iter()
        .map(|s| {
            (0..=layers)
                .map(|b| (b > 0 && !hybrid).then(|| stage_cost(s, &blk, b as u64))?)
                .collect()
        })
        .collect();
    // A hybrid's stage k holding blocks start..start + b is costed by their kinds.
    let cost_at = |k: usize, start: usize, b: usize| -> Option<(f64, u64)> {
        if !hybrid {
            return cost[k][b];
        }
        if b == 0 {
            return None;
        }
        let own = BlockModel::of_range(
            c,
            OptimizerHome::of(req.train),
            (policy, full),
            req.model,
            start as u64,
            b as u64,
        );
        stage_cost(&stages[k], &own, b as u64)
    };
    let blocks = bottleneck_dp(&cost_at, p, layers)?;
    let mut start = 0;
    let mut recompute_blocks = Vec::with_capacity(p);
    for (k, &b) in blocks.iter().enumerate() {
        recompute_blocks.push(cost_at(k, start, b).map_or(0, |(_, x)| x));
        start += b;
    }
    let mut candidate = StageMap {
        recompute_blocks,
        chunk_blocks: blocks.iter().map(|&b| b as u64).collect(),
        placement: c.schedule.placement(),
    };
    if req.shape != MapShape::Any {
        uniform_recompute(c, &mut candidate);
    }
    // The DP minimises the bottleneck per micro-batch; keep its layout only if the whole
    // iteration (fill and drain, reductions) is faster and it fits.
    let estimate = |m: &StageMap| {
        estimate_from_costs(
            req.model,
            req.cluster,
            req.train,
            c,
            req.device,
            policy,
            full,
            m,
        )
    };
    let mine = estimate(&candidate);
    (mine.fits && (!e.fits || mine.iteration_time_s < e.iteration_time_s)).then_some(candidate)
}

/// best[k][s]: the least bottleneck of stages 0..=k holding s blocks, `cost(k, start, b)`
/// the (time, recompute count) of stage k holding blocks start..start + b. O(p · L²).
fn bottleneck_dp(
    cost: &dyn Fn(usize, usize, usize) -> Option<(f64, u64)>,
    p: usize,
    layers: usize,
) -> Option<Vec<usize>> {
    let inf = f64::INFINITY;
    let mut best = vec![vec![inf; layers + 1]; p];
    let mut choice = vec![vec![0usize; layers + 1]; p];
    for s in 1..=layers {
        if let Some((t, _)) = cost(0, 0, s) {
            best[0][s] = t;
            choice[0][s] = s;
        }
    }
    for k in 1..p {
        // Each later stage needs at least one block.
        for s in (k + 1)..=layers {
            for b in 1..=(s - k) {
                let Some((t, _)) = cost(k, s - b, b) else {
                    continue;
                };
                let v = best[k - 1][s - b].max(t);
                if v < best[k][s] {
                    best[k][s] = v;
                    choice[k][s] = b;
                }
            }
        }
    }
    if !best[p - 1][layers].is_finite() {
        return None;
    }
    let mut blocks = vec![0; p];
    let mut s = layers;
    for k in (0..p).rev() {
        blocks[k] = choice[k][s];
        s -= blocks[k];
    }
    Some(blocks)
}
