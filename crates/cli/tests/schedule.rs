//! `plait schedule` and `plait simulate` as a user meets them: the JSON contract, the files
//! they write, and one-line errors for bad input.

mod common;

use common::{check, json, plait};

#[test]
fn schedule_json_has_the_contract_fields() {
    let v = json(&[
        "schedule",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--forward",
        "1",
        "--backward",
        "2",
        "--json",
    ]);
    assert_eq!(v["makespan"], 33.0);
    assert_eq!(v["closed_form_makespan"], 33.0);
    let bubble = v["bubble_fraction"].as_f64().unwrap();
    assert!((bubble - 9.0 / 33.0).abs() < 1e-12, "{bubble}");
    assert_eq!(
        v["peak_inflight_microbatches"],
        serde_json::json!([4.0, 3.0, 2.0, 1.0])
    );

    let v = json(&[
        "schedule",
        "--schedule",
        "zb-h1",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--forward",
        "1",
        "--backward",
        "2",
        "--weight",
        "1",
        "--json",
    ]);
    // (p − 1)(F + Bi − W) = 3 on top of m(F + B) = 24.
    assert_eq!(v["makespan"], 27.0);

    let v = json(&[
        "schedule",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--virtual",
        "2",
        "--json",
    ]);
    assert_eq!(v["schedule"], "interleaved");
    assert_eq!(v["makespan"], 28.5);
}

#[test]
fn schedule_writes_svg_trace_and_ir() {
    let dir = std::env::temp_dir().join(format!("plait-schedule-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svg, trace, ir) = (dir.join("t.svg"), dir.join("t.json"), dir.join("ir.json"));
    let (code, out, err) = plait(&[
        "schedule",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--svg",
        svg.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--ir",
        ir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("makespan 33.000"), "{out}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    assert!(t["traceEvents"].as_array().unwrap().len() > 64);
    let s: plait_schedule::Schedule =
        serde_json::from_str(&std::fs::read_to_string(&ir).unwrap()).unwrap();
    plait_schedule::validate(&s).unwrap();
    assert_eq!((s.stages, s.microbatches), (4, 8));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn simulate_reports_simulated_and_closed_form() {
    let v = json(&[
        "simulate",
        "--gpus",
        "1024",
        "--tp",
        "8",
        "--pp",
        "8",
        "--sp",
        "--recompute",
        "selective",
        "--json",
    ]);
    let sim = v["iteration_time_s"].as_f64().unwrap();
    let closed = v["closed_form_iteration_time_s"].as_f64().unwrap();
    assert!((sim / closed - 1.0).abs() < 0.05, "{sim} vs {closed}");
    for key in [
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "peak_memory_bytes",
        "fits",
        "breakdown",
        "bubble_fraction",
        "critical_path",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let stages = v["simulated_stages"].as_array().unwrap();
    assert_eq!(stages.len(), 8);
    for s in stages {
        let (a, b) = (
            s["peak_memory_bytes"].as_f64().unwrap(),
            s["modelled_peak_memory_bytes"].as_f64().unwrap(),
        );
        assert!((a / b - 1.0).abs() < 0.01, "{a} vs {b}");
    }
    // The layout simulated, as plait.torch executes it: 96 blocks over 8 ranks, rank r's
    // only chunk is virtual stage r; selective recompute recomputes no block in full.
    let map = &v["stage_map"];
    let blocks: Vec<u64> = map["chunk_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(blocks, vec![12; 8]);
    assert_eq!(
        map["recompute_blocks"],
        serde_json::json!([0, 0, 0, 0, 0, 0, 0, 0])
    );
    assert_eq!(map["virtual_stages"][3], serde_json::json!([3]));
    assert_eq!(map["chunk_recompute_blocks"][7], serde_json::json!([0]));
}

#[test]
fn estimate_simulate_uses_the_simulator() {
    let base = [
        "estimate",
        "--gpus",
        "1024",
        "--tp",
        "8",
        "--pp",
        "8",
        "--sp",
        "--recompute",
        "full",
        "--schedule",
        "scp",
        "--json",
    ];
    let closed = json(&base);
    let mut args = base.to_vec();
    args.push("--simulate");
    let sim = json(&args);
    assert_eq!(closed["pipeline"], "closed-form");
    assert_eq!(sim["pipeline"], "simulated");
    assert_ne!(closed["iteration_time_s"], sim["iteration_time_s"]);
}

#[test]
fn bad_schedule_input_is_a_clear_error() {
    check(&["schedule", "--stages", "0"], "--stages");
    check(&["schedule", "--microbatches", "-3"], "--microbatches");
    check(&["schedule", "--forward", "-1"], "--forward");
    check(
        &["schedule", "--backward", "1", "--weight", "2"],
        "--weight",
    );
    check(
        &["schedule", "--schedule", "pipedream"],
        "gpipe|1f1b|interleaved|zb-h1|scp",
    );
    check(
        &[
            "schedule",
            "--stages",
            "4",
            "--microbatches",
            "6",
            "--virtual",
            "2",
        ],
        "multiple of the stages",
    );
    check(
        &["schedule", "--schedule", "gpipe", "--virtual", "2"],
        "--virtual: gpipe runs one chunk per rank (got 2 chunks)",
    );
    check(&["simulate", "--gpus", "56", "--tp", "7"], "--tp");
    check(&["schedule", "--svg", "/nonexistent-dir/x.svg"], "--svg");
}
