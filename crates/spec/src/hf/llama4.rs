//! Llama 4 (Scout, Maverick): routed experts with one shared expert, MoE layers interleaved
//! with dense ones, chunked local attention on the RoPE layers and full attention without
//! positions (NoPE) on every fourth.
//!
//! Reads `llama4_text` keys (the `text_config` of a multimodal `llama4` config.json, which
//! `model_from_hf_config` unwraps). Only which keys this family reads and their
//! transformers defaults live here; the accessors and error wording are `config`'s.

use super::config::Config;
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{ModelSpec, MoeSpec};

impl Config<'_> {
    /// transformers' `Llama4TextConfig` / `Llama4TextDecoderLayer`:
    /// - layer i is MoE when listed in `moe_layers` (default: every
    ///   `interleave_moe_layer_step`-th layer, from step − 1), otherwise a dense SwiGLU MLP
    ///   of `intermediate_size_mlp`;
    /// - a MoE layer (`Llama4TextMoe`) holds `num_local_experts` routed experts and one
    ///   shared expert, all `intermediate_size` wide; its router scores the top
    ///   `num_experts_per_tok` experts by a sigmoid of their logits, unnormalised
    ///   (`Llama4Router`);
    /// - layer i uses RoPE where `no_rope_layers[i]` is 1 (default: all but every
    ///   `no_rope_layer_interval`-th), and those layers attend within chunks of
    ///   `attention_chunk_size` tokens; the NoPE layers attend over the whole sequence.
    ///
    /// The L2 norm of q and k (`use_qk_norm`) has no weights and is left out of the time,
    /// as are the NoPE layers' skipped rotary passes and the attention temperature tuning.
    pub(super) fn llama4(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let kv_heads = self
            .opt_int("num_key_value_heads", MAX_DIM)?
            .unwrap_or(heads);
        self.kv_heads_divide(
            ("num_key_value_heads", kv_heads),
            ("num_attention_heads", heads),
        )?;
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            self.opt_int("head_dim", MAX_DIM)?,
            true,
        )?;
        let expert_ffn = self.int("intermediate_size", MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let experts = self.int("num_local_experts", MAX_DIM)?;
        let top_k = self.opt_int("num_experts_per_tok", MAX_DIM)?.unwrap_or(1);
        if top_k > experts {
            return Err(self.err(
                "num_experts_per_tok",
                format!("{top_k} exceeds num_local_experts = {experts}"),
                format!("an integer from 1 to num_local_experts ({experts})"),
            ));
        }
        let moe_layers = self.moe_layers(layers)?;
        let dense_ffn = if moe_layers.iter().all(|&m| m) {
            None
        } else {
            Some(self.int("intermediate_size_mlp", MAX_DIM)?)
        };
        let chunk = self.opt_int("attention_chunk_size", MAX_DIM)?;
        let rope_layers = self.rope_layers(layers)?;
        let (attention_chunk, block_runs) =
            arch::llama4_layout(&moe_layers, &rope_layers, dense_ffn, chunk);
        let spec = ModelSpec {
            qkv_bias: self.flag("attention_bias", false)?,
            tied_embeddings: self.flag("tie_word_embeddings", false)?,
            rope_theta: self.rope_theta("rope_theta", 500_000.0)?,
            norm_eps: self.float("rms_norm_eps", 1e-5)?,
            attention_chunk,
            block_runs,
            ..arch::llama4(
                "",
                (hidden, layers, heads, kv_heads, head_dim),
                expert_ffn,
                vocab,
                MoeSpec {
                    experts,
                    top_k,
                    shared_experts: 1,
                    latent: None,
                },
            )
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("num_attention_heads", heads),
                ("head_dim", head_dim),
                ("intermediate_size", expert_ffn),
                ("intermediate_size_mlp", dense_ffn.unwrap_or(0)),
                ("vocab_size", vocab),
                ("num_local_experts", experts),
            ],
        )?;
        Ok(spec)
    }

    /// Whether each layer is MoE: `moe_layers` (indices), or every
    /// `interleave_moe_layer_step`-th layer counted from step − 1 (transformers' default).
    fn moe_layers(&self, layers: u64) -> Result<Vec<bool>> {
        if let Some(listed) = self.listed_layers("moe_layers", layers)? {
            return Ok(listed);
        }
        // `opt_int` refuses 0 (no layer would be MoE), naming the key.
        let step = self
            .opt_int("interleave_moe_layer_step", MAX_LAYERS)?
            .unwrap_or(1);
        Ok((0..layers).map(|i| (i + 1).is_multiple_of(step)).collect())
    }

    /// Whether each layer applies RoPE (and so attends within its chunk): `no_rope_layers`
    /// (1 = RoPE), or all but every `no_rope_layer_interval`-th layer (default 4).
    fn rope_layers(&self, layers: u64) -> Result<Vec<bool>> {
        let listed = self.per_layer("no_rope_layers", layers, "0 or 1", |v| match v.as_u64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        })?;
        if let Some(rope) = listed {
            return Ok(rope);
        }
        let interval = self
            .opt_int("no_rope_layer_interval", MAX_LAYERS)?
            .unwrap_or(4);
        Ok((0..layers)
            .map(|i| !(i + 1).is_multiple_of(interval))
            .collect())
    }
}
