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
