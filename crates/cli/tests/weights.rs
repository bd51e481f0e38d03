//! How a low-precision run keeps its weights, as a user states it: Megatron-Core's quantised
//! weights or its 16-bit ones (`--no-fp8-param-gather`), refused where no engine keeps both.

mod common;

/// Llama 3 8B in fp8 on DGX H100s, 64 sequences per step, under the distributed optimizer:
/// the run both tests vary (`--gpus` and the rest follow).
const FP8_LLAMA3_8B: [&str; 11] = [
    "estimate",
    "--model",
    "llama3-8b",
    "--cluster",
    "dgx-h100",
    "--gbs",
    "64",
    "--dtype",
    "fp8",
    "--zero",
    "1",
];

#[test]
fn sixteen_bit_weights_are_megatrons_choice_in_fp8_and_mxfp8() {
    common::check(
        &["estimate", "--engine", "fsdp", "--dtype", "fp8", "--cluster", "dgx-h100", "--no-fp8-param-gather"],
        "--no-fp8-param-gather: only Megatron-Core keeps quantised weights to turn off (allowed with --engine megatron --dtype fp8 or mxfp8; got --engine fsdp --dtype fp8)",
    );
    common::check(
        &["estimate", "--cluster", "dgx-h100", "--no-fp8-param-gather"],
        "--no-fp8-param-gather: only Megatron-Core keeps quantised weights to turn off (allowed with --engine megatron --dtype fp8 or mxfp8; got --engine megatron --dtype bf16)",
    );
    // Kept at 16 bits, the weights are gathered in bf16 and cast every step: the same plan
    // takes longer than with Transformer Engine's fp8 weights.
    let args = [
        &FP8_LLAMA3_8B[..],
        &["--gpus", "16", "--seq", "8192", "--json"],
    ]
    .concat();
    let step = |extra: &[&str]| common::step_s(&args, extra);
    let (quantised, sixteen_bit) = (step(&[]), step(&["--no-fp8-param-gather"]));
    assert!(sixteen_bit > quantised, "{sixteen_bit} vs {quantised}");
}

#[test]
fn sixteen_bit_weights_let_megatron_offload_its_optimizer_at_any_fp8_recipe() {
    // Megatron-Core takes optimizer offloading with fp8 parameter gathers only under delayed
    // scaling (arguments.py:1889-1892); a run that keeps 16-bit weights gathers none.
    let args = [
        &FP8_LLAMA3_8B[..],
        &[
            "--gpus",
            "8",
            "--float8-recipe",
            "tensorwise",
            "--optimizer-offload",
            "0.5",
        ],
    ]
    .concat();
    let (code, _, err) = common::plait(&args);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("optimizer offloading in fp8 tensorwise scaling"),
        "{err}"
    );
    let with = [&args[..], &["--no-fp8-param-gather", "--json"]].concat();
    assert_eq!(common::json(&with)["fits"], true);
}
