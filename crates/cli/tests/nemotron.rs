//! Nemotron-H (Mamba-2 / attention / MLP hybrid) end to end: the preset and a nemotron_h
//! config.json through estimate, plan and simulate with finite numbers; exports refuse.

mod common;

use common::{check, json, plait};

const BATCH: [&str; 8] = [
    "--cluster",
    "dgx-h100",
    "--gpus",
    "64",
    "--gbs",
    "256",
    "--seq",
    "8192",
];

fn with_batch<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter().copied().chain(BATCH).collect()
}

fn assert_sane(v: &serde_json::Value, what: &str) {
    for key in [
        "iteration_time_s",
        "tokens_per_s",
        "mfu",
        "peak_memory_bytes",
    ] {
        let x = v[key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{what}: {key} = {x}");
    }
    let mfu = v["mfu"].as_f64().unwrap();
    assert!((0.1..0.7).contains(&mfu), "{what}: MFU {mfu}");
}

/// The Megatron export in `dir`: its arguments, and the hybrid layer pattern they give.
fn megatron_args_and_pattern(dir: &std::path::Path) -> (String, String) {
    let args = std::fs::read_to_string(dir.join("megatron_args.sh")).unwrap();
    let pattern = args
        .lines()
        .find_map(|l| l.trim().strip_prefix("--hybrid-layer-pattern "))
        .expect("the export names the layer pattern")
        .to_string();
    (args, pattern)
}

#[test]
fn estimate_plan_and_simulate_nemotron_h_8b() {
    let v = json(&with_batch(&[
        "estimate",
        "--model",
        "nemotron-h-8b",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sp",
        "--json",
    ]));
    assert_sane(&v, "estimate");
    assert_eq!(v["fits"], true);
    let plan = json(&with_batch(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--top",
        "3",
        "--json",
    ]));
    let plans = plan["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        assert_sane(&p["estimate"], "plan");
    }
    // A pipeline: the layout search costs each stage by the kinds of its blocks.
    let plan = json(&with_batch(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--pp",
        "4",
        "--top",
        "1",
        "--json",
    ]));
    let blocks: u64 = plan["plans"][0]["stage_map"]["chunk_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert_eq!(blocks, 52);
    let sim = json(&with_batch(&[
        "simulate",
        "--model",
        "nemotron-h-8b",
        "--tp",
        "2",
        "--pp",
        "4",
        "--dp",
        "8",
        "--sp",
        "--json",
    ]));
    let t = sim["estimate"]["iteration_time_s"]
        .as_f64()
        .or_else(|| sim["iteration_time_s"].as_f64())
        .unwrap_or(f64::NAN);
    assert!(t.is_finite() && t > 0.0, "{sim}");
}

#[test]
fn a_nemotron_h_config_json_estimates_and_only_megatron_exports_it() {
    let dir = std::env::temp_dir().join(format!("plait-nemotron-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    let cfg = serde_json::json!({
        "model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 52,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "intermediate_size": 21504, "mlp_hidden_act": "relu2", "num_attention_heads": 32,
        "num_key_value_heads": 8, "attention_head_dim": 128, "mamba_num_heads": 128,
        "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
        "chunk_size": 128, "vocab_size": 131072, "tie_word_embeddings": false
    });
    std::fs::write(&path, cfg.to_string()).unwrap();
    let p = path.to_str().unwrap();
    let from_file = json(&with_batch(&[
        "estimate", "--model", p, "--tp", "2", "--pp", "2", "--sp", "--json",
    ]));
    let preset = json(&with_batch(&[
        "estimate",
        "--model",
        "nemotron-h-8b",
        "--tp",
        "2",
        "--pp",
        "2",
        "--sp",
        "--json",
    ]));
    assert_sane(&from_file, "config.json");
    assert_eq!(from_file["iteration_time_s"], preset["iteration_time_s"]);
    // Megatron-LM builds the hybrid from its layer pattern (split into the plan's
    // pipeline segments); the other exporters refuse, naming the Mamba-2 layers.
    let out_dir = dir.join("megatron");
    let (code, out, err) = plait(&with_batch(&[
        "plan",
        "--model",
        "nemotron-h-8b",
        "--pp",
        "2",
        "--export",
        "megatron",
        "--out",
        out_dir.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "megatron: {out}{err}");
    let (args, pattern) = megatron_args_and_pattern(&out_dir);
    assert_eq!(
        pattern.trim_matches('"').replace('|', ""),
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    );
    assert!(pattern.contains('|'), "two pipeline stages: {pattern}");
    for flag in [
        "--squared-relu",
        "--mamba-num-heads 128",
        "pretrain_hybrid.py",
    ] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    assert!(!args.contains("--num-layers "), "{args}");
    for engine in ["deepspeed", "torchtitan"] {
        let (code, out, err) = plait(&with_batch(&[
            "plan",
            "--model",
            "nemotron-h-8b",
            "--export",
            engine,
        ]));
        assert_ne!(code, 0, "{engine}: {out}");
        assert!(err.contains("Mamba-2"), "{engine}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Mamba-2 layers are not split over cp.
    check(
        &with_batch(&["estimate", "--model", "nemotron-h-8b", "--cp", "2"]),
        "Mamba-2",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn nemotron_3_super_exports_its_multi_token_prediction_module() {
    // Super's MTP module (an attention and a MoE block) follows the layers in Megatron-Core's
    // unified pattern, one depth after `/`, its module shared across depths.
    let dir = std::env::temp_dir().join(format!("plait-super-mtp-{}", std::process::id()));
    let (code, out, err) = plait(&[
        "plan",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--cluster",
        "gb300-nvl72",
        "--gpus",
        "64",
        "--gbs",
        "512",
        "--seq",
        "8192",
        "--dtype",
        "mxfp8",
        "--export",
        "megatron",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (args, pattern) = megatron_args_and_pattern(&dir);
    assert!(pattern.trim_matches('"').ends_with("EME/*E"), "{pattern}");
    for flag in ["--mtp-num-layers 1", "--mtp-use-repeated-layer"] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn blocks_kept_in_bf16_are_costed_and_exported_as_megatron_runs_them() {
    // NVIDIA's NVFP4 recipe for Super keeps its last 14 blocks in bf16: slower than all in
    // NVFP4, and Megatron's launch carries the three flags that do it.
    let run = |extra: &[&str]| {
        let args = [
            "estimate",
            "--model",
            "nemotron-3-super-120b-a12b",
            "--cluster",
            "gb300-nvl72",
            "--gpus",
            "64",
            "--ep",
            "64",
            "--gbs",
            "512",
            "--seq",
            "8192",
            "--json",
        ];
        common::step_s(&args, extra)
    };
    let nvfp4 = run(&["--dtype", "nvfp4"]);
    let kept = run(&["--dtype", "nvfp4", "--bf16-last-layers", "14"]);
    assert!(kept > 1.05 * nvfp4, "{kept} vs {nvfp4}");
    // A bf16 run has nothing to keep; more blocks than the model has are refused by flag.
    check(
        &[
            "estimate",
            "--model",
            "llama3-8b",
            "--bf16-last-layers",
            "2",
        ],
        "--bf16-last-layers: a bf16 run has no low-precision layers",
    );
    check(
        &[
            "estimate",
            "--model",
            "llama3-8b",
            "--dtype",
            "fp8",
            "--bf16-first-layers",
            "20",
            "--bf16-last-layers",
            "20",
        ],
        "together at most 32",
    );
    check(
        &[
            "estimate",
            "--model",
            "llama3-8b",
            "--dtype",
            "fp8",
            "--bf16-first-layers=-1",
        ],
        "must be ≥ 0",
    );
    check(
        &[
            "estimate",
            "--model",
            "llama3-8b",
            "--dtype",
            "fp8",
            "--engine",
            "torchtitan",
            "--bf16-last-layers",
            "2",
        ],
        "--bf16-last-layers: engine torchtitan has no switch that keeps blocks in bf16",
    );
    let dir = std::env::temp_dir().join(format!("plait-bf16-layers-{}", std::process::id()));
    let plan = |engine: &str, recipe: &str| {
        plait(&[
            "plan",
            "--model",
            "llama3-8b",
            "--cluster",
            "dgx-b200",
            "--gpus",
            "8",
            "--dtype",
            "fp8",
            "--float8-recipe",
            recipe,
            "--bf16-first-layers",
            "1",
            "--bf16-last-layers",
            "2",
            "--export",
            engine,
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let (code, out, err) = plan("megatron", "tensorwise");
    assert_eq!(code, 0, "{out}{err}");
    let args = std::fs::read_to_string(dir.join("megatron_args.sh")).unwrap();
    for flag in [
        "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16 1",
        "--num-layers-at-end-in-bf16 2",
    ] {
        assert!(args.contains(flag), "{flag}: {args}");
    }
    // Megatron-Core refuses them under delayed scaling; the other exports do not write them.
    let (code, _, err) = plan("megatron", "delayed");
    assert!(code != 0 && err.contains("delayed fp8 scaling"), "{err}");
    let (code, _, err) = plan("torchtitan", "tensorwise");
    assert!(code != 0 && err.contains("blocks in bf16"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
