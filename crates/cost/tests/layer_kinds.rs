//! Models whose blocks are not all alike: each block is costed by its own kind.

use plait_cost::estimate::{layer_costs, rank_block_layers};
use plait_cost::{comm::Groups, device_for, estimate, layer::Workload};
use plait_spec::{
    cluster_preset, model_preset, BlockRun, ParallelConfig, Recompute, StageMap, TrainSpec,
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
            count: 10,
            window: None,
            dense_ffn: None,
        },
        BlockRun {
            count: 22,
            window: None,
            dense_ffn: None,
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
            count: 16,
            window: Some(512),
            dense_ffn: None,
        },
        BlockRun {
            count: 16,
            window: None,
            dense_ffn: None,
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
        count: 32,
        window: Some(512),
        dense_ffn: None,
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
    let r1 = rank_block_layers(&m, &costs, &costs, &map, 1, 2);
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
                count: 8,
                window: None,
                dense_ffn: Some(14336),
            },
            BlockRun {
                count: 24,
                window: None,
                dense_ffn: None,
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
