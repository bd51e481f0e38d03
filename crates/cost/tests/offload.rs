//! Activation offloading (`TrainSpec::cpu_offload_layers`, Megatron-Core's
//! `--cpu-offloading-num-layers`): the offloaded blocks' activations leave the GPU, their
//! copies run over the host link beside the compute, and Megatron's conditions hold.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{
    cluster_from_toml, cluster_preset, model_preset, ClusterSpec, Dtype, Engine, ParallelConfig,
    Recompute, TrainSpec,
};

/// Llama 3 70B under Megatron-FSDP on 64 GPUs, two 8K sequences per micro-batch (NVIDIA's
/// GB300 recipe for it offloads 20 of its 80 blocks).
fn run(cluster: &ClusterSpec, offloaded: u64) -> Result<Estimate, plait_spec::SpecError> {
    let m = model_preset("llama3-70b").unwrap();
    let d = device_for(cluster, Dtype::Fp8).unwrap();
    let t = TrainSpec {
        dtype: Dtype::Fp8,
        cpu_offload_layers: offloaded,
        ..TrainSpec::new(256, 8192)
    };
    let c = ParallelConfig {
        dp: 64,
        mbs: 2,
        zero: 3,
        ..ParallelConfig::default()
    };
    estimate(&m, cluster, &t, &c, &d)
}

/// The block activations of `e` (stage 0 holds the whole model at pp 1): all of them less
/// the embedding's and head's, which `none` and `some` share.
fn activation_gib(e: &Estimate) -> f64 {
    e.stages[0].memory.activations_bytes / plait_spec::GIB
}

#[test]
fn offloaded_blocks_leave_their_share_of_the_activations_in_host_memory() {
    let gb300 = cluster_preset("gb300-nvl72").unwrap();
    let none = run(&gb300, 0).unwrap();
    let some = run(&gb300, 20).unwrap();
    let more = run(&gb300, 40).unwrap();
    // Each block's activations are the same, so each offloaded block removes one eightieth
    // of the blocks' share: the two steps of 20 blocks remove the same bytes.
    let (a0, a20, a40) = (
        activation_gib(&none),
        activation_gib(&some),
        activation_gib(&more),
    );
    let step = a0 - a20;
    assert!(step > 0.0, "{a0} -> {a20}");
    assert!(((a20 - a40) / step - 1.0).abs() < 1e-9, "{a0} {a20} {a40}");
    // NVIDIA's recipe runs it: without offloading it does not fit in 288 GB, with it it does.
    assert!(
        !none.fits && some.fits,
        "fits {} / {}",
        none.fits,
        some.fits
    );
    // Over NVLink-C2C the copies hide behind the other blocks' compute.
    assert_eq!(none.iteration_time_s, some.iteration_time_s);
}

#[test]
fn copies_slower_than_the_compute_beside_them_are_exposed() {
    // The same GPUs with a 1 GB/s link to the host: 20 blocks' activations cannot move
    // beside one pass's compute.
    let slow = cluster_from_toml(
        "base = \"gb300-nvl72\"\nhost_link_gb_per_s = 1\n",
        "slow.toml",
    )
    .unwrap();
    let none = run(&slow, 0).unwrap();
    let some = run(&slow, 20).unwrap();
    let moved = activation_gib(&none) - activation_gib(&some);
    // At 1 GB/s each pass waits for about the whole copy: forward and backward per
    // micro-batch, two micro-batches a step.
    let copy_s = moved * plait_spec::GIB / 1e9;
    let extra = some.iteration_time_s - none.iteration_time_s;
    assert!(
        extra > 2.0 * 2.0 * copy_s * 0.8 && extra < 2.0 * 2.0 * copy_s,
        "extra {extra} s for {copy_s} s copies"
    );
    // The breakdown names them (not as pipeline bubble).
    let named = some.breakdown.offload_copies_s;
    assert!((named / extra - 1.0).abs() < 1e-6, "{named} of {extra}");
    assert_eq!(none.breakdown.offload_copies_s, 0.0);
}

/// The error's field for `offloaded` blocks of Llama 3 70B under `c` and `engine` on
/// `cluster`.
fn refused(cluster: &ClusterSpec, engine: Engine, c: ParallelConfig, offloaded: u64) -> String {
    let m = model_preset("llama3-70b").unwrap();
    let d = device_for(cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec {
        engine,
        cpu_offload_layers: offloaded,
        ..TrainSpec::new(256, 8192)
    };
    match estimate(&m, cluster, &t, &c, &d) {
        Ok(_) => "accepted".into(),
        Err(e) => e.field,
    }
}

#[test]
fn megatrons_conditions_for_offloading_are_checked() {
    let gb300 = cluster_preset("gb300-nvl72").unwrap();
    let fsdp = ParallelConfig {
        dp: 64,
        zero: 3,
        ..ParallelConfig::default()
    };
    let piped = ParallelConfig {
        dp: 8,
        pp: 8,
        ..ParallelConfig::default()
    };
    let recomputed = ParallelConfig {
        recompute: Recompute::Full,
        ..fsdp
    };
    // A cluster TOML that does not say how fast its GPUs reach host memory.
    let unknown = cluster_from_toml(
        "gpus_per_node = 8\nnvlink_bidirectional_gb_per_s = 900\nnics_per_node = 8\n\
         nic_gbit_per_s = 400\n[gpu]\npeak_bf16_tflops = 989.4\nmemory_gib = 80\n\
         memory_bandwidth_gb_per_s = 3350\n",
        "custom.toml",
    )
    .unwrap();
    let cases = [
        (refused(&gb300, Engine::Megatron, fsdp, 20), "accepted"),
        (
            refused(&gb300, Engine::Megatron, fsdp, 80),
            "cpu_offload_layers",
        ),
        (
            refused(&gb300, Engine::Fsdp, fsdp, 20),
            "cpu_offload_layers",
        ),
        (refused(&gb300, Engine::Megatron, piped, 5), "pp"),
        (
            refused(&gb300, Engine::Megatron, recomputed, 20),
            "recompute",
        ),
        (
            refused(&unknown, Engine::Megatron, fsdp, 20),
            "cpu_offload_layers",
        ),
    ];
    for (i, (got, want)) in cases.iter().enumerate() {
        assert_eq!(got, want, "case {i}");
    }
}
