//! Every name an export writes is the engine's own (lists copied from the upstream files the
//! exporters cite), and Megatron-LM's model flags carry the config's RoPE θ and norm ε.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use plait_planner::export::{export, Engine};
use plait_planner::Plan;
use plait_spec::{
    cluster_preset, model_preset, CpComm, Dtype, ModelSpec, ParallelConfig, Recompute, StageMap,
    TrainSpec,
};

use common::*;

// The engines' own names, copied from the files the exporters cite.

/// Megatron-LM d98e8a6: `megatron/training/arguments.py` and the dataclasses it turns into
/// flags (`TransformerConfig`, `ModelParallelConfig`, `TrainingConfig`,
/// `DistributedInitConfig`, `CheckpointConfig`).
const MEGATRON_FLAGS: &[&str] = &[
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--kv-channels",
    "--ffn-hidden-size",
    "--seq-length",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--swiglu",
    "--normalization",
    "--rotary-base",
    "--use-rope-scaling",
    "--rope-scaling-factor",
    "--rotary-seq-len-interpolation-factor",
    "--norm-epsilon",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--untie-embeddings-and-output-weights",
    "--num-experts",
    "--moe-router-topk",
    "--moe-grouped-gemm",
    "--moe-token-dispatcher-type",
    "--moe-flex-dispatcher-backend",
    "--moe-expert-capacity-factor",
    "--moe-pad-expert-input-to-capacity",
    "--num-distributed-optimizer-instances",
    "--hidden-dropout",
    "--attention-dropout",
    "--attention-backend",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--context-parallel-size",
    "--cp-comm-type",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--qk-layernorm",
    "--moe-ffn-hidden-size",
    "--moe-layer-freq",
    "--moe-shared-expert-intermediate-size",
    "--moe-latent-size",
    "--mtp-num-layers",
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--ckpt-format",
    "--overlap-grad-reduce",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--bf16",
    "--fp16",
    "--fp8-format",
    "--fp8-recipe",
    "--overlap-moe-expert-parallel-comm",
    "--fp8-param-gather",
    "--reuse-grad-buf-for-mxfp8-param-ag",
    // Hybrids (arguments.py `_add_experimental_args` and `--squared-relu`; the Mamba sizes
    // are `TransformerConfig` fields).
    "--hybrid-layer-pattern",
    "--spec",
    "--squared-relu",
    "--mamba-num-heads",
    "--mamba-head-dim",
    "--mamba-num-groups",
    "--mamba-state-dim",
];

/// DeepSpeed 38327e0: constants.py, zero/config.py, config.py `get_pipeline_config`,
/// activation_checkpointing/config.py, tensor_parallel/config.py.
const DEEPSPEED_KEYS: &[&str] = &[
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "bf16.enabled",
    "fp16.enabled",
    "fp16.loss_scale",
    "zero_optimization.stage",
    "zero_optimization.overlap_comm",
    "zero_optimization.mics_shard_size",
    "pipeline.stages",
    "pipeline.partition",
    "pipeline.activation_checkpoint_interval",
    "activation_checkpointing.partition_activations",
    "activation_checkpointing.contiguous_memory_optimization",
    "activation_checkpointing.cpu_checkpointing",
    "tensor_parallel.autotp_size",
];

/// torchtitan v0.2.2: `torchtitan/config/job_config.py` (only the fields plait may write).
const TORCHTITAN_KEYS: &[&str] = &[
    "job.description",
    "model.name",
    "model.flavor",
    "model.converters",
    "training.local_batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "training.max_norm",
    "training.mixed_precision_param",
    "training.mixed_precision_reduce",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.context_parallel_rotate_method",
    "parallelism.expert_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.module_fqns_per_model_part",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
    "quantize.linear.float8.filter_fqns",
];

/// torchtitan 0.3.0: `config/configs.py` (`TrainingConfig`, `ParallelismConfig`), the
/// `Trainer.Config` fields `activation_checkpoint` (`distributed/activation_checkpoint.py`) and
/// `model_spec` (`model_registry(flavor, converters=…)` in `models/llama3/__init__.py`), as
/// the test reader names them.
const TORCHTITAN_03_NAMES: &[&str] = &[
    "recipe",
    "flavor",
    "converter",
    "training.local_batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "training.max_norm",
    "training.mixed_precision_param",
    "training.mixed_precision_reduce",
    "training.disable_cuda_graphs",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.enable_sequence_parallel",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
    "activation_checkpoint",
];

/// torchtitan 0.3.0's llama3 recipes (`models/llama3/config_registry.py`).
const TORCHTITAN_03_RECIPES: &[&str] = &["llama3_8b", "llama3_70b", "llama3_405b"];

fn json_keys(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
    if let Some(map) = v.as_object() {
        for (k, x) in map {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if x.is_object() {
                json_keys(&key, x, out);
            } else {
                out.insert(key);
            }
        }
    }
}

fn toml_keys(prefix: &str, v: &toml::Value, out: &mut BTreeSet<String>) {
    if let Some(map) = v.as_table() {
        for (k, x) in map {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if x.is_table() {
                toml_keys(&key, x, out);
            } else {
                out.insert(key);
            }
        }
    }
}

#[test]
fn every_emitted_name_is_the_engines_own() {
    let mut cases = vec![
        gpt3(),
        llama3_70b(),
        llama3_70b_zero(1),
        llama2_7b(),
        llama2_7b_pp4(vec![8, 6, 10, 8], vec![0; 4]),
        llama2_7b_pp4(vec![6, 9, 9, 8], vec![0; 4]),
        llama2_7b_pp4(vec![8; 4], vec![8; 4]),
        llama2_7b_pp4(vec![8; 4], vec![3; 4]),
        mixtral_ep(),
        mixtral_capacity(),
        llama3_8b_cp(),
        llama3_8b_cp_comm(CpComm::A2a),
        llama3_8b_cp_comm(CpComm::Allgather),
        llama3_8b_hybrid(1),
        llama3_8b_hybrid(3),
    ];
    let mut z3 = llama2_7b();
    z3.plan.config.zero = 3;
    cases.push(z3);
    let mut fp8 = llama2_7b();
    fp8.train.dtype = Dtype::Fp8;
    cases.push(fp8);
    let mut fp16 = llama2_7b();
    fp16.train.dtype = Dtype::Fp16;
    cases.push(fp16);
    let mut selective = llama2_7b();
    selective.plan.config.recompute = Recompute::Selective;
    cases.push(selective);
    cases.push(pp4("nemotron-h-8b"));
    let mut seen = [0usize; 4];
    for k in &cases {
        if let Ok(files) = run(Engine::Megatron, k) {
            for flag in megatron_flags(file(&files, "megatron_args.sh")).keys() {
                assert!(MEGATRON_FLAGS.contains(&flag.as_str()), "{flag}");
            }
            seen[0] += 1;
        }
        if let Ok(files) = run(Engine::DeepSpeed, k) {
            let v = serde_json::from_str(file(&files, "ds_config.json")).unwrap();
            let mut keys = BTreeSet::new();
            json_keys("", &v, &mut keys);
            for key in keys {
                assert!(DEEPSPEED_KEYS.contains(&key.as_str()), "{key}");
            }
            seen[1] += 1;
        }
        if let Ok(files) = run(Engine::Torchtitan, k) {
            let v = torchtitan_py(file(&files, "torchtitan_config.py"));
            for key in v.settings.keys() {
                assert!(TORCHTITAN_03_NAMES.contains(&key.as_str()), "{key}");
            }
            assert!(TORCHTITAN_03_RECIPES.contains(&v.get("recipe").unwrap()));
            seen[3] += 1;
        }
        if let Ok(files) = run(Engine::TorchtitanToml, k) {
            let v = toml::from_str(file(&files, "torchtitan.toml")).unwrap();
            let mut keys = BTreeSet::new();
            toml_keys("", &v, &mut keys);
            for key in keys {
                assert!(TORCHTITAN_KEYS.contains(&key.as_str()), "{key}");
            }
            seen[2] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n >= 4), "{seen:?}");
}

/// `model` planned as dp8 on one DGX H100 (batch 64 × 4096) at ZeRO `zero`, with its
/// train spec: the plan the single-model export tests write.
fn dp8_plan(model: &ModelSpec, zero: u8) -> (Plan, TrainSpec) {
    let c = ParallelConfig {
        dp: 8,
        mbs: 1,
        zero,
        ..ParallelConfig::default()
    };
    let t = TrainSpec::new(64, 4096);
    let cluster = cluster_preset("dgx-h100").unwrap();
    c.validate(model, &t, c.gpus()).unwrap();
    let d = plait_cost::device_for(&cluster, t.dtype).unwrap();
    let est = plait_cost::estimate(model, &cluster, &t, &c, &d).unwrap();
    let plan = Plan::new(
        c,
        StageMap::uniform(model.layers, &c),
        c.microbatches(&t),
        est.clone(),
        est.iteration_time_s,
    );
    (plan, t)
}

/// The model flags of a Megatron export carry the config's RoPE θ and norm ε.
fn exported_theta_eps(model: ModelSpec) -> (BTreeMap<String, String>, ModelSpec) {
    let (plan, t) = dp8_plan(&model, 1);
    let files = export(Engine::Megatron, &plan, &model, &t).unwrap();
    (megatron_flags(file(&files, "megatron_args.sh")), model)
}

#[test]
fn megatron_exports_carry_the_rope_scaling_or_refuse_it() {
    use plait_spec::RopeScaling;
    let llama31 = |scaling| ModelSpec {
        rope_scaling: Some(scaling),
        ..model_preset("llama2-7b").unwrap()
    };
    // Llama 3.1's rescaling, as Megatron fixes its bounds.
    let (flags, _) = exported_theta_eps(llama31(RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_positions: 8192,
    }));
    assert!(flags.contains_key("--use-rope-scaling"));
    assert_eq!(flags["--rope-scaling-factor"].parse::<f64>().unwrap(), 8.0);
    let (flags, _) = exported_theta_eps(llama31(RopeScaling::Linear { factor: 4.0 }));
    assert_eq!(flags["--rotary-seq-len-interpolation-factor"], "4");
    // What Megatron's flags cannot say is refused, naming it.
    let refused = |scaling, needle: &str| {
        let k = Case {
            model: llama31(scaling),
            ..llama2_7b()
        };
        let err = run(Engine::Megatron, &k).unwrap_err();
        assert!(err.contains(needle), "{err}");
    };
    refused(
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 2.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192,
        },
        "fixes them at 1, 4 and 8192",
    );
    // YaRN outside MLA: GPT-OSS's (factor 32 over 4096 positions, band not rounded).
    let yarn = |attention_factor, truncate| RopeScaling::Yarn {
        factor: 32.0,
        original_max_positions: 4096,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: None,
        mscale_all_dim: None,
        attention_factor,
        truncate,
    };
    let (flags, _) = exported_theta_eps(llama31(yarn(None, Some(false))));
    assert_eq!(flags["--position-embedding-type"], "yarn");
    assert_eq!(flags["--rotary-scaling-factor"], "32");
    assert_eq!(flags["--yarn-original-max-position-embeddings"], "4096");
    assert_eq!(flags["--yarn-beta-fast"], "32");
    assert!(flags.contains_key("--no-yarn-correction-range-round-to-int"));
    assert!(!flags.contains_key("--mscale"));
    refused(yarn(Some(0.8), None), "attention_factor");
    refused(RopeScaling::Linear { factor: 2.5 }, "not an integer");
    // The Llama 3 presets are the herd paper's, Llama 3.1.
    for name in ["llama3-8b", "llama3-70b", "llama3-405b"] {
        let m = model_preset(name).unwrap();
        assert!(
            matches!(m.rope_scaling, Some(RopeScaling::Llama3 { factor, .. }) if factor == 8.0),
            "{name}"
        );
    }
}

#[test]
fn megatron_exports_carry_rope_theta_and_norm_epsilon() {
    // Llama 3: θ = 500,000 (Dubey et al. 2024), RMSNorm ε = 1e-5.
    let (flags, _) = exported_theta_eps(model_preset("llama3-8b").unwrap());
    assert_eq!(flags["--rotary-base"].parse::<u64>().unwrap(), 500_000);
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-5);
    // Qwen2.5-7B's config.json: θ = 10^6, ε = 1e-6.
    let qwen25 = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 131072, "use_sliding_window": false, "tie_word_embeddings": false,
        "hidden_act": "silu", "torch_dtype": "bfloat16"
    });
    let m =
        plait_spec::model_from_hf_config(&qwen25.to_string(), "Qwen2.5-7B/config.json").unwrap();
    let (flags, _) = exported_theta_eps(m);
    assert_eq!(flags["--rotary-base"].parse::<u64>().unwrap(), 1_000_000);
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-6);
    // Learned positions write no θ; a fractional θ has no Megatron flag.
    let (flags, _) = exported_theta_eps(model_preset("gpt-1.7b").unwrap());
    assert!(!flags.contains_key("--rotary-base"));
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-5);
    let odd = ModelSpec {
        rope_theta: 10_000.5,
        ..model_preset("llama2-7b").unwrap()
    };
    let k = Case {
        model: odd,
        ..llama2_7b()
    };
    let err = run(Engine::Megatron, &k).unwrap_err();
    assert!(err.contains("--rotary-base"), "{err}");
}

/// The torchtitan 0.2.2 TOML export of `model` on 8 GPUs, or the export's refusal.
fn torchtitan_toml(model: ModelSpec) -> Result<String, String> {
    let (plan, t) = dp8_plan(&model, 3);
    export(Engine::TorchtitanToml, &plan, &model, &t)
        .map(|files| file(&files, "torchtitan.toml").to_string())
        .map_err(|e| e.to_string())
}

#[test]
fn torchtitan_exports_rope_as_the_model_does() {
    use plait_spec::RopeScaling;
    // torchtitan 0.2.2's llama3 always applies a RoPE scaling (Llama 3.1's by default): the
    // stock 8B flavor is Llama 3.1 8B, so the preset (Llama 3.1) runs on it.
    let llama31 = model_preset("llama3-8b").unwrap();
    let toml = torchtitan_toml(llama31.clone()).unwrap();
    assert!(toml.contains("flavor = \"8B\""), "{toml}");
    // Llama 3 8B (no rescaling) has the same shape but needs its own flavor, with the
    // scaling set to factor 1 (every frequency kept).
    let llama3 = ModelSpec {
        rope_scaling: None,
        ..llama31.clone()
    };
    let toml = torchtitan_toml(llama3).unwrap();
    assert!(!toml.contains("flavor = \"8B\""), "{toml}");
    assert!(toml.contains("rope_theta=500000"), "{toml}");
    assert!(toml.contains("RoPEScalingArgs(scaling_factor=1,"), "{toml}");
    // Llama 2 (θ = 10000, no scaling) likewise.
    let toml = torchtitan_toml(model_preset("llama2-7b").unwrap()).unwrap();
    assert!(
        toml.contains("rope_theta=10000, rope_scaling_args=RoPEScalingArgs(scaling_factor=1,"),
        "{toml}"
    );
    // Another method is refused by name.
    let yarn = ModelSpec {
        rope_scaling: Some(RopeScaling::yarn(40.0, 4096)),
        ..llama31
    };
    let err = torchtitan_toml(yarn).unwrap_err();
    assert!(
        err.contains("RoPE scaling") && err.contains("Yarn"),
        "{err}"
    );
}

/// The Megatron export of `model` on 8 GPUs (dp8), or its refusal.
fn megatron_export(model: ModelSpec) -> Result<BTreeMap<String, String>, String> {
    let (plan, t) = dp8_plan(&model, 1);
    export(Engine::Megatron, &plan, &model, &t)
        .map(|files| megatron_flags(file(&files, "megatron_args.sh")))
        .map_err(|e| e.to_string())
}

fn hf(json: serde_json::Value) -> ModelSpec {
    plait_spec::model_from_hf_config(&json.to_string(), "config.json").unwrap()
}

#[test]
fn megatron_exports_build_the_model_the_config_describes_or_refuse() {
    use plait_spec::{BlockRun, QkNorm};
    // Qwen3: RMSNorm on each head's q and k (`--qk-layernorm`).
    let qwen3 = hf(serde_json::json!({
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": false, "hidden_act": "silu"
    }));
    assert_eq!(qwen3.qk_norm, Some(QkNorm::PerHead));
    let f = megatron_export(qwen3.clone()).unwrap();
    assert!(f.contains_key("--qk-layernorm"), "{f:?}");
    // Dense layers among MoE ones (DeepSeek's first_k_dense_replace, Qwen3-MoE's
    // mlp_only_layers): the dense width in --ffn-hidden-size, the experts' in
    // --moe-ffn-hidden-size, which layers are MoE in --moe-layer-freq; shared experts by
    // their width; MTP layers.
    let moe = ModelSpec {
        moe: Some(plait_spec::MoeSpec {
            experts: 8,
            top_k: 2,
            shared_experts: 1,
            latent: None,
        }),
        ffn_hidden: 1024,
        block_runs: vec![
            BlockRun {
                count: 2,
                kind: Default::default(),
                window: None,
                dense_ffn: Some(12288),
                chunk: None,
            },
            BlockRun {
                count: 34,
                kind: Default::default(),
                window: None,
                dense_ffn: None,
                chunk: None,
            },
        ],
        mtp_layers: 1,
        mtp_pattern: None,
        mtp_shared: false,
        mtp_bf16: false,
        ..qwen3.clone()
    };
    let f = megatron_export(moe.clone()).unwrap();
    assert_eq!(f["--ffn-hidden-size"], "12288");
    assert_eq!(f["--moe-ffn-hidden-size"], "1024");
    let freq = f["--moe-layer-freq"].trim_matches('"');
    assert_eq!(freq, format!("[0,0,{}]", vec!["1"; 34].join(",")));
    assert_eq!(f["--moe-shared-expert-intermediate-size"], "1024");
    assert_eq!(f["--mtp-num-layers"], "1");
    // What Megatron's flags cannot say, or the export does not write yet, is refused.
    let olmo2 = ModelSpec {
        qk_norm: Some(QkNorm::FullWidth),
        ..qwen3.clone()
    };
    assert!(megatron_export(olmo2).unwrap_err().contains("full width"));
    let windowed = ModelSpec {
        attention_window: Some(1024),
        attention_chunk: None,
        ..qwen3.clone()
    };
    assert!(megatron_export(windowed)
        .unwrap_err()
        .contains("sliding-window"));
    // A window as long as the sequence is full attention.
    let long_window = ModelSpec {
        attention_window: Some(4096),
        attention_chunk: None,
        ..qwen3.clone()
    };
    assert!(megatron_export(long_window).is_ok());
    // Multi-latent attention with DeepSeek-V3's router and YaRN (Megatron-LM d98e8a6
    // parses these flags in python/tests/test_engine_exports.py).
    let router = plait_spec::RouterSpec {
        sigmoid: true,
        expert_bias: true,
        groups: Some((4, 1)),
        group_score_top2: true,
        normalize_topk: true,
        scaling: 2.5,
    };
    let yarn = |beta_fast: f64| plait_spec::RopeScaling::Yarn {
        factor: 40.0,
        original_max_positions: 4096,
        beta_fast,
        beta_slow: 1.0,
        mscale: Some(1.0),
        mscale_all_dim: Some(1.0),
        attention_factor: None,
        truncate: None,
    };
    let deepseek = ModelSpec {
        mla: Some(plait_spec::MlaSpec {
            q_lora_rank: 1536,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
        }),
        qk_norm: None,
        router: Some(router),
        rope_scaling: Some(yarn(32.0)),
        ..moe
    };
    let f = megatron_export(deepseek.clone()).unwrap();
    for flag in [
        "--multi-latent-attention",
        "--qk-layernorm",
        "--moe-router-enable-expert-bias",
    ] {
        assert!(f.contains_key(flag), "{flag}: {f:?}");
    }
    assert_eq!(f["--q-lora-rank"], "1536");
    assert_eq!(f["--rope-type"], "yarn");
    assert_eq!(f["--rotary-scaling-factor"], "40");
    assert_eq!(f["--mscale-all-dim"], "1");
    assert_eq!(f["--moe-router-score-function"], "sigmoid");
    assert_eq!(f["--moe-router-group-topk"], "1");
    assert_eq!(f["--moe-router-topk-scaling-factor"], "2.5");
    // What Megatron's MLA and router cannot do as the model does is refused by name.
    let refusal = |m: ModelSpec| megatron_export(m).unwrap_err();
    let other_beta = ModelSpec {
        rope_scaling: Some(yarn(16.0)),
        ..deepseek.clone()
    };
    assert!(refusal(other_beta).contains("beta_fast 16"));
    let unnormalised = ModelSpec {
        router: Some(plait_spec::RouterSpec {
            normalize_topk: false,
            ..router
        }),
        ..deepseek.clone()
    };
    assert!(refusal(unnormalised).contains("unnormalised sigmoid"));
    // DeepSeek-V2's group score (each group's best expert), at top 2 of 1 kept group.
    let v2_groups = ModelSpec {
        router: Some(plait_spec::RouterSpec {
            group_score_top2: false,
            ..router
        }),
        ..deepseek
    };
    assert!(refusal(v2_groups).contains("group"));
}

#[test]
fn megatron_exports_nemotron_3_super_with_its_latent_experts() {
    let f = megatron_export(model_preset("nemotron-3-super-120b-a12b").unwrap()).unwrap();
    assert_eq!(f["--moe-latent-size"], "1024");
    assert_eq!(f["--moe-shared-expert-intermediate-size"], "5376");
    assert_eq!(f["--moe-router-topk"], "22");
}

#[test]
fn megatron_exports_nemotron_3_with_its_router() {
    // Nemotron 3 Nano routes with sigmoid scores and an expert bias, its top 6 scaled by 2.5
    // (Megatron Bridge `Nemotron3NanoProvider`); without the flags Megatron would build
    // its default softmax router.
    let f = megatron_export(model_preset("nemotron-3-nano-30b-a3b").unwrap()).unwrap();
    assert_eq!(f["--moe-router-score-function"], "sigmoid");
    assert!(f.contains_key("--moe-router-enable-expert-bias"), "{f:?}");
    assert_eq!(f["--moe-router-topk-scaling-factor"], "2.5");
    assert_eq!(f["--moe-router-topk"], "6");
}

#[test]
fn megatron_exports_the_dispatcher_the_plan_was_costed_with() {
    // Mixtral 8x7B at ep 8: the all-to-all by default, Megatron-Core's flex dispatcher over
    // HybridEP where the plan has it; an engine without it refuses the plan.
    let model = model_preset("mixtral-8x7b").unwrap();
    let flags = |dispatcher: plait_spec::MoeDispatcher| {
        let t = TrainSpec::new(64, 4096);
        let mut c: ParallelConfig = "dp8 ep8 mbs1 zero1".parse().unwrap();
        c.moe_dispatcher = dispatcher;
        let plan = plan_on("dgx-h100", &model, &t, c);
        let refused = export(Engine::DeepSpeed, &plan, &model, &t).err();
        let files = export(Engine::Megatron, &plan, &model, &t).unwrap();
        (megatron_flags(file(&files, "megatron_args.sh")), refused)
    };
    let (f, refused) = flags(plait_spec::MoeDispatcher::AllToAll);
    assert_eq!(f["--moe-token-dispatcher-type"], "alltoall");
    assert!(!f.contains_key("--moe-flex-dispatcher-backend"));
    assert!(refused.is_none(), "{refused:?}");
    let (f, refused) = flags(plait_spec::MoeDispatcher::HybridEp);
    assert_eq!(f["--moe-token-dispatcher-type"], "flex");
    assert_eq!(f["--moe-flex-dispatcher-backend"], "hybridep");
    let refused = refused
        .expect("deepspeed has no flex dispatcher")
        .to_string();
    assert!(refused.contains("hybridep"), "{refused}");
}
