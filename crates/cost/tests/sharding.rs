//! Hybrid sharding (`shard` below dp: FSDP's HSDP, MiCS, Megatron's distributed-optimizer
//! instances): what it holds in memory and what it costs in communication.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, Engine, ParallelConfig, TrainSpec};

fn run(model: &str, gpus: u64, gbs: u64, seq: u64, config: &str, engine: Engine) -> Estimate {
    let m = model_preset(model).unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec {
        engine,
        ..TrainSpec::new(gbs, seq)
    };
    let mut c: ParallelConfig = config.parse().unwrap();
    c.dp = gpus / c.replica_gpus();
    let c = c.normalised();
    c.validate(&m, &t, gpus).unwrap();
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

#[test]
fn a_shard_group_of_all_dp_is_plain_zero() {
    let full = run("llama3-8b", 64, 512, 4096, "zero3", Engine::Fsdp);
    let same = run("llama3-8b", 64, 512, 4096, "zero3 shard64", Engine::Fsdp);
    assert_eq!(full.iteration_time_s, same.iteration_time_s);
    assert_eq!(full.peak_memory_bytes, same.peak_memory_bytes);
}

#[test]
fn states_shard_over_the_shard_group_only() {
    // ZeRO-3 over 64 ranks against hybrid sharding over 8: weights, gradients and
    // optimizer states are each 8 times larger per GPU.
    let full = run("llama3-8b", 64, 512, 4096, "zero3", Engine::Fsdp);
    let hybrid = run("llama3-8b", 64, 512, 4096, "zero3 shard8", Engine::Fsdp);
    let (f, h) = (&full.stages[0].memory, &hybrid.stages[0].memory);
    for (name, a, b) in [
        ("weights", f.weights_bytes, h.weights_bytes),
        ("gradients", f.gradients_bytes, h.gradients_bytes),
        ("optimizer", f.optimizer_bytes, h.optimizer_bytes),
    ] {
        assert!((b / a - 8.0).abs() < 1e-9, "{name}: {b} vs {a}");
    }
}

#[test]
fn hybrid_sharding_keeps_zero3_gathers_inside_a_node_at_scale() {
    // Llama 3 8B on 8,192 H100 (1,024 nodes), one sequence per GPU: ZeRO-3 over all of
    // dp gathers every block in rings across 1,024 nodes, whose step latency alone is
    // larger than a block's compute; sharding over the node's 8 GPUs gathers over NVLink
    // and all-reduces only a shard's gradients across the nodes.
    let full = run("llama3-8b", 8192, 8192, 4096, "zero3", Engine::Fsdp);
    let hybrid = run("llama3-8b", 8192, 8192, 4096, "zero3 shard8", Engine::Fsdp);
    assert!(
        hybrid.iteration_time_s < 0.6 * full.iteration_time_s,
        "hybrid {} s vs full {} s",
        hybrid.iteration_time_s,
        full.iteration_time_s
    );
    assert!(hybrid.breakdown.dp_comm_exposed_s < full.breakdown.dp_comm_exposed_s);
}

#[test]
fn hybrid_zero1_all_reduces_the_shard_across_copies() {
    // On 64 GPUs with rail-optimised networking, ZeRO-1 over all of dp moves each
    // gradient once through the NICs of all 8 nodes; with hybrid sharding the cross-node
    // all-reduce of each node's shard runs on one NIC per shard rank: more data-parallel
    // time, in exchange for nothing but smaller collectives.
    let full = run("llama3-8b", 64, 512, 4096, "zero1", Engine::Megatron);
    let hybrid = run("llama3-8b", 64, 512, 4096, "zero1 shard8", Engine::Megatron);
    assert!(
        hybrid.stages[0].dp_reduce_s > full.stages[0].dp_reduce_s,
        "hybrid {} s vs full {} s",
        hybrid.stages[0].dp_reduce_s,
        full.stages[0].dp_reduce_s
    );
    assert!(hybrid.stages[0].memory.optimizer_bytes > full.stages[0].memory.optimizer_bytes);
}
