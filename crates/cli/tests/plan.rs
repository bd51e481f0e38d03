//! `plait plan` as a user meets it: the JSON contract, determinism across thread counts,
//! exports, infeasible requests and bad input.

mod common;

use common::{check, json, plait};

const LLAMA_64: &[&str] = &[
    "plan",
    "--model",
    "llama3-8b",
    "--cluster",
    "dgx-h100",
    "--gpus",
    "64",
    "--gbs",
    "512",
    "--seq",
    "4096",
    "--json",
];

#[test]
fn plan_json_has_the_contract_fields() {
    let v = json(LLAMA_64);
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 5);
    for p in plans {
        assert!(p["config"]["tp"].is_u64() && p["config"]["dp"].is_u64());
        assert!(p["stage_map"]["chunk_blocks"].is_array());
        for key in [
            "iteration_time_s",
            "tokens_per_s",
            "tflops_per_gpu",
            "mfu",
            "peak_memory_bytes",
            "fits",
            "breakdown",
        ] {
            assert!(p["estimate"].get(key).is_some(), "missing estimate.{key}");
        }
        assert_eq!(p["estimate"]["fits"], true);
    }
    // Faster plans first, except that a plan within 1 % of the one after it (a tie) goes
    // first when it needs less memory.
    let ranked: Vec<(f64, f64)> = plans
        .iter()
        .map(|p| {
            (
                p["estimate"]["iteration_time_s"].as_f64().unwrap(),
                p["estimate"]["peak_memory_bytes"].as_f64().unwrap(),
            )
        })
        .collect();
    for w in ranked.windows(2) {
        let ((t0, m0), (t1, m1)) = (w[0], w[1]);
        let tied = (t0 - t1).abs() <= 0.01 * t0.min(t1);
        assert!(t0 <= t1 || (tied && m0 <= m1), "{ranked:?}");
    }
    assert!(v["search"]["candidates"].as_u64().unwrap() > 100);
    assert!(v["search"]["elapsed_s"].as_f64().unwrap() >= 0.0);
    assert!(v["infeasible"].is_null());
}

#[test]
fn same_plan_on_one_and_two_threads() {
    let strip = |mut v: serde_json::Value| {
        v["search"]["elapsed_s"] = serde_json::Value::Null;
        v["search"]["threads"] = serde_json::Value::Null;
        v
    };
    let mut one = LLAMA_64.to_vec();
    one.extend(["--threads", "1"]);
    let mut two = LLAMA_64.to_vec();
    two.extend(["--threads", "2"]);
    assert_eq!(strip(json(&one)), strip(json(&two)));
}

#[test]
fn pins_fix_dimensions() {
    let mut args = LLAMA_64.to_vec();
    args.extend(["--tp", "2", "--pp", "2", "--recompute", "selective"]);
    let v = json(&args);
    for p in v["plans"].as_array().unwrap() {
        assert_eq!(p["config"]["tp"], 2);
        assert_eq!(p["config"]["pp"], 2);
        assert_eq!(p["config"]["recompute"], "selective");
    }
}

#[test]
fn export_writes_the_engine_files() {
    let dir = std::env::temp_dir().join(format!("plait-plan-export-{}", std::process::id()));
    let mut args = LLAMA_64.to_vec();
    args.extend(["--export", "megatron", "--out", dir.to_str().unwrap()]);
    let v = json(&args);
    let text = std::fs::read_to_string(dir.join("megatron_args.sh")).unwrap();
    let best = &v["plans"][0]["config"];
    let flag = |name: &str| {
        let at = text
            .find(&format!("{name} "))
            .unwrap_or_else(|| panic!("{name} in {text}"));
        text[at + name.len() + 1..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(flag("--tensor-model-parallel-size"), best["tp"].to_string());
    assert_eq!(
        flag("--pipeline-model-parallel-size"),
        best["pp"].to_string()
    );
    assert_eq!(flag("--micro-batch-size"), best["mbs"].to_string());
    assert_eq!(flag("--global-batch-size"), "512");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn infeasible_request_explains_and_names_the_minimum() {
    let (code, out, err) = plait(&["plan", "--model", "gpt-1t", "--gpus", "1", "--gbs", "8"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("NO PLAN FITS"), "{out}");
    assert!(
        out.contains("the smallest GPU count with a plan is"),
        "{out}"
    );
    let v = json(&[
        "plan", "--model", "gpt-1t", "--gpus", "1", "--gbs", "8", "--json",
    ]);
    assert!(v["plans"].as_array().unwrap().is_empty());
    assert!(v["infeasible"]["min_gpus"].as_u64().unwrap() >= 193);
}

#[test]
fn where_nothing_fits_plan_says_what_offloading_the_optimizer_would_fit() {
    let args = [
        "plan",
        "--model",
        "llama3-405b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "32",
        "--gbs",
        "32",
        "--seq",
        "4096",
    ];
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("NO PLAN FITS"), "{out}");
    assert!(out.contains("optimizer state in host memory"), "{out}");
    let v = json(&[&args[..], &["--json"]].concat());
    let o = &v["if_offloaded"];
    assert_eq!(o["optimizer_offload"], 1.0);
    // The plan it names fits, and estimating it with the flag gives the same step.
    let config = o["config_text"].as_str().unwrap();
    let e = json(
        &[
            &args[..],
            &["--config", config, "--optimizer-offload", "1", "--json"],
        ]
        .concat()
        .iter()
        .map(|a| if *a == "plan" { "estimate" } else { a })
        .collect::<Vec<_>>(),
    );
    assert_eq!(e["fits"], true);
    let step = e["iteration_time_s"].as_f64().unwrap();
    let hinted = o["iteration_time_s"].as_f64().unwrap();
    assert!((step / hinted - 1.0).abs() < 0.02, "{step} vs {hinted}");
    // Where a share of the state suffices, the hint offloads that share: Llama 3 70B on one
    // node needs three quarters of it in host memory, and that plan is faster than with all.
    let node = [
        "plan",
        "--model",
        "llama3-70b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "8",
        "--gbs",
        "16",
        "--seq",
        "4096",
        "--json",
    ];
    let o = json(&node)["if_offloaded"].clone();
    let share = o["optimizer_offload"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{o}");
    let all = json(&[&node[..], &["--optimizer-offload", "1"]].concat());
    let all_step = all["plans"][0]["estimate"]["iteration_time_s"]
        .as_f64()
        .unwrap();
    assert!(
        o["iteration_time_s"].as_f64().unwrap() < all_step,
        "{o} vs {all_step}"
    );
    // Already offloading, or under an engine without a CPU optimizer: no hint.
    for extra in [["--optimizer-offload", "1"], ["--engine", "torchtitan"]] {
        let v = json(&[&args[..], &extra[..], &["--json"]].concat());
        assert!(v.get("if_offloaded").is_none(), "{extra:?}: {v}");
    }
}

#[test]
fn bad_plan_input_is_a_clear_error() {
    check(&["plan"], "--gpus");
    check(&["plan", "--gpus", "8", "--tp", "0"], "--tp");
    check(&["plan", "--gpus", "8", "--zero", "5"], "--zero");
    check(
        &["plan", "--gpus", "8", "--recompute", "most"],
        "--recompute",
    );
    check(
        &["plan", "--gpus", "8", "--export", "colossal"],
        "megatron|deepspeed|torchtitan",
    );
    check(
        &[
            "plan",
            "--gpus",
            "64",
            "--pp",
            "4",
            "--schedule",
            "gpipe",
            "--export",
            "megatron",
        ],
        "--export megatron",
    );
}

#[test]
fn onnx_models_plan_through_the_dag_partitioner() {
    let onnx = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../partition/tests/data/cnn.onnx"
    );
    let v = json(&[
        "plan",
        "--model",
        onnx,
        "--cluster",
        "dgx-h100",
        "--gpus",
        "8",
        "--gbs",
        "64",
        "--json",
    ]);
    assert_eq!(v["nodes"], 12);
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        let (dp, pp) = (p["dp"].as_u64().unwrap(), p["pp"].as_u64().unwrap());
        assert_eq!(dp * pp, 8);
        // The optimal split may use fewer stages when more cannot lower the bottleneck.
        assert!(p["partition"]["stages"].as_array().unwrap().len() as u64 <= pp);
        assert!(p["iteration_time_s"].as_f64().unwrap() > 0.0);
    }
    check(
        &[
            "plan", "--model", onnx, "--gpus", "8", "--export", "megatron",
        ],
        "--export",
    );
}

#[test]
fn a_megatron_moe_plan_picks_its_dispatcher_and_overlap() {
    // DeepSeek-V3 at ep 64 over eight DGX H100 nodes: the search prices Megatron-Core's
    // dispatchers and picks one that sends a token once per node (DeepEP, which NVIDIA's
    // H100 recipes run); pinned to the all-to-all, the plan keeps it and is slower.
    let moe: Vec<&str> = ["plan"]
        .into_iter()
        .chain(common::DSV3_ON_1024_H100.split_whitespace())
        .chain(["--dtype", "fp8", "--ep", "64", "--top", "1", "--json"])
        .collect();
    let best = |extra: &[&str]| {
        let v = json(&[&moe[..], extra].concat());
        let plan = &v["plans"][0];
        (
            plan["config"]["moe_dispatcher"]
                .as_str()
                .unwrap_or("alltoall")
                .to_string(),
            plan["config"]["moe_a2a_overlap"].as_bool().unwrap_or(false),
            plan["estimate"]["iteration_time_s"].as_f64().unwrap(),
        )
    };
    let (searched, _, searched_s) = best(&[]);
    assert_eq!(searched, "deepep");
    let (pinned, _, pinned_s) = best(&["--moe-dispatcher", "alltoall"]);
    assert_eq!(pinned, "alltoall");
    assert!(searched_s < 0.9 * pinned_s, "{searched_s} vs {pinned_s}");
    // With interleaving the overlap runs (Qwen3 30B-A3B at ep 32 over four nodes, pp 2 ×
    // 2): the search takes it, the simulated step shorter by what it hides; pinned off, no
    // plan has it.
    let qwen = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--model",
            "qwen3-30b-a3b",
            "--cluster",
            "dgx-h100",
            "--gpus",
            "64",
            "--gbs",
            "512",
            "--seq",
            "4096",
            "--dtype",
            "fp8",
            "--ep",
            "32",
            "--pp",
            "2",
            "--vp",
            "2",
            "--top",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let v = json(&args);
        let plan = &v["plans"][0];
        (
            plan["config"]["moe_a2a_overlap"].as_bool().unwrap_or(false),
            plan["estimate"]["iteration_time_s"].as_f64().unwrap(),
        )
    };
    let ((overlap, overlap_s), (off, off_s)) = (qwen(&[]), qwen(&["--no-moe-a2a-overlap"]));
    assert!(overlap && !off);
    assert!(overlap_s < 0.95 * off_s, "{overlap_s} vs {off_s}");
    // Pinned on with ep left to the search, every plan has experts spread to overlap.
    let v = json(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "16",
        "--gbs",
        "128",
        "--seq",
        "4096",
        "--moe-a2a-overlap",
        "--top",
        "3",
        "--json",
    ]);
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    for p in plans {
        let c = &p["config"];
        assert!(
            c["ep"].as_u64().unwrap() > 1 && c["moe_a2a_overlap"] == true,
            "{c}"
        );
    }
    // The export writes what the plan picked.
    let dir = std::env::temp_dir().join(format!("plait-dsv3-flex-{}", std::process::id()));
    let mut export = moe.clone();
    export.retain(|a| *a != "--json");
    export.extend(["--export", "megatron", "--out", dir.to_str().unwrap()]);
    let (code, _, err) = plait(&export);
    assert_eq!(code, 0, "{err}");
    let args = std::fs::read_to_string(dir.join("megatron_args.sh")).unwrap();
    assert!(
        args.contains("--moe-flex-dispatcher-backend deepep"),
        "{args}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn more_plans_shown_do_not_reorder_the_first() {
    // The plans of `plan --top N` are the first N of any larger --top: more plans shown
    // simulate more candidates, whose batches follow the earlier ones'. Llama 3.1 405B on
    // 16,384 H100s, 5 against 40 (one batch of 16 against three), and Llama 3 8B on 64
    // H100s simulated two at a time, 5 against 12 (where later batches are several).
    let configs = |args: &[&str], top: &str| {
        let all: Vec<&str> = ["plan"]
            .iter()
            .chain(args)
            .chain(&["--top", top, "--json"])
            .copied()
            .collect();
        json(&all)["plans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["config_text"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let big = [
        "--model",
        "llama3.1-405b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "16384",
        "--gbs",
        "2048",
        "--seq",
        "8192",
        "--dtype",
        "fp8",
    ];
    let small = [
        "--model",
        "llama3-8b",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "64",
        "--gbs",
        "256",
        "--seq",
        "8192",
        "--simulate",
        "2",
    ];
    for (args, few, many) in [(&big, 5, 40), (&small, 5, 12)] {
        let (first, more) = (
            configs(args, &few.to_string()),
            configs(args, &many.to_string()),
        );
        assert_eq!((first.len(), more.len()), (few, many), "{args:?}");
        assert_eq!(first[..], more[..few], "{args:?}");
    }
}
