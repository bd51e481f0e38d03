//! The host CPU that issues each eager kernel: a Grace host takes longer per launch than an
//! x86 one, which only host-bound layers feel.

use plait_cost::device::{kernel_issue_s, GRACE_KERNEL_DISPATCH_S, KERNEL_DISPATCH_S};
use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{
    cluster_preset, model_preset, ClusterSpec, CudaGraphs, Dtype, HostCpu, ParallelConfig,
    TrainSpec,
};

/// GB200 NVL72 as published (Grace hosts) and the same rack with x86 hosts.
fn racks() -> (ClusterSpec, ClusterSpec) {
    let grace = cluster_preset("gb200-nvl72").unwrap();
    let x86 = ClusterSpec {
        host_cpu: HostCpu::X86,
        ..grace.clone()
    };
    (grace, x86)
}

/// The estimate of `model` under `t` and `c` on `cluster`.
fn run(model: &str, cluster: &ClusterSpec, t: &TrainSpec, c: &ParallelConfig) -> Estimate {
    let m = model_preset(model).unwrap();
    let d = device_for(cluster, t.dtype).unwrap();
    estimate(&m, cluster, t, c, &d).unwrap()
}

/// Iteration time of `model` under `t` and `c` on `cluster`.
fn time_s(model: &str, cluster: &ClusterSpec, t: &TrainSpec, c: &ParallelConfig) -> f64 {
    run(model, cluster, t, c).iteration_time_s
}

#[test]
fn a_grace_host_issues_each_kernel_slower() {
    assert_eq!(kernel_issue_s(HostCpu::X86), KERNEL_DISPATCH_S);
    assert_eq!(kernel_issue_s(HostCpu::Grace), GRACE_KERNEL_DISPATCH_S);
    let ratio = GRACE_KERNEL_DISPATCH_S / KERNEL_DISPATCH_S;
    assert!((ratio - 2.75).abs() < 0.01, "{ratio}");
    let (grace, x86) = racks();
    assert_eq!(
        device_for(&grace, Dtype::Bf16).unwrap().kernel_issue_s,
        GRACE_KERNEL_DISPATCH_S
    );
    assert_eq!(
        device_for(&x86, Dtype::Bf16).unwrap().kernel_issue_s,
        KERNEL_DISPATCH_S
    );
}

#[test]
fn small_expert_layers_wait_on_a_grace_host_unless_graphed() {
    // Qwen3-30B-A3B in MXFP8 on 8 GB200 at one 4K sequence per micro-batch, 16 experts per
    // GPU: each layer issues hundreds of small kernels, which the GPU runs faster than a
    // Grace host launches them. Whole-layer graphs launch none of them from the host, so the
    // host CPU then only shows in the embedding and the loss.
    let (grace, x86) = racks();
    let c = ParallelConfig {
        dp: 8,
        ep: 8,
        zero: 1,
        ..ParallelConfig::default()
    };
    let eager = TrainSpec {
        dtype: Dtype::Mxfp8,
        ..TrainSpec::new(512, 4096)
    };
    let graphed = TrainSpec {
        cuda_graphs: CudaGraphs::Layers,
        ..eager.clone()
    };
    let (on_grace, on_x86) = (
        time_s("qwen3-30b-a3b", &grace, &eager, &c),
        time_s("qwen3-30b-a3b", &x86, &eager, &c),
    );
    assert!(
        on_grace > 1.5 * on_x86,
        "grace {on_grace} s, x86 {on_x86} s"
    );
    let (g, x) = (
        time_s("qwen3-30b-a3b", &grace, &graphed, &c),
        time_s("qwen3-30b-a3b", &x86, &graphed, &c),
    );
    assert!(g >= x && g < 1.01 * x, "graphed: grace {g} s, x86 {x} s");
    assert!(g < 0.5 * on_grace, "graphed {g} s, eager {on_grace} s");
    // The estimate says where the time goes: most of the eager step is the GPUs waiting on
    // launches, and without that wait it is about the graphed step, whose own wait is the
    // embedding's and the loss's alone.
    let wait = run("qwen3-30b-a3b", &grace, &eager, &c)
        .breakdown
        .launch_wait_s;
    let graphed_wait = run("qwen3-30b-a3b", &grace, &graphed, &c)
        .breakdown
        .launch_wait_s;
    assert!(wait > 0.5 * on_grace, "wait {wait} s of {on_grace} s");
    assert!(
        graphed_wait < 0.01 * g,
        "graphed wait {graphed_wait} s of {g} s"
    );
    let unwaited = on_grace - wait;
    assert!(
        (unwaited / g - 1.0).abs() < 0.1,
        "eager less its wait {unwaited} s, graphed {g} s"
    );
}

#[test]
fn large_dense_layers_do_not_notice_the_host() {
    // Llama 3 70B in fp8 at 8K tokens, tp 2: every kernel runs far longer than its launch.
    let (grace, x86) = racks();
    let c = ParallelConfig {
        dp: 8,
        tp: 2,
        pp: 4,
        sp: true,
        zero: 1,
        ..ParallelConfig::default()
    };
    let t = TrainSpec {
        dtype: Dtype::Fp8,
        ..TrainSpec::new(128, 8192)
    };
    let (g, x) = (
        time_s("llama3-70b", &grace, &t, &c),
        time_s("llama3-70b", &x86, &t, &c),
    );
    assert!((g / x - 1.0).abs() < 0.005, "grace {g} s, x86 {x} s");
}
