//! The model's architecture as Megatron-LM flags: MoE layer mix and router, RoPE scaling
//! and YaRN, MLA, Mamba-2 hybrids — or why Megatron cannot express it. Flags checked
//! against the commit the parent module names.
//!
//! Knows the model only; the plan's parallel layout and the files are the parent's.

use plait_spec::ModelSpec;

/// The width of the dense layers among a MoE model's (Megatron's `--ffn-hidden-size`, the
/// experts' going to `--moe-ffn-hidden-size`); `None` when every layer is MoE.
pub(super) fn dense_layer_width(model: &ModelSpec) -> Option<u64> {
    model.block_runs.iter().find_map(|r| r.dense_ffn)
}

/// Flags of a MoE model's layer mix and expert sizes: `--moe-ffn-hidden-size` where dense
/// layers (`--ffn-hidden-size`, [`dense_layer_width`]) sit among the MoE ones, `--moe-layer-freq` as the list of
/// which layers are MoE (`moe_freq_type` in arguments.py), the shared experts' width
/// (`--moe-shared-expert-intermediate-size`), LatentMoE's width (`--moe-latent-size`), or
/// why the mix has no flags (dense layers of more than one width).
pub(super) fn moe_layer_flags(model: &ModelSpec) -> Result<Vec<(&'static str, String)>, String> {
    let Some(moe) = model.moe else {
        if model.block_runs.iter().any(|r| r.dense_ffn.is_some()) {
            return Err(format!(
                "{} has MLPs of several widths; Megatron gives a dense model one \
                 --ffn-hidden-size",
                model.name
            ));
        }
        return Ok(vec![]);
    };
    let mut out = Vec::new();
    if let Some(dense) = dense_layer_width(model) {
        if model
            .block_runs
            .iter()
            .any(|r| r.dense_ffn.is_some_and(|w| w != dense))
        {
            return Err(format!(
                "{} has dense layers of several widths; Megatron gives them one \
                 --ffn-hidden-size",
                model.name
            ));
        }
        let pattern: Vec<&str> = model
            .block_runs
            .iter()
            .flat_map(|r| {
                std::iter::repeat_n(
                    if r.dense_ffn.is_some() { "0" } else { "1" },
                    r.count as usize,
                )
            })
            .collect();
        out.push(("--moe-ffn-hidden-size", model.ffn_hidden.to_string()));
        out.push(("--moe-layer-freq", format!("\"[{}]\"", pattern.join(","))));
    }
    if moe.shared_experts > 0 {
        out.push((
            "--moe-shared-expert-intermediate-size",
            (moe.shared_experts * model.ffn_hidden).to_string(),
        ));
    }
    // LatentMoE's expert width (`TransformerConfig.moe_latent_size`, Megatron-LM d98e8a6).
    if let Some(latent) = moe.latent {
        out.push(("--moe-latent-size", latent.to_string()));
    }
    Ok(out)
}

/// Llama 3.1's RoPE rescaling as Megatron applies it: only the factor is a flag; the
/// frequency bounds and the original context are the constructor's defaults (Megatron-LM
/// d98e8a6 `megatron/core/models/common/embeddings/rotary_pos_embedding.py`
/// `_apply_scaling`: `low_freq_factor=1`, `high_freq_factor=4`,
/// `original_max_position_embeddings=8192`).
const MEGATRON_LLAMA3_ROPE: (f64, f64, u64) = (1.0, 4.0, 8192);

/// The flags of `model`'s RoPE rescaling, or why Megatron cannot apply it as the model
/// does: `--use-rope-scaling --rope-scaling-factor` (Llama 3.1's method with Megatron's
/// fixed bounds) and `--rotary-seq-len-interpolation-factor` (linear, `type=int`), from
/// arguments.py.
pub(super) fn rope_scaling_flags(model: &ModelSpec) -> Result<Vec<(&'static str, String)>, String> {
    use plait_spec::RopeScaling;
    let Some(scaling) = model.rope_scaling.as_ref().filter(|_| model.mla.is_none()) else {
        return Ok(vec![]);
    };
    match scaling {
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
        } if (*low_freq_factor, *high_freq_factor, *original_max_positions)
            == MEGATRON_LLAMA3_ROPE =>
        {
            Ok(vec![
                ("--use-rope-scaling", String::new()),
                ("--rope-scaling-factor", format!("{factor}")),
            ])
        }
        RopeScaling::Llama3 {
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
            ..
        } => Err(format!(
            "its Llama 3 RoPE scaling has low_freq_factor {low_freq_factor}, high_freq_factor \
             {high_freq_factor} and original context {original_max_positions}, but Megatron fixes \
             them at 1, 4 and 8192 (rotary_pos_embedding.py `_apply_scaling`)"
        )),
        RopeScaling::Linear { factor } if factor.fract() == 0.0 => Ok(vec![(
            "--rotary-seq-len-interpolation-factor",
            format!("{}", *factor as u64),
        )]),
        RopeScaling::Linear { factor } => Err(format!(
            "its linear RoPE scaling factor {factor} is not an integer, as Megatron's \
             --rotary-seq-len-interpolation-factor (type=int) needs"
        )),
        RopeScaling::Yarn { .. } => yarn_flags(&model.name, scaling, false),
        RopeScaling::Other { name } => Err(format!(
            "its RoPE scaling `{name}` has no Megatron-LM equivalent"
        )),
    }
}

/// YaRN's flags, or why Megatron cannot apply the model's. Both paths take the factor
/// (`--rotary-scaling-factor`) and the temperature where the model gives it (`--mscale`,
/// `--mscale-all-dim`; defaults 1 and 0: 0.1·ln(factor) + 1, transformers' default too);
/// neither has a field for `attention_factor`. GPT YaRN (`--position-embedding-type yarn`,
/// `YarnRotaryEmbedding`) also takes the band and its rounding
/// (`--yarn-original-max-position-embeddings`, `--yarn-beta-fast/-slow`,
/// `--no-yarn-correction-range-round-to-int`; d98e8a6 arguments.py, `argument_utils.py`
/// `_apply_yarn_config_from_args`); MLA fixes the band (`MEGATRON_MLA_YARN`) and rounds.
fn yarn_flags(
    name: &str,
    scaling: &plait_spec::RopeScaling,
    mla: bool,
) -> Result<Vec<(&'static str, String)>, String> {
    let plait_spec::RopeScaling::Yarn {
        factor,
        original_max_positions,
        beta_fast,
        beta_slow,
        mscale,
        mscale_all_dim,
        attention_factor,
        truncate,
    } = scaling
    else {
        return Ok(vec![]);
    };
    if let Some(a) = attention_factor {
        return Err(format!(
            "{name}'s YaRN attention_factor {a} has no Megatron flag (Megatron derives the \
             temperature from --mscale and --mscale-all-dim)"
        ));
    }
    let mut out = vec![("--rotary-scaling-factor", format!("{factor}"))];
    if mla {
        if *truncate == Some(false) {
            return Err(format!(
                "{name}'s YaRN sets truncate = false, which Megatron's MLA \
                 (MLATransformerConfig) has no field for"
            ));
        }
        if (*original_max_positions, *beta_fast, *beta_slow) != MEGATRON_MLA_YARN {
            return Err(format!(
                "{name}'s YaRN has original context {original_max_positions}, beta_fast \
                 {beta_fast} and beta_slow {beta_slow}, but Megatron's MLA fixes them at \
                 4096, 32 and 1 (MLATransformerConfig; no flag reaches them)"
            ));
        }
    } else {
        out.push((
            "--yarn-original-max-position-embeddings",
            original_max_positions.to_string(),
        ));
        out.push(("--yarn-beta-fast", format!("{beta_fast}")));
        out.push(("--yarn-beta-slow", format!("{beta_slow}")));
        if *truncate == Some(false) {
            out.push(("--no-yarn-correction-range-round-to-int", String::new()));
        }
    }
    for (flag, v) in [("--mscale", mscale), ("--mscale-all-dim", mscale_all_dim)] {
        if let Some(v) = v {
            out.push((flag, format!("{v}")));
        }
    }
    Ok(out)
}

/// What Megatron's `MLATransformerConfig` fixes for YaRN without a flag reaching it
/// (d98e8a6 `transformer_config.py`: `original_max_position_embeddings = 4096`,
/// `beta_fast = 32`, `beta_slow = 1`; the `--yarn-*` flags set the non-MLA path's
/// `yarn_*` fields only, `argument_utils.py` `_apply_yarn_config_from_args`).
const MEGATRON_MLA_YARN: (u64, f64, f64) = (4096, 32.0, 1.0);

/// The flags of multi-latent attention (DeepSeek-V2/V3, Kimi K2), or why Megatron's MLA
/// cannot build the model's: the latent ranks and head dims, the latents' RMSNorms
/// (`--qk-layernorm`, DeepSeek's `q_a_layernorm`/`kv_a_layernorm`), and its RoPE (YaRN by
/// default for MLA: `--rotary-scaling-factor`, `--mscale`, `--mscale-all-dim`; plain RoPE
/// with `--rope-type rope`), as NVIDIA's DeepSeek-R1 arguments write them (Megatron-LM
/// d98e8a6 `examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh`).
pub(super) fn mla_flags(model: &ModelSpec) -> Result<Vec<(&'static str, String)>, String> {
    use plait_spec::RopeScaling;
    let Some(mla) = model.mla else {
        return Ok(vec![]);
    };
    let mut out = vec![("--multi-latent-attention", String::new())];
    if mla.q_lora_rank > 0 {
        out.push(("--q-lora-rank", mla.q_lora_rank.to_string()));
    }
    out.push(("--kv-lora-rank", mla.kv_lora_rank.to_string()));
    out.push(("--qk-head-dim", mla.qk_nope_head_dim.to_string()));
    out.push(("--qk-pos-emb-head-dim", mla.qk_rope_head_dim.to_string()));
    out.push(("--v-head-dim", mla.v_head_dim.to_string()));
    out.push(("--qk-layernorm", String::new()));
    match &model.rope_scaling {
        None => out.push(("--rope-type", "rope".into())),
        Some(yarn @ RopeScaling::Yarn { .. }) => {
            out.push(("--rope-type", "yarn".into()));
            out.extend(yarn_flags(&model.name, yarn, true)?);
        }
        Some(other) => {
            return Err(format!(
                "{}'s RoPE scaling ({other:?}): Megatron's MLA ropes plain or with YaRN",
                model.name
            ))
        }
    }
    Ok(out)
}

/// The flags of a router that is not Mixtral's (`plait_spec::RouterSpec`), or why
/// Megatron's cannot route as it does (Megatron-LM d98e8a6 `moe/moe_utils.py`
/// `topk_routing_with_score_function`: sigmoid scores are always renormalised over the
/// top k; softmax ones are unless `--moe-router-pre-softmax`; `group_limited_topk` scores
/// a group by its top topk/group_topk experts).
pub(super) fn router_flags(model: &ModelSpec) -> Result<Vec<(&'static str, String)>, String> {
    let (Some(r), Some(moe)) = (model.router, model.moe) else {
        return Ok(vec![]);
    };
    let mut out = Vec::new();
    if r.sigmoid {
        if !r.normalize_topk && moe.top_k > 1 {
            return Err(format!(
                "{} routes with unnormalised sigmoid scores; Megatron renormalises them over \
                 the top k",
                model.name
            ));
        }
        out.push(("--moe-router-score-function", "sigmoid".into()));
    } else if !r.normalize_topk {
        out.push(("--moe-router-pre-softmax", String::new()));
    }
    if r.expert_bias {
        out.push(("--moe-router-enable-expert-bias", String::new()));
    }
    if let Some((groups, kept)) = r.groups {
        let per_group = if r.group_score_top2 { 2 } else { 1 };
        if kept == 0 || moe.top_k / kept != per_group || !moe.top_k.is_multiple_of(kept) {
            return Err(format!(
                "{} scores an expert group by its top {per_group} expert(s), but Megatron's \
                 group-limited routing sums the top top_k / topk_group = {} / {kept}",
                model.name, moe.top_k
            ));
        }
        out.push(("--moe-router-num-groups", groups.to_string()));
        out.push(("--moe-router-group-topk", kept.to_string()));
    }
    if r.scaling != 1.0 {
        out.push(("--moe-router-topk-scaling-factor", format!("{}", r.scaling)));
    }
    Ok(out)
}

/// Mamba-2 mixer settings that `MambaMixer` fixes in its constructor rather than taking
/// from the configuration (Megatron-LM d98e8a6 `megatron/core/ssm/mamba_mixer.py`:
/// `d_conv=4`, `conv_bias=True`, `bias=False`, `chunk_size=128`).
const MEGATRON_MAMBA_CONV_KERNEL: u64 = 4;
const MEGATRON_MAMBA_CHUNK: u64 = 128;

/// Why Megatron's `HybridModel` cannot build `model` as plait costs it.
pub(super) fn hybrid_reasons(model: &ModelSpec) -> Vec<String> {
    let mut out = Vec::new();
    if model.hybrid_pattern().is_none() {
        out.push(format!(
            "{} mixes transformer blocks into a hybrid pattern; Megatron's \
             --hybrid-layer-pattern names attention (*), MLP (-), MoE (E) and Mamba (M) layers only",
            model.name
        ));
    }
    if model.attention_window.is_some()
        || model.attention_chunk.is_some()
        || model
            .block_runs
            .iter()
            .any(|r| r.window.is_some() || r.chunk.is_some() || r.dense_ffn.is_some())
    {
        out.push(format!(
            "{} has sliding-window, chunked or differently sized layers, which \
             --hybrid-layer-pattern cannot say",
            model.name
        ));
    }
    if let Some(m) = model.mamba {
        let fixed = [
            ("conv_kernel", m.conv_kernel, MEGATRON_MAMBA_CONV_KERNEL),
            ("chunk", m.chunk, MEGATRON_MAMBA_CHUNK),
            ("conv_bias", u64::from(m.conv_bias), 1),
            ("proj_bias", u64::from(m.proj_bias), 0),
        ];
        for (field, value, megatron) in fixed {
            if value != megatron {
                out.push(format!(
                    "its Mamba-2 mixer has {field} = {value}, but Megatron's MambaMixer \
                     fixes it at {megatron} (megatron/core/ssm/mamba_mixer.py)"
                ));
            }
        }
    }
    out
}
