//! Expert layers: where the expert groups sit and what the experts' own tensor parallelism
//! (expert tp) changes.

use plait_cost::layer::remote_domains;
use plait_cost::{device_for, estimate};
use plait_spec::{
    cluster_preset, model_preset, CudaGraphs, Dtype, Engine, Float8Recipe, MoeDispatcher,
    ParallelConfig, TrainSpec,
};

#[test]
fn unsplit_experts_keep_the_expert_group_in_a_node_and_hold_more_weights() {
    // Mixtral 8x7B on two DGX H100 nodes, tp 2, ep 8. With the experts split as the dense
    // layers (expert tp = tp), an expert group is every other rank: 8 of them span both
    // nodes and the all-to-all crosses the NICs. With expert tp 1 the group is 8
    // consecutive ranks, one node, NVLink; no tp gather of the routed tokens either.
    let m = model_preset("mixtral-8x7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec::new(64, 4096);
    let split = ParallelConfig {
        dp: 8,
        tp: 2,
        ep: 8,
        etp: Some(2),
        zero: 1,
        sp: true,
        ..ParallelConfig::default()
    };
    // Expert tp 1 is the default (NVIDIA's recipes, torchtitan).
    let unsplit = ParallelConfig { etp: None, ..split };
    assert_eq!(unsplit.expert_tp(), 1);
    let a = estimate(&m, &cluster, &t, &split, &d).unwrap();
    let b = estimate(&m, &cluster, &t, &unsplit, &d).unwrap();
    assert!(
        b.breakdown.ep_comm_s < 0.5 * a.breakdown.ep_comm_s,
        "ep comm {} (etp 1) vs {} (etp = tp)",
        b.breakdown.ep_comm_s,
        a.breakdown.ep_comm_s
    );
    // Each GPU holds one whole expert instead of half of each of two: twice the expert
    // weights, and the same FLOPs.
    let (wa, wb) = (
        a.stages[0].memory.weights_bytes,
        b.stages[0].memory.weights_bytes,
    );
    assert!(wb > 1.5 * wa, "weights {wb} (etp 1) vs {wa} (etp = tp)");
    assert_eq!(a.model_flops_per_iteration, b.model_flops_per_iteration);
}

#[test]
fn a_capacity_factor_fixes_the_experts_work_whatever_the_routing() {
    // Mixtral 8x7B on 64 H100, ep 8. Dropless, the work follows the routing: the band's
    // pessimistic end assumes the busiest expert rank gets 1.25× its share. At a capacity
    // factor with padding every expert runs exactly its capacity: capacity 1.25 costs as
    // a skew of 1.25 at every level, capacity 1.0 as balanced routing, and the user's skew
    // no longer matters.
    let m = model_preset("mixtral-8x7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c = ParallelConfig {
        dp: 64,
        ep: 8,
        zero: 1,
        ..ParallelConfig::default()
    };
    let run = |moe_skew: f64, moe_capacity: Option<f64>| {
        let t = TrainSpec {
            moe_skew,
            moe_capacity,
            ..TrainSpec::new(256, 4096)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let dropless = run(1.0, None);
    let skewed = run(1.25, None);
    let at_1 = run(1.0, Some(1.0));
    let at_125 = run(1.0, Some(1.25));
    assert_eq!(at_1.iteration_time_s, dropless.iteration_time_s);
    assert!(at_1.iteration_time_high_s < dropless.iteration_time_high_s);
    assert_eq!(at_125.iteration_time_s, skewed.iteration_time_s);
    assert_eq!(
        at_125.iteration_time_s,
        run(2.0, Some(1.25)).iteration_time_s
    );
    // The optimistic end is no longer balanced routing either.
    assert!(at_125.iteration_time_low_s > dropless.iteration_time_low_s);
}

#[test]
fn combined_1f1b_hides_the_all_to_alls_behind_the_other_micro_batch() {
    // Qwen3 235B on 32 DGX H100 nodes as NVIDIA's recipe runs it: tp 2, pp 8 interleaved
    // ×4, ep 32 across four nodes, 128 micro-batches. Megatron-Core's combined 1F1B runs
    // each steady-state forward beside another micro-batch's backward and hides their
    // all-to-alls behind each other's compute.
    let m = model_preset("qwen3-235b-a22b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec::new(2048, 4096);
    let plain_c: ParallelConfig = "dp16 tp2 pp8 vp4 ep32 mbs1 zero1 sp interleaved"
        .parse()
        .unwrap();
    let c = ParallelConfig {
        moe_a2a_overlap: true,
        ..plain_c
    };
    let plain = estimate(&m, &cluster, &t, &plain_c, &d).unwrap();
    let overlapped = estimate(&m, &cluster, &t, &c, &d).unwrap();
    let (a, b) = (&plain.breakdown, &overlapped.breakdown);
    println!(
        "ep comm {:.2} s -> {:.2} s, compute {:.2} s -> {:.2} s, step {:.2} s -> {:.2} s",
        a.ep_comm_s,
        b.ep_comm_s,
        a.compute_s,
        b.compute_s,
        plain.iteration_time_s,
        overlapped.iteration_time_s
    );
    // Most of the exposed all-to-all time hides (the warm-up's and drain's does not), and
    // the compute it ran beside slows by the SMs the collective takes.
    assert!(b.ep_comm_s < 0.5 * a.ep_comm_s);
    assert!(b.compute_s > a.compute_s);
    assert!(overlapped.iteration_time_s < plain.iteration_time_s);
    // The saving is the hidden communication less that slowdown, never more than there
    // was to hide.
    let saved = plain.iteration_time_s - overlapped.iteration_time_s;
    assert!(saved < a.ep_comm_s - b.ep_comm_s);
    // Megatron-Core runs it under its own engine, with ep > 1, and interleaved where there
    // is a pipeline.
    let refused = |c: ParallelConfig, t: &TrainSpec| c.validate(&m, t, c.gpus()).unwrap_err().field;
    let plain_1f1b: ParallelConfig = "dp16 tp2 pp8 ep32 mbs1 zero1 sp a2a-overlap 1f1b"
        .parse()
        .unwrap();
    assert_eq!(refused(plain_1f1b, &t), "moe_a2a_overlap");
    let torchtitan = TrainSpec {
        engine: plait_spec::Engine::Torchtitan,
        ..t
    };
    assert_eq!(refused(c, &torchtitan), "moe_a2a_overlap");
}

#[test]
fn a_domain_deduplicating_dispatcher_sends_each_token_once_per_remote_node() {
    // DeepSeek-V3 at ep 64 on 8 DGX H100 nodes (tp 2 pp 8 ×4, as Megatron-Bridge's
    // 1,024-GPU recipe). The all-to-all sends each of a token's 8 routed copies to its
    // expert's rank, 7/8 of them off the node; DeepEP and HybridEP send the token once to
    // each other node holding one of its experts and forward it there over NVLink.
    let m = model_preset("deepseek-v3").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let t = TrainSpec {
        dtype: Dtype::Bf16,
        ..TrainSpec::new(8192, 4096)
    };
    let d = device_for(&cluster, t.dtype).unwrap();
    let c: ParallelConfig = "dp64 tp2 pp8 vp4 ep64 mbs1 zero1 sp".parse().unwrap();
    let ep_s = |dispatcher: MoeDispatcher| {
        let mut c = c;
        c.moe_dispatcher = dispatcher;
        estimate(&m, &cluster, &t, &c, &d)
            .unwrap()
            .breakdown
            .ep_comm_s
    };
    let (a2a, deepep, hybridep) = (
        ep_s(MoeDispatcher::AllToAll),
        ep_s(MoeDispatcher::DeepEp),
        ep_s(MoeDispatcher::HybridEp),
    );
    assert_eq!(deepep, hybridep);
    // Group-limited routing (4 of 8 groups, one group per node here) keeps a token to
    // 0.5 × (1 − C(96, 8)/C(128, 8)) of each other node: 3.17 of 7 remote nodes, against
    // 8 × 7/8 = 7 remote copies; the NIC time falls by about as much.
    let remote = remote_domains(&m, 64, 8);
    assert!((remote - 3.17).abs() < 0.01, "{remote}");
    assert!(
        deepep < 0.6 * a2a && deepep > 0.35 * a2a,
        "{deepep} vs {a2a}"
    );
    // Without the group limit the token reaches more nodes, never more than its copies.
    let ungrouped = plait_spec::ModelSpec {
        router: None,
        ..m.clone()
    };
    let free = remote_domains(&ungrouped, 64, 8);
    assert!(free > remote && free < 7.0, "{free}");
    // Inside one node there is nothing to deduplicate: the same all-to-all.
    let node: ParallelConfig = "dp8 ep8 mbs1 zero1".parse().unwrap();
    let mixtral = model_preset("mixtral-8x7b").unwrap();
    let in_node = |dispatcher: MoeDispatcher| {
        let mut node = node;
        node.moe_dispatcher = dispatcher;
        estimate(&mixtral, &cluster, &TrainSpec::new(64, 4096), &node, &d)
            .unwrap()
            .iteration_time_s
    };
    assert_eq!(
        in_node(MoeDispatcher::AllToAll),
        in_node(MoeDispatcher::DeepEp)
    );
}

#[test]
fn only_megatron_runs_the_flex_dispatchers() {
    let m = model_preset("mixtral-8x7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c: ParallelConfig = "dp8 ep8 mbs1 zero1 dispatcher=hybridep".parse().unwrap();
    assert_eq!(c.moe_dispatcher, MoeDispatcher::HybridEp);
    let t = TrainSpec {
        engine: Engine::Torchtitan,
        ..TrainSpec::new(64, 4096)
    };
    let err = estimate(&m, &cluster, &t, &c, &d).unwrap_err().to_string();
    assert!(
        err.contains("moe_dispatcher") && err.contains("allowed: alltoall"),
        "{err}"
    );
}

#[test]
fn model_flops_count_each_moe_at_the_width_its_experts_work() {
    // MFU and model TFLOP/s per GPU rest on model FLOPs ≈ 6 · active parameters · tokens
    // (attention scores, the Mamba scan and the embedding lookup aside). Nemotron 3 Super's
    // routed experts work at its 1,024-wide latent, not at the 4,096 hidden size; counting
    // them at the hidden size doubled its FLOPs. Mixtral's and Qwen3's experts work on
    // the hidden state.
    for preset in [
        "nemotron-3-super-120b-a12b",
        "mixtral-8x7b",
        "qwen3-30b-a3b",
    ] {
        let m = model_preset(preset).unwrap();
        let t = TrainSpec::new(16, 1024);
        let six_n_d = 6.0 * m.active_parameter_count() as f64 * 16.0 * 1024.0;
        let ratio = plait_cost::model_flops(&m, &t) / six_n_d;
        assert!((0.9..1.1).contains(&ratio), "{preset}: {ratio}");
    }
}

#[test]
fn per_expert_quantisation_waits_on_the_host_unless_whole_layers_replay_as_graphs() {
    // Qwen3-30B-A3B on one node, ep 8 (16 experts per GPU), one 4K sequence per
    // micro-batch, fp8. Transformer Engine quantises each expert's split on its own (current
    // scaling: amax, scale and cast kernels) except under delayed scaling where it writes
    // transposes (one multi-tensor cast on Hopper; Blackwell writes none and casts split by
    // split): the small layers then wait on their launches. Whole layers replayed as CUDA
    // graphs wait on none.
    let m = model_preset("qwen3-30b-a3b").unwrap();
    let c = ParallelConfig {
        dp: 8,
        ep: 8,
        zero: 1,
        ..ParallelConfig::default()
    };
    let step = |cluster: &str, recipe: Float8Recipe, cuda_graphs: CudaGraphs| {
        let cluster = cluster_preset(cluster).unwrap();
        let d = device_for(&cluster, Dtype::Fp8).unwrap();
        let t = TrainSpec {
            dtype: Dtype::Fp8,
            float8_recipe: Some(recipe),
            cuda_graphs,
            ..TrainSpec::new(512, 4096)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap().iteration_time_s
    };
    let ratio = |cluster: &str, recipe: Float8Recipe| {
        step(cluster, recipe, CudaGraphs::None) / step(cluster, recipe, CudaGraphs::Layers)
    };
    let current_b200 = ratio("dgx-b200", Float8Recipe::Tensorwise);
    assert!(
        current_b200 > 1.3,
        "current scaling on B200: {current_b200}x graphed"
    );
    let delayed_b200 = ratio("dgx-b200", Float8Recipe::Delayed);
    assert!(
        delayed_b200 > 1.05 && delayed_b200 < current_b200,
        "delayed scaling on B200: {delayed_b200}x graphed"
    );
    let delayed_h100 = ratio("dgx-h100", Float8Recipe::Delayed);
    assert!(
        (delayed_h100 - 1.0).abs() < 1e-3,
        "delayed scaling on H100: {delayed_h100}x graphed"
    );
    // Graphed, the two recipes differ by their kernels' device time alone.
    let graphed = |recipe| step("dgx-b200", recipe, CudaGraphs::Layers);
    let (current, delayed) = (
        graphed(Float8Recipe::Tensorwise),
        graphed(Float8Recipe::Delayed),
    );
    assert!(
        current > delayed && current < 1.1 * delayed,
        "{current} vs {delayed}"
    );
}
