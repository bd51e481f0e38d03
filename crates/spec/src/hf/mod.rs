//! Hugging Face `config.json` → [`ModelSpec`], with one-line errors naming the bad key.
//! Takes the file's text; does no I/O.
//!
//! This file holds the entry point (`model_from_hf_config`: JSON, `model_type`, dispatch),
//! the accepted and refused types, the limits, the keys every family reads and the model's
//! name. `config` holds the typed accessors and error wording, `size` the parameter-count
//! limit, and `gpt`, `llama`, `deepseek` and `nemotron` one family each. Nothing here knows costs,
//! GPUs or parallelism: a config becomes a `ModelSpec` and nothing more.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, SpecError};
use crate::model::ModelSpec;

mod config;
mod deepseek;
mod gpt;
mod llama;
mod llama4;
mod mosaic;
mod nemotron;
mod size;

#[cfg(test)]
pub(crate) use size::parameter_count_u128;

use config::{quote, show, Config};
/// The `model_type`s this parser understands.
pub const HF_MODEL_TYPES: [&str; 24] = [
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
    "bloom",
    "gemma2",
    "gemma3_text",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "deepseek_v2",
    "deepseek_v3",
    "kimi_k2",
    "nemotron_h",
    "mpt",
    "dbrx",
    "bert",
];

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
    "rope_scaling",
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
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "norm_topk_prob",
    "routed_scaling_factor",
    "ffn_hidden_size",
    "activation",
    "hidden_act",
    "hybrid_override_pattern",
    "mtp_hybrid_override_pattern",
    "mtp_layers_block_type",
    "mtp_use_repeated_layer",
    "keep_mtp_spec_in_bf16",
    "attention_head_dim",
    "mlp_hidden_act",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "mamba_n_groups",
    "conv_kernel",
    "mamba_d_conv",
    "chunk_size",
    "mamba_chunk_size",
    "expand",
    "mamba_expand",
    "use_conv_bias",
    "mamba_conv_bias",
    "use_bias",
    "mamba_proj_bias",
    "text_config",
    "intermediate_size_mlp",
    "interleave_moe_layer_step",
    "moe_layers",
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    "use_qk_norm",
    "d_model",
    "n_heads",
    "n_layers",
    "expansion_ratio",
    "max_seq_len",
    "no_bias",
    "norm_type",
    "learned_pos_emb",
    "attn_config",
    "ffn_config",
    "attn_type",
    "kv_n_heads",
    "rope",
    "ffn_type",
    "moe_num_experts",
    "moe_top_k",
    "ffn_act_fn",
    "n_embed",
    "apply_residual_connection_post_layernorm",
    "moe_shared_expert_intermediate_size",
    "moe_latent_size",
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
///   `alibi = true` (Falcon-RW) gives ALiBi positions.
/// - `bloom`: the LayerNorm after the word embeddings (`2h` parameters, 0.00002 % of
///   BLOOM-176B) is left out; a post-LayerNorm residual is refused.
/// - `sliding_window` of `mistral` and `phi3` bounds every layer's attention; `gemma2`,
///   `gemma3_text` and `gpt_oss` give each layer its kind (`layer_types`, or transformers'
///   default alternation: every other layer local for Gemma 2 and GPT-OSS, five local to
///   one global for Gemma 3), laid out as block runs. Gemma's gated GELU MLP costs as
///   SwiGLU (the same three matrices and elementwise passes); its two extra norms per
///   layer, soft-capping and GPT-OSS's attention sinks (a few parameters per head) are left
///   out. Qwen2's `use_sliding_window` is not read.
/// - `qwen3_moe` layers listed in `mlp_only_layers`, or off the `decoder_sparse_step`, are
///   dense MLPs of `intermediate_size`.
/// - `llama4` (its `text_config`) and `llama4_text`: MoE layers of routed experts and one
///   shared expert interleaved with dense MLPs, chunked attention on the RoPE layers and
///   full attention on the NoPE ones, laid out as block runs (see `llama4`).
/// - `nemotron_h`: one layer per symbol of `hybrid_override_pattern` (`M` Mamba-2 mixer,
///   `*` attention, `-` squared-ReLU MLP), laid out as block runs; MoE layers (`E`) are
///   refused. The attention layers carry no positional parameters.
/// - `mpt` and `dbrx` (MosaicML) read their attention and MLP keys from the nested
///   `attn_config` and `ffn_config`; MPT's ALiBi is `Positions::Alibi`, its `no_bias`
///   norms and DBRX's bias-free LayerNorms count as LayerNorm's two vectors (see `mosaic`).
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
    // Llama 4's config.json describes a multimodal model: the language model's keys sit in
    // `text_config` (transformers' `Llama4Config`), whose errors name it.
    let text_source;
    let text_cfg;
    let cfg = if model_type == "llama4" {
        let allowed = "the language model's config: an object of llama4_text keys";
        match map.get("text_config") {
            Some(Value::Object(text)) => {
                text_source = format!("{source} (text_config)");
                text_cfg = Config {
                    source: &text_source,
                    map: text,
                };
                &text_cfg
            }
            Some(v) => {
                return Err(cfg.err(
                    "text_config",
                    format!("must be an object, got {}", show(v)),
                    allowed,
                ))
            }
            None => {
                return Err(cfg.err("text_config", cfg.missing_problem("text_config"), allowed))
            }
        }
    } else {
        &cfg
    };
    let spec = match model_type {
        "gpt2" => cfg.gpt2()?,
        "llama4" | "llama4_text" => cfg.llama4()?,
        "gpt_neox" => cfg.gpt_neox()?,
        "llama" | "mistral" | "mixtral" | "qwen2" | "qwen3" | "qwen3_moe" => {
            cfg.llama(model_type)?
        }
        "phi3" | "olmo2" | "gemma2" | "gemma3_text" | "gpt_oss" => cfg.llama(model_type)?,
        "falcon" => cfg.falcon()?,
        "bloom" => cfg.bloom()?,
        "deepseek_v2" | "deepseek_v3" | "kimi_k2" => cfg.deepseek()?,
        "nemotron_h" => cfg.nemotron_h()?,
        "mpt" => cfg.mpt()?,
        "dbrx" => cfg.dbrx()?,
        "bert" => cfg.bert()?,
        other => {
            return Err(cfg.err(
                "model_type",
                format!("unsupported model_type `{}`", quote(other)),
                HF_MODEL_TYPES.join(", "),
            ))
        }
    };
    let name = model_name(map, source, model_type);
    let rope_scaling = if spec.positions == crate::model::Positions::Rotary {
        let context = cfg
            .opt_int("max_position_embeddings", 1 << 40)
            .ok()
            .flatten()
            .unwrap_or(spec.max_positions);
        cfg.rope_scaling(context)?
    } else {
        None
    };
    Ok(ModelSpec {
        name,
        rope_scaling,
        ..spec
    })
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
