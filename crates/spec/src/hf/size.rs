//! The size limit: a model whose parameter count leaves what `ModelSpec` counts in `u64` is
//! refused, naming the largest dimension read; the count is redone in `u128` so that it
//! cannot overflow for any accepted dimensions.
//!
//! It must agree with `ModelSpec::parameter_count` term by term (tested on every preset)
//! and knows nothing of how a family reads its keys.

use super::config::Config;
use super::MAX_PARAMS;
use crate::error::Result;
use crate::model::{Activation, BlockKind, Family, ModelSpec, Norm, Positions};

impl Config<'_> {
    /// Rejects a model whose parameter count leaves the range `ModelSpec` can count in,
    /// naming the largest of the dimensions read.
    pub(super) fn check_size(&self, spec: &ModelSpec, dims: &[(&str, u64)]) -> Result<()> {
        let total = parameter_count_u128(spec);
        if total <= MAX_PARAMS {
            return Ok(());
        }
        let key = dims
            .iter()
            .rev() // the first of equal maxima
            .max_by_key(|&&(_, v)| v)
            .map_or("model_type", |&(k, _)| k);
        Err(self.err(
            key,
            format!("gives a model of {:.2e} parameters, too many", total as f64),
            "dimensions giving at most 10^15 parameters",
        ))
    }
}

/// `ModelSpec::parameter_count` in `u128`, which cannot overflow for dimensions ≤ 10^9
/// and layers ≤ 10^5 (the largest product is below 10^33). Blocks are counted kind by
/// kind (`block_kinds`, `kind_counts`: counts of blocks, each ≤ 10^5).
pub(crate) fn parameter_count_u128(s: &ModelSpec) -> u128 {
    let w = |x: u64| u128::from(x);
    let (h, v) = (w(s.hidden), w(s.vocab));
    let norm = match s.norm {
        Norm::LayerNorm => 2 * h,
        Norm::RmsNorm => h,
    };
    let counts = s.kind_counts(0, s.layers);
    let blocks: u128 = s
        .block_kinds()
        .iter()
        .zip(counts)
        .map(|(k, n)| w(n) * block_u128(k, norm))
        .sum();
    let pos = match s.positions {
        Positions::Learned => w(s.max_positions),
        Positions::Rotary | Positions::None | Positions::Alibi => 0,
    };
    let bert = s.family == Family::Bert;
    let embedding = (v + pos + w(s.type_vocab)) * h + if bert { norm } else { 0 };
    let head = if bert {
        h * h + h
    } else {
        norm + if s.tied_embeddings { 0 } else { v * h }
    };
    embedding + blocks + head
}

/// One block of the uniform model `s` in `u128`: its attention, MLP or Mamba-2 mixer and a
/// pre-norm (`norm` parameters) for each.
fn block_u128(s: &ModelSpec, norm: u128) -> u128 {
    let w = |x: u64| u128::from(x);
    let (h, f) = (w(s.hidden), w(s.ffn_hidden));
    let q = w(s.heads) * w(s.head_dim);
    let kv = w(s.kv_heads) * w(s.head_dim);
    let mats = match s.activation {
        Activation::Gelu | Activation::Relu2 => 2,
        Activation::SwiGlu => 3,
    };
    let attn = match s.mla {
        // `ModelSpec::attention_params`' latent attention: q down and up (or straight up),
        // kv down to the latent and the shared RoPE key, up to keys and values, output.
        Some(mla) => {
            let heads = w(s.heads);
            let (q_rank, kv_rank) = (w(mla.q_lora_rank), w(mla.kv_lora_rank));
            let q_out = heads * w(mla.qk_head_dim());
            let q = if q_rank > 0 {
                h * q_rank + q_rank + q_rank * q_out
            } else {
                h * q_out
            };
            let kv = h * (kv_rank + w(mla.qk_rope_head_dim))
                + kv_rank
                + kv_rank * heads * (w(mla.qk_nope_head_dim) + w(mla.v_head_dim));
            q + kv + heads * w(mla.v_head_dim) * h
        }
        None => {
            h * (q + 2 * kv)
                + if s.qkv_bias { q + 2 * kv } else { 0 }
                + q * h
                + if s.linear_bias { h } else { 0 }
        }
    };
    let mlp_at = |x: u128| mats * x * f + if s.linear_bias { (mats - 1) * f + x } else { 0 };
    let one_mlp = mlp_at(h);
    let mlp = match s.moe {
        None => one_mlp,
        Some(m) => {
            // LatentMoE: experts at the latent width, and the projections to and from it.
            let expert = mlp_at(m.latent.map_or(h, w));
            let latent = m.latent.map_or(0, |l| {
                2 * h * w(l) + if s.linear_bias { w(l) + h } else { 0 }
            });
            w(m.experts) * (expert + h) + w(m.shared_experts) * one_mlp + latent
        }
    };
    let mixer = match s.mamba {
        Some(m) => {
            let d = w(m.heads) * w(m.head_dim);
            let bc = 2 * w(m.groups) * w(m.state);
            let in_w = 2 * d + bc + w(m.heads);
            let conv = (d + bc) * (w(m.conv_kernel) + u128::from(m.conv_bias));
            let bias = if m.proj_bias { in_w + h } else { 0 };
            h * in_w + conv + 3 * w(m.heads) + d + d * h + bias
        }
        None => 0,
    };
    match s.block {
        BlockKind::Transformer => attn + mlp + 2 * norm,
        BlockKind::Attention => attn + norm,
        BlockKind::Mlp => mlp + norm,
        BlockKind::Mamba => mixer + norm,
    }
}
