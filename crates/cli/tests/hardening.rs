//! Hardening (issue 15): inputs far beyond any machine are refused at once with the limit
//! named, or answered as the largest meaningful input would be; never a panic, an abort or
//! a number printed other than as given.

mod common;

use common::{check, plait};

const BERT24: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../partition/tests/data/layer_bert24_training.json"
);

/// (arguments, what the first error line contains).
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["schedule", "--stages", "9223372036854775807"],
        "--stages: 9223372036854775807 is larger than the 65536",
    ),
    (
        &["schedule", "--microbatches", "9223372036854775807"],
        "--microbatches: 9223372036854775807 is larger than the 16777216",
    ),
    (
        &["schedule", "--virtual", "9223372036854775807"],
        "--virtual: 9223372036854775807",
    ),
    (
        &["schedule", "--stages", "10000", "--microbatches", "10000"],
        "is larger than the 16777216 a schedule supports",
    ),
    (
        &[
            "partition",
            "--graph",
            BERT24,
            "--max-ideals",
            "9223372036854775807",
        ],
        "--max-ideals: `max-ideals`: 9223372036854775807 is more than the 16777216",
    ),
];

#[test]
fn sizes_past_the_limits_are_refused_with_the_limit() {
    for (args, expected) in REFUSED {
        check(args, expected);
    }
}

/// Devices and CPUs beyond the graph's units answer as the units would.
#[test]
fn huge_partition_limits_answer() {
    for extra in [
        &["--devices", "9223372036854775807"][..],
        &["--devices", "100000000000", "--cpus", "100000000000"],
        &["--cpus", "9223372036854775807"],
    ] {
        let mut args = vec!["partition", "--graph", BERT24, "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = plait(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["feasible"], true, "{extra:?}");
        assert_eq!(v["optimal"], true, "{extra:?}");
    }
}

/// A sparse file of `len` bytes (no disk used) under the test's temporary directory.
fn sparse(name: &str, len: u64) -> String {
    let dir = std::env::temp_dir().join(format!("plait-hardening-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
    path.display().to_string()
}

/// Every input file is read through one capped reader: a file over its kind's limit is
/// refused before it is read, naming the flag, the file, its size and the limit, and a device
/// that never ends (`/dev/zero`) is refused after at most the limit.
#[test]
fn every_input_file_is_capped() {
    const MIB: u64 = 1 << 20;
    let config = sparse("config.json", 64 * MIB + 1);
    let toml = sparse("cluster.toml", 64 * MIB + 1);
    let graph = sparse("graph.json", 512 * MIB + 1);
    let onnx = sparse("model.onnx", 2048 * MIB + 1);
    let data = sparse("data.txt", 256 * MIB + 1);
    let cases: Vec<(Vec<&str>, &str, u64, &str)> = vec![
        (vec!["estimate", "--model", &config], "--model", 64, &config),
        (vec!["estimate", "--cluster", &toml], "--cluster", 64, &toml),
        (
            vec!["estimate", "--profile", &config],
            "--profile",
            64,
            &config,
        ),
        (
            vec!["plan", "--model", &onnx, "--gpus", "8"],
            "--model",
            2048,
            &onnx,
        ),
        (
            vec!["partition", "--graph", &graph],
            "graph file",
            512,
            &graph,
        ),
        (
            vec!["partition", "--graph", &onnx],
            "graph file",
            2048,
            &onnx,
        ),
        (vec!["place", "--graph", &graph], "graph file", 512, &graph),
        (
            vec!["place", "--model", "llama3-8b", "--devices", &toml],
            "device-set file",
            64,
            &toml,
        ),
        (vec!["mixed", "--mixed", &toml], "--mixed", 64, &toml),
        (
            vec!["train", "--model", "tiny-llama", "--data", &data],
            "--data",
            256,
            &data,
        ),
        (
            vec!["train", "--model", "tiny-llama", "--profile", &config],
            "--profile",
            64,
            &config,
        ),
    ];
    for (args, flag, limit_mib, file) in cases {
        let (code, out, err) = plait(&args);
        assert_ne!(code, 0, "{args:?}: {out}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: "), "{args:?}: {err}");
        for part in [flag, file, &format!("{} MiB", limit_mib)] {
            assert!(first.contains(part), "{args:?}: {part} not in {first}");
        }
        assert!(first.contains(" bytes"), "{args:?}: {first}");
        assert!(!err.contains("panicked"), "{err}");
    }
    for args in [
        &["estimate", "--model", "/dev/zero"][..],
        &["estimate", "--cluster", "/dev/zero"],
        &["plan", "--gpus", "8", "--profile", "/dev/zero"],
    ] {
        let (code, _, err) = plait(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("`/dev/zero`") && err.contains("64 MiB"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_dir_all(std::path::Path::new(&config).parent().unwrap()).unwrap();
}

/// Every number of a JSON document is finite (serde_json writes NaN and ±∞ as null).
fn assert_finite(v: &serde_json::Value, what: &str) {
    match v {
        serde_json::Value::Null => panic!("{what}: null (a NaN or infinity) in the output"),
        serde_json::Value::Array(a) => a.iter().for_each(|x| assert_finite(x, what)),
        serde_json::Value::Object(o) => o.values().for_each(|x| assert_finite(x, what)),
        _ => {}
    }
}

/// Times at the ends of what is accepted give finite numbers throughout.
#[test]
fn extreme_schedule_times_stay_finite() {
    for times in [
        &[
            "--forward",
            "1e12",
            "--backward",
            "1e12",
            "--comm",
            "1e12",
            "--recompute",
            "1e12",
        ][..],
        &["--forward", "5e-324", "--backward", "5e-324"],
        &["--forward", "1e-300", "--backward", "0", "--comm", "1e12"],
    ] {
        let mut args = vec![
            "schedule",
            "--stages",
            "16",
            "--microbatches",
            "64",
            "--json",
        ];
        args.extend_from_slice(times);
        let v = common::json(&args);
        assert_finite(&v, &format!("{times:?}"));
    }
}

/// Pins no configuration can complete are refused as `estimate` refuses them, naming the
/// flag at fault (exit 2), instead of "no plan" with 0 GiB and ≥ 0 GPUs.
const IMPOSSIBLE_PINS: &[(&[&str], &str)] = &[
    (
        &["--tp", "3", "--gpus", "1024"],
        "error: --tp: `tp`: 1024 GPUs do not split into tp = 3",
    ),
    (
        &["--pp", "128", "--gpus", "1024"],
        "error: --pp: `pp`: pp×vp = 128 pipeline chunks",
    ),
    (
        &["--mbs", "1000000", "--gpus", "1024"],
        "error: --mbs: `mbs`: micro-batch 1000000 does not divide",
    ),
    (
        &["--vp", "3", "--pp", "1", "--gpus", "1024"],
        "error: --vp: `vp`: vp = 3 chunks per rank need a pipeline",
    ),
    (
        &["--tp", "5", "--gpus", "1000"],
        "error: --tp: `tp`: 96 attention heads",
    ),
    (
        &["--cp", "3", "--gpus", "3"],
        "error: --cp: `cp`: sequence 2048 does not split over cp = 3",
    ),
    (
        &["--ep", "2", "--gpus", "2"],
        "error: --ep: `ep`: gpt3-175b has no experts",
    ),
];

#[test]
fn impossible_pins_name_the_flag() {
    for (pins, expected) in IMPOSSIBLE_PINS {
        for cmd in ["plan", "estimate"] {
            let mut args = vec![cmd];
            args.extend_from_slice(pins);
            let (code, out, err) = plait(&args);
            // estimate's own defaults may trip another check first; plan's must be this one.
            if cmd == "plan" {
                check(&args, expected);
            } else {
                assert_eq!(code, 2, "{args:?}: {out}{err}");
            }
        }
    }
    // estimate blames the flag at fault too.
    check(&["estimate", "--vp", "3", "--pp", "1"], "error: --vp: `vp`");
    check(
        &[
            "estimate", "--mbs", "1000000", "--gpus", "1024", "--tp", "8", "--pp", "8",
        ],
        "error: --mbs: `mbs`",
    );
}

/// The smallest GPU count with a plan is exact, not a power of two times the node: 1 T
/// parameters first fit on 208 A100s (13 nodes), and tp 3 (never a power of two) has one.
#[test]
fn smallest_gpu_count_is_exact() {
    for (args, expected) in [
        (
            &["--model", "gpt-1t", "--gbs", "512", "--gpus", "1"][..],
            208,
        ),
        (&["--model", "gpt-1t", "--gbs", "512", "--gpus", "200"], 208),
        (&["--tp", "3", "--gpus", "3"], 36),
    ] {
        let mut a = vec!["plan", "--json"];
        a.extend_from_slice(args);
        let v = common::json(&a);
        assert_eq!(
            v["infeasible"]["min_gpus"], expected,
            "{a:?}: {}",
            v["infeasible"]
        );
        // …and there the planner has a plan.
        let gpus = expected.to_string();
        let mut at = a.clone();
        let i = at.iter().position(|x| *x == "--gpus").unwrap();
        at[i + 1] = &gpus;
        let v = common::json(&at);
        assert!(!v["plans"].as_array().unwrap().is_empty(), "{at:?}");
    }
    // Pins that leave no configuration of these GPUs report true bounds, not zeros.
    let (code, out, err) = plait(&["plan", "--model", "gpt-1.7b", "--gpus", "1", "--zero", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("≥ 0 GPUs") && !out.contains("at least 0.0 GiB"),
        "{out}"
    );
    assert!(
        out.contains("the smallest GPU count with a plan is 2"),
        "{out}"
    );
}

/// A GPU count no configuration can occupy (2^63 − 1: no dp divides the batch) gets the
/// nearest counts that have a plan, and no per-GPU memory figure rounded to nothing.
#[test]
fn an_unoccupiable_gpu_count_gets_the_nearest_counts_with_a_plan() {
    let args = [
        "plan",
        "--model",
        "llama2-7b",
        "--gpus",
        "9223372036854775807",
    ];
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no well-formed configuration"), "{out}");
    assert!(!out.contains("0.0 GiB"), "{out}");
    assert!(
        out.contains("the largest GPU count up to 2^20 with a plan is "),
        "{out}"
    );
    let v = common::json(&[&args[..], &["--json"]].concat());
    let inf = &v["infeasible"];
    assert_eq!(inf["cause"], "no_well_formed_configuration", "{inf}");
    let below = inf["max_gpus_below"]
        .as_u64()
        .expect("a smaller count has a plan");
    // …and there the planner has one.
    let below = below.to_string();
    let at = ["plan", "--json", "--model", "llama2-7b", "--gpus", &below];
    assert!(
        !common::json(&at)["plans"].as_array().unwrap().is_empty(),
        "{at:?}"
    );
}

/// An error from the schedule generator is stated once, not once per link of the chain.
#[test]
fn schedule_errors_are_stated_once() {
    let (code, _, err) = plait(&[
        "plan",
        "--model",
        "llama2-7b",
        "--gbs",
        "4294967296",
        "--gpus",
        "16",
        "--seq",
        "4096",
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.matches("a schedule supports").count(), 1, "{err}");
}

/// Cluster TOML errors name the key (with its table) and give the line and column.
#[test]
fn cluster_toml_errors_name_the_key_and_line() {
    let dir = std::env::temp_dir().join(format!("plait-toml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (text, expected)) in [
        (
            "base = \"dgx-h100\"\ngpus_per_node = \"eight\"\n",
            "`gpus_per_node`: line 2, column 17: invalid type",
        ),
        (
            "base = \"dgx-h100\"\n[gpu]\nmemory_gib = \"x\"\n",
            "`gpu.memory_gib`: line 3, column 14: invalid type",
        ),
        (
            "base = \"dgx-h100\"\ngpus_per_node = = 3\n",
            "`gpus_per_node`: line 2, column 17",
        ),
        ("base = \"dgx-h100\"\n[gpu\n", "line 2"),
    ]
    .into_iter()
    .enumerate()
    {
        let f = dir.join(format!("c{i}.toml"));
        std::fs::write(&f, text).unwrap();
        check(&["estimate", "--cluster", f.to_str().unwrap()], expected);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A profile JSON for an H200 with one GEMM and one layer, `edit` applied.
fn profile(edit: impl Fn(&mut serde_json::Value)) -> serde_json::Value {
    let mut v = serde_json::json!({
        "gpu": "NVIDIA H200", "dtype": "bf16", "memory_bandwidth_bytes_per_s": 4.2e12,
        "gemm": [{"m": 4096, "n": 12288, "k": 4096, "time_s": 5.38e-4}],
        "layers": [{"family": "gpt", "hidden": 4096, "heads": 32, "seq": 2048, "mbs": 1,
                    "tp": 1, "forward_s": 1.35e-3, "backward_s": 3.17e-3}],
        "cpu": {"cores": 2, "memory_bytes": 8e9,
                "link": {"latency_s": 1e-5, "bandwidth_bytes_per_s": 1e10}}
    });
    edit(&mut v);
    v
}

/// Finite but absurd numbers are refused before any conversion, the field named with its
/// physical range: never inf or NaN in an estimate, never an MFU above 100 %.
#[test]
fn absurd_cluster_and_profile_numbers_are_refused() {
    let dir = std::env::temp_dir().join(format!("plait-absurd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let h100 = "base = \"dgx-h100\"\n";
    for (i, (text, expected)) in [
        (format!("{h100}memory_reserve_gib = 1e308\n"), "`memory_reserve_gib`: must be ≥ 0 and less than the GPU's memory, got 1e308"),
        (format!("{h100}memory_reserve_gib = 80\n"), "`memory_reserve_gib`: a reserve of 80 GiB leaves nothing of the GPU's 80 GiB (allowed: 0 ≤ x < 80)"),
        (format!("{h100}[gpu]\nmemory_gib = 1\n"), "`gpu.memory_gib`: a reserve of 2 GiB"),
        (format!("{h100}[gpu]\nsustained_clock_ratio = 5e-324\n"), "`gpu.sustained_clock_ratio`: must be in [0.1, 1]"),
        (format!("{h100}[gpu]\nmatmul_efficiency = 5e-324\n"), "`gpu.matmul_efficiency`: must be in [0.01, 1]"),
        (format!("{h100}[gpu]\npeak_bf16_tflops = 1e308\n"), "`gpu.peak_bf16_tflops`: must be a number from 1e-3 to 1e5, got 1e308"),
        (format!("{h100}[gpu]\npeak_bf16_tflops = 5e-324\n"), "`gpu.peak_bf16_tflops`: must be a number from 1e-3 to 1e5, got 5e-324"),
        (format!("{h100}[gpu]\nmemory_gib = 1e308\n"), "`gpu.memory_gib`: must be a number from 1e-3 to 1e5"),
        (format!("{h100}[gpu]\nmemory_bandwidth_gb_per_s = 5e-324\n"), "`gpu.memory_bandwidth_gb_per_s`: must be a number from 1e-3 to 1e6"),
        (format!("{h100}nvlink_bidirectional_gb_per_s = 5e-324\n"), "`nvlink_bidirectional_gb_per_s`: must be a number from 1e-3"),
        (format!("{h100}nic_gbit_per_s = 5e-324\n"), "`nic_gbit_per_s`: must be a number from 1e-3"),
        (format!("{h100}nic_gbit_per_s = 1e308\n"), "`nic_gbit_per_s`"),
    ]
    .into_iter()
    .enumerate()
    {
        let f = dir.join(format!("c{i}.toml"));
        std::fs::write(&f, text).unwrap();
        check(&["estimate", "--cluster", f.to_str().unwrap()], expected);
    }
    let gemm = |t: f64| move |v: &mut serde_json::Value| v["gemm"][0]["time_s"] = t.into();
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (profile(gemm(1.7e308)), "`gemm[0].time_s`: 1.7e308 s is longer than any measured kernel"),
        (profile(gemm(1e-300)), "`gemm[0].time_s`: 1e-300 s for 4096×12288×4096 is unboundedly many TFLOP/s, faster than the GPU's bf16 peak"),
        (profile(gemm(1e-4)), "`gemm[0].time_s`: 1e-4 s for 4096×12288×4096 is 4.123e3 TFLOP/s"),
        (profile(|v| v["memory_bandwidth_bytes_per_s"] = 9e12.into()), "`memory_bandwidth_bytes_per_s`: 9.000e12 B/s is more than this GPU's"),
        (profile(|v| v["memory_bandwidth_bytes_per_s"] = 1e-300.into()), "`memory_bandwidth_bytes_per_s`: must be from 1e9 (1 GB/s) to 1e15 (1 PB/s), got 1e-300"),
        (profile(|v| v["layers"][0]["forward_s"] = 1e308.into()), "`layers[0].forward_s`: 1e308 s"),
    ];
    for (i, (p, expected)) in cases.iter().enumerate() {
        let f = dir.join(format!("p{i}.json"));
        std::fs::write(&f, p.to_string()).unwrap();
        let f = f.to_str().unwrap();
        check(
            &["estimate", "--cluster", "dgx-h200", "--profile", f],
            expected,
        );
    }
    // A CPU profile's GEMMs cannot beat its cores either (1e-300 s gave --plan auto an
    // infinite peak and NaN times to rank by).
    for (t, expected) in [
        (
            1e-300,
            "`gemm[0].time_s`: 1e-300 s for 4096×12288×4096 beats 2 cores",
        ),
        (1.7e308, "`gemm[0].time_s`: 1.7e308 s"),
    ] {
        let f = dir.join("cpu.json");
        std::fs::write(&f, profile(gemm(t)).to_string()).unwrap();
        let f = f.to_str().unwrap();
        check(
            &[
                "train",
                "--model",
                "tiny-gpt",
                "--workers",
                "2",
                "--profile",
                f,
                "--steps",
                "1",
                "--gbs",
                "4",
            ],
            expected,
        );
    }
    // The physical limits leave every real measurement in: the accepted profile's MFU ≤ 1.
    let f = dir.join("ok.json");
    std::fs::write(&f, profile(gemm(4.2e-4)).to_string()).unwrap();
    let v = common::json(&[
        "estimate",
        "--cluster",
        "dgx-h200",
        "--profile",
        f.to_str().unwrap(),
        "--json",
    ]);
    let mfu = v["mfu"].as_f64().unwrap();
    assert!(mfu.is_finite() && mfu > 0.0 && mfu <= 1.0, "{mfu}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A llama config.json of `layers` blocks of width `hidden` in `dir`; its path.
fn llama_config(dir: &std::path::Path, name: &str, hidden: u64, layers: u64) -> String {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let text = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hidden, "intermediate_size": 2 * hidden,
        "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": layers,
        "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": false
    });
    let p = d.join("config.json");
    std::fs::write(&p, text.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

/// Runtime limits (issue 15 item 4): a rank of 800 blocks trains (its compute threads
/// had rayon's 2 MiB stack, and candle's recursive backward overflowed it: abort), more
/// blocks than a rank's stack holds are refused; N workers are checked for the model
/// copies they keep, and `plait profile` for what it will measure, before anything runs.
#[test]
fn runtime_limits_are_checked_before_running() {
    let dir = std::env::temp_dir().join(format!("plait-runtime-limits-{}", std::process::id()));
    let deep = llama_config(&dir, "deep", 16, 800);
    let run = [
        "train",
        "--workers",
        "1",
        "--plan",
        "dp1",
        "--steps",
        "1",
        "--seq",
        "8",
        "--gbs",
        "1",
    ];
    let mut args = run.to_vec();
    args.extend(["--model", &deep]);
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("in 1 steps"), "{out}");
    let deeper = llama_config(&dir, "deeper", 16, 9000);
    let mut args = run.to_vec();
    args.extend(["--model", &deeper]);
    check(&args, "a rank would run up to 9000 blocks");
    // 150 M parameters: one copy fits any test machine, 75 (the fewest any plan of 3000
    // workers keeps) or 3000 do not.
    let wide = llama_config(&dir, "wide", 1024, 12);
    for (extra, expected) in [
        (&["--plan", "auto"][..], "75 model copies of"),
        (
            &["--plan", "dp3000", "--gbs", "3000"],
            "model copies of wide",
        ),
    ] {
        let mut args = vec![
            "train",
            "--model",
            &wide,
            "--workers",
            "3000",
            "--steps",
            "1",
        ];
        args.extend_from_slice(extra);
        check(&args, expected);
    }
    let out = dir.join("p.json");
    check(
        &[
            "profile",
            "--model",
            "llama3-405b",
            "--quick",
            "--output",
            out.to_str().unwrap(),
        ],
        "measuring 8 blocks of llama3-405b",
    );
    assert!(!out.exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// Counts whose work grows with them are bounded, the limit named (fuzz findings in
/// crates/fuzz/corpus: `plan --simulate 2^32` and `--threads 429496` ran on, `--seq 2^63−1`
/// searched for 13 s, `simulate --config "pp2^32 …"` aborted allocating its stage map).
#[test]
fn counts_that_size_work_are_bounded() {
    check(
        &["plan", "--gpus", "8", "--simulate", "4294967296"],
        "--simulate: `simulate`: 4294967296 is more than the simulator re-ranks",
    );
    check(
        &["plan", "--gpus", "8", "--top", "257"],
        "(allowed: integers from 1 to 256)",
    );
    check(
        &["plan", "--gpus", "16", "--threads", "429496"],
        "--threads: `threads`: 429496 is more than the search can use",
    );
    check(
        &["plan", "--gpus", "16", "--seq", "9223372036854775807"],
        "(allowed: integers from 1 to 134217728)",
    );
    check(
        &[
            "simulate",
            "--config",
            "pp4294967296 mbs1 1f1b",
            "--model",
            "gpt-1.7b",
            "--gbs",
            "64",
        ],
        "`pp`: 4294967296 is larger than any machine runs",
    );
    check(
        &[
            "simulate",
            "--config",
            "tp1 pp2 vp9223372036854775807 mbs1 interleaved",
            "--model",
            "gpt-1.7b",
            "--gbs",
            "64",
        ],
        "`vp`: 9223372036854775807 is larger than any machine runs",
    );
}
