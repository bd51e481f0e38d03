//! The costs of a configuration's layers, computed once per shape: the embedding, each kind
//! of block and the head, corrected by a profile's whole-layer samples where one matches.
//! What the estimate assembles; knows nothing of stages, schedules or memory.

use plait_spec::{Family, ModelSpec, MAX_BLOCK_KINDS};

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
    /// Cost of each kind of block, in the order of [`ModelSpec::block_kinds`].
    pub kinds: [LayerCost; MAX_BLOCK_KINDS],
    pub n_kinds: usize,
    /// One pass of a multi-token-prediction module (its blocks, its projection and a pass
    /// through the head: `mtp_pass_cost`), on the last stage; zero without MTP.
    pub mtp: LayerCost,
}

impl LayerCosts {
    /// Each kind's cost with its count among blocks `first..first + count`.
    pub fn blocks(&self, m: &ModelSpec, first: u64, count: u64) -> Vec<(LayerCost, f64)> {
        let counts = m.kind_counts(first, count);
        (0..self.n_kinds)
            .filter(|&k| counts[k] > 0)
            .map(|k| (self.kinds[k], counts[k] as f64))
            .collect()
    }
}

/// Computes the layer costs, applying the profile's whole-layer measurements when one
/// matches a block (same family, hidden, heads, sequence and tp).
pub fn layer_costs(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCosts {
    let mut kinds = [LayerCost::default(); MAX_BLOCK_KINDS];
    let variants = m.block_kinds();
    let n_kinds = variants.len().min(MAX_BLOCK_KINDS);
    for (slot, v) in kinds.iter_mut().zip(&variants) {
        let mut block = block_cost(v, d, g, w);
        if let Some((ff, fb)) = layer_sample_factors(v, d, w) {
            block.forward.compute_s *= ff;
            block.recompute.compute_s *= ff;
            block.backward.compute_s *= fb;
            block.weight_grad_s *= fb;
        }
        *slot = block;
    }
    let counts = m.kind_counts(0, m.layers);
    let parts: Vec<(LayerCost, f64)> = (0..n_kinds).map(|k| (kinds[k], counts[k] as f64)).collect();
    let head = head_cost(m, d, g, w);
    let mtp = if m.mtp_layers > 0 {
        mtp_pass_cost(m, (d, g, w), (&kinds, &variants), &head)
    } else {
        LayerCost::default()
    };
    LayerCosts {
        embedding: embedding_cost(m, d, g, w),
        block: LayerCost::weighted_mean(&parts),
        head,
        kinds,
        n_kinds,
        mtp,
    }
}

/// One pass of a multi-token-prediction module: its blocks ([`ModelSpec::mtp_kinds`], each
/// costed as the model's block of that kind, `kinds` of `variants`), its projection and a
/// pass through the shared head (whose parameters are the main model's, counted once). In
/// 16-bit where the model keeps the module there in a low-precision run
/// ([`ModelSpec::mtp_bf16`]; the head runs as the main model's). Where the passes share one
/// module ([`ModelSpec::mtp_shared`]), each holds its share of the module's weights.
fn mtp_pass_cost(
    m: &ModelSpec,
    (d, g, w): (&DeviceModel, &Groups, &Workload),
    (kinds, variants): (&[LayerCost], &[ModelSpec]),
    head: &LayerCost,
) -> LayerCost {
    let sixteen_bit = m.mtp_bf16 && w.low_precision();
    let bf16 = sixteen_bit.then(|| {
        let w16 = Workload {
            linear_format: plait_spec::Dtype::Bf16,
            fp8_recipe: None,
            ..*w
        };
        (d.sixteen_bit(), w16)
    });
    let (d, w) = bf16.as_ref().map_or((d, w), |(d16, w16)| (d16, w16));
    let blocks = m.mtp_kinds().unwrap_or_else(|_| vec![m.last_block_kind()]);
    let mut pass = mtp_projection_cost(m, d, w).plus(&LayerCost {
        params: 0.0,
        trainable_params: 0.0,
        ..*head
    });
    for k in blocks.into_iter().filter(|&k| k < variants.len()) {
        let block = if sixteen_bit {
            block_cost(&variants[k], d, g, w)
        } else {
            kinds[k]
        };
        pass = pass.plus(&block);
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
