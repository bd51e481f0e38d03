//! Hugging Face `config.json` → [`ModelSpec`], with one-line errors naming the bad key.
//! Takes the file's text; does no I/O.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, SpecError};
use crate::model::{
    Activation, BlockRun, Family, MlaSpec, ModelSpec, MoeSpec, Norm, Positions, DEFAULT_ROPE_THETA,
};
use crate::presets;

/// The `model_type`s this parser understands.
pub const HF_MODEL_TYPES: [&str; 18] = [
    "gpt2",
    "gpt_neox",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "olmo2",
    "falcon",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "bert",
];

/// `model_type`s recognised but refused, each naming the key whose architecture `ModelSpec`
/// (one block kind repeated, full causal attention of `heads × head_dim` q/k/v/o
/// projections, one MLP kind) cannot hold exactly.
pub const HF_REFUSED_MODEL_TYPES: [&str; 4] =
    ["deepseek_v2", "deepseek_v3", "kimi_k2", "nemotron_h"];

/// Largest accepted dimension (hidden size, heads, vocabulary, …).
const MAX_DIM: u64 = 1_000_000_000;
/// Largest accepted number of transformer blocks (the layer list is materialised).
const MAX_LAYERS: u64 = 100_000;
/// Largest accepted total parameter count: keeps every count `ModelSpec` derives in `u64`.
const MAX_PARAMS: u128 = 1_000_000_000_000_000;

/// Every key some family reads: such keys are never offered as typo candidates.
const READ_KEYS: &[&str] = &[
    "_name_or_path",
    "model_type",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_ctx",
    "n_inner",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "vocab_size",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "num_local_experts",
    "num_experts_per_tok",
    "add_cross_attention",
    "rope_theta",
    "rope_parameters",
    "rotary_emb_base",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "new_decoder_architecture",
    "multi_query",
    "num_kv_heads",
    "parallel_attn",
    "bias",
    "alibi",
    "sliding_window",
    "layer_types",
    "sliding_window_pattern",
    "hidden_activation",
    "decoder_sparse_step",
    "mlp_only_layers",
    "moe_intermediate_size",
    "num_experts",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_routed_experts",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "num_nextn_predict_layers",
    "ffn_hidden_size",
    "activation",
    "hidden_act",
];

/// Parses a Hugging Face `config.json`; `source` (the file name) is used in errors.
///
/// Reads the keys transformers reads for each of [`HF_MODEL_TYPES`]. Size keys are required;
/// the others, when absent or `null`, take transformers' defaults. Where `ModelSpec` cannot
/// say exactly what transformers builds:
/// - `llama`: `attention_bias` sets the q/k/v biases and `mlp_bias` the MLP and attention
///   output biases (transformers ties the `o_proj` bias to `attention_bias`);
/// - `gpt_neox`: `attention_bias` sets the q/k/v biases only (the attention output bias
///   always counts); partial rotary (`rotary_pct`) and the parallel residual carry no
///   parameters and are not represented.
/// - `phi3`: fused `qkv_proj` and `gate_up_proj` hold the same weights as separate ones;
///   partial rotary (`partial_rotary_factor`) and RoPE scaling carry no parameters.
/// - `olmo2`: its norms sit after attention and MLP (not before) and it RMS-normalises q and
///   k over their full width; those `(heads + kv_heads) × head_dim` weights per layer
///   (0.004 % of OLMo-2 7B) are left out of the count and the time, as for Qwen3.
/// - `falcon`: the parallel attention/MLP block of Falcon-7B has one LayerNorm, counted as
///   the two of a sequential block (`2h` parameters per layer too many, 0.004 % of 7B);
///   `alibi = true` is refused (ALiBi positions are not expressible).
/// - `sliding_window` of `mistral` and `phi3` bounds every layer's attention; `gemma2`,
///   `gemma3_text` and `gpt_oss` give each layer its kind (`layer_types`, or transformers'
///   default alternation: every other layer local for Gemma 2 and GPT-OSS, five local to
///   one global for Gemma 3), laid out as block runs. Gemma's gated GELU MLP costs as
///   SwiGLU (the same three matrices and elementwise passes); its two extra norms per
///   layer, soft-capping and GPT-OSS's attention sinks (a few parameters per head) are left
///   out. Qwen2's `use_sliding_window` is not read.
/// - `qwen3_moe` layers listed in `mlp_only_layers`, or off the `decoder_sparse_step`, are
///   dense MLPs of `intermediate_size`.
///
/// Dimensions above 10^9, more than 10^5 layers, or more than 10^15 parameters in all are
/// rejected, so that every count `ModelSpec` derives fits in `u64`.
pub fn model_from_hf_config(text: &str, source: &str) -> Result<ModelSpec> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        SpecError::new(
            source,
            "(json)",
            format!("invalid JSON: {e}"),
            "a JSON object, as in a Hugging Face config.json",
        )
    })?;
    let Value::Object(map) = &doc else {
        return Err(SpecError::new(
            source,
            "(json)",
            format!(
                "expected a JSON object at the top level, found {}",
                show(&doc)
            ),
            "a JSON object, as in a Hugging Face config.json",
        ));
    };
    let cfg = Config { source, map };
    let model_type = match map.get("model_type") {
        Some(Value::String(s)) => s.as_str(),
        Some(v) => {
            return Err(cfg.err(
                "model_type",
                format!("must be a string, got {}", show(v)),
                HF_MODEL_TYPES.join(", "),
            ))
        }
        None => {
            return Err(cfg.err(
                "model_type",
                cfg.missing_problem("model_type"),
                HF_MODEL_TYPES.join(", "),
            ))
        }
    };
    let spec = match model_type {
        "gpt2" => cfg.gpt2()?,
        "gpt_neox" => cfg.gpt_neox()?,
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen3" | "qwen3_moe" => {
            cfg.llama(model_type)?
        }
        "phi3" | "olmo2" | "gemma2" | "gemma3_text" | "gpt_oss" => cfg.llama(model_type)?,
        "falcon" => cfg.falcon()?,
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => cfg.deepseek()?,
        "bert" => cfg.bert()?,
        refused if HF_REFUSED_MODEL_TYPES.contains(&refused) => return Err(cfg.refusal(refused)),
        other => {
            return Err(cfg.err(
                "model_type",
                format!("unsupported model_type `{}`", quote(other)),
                HF_MODEL_TYPES.join(", "),
            ))
        }
    };
    let name = model_name(map, source, model_type);
    Ok(ModelSpec { name, ..spec })
}

/// The parsed document and its source, with typed accessors that fail naming the key.
struct Config<'a> {
    source: &'a str,
    map: &'a Map<String, Value>,
}

impl Config<'_> {
    fn err(
        &self,
        field: &str,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> SpecError {
        SpecError::new(self.source, field, problem, allowed)
    }

    /// The value of `key`; an explicit `null` counts as absent.
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// "missing", with the closest unknown key within edit distance 2 when there is one.
    fn missing_problem(&self, key: &str) -> String {
        let hint = self
            .map
            .keys()
            .filter(|k| !READ_KEYS.contains(&k.as_str()))
            .filter_map(|k| edit_distance_at_most(k, key, 2).map(|d| (d, k)))
            .min_by_key(|&(d, _)| d);
        match hint {
            Some((_, k)) => format!("missing (found `{}` — a typo?)", quote(k)),
            None => "missing".to_string(),
        }
    }

    /// A required integer in `1..=max`.
    fn int(&self, key: &str, max: u64) -> Result<u64> {
        match self.get(key) {
            Some(v) => self.check_int(key, v, max),
            None => Err(self.err(key, self.missing_problem(key), int_allowed(max))),
        }
    }

    /// An optional integer in `1..=max` (absent or `null` → `None`).
    fn opt_int(&self, key: &str, max: u64) -> Result<Option<u64>> {
        self.get(key)
            .map(|v| self.check_int(key, v, max))
            .transpose()
    }

    fn check_int(&self, key: &str, v: &Value, max: u64) -> Result<u64> {
        let problem = match v {
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(0), _) => "must be a positive integer, got 0".to_string(),
                (Some(u), _) if u > max => format!("is too large: {u}"),
                (Some(u), _) => return Ok(u),
                (None, Some(i)) => format!("must be a positive integer, got {i}"),
                (None, None) => format!("must be an integer, got {n}"),
            },
            other => format!("must be a positive integer, got {}", show(other)),
        };
        Err(self.err(key, problem, int_allowed(max)))
    }

    /// An optional boolean with its default.
    fn flag(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(
                key,
                format!("must be a boolean, got {}", show(v)),
                "true, false",
            )),
        }
    }

    /// Cross-attention blocks (encoder–decoder use) have no place in `ModelSpec`.
    fn no_cross_attention(&self) -> Result<()> {
        if self.flag("add_cross_attention", false)? {
            return Err(self.err(
                "add_cross_attention",
                "cross-attention layers are not supported",
                "false",
            ));
        }
        Ok(())
    }

    /// `head_dim` for `heads` heads: `explicit`, or `hidden / heads`, which must divide.
    /// `reads_head_dim`: whether the family accepts a `head_dim` key (for the hint).
    fn head_dim(
        &self,
        (heads_key, heads): (&str, u64),
        (hidden_key, hidden): (&str, u64),
        explicit: Option<u64>,
        reads_head_dim: bool,
    ) -> Result<u64> {
        if let Some(d) = explicit {
            return Ok(d);
        }
        let d = hidden / heads;
        if d * heads != hidden {
            let or = if reads_head_dim {
                ", or an explicit head_dim"
            } else {
                ""
            };
            return Err(self.err(
                heads_key,
                format!("{heads} heads do not divide {hidden_key} = {hidden}"),
                format!("a divisor of {hidden_key} ({hidden}){or}"),
            ));
        }
        Ok(d)
    }

    /// An optional positive finite number with its default.
    fn float(&self, key: &str, default: f64) -> Result<f64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => self.check_float(key, v),
        }
    }

    fn check_float(&self, key: &str, v: &Value) -> Result<f64> {
        match v.as_f64() {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.err(
                key,
                format!("must be a positive number, got {}", show(v)),
                "a number > 0",
            )),
        }
    }

    /// RoPE θ: `key` at the top level, else `rope_parameters.rope_theta` (the layout of
    /// transformers 5), else `default`.
    fn rope_theta(&self, key: &str, default: f64) -> Result<f64> {
        if self.get(key).is_some() {
            return self.float(key, default);
        }
        match self.get("rope_parameters") {
            Some(Value::Object(m)) => match m.get("rope_theta").filter(|v| !v.is_null()) {
                Some(v) => self.check_float("rope_parameters.rope_theta", v),
                None => Ok(default),
            },
            _ => Ok(default),
        }
    }

    /// The refusal of a recognised `model_type` that `ModelSpec` cannot express exactly,
    /// naming the first key (present in the file, or the one transformers reads) that
    /// carries the missing architecture.
    fn refusal(&self, model_type: &str) -> SpecError {
        // nemotron_h, the one refused type.
        self.err(
            "hybrid_override_pattern",
            format!(
                "model_type `{model_type}` mixes Mamba-2 mixer, attention and MLP layers; \
                 plait's layers are all transformer blocks (attention + MLP)"
            ),
            "a model made of transformer blocks only (Mamba-2 layers are not expressible \
             yet)",
        )
    }

    /// Falcon (`FalconForCausalLM`): rotary positions (ALiBi refused), LayerNorm, GELU 4h
    /// MLP, multi-query (Falcon-7B) or grouped-query attention (`new_decoder_architecture`),
    /// biases all on or all off (`bias`), tied head.
    fn falcon(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        if self.flag("alibi", false)? {
            return Err(self.err(
                "alibi",
                "ALiBi attention biases are not expressible (positions are learned or rotary)",
                "false (rotary positions)",
            ));
        }
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
        if heads % kv_heads > 0 {
            return Err(self.err(
                "num_kv_heads",
                format!("{kv_heads} does not divide num_attention_heads = {heads}"),
                format!("a divisor of num_attention_heads ({heads})"),
            ));
        }
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
            positions: Positions::Rotary,
            qkv_bias: bias,
            linear_bias: bias,
            tied_embeddings: tied,
            rope_theta: self.rope_theta("rope_theta", DEFAULT_ROPE_THETA)?,
            norm_eps: self.float("layer_norm_epsilon", 1e-5)?,
            attention_window: None,
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            ..presets::gpt("", hidden, layers, heads, vocab, 0)
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

    /// Rejects a model whose parameter count leaves the range `ModelSpec` can count in,
    /// naming the largest of the dimensions read.
    fn check_size(&self, spec: &ModelSpec, dims: &[(&str, u64)]) -> Result<()> {
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

    fn gpt2(&self) -> Result<ModelSpec> {
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
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            ..presets::gpt("", hidden, layers, heads, vocab, positions)
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

    fn gpt_neox(&self) -> Result<ModelSpec> {
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
            attention_window: None,
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            ..presets::gpt("", hidden, layers, heads, vocab, 0)
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

    /// `llama`, `mistral`, `qwen2` (dense) and `mixtral` (MoE).
    fn llama(&self, model_type: &str) -> Result<ModelSpec> {
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
            let top_k = self.int("num_experts_per_tok", MAX_DIM)?;
            if top_k > experts {
                return Err(self.err(
                    "num_experts_per_tok",
                    format!("{top_k} exceeds {experts_key} = {experts}"),
                    format!("an integer from 1 to {experts_key} ({experts})"),
                ));
            }
            Some(MoeSpec {
                experts,
                top_k,
                shared_experts: 0,
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
        if heads % kv_heads > 0 {
            return Err(self.err(
                "num_key_value_heads",
                format!("{kv_heads} does not divide num_attention_heads = {heads}"),
                format!("a divisor of num_attention_heads ({heads})"),
            ));
        }
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
            ..presets::llama("", hidden, layers, heads, kv_heads, ffn, vocab, moe)
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
            let types: Vec<bool> = match self.get("layer_types") {
                Some(Value::Array(a)) => {
                    if a.len() as u64 != layers {
                        return Err(self.err(
                            "layer_types",
                            format!("lists {} layers, num_hidden_layers is {layers}", a.len()),
                            "one entry per layer",
                        ));
                    }
                    a.iter()
                        .map(|v| match v.as_str() {
                            Some("sliding_attention") => Ok(true),
                            Some("full_attention") => Ok(false),
                            _ => Err(self.err(
                                "layer_types",
                                format!("{} is not a layer type", show(v)),
                                "\"sliding_attention\", \"full_attention\"",
                            )),
                        })
                        .collect::<Result<_>>()?
                }
                Some(v) => {
                    return Err(self.err(
                        "layer_types",
                        format!("must be a list, got {}", show(v)),
                        "a list of \"sliding_attention\" / \"full_attention\", one per layer",
                    ))
                }
                None => (0..layers)
                    .map(|i| !(i + 1).is_multiple_of(local))
                    .collect(),
            };
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
            let dense: Vec<u64> = match self.get("mlp_only_layers") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|v| match v.as_u64() {
                        Some(i) if i < layers => Ok(i),
                        _ => Err(self.err(
                            "mlp_only_layers",
                            format!("{} is not a layer index", show(v)),
                            format!("integers from 0 to {}", layers - 1),
                        )),
                    })
                    .collect::<Result<_>>()?,
                Some(v) => {
                    return Err(self.err(
                        "mlp_only_layers",
                        format!("must be a list, got {}", show(v)),
                        "a list of layer indices",
                    ))
                }
            };
            let needs_dense = step != 1 || !dense.is_empty();
            if needs_dense {
                let f = self.int("intermediate_size", MAX_DIM)?;
                for (i, k) in kinds.iter_mut().enumerate() {
                    let i = i as u64;
                    if dense.contains(&i) || !(i + 1).is_multiple_of(step) {
                        k.1 = Some(f);
                    }
                }
            }
        }
        // Run-length encode; one run of default blocks means a uniform model.
        let mut runs: Vec<BlockRun> = Vec::new();
        for (window, dense_ffn) in kinds {
            match runs.last_mut() {
                Some(r) if r.window == window && r.dense_ffn == dense_ffn => r.count += 1,
                _ => runs.push(BlockRun {
                    count: 1,
                    window,
                    dense_ffn,
                }),
            }
        }
        if runs.len() == 1 && runs[0].dense_ffn.is_none() {
            return Ok((runs[0].window, Vec::new()));
        }
        Ok((None, runs))
    }

    /// DeepSeek-V2/V3 and Kimi K2 (DeepSeek-V3's architecture): multi-head latent attention,
    /// `first_k_dense_replace` dense layers of `intermediate_size`, then (every
    /// `moe_layer_freq`-th layer) MoE layers of `n_routed_experts` routed and
    /// `n_shared_experts` shared experts of `moe_intermediate_size` (transformers'
    /// `DeepseekV3DecoderLayer`). `num_nextn_predict_layers` multi-token-prediction
    /// modules train beside it (NeMo's DeepSeek-V3 recipe keeps `mtp_num_layers = 1`), though
    /// transformers' model has none.
    fn deepseek(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let mla = MlaSpec {
            q_lora_rank: self.opt_int("q_lora_rank", MAX_DIM)?.unwrap_or(0),
            kv_lora_rank: self.int("kv_lora_rank", MAX_DIM)?,
            qk_nope_head_dim: self.int("qk_nope_head_dim", MAX_DIM)?,
            qk_rope_head_dim: self.int("qk_rope_head_dim", MAX_DIM)?,
            v_head_dim: self.int("v_head_dim", MAX_DIM)?,
        };
        let dense_ffn = self.int("intermediate_size", MAX_DIM)?;
        let expert_ffn = self.int("moe_intermediate_size", MAX_DIM)?;
        let experts = self.int("n_routed_experts", MAX_DIM)?;
        let top_k = self.int("num_experts_per_tok", MAX_DIM)?;
        if top_k > experts {
            return Err(self.err(
                "num_experts_per_tok",
                format!("{top_k} exceeds n_routed_experts = {experts}"),
                format!("an integer from 1 to n_routed_experts ({experts})"),
            ));
        }
        let shared = match self.get("n_shared_experts") {
            None => 0,
            Some(v) => self.check_int("n_shared_experts", v, MAX_DIM)?,
        };
        let first_dense = match self.get("first_k_dense_replace") {
            None => 0,
            Some(Value::Number(n)) if n.as_u64() == Some(0) => 0,
            Some(v) => self.check_int("first_k_dense_replace", v, layers)?,
        };
        let freq = self.opt_int("moe_layer_freq", MAX_LAYERS)?.unwrap_or(1);
        let vocab = self.int("vocab_size", MAX_DIM)?;
        let moe = MoeSpec {
            experts,
            top_k,
            shared_experts: shared,
        };
        let mut runs: Vec<BlockRun> = Vec::new();
        for i in 0..layers {
            let dense = i < first_dense || !i.is_multiple_of(freq);
            let dense_ffn = dense.then_some(dense_ffn);
            match runs.last_mut() {
                Some(r) if r.dense_ffn == dense_ffn => r.count += 1,
                _ => runs.push(BlockRun {
                    count: 1,
                    window: None,
                    dense_ffn,
                }),
            }
        }
        if runs.len() == 1 && runs[0].dense_ffn.is_none() {
            runs.clear();
        }
        let spec = ModelSpec {
            head_dim: mla.v_head_dim,
            tied_embeddings: self.flag("tie_word_embeddings", false)?,
            rope_theta: self.rope_theta("rope_theta", DEFAULT_ROPE_THETA)?,
            norm_eps: self.float("rms_norm_eps", 1e-6)?,
            mla: Some(mla),
            mtp_layers: match self.get("num_nextn_predict_layers") {
                None => 0,
                Some(Value::Number(n)) if n.as_u64() == Some(0) => 0,
                Some(v) => self.check_int("num_nextn_predict_layers", v, MAX_LAYERS)?,
            },
            block_runs: runs,
            ..presets::llama(
                "",
                hidden,
                layers,
                heads,
                heads,
                expert_ffn,
                vocab,
                Some(moe),
            )
        };
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("num_attention_heads", heads),
                ("kv_lora_rank", mla.kv_lora_rank),
                ("moe_intermediate_size", expert_ffn),
                ("intermediate_size", dense_ffn),
                ("vocab_size", vocab),
                ("n_routed_experts", experts),
            ],
        )?;
        Ok(spec)
    }

    fn bert(&self) -> Result<ModelSpec> {
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
            block_runs: Vec::new(),
            mla: None,
            mtp_layers: 0,
            ..presets::bert("", hidden, layers, heads, vocab, positions)
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

fn int_allowed(max: u64) -> String {
    format!("a positive integer ≤ {max}")
}

/// The model's name: `_name_or_path`, else the directory holding a `config.json` or the
/// file's stem, else the model type.
fn model_name(map: &Map<String, Value>, source: &str, model_type: &str) -> String {
    if let Some(Value::String(s)) = map.get("_name_or_path") {
        if !s.trim().is_empty() {
            return s.trim().to_string();
        }
    }
    let path = Path::new(source);
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let name = if stem == "config" {
        path.parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or("")
    } else {
        stem
    };
    if name.is_empty() {
        model_type.to_string()
    } else {
        name.to_string()
    }
}

/// A JSON value for an error message: short, on one line.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string \"{}\"", quote(s)),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// `s` with control characters escaped, cut to 40 characters.
fn quote(s: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = s.chars().take(MAX).flat_map(char::escape_debug).collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

/// Levenshtein distance between `a` and `b` if it is at most `max` (in characters).
fn edit_distance_at_most(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[b.len()];
    (d <= max).then_some(d)
}

/// `ModelSpec::parameter_count` in `u128`, which cannot overflow for dimensions ≤ 10^9
/// and layers ≤ 10^5 (the largest product is below 10^33).
fn parameter_count_u128(s: &ModelSpec) -> u128 {
    let w = |x: u64| u128::from(x);
    let (h, f, v) = (w(s.hidden), w(s.ffn_hidden), w(s.vocab));
    let q = w(s.heads) * w(s.head_dim);
    let kv = w(s.kv_heads) * w(s.head_dim);
    let norm = match s.norm {
        Norm::LayerNorm => 2 * h,
        Norm::RmsNorm => h,
    };
    let mats = match s.activation {
        Activation::Gelu => 2,
        Activation::SwiGlu => 3,
    };
    let attn = h * (q + 2 * kv)
        + if s.qkv_bias { q + 2 * kv } else { 0 }
        + q * h
        + if s.linear_bias { h } else { 0 };
    let one_mlp = mats * h * f + if s.linear_bias { (mats - 1) * f + h } else { 0 };
    let mlp = match s.moe {
        None => one_mlp,
        Some(m) => w(m.experts) * (one_mlp + h),
    };
    let block = attn + mlp + 2 * norm;
    let pos = match s.positions {
        Positions::Learned => w(s.max_positions),
        Positions::Rotary => 0,
    };
    let bert = s.family == Family::Bert;
    let embedding = (v + pos + w(s.type_vocab)) * h + if bert { norm } else { 0 };
    let head = if bert {
        h * h + h
    } else {
        norm + if s.tied_embeddings { 0 } else { v * h }
    };
    embedding + w(s.layers) * block + head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance() {
        assert_eq!(
            edit_distance_at_most("num_hidden_layer", "num_hidden_layers", 2),
            Some(1)
        );
        assert_eq!(edit_distance_at_most("n_heads", "n_head", 2), Some(1));
        assert_eq!(edit_distance_at_most("hiden_szie", "hidden_size", 2), None);
        assert_eq!(
            edit_distance_at_most("hidden_szie", "hidden_size", 2),
            Some(2)
        );
        assert_eq!(edit_distance_at_most("", "abc", 2), None);
        assert_eq!(edit_distance_at_most("abc", "abc", 2), Some(0));
    }

    #[test]
    fn u128_count_agrees_with_model_spec() {
        for name in crate::presets::model_preset_names() {
            let m = crate::presets::model_preset(name).unwrap();
            assert_eq!(
                parameter_count_u128(&m),
                u128::from(m.parameter_count()),
                "{name}"
            );
        }
    }

    #[test]
    fn name_falls_back_to_directory_stem_or_model_type() {
        let empty = Map::new();
        assert_eq!(
            model_name(&empty, "models/llama-7b/config.json", "llama"),
            "llama-7b"
        );
        assert_eq!(model_name(&empty, "gpt2-xl.json", "gpt2"), "gpt2-xl");
        assert_eq!(model_name(&empty, "config.json", "bert"), "bert");
        assert_eq!(model_name(&empty, "", "bert"), "bert");
        let mut named = Map::new();
        named.insert("_name_or_path".into(), Value::from("org/model"));
        assert_eq!(model_name(&named, "config.json", "llama"), "org/model");
        named.insert("_name_or_path".into(), Value::from("  "));
        assert_eq!(model_name(&named, "x/config.json", "llama"), "x");
    }

    #[test]
    fn quote_escapes_and_truncates() {
        assert_eq!(quote("a\nb"), "a\\nb");
        assert_eq!(quote(&"x".repeat(50)), format!("{}…", "x".repeat(40)));
    }
}
