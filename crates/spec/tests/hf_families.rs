//! `model_from_hf_config` on the later families' released `config.json` files (Phi-3,
//! OLMo 2, Falcon, Nemotron-H) and on the RoPE keys every family reads.

mod common;

use common::*;
use plait_spec::{BlockKind, Family, ModelSpec, Positions};
use serde_json::{json, Value};

/// microsoft/Phi-3-mini-4k-instruct config.json (the keys that shape the model).
fn phi3_mini() -> Value {
    json!({
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
        "rope_scaling": null, "sliding_window": 2047, "tie_word_embeddings": false,
        "attention_dropout": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
        "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000,
        "torch_dtype": "bfloat16"
    })
}

#[test]
fn phi3_mini_4k() {
    let m = parse(
        &phi3_mini().to_string(),
        "Phi-3-mini-4k-instruct/config.json",
    );
    assert_eq!(m.family, Family::Llama);
    assert_eq!(
        (m.hidden, m.layers, m.heads, m.kv_heads),
        (3072, 32, 32, 32)
    );
    assert!(!m.qkv_bias && !m.linear_bias && !m.tied_embeddings);
    assert_eq!((m.rope_theta, m.norm_eps), (10_000.0, 1e-5));
    // Model card / safetensors: 3.82 B parameters.
    assert_eq!(m.parameter_count(), 3_821_079_552);
    within_1_percent("phi-3-mini", m.parameter_count(), 3.82e9);
    let gelu = with(&phi3_mini().to_string(), "hidden_act", json!("gelu"));
    error(&gelu, "hidden_act");
}

#[test]
fn olmo2_7b() {
    // allenai/OLMo-2-1124-7B config.json.
    let cfg = json!({
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100352,
        "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-06,
        "rope_theta": 500000, "rope_scaling": null, "attention_bias": false,
        "attention_dropout": 0.0, "tie_word_embeddings": false, "pad_token_id": 100277,
        "eos_token_id": 100257, "torch_dtype": "float32"
    });
    let m = parse(&cfg.to_string(), "OLMo-2-1124-7B/config.json");
    assert_eq!(m.family, Family::Llama);
    assert_eq!((m.rope_theta, m.norm_eps), (500_000.0, 1e-6));
    // The q/k norms (2 × 4096 per layer) are left out: 262,144 fewer than the checkpoint.
    assert_eq!(m.parameter_count(), 7_298_355_200);
    // Model card: 7.3 B parameters.
    within_1_percent("olmo-2-7b", m.parameter_count(), 7.30e9);
}

/// tiiuae/falcon-7b config.json.
fn falcon_7b() -> Value {
    json!({
        "architectures": ["FalconForCausalLM"], "model_type": "falcon",
        "alibi": false, "apply_residual_connection_post_layernorm": false,
        "attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11,
        "hidden_dropout": 0.0, "hidden_size": 4544, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "multi_query": true, "new_decoder_architecture": false,
        "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": true,
        "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 65024
    })
}

#[test]
fn falcon_7b_and_40b() {
    let m = parse(&falcon_7b().to_string(), "falcon-7b/config.json");
    assert_eq!(m.family, Family::Gpt);
    assert_eq!(m.positions, Positions::Rotary);
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (71, 1, 64));
    assert!(m.tied_embeddings && !m.qkv_bias && !m.linear_bias);
    assert_eq!(m.ffn_hidden, 4 * 4544);
    // One LayerNorm per parallel block, counted as two here: 2h × 32 = 290,816 more than
    // the checkpoint's 6,921,720,704 (model card: "7B"; hub: 6.92 B).
    assert_eq!(m.parameter_count(), 6_921_720_704 + 290_816);
    within_1_percent("falcon-7b", m.parameter_count(), 6.92e9);

    // tiiuae/falcon-40b config.json: grouped-query attention with 8 kv heads, two
    // LayerNorms per block (new_decoder_architecture).
    let cfg = json!({
        "architectures": ["FalconForCausalLM"], "model_type": "falcon",
        "alibi": false, "apply_residual_connection_post_layernorm": false,
        "attention_dropout": 0.0, "bias": false, "bos_token_id": 11, "eos_token_id": 11,
        "hidden_dropout": 0.0, "hidden_size": 8192, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "new_decoder_architecture": true,
        "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8,
        "parallel_attn": true, "torch_dtype": "bfloat16", "vocab_size": 65024
    });
    let m = parse(&cfg.to_string(), "falcon-40b/config.json");
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (128, 8, 64));
    assert_eq!(m.parameter_count(), 41_303_293_952);
    // Hub: 41.3 B ("40B" on the model card).
    within_1_percent("falcon-40b", m.parameter_count(), 41.3e9);

    // Falcon-RW's ALiBi: no position parameters, the rest unchanged.
    let rw = parse(
        &with(&falcon_7b().to_string(), "alibi", json!(true)),
        "falcon-rw.json",
    );
    assert_eq!(rw.positions, Positions::Alibi);
    assert_eq!(rw.parameter_count(), 6_921_720_704 + 290_816);
    // What ModelSpec cannot hold is refused, naming the key and the allowed values.
    error(
        &with(&falcon_7b().to_string(), "activation", json!("relu")),
        "activation",
    );
    let biased = parse(
        &with(&falcon_7b().to_string(), "bias", json!(true)),
        "falcon.json",
    );
    assert!(biased.qkv_bias && biased.linear_bias);
    let mha = parse(
        &with(&falcon_7b().to_string(), "multi_query", json!(false)),
        "falcon.json",
    );
    assert_eq!(mha.kv_heads, 71);
}

/// bigscience/bloom config.json (BLOOM-176B), as released.
fn bloom_176b() -> Value {
    json!({
        "apply_residual_connection_post_layernorm": false, "attention_dropout": 0.0,
        "attention_softmax_in_fp32": true, "bias_dropout_fusion": true, "bos_token_id": 1,
        "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 14336,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": true,
        "model_type": "bloom", "n_head": 112, "n_inner": null, "n_layer": 70,
        "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 4, "skip_bias_add": true,
        "skip_bias_add_qkv": false, "slow_but_exact": false, "unk_token_id": 0,
        "use_cache": true, "vocab_size": 250880
    })
}

#[test]
fn bloom_176b_counts_its_published_total() {
    let m = parse(&bloom_176b().to_string(), "bloom/config.json");
    assert_eq!(m.family, Family::Gpt);
    assert_eq!(m.positions, Positions::Alibi);
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (112, 112, 128));
    assert!(m.tied_embeddings && m.qkv_bias && m.linear_bias);
    assert_eq!(m.ffn_hidden, 4 * 14336);
    // Model card: 176,247,271,424 parameters; the embedding LayerNorm's 2 × 14,336 are
    // left out.
    assert_eq!(m.parameter_count(), 176_247_271_424 - 2 * 14336);
    // transformers' attribute names read as well as the released ones.
    let renamed = bloom_176b()
        .to_string()
        .replace("\"n_layer\"", "\"num_hidden_layers\"")
        .replace("\"n_head\"", "\"num_attention_heads\"");
    assert_eq!(
        parse(&renamed, "bloom.json").parameter_count(),
        m.parameter_count()
    );
    let post = error(
        &with(
            &bloom_176b().to_string(),
            "apply_residual_connection_post_layernorm",
            json!(true),
        ),
        "apply_residual_connection_post_layernorm",
    );
    assert!(post.allowed.contains("false"), "{post}");
}

#[test]
fn rope_theta_and_norm_eps_are_read() {
    let m = parse(QWEN2_7B, "qwen2.json");
    assert_eq!((m.rope_theta, m.norm_eps), (1e6, 1e-6));
    let m = parse(MIXTRAL_8X7B, "mixtral.json");
    assert_eq!(m.rope_theta, 1e6);
    let m = parse(GPT2, "gpt2.json");
    assert_eq!(m.norm_eps, 1e-5);
    let m = parse(BERT_LARGE, "bert.json");
    assert_eq!(m.norm_eps, 1e-12);
    // transformers 5 keeps θ under rope_parameters.
    let v5 = with(
        &with(LLAMA2_7B, "rope_theta", Value::Null),
        "rope_parameters",
        json!({"rope_type": "default", "rope_theta": 500000.0}),
    );
    assert_eq!(parse(&v5, "x.json").rope_theta, 500_000.0);
    error(&with(LLAMA2_7B, "rms_norm_eps", json!(-1)), "rms_norm_eps");
    error(&with(LLAMA2_7B, "rope_theta", json!("big")), "rope_theta");
}

#[test]
fn rope_scaling_is_read_by_its_type() {
    use plait_spec::RopeScaling;
    // meta-llama/Llama-3.1-8B's config.json.
    let llama31 = json!({
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192, "rope_type": "llama3"
    });
    let m = parse(&with(LLAMA2_7B, "rope_scaling", llama31.clone()), "x.json");
    assert_eq!(
        m.rope_scaling,
        Some(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192
        })
    );
    // transformers 5 keeps it, with θ, under rope_parameters.
    let mut v5 = llama31;
    v5["rope_theta"] = json!(500000.0);
    let m = parse(
        &with(
            &with(LLAMA2_7B, "rope_theta", Value::Null),
            "rope_parameters",
            v5,
        ),
        "x.json",
    );
    assert!(matches!(m.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 8.0));
    assert_eq!(m.rope_theta, 500_000.0);
    // The released file: the same rescaling, and Llama 3.1 8B's 8.03 B parameters.
    let m = parse(
        include_str!("fixtures/hf/llama-3.1-8b.json"),
        "Llama-3.1-8B/config.json",
    );
    assert!(matches!(m.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 8.0));
    assert_eq!(m.parameter_count(), 8_030_261_248);
    // Older configs name it `type`; YaRN's original context defaults to the model's.
    let yarn = json!({"type": "yarn", "factor": 4.0});
    let m = parse(&with(QWEN2_7B, "rope_scaling", yarn), "x.json");
    assert_eq!(m.rope_scaling, Some(RopeScaling::yarn(4.0, 131072)));
    // DeepSeek's YaRN carries its band and temperature.
    let yarn = json!({"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
        "beta_fast": 16, "beta_slow": 2, "mscale": 1.0, "mscale_all_dim": 0.707});
    let m = parse(&with(QWEN2_7B, "rope_scaling", yarn), "x.json");
    assert_eq!(
        m.rope_scaling,
        Some(RopeScaling::Yarn {
            factor: 40.0,
            original_max_positions: 4096,
            beta_fast: 16.0,
            beta_slow: 2.0,
            mscale: Some(1.0),
            mscale_all_dim: Some(0.707),
            attention_factor: None,
            truncate: None,
        })
    );
    // `default`, null and absent are no rescaling; an unknown method is kept by name.
    let none = json!({"rope_type": "default"});
    assert_eq!(
        parse(&with(LLAMA2_7B, "rope_scaling", none), "x.json").rope_scaling,
        None
    );
    assert_eq!(
        parse(&with(LLAMA2_7B, "rope_scaling", Value::Null), "x.json").rope_scaling,
        None
    );
    let other = json!({"rope_type": "longrope", "short_factor": [1.0]});
    assert_eq!(
        parse(&with(LLAMA2_7B, "rope_scaling", other), "x.json").rope_scaling,
        Some(RopeScaling::Other {
            name: "longrope".into()
        })
    );
    // Bad numbers name their key.
    let bad = json!({"rope_type": "linear", "factor": 1e308});
    error(&with(LLAMA2_7B, "rope_scaling", bad), "rope_scaling.factor");
    let missing = json!({"rope_type": "llama3", "factor": 8.0});
    error(
        &with(LLAMA2_7B, "rope_scaling", missing),
        "rope_scaling.low_freq_factor",
    );
    error(&with(LLAMA2_7B, "rope_scaling", json!(3)), "rope_scaling");
}

/// nvidia/Nemotron-H-8B-Base-8K's config.json (the keys plait reads, as released; the
/// same shape as Megatron-Bridge's Nemotron-H 8B test fixture); also a fuzz seed.
fn nemotron_h_8b() -> Value {
    serde_json::from_str(NEMOTRON_H_8B).unwrap()
}

#[test]
fn nemotron_h_hybrid_layers_and_parameter_count() {
    let m = parse(&nemotron_h_8b().to_string(), "nemotron-h-8b/config.json");
    assert_eq!(m.name, "nemotron-h-8b");
    // 24 Mamba-2, 24 MLP and 4 attention layers, in the pattern's order.
    let kinds = m.block_kinds();
    assert_eq!(
        kinds.iter().map(|k| k.block).collect::<Vec<_>>(),
        [BlockKind::Mamba, BlockKind::Mlp, BlockKind::Attention]
    );
    assert_eq!(&m.kind_counts(0, 52)[..3], &[24, 24, 4]);
    assert_eq!(m.kind_counts(6, 2)[..3], [1, 0, 1]); // layers 6 (`M`) and 7 (`*`)
    assert_eq!(
        m.hybrid_pattern().as_deref(),
        Some("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")
    );
    assert_eq!(m.activation, plait_spec::Activation::Relu2);
    let mamba = m.mamba.unwrap();
    assert_eq!((mamba.d_inner(), mamba.in_proj_width()), (8192, 18560));
    // By hand: a Mamba-2 layer is in_proj 4096·(2·8192 + 2·8·128 + 128) = 76,021,760,
    // conv1d (8192 + 2·8·128)·4 + 10240 (bias) = 51,200, A_log, D and dt_bias 3·128, the
    // gated RMSNorm 8192, out_proj 8192·4096 = 33,554,432 and its pre-norm 4096:
    // 109,640,064; an MLP layer 2·4096·21504 + 4096 = 176,164,864; an attention layer
    // 4096·(32 + 2·8)·128 + 32·128·4096 + 4096 = 41,947,136; embedding and untied head
    // 2·131072·4096 = 1,073,741,824 and the final norm 4096. 24·109,640,064 +
    // 24·176,164,864 + 4·41,947,136 + 1,073,745,920 = 8,100,852,736.
    assert_eq!(kinds[0].block_params(), 109_640_064);
    assert_eq!(kinds[1].block_params(), 176_164_864);
    assert_eq!(kinds[2].block_params(), 41_947_136);
    assert_eq!(m.parameter_count(), 8_100_852_736);
    // NVIDIA publishes the model as "8B" (model card), a rounded figure: the count rounds
    // to it.
    let p = m.parameter_count() as f64 / 1e9;
    assert_eq!(p.round(), 8.0, "{p}");
    // The preset is the same model.
    let preset = plait_spec::model_preset("nemotron-h-8b").unwrap();
    assert_eq!(
        ModelSpec {
            name: preset.name.clone(),
            ..m.clone()
        },
        preset
    );
}

#[test]
fn nemotron_h_spellings_defaults_and_errors() {
    // NVIDIA's remote code spells some Mamba keys with a `mamba_` prefix; without
    // `mamba_num_heads` the heads follow from expand × hidden / head dim.
    let mut alt = nemotron_h_8b();
    let map = alt.as_object_mut().unwrap();
    for (old, new) in [
        ("n_groups", "mamba_n_groups"),
        ("conv_kernel", "mamba_d_conv"),
        ("chunk_size", "mamba_chunk_size"),
    ] {
        let v = map.remove(old).unwrap();
        map.insert(new.into(), v);
    }
    map.remove("mamba_num_heads");
    let m = parse(&alt.to_string(), "x.json");
    assert_eq!(m.parameter_count(), 8_100_852_736);
    // Chunk defaults to Megatron-LM's 128.
    let m = parse(
        &with(&nemotron_h_8b().to_string(), "chunk_size", Value::Null),
        "x.json",
    );
    assert_eq!(m.mamba.unwrap().chunk, 128);
    let base = nemotron_h_8b().to_string();
    // `E` (a MoE layer) needs the config's experts.
    let e = error(
        &with(&base, "hybrid_override_pattern", json!("MEM*-")),
        "hybrid_override_pattern",
    );
    assert!(
        e.problem.contains("mixture-of-experts") && e.problem.contains("n_routed_experts"),
        "{e}"
    );
    let e = error(
        &with(&base, "hybrid_override_pattern", json!("M-M*")),
        "hybrid_override_pattern",
    );
    assert!(e.problem.contains("num_hidden_layers is 52"), "{e}");
    error(
        &with(&base, "hybrid_override_pattern", Value::Null),
        "hybrid_override_pattern",
    );
    error(
        &with(&base, "mlp_hidden_act", json!("silu")),
        "mlp_hidden_act",
    );
    error(&with(&base, "n_groups", json!(3)), "n_groups");
    error(
        &with(&base, "ssm_state_size", Value::Null),
        "ssm_state_size",
    );
}

#[test]
fn nemotron_3_nano_moe_layers() {
    // nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 (preset `nemotron-3-nano-30b-a3b`, the
    // released config.json): 23 Mamba-2, 23 MoE (`E`) and 6 attention layers; 128 routed
    // squared-ReLU experts of 1,856, 6 per token, one shared expert of 3,712 (two expert
    // widths). Model card: 31.6 B total, about 3.6 B active with the embeddings.
    let m = plait_spec::model_preset("nemotron-3-nano-30b-a3b").unwrap();
    assert_eq!(
        m.hybrid_pattern().unwrap(),
        "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    );
    let moe = m.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k, moe.shared_experts), (128, 6, 2));
    // Sigmoid scores with an expert bias, renormalised over the top 6, scaled by 2.5.
    let router = m.router.unwrap();
    assert!(router.sigmoid && router.expert_bias && router.normalize_topk);
    assert_eq!((router.groups, router.scaling), (None, 2.5));
    assert_eq!(m.ffn_hidden, 1856);
    within_1_percent("nemotron-3-nano", m.parameter_count(), 31.6e9);
    let active = m.active_parameter_count() as f64;
    assert!((active / 3.6e9 - 1.0).abs() < 0.02, "{active}");
    let released = include_str!("../presets/nemotron-3-nano-30b-a3b.json");
    // A dense `-` layer beside the experts is an MLP of intermediate_size.
    let mixed = parse(
        &with(
            released,
            "hybrid_override_pattern",
            json!("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM-"),
        ),
        "n3.json",
    );
    let kinds = mixed.block_kinds();
    assert!(kinds
        .iter()
        .any(|k| k.moe.is_none() && k.ffn_hidden == 1856 && k.block == BlockKind::Mlp));
    // With no `E` layer at all the `-` layers stay dense MLPs (not MoE layers of the
    // config's experts) and write back as `-`.
    for pattern in ["M*--".repeat(13), "-".repeat(52)] {
        let dense = parse(
            &with(released, "hybrid_override_pattern", json!(pattern)),
            "n3-dense.json",
        );
        assert!(
            dense.block_kinds().iter().all(|k| k.moe.is_none()),
            "{pattern}"
        );
        assert_eq!(dense.hybrid_pattern().unwrap(), pattern);
    }
    // A latent width that is not a size is refused by name; a shared width that is not
    // whole expert widths too.
    error(
        &with(released, "moe_latent_size", json!("wide")),
        "moe_latent_size",
    );
    error(&with(released, "n_group", json!(8)), "n_group");
    error(
        &with(released, "moe_shared_expert_intermediate_size", json!(1000)),
        "moe_shared_expert_intermediate_size",
    );
}

#[test]
fn deepseek_latent_attention_and_dense_first_layers() {
    // deepseek-ai/DeepSeek-V3: 671 B parameters in the main model (the model card's 685 B
    // add the 14 B multi-token-prediction module, which transformers does not build).
    let v3 = json!({
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
        "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
        "vocab_size": 129280, "num_nextn_predict_layers": 1, "tie_word_embeddings": false
    });
    let m = parse(&v3.to_string(), "v3.json");
    let p = m.parameter_count() as f64 / 1e9;
    assert!((p / 671.0 - 1.0).abs() < 0.01, "{p}");
    // 37 B activated per token (model card), embedding and output matrices included.
    let active = m.active_parameter_count() as f64 / 1e9;
    assert!((active / 37.5 - 1.0).abs() < 0.03, "{active}");
    let kinds = m.block_kinds();
    assert!(kinds[0].moe.is_none() && kinds[0].ffn_hidden == 18432);
    assert_eq!(kinds[1].moe.unwrap().shared_experts, 1);
    assert_eq!(&m.kind_counts(0, 61)[..2], &[3, 58]);
    // Its router (as released: sigmoid scores, routing bias, 8 groups keeping 4, ×2.5).
    let mut routed = v3.clone();
    for (k, v) in [
        ("scoring_func", json!("sigmoid")),
        ("topk_method", json!("noaux_tc")),
        ("n_group", json!(8)),
        ("topk_group", json!(4)),
        ("norm_topk_prob", json!(true)),
        ("routed_scaling_factor", json!(2.5)),
    ] {
        routed[k] = v;
    }
    let r = parse(&routed.to_string(), "v3.json").router.unwrap();
    assert!(r.sigmoid && r.expert_bias && r.normalize_topk && r.group_score_top2);
    assert_eq!((r.groups, r.scaling), (Some((8, 4)), 2.5));
    routed["topk_method"] = json!("top3");
    error(&routed.to_string(), "topk_method");
    // deepseek-ai/DeepSeek-V2-Lite: 15.7 B, no query latent, two shared experts.
    let lite = json!({
        "model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": null,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "vocab_size": 102400
    });
    let m = parse(&lite.to_string(), "lite.json");
    let p = m.parameter_count() as f64 / 1e9;
    assert!((p / 15.7 - 1.0).abs() < 0.01, "{p}");
    // transformers' defaults: softmax over all experts, greedy top-k, not renormalised.
    let r = m.router.unwrap();
    assert!(!r.sigmoid && !r.expert_bias && !r.normalize_topk && r.groups.is_none());
    let mut bad = lite.clone();
    bad["num_experts_per_tok"] = json!(65);
    error(&bad.to_string(), "num_experts_per_tok");
    let mut bad = lite.clone();
    bad.as_object_mut().unwrap().remove("kv_lora_rank");
    error(&bad.to_string(), "kv_lora_rank");
}

#[test]
fn kimi_k2_is_deepseek_v3_shaped() {
    // moonshotai/Kimi-K2: "1T total parameters, 32B activated" (model card, rounded);
    // 64 heads, 384 routed experts, one dense first layer.
    let k2 = json!({
        "model_type": "kimi_k2", "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 384,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
        "vocab_size": 163840
    });
    let m = parse(&k2.to_string(), "k2.json");
    let total = m.parameter_count() as f64 / 1e12;
    assert!((total - 1.0).abs() < 0.05, "{total} T");
    let active = m.active_parameter_count() as f64 / 1e9;
    assert!((active / 32.0 - 1.0).abs() < 0.05, "{active} B");
    assert_eq!(&m.kind_counts(0, 61)[..2], &[1, 60]);
}

/// The error for `text` on `field` of its nested `object` (`attn_config`, `ffn_config`):
/// one line, the source named with the object.
fn nested_error(text: &str, object: &str, field: &str) {
    let err = plait_spec::model_from_hf_config(text, "cfg.json").expect_err(field);
    let line = err.to_string();
    assert!(!line.contains('\n'), "{line:?}");
    assert_eq!(err.field, field, "{line}");
    assert_eq!(err.source, format!("cfg.json ({object})"), "{line}");
}

/// mosaicml/mpt-7b config.json (the keys that shape the model).
fn mpt_7b() -> Value {
    json!({
        "architectures": ["MPTForCausalLM"], "model_type": "mpt",
        "attn_config": {"alibi": true, "alibi_bias_max": 8, "attn_impl": "torch",
            "attn_pdrop": 0, "attn_type": "multihead_attention", "attn_uses_sequence_id": false,
            "clip_qkv": null, "prefix_lm": false, "qk_ln": false, "softmax_scale": null},
        "d_model": 4096, "emb_pdrop": 0, "embedding_fraction": 1.0, "expansion_ratio": 4,
        "learned_pos_emb": true, "logit_scale": null, "max_seq_len": 2048, "n_heads": 32,
        "n_layers": 32, "no_bias": true, "norm_type": "low_precision_layernorm",
        "resid_pdrop": 0, "tokenizer_name": "EleutherAI/gpt-neox-20b",
        "torch_dtype": "bfloat16", "use_cache": false, "verbose": 0, "vocab_size": 50432
    })
}

#[test]
fn mpt_alibi_and_sizes() {
    let m = parse(&mpt_7b().to_string(), "mpt-7b/config.json");
    assert_eq!(m.family, Family::Gpt);
    assert_eq!(m.positions, Positions::Alibi);
    assert_eq!((m.ffn_hidden, m.kv_heads, m.max_positions), (16384, 32, 0));
    assert!(!m.qkv_bias && !m.linear_bias && m.tied_embeddings);
    // Model card: 6.7 B parameters (6,649,286,656 in the checkpoint; the count here adds
    // the norms' absent biases, 65 × 4,096).
    assert_eq!(m.parameter_count(), 6_649_286_656 + 65 * 4096);
    // mosaicml/mpt-30b: d_model 7168, 48 layers, 64 heads, 8K context; 29.96 B.
    let mut big = mpt_7b();
    for (k, v) in [
        ("d_model", json!(7168)),
        ("n_layers", json!(48)),
        ("n_heads", json!(64)),
        ("max_seq_len", json!(8192)),
    ] {
        big[k] = v;
    }
    within_1_percent(
        "mpt-30b",
        parse(&big.to_string(), "mpt-30b.json").parameter_count(),
        29.96e9,
    );
    // Grouped-query attention, RoPE instead of ALiBi, a gated MLP of its own width, and the
    // learned table when neither is on.
    let mut gqa = mpt_7b();
    gqa["attn_config"] = json!({"attn_type": "grouped_query_attention", "kv_n_heads": 8, "rope": true, "rope_theta": 500000});
    gqa["ffn_config"] = json!({"ffn_type": "mptglu", "ffn_hidden_size": 14336});
    let m = parse(&gqa.to_string(), "gqa.json");
    assert_eq!(
        (m.kv_heads, m.positions, m.ffn_hidden, m.rope_theta),
        (8, Positions::Rotary, 14336, 500_000.0)
    );
    assert_eq!(m.activation, plait_spec::Activation::SwiGlu);
    let mut learned = mpt_7b();
    learned["attn_config"] = json!({});
    let m = parse(&learned.to_string(), "learned.json");
    assert_eq!((m.positions, m.max_positions), (Positions::Learned, 2048));
    // What it cannot express is named, in the nested object it sits in.
    let mut moe = mpt_7b();
    moe["ffn_config"] = json!({"ffn_type": "mb_dmoe"});
    nested_error(&moe.to_string(), "ffn_config", "ffn_type");
    let mut odd = mpt_7b();
    odd["attn_config"] = json!({"attn_type": "grouped_query_attention", "kv_n_heads": 5});
    nested_error(&odd.to_string(), "attn_config", "kv_n_heads");
    error(
        &with(&mpt_7b().to_string(), "attn_config", json!(3)),
        "attn_config",
    );
    error(
        &with(&mpt_7b().to_string(), "expansion_ratio", json!(-1)),
        "expansion_ratio",
    );
}

#[test]
fn dbrx_every_layer_moe() {
    // databricks/dbrx-base config.json: "132B total parameters of which 36B parameters
    // are active on any input" (model card).
    let cfg = json!({
        "architectures": ["DbrxForCausalLM"], "model_type": "dbrx",
        "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "model_type": "", "rope_theta": 500000},
        "d_model": 6144, "emb_pdrop": 0.0,
        "ffn_config": {"ffn_hidden_size": 10752, "model_type": "", "moe_jitter_eps": 0.01,
            "moe_loss_weight": 0.05, "moe_num_experts": 16, "moe_top_k": 4},
        "initializer_range": 0.02, "max_seq_len": 32768, "n_heads": 48, "n_layers": 40,
        "output_router_logits": false, "resid_pdrop": 0.0, "router_aux_loss_coef": 0.05,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
        "vocab_size": 100352
    });
    let m = parse(&cfg.to_string(), "dbrx-base/config.json");
    assert_eq!(m.family, Family::Moe);
    let moe = m.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.top_k, m.kv_heads, m.rope_theta),
        (16, 4, 8, 500_000.0)
    );
    within_1_percent("dbrx", m.parameter_count(), 132e9);
    let active = m.active_parameter_count() as f64 / 1e9;
    assert!((active / 36.0 - 1.0).abs() < 0.02, "{active} B active");
    let mut bad = cfg.clone();
    bad["ffn_config"]["moe_top_k"] = json!(17);
    nested_error(&bad.to_string(), "ffn_config", "moe_top_k");
    let mut gelu = cfg.clone();
    gelu["ffn_config"]["ffn_act_fn"] = json!({"name": "gelu"});
    nested_error(&gelu.to_string(), "ffn_config", "ffn_act_fn");
}

#[test]
fn nemotron_3_super_latent_experts() {
    // nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16: 88 layers (40 Mamba-2, 40 MoE, 8
    // attention), 512 experts of 2688 at the latent width 1024, 22 routed, one shared
    // expert of 5376 on the hidden state. The released checkpoint holds 120.67 B weights
    // besides its MTP module, 12.77 B of them active per token (the experts a token does
    // not use hold 107.90 B).
    let m = plait_spec::model_preset("nemotron-3-super-120b-a12b").unwrap();
    let moe = m.moe.unwrap();
    assert_eq!(
        (moe.experts, moe.top_k, moe.shared_experts, moe.latent),
        (512, 22, 2, Some(1024))
    );
    within_1_percent("nemotron-3-super", m.parameter_count(), 120.669e9);
    let active = m.active_parameter_count() as f64;
    assert!((active / 12.770e9 - 1.0).abs() < 0.01, "{active}");
    // The experts' GEMMs run at the latent width; the projections to and from it are
    // replicated over tp, on each tp rank's share of the tokens.
    let moe_block = m
        .block_kinds()
        .into_iter()
        .find(|k| k.moe.is_some())
        .unwrap();
    let g = moe_block.block_gemms(8192, plait_spec::Shard::new(2, 8));
    assert_eq!((g.mlp[0].k, g.mlp[1].n), (1024, 1024));
    let [down, up] = g.latent.unwrap();
    assert_eq!((down.m, down.n, down.k), (4096, 1024, 4096));
    assert_eq!((up.m, up.n, up.k), (4096, 4096, 1024));
}

#[test]
fn nemotron_3_multi_token_prediction_module() {
    // Super's config.json names one MTP module of an attention and a MoE block
    // (`mtp_hybrid_override_pattern` "*E"); Megatron Bridge runs its passes on one shared
    // module, in bf16, unless the config says otherwise.
    let m = plait_spec::model_preset("nemotron-3-super-120b-a12b").unwrap();
    assert_eq!((m.mtp_layers, m.mtp_pattern.as_deref()), (1, Some("*E")));
    assert!(m.mtp_shared && m.mtp_bf16);
    let kinds = m.block_kinds();
    let blocks: Vec<(BlockKind, bool)> = m
        .mtp_kinds()
        .unwrap()
        .into_iter()
        .map(|k| (kinds[k].block, kinds[k].moe.is_some()))
        .collect();
    assert_eq!(
        blocks,
        [(BlockKind::Attention, false), (BlockKind::Mlp, true)]
    );
    let released = include_str!("../presets/nemotron-3-super-120b-a12b.json");
    // transformers' spelling: a list of layer types, by default attention then MoE.
    let listed = with(
        &with(released, "mtp_hybrid_override_pattern", Value::Null),
        "mtp_layers_block_type",
        json!(["linear_attention", "moe"]),
    );
    assert_eq!(parse(&listed, "x.json").mtp_pattern.as_deref(), Some("ME"));
    let default = with(released, "mtp_hybrid_override_pattern", Value::Null);
    assert_eq!(parse(&default, "x.json").mtp_pattern.as_deref(), Some("*E"));
    let unshared = with(
        &with(released, "mtp_use_repeated_layer", json!(false)),
        "keep_mtp_spec_in_bf16",
        json!(false),
    );
    let u = parse(&unshared, "x.json");
    assert!(!u.mtp_shared && !u.mtp_bf16);
    // Without MTP layers none of it applies.
    let none = parse(
        &with(released, "num_nextn_predict_layers", json!(0)),
        "x.json",
    );
    assert_eq!(
        (none.mtp_layers, none.mtp_pattern, none.mtp_shared),
        (0, None, false)
    );
    // A pattern naming a kind the model lacks (no dense `-` layer in Super) or no kind at
    // all, or a layer type transformers does not know, is refused by name.
    let e = error(
        &with(released, "mtp_hybrid_override_pattern", json!("*-")),
        "mtp_hybrid_override_pattern",
    );
    assert!(e.problem.contains("MTP layer 1"), "{e}");
    error(
        &with(released, "mtp_hybrid_override_pattern", json!("*X")),
        "mtp_hybrid_override_pattern",
    );
    error(
        &with(
            &default,
            "mtp_layers_block_type",
            json!(["full_attention", "dense"]),
        ),
        "mtp_layers_block_type",
    );
}
