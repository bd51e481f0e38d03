//! The costs of a configuration's layers, computed once per shape: the embedding, each kind
//! of block and the head, corrected by a profile's whole-layer samples where one matches.
//! What the estimate assembles; knows nothing of stages, schedules or memory.

use plait_spec::{Family, KindRuns, ModelSpec, MAX_BLOCK_KINDS};

use crate::comm::{Group, Groups};
use crate::device::DeviceModel;
use crate::engine::EngineProfile;
use crate::layer::{
    block_cost, embedding_cost, head_cost, mtp_projection_cost, LayerCost, Workload,
};

/// Costs of the layers under one configuration, computed once: the embedding, each kind of
/// block ([`ModelSpec::block_kinds`]) and the head.
#[derive(Debug, Clone, Copy)]
pub struct LayerCosts {
    pub embedding: LayerCost,
    /// The mean block (the block itself for a model of identical blocks): what the layout
    /// search balances by. Estimates cost each block by its kind (`kinds`).
    pub block: LayerCost,
    pub head: LayerCost,
    /// Cost of each kind of block, in the order of [`ModelSpec::block_kinds`]; from slot
    /// `n_kinds` on, the same kinds with their linears in bf16 (the blocks `bf16_layers`
    /// keeps there).
    pub kinds: [LayerCost; 2 * MAX_BLOCK_KINDS],
    pub n_kinds: usize,
    /// Blocks at the start and at the end costed in bf16 (`Workload::bf16_layers`), of
    /// the model's `layers`.
    pub bf16_layers: (u64, u64),
    pub layers: u64,
    /// One pass of a multi-token-prediction module (its blocks, its projection and a pass
    /// through the head: `mtp_pass_cost`), on the last stage; zero without MTP.
    pub mtp: LayerCost,
}

impl LayerCosts {
    /// The slots of `kinds` blocks may fill: each kind, and again in bf16 where blocks are
    /// kept there.
    pub fn slots(&self) -> usize {
        if self.bf16_layers == (0, 0) {
            self.n_kinds
        } else {
            2 * self.n_kinds
        }
    }

    /// Each kind's cost with its count among blocks `first..first + count`.
    pub fn blocks(&self, m: &ModelSpec, first: u64, count: u64) -> Vec<(LayerCost, f64)> {
        let counts = self.kind_counts(&m.kind_runs(), first, count);
        (0..self.slots())
            .filter(|&k| counts[k] > 0)
            .map(|k| (self.kinds[k], counts[k] as f64))
            .collect()
    }

    /// Blocks of each slot of `kinds` among blocks `first..first + count` of the model
    /// whose blocks are `runs`: a block kept in bf16 counts in its kind's bf16 slot.
    pub fn kind_counts(
        &self,
        runs: &KindRuns,
        first: u64,
        count: u64,
    ) -> [u64; 2 * MAX_BLOCK_KINDS] {
        let mut out = [0; 2 * MAX_BLOCK_KINDS];
        let (head, tail) = self.bf16_layers;
        let end = first.saturating_add(count).min(self.layers);
        let tail_start = self.layers.saturating_sub(tail).max(head);
        let mut add = |lo: u64, hi: u64, offset: usize| {
            if hi > lo {
                for (k, n) in runs.counts(lo, hi - lo).iter().enumerate() {
                    out[offset + k] += n;
                }
            }
        };
        add(first, end.min(head), self.n_kinds);
        add(first.max(head), end.min(tail_start), 0);
        add(first.max(tail_start), end, self.n_kinds);
        out
    }

    /// Whether every block costs the same: one kind, none kept in bf16.
    pub fn uniform(&self, runs: &KindRuns) -> bool {
        runs.is_uniform() && self.bf16_layers == (0, 0)
    }
}

/// Computes the layer costs, applying the profile's whole-layer measurements when one
/// matches a block (same family, hidden, heads, sequence and tp).
pub fn layer_costs(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCosts {
    let mut kinds = [LayerCost::default(); 2 * MAX_BLOCK_KINDS];
    let variants = m.block_kinds();
    let n_kinds = variants.len().min(MAX_BLOCK_KINDS);
    for (slot, v) in kinds.iter_mut().zip(&variants) {
        let mut block = block_cost(v, d, g, w);
        if let Some((ff, fb)) = layer_sample_factors(v, d, w) {
            block.forward.compute_s *= ff;
            block.forward.launch_wait_s *= ff;
            block.recompute.compute_s *= ff;
            block.recompute.launch_wait_s *= ff;
            block.backward.compute_s *= fb;
            block.backward.launch_wait_s *= fb;
            block.weight_grad_s *= fb;
        }
        *slot = block;
    }
    // The blocks a low-precision run keeps in bf16 (Megatron-Core's first and last layers,
    // `TrainSpec::bf16_layers`; a multi-token-prediction module the model keeps there):
    // each kind once more, its linears in 16-bit.
    let bf16_layers = w.bf16_layers;
    let mtp_in_bf16 = m.mtp_layers > 0 && m.mtp_bf16 && w.low_precision();
    if bf16_layers != (0, 0) || mtp_in_bf16 {
        let (d16, w16) = (d.sixteen_bit(), w.in_sixteen_bit());
        for (slot, v) in kinds[n_kinds..].iter_mut().zip(&variants) {
            *slot = block_cost(v, &d16, g, &w16);
        }
    }
    let mut costs = LayerCosts {
        embedding: embedding_cost(m, d, g, w),
        block: LayerCost::default(),
        head: head_cost(m, d, g, w),
        kinds,
        n_kinds,
        bf16_layers,
        layers: m.layers,
        mtp: LayerCost::default(),
    };
    let counts = costs.kind_counts(&m.kind_runs(), 0, m.layers);
    let parts: Vec<(LayerCost, f64)> = (0..costs.slots())
        .filter(|&k| counts[k] > 0)
        .map(|k| (kinds[k], counts[k] as f64))
        .collect();
    costs.block = LayerCost::weighted_mean(&parts);
    if m.mtp_layers > 0 {
        let module = if mtp_in_bf16 {
            &kinds[n_kinds..2 * n_kinds]
        } else {
            &kinds[..n_kinds]
        };
        costs.mtp = mtp_pass_cost(m, (d, w, mtp_in_bf16), module, &costs.head);
    }
    costs
}

/// One pass of a multi-token-prediction module: its blocks ([`ModelSpec::mtp_kinds`], each
/// costed as the model's block of that kind in `kinds`), its projection and a pass through
/// the shared head (whose parameters are the main model's, counted once). In 16-bit
/// (`sixteen_bit`, with `kinds` the bf16 ones) where the model keeps the module there in a
/// low-precision run ([`ModelSpec::mtp_bf16`]; the head runs as the main model's). Where
/// the passes share one module ([`ModelSpec::mtp_shared`]), each holds its share of the
/// module's weights.
fn mtp_pass_cost(
    m: &ModelSpec,
    (d, w, sixteen_bit): (&DeviceModel, &Workload, bool),
    kinds: &[LayerCost],
    head: &LayerCost,
) -> LayerCost {
    let bf16 = sixteen_bit.then(|| (d.sixteen_bit(), w.in_sixteen_bit()));
    let (d, w) = bf16.as_ref().map_or((d, w), |(d16, w16)| (d16, w16));
    let blocks = m.mtp_kinds().unwrap_or_else(|_| vec![m.last_block_kind()]);
    let mut pass = mtp_projection_cost(m, d, w).plus(&LayerCost {
        params: 0.0,
        trainable_params: 0.0,
        ..*head
    });
    for k in blocks.into_iter().filter(|&k| k < kinds.len()) {
        pass = pass.plus(&kinds[k]);
    }
    if m.mtp_shared {
        let share = 1.0 / m.mtp_layers.max(1) as f64;
        pass.params *= share;
        pass.expert_params *= share;
        pass.trainable_params *= share;
        pass.trainable_expert_params *= share;
    }
    pass
}

/// Measured / modelled ratios of the nearest matching profile layer (by micro-batch size).
fn layer_sample_factors(m: &ModelSpec, d: &DeviceModel, w: &Workload) -> Option<(f64, f64)> {
    let family = match m.family {
        Family::Gpt => "gpt",
        Family::Llama => "llama",
        _ => return None,
    };
    let sample = d
        .layer_samples
        .iter()
        .filter(|s| {
            s.family == family
                && s.hidden == m.hidden
                && s.heads == m.heads
                && s.tp == w.tp
                && s.seq as f64 == w.seq_local
        })
        .min_by(|a, b| {
            let da = (a.mbs as f64 / w.mbs).ln().abs();
            let db = (b.mbs as f64 / w.mbs).ln().abs();
            da.total_cmp(&db)
        })?;
    let measured_shape = Workload {
        mbs: sample.mbs as f64,
        seq: sample.seq as f64,
        seq_local: sample.seq as f64,
        sp: false,
        recompute: plait_spec::Recompute::None,
        attention: plait_spec::AttentionImpl::Flash,
        dropout: false,
        // Measured in 16-bit.
        linear_format: plait_spec::Dtype::Bf16,
        fp8_recipe: None,
        // The profile layers were measured in eager PyTorch with SDPA's flash kernel.
        engine: EngineProfile::of(plait_spec::Engine::Plait),
        level: 1,
        moe_skew: 1.0,
        ..*w
    };
    let none = Groups {
        tp: Group::place_single(),
        cp: Group::place_single(),
        dp: Group::place_single(),
        dp_shard: Group::place_single(),
        dp_replicate: Group::place_single(),
        ep: Group::place_single(),
        etp: Group::place_single(),
        pp: Group::place_single(),
    };
    let modelled = block_cost(m, d, &none, &measured_shape);
    Some((
        sample.forward_s / modelled.forward.compute_s,
        sample.backward_s / modelled.backward.compute_s,
    ))
}
