//! Optimizer offloading (`TrainSpec::optimizer_offload`: Megatron-Core's
//! `--optimizer-cpu-offload --optimizer-offload-fraction`, DeepSpeed's ZeRO-Offload): the
//! offloaded share of each rank's Adam state leaves the GPU for host memory, the CPU steps it
//! at its share of the node's DRAM bandwidth, its gradients and parameters cross the host
//! link, and each engine's conditions hold.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{
    cluster_from_toml, cluster_preset, model_preset, ClusterSpec, Dtype, Engine, ParallelConfig,
    SpecError, TrainSpec,
};

/// Llama 3 8B in bf16 on one DGX H100, dp 8 with the optimizer state sharded (ZeRO-1), its
/// share `offloaded` in host memory under `engine`; 64 sequences, 8 micro-batches a step.
fn run(
    cluster: &ClusterSpec,
    engine: Engine,
    zero: u8,
    offloaded: f64,
) -> Result<Estimate, SpecError> {
    run_batch(cluster, engine, zero, offloaded, 64)
}

/// [`run`] with a global batch of `gbs` sequences (gbs / 8 micro-batches).
fn run_batch(
    cluster: &ClusterSpec,
    engine: Engine,
    zero: u8,
    offloaded: f64,
    gbs: u64,
) -> Result<Estimate, SpecError> {
    let m = model_preset("llama3-8b").unwrap();
    let d = device_for(cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec {
        engine,
        optimizer_offload: offloaded,
        ..TrainSpec::new(gbs, 4096)
    };
    let c = ParallelConfig {
        dp: 8,
        zero,
        ..ParallelConfig::default()
    };
    estimate(&m, cluster, &t, &c, &d)
}

/// Each GPU's shard of the optimizer: Llama 3 8B's parameters over dp 8.
fn shard_params(e: &Estimate) -> f64 {
    e.stages[0].params / 8.0
}

#[test]
fn the_offloaded_share_of_the_state_moves_from_gpu_to_host_memory() {
    let h100 = cluster_preset("dgx-h100").unwrap();
    let none = run(&h100, Engine::Megatron, 1, 0.0).unwrap();
    let half = run(&h100, Engine::Megatron, 1, 0.5).unwrap();
    let all = run(&h100, Engine::Megatron, 1, 1.0).unwrap();
    let gpu = |e: &Estimate| e.stages[0].memory.optimizer_bytes;
    // Adam's 12 bytes per parameter of the shard, then half of them, then none.
    let p = shard_params(&none);
    assert!((gpu(&none) / (12.0 * p) - 1.0).abs() < 1e-9);
    assert!((gpu(&half) / gpu(&none) - 0.5).abs() < 1e-12);
    assert_eq!(gpu(&all), 0.0);
    // On the host: the fp32 parameter, both moments and the fp32 gradient, 16 bytes per
    // offloaded parameter (Megatron-Core's HybridDeviceOptimizer).
    assert_eq!(none.host_memory_bytes, 0.0);
    assert!((half.host_memory_bytes / (16.0 * 0.5 * p) - 1.0).abs() < 1e-9);
    assert!((all.host_memory_bytes / (16.0 * p) - 1.0).abs() < 1e-9);
    // The GPU's peak falls by exactly what left it; the weights and gradients stay.
    assert!(((none.peak_memory_bytes - all.peak_memory_bytes) / gpu(&none) - 1.0).abs() < 1e-9);
    assert_eq!(
        none.stages[0].memory.gradients_bytes,
        all.stages[0].memory.gradients_bytes
    );
    assert!(all.fits && all.host_fits());
}

#[test]
fn the_cpu_step_and_the_copies_follow_the_hosts_bandwidths() {
    // DGX H100: 2 TB of DDR5 at 563.2 GB/s for 8 GPUs, PCIe 5.0 x16 at 64 GB/s each way.
    let h100 = cluster_preset("dgx-h100").unwrap();
    let none = run(&h100, Engine::Megatron, 1, 0.0).unwrap();
    let all = run(&h100, Engine::Megatron, 1, 1.0).unwrap();
    let p = shard_params(&all);
    // Megatron-Core, all offloaded: the fp32 gradients down (4 bytes), the CPU's AdamW
    // (28 bytes of DRAM traffic per parameter at 563.2 / 8 GB/s), the parameters up
    // (2 bytes), one after another; no GPU step left.
    let want = p * 4.0 / 64e9 + p * 28.0 / (563.2e9 / 8.0) + p * 2.0 / 64e9;
    let got = all.breakdown.optimizer_s;
    assert!((got / want - 1.0).abs() < 1e-9, "{got} s, want {want} s");
    // Nothing else in the step changes.
    assert_eq!(none.breakdown.compute_s, all.breakdown.compute_s);
    assert!(
        ((all.iteration_time_s - none.iteration_time_s) - (got - none.breakdown.optimizer_s)).abs()
            < 1e-9
    );
    // A slower host takes proportionally longer over its CPU step.
    let slow = cluster_from_toml(
        "base = \"dgx-h100\"\nhost_memory_bandwidth_gb_per_s = 56.32\n",
        "slow-host.toml",
    )
    .unwrap();
    let slow_all = run(&slow, Engine::Megatron, 1, 1.0).unwrap();
    let cpu = p * 28.0 / (563.2e9 / 8.0);
    let extra = slow_all.breakdown.optimizer_s - got;
    assert!((extra / (9.0 * cpu) - 1.0).abs() < 1e-9, "{extra} s");
}

#[test]
fn deepspeed_hides_the_gradient_copies_behind_the_backward() {
    let h100 = cluster_preset("dgx-h100").unwrap();
    let megatron = run(&h100, Engine::Megatron, 2, 1.0).unwrap();
    let deepspeed = run(&h100, Engine::Deepspeed, 2, 1.0).unwrap();
    let p = shard_params(&deepspeed);
    // DeepSpeed: the gradients went down during the backward, so the step is the CPU's
    // Adam and its cast into the 16-bit buffer (34 bytes per parameter) and the copy up.
    let want = p * 34.0 / (563.2e9 / 8.0) + p * 2.0 / 64e9;
    let got = deepspeed.breakdown.optimizer_s;
    assert!((got / want - 1.0).abs() < 1e-9, "{got} s, want {want} s");
    // Its host holds 20 bytes per parameter: its pinned 16-bit copy and, over 8
    // micro-batches, the 16-bit sum it accumulates the gradients in; 18 with one.
    assert!((deepspeed.host_memory_bytes / (20.0 * p) - 1.0).abs() < 1e-9);
    let one = run_batch(&h100, Engine::Deepspeed, 2, 1.0, 8).unwrap();
    assert_eq!(one.microbatches, 1);
    assert!((one.host_memory_bytes / (18.0 * p) - 1.0).abs() < 1e-9);
    assert!(megatron.host_memory_bytes < deepspeed.host_memory_bytes);
    // Over a 1 GB/s host link the accumulation's copies outlast each backward: the first
    // micro-batch's 2 bytes down, six middle ones' 2 up and 2 down, the last's 2 + 2 and its
    // 4-byte fp32 copy, each less the backward it runs beside.
    let slow =
        cluster_from_toml("base = \"dgx-h100\"\nhost_link_gb_per_s = 1\n", "slow.toml").unwrap();
    let e = run(&slow, Engine::Deepspeed, 2, 1.0).unwrap();
    let b = e.stages[0].backward_s;
    let link = |bytes: f64| (p * bytes / 1e9 - b).max(0.0);
    let want = link(2.0) + 6.0 * link(4.0) + link(8.0) + p * 34.0 / (563.2e9 / 8.0) + p * 2.0 / 1e9;
    let got = e.breakdown.optimizer_s;
    assert!((got / want - 1.0).abs() < 1e-9, "{got} s, want {want} s");
}

#[test]
fn a_host_too_small_for_the_state_does_not_fit_and_says_so() {
    // 8 GB of host memory for the node: 1 GB per GPU, less than a 1 B-parameter shard's
    // 16 GB of offloaded state.
    let small =
        cluster_from_toml("base = \"dgx-h100\"\nhost_memory_gb = 8\n", "small.toml").unwrap();
    let e = run(&small, Engine::Megatron, 1, 1.0).unwrap();
    assert!(e.peak_memory_bytes < e.memory_capacity_bytes);
    assert!(!e.host_fits() && !e.fits);
    let reason = e.reason().expect("a reason");
    assert!(reason.contains("host memory"), "{reason}");
}

#[test]
fn each_engines_conditions_for_optimizer_offloading_are_checked() {
    let h100 = cluster_preset("dgx-h100").unwrap();
    // DGX B200's host memory figures are not published.
    let b200 = cluster_preset("dgx-b200").unwrap();
    let field = |r: Result<Estimate, SpecError>| match r {
        Ok(_) => "accepted".to_string(),
        Err(e) => e.field,
    };
    let cases = [
        (field(run(&h100, Engine::Megatron, 1, 0.25)), "accepted"),
        (field(run(&h100, Engine::Deepspeed, 3, 0.25)), "accepted"),
        (field(run(&h100, Engine::Deepspeed, 1, 1.0)), "accepted"),
        // DeepSpeed offloads a share below all only under ZeRO-3.
        (
            field(run(&h100, Engine::Deepspeed, 1, 0.25)),
            "optimizer_offload",
        ),
        // The offloaded state is the rank's ZeRO shard.
        (field(run(&h100, Engine::Megatron, 0, 1.0)), "zero"),
        // Engines without a CPU optimizer.
        (field(run(&h100, Engine::Fsdp, 3, 1.0)), "optimizer_offload"),
        (
            field(run(&h100, Engine::Torchtitan, 3, 1.0)),
            "optimizer_offload",
        ),
        // Not a share.
        (
            field(run(&h100, Engine::Megatron, 1, 1.5)),
            "optimizer_offload",
        ),
        (
            field(run(&h100, Engine::Megatron, 1, f64::NAN)),
            "optimizer_offload",
        ),
        (
            field(run(&h100, Engine::Megatron, 1, -0.5)),
            "optimizer_offload",
        ),
        // A cluster that does not say what its host memory is.
        (
            field(run(&b200, Engine::Megatron, 1, 1.0)),
            "optimizer_offload",
        ),
    ];
    for (i, (got, want)) in cases.iter().enumerate() {
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn host_memory_in_a_cluster_toml_needs_both_figures_and_bounds() {
    // A base with host memory takes either figure alone.
    assert!(cluster_from_toml("base = \"dgx-h100\"\nhost_memory_gb = 1024\n", "a.toml").is_ok());
    // A base without needs both.
    let e =
        cluster_from_toml("base = \"dgx-b200\"\nhost_memory_gb = 2048\n", "b.toml").unwrap_err();
    assert_eq!(e.field, "host_memory_bandwidth_gb_per_s");
    let c = cluster_from_toml(
        "base = \"dgx-b200\"\nhost_memory_gb = 2048\nhost_memory_bandwidth_gb_per_s = 563.2\n",
        "c.toml",
    )
    .unwrap();
    let (bytes, bandwidth) = c.host_memory_per_gpu().unwrap();
    assert_eq!((bytes, bandwidth), (2048e9 / 8.0, 563.2e9 / 8.0));
    for bad in ["0", "-1", "1e300", "nan"] {
        let e = cluster_from_toml(
            &format!("base = \"dgx-h100\"\nhost_memory_gb = {bad}\n"),
            "d.toml",
        )
        .unwrap_err();
        assert_eq!(e.field, "host_memory_gb", "{bad}");
    }
}

#[test]
fn megatron_offloads_fp8_runs_with_delayed_scaling_only_and_fp32_state_always() {
    let h100 = cluster_preset("dgx-h100").unwrap();
    let m = model_preset("llama3-8b").unwrap();
    let c = ParallelConfig {
        dp: 8,
        zero: 1,
        ..ParallelConfig::default()
    };
    let field = |t: TrainSpec| {
        let d = device_for(&h100, t.dtype).unwrap();
        match estimate(&m, &h100, &t, &c, &d) {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.field,
        }
    };
    let offloaded = TrainSpec {
        optimizer_offload: 1.0,
        ..TrainSpec::new(64, 4096)
    };
    let fp8 = |recipe| TrainSpec {
        dtype: Dtype::Fp8,
        float8_recipe: Some(recipe),
        ..offloaded.clone()
    };
    use plait_spec::{Float8Recipe, OptimizerState};
    assert_eq!(field(fp8(Float8Recipe::Delayed)), "accepted");
    // Its fp8 parameter gathers refuse offloading under current or block scaling
    // (Megatron-LM `arguments.py:1889-1892`); DeepSpeed has no such gathers.
    assert_eq!(field(fp8(Float8Recipe::Tensorwise)), "optimizer_offload");
    assert_eq!(field(fp8(Float8Recipe::Blockwise)), "optimizer_offload");
    // The CPU optimizers keep fp32 state.
    let bf16_state = TrainSpec {
        optimizer_state: OptimizerState::Bf16,
        ..offloaded.clone()
    };
    assert_eq!(field(bf16_state), "optimizer_state");
}

#[test]
fn a_node_of_another_size_than_its_base_has_no_host_memory_until_given() {
    // GB200 NVL72's 17 TB are the rack's 72 GPUs'; a 4-GPU "node" on that base does not
    // have them.
    let tray =
        cluster_from_toml("base = \"gb200-nvl72\"\ngpus_per_node = 4\n", "tray.toml").unwrap();
    assert_eq!(tray.host_memory, None);
    let given = cluster_from_toml(
        "base = \"gb200-nvl72\"\ngpus_per_node = 4\nhost_memory_gb = 960\n\
         host_memory_bandwidth_gb_per_s = 1024\n",
        "tray.toml",
    )
    .unwrap();
    assert_eq!(given.host_memory_per_gpu(), Some((240e9, 256e9)));
}
