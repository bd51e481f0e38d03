//! The `plait` binary as a user meets it: JSON fields other tools rely on, the human
//! report, and one-line errors (never a panic) for bad input.

mod common;

use common::plait;

const SC21_145B: &[&str] = &[
    "estimate",
    "--model",
    "gpt-145.6b",
    "--cluster",
    "dgx-a100-80g",
    "--gpus",
    "1536",
    "--gbs",
    "2304",
    "--tp",
    "8",
    "--pp",
    "8",
    "--vp",
    "2",
    "--mbs",
    "2",
    "--recompute",
    "full",
    "--dtype",
    "fp16",
    "--attention",
    "unfused",
    "--dropout",
    "--no-overlap-grad-reduce",
];

#[test]
fn estimate_json_has_the_contract_fields() {
    let mut args = SC21_145B.to_vec();
    args.push("--json");
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "iteration_time_s",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "peak_memory_bytes",
    ] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{key}: {}",
            v[key]
        );
    }
    assert_eq!(v["fits"], true);
    let b = &v["breakdown"];
    let sum: f64 = b
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_f64().unwrap())
        .sum();
    assert!((sum / v["iteration_time_s"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    // First pipeline rank: the embedding and its blocks of both chunks (80 layers / 16 chunks).
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1 + 2 * 5);
    assert_eq!(layers[0]["name"], "embedding");
    assert_eq!(layers[1]["name"], "block.0");
    assert_eq!(layers[6]["name"], "block.40");
    for l in &layers[1..] {
        assert!(l["forward_compute_s"].as_f64().unwrap() > 0.0);
        assert!(
            l["backward_compute_s"].as_f64().unwrap() > l["forward_compute_s"].as_f64().unwrap()
        );
        assert!(l["activation_bytes"].as_f64().unwrap() > 0.0);
    }
    // SC'21 reports 148 TFLOP/s (47 % of peak) for this run with recompute counted.
    let mfu = v["mfu"].as_f64().unwrap();
    assert!((0.3..0.5).contains(&mfu), "{mfu}");
}

#[test]
fn estimate_table_report() {
    let (code, out, err) = plait(SC21_145B);
    assert_eq!(code, 0, "{err}");
    insta::assert_snapshot!(out);
}

#[test]
fn a_model_that_cannot_fit_is_an_answer_not_an_error() {
    let (code, out, _) = plait(&["estimate", "--model", "gpt-1t", "--gpus", "8", "--tp", "8"]);
    assert_eq!(code, 0);
    assert!(out.contains("DOES NOT FIT: stage 0 needs"), "{out}");
    let (code, out, _) = plait(&[
        "estimate", "--model", "gpt-1t", "--gpus", "8", "--tp", "8", "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fits"], false);
    assert!(v["reason"].as_str().unwrap().contains("GiB"));
}

/// Each bad input: exit code 2, one line on stderr naming `field`, no panic.
fn check_error(args: &[&str], field: &str) {
    let (code, out, err) = plait(args);
    assert_ne!(code, 0, "{args:?} succeeded: {out}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        err.contains(field),
        "{args:?}: expected `{field}` in: {err}"
    );
    // clap's own usage errors add a hint line; ours are exactly one line.
    if !err.contains("For more information") {
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn bad_input_is_a_one_line_error_naming_the_field() {
    let dir = std::env::temp_dir().join(format!("plait-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    check_error(
        &["estimate", "--model", "gpt5"],
        "unknown model preset `gpt5`",
    );
    check_error(&["estimate", "--cluster", "tpu-v9"], "dgx-h100");
    check_error(&["estimate", "--tp", "7"], "`tp`");
    check_error(&["estimate", "--model", "gpt-1.7b", "--pp", "48"], "`pp`");
    check_error(&["estimate", "--tp", "0"], "`tp`");
    check_error(&["estimate", "--tp", "-2"], "`tp`");
    check_error(&["estimate", "--gbs", "-5"], "`gbs`");
    check_error(&["estimate", "--seq", "0"], "`seq`");
    check_error(
        &["estimate", "--gpus", "1000", "--tp", "8", "--pp", "8"],
        "`gpus`",
    );
    check_error(
        &["estimate", "--gpus", "64", "--dp", "4", "--tp", "8"],
        "`dp`",
    );
    check_error(&["estimate", "--zero", "5"], "`zero`");
    // Hybrid sharding: a divisor of dp, and only with a ZeRO stage that shards.
    check_error(
        &["estimate", "--gpus", "64", "--zero", "3", "--shard", "6"],
        "`shard`",
    );
    check_error(&["estimate", "--gpus", "64", "--shard", "8"], "ZeRO ≥ 1");
    check_error(&["estimate", "--shard", "0"], "`shard`");
    check_error(
        &["estimate", "--model", "mixtral-8x7b", "--moe-capacity", "0"],
        "--moe-capacity",
    );
    check_error(&["estimate", "--moe-capacity", "NaN"], "capacity factor");
    check_error(
        &["plan", "--gpus", "64", "--dp", "64", "--shard", "6"],
        "`shard`",
    );
    check_error(
        &["plan", "--gpus", "64", "--zero", "0", "--shard", "8"],
        "ZeRO ≥ 1",
    );
    // ZB-V runs exactly two chunks per rank, over a pipeline.
    check_error(
        &[
            "estimate",
            "--gpus",
            "8",
            "--pp",
            "4",
            "--vp",
            "3",
            "--schedule",
            "zb-v",
        ],
        "exactly 2 chunks",
    );
    check_error(&["estimate", "--gpus", "8", "--schedule", "zb-v"], "pp ≥ 2");
    // Ulysses splits heads over cp; a kind of cp communication needs cp.
    check_error(
        &[
            "estimate",
            "--model",
            "llama3-70b",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--cp",
            "2",
            "--sp",
            "--cp-comm",
            "a2a",
        ],
        "--cp-comm: `cp_comm`",
    );
    check_error(&["estimate", "--cp-comm", "ring"], "p2p|a2a|allgather");
    check_error(
        &["plan", "--gpus", "64", "--cp", "1", "--cp-comm", "a2a"],
        "cp ≥ 2",
    );
    check_error(
        &["estimate", "--schedule", "pipedream"],
        "gpipe|1f1b|interleaved|zb-h1|scp",
    );
    check_error(&["estimate", "--recompute", "some"], "none|selective|full");
    // Sizes are bounded before anything is allocated by them.
    check_error(&["estimate", "--vp", "9223372036854775807"], "`vp`");
    check_error(
        &["estimate", "--pp", "4294967296"],
        "integers from 1 to 1048576",
    );
    check_error(
        &["estimate", "--engine", "colossal"],
        "megatron|deepspeed|fsdp|torchtitan|plait",
    );
    check_error(
        &[
            "plan",
            "--gpus",
            "64",
            "--engine",
            "fsdp",
            "--export",
            "deepspeed",
        ],
        "--engine fsdp contradicts --export deepspeed",
    );
    check_error(
        &["plan", "--gpus", "1024", "--engine", "fsdp"],
        "FSDP shards data-parallel only",
    );
    check_error(&["estimate", "--dtype", "fp8"], "`dtype`");
    check_error(
        &[
            "estimate",
            "--model",
            "mixtral-8x7b",
            "--ep",
            "3",
            "--dp",
            "3",
        ],
        "`ep`",
    );
    check_error(&["estimate", "--mbs", "7"], "`mbs`");
    let cfg = write(
        "config.json",
        r#"{"model_type": "llama", "hidden_size": 4096, "num_hidden_layer": 32}"#,
    );
    check_error(
        &["estimate", "--model", &cfg],
        "`num_hidden_layers`: missing (found `num_hidden_layer`",
    );
    let cfg = write(
        "typo.json",
        r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000, "num_hidden_layer": 32}"#,
    );
    check_error(&["estimate", "--model", &cfg], "num_hidden_layers");
    let toml = write("c.toml", "base = \"dgx-h100\"\ngpus_per_nod = 8\n");
    check_error(&["estimate", "--cluster", &toml], "gpus_per_nod");
    let profile = write(
        "p.json",
        "{\"gpu\": \"x\", \"memory_bandwidth_bytes_per_s\": 1e12, \"gemm\": []}",
    );
    check_error(&["estimate", "--profile", &profile], "`gemm`");
    check_error(
        &["estimate", "--model", "/nonexistent/config.json"],
        "cannot read",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn estimate_names_its_engine_and_brackets_the_time() {
    let under = |engine: &str| {
        common::json(&[
            "estimate",
            "--model",
            "llama2-7b",
            "--gpus",
            "64",
            "--zero",
            "3",
            "--mbs",
            "2",
            "--gbs",
            "512",
            "--engine",
            engine,
            "--json",
        ])
    };
    for engine in ["megatron", "deepspeed", "fsdp", "torchtitan", "plait"] {
        let v = under(engine);
        assert_eq!(v["engine"], engine);
        let (low, mid, high) = (
            v["iteration_time_low_s"].as_f64().unwrap(),
            v["iteration_time_s"].as_f64().unwrap(),
            v["iteration_time_high_s"].as_f64().unwrap(),
        );
        assert!(low < mid && mid < high, "{engine}: {low} {mid} {high}");
    }
    // The engines differ where their profiles do: FSDP's eager kernels and Triton attention
    // against Megatron's fused ones.
    let time = |engine: &str| under(engine)["iteration_time_s"].as_f64().unwrap();
    assert!(time("fsdp") > time("megatron"));
}

#[test]
fn compile_fuses_torchtitan_and_is_refused_elsewhere() {
    // torchtitan's Llama 3.1 8B benchmark workload.
    const WORKLOAD: [&str; 12] = [
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "8",
        "--gbs",
        "16",
        "--seq",
        "8192",
        "--engine",
        "torchtitan",
    ];
    let time = |extra: &[&str]| {
        let mut args = vec!["estimate"];
        args.extend_from_slice(&WORKLOAD);
        args.extend_from_slice(&[
            "--zero",
            "3",
            "--mbs",
            "2",
            "--recompute",
            "selective",
            "--json",
        ]);
        common::step_s(&args, extra)
    };
    // Inductor fuses the eager norms, RoPE, SwiGLU and loss: about 14 % less time.
    let (eager, compiled) = (time(&[]), time(&["--compile"]));
    assert!(
        compiled < 0.95 * eager && compiled > 0.75 * eager,
        "{eager} {compiled}"
    );
    // Engines without a torch.compile path say which engine has one.
    common::check(
        &["estimate", "--compile"],
        "--compile: engine megatron has no torch.compile path (allowed with --engine torchtitan)",
    );
    common::check(
        &["plan", "--gpus", "8", "--engine", "fsdp", "--compile"],
        "allowed with --engine torchtitan",
    );
    // The loss left eager (torchtitan of 2024, or `components = ["model"]`) costs time.
    let blocks_only = time(&["--compile", "--compile-components", "model"]);
    assert!(
        blocks_only > compiled && blocks_only < eager,
        "{blocks_only}"
    );
    common::check(
        &[
            "estimate",
            "--engine",
            "torchtitan",
            "--compile-components",
            "model",
        ],
        "--compile-components: says what --compile compiles (allowed with --compile)",
    );
    common::check(
        &[
            "estimate",
            "--engine",
            "torchtitan",
            "--compile",
            "--compile-components",
            "loss",
        ],
        "--compile-components: `loss` leaves the model eager (allowed: model or model,loss)",
    );
    common::check(
        &["estimate", "--engine", "torchtitan", "--compile", "--compile-components", "model,optimizer"],
        "--compile-components: unknown component `optimizer` (allowed: model, loss; e.g. model,loss)",
    );
    common::check(
        &["estimate", "--engine", "torchtitan", "--async-tp"],
        "--async-tp: torchtitan's async tensor parallelism runs in compiled blocks (allowed with --compile)",
    );
    // PyTorch 2.10+ runs SDPA's cuDNN backend on Hopper: attention 1.77x as fast, the step
    // shorter; engines that do not call SDPA refuse it.
    let cudnn = time(&["--compile", "--sdpa", "cudnn"]);
    assert!(
        cudnn < compiled && cudnn > 0.85 * compiled,
        "{compiled} {cudnn}"
    );
    common::check(
        &["estimate", "--sdpa", "cudnn"],
        "--sdpa: engine megatron does not call PyTorch's scaled_dot_product_attention (allowed: flash; cudnn with --engine torchtitan)",
    );
    // Megatron-Core's all-to-all overlap is its engine's, with experts spread over ep.
    common::check(
        &["estimate", "--engine", "torchtitan", "--moe-a2a-overlap"],
        "--moe-a2a-overlap: `moe_a2a_overlap`: the overlap is Megatron-Core's combined 1F1B, not engine torchtitan's (allowed: under engine megatron)",
    );
    common::check(
        &["estimate", "--engine", "fsdp", "--moe-dispatcher", "deepep"],
        "--moe-dispatcher: `moe_dispatcher`: engine fsdp does not run the deepep dispatcher (allowed: alltoall)",
    );
    common::check(
        &["estimate", "--moe-a2a-overlap"],
        "--moe-a2a-overlap: `moe_a2a_overlap`: gpt3-175b at ep 1 has no expert all-to-alls (allowed: with experts and ep > 1)",
    );
    // An fp8 recipe is fp8's alone, and each engine's quantiser runs its own.
    common::check(
        &[
            "estimate",
            "--engine",
            "torchtitan",
            "--float8-recipe",
            "rowwise",
        ],
        "--float8-recipe: rowwise is an fp8 recipe and the run is bf16 (allowed with fp8)",
    );
    common::check(
        &["estimate", "--dtype", "fp8", "--cluster", "dgx-h100", "--float8-recipe", "rowwise"],
        "--float8-recipe: engine megatron does not run the rowwise recipe (allowed: delayed, tensorwise, blockwise)",
    );
    common::check(
        &["estimate", "--engine", "torchtitan", "--dtype", "fp8", "--cluster", "dgx-h100", "--float8-recipe", "delayed"],
        "--float8-recipe: engine torchtitan does not run the delayed recipe (allowed: tensorwise, rowwise, rowwise-gw-hp)",
    );
    common::check(
        &["estimate", "--engine", "torchtitan", "--dtype", "fp8", "--cluster", "dgx-h100", "--float8-recipe", "rowwise", "--float8-all-gather"],
        "--float8-all-gather: torchao gathers fp8 weights under the tensorwise recipe alone (allowed with --dtype fp8 --engine torchtitan --float8-recipe tensorwise; got --dtype fp8 --engine torchtitan --float8-recipe rowwise)",
    );
    common::check(
        &["estimate", "--dtype", "fp8", "--cluster", "dgx-h100", "--float8-recipe", "columnwise"],
        "invalid value 'columnwise' for '--float8-recipe <FLOAT8_RECIPE>': `columnwise` is not one of delayed|tensorwise|blockwise|rowwise|rowwise-gw-hp",
    );
    // An eager torchtitan plan says what compiling would save, as text and as data.
    let mut args = vec!["plan"];
    args.extend_from_slice(&WORKLOAD);
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("with --compile plan 1 would take"), "{out}");
    args.push("--json");
    let v = common::json(&args);
    let hint = &v["what_if"][0];
    assert_eq!(hint["flag"], "--compile");
    assert!(hint["change"].as_f64().unwrap() < -0.05, "{hint}");
    let megatron = common::json(&["plan", "--gpus", "8", "--json"]);
    assert_eq!(megatron["what_if"].as_array().unwrap().len(), 0);
    // `--export torchtitan` plans under torchtitan, so it may compile; the export says so.
    let dir = std::env::temp_dir().join(format!("plait-compile-export-{}", std::process::id()));
    // `plan` of the workload with `extra` flags, its files in `dir`: its text.
    let plan_into = |extra: &[&str]| {
        let mut args = vec!["plan"];
        args.extend_from_slice(&WORKLOAD);
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--out", dir.to_str().unwrap()]);
        let (code, out, err) = plait(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    plan_into(&["--compile", "--async-tp", "--export", "torchtitan-0.2"]);
    let toml = std::fs::read_to_string(dir.join("torchtitan.toml")).unwrap();
    assert!(toml.contains("[compile]\nenable = true\n"), "{toml}");
    assert!(
        toml.contains("enable_async_tensor_parallel = true\n"),
        "{toml}"
    );
    std::fs::remove_dir_all(&dir).ok();
    // An fp8 plan for torchtitan 0.3 is costed with the recipe its float8 converter runs,
    // row-wise, unless told otherwise; and says so.
    let out = plan_into(&["--dtype", "fp8", "--export", "torchtitan"]);
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("fp8 (rowwise scaling)"),
        "{out}"
    );
    let py = std::fs::read_to_string(dir.join("torchtitan_config.py")).unwrap();
    assert!(py.contains("recipe_name=\"rowwise\""), "{py}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn validate_prints_every_table_with_its_error() {
    let (code, out, err) = plait(&["validate"]);
    assert_eq!(code, 0, "{err}");
    for table in [
        "SC'21 Table 1",
        "SC'21 Table 2",
        "PyTorch FSDP, A100)",
        "PyTorch FSDP, A100 40GB",
        "PyTorch FSDP, H100",
        "NeMo (Megatron-Core",
        "NeMo dense on Blackwell",
        "NeMo long context",
        "torchtitan benchmarks",
        "Megatron-Bridge (NeMo",
        "Megatron-Bridge fine-tuning",
    ] {
        assert!(out.contains(table), "{out}");
    }
    let v = common::json(&["validate", "--json"]);
    let tables = v.as_array().unwrap();
    assert_eq!(tables.len(), 11);
    for t in tables {
        let rows = t["rows"].as_array().unwrap();
        assert!(!rows.is_empty());
        let mean: f64 = rows
            .iter()
            .map(|r| r["error"].as_f64().unwrap().abs())
            .sum::<f64>()
            / rows.len() as f64;
        assert!((mean - t["mean_abs_error"].as_f64().unwrap()).abs() < 1e-12);
        // The peak memory error over the rows that publish it, where any do.
        let memory: Vec<f64> = rows
            .iter()
            .filter_map(|r| r["memory_error"].as_f64())
            .collect();
        assert_eq!(memory.len() as u64, t["memory_runs"].as_u64().unwrap());
        match t["memory_mean_abs_error"].as_f64() {
            Some(m) => {
                let mean = memory.iter().map(|e| e.abs()).sum::<f64>() / memory.len() as f64;
                assert!((mean - m).abs() < 1e-12);
            }
            None => assert!(memory.is_empty()),
        }
    }
    // torchtitan's benchmarks publish their peak memory (20 of 28 runs).
    let titan = tables
        .iter()
        .find(|t| t["table"].as_str().unwrap().contains("torchtitan"))
        .unwrap();
    assert_eq!(titan["memory_runs"], 20);
}

#[test]
fn plan_refuses_recompute_modules_the_engine_or_model_lacks() {
    // Said at once, not found as "no plan fits" after the search.
    check_error(
        &[
            "plan",
            "--gpus",
            "8",
            "--engine",
            "torchtitan",
            "--recompute",
            "core_attn+mlp",
        ],
        "recompute modules (core_attn+mlp) are Megatron-Core's, not torchtitan's",
    );
    check_error(
        &[
            "plan",
            "--gpus",
            "8",
            "--model",
            "llama3-8b",
            "--recompute",
            "moe_act",
        ],
        "moe_act needs experts, which llama3-8b has not",
    );
}

#[test]
fn a_model_directory_is_read_through_its_config_json() {
    let dir = std::env::temp_dir().join(format!("plait-model-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        include_str!("../../spec/tests/fixtures/hf/qwen3-30b-a3b.json"),
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    let v = common::json(&[
        "estimate",
        "--model",
        d,
        "--gpus",
        "64",
        "--ep",
        "8",
        "--gbs",
        "512",
        "--seq",
        "4096",
        "--cluster",
        "dgx-h100",
        "--json",
    ]);
    assert!(v["breakdown"]["ep_comm_s"].as_f64().unwrap() > 0.0);
    std::fs::remove_file(dir.join("config.json")).unwrap();
    check_error(&["estimate", "--model", d], "without a config.json");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_configuration_pasted_from_plan_estimates_like_its_flags() {
    let pasted = common::json(&[
        "estimate",
        "--gpus",
        "1024",
        "--config",
        "dp32 tp8 pp4 vp8 mbs4 zero2 sp recompute=selective interleaved",
        "--json",
    ]);
    let flags = common::json(&[
        "estimate",
        "--gpus",
        "1024",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vp",
        "8",
        "--mbs",
        "4",
        "--zero",
        "2",
        "--sp",
        "--recompute",
        "selective",
        "--json",
    ]);
    assert_eq!(pasted["iteration_time_s"], flags["iteration_time_s"]);
    assert_eq!(pasted["config"], flags["config"]);
    check_error(&["estimate", "--config", "tp8 tp4"], "given twice");
}

#[test]
fn a_huge_batch_is_answered_at_once() {
    // 2^63 − 1 sequences: the micro-batch sizes are tested, not every divisor of the batch,
    // and the token count is not multiplied in u64. The answer is that no schedule holds so
    // many micro-batches, at once, not after minutes of trial division.
    check_error(
        &[
            "plan",
            "--gpus",
            "64",
            "--gbs",
            "9223372036854775807",
            "--model",
            "llama2-7b",
        ],
        "too large to schedule",
    );
}

#[test]
fn a_reader_that_leaves_early_is_not_an_error() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_plait"))
        .args(["plan", "--gpus", "1024"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The pipe closes here, before plait has written its table.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with("plait plan"), "{first}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn recompute_layers_recompute_part_of_each_stage() {
    // Llama 3 70B on 64 H100 at tp4 pp4: 20 blocks per stage, as NeMo's recipes recompute
    // some of them (Megatron's --recompute-method block --recompute-num-layers).
    let base = [
        "estimate",
        "--model",
        "llama3-70b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "64",
        "--gbs",
        "128",
        "--seq",
        "8192",
        "--tp",
        "4",
        "--pp",
        "4",
        "--sp",
        "--recompute",
        "full",
        "--json",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let (code, out, err) = plait(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let stage = &v["stages"][0];
        assert_eq!(stage["blocks"], 20);
        (
            v["breakdown"]["recompute_s"].as_f64().unwrap(),
            v["memory"]["activations_bytes"].as_f64().unwrap(),
            stage["recomputed_blocks"].as_u64().unwrap(),
        )
    };
    let (all_s, all_act, all_n) = run(&[]);
    let (five_s, five_act, five_n) = run(&["--recompute-layers", "5"]);
    assert_eq!((all_n, five_n), (20, 5));
    // A quarter of the blocks recompute: a quarter of the recompute time; the other blocks
    // keep their activations.
    assert!((five_s / all_s - 0.25).abs() < 1e-9, "{five_s} vs {all_s}");
    assert!(five_act > 5.0 * all_act, "{five_act} vs {all_act}");
    // A count above the blocks of a chunk recomputes them all.
    assert_eq!(run(&["--recompute-layers", "99"]), (all_s, all_act, all_n));
    let mut selective = base.to_vec();
    let at = selective.len() - 2;
    selective[at] = "selective";
    selective.extend_from_slice(&["--recompute-layers", "5"]);
    check_error(&selective, "recompute_layers");
}

#[test]
fn zb_v_takes_its_two_chunks_without_being_told() {
    // `--schedule zb-v` implies --vp 2 (flags) and `zb-v` implies vp2 (--config).
    let base = ["estimate", "--model", "llama2-7b", "--gpus", "8", "--json"];
    for extra in [
        &["--pp", "4", "--schedule", "zb-v"][..],
        &["--config", "pp4 zb-v"][..],
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (code, out, err) = plait(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["config"]["vp"], 2, "{out}");
        assert_eq!(v["config"]["schedule"], "zb-v", "{out}");
    }
}

#[test]
fn every_degree_has_its_flag_in_its_own_words() {
    // The degree flags are written from `plait_spec::Degree::ALL`: each command that takes
    // a configuration lists each degree with the words `Degree::what` gives it, and a
    // whole `--config` excludes them.
    for command in ["estimate", "simulate", "plan"] {
        let (code, out, err) = plait(&[command, "--help"]);
        assert_eq!(code, 0, "{err}");
        for &d in plait_spec::Degree::ALL {
            let flag = format!("--{} <{}>", d.name(), d.name().to_ascii_uppercase());
            assert!(out.contains(&flag), "{command}: {flag}\n{out}");
            let words = d.what().trim_end_matches(')');
            assert!(out.contains(words), "{command}: {words}\n{out}");
        }
    }
    common::check(
        &["estimate", "--config", "dp8 tp1", "--ep", "2"],
        "the argument '--config <CONFIG>' cannot be used with '--ep <EP>'",
    );
}

#[test]
fn a_megatron_pipeline_layout_sets_the_blocks_of_each_stage() {
    // DeepSeek-V3 on 1,024 H100 as NVIDIA's recipe lays it out (the embedding and one
    // layer, thirty stages of two, the MTP layer and the loss alone): the last stage no
    // longer holds blocks beside the head, and the step is shorter than the even split's.
    let base: Vec<&str> = ["estimate"]
        .into_iter()
        .chain(common::DSV3_ON_1024_H100.split_whitespace())
        .chain(["--vp", "4", "--ep", "64", "--sp", "--zero", "1", "--json"])
        .collect();
    let even = common::json(&base);
    let laid = common::json(&[&base[..], &["--pipeline-layout", "Et|(tt|)*30mL"]].concat());
    let step = |v: &serde_json::Value| v["iteration_time_s"].as_f64().unwrap();
    assert!(
        step(&laid) < step(&even),
        "{} vs {}",
        step(&laid),
        step(&even)
    );
    // The header names the blocks of each virtual stage where they are not the even split.
    let text_args = [
        &base[..base.len() - 1],
        &["--pipeline-layout", "Et|(tt|)*30mL"],
    ]
    .concat();
    let (code, out, err) = plait(&text_args);
    assert_eq!(code, 0, "{err}");
    let twos = vec!["2"; 30].join(", ");
    assert!(
        out.contains(&format!("· blocks per virtual stage [1, {twos}, 0]")),
        "{out}"
    );
    common::check(
        &[&base[..], &["--pipeline-layout", "Et|(tt|)*29mL"]].concat(),
        "--pipeline-layout: `pipeline_layout`: 31 stages for pp 8 × vp 4 = 32 chunks",
    );
    common::check(
        &[&base[..], &["--pipeline-layout", "Et|(tt|)*30L"]].concat(),
        "0 × m where plait needs 1",
    );
}

#[test]
fn fine_tuning_packs_samples_of_one_length_or_several() {
    let step = |extra: &[&str]| {
        let args = [
            "estimate",
            "--model",
            "llama3-8b",
            "--cluster",
            "dgx-h100",
            "--gpus",
            "8",
            "--gbs",
            "64",
            "--seq",
            "4096",
            "--task",
            "sft",
            "--json",
        ];
        common::step_s(&args, extra)
    };
    // A distribution costs as samples of its token-weighted mean length (Σ s·L² / Σ s·L).
    let mixed = step(&["--sample-lengths", "512:1,3584:1"]);
    assert_eq!(mixed, step(&["--pack-len", "3200"]));
    assert!(step(&["--pack-len", "512"]) < mixed && mixed < step(&[]));
    common::check(
        &["estimate", "--sample-lengths", "512:1"],
        "--sample-lengths: packing applies to fine-tuning (allowed with --task sft or lora)",
    );
    common::check(
        &[
            "estimate",
            "--task",
            "sft",
            "--seq",
            "4096",
            "--sample-lengths",
            "512:1,8192:1",
        ],
        "--sample-lengths: a sample of 8192 tokens does not fit a sequence of 4096",
    );
}

#[test]
fn activation_offloading_is_stated_and_its_conditions_named_by_flag() {
    let base = [
        "estimate",
        "--model",
        "llama3-70b",
        "--cluster",
        "gb300-nvl72",
        "--gpus",
        "64",
        "--gbs",
        "256",
        "--seq",
        "8192",
        "--dtype",
        "fp8",
        "--cpu-offload-layers",
        "20",
    ];
    let (code, out, err) = plait(&[&base[..], &["--config", "dp64 mbs2 zero3"]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("config: dp64 tp1 pp1 mbs2 zero3 1f1b · activations of 20 blocks offloaded"),
        "{out}"
    );
    let (code, _, err) = plait(&[&base[..], &["--config", "dp8 pp8 mbs2 zero1"]].concat());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --pp:") && err.contains("pp = 1"),
        "{err}"
    );
}
