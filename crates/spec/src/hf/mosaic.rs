//! MosaicML's families: MPT (`mpt`, llm-foundry's `MPTForCausalLM`) and DBRX (`dbrx`,
//! transformers' `DbrxForCausalLM`), whose attention and MLP settings sit in the nested
//! `attn_config` and `ffn_config` objects (errors name the object).
//!
//! Only which keys these families read and their defaults live here; the accessors and
//! error wording are `config`'s, the size limit `size`'s.

use serde_json::{Map, Value};

use super::config::{show, Config};
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{Activation, Family, ModelSpec, MoeSpec, Norm, Positions, DEFAULT_ROPE_THETA};

/// MPT's defaults (llm-foundry `MPTConfig`): vocabulary, context, MLP width over d_model.
const MPT_VOCAB: u64 = 50368;
const MPT_MAX_SEQ_LEN: u64 = 2048;
const MPT_EXPANSION_RATIO: f64 = 4.0;
/// DBRX's defaults (transformers `DbrxFFNConfig`, `DbrxAttentionConfig`, `DbrxConfig`).
const DBRX_FFN: u64 = 3584;
const DBRX_EXPERTS: u64 = 4;
const DBRX_TOP_K: u64 = 1;
const DBRX_KV_HEADS: u64 = 1;
const DBRX_VOCAB: u64 = 32000;
const DBRX_MAX_SEQ_LEN: u64 = 2048;

impl Config<'_> {
    /// The nested object `key`, if present (`null` counts as absent).
    fn object(&self, key: &str) -> Result<Option<&Map<String, Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(v) => Err(self.err(
                key,
                format!("must be an object, got {}", show(v)),
                format!("an object of {key} keys"),
            )),
        }
    }

    /// A string among `allowed`, or `default` when absent.
    fn choice<'v>(&'v self, key: &str, default: &'v str, allowed: &[&str]) -> Result<&'v str> {
        match self.get(key) {
            None => Ok(default),
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(s.as_str()),
            Some(v) => Err(self.err(
                key,
                format!("{} is not expressible", show(v)),
                allowed.join(", "),
            )),
        }
    }

    /// The part of a MosaicML config both families share — d_model, n_layers, n_heads,
    /// vocabulary and context (with the family's defaults) and the nested `attn_config` and
    /// `ffn_config`, read with sources that name them — handed to `build`.
    fn mosaic<R>(
        &self,
        (vocab_default, max_seq_default): (u64, u64),
        build: impl FnOnce(Mosaic<'_>) -> Result<R>,
    ) -> Result<R> {
        let sizes = Sizes {
            hidden: self.int("d_model", MAX_DIM)?,
            layers: self.int("n_layers", MAX_LAYERS)?,
            heads: self.int("n_heads", MAX_DIM)?,
            vocab: self
                .opt_int("vocab_size", MAX_DIM)?
                .unwrap_or(vocab_default),
            max_seq: self
                .opt_int("max_seq_len", MAX_DIM)?
                .unwrap_or(max_seq_default),
        };
        let empty = Map::new();
        let (attn_source, ffn_source) = (
            format!("{} (attn_config)", self.source),
            format!("{} (ffn_config)", self.source),
        );
        build(Mosaic {
            sizes,
            attn: Config {
                source: &attn_source,
                map: self.object("attn_config")?.unwrap_or(&empty),
            },
            ffn: Config {
                source: &ffn_source,
                map: self.object("ffn_config")?.unwrap_or(&empty),
            },
        })
    }

    /// MPT: pre-LayerNorm blocks (`norm_type`), multi-head, grouped- or multi-query attention
    /// (`attn_config.attn_type`, `kv_n_heads`), positions by ALiBi, RoPE or a learned table
    /// (llm-foundry turns the table off under either), a GELU MLP of `expansion_ratio` ×
    /// d_model (`ffn_config.ffn_type` `mptmlp` or Transformer Engine's `te_ln_mlp`) or a
    /// gated one (`mptglu`), all biases off under `no_bias` (norm biases too; counted as
    /// LayerNorm's two vectors, 2·d_model per norm too many), the head tied to the
    /// embedding. `qk_ln` and `clip_qkv` change no shape and are not represented; MegaBlocks
    /// experts (`ffn_type` `mb_moe`/`mb_dmoe`) are refused.
    pub(super) fn mpt(&self) -> Result<ModelSpec> {
        self.mosaic((MPT_VOCAB, MPT_MAX_SEQ_LEN), |m| self.mpt_from(m))
    }

    fn mpt_from(&self, m: Mosaic<'_>) -> Result<ModelSpec> {
        let (n, attn, ffn_cfg) = (m.sizes, &m.attn, &m.ffn);
        let kv_heads = match attn.choice(
            "attn_type",
            "multihead_attention",
            &[
                "multihead_attention",
                "grouped_query_attention",
                "multiquery_attention",
            ],
        )? {
            "multiquery_attention" => 1,
            "grouped_query_attention" => attn.opt_int("kv_n_heads", MAX_DIM)?.unwrap_or(1),
            _ => n.heads,
        };
        attn.kv_heads_divide(("kv_n_heads", kv_heads), ("n_heads", n.heads))?;
        let head_dim = self.head_dim(("n_heads", n.heads), ("d_model", n.hidden), None, false)?;
        let (alibi, rope) = (attn.flag("alibi", false)?, attn.flag("rope", false)?);
        let positions = if alibi {
            Positions::Alibi
        } else if rope {
            Positions::Rotary
        } else if self.flag("learned_pos_emb", true)? {
            Positions::Learned
        } else {
            Positions::None
        };
        let ratio = match self.get("expansion_ratio") {
            None => MPT_EXPANSION_RATIO,
            Some(v) => match v.as_f64() {
                Some(r) if r.is_finite() && r > 0.0 && r * n.hidden as f64 <= MAX_DIM as f64 => r,
                _ => {
                    return Err(self.err(
                        "expansion_ratio",
                        format!("must be a positive number, got {}", show(v)),
                        format!("a number > 0 with d_model × it ≤ {MAX_DIM}"),
                    ))
                }
            },
        };
        // llm-foundry `resolve_ffn_hidden_size`: an explicit width, else int(ratio × d_model).
        let ffn = match ffn_cfg.opt_int("ffn_hidden_size", MAX_DIM)? {
            Some(f) => f,
            None => ((ratio * n.hidden as f64) as u64).max(1),
        };
        let activation =
            match ffn_cfg.choice("ffn_type", "mptmlp", &["mptmlp", "te_ln_mlp", "mptglu"])? {
                "mptglu" => Activation::SwiGlu,
                _ => Activation::Gelu,
            };
        let norm = match self.choice(
            "norm_type",
            "low_precision_layernorm",
            &[
                "layernorm",
                "low_precision_layernorm",
                "rmsnorm",
                "low_precision_rmsnorm",
                "triton_rmsnorm",
            ],
        )? {
            kind if kind.ends_with("rmsnorm") => Norm::RmsNorm,
            _ => Norm::LayerNorm,
        };
        let bias = !self.flag("no_bias", false)?;
        let spec = ModelSpec {
            kv_heads,
            head_dim,
            ffn_hidden: ffn,
            norm,
            activation,
            positions,
            qkv_bias: bias,
            linear_bias: bias,
            tied_embeddings: self.flag("tie_word_embeddings", true)?,
            rope_theta: attn.float("rope_theta", DEFAULT_ROPE_THETA)?,
            ..arch::gpt(
                "",
                n.hidden,
                n.layers,
                n.heads,
                n.vocab,
                if positions == Positions::Learned {
                    n.max_seq
                } else {
                    0
                },
            )
        };
        self.check_size(
            &spec,
            &[
                ("d_model", n.hidden),
                ("n_layers", n.layers),
                ("expansion_ratio", ffn),
                ("vocab_size", n.vocab),
            ],
        )?;
        Ok(spec)
    }

    /// DBRX: every layer a mixture of `ffn_config.moe_num_experts` GLU experts (SiLU, width
    /// `ffn_hidden_size`), `moe_top_k` per token; grouped-query attention
    /// (`attn_config.kv_n_heads`) with RoPE (`attn_config.rope_theta`); LayerNorms without
    /// biases (counted as LayerNorm's two vectors, 2·d_model per norm too many); no linear
    /// biases; an untied head. `clip_qkv` changes no shape and is not represented.
    pub(super) fn dbrx(&self) -> Result<ModelSpec> {
        self.mosaic((DBRX_VOCAB, DBRX_MAX_SEQ_LEN), |m| self.dbrx_from(m))
    }

    fn dbrx_from(&self, m: Mosaic<'_>) -> Result<ModelSpec> {
        let (n, attn, ffn_cfg) = (m.sizes, &m.attn, &m.ffn);
        let kv_heads = attn
            .opt_int("kv_n_heads", MAX_DIM)?
            .unwrap_or(DBRX_KV_HEADS);
        attn.kv_heads_divide(("kv_n_heads", kv_heads), ("n_heads", n.heads))?;
        let experts = ffn_cfg
            .opt_int("moe_num_experts", MAX_DIM)?
            .unwrap_or(DBRX_EXPERTS);
        let top_k = ffn_cfg.opt_int("moe_top_k", MAX_DIM)?.unwrap_or(DBRX_TOP_K);
        if top_k > experts {
            return Err(ffn_cfg.err(
                "moe_top_k",
                format!("{top_k} is more than moe_num_experts = {experts}"),
                format!("1..={experts}"),
            ));
        }
        if let Some(act) = ffn_cfg.object("ffn_act_fn")? {
            match act.get("name").filter(|v| !v.is_null()) {
                None => {}
                Some(Value::String(n)) if n == "silu" => {}
                Some(v) => {
                    return Err(ffn_cfg.err(
                        "ffn_act_fn",
                        format!("activation {} is not expressible", show(v)),
                        "{\"name\": \"silu\"} (DBRX's GLU experts)",
                    ))
                }
            }
        }
        let ffn = ffn_cfg
            .opt_int("ffn_hidden_size", MAX_DIM)?
            .unwrap_or(DBRX_FFN);
        let head_dim = self.head_dim(("n_heads", n.heads), ("d_model", n.hidden), None, false)?;
        let base = arch::llama(
            "",
            n.hidden,
            n.layers,
            n.heads,
            kv_heads,
            ffn,
            n.vocab,
            Some(MoeSpec {
                experts,
                top_k,
                shared_experts: 0,
                latent: None,
            }),
        );
        let spec = ModelSpec {
            family: Family::Moe,
            head_dim,
            max_positions: n.max_seq,
            norm: Norm::LayerNorm,
            tied_embeddings: self.flag("tie_word_embeddings", false)?,
            rope_theta: attn.float("rope_theta", DEFAULT_ROPE_THETA)?,
            ..base
        };
        self.check_size(
            &spec,
            &[
                ("d_model", n.hidden),
                ("n_layers", n.layers),
                ("ffn_hidden_size", ffn),
                ("vocab_size", n.vocab),
            ],
        )?;
        Ok(spec)
    }
}

/// The sizes both MosaicML families read at the top level.
#[derive(Clone, Copy)]
struct Sizes {
    hidden: u64,
    layers: u64,
    heads: u64,
    vocab: u64,
    max_seq: u64,
}

/// A MosaicML config: its sizes and its nested attention and MLP objects.
struct Mosaic<'c> {
    sizes: Sizes,
    attn: Config<'c>,
    ffn: Config<'c>,
}
