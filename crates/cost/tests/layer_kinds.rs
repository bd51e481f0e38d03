//! Models whose blocks are not all alike: each block is costed by its own kind.

use plait_cost::estimate::{layer_costs, rank_block_layers};
use plait_cost::{comm::Groups, device_for, estimate, layer::Workload};
use plait_spec::{
    cluster_preset, model_preset, BlockKind, BlockRun, ParallelConfig, Recompute, StageMap,
    TrainSpec,
};

fn llama_with(runs: Vec<BlockRun>) -> plait_spec::ModelSpec {
    plait_spec::ModelSpec {
        block_runs: runs,
        ..model_preset("llama3-8b").unwrap()
    }
}

#[test]
fn runs_of_default_blocks_cost_what_a_uniform_model_costs() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let t = TrainSpec::new(256, 8192);
    let c = ParallelConfig {
        dp: 8,
        tp: 4,
        pp: 4,
        sp: true,
        ..ParallelConfig::default()
    };
    let uniform = model_preset("llama3-8b").unwrap();
    let runs = llama_with(vec![
        BlockRun {
            kind: plait_spec::BlockKind::Transformer,
            count: 10,
            window: None,
            dense_ffn: None,
            chunk: None,
        },
        BlockRun {
            kind: plait_spec::BlockKind::Transformer,
            count: 22,
            window: None,
            dense_ffn: None,
            chunk: None,
        },
    ]);
    let a = estimate(&uniform, &cluster, &t, &c, &d).unwrap();
    let b = estimate(&runs, &cluster, &t, &c, &d).unwrap();
    assert_eq!(a.iteration_time_s, b.iteration_time_s);
    assert_eq!(a.peak_memory_bytes, b.peak_memory_bytes);
}

#[test]
fn each_stage_costs_the_blocks_it_holds() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let t = TrainSpec::new(256, 8192);
    let c = ParallelConfig {
        dp: 16,
        pp: 2,
        ..ParallelConfig::default()
    };
    // The first 16 blocks attend over a 512-token window, the last 16 over all 8192.
    let m = llama_with(vec![
        BlockRun {
            kind: plait_spec::BlockKind::Transformer,
            count: 16,
            window: Some(512),
            dense_ffn: None,
            chunk: None,
        },
        BlockRun {
            kind: plait_spec::BlockKind::Transformer,
            count: 16,
            window: None,
            dense_ffn: None,
            chunk: None,
        },
    ]);
    let e = estimate(&m, &cluster, &t, &c, &d).unwrap();
    let (s0, s1) = (&e.stages[0], &e.stages[1]);
    // Same GEMMs; the windowed stage does much less attention.
    assert!(
        s0.forward_s < 0.9 * s1.forward_s,
        "{} vs {}",
        s0.forward_s,
        s1.forward_s
    );
    // The model's total lies between the all-windowed and the all-full models.
    let all_local = llama_with(vec![BlockRun {
        kind: plait_spec::BlockKind::Transformer,
        count: 32,
        window: Some(512),
        dense_ffn: None,
        chunk: None,
    }]);
    let all_full = model_preset("llama3-8b").unwrap();
    let lo = estimate(&all_local, &cluster, &t, &c, &d)
        .unwrap()
        .iteration_time_s;
    let hi = estimate(&all_full, &cluster, &t, &c, &d)
        .unwrap()
        .iteration_time_s;
    assert!(
        lo < e.iteration_time_s && e.iteration_time_s < hi,
        "{lo} {} {hi}",
        e.iteration_time_s
    );
    // Rank 1's layers are the 16 full-attention blocks.
    let g = Groups::new(&cluster, &c);
    let w = Workload::new(&c, &t);
    let costs = layer_costs(&m, &d, &g, &w);
    let map = StageMap::uniform(m.layers, &c);
    let r1 = rank_block_layers(&m.kind_runs(), &costs, &costs, &map, 1, 2);
    assert_eq!(r1.len(), 1);
    assert_eq!(r1[0].1, 16.0);
    assert_eq!(r1[0].0, costs.kinds[1]);
}

#[test]
fn dense_blocks_among_moe_ones_hold_their_own_parameters() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let t = TrainSpec::new(256, 4096);
    let c = ParallelConfig {
        dp: 8,
        pp: 4,
        recompute: Recompute::Full,
        ..ParallelConfig::default()
    };
    let moe = model_preset("mixtral-8x7b").unwrap();
    // The first 8 blocks dense (DeepSeek's `first_k_dense_replace` pattern).
    let mixed = plait_spec::ModelSpec {
        block_runs: vec![
            BlockRun {
                kind: plait_spec::BlockKind::Transformer,
                count: 8,
                window: None,
                dense_ffn: Some(14336),
                chunk: None,
            },
            BlockRun {
                kind: plait_spec::BlockKind::Transformer,
                count: 24,
                window: None,
                dense_ffn: None,
                chunk: None,
            },
        ],
        ..moe.clone()
    };
    assert!(mixed.parameter_count() < moe.parameter_count());
    let e = estimate(&mixed, &cluster, &t, &c, &d).unwrap();
    let m0 = &e.stages[0].memory;
    let m1 = &e.stages[1].memory;
    // Stage 0 holds the dense blocks: far fewer weights than the MoE stage after it, whose
    // eight experts per block all sit on each GPU (no expert parallelism).
    assert!(
        m0.weights_bytes < 0.5 * m1.weights_bytes,
        "{} vs {}",
        m0.weights_bytes,
        m1.weights_bytes
    );
}

#[test]
fn latent_attention_and_shared_experts_are_costed() {
    // DeepSeek-V2-Lite's shape: no query latent, 64 routed + 2 shared experts, one dense
    // first layer.
    let cfg = r#"{"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
        "num_attention_heads": 16, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 10944,
        "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "vocab_size": 102400}"#;
    let m = plait_spec::model_from_hf_config(cfg, "lite.json").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let t = TrainSpec::new(128, 4096);
    let at = |tp: u64| {
        let c = ParallelConfig {
            dp: 8 / tp,
            tp,
            ep: 8 / tp,
            sp: tp > 1,
            ..ParallelConfig::default()
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let (one, two) = (at(1), at(2));
    assert!(one.iteration_time_s.is_finite() && one.fits);
    // Model FLOPs count the latent projections: 6 · active parameters · tokens within 15 %
    // (attention scores add the rest).
    let six_n_d = 6.0 * m.active_parameter_count() as f64 * 128.0 * 4096.0;
    let ratio = one.model_flops_per_iteration / six_n_d;
    assert!((1.0..1.4).contains(&ratio), "{ratio}");
    // With tp 2 the shared experts' own MLP adds tensor-parallel traffic.
    assert!(two.breakdown.tp_comm_s > 0.0);
}

#[test]
fn multi_token_prediction_runs_on_the_last_stage() {
    let cfg = r#"{"model_type": "deepseek_v3", "hidden_size": 2048, "num_hidden_layers": 8,
        "num_attention_heads": 16, "q_lora_rank": 512, "kv_lora_rank": 256,
        "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
        "intermediate_size": 8192, "moe_intermediate_size": 1024, "n_routed_experts": 16,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
        "vocab_size": 65536, "num_nextn_predict_layers": 1}"#;
    let with_mtp = plait_spec::model_from_hf_config(cfg, "v3.json").unwrap();
    assert_eq!(with_mtp.mtp_layers, 1);
    let without = plait_spec::ModelSpec {
        mtp_layers: 0,
        mtp_pattern: None,
        mtp_shared: false,
        mtp_bf16: false,
        ..with_mtp.clone()
    };
    // The published size counts the main model only.
    assert_eq!(with_mtp.parameter_count(), without.parameter_count());
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let t = TrainSpec::new(64, 4096);
    let c = ParallelConfig {
        dp: 4,
        pp: 2,
        ep: 4,
        ..ParallelConfig::default()
    };
    let a = estimate(&without, &cluster, &t, &c, &d).unwrap();
    let b = estimate(&with_mtp, &cluster, &t, &c, &d).unwrap();
    // The first stage is untouched; the last gains a block, the projection and a head pass.
    assert_eq!(a.stages[0].forward_s, b.stages[0].forward_s);
    assert!(b.stages[1].forward_s > a.stages[1].forward_s * 1.1);
    assert!(b.stages[1].memory.weights_bytes > a.stages[1].memory.weights_bytes);
    assert!(b.model_flops_per_iteration > a.model_flops_per_iteration);
}

#[test]
fn a_hybrid_multi_token_prediction_module_runs_its_own_blocks() {
    // Nemotron 3 Super's MTP module is an attention and a MoE block ("*E"), not one more
    // block of the last kind; Megatron Bridge runs its two passes on one shared module,
    // kept in bf16 in an MXFP8 run.
    let super_ = model_preset("nemotron-3-super-120b-a12b").unwrap();
    let cluster = cluster_preset("gb300-nvl72").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Mxfp8).unwrap();
    let t = TrainSpec {
        dtype: plait_spec::Dtype::Mxfp8,
        ..TrainSpec::new(64, 8192)
    };
    let c = ParallelConfig {
        dp: 64,
        ep: 64,
        ..ParallelConfig::default()
    };
    let g = Groups::new(&cluster, &c);
    let w = Workload::new(&c, &t);
    let costs = |m: &plait_spec::ModelSpec| layer_costs(m, &d, &g, &w);
    let one = costs(&super_);
    let kinds = super_.block_kinds();
    let attention = kinds
        .iter()
        .position(|k| k.block == BlockKind::Attention)
        .unwrap();
    let moe = kinds.iter().position(|k| k.moe.is_some()).unwrap();
    // Its blocks' weights: an attention and a MoE block's, and the 2h → h projection.
    let h = super_.hidden as f64;
    let blocks = one.kinds[attention].params + one.kinds[moe].params;
    assert!((one.mtp.params - blocks - 2.0 * h * h - 2.0 * h).abs() < 1.0);
    assert_eq!(one.mtp.expert_params, one.kinds[moe].expert_params);
    // In bf16 the module's blocks take longer than they would in MXFP8 (the head pass
    // runs as the main model's).
    let in_mxfp8 = costs(&plait_spec::ModelSpec {
        mtp_bf16: false,
        ..super_.clone()
    });
    let module_s =
        |c: &plait_cost::estimate::LayerCosts| c.mtp.forward.compute_s - c.head.forward.compute_s;
    let (bf16_s, mxfp8_s) = (module_s(&one), module_s(&in_mxfp8));
    assert!(bf16_s > 1.1 * mxfp8_s, "{bf16_s} vs {mxfp8_s}");
    // Two passes of one shared module: twice the time, the weights once.
    let two = plait_spec::ModelSpec {
        mtp_layers: 2,
        ..super_.clone()
    };
    let two_costs = costs(&two);
    assert_eq!(two_costs.mtp.forward, one.mtp.forward);
    assert!((2.0 * two_costs.mtp.params - one.mtp.params).abs() < 1.0);
    let (a, b) = (
        estimate(&super_, &cluster, &t, &c, &d).unwrap(),
        estimate(&two, &cluster, &t, &c, &d).unwrap(),
    );
    assert!(b.iteration_time_s > a.iteration_time_s);
    assert!((b.memory.weights_bytes - a.memory.weights_bytes).abs() < 1.0);
}

#[test]
fn chunked_attention_costs_as_attention_over_the_chunk() {
    // Llama 4's RoPE layers attend within chunks of 8,192 tokens: at 32k tokens their
    // attention does a quarter of the full layers' work (causal within each chunk), and
    // below the chunk length both kinds cost the same.
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let c = ParallelConfig {
        dp: 8,
        tp: 8,
        sp: true,
        ..ParallelConfig::default()
    };
    let scout = model_preset("llama4-scout").unwrap();
    let g = Groups::new(&cluster, &c);
    let forward = |seq: u64| {
        let costs = layer_costs(&scout, &d, &g, &Workload::new(&c, &TrainSpec::new(64, seq)));
        // Kinds in order of first appearance: chunked (layer 0), full (layer 3).
        assert_eq!(scout.block_kinds()[0].attention_chunk, Some(8192));
        (
            costs.kinds[0].forward.compute_s,
            costs.kinds[1].forward.compute_s,
        )
    };
    let (chunked, full) = forward(32_768);
    assert!(chunked < 0.8 * full, "{chunked} vs {full}");
    let (chunked, full) = forward(8192);
    assert!((chunked / full - 1.0).abs() < 1e-12, "{chunked} vs {full}");
    // The model FLOPs count each chunked layer's scores over its chunk.
    let t = TrainSpec::new(64, 32_768);
    let uniform = plait_spec::ModelSpec {
        attention_chunk: None,
        block_runs: Vec::new(),
        ..scout.clone()
    };
    assert!(plait_cost::model_flops(&scout, &t) < plait_cost::model_flops(&uniform, &t));
}
