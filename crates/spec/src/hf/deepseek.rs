//! DeepSeek-V2/V3 and Kimi K2: multi-head latent attention, leading dense layers, routed
//! and shared experts, multi-token-prediction modules.
//!
//! Only which keys this family reads and their transformers defaults live here; the
//! accessors and error wording are `config`'s, the size limit `size`'s.

use serde_json::Value;

use super::config::Config;
use super::{MAX_DIM, MAX_LAYERS};
use crate::error::Result;
use crate::model::arch;
use crate::model::{BlockRun, MlaSpec, ModelSpec, MoeSpec, DEFAULT_ROPE_THETA};

impl Config<'_> {
    /// DeepSeek-V2/V3 and Kimi K2 (DeepSeek-V3's architecture): multi-head latent attention,
    /// `first_k_dense_replace` dense layers of `intermediate_size`, then (every
    /// `moe_layer_freq`-th layer) MoE layers of `n_routed_experts` routed and
    /// `n_shared_experts` shared experts of `moe_intermediate_size` (transformers'
    /// `DeepseekV3DecoderLayer`). `num_nextn_predict_layers` multi-token-prediction
    /// modules train beside it (NeMo's DeepSeek-V3 recipe keeps `mtp_num_layers = 1`), though
    /// transformers' model has none.
    pub(super) fn deepseek(&self) -> Result<ModelSpec> {
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
        let top_k = self.routed_top_k("n_routed_experts", experts)?;
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
            latent: None,
        };
        let mut runs = crate::model::runs_of((0..layers).map(|i| {
            let dense = i < first_dense || !i.is_multiple_of(freq);
            BlockRun {
                kind: crate::model::BlockKind::Transformer,
                count: 1,
                window: None,
                dense_ffn: dense.then_some(dense_ffn),
                chunk: None,
            }
        }));
        if runs.len() == 1 && runs[0].dense_ffn.is_none() {
            runs.clear();
        }
        let router = self.deepseek_router(experts)?;
        let spec = ModelSpec {
            router: Some(router),
            head_dim: mla.v_head_dim,
            tied_embeddings: self.flag("tie_word_embeddings", false)?,
            rope_theta: self.rope_theta("rope_theta", DEFAULT_ROPE_THETA)?,
            norm_eps: self.float("rms_norm_eps", 1e-6)?,
            mla: Some(mla),
            mtp_layers: self.count("num_nextn_predict_layers", MAX_LAYERS)?,
            block_runs: runs,
            ..arch::llama(
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

    /// DeepSeek's router (transformers' `DeepseekV3TopkRouter`, DeepSeek-V2's `MoEGate`):
    /// `scoring_func` softmax or sigmoid; `topk_method` greedy, `group_limited_greedy`
    /// (V2: a group scores by its best expert) or `noaux_tc` (V3: routing bias, a group
    /// scores by its top two); `n_group`/`topk_group`; `norm_topk_prob`;
    /// `routed_scaling_factor` (default 1).
    fn deepseek_router(&self, experts: u64) -> Result<crate::model::RouterSpec> {
        let text = |key: &str, default: &'static str| -> Result<String> {
            match self.get(key) {
                None | Some(Value::Null) => Ok(default.to_string()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v) => Err(self.err(
                    key,
                    format!("must be a string, got {}", super::config::show(v)),
                    "a string".to_string(),
                )),
            }
        };
        let scoring = text("scoring_func", "softmax")?;
        let sigmoid = match scoring.as_str() {
            "softmax" => false,
            "sigmoid" => true,
            other => {
                return Err(self.err(
                    "scoring_func",
                    format!(
                        "unknown scoring function \"{}\"",
                        super::config::quote(other)
                    ),
                    "softmax|sigmoid".to_string(),
                ))
            }
        };
        let method = text("topk_method", "greedy")?;
        let grouped = match method.as_str() {
            "greedy" => false,
            "group_limited_greedy" | "noaux_tc" => true,
            other => {
                return Err(self.err(
                    "topk_method",
                    format!("unknown routing method \"{}\"", super::config::quote(other)),
                    "greedy|group_limited_greedy|noaux_tc".to_string(),
                ))
            }
        };
        let groups = if grouped {
            let n = self.opt_int("n_group", experts)?.unwrap_or(1);
            let kept = self.opt_int("topk_group", n)?.unwrap_or(n);
            if !experts.is_multiple_of(n) {
                return Err(self.err(
                    "n_group",
                    format!("{n} groups do not split n_routed_experts = {experts}"),
                    format!("a divisor of {experts}"),
                ));
            }
            (n > 1).then_some((n, kept))
        } else {
            None
        };
        Ok(crate::model::RouterSpec {
            sigmoid,
            expert_bias: method == "noaux_tc",
            groups,
            group_score_top2: method == "noaux_tc",
            normalize_topk: self.flag("norm_topk_prob", false)?,
            scaling: self.float("routed_scaling_factor", 1.0)?,
        })
    }
}
