//! The LayerNorm/GELU families: Falcon, GPT-2, GPT-NeoX, BLOOM and BERT, each read into a
//! `ModelSpec` built on `arch::gpt` or `arch::bert`.
//!
//! Only which keys these families read and their transformers defaults live here; the
//! accessors and error wording are `config`'s, the size limit `size`'s.

use serde_json::Value;

use super::config::{int_allowed, show, Config};
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{ModelSpec, Positions, DEFAULT_ROPE_THETA};

/// BLOOM's vocabulary when the file omits it (transformers `BloomConfig`: 250,880).
const BLOOM_VOCAB: u64 = 250_880;

impl Config<'_> {
    /// Falcon (`FalconForCausalLM`): rotary positions or ALiBi (`alibi`), LayerNorm, GELU 4h
    /// MLP, multi-query (Falcon-7B) or grouped-query attention (`new_decoder_architecture`),
    /// biases all on or all off (`bias`), tied head.
    pub(super) fn falcon(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        // Falcon-RW's ALiBi (`alibi`), else rotary positions.
        let positions = if self.flag("alibi", false)? {
            Positions::Alibi
        } else {
            Positions::Rotary
        };
        match self.get("activation") {
            None => {}
            Some(Value::String(a)) if a == "gelu" => {}
            Some(v) => {
                return Err(self.err(
                    "activation",
                    format!("{} is not expressible", show(v)),
                    "\"gelu\" (Falcon's MLP)",
                ))
            }
        }
        let new_arch = self.flag("new_decoder_architecture", false)?;
        let kv_heads = if new_arch {
            self.opt_int("num_kv_heads", MAX_DIM)?.unwrap_or(heads)
        } else if self.flag("multi_query", true)? {
            1
        } else {
            heads
        };
        self.kv_heads_divide(("num_kv_heads", kv_heads), ("num_attention_heads", heads))?;
        let ffn = self
            .opt_int("ffn_hidden_size", MAX_DIM)?
            .unwrap_or(4 * hidden);
        self.flag("parallel_attn", true)?;
        let bias = self.flag("bias", false)?;
        let tied = self.flag("tie_word_embeddings", true)?;
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            None,
            false,
        )?;
        let spec = ModelSpec {
            kv_heads,
            head_dim,
            ffn_hidden: ffn,
            positions,
            qkv_bias: bias,
            linear_bias: bias,
            tied_embeddings: tied,
            rope_theta: self.rope_theta("rope_theta", DEFAULT_ROPE_THETA)?,
            norm_eps: self.float("layer_norm_epsilon", 1e-5)?,
            ..arch::gpt("", hidden, layers, heads, vocab, 0)
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("ffn_hidden_size", ffn),
                ("vocab_size", vocab),
            ],
        )?;
        Ok(spec)
    }

    pub(super) fn gpt2(&self) -> Result<ModelSpec> {
        self.no_cross_attention()?;
        let hidden = self.int("n_embd", MAX_DIM)?;
        let layers = self.int("n_layer", MAX_LAYERS)?;
        let heads = self.int("n_head", MAX_DIM)?;
        let positions = match self.get("n_positions") {
            Some(_) => self.int("n_positions", MAX_DIM)?,
            None => match self.get("n_ctx") {
                Some(_) => self.int("n_ctx", MAX_DIM)?,
                None => {
                    return Err(self.err(
                        "n_positions",
                        self.missing_problem("n_positions"),
                        format!("{} (or `n_ctx`)", int_allowed(MAX_DIM)),
                    ))
                }
            },
        };
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let inner = self.opt_int("n_inner", MAX_DIM)?;
        let ffn = inner.unwrap_or(4 * hidden);
        let tied = self.flag("tie_word_embeddings", true)?;
        let head_dim = self.head_dim(("n_head", heads), ("n_embd", hidden), None, false)?;
        let spec = ModelSpec {
            head_dim,
            ffn_hidden: ffn,
            tied_embeddings: tied,
            norm_eps: self.float("layer_norm_epsilon", 1e-5)?,
            attention_window: None,
            attention_chunk: None,
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            mtp_pattern: None,
            mtp_shared: false,
            mtp_bf16: false,
            ..arch::gpt("", hidden, layers, heads, vocab, positions)
        };
        self.check_size(
            &spec,
            &[
                ("n_embd", hidden),
                ("n_layer", layers),
                ("vocab_size", vocab),
                ("n_inner", inner.unwrap_or(0)),
                ("n_positions", positions),
            ],
        )?;
        Ok(spec)
    }

    /// BLOOM (`bloom`, transformers `BloomConfig` / `BloomModel`): a GPT block with biases
    /// on every linear, ALiBi instead of position embeddings, an MLP of 4 × hidden
    /// (`BloomMLP`), tied embeddings. `n_layer`/`n_head`/`n_embed` are the released files'
    /// names (`num_hidden_layers`, `num_attention_heads`, `hidden_size` also read). The
    /// LayerNorm after the word embeddings (`word_embeddings_layernorm`, 2 × hidden
    /// parameters) is not modelled.
    pub(super) fn bloom(&self) -> Result<ModelSpec> {
        // The released files' key, or transformers' attribute name for it: the key the file
        // used (for the errors below) and its value.
        let either = |released: &'static str, attribute: &'static str, max: u64| {
            let key = if self.get(released).is_some() {
                released
            } else {
                attribute
            };
            self.int(key, max).map(|v| (key, v))
        };
        let (hidden_key, hidden) = either("n_embed", "hidden_size", MAX_DIM)?;
        let (layers_key, layers) = either("n_layer", "num_hidden_layers", MAX_LAYERS)?;
        let (heads_key, heads) = either("n_head", "num_attention_heads", MAX_DIM)?;
        let vocab = self.opt_int("vocab_size", MAX_DIM)?.unwrap_or(BLOOM_VOCAB);
        if self.flag("apply_residual_connection_post_layernorm", false)? {
            return Err(self.err(
                "apply_residual_connection_post_layernorm",
                "a residual taken after the LayerNorm is not expressible",
                "false (pre-LayerNorm residuals, as BLOOM trained)",
            ));
        }
        let head_dim = self.head_dim((heads_key, heads), (hidden_key, hidden), None, false)?;
        let spec = ModelSpec {
            head_dim,
            ffn_hidden: 4 * hidden,
            positions: Positions::Alibi,
            tied_embeddings: self.flag("tie_word_embeddings", true)?,
            norm_eps: self.float("layer_norm_epsilon", 1e-5)?,
            ..arch::gpt("", hidden, layers, heads, vocab, 0)
        };
        self.check_size(
            &spec,
            &[
                (hidden_key, hidden),
                (layers_key, layers),
                ("vocab_size", vocab),
            ],
        )?;
        Ok(spec)
    }

    pub(super) fn gpt_neox(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let ffn = self.int("intermediate_size", MAX_DIM)?;
        // Read for validation; rotary positions have no table.
        self.int("max_position_embeddings", MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let tied = self.flag("tie_word_embeddings", false)?;
        let attention_bias = self.flag("attention_bias", true)?;
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            None,
            false,
        )?;
        // GPT block with rotary positions and (by default) an untied output matrix.
        let spec = ModelSpec {
            head_dim,
            ffn_hidden: ffn,
            positions: Positions::Rotary,
            qkv_bias: attention_bias,
            tied_embeddings: tied,
            rope_theta: self.float("rotary_emb_base", DEFAULT_ROPE_THETA)?,
            norm_eps: self.float("layer_norm_eps", 1e-5)?,
            ..arch::gpt("", hidden, layers, heads, vocab, 0)
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("intermediate_size", ffn),
                ("vocab_size", vocab),
            ],
        )?;
        Ok(spec)
    }

    pub(super) fn bert(&self) -> Result<ModelSpec> {
        self.no_cross_attention()?;
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let ffn = self.int("intermediate_size", MAX_DIM)?;
        let positions = self.int("max_position_embeddings", MAX_DIM)?;
        let type_vocab = self.int("type_vocab_size", MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            None,
            false,
        )?;
        let spec = ModelSpec {
            head_dim,
            ffn_hidden: ffn,
            type_vocab,
            norm_eps: self.float("layer_norm_eps", 1e-12)?,
            attention_window: None,
            attention_chunk: None,
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            mtp_pattern: None,
            mtp_shared: false,
            mtp_bf16: false,
            ..arch::bert("", hidden, layers, heads, vocab, positions)
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("intermediate_size", ffn),
                ("max_position_embeddings", positions),
                ("type_vocab_size", type_vocab),
                ("vocab_size", vocab),
            ],
        )?;
        Ok(spec)
    }
}
