//! CUDA graphs as a user states them (`--cuda-graphs`): Megatron-Core's whole-layer replay,
//! which takes away the host's launch wait, refused for engines that replay none and for
//! what Megatron-Core's layer graphs refuse.

mod common;

#[test]
fn whole_layer_graphs_are_megatrons_and_spare_a_host_bound_run_its_launches() {
    let refused = |extra: &[&str], expected: &str| {
        let base = [
            "estimate",
            "--model",
            "llama3-8b",
            "--cluster",
            "dgx-h100",
            "--gpus",
            "8",
        ];
        let graphed = ["--cuda-graphs", "layers"];
        common::check(&[&base[..], extra, &graphed].concat(), expected);
    };
    refused(
        &["--engine", "fsdp"],
        "--cuda-graphs: engine fsdp replays no CUDA graphs in training (allowed: none; layers with engine megatron)",
    );
    // Megatron-Core's layer graphs refuse full recompute and activation offloading.
    refused(
        &["--recompute", "full"],
        "--recompute: `recompute`: recompute = full with whole layers as CUDA graphs",
    );
    refused(
        &["--cpu-offload-layers", "2"],
        "activation offloading with whole layers as CUDA graphs",
    );
    common::check(
        &["estimate", "--cuda-graphs", "full"],
        "`full` is not one of none|layers",
    );
    // Qwen3-30B-A3B on one DGX B200 in MXFP8, one 4K sequence per micro-batch: its small
    // expert layers wait on their kernels' launches unless they replay as graphs.
    let args: Vec<&str> = "estimate --model qwen3-30b-a3b --cluster dgx-b200 --gpus 8 --gbs 512 \
                           --seq 4096 --dtype mxfp8 --ep 8 --mbs 1 --json"
        .split_whitespace()
        .collect();
    let step = |extra: &[&str]| common::step_s(&args, extra);
    let (issued, graphed) = (step(&[]), step(&["--cuda-graphs", "layers"]));
    assert!(graphed < 0.95 * issued, "{graphed} s graphed vs {issued} s");
}

#[test]
fn a_launch_bound_estimate_says_so_and_what_removes_the_wait() {
    // The same model on 8 GB200, whose Grace hosts launch each kernel 2.75× slower than an
    // x86 host: most of the step is the GPUs waiting on launches, and the estimate says so,
    // names the host and, under Megatron-Core, the layer graphs; graphed, the line goes.
    let base: Vec<&str> =
        "estimate --model qwen3-30b-a3b --cluster gb200-nvl72 --gpus 8 --gbs 512 \
                           --seq 4096 --dtype mxfp8 --ep 8 --mbs 1"
            .split_whitespace()
            .collect();
    let (code, out, err) = common::plait(&base);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Grace host, 33 µs to issue an eager kernel"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("launch-bound: "))
        .unwrap_or_else(|| panic!("no launch-bound line:\n{out}"));
    assert!(line.contains("their Grace host"), "{line}");
    assert!(line.contains("`--cuda-graphs layers`"), "{line}");
    let v = common::json(&[&base[..], &["--json"]].concat());
    let (wait, total) = (
        v["breakdown"]["launch_wait_s"].as_f64().unwrap(),
        v["iteration_time_s"].as_f64().unwrap(),
    );
    assert!(wait > 0.5 * total, "{wait} s of {total} s");
    let (code, out, err) = common::plait(&[&base[..], &["--cuda-graphs", "layers"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("launch-bound"), "{out}");
    // The plan at that micro-batch notes the wait inside its compute.
    let mut plan = base.clone();
    plan[0] = "plan";
    let (code, out, err) = common::plait(&plan);
    assert_eq!(code, 0, "{err}");
    let note = out
        .lines()
        .find(|l| l.starts_with("1. "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(note.contains("% waiting on kernel launches)"), "{note}");
}
