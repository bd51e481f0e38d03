//! Nemotron-H (`nemotron_h`): Megatron-LM's hybrid of Mamba-2 mixer, attention and MLP
//! layers, one layer per symbol of `hybrid_override_pattern`.
//!
//! Only which keys this family reads and their transformers defaults live here; the
//! accessors and error wording are `config`'s, the size limit `size`'s.

use serde_json::Value;

use super::config::{show, Config};
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{runs_from_pattern, MambaSpec, ModelSpec, MoeSpec, DEFAULT_MAMBA_CHUNK};

/// Most blocks one multi-token-prediction module may hold (Nemotron 3's hold two): the
/// Megatron export writes the module once per depth.
const MAX_MTP_BLOCKS: usize = 64;

impl Config<'_> {
    /// The first of `keys` present (transformers' `NemotronHConfig` and NVIDIA's remote
    /// code spell some Mamba keys two ways: `n_groups`/`mamba_n_groups`,
    /// `conv_kernel`/`mamba_d_conv`, `chunk_size`/`mamba_chunk_size`,
    /// `use_conv_bias`/`mamba_conv_bias`, `use_bias`/`mamba_proj_bias`); the first key
    /// when none is.
    fn first_of<'k>(&self, keys: &[&'k str]) -> &'k str {
        keys.iter()
            .copied()
            .find(|k| self.get(k).is_some())
            .unwrap_or(keys[0])
    }

    /// Nemotron 3's router: sigmoid scores with a routing-only expert bias (Megatron Bridge
    /// `models/nemotronh/nemotron_h_provider.py` `NemotronHModelProvider`:
    /// `moe_router_score_function = "sigmoid"`, `moe_router_enable_expert_bias = True`),
    /// renormalised over the top k (`norm_topk_prob`, default true), scaled by
    /// `routed_scaling_factor` (`Nemotron3NanoProvider`: 2.5); `n_group` groups of which
    /// `topk_group` are kept (one group there). Group-limited routing over several groups is
    /// not expressible: how Nemotron scores a group is not published.
    fn nemotron_h_router(&self, experts: u64) -> Result<crate::model::RouterSpec> {
        let groups = self.opt_int("n_group", experts)?.unwrap_or(1);
        if groups > 1 {
            return Err(self.err(
                "n_group",
                format!("group-limited routing over {groups} groups is not expressible"),
                "1 (no groups)",
            ));
        }
        Ok(crate::model::RouterSpec {
            sigmoid: true,
            expert_bias: true,
            groups: None,
            group_score_top2: false,
            normalize_topk: self.flag("norm_topk_prob", true)?,
            scaling: self.float("routed_scaling_factor", 1.0)?,
        })
    }

    /// Nemotron 3's experts (transformers' `NemotronHConfig`): `n_routed_experts` of
    /// `moe_intermediate_size`, `num_experts_per_tok` routed, and shared experts of
    /// `moe_shared_expert_intermediate_size` (a whole number of routed widths; none when
    /// `n_shared_experts` is 0); `None` when the config names no experts. Nemotron 3
    /// Super's LatentMoE routes its experts at `moe_latent_size` (`MoeSpec::latent`; null
    /// or absent: on the hidden state).
    fn nemotron_h_experts(&self) -> Result<Option<(MoeSpec, u64)>> {
        let Some(experts) = self.opt_int("n_routed_experts", MAX_DIM)? else {
            return Ok(None);
        };
        let latent = match self.get("moe_latent_size") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.int("moe_latent_size", MAX_DIM)?),
        };
        let width = self.int("moe_intermediate_size", MAX_DIM)?;
        let top_k = self.routed_top_k("n_routed_experts", experts)?;
        let shared = match self.opt_int("n_shared_experts", MAX_DIM)? {
            Some(0) => 0,
            _ => match self.opt_int("moe_shared_expert_intermediate_size", MAX_DIM)? {
                None => self.opt_int("n_shared_experts", MAX_DIM)?.unwrap_or(0),
                Some(w) if w.is_multiple_of(width) => w / width,
                Some(w) => {
                    return Err(self.err(
                        "moe_shared_expert_intermediate_size",
                        format!("{w} is not a whole number of expert widths ({width})"),
                        format!("a multiple of moe_intermediate_size ({width})"),
                    ))
                }
            },
        };
        Ok(Some((
            MoeSpec {
                experts,
                top_k,
                shared_experts: shared,
                latent,
            },
            width,
        )))
    }

    /// The blocks of Nemotron 3's multi-token-prediction module as pattern symbols:
    /// `mtp_hybrid_override_pattern` (NVIDIA's configs, which Megatron Bridge requires), or
    /// transformers' `mtp_layers_block_type` list (`linear_attention` M, `full_attention` *,
    /// `mlp` -, `moe` E), by default `["full_attention", "moe"]` (`NemotronHConfig`).
    /// Its symbols are checked against the model's blocks by [`ModelSpec::mtp_kinds`].
    fn nemotron_h_mtp_pattern(&self) -> Result<String> {
        const ALLOWED: &str = "up to 64 of the symbols M, *, - and E";
        if let Some(v) = self.get("mtp_hybrid_override_pattern") {
            let key = "mtp_hybrid_override_pattern";
            return match v.as_str() {
                Some(s) if (1..=MAX_MTP_BLOCKS).contains(&s.chars().count()) => Ok(s.to_string()),
                _ => Err(self.err(key, format!("{} is not a layer pattern", show(v)), ALLOWED)),
            };
        }
        let key = "mtp_layers_block_type";
        let Some(v) = self.get(key) else {
            return Ok("*E".into());
        };
        let allowed = "a list of linear_attention, full_attention, mlp, moe";
        let list = v
            .as_array()
            .filter(|l| !l.is_empty() && l.len() <= MAX_MTP_BLOCKS)
            .ok_or_else(|| {
                self.err(
                    key,
                    format!("{} is not a list of layer types", show(v)),
                    allowed,
                )
            })?;
        list.iter()
            .map(|t| match t.as_str() {
                Some("linear_attention" | "mamba") => Ok('M'),
                Some("full_attention" | "attention") => Ok('*'),
                Some("mlp") => Ok('-'),
                Some("moe") => Ok('E'),
                _ => Err(self.err(key, format!("{} is not a layer type", show(t)), allowed)),
            })
            .collect()
    }

    /// `nemotron_h` (transformers' `NemotronHForCausalLM`): `hybrid_override_pattern` gives
    /// each layer its kind — `M` a Mamba-2 mixer, `*` grouped-query attention, `-` a
    /// squared-ReLU MLP of `intermediate_size` — each behind an RMSNorm; an untied head by
    /// default. The Mamba-2 mixer has `mamba_num_heads` heads of `mamba_head_dim` (or
    /// `expand × hidden_size / mamba_head_dim` heads without `mamba_num_heads`),
    /// `ssm_state_size`, `n_groups`, `conv_kernel` and `chunk_size` (default 128,
    /// Megatron-LM's). `E` layers (Nemotron 3) are MoE layers of the experts named by
    /// [`Config::nemotron_h_experts`].
    pub(super) fn nemotron_h(&self) -> Result<ModelSpec> {
        let hidden = self.int("hidden_size", MAX_DIM)?;
        let layers = self.int("num_hidden_layers", MAX_LAYERS)?;
        let key = "hybrid_override_pattern";
        let pattern = match self.get(key) {
            Some(Value::String(s)) => s.as_str(),
            Some(v) => {
                return Err(self.err(
                    key,
                    format!("must be a string, got {}", show(v)),
                    "one symbol per layer: M (Mamba-2), * (attention), - (MLP)",
                ))
            }
            None => {
                return Err(self.err(
                    key,
                    self.missing_problem(key),
                    "one symbol per layer: M (Mamba-2), * (attention), - (MLP)",
                ))
            }
        };
        let experts = self.nemotron_h_experts()?;
        // transformers' `NemotronHConfig` default (21504), which a config without `-`
        // layers (Nemotron 3 Super) leaves unused.
        let ffn = self.opt_int("intermediate_size", MAX_DIM)?.unwrap_or(21504);
        runs_from_pattern(pattern, experts.map(|_| ffn)).map_err(|(i, c)| {
            let problem = if c == 'E' {
                format!(
                    "layer {i} is a mixture-of-experts layer (`E`), but the config names no \
                     experts (n_routed_experts)"
                )
            } else {
                format!("layer {i} has the unknown symbol `{}`", c.escape_debug())
            };
            self.err(
                key,
                problem,
                "the symbols M (Mamba-2), * (attention), - (MLP), and E (MoE) with n_routed_experts",
            )
        })?;
        let pattern_layers = pattern.chars().count() as u64;
        if pattern_layers != layers {
            return Err(self.err(
                key,
                format!("has {pattern_layers} symbols but num_hidden_layers is {layers}"),
                format!("one symbol per layer ({layers})"),
            ));
        }
        let heads = self.int("num_attention_heads", MAX_DIM)?;
        let kv_heads = self
            .opt_int("num_key_value_heads", MAX_DIM)?
            .unwrap_or(heads);
        let head_dim_key = self.first_of(&["head_dim", "attention_head_dim"]);
        let explicit_head_dim = self.opt_int(head_dim_key, MAX_DIM)?;
        let head_dim = self.head_dim(
            ("num_attention_heads", heads),
            ("hidden_size", hidden),
            explicit_head_dim,
            true,
        )?;
        let vocab = self.int("vocab_size", MAX_DIM)?;
        if let Some(a) = self.get("mlp_hidden_act") {
            if a.as_str() != Some("relu2") {
                return Err(self.err(
                    "mlp_hidden_act",
                    format!("{} is not expressible", show(a)),
                    "\"relu2\" (Nemotron-H's squared-ReLU MLP)",
                ));
            }
        }
        let mamba_head_dim = self.int("mamba_head_dim", MAX_DIM)?;
        let mamba_heads = match self.opt_int("mamba_num_heads", MAX_DIM)? {
            Some(n) => n,
            None => {
                let expand_key = self.first_of(&["expand", "mamba_expand"]);
                let expand = self.opt_int(expand_key, MAX_DIM)?.unwrap_or(2);
                let d_inner = expand.saturating_mul(hidden);
                if !d_inner.is_multiple_of(mamba_head_dim) {
                    return Err(self.err(
                        "mamba_head_dim",
                        format!("does not divide {expand_key} × hidden_size = {d_inner}"),
                        format!("a divisor of {d_inner}, or an explicit mamba_num_heads"),
                    ));
                }
                d_inner / mamba_head_dim
            }
        };
        let state = self.int("ssm_state_size", MAX_DIM)?;
        let groups_key = self.first_of(&["n_groups", "mamba_n_groups"]);
        let groups = self.opt_int(groups_key, MAX_DIM)?.unwrap_or(8);
        if !mamba_heads.is_multiple_of(groups) {
            return Err(self.err(
                groups_key,
                format!("{groups} groups do not divide mamba_num_heads = {mamba_heads}"),
                format!("a divisor of {mamba_heads}"),
            ));
        }
        let conv_key = self.first_of(&["conv_kernel", "mamba_d_conv"]);
        let chunk_key = self.first_of(&["chunk_size", "mamba_chunk_size"]);
        let conv_bias_key = self.first_of(&["use_conv_bias", "mamba_conv_bias"]);
        let proj_bias_key = self.first_of(&["use_bias", "mamba_proj_bias"]);
        let mamba = MambaSpec {
            heads: mamba_heads,
            head_dim: mamba_head_dim,
            state,
            groups,
            conv_kernel: self.opt_int(conv_key, MAX_DIM)?.unwrap_or(4),
            chunk: self
                .opt_int(chunk_key, MAX_DIM)?
                .unwrap_or(DEFAULT_MAMBA_CHUNK),
            conv_bias: self.flag(conv_bias_key, true)?,
            proj_bias: self.flag(proj_bias_key, false)?,
        };
        let base = arch::nemotron_h(
            "",
            hidden,
            pattern,
            (heads, kv_heads, head_dim),
            ffn,
            vocab,
            mamba,
            experts,
        )
        .expect("the pattern was checked above");
        let router = match experts {
            Some((moe, _)) => Some(self.nemotron_h_router(moe.experts)?),
            None => None,
        };
        let mtp_layers = self.count("num_nextn_predict_layers", MAX_LAYERS)?;
        let spec = ModelSpec {
            router,
            mtp_layers,
            mtp_pattern: (mtp_layers > 0)
                .then(|| self.nemotron_h_mtp_pattern())
                .transpose()?,
            // Megatron Bridge's Nemotron-H conversion (`nemotron_h_bridge.py`,
            // `provider_bridge`, v0.6.0): both default to true where the config has MTP layers.
            mtp_shared: mtp_layers > 0 && self.flag("mtp_use_repeated_layer", true)?,
            mtp_bf16: mtp_layers > 0 && self.flag("keep_mtp_spec_in_bf16", true)?,
            qkv_bias: self.flag("attention_bias", false)?,
            linear_bias: self.flag("mlp_bias", false)?,
            tied_embeddings: self.flag("tie_word_embeddings", false)?,
            norm_eps: self.float("layer_norm_epsilon", 1e-5)?,
            ..base
        };
        if let Err((i, c)) = spec.mtp_kinds() {
            let key = self.first_of(&["mtp_hybrid_override_pattern", "mtp_layers_block_type"]);
            return Err(self.err(
                key,
                format!(
                    "MTP layer {i} (`{}`) is of a kind the model's layers do not have",
                    c.escape_debug()
                ),
                "kinds of hybrid_override_pattern's layers",
            ));
        }
        self.check_size(
            &spec,
            &[
                ("hidden_size", hidden),
                ("num_hidden_layers", layers),
                ("num_attention_heads", heads),
                ("intermediate_size", ffn),
                ("moe_intermediate_size", experts.map_or(0, |(_, w)| w)),
                ("vocab_size", vocab),
                ("mamba_num_heads", mamba_heads),
                ("mamba_head_dim", mamba_head_dim),
                ("ssm_state_size", state),
            ],
        )?;
        Ok(spec)
    }
}
