//! The LLaMA-style families (RMSNorm, SwiGLU or gated GELU, rotary): llama, mistral,
//! mixtral, qwen2, qwen3, qwen3_moe, phi3, olmo2, gemma2, gemma3_text and gpt_oss, with each
//! layer's kind (sliding-window or full attention, dense MLPs among MoE ones) as block runs.
//!
//! Only which keys these families read and their transformers defaults live here; the
//! accessors and error wording are `config`'s, the size limit `size`'s.

use super::config::{int_allowed, show, Config};
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{BlockRun, ModelSpec, MoeSpec, DEFAULT_ROPE_THETA};

impl Config<'_> {
    /// `llama`, `mistral`, `qwen2` (dense) and `mixtral` (MoE).
    pub(super) fn llama(&self, model_type: &str) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let kv_heads = self
            .opt_int("num_key_value_heads", MAX_DIM)?
            .unwrap_or(heads);
        // Qwen3-MoE's experts have their own width; its `intermediate_size` is that of the
        // dense MLP layers it may mix in, which must be absent here.
        let ffn_key = if model_type == "qwen3_moe" {
            "moe_intermediate_size"
        } else {
            "intermediate_size"
        };
        let ffn = self.int(ffn_key, MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let explicit_head_dim = self.opt_int("head_dim", MAX_DIM)?;
        let gemma = matches!(model_type, "gemma2" | "gemma3_text");
        // Gemma ties its embeddings by default (transformers' Gemma2Config/Gemma3TextConfig).
        let tied = self.flag("tie_word_embeddings", gemma)?;
        if gemma {
            if let Some(a) = self.get("hidden_activation") {
                if !matches!(a.as_str(), Some("gelu_pytorch_tanh" | "gelu")) {
                    return Err(self.err(
                        "hidden_activation",
                        format!("{} is not expressible", show(a)),
                        "\"gelu_pytorch_tanh\" (Gemma's gated GELU MLP)",
                    ));
                }
            }
        }
        let (qkv_bias, linear_bias) = match model_type {
            // Qwen3 (dense and MoE): `attention_bias` on q/k/v/o, RMSNorm on q and k per head
            // (2 × head_dim parameters per layer, left out of the count and the time).
            "qwen3" | "qwen3_moe" => {
                let b = self.flag("attention_bias", false)?;
                (b, false)
            }
            "llama" => (
                self.flag("attention_bias", false)?,
                self.flag("mlp_bias", false)?,
            ),
            "qwen2" => (true, false),
            // OLMo 2: no biases; RMSNorm on q and k over their full width (left out, as for
            // Qwen3).
            "olmo2" => (self.flag("attention_bias", false)?, false),
            // GPT-OSS: biases on q/k/v/o (`attention_bias` defaults to true) and on every
            // expert's linears and the router.
            "gpt_oss" => {
                let b = self.flag("attention_bias", true)?;
                (b, b)
            }
            "gemma2" | "gemma3_text" => (self.flag("attention_bias", false)?, false),
            _ => (false, false),
        };
        if model_type == "phi3" {
            if let Some(a) = self.get("hidden_act") {
                if a.as_str() != Some("silu") {
                    return Err(self.err(
                        "hidden_act",
                        format!("{} is not expressible", show(a)),
                        "\"silu\" (Phi-3's SwiGLU MLP)",
                    ));
                }
            }
        }
        // transformers' defaults per config class.
        let (theta_default, eps_default) = match model_type {
            "mixtral" => (1e6, 1e-5),
            "phi3" => (DEFAULT_ROPE_THETA, 1e-5),
            "olmo2" => (DEFAULT_ROPE_THETA, 1e-5),
            "gpt_oss" => (150_000.0, 1e-5),
            "gemma3_text" => (1e6, 1e-6),
            _ => (DEFAULT_ROPE_THETA, 1e-6),
        };
        let rope_theta = self.rope_theta("rope_theta", theta_default)?;
        let norm_eps = self.float("rms_norm_eps", eps_default)?;
        let moe = if matches!(model_type, "mixtral" | "qwen3_moe" | "gpt_oss") {
            let experts_key = if model_type == "qwen3_moe" {
                "num_experts"
            } else {
                "num_local_experts"
            };
            let experts = self.int(experts_key, MAX_DIM)?;
            let top_k = self.routed_top_k(experts_key, experts)?;
            Some(MoeSpec {
                experts,
                top_k,
                shared_experts: 0,
                latent: None,
            })
        } else {
            None
        };
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            explicit_head_dim,
            true,
        )?;
        self.kv_heads_divide(
            ("num_key_value_heads", kv_heads),
            ("num_attention_heads", heads),
        )?;
        let (attention_window, block_runs) = self.layer_kinds(model_type, layers)?;
        let spec = ModelSpec {
            head_dim,
            qkv_bias,
            linear_bias,
            tied_embeddings: tied,
            rope_theta,
            norm_eps,
            attention_window,
            block_runs,
            // Qwen3's `q_norm`/`k_norm` are RMSNorms over head_dim (transformers'
            // `Qwen3Attention`); OLMo 2's over the projections' full width
            // (`Olmo2Attention`).
            qk_norm: match model_type {
                "qwen3" | "qwen3_moe" => Some(crate::model::QkNorm::PerHead),
                "olmo2" => Some(crate::model::QkNorm::FullWidth),
                _ => None,
            },
            ..arch::llama("", hidden, layers, heads, kv_heads, ffn, vocab, moe)
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("num_attention_heads", heads),
                ("head_dim", head_dim),
                ("intermediate_size", ffn),
                ("vocab_size", vocab),
                ("num_local_experts", moe.map_or(0, |m| m.experts)),
            ],
        )?;
        Ok(spec)
    }

    /// Qwen3-MoE may make some layers dense (`decoder_sparse_step` > 1, `mlp_only_layers`);
    /// layer lists are uniform here, so such a config is refused with the key named.
    /// Each layer's attention span and MLP, as transformers builds them: the uniform window
    /// of Mistral/Phi-3, Gemma's and GPT-OSS's local/global `layer_types` (or their default
    /// alternation), Qwen3-MoE's dense layers (`mlp_only_layers`, `decoder_sparse_step`).
    /// Returns the window of every layer (uniform models) or the block runs.
    fn layer_kinds(&self, model_type: &str, layers: u64) -> Result<(Option<u64>, Vec<BlockRun>)> {
        let window = self.opt_int("sliding_window", MAX_DIM)?;
        if matches!(model_type, "mistral" | "phi3") {
            return Ok((window, Vec::new()));
        }
        let mut kinds: Vec<(Option<u64>, Option<u64>)> = vec![(None, None); layers as usize];
        if matches!(model_type, "gemma2" | "gemma3_text" | "gpt_oss") {
            let local = match model_type {
                // transformers: Gemma 3 `sliding_window_pattern` (default 6: five local
                // layers, then one global); Gemma 2 and GPT-OSS alternate, local first.
                "gemma3_text" => self
                    .opt_int("sliding_window_pattern", MAX_LAYERS)?
                    .unwrap_or(6),
                _ => 2,
            };
            let listed = self.per_layer(
                "layer_types",
                layers,
                "\"sliding_attention\" or \"full_attention\"",
                |v| match v.as_str() {
                    Some("sliding_attention") => Some(true),
                    Some("full_attention") => Some(false),
                    _ => None,
                },
            )?;
            let types: Vec<bool> = listed.unwrap_or_else(|| {
                (0..layers)
                    .map(|i| !(i + 1).is_multiple_of(local))
                    .collect()
            });
            if types.iter().any(|&t| t) {
                let w = window.ok_or_else(|| {
                    self.err(
                        "sliding_window",
                        "missing, but layers use sliding-window attention",
                        int_allowed(MAX_DIM),
                    )
                })?;
                for (k, &sliding) in kinds.iter_mut().zip(&types) {
                    if sliding {
                        k.0 = Some(w);
                    }
                }
            }
        }
        if model_type == "qwen3_moe" {
            // transformers' Qwen3MoeDecoderLayer: layer i is sparse unless listed in
            // `mlp_only_layers`, and only when (i + 1) is a multiple of `decoder_sparse_step`.
            let step = self
                .opt_int("decoder_sparse_step", MAX_LAYERS)?
                .unwrap_or(1);
            let dense = self
                .listed_layers("mlp_only_layers", layers)?
                .unwrap_or_else(|| vec![false; layers as usize]);
            let needs_dense = step != 1 || dense.contains(&true);
            if needs_dense {
                let f = self.int("intermediate_size", MAX_DIM)?;
                for (i, (k, &listed)) in kinds.iter_mut().zip(&dense).enumerate() {
                    if listed || !(i as u64 + 1).is_multiple_of(step) {
                        k.1 = Some(f);
                    }
                }
            }
        }
        let runs = crate::model::runs_of(kinds.into_iter().map(|(window, dense_ffn)| BlockRun {
            kind: crate::model::BlockKind::Transformer,
            count: 1,
            window,
            dense_ffn,
            chunk: None,
        }));
        if runs.len() == 1 && runs[0].dense_ffn.is_none() {
            return Ok((runs[0].window, Vec::new()));
        }
        Ok((None, runs))
    }
}
