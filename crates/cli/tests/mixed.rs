//! `plait mixed` as a user meets it: a 64 H100 + 64 A100 plan against each group alone
//! (JSON contract), one given mixed plan estimated and simulated, an infeasible request
//! answered with its reason, and one-line errors naming file, field and allowed values.

mod common;

use common::{check, json, plait};

const H100_A100: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/clusters/h100-a100.toml"
);

#[test]
fn plans_the_example_cluster_against_each_group_alone() {
    let doc = json(&[
        "mixed",
        "--mixed",
        H100_A100,
        "--model",
        "llama3-70b",
        "--gbs",
        "256",
        "--seq",
        "4096",
        "--json",
    ]);
    assert_eq!(doc["cluster"]["gpus"], 128);
    let best = &doc["plans"][0];
    let e = &best["estimate"];
    assert_eq!(e["simulated"], true);
    assert_eq!(e["estimate"]["fits"], true);
    let blocks: u64 = best["stage_map"]["chunk_blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .sum();
    assert_eq!(blocks, 80);
    let stages = e["stages"].as_array().unwrap();
    assert!(stages.iter().any(|s| s["group"] == "h100"));
    assert!(stages.iter().any(|s| s["group"] == "a100"));
    let homo = doc["homogeneous"].as_array().unwrap();
    assert_eq!(homo.len(), 2);
    let mixed_t = e["estimate"]["iteration_time_s"].as_f64().unwrap();
    let a100_t = homo[1]["plan"]["estimate"]["iteration_time_s"]
        .as_f64()
        .unwrap();
    assert!(mixed_t < a100_t, "{mixed_t} vs {a100_t}");
    assert!(doc["explanation"].as_array().unwrap().len() >= 4);
    assert!(doc["infeasible"].is_null());
}

#[test]
fn estimates_and_simulates_a_given_mixed_plan() {
    let args = [
        "mixed",
        "--mixed",
        "dgx-h100:8,dgx-a100-80g:8",
        "--model",
        "llama3-70b",
        "--gbs",
        "256",
        "--seq",
        "4096",
        "--config",
        "dp8 tp4 mbs1 zero1 sp 1f1b",
        "--order",
        "dgx-a100-80g,dgx-h100",
        "--blocks",
        "12,12,28,28",
        "--json",
    ];
    let doc = json(&args);
    assert_eq!(doc["mixed_config"]["config"]["pp"], 4);
    let sim = &doc["simulated"];
    assert_eq!(sim["simulated"], true);
    assert_eq!(doc["closed_form"]["simulated"], false);
    assert_eq!(sim["stages"][0]["group"], "dgx-a100-80g");
    assert_eq!(sim["stages"][3]["blocks"], 28);
    // The transfers between stage 1 (A100) and 2 (H100) cross the link; the others do not.
    assert!(sim["stages"][1]["cross_group_p2p_s"].as_f64().unwrap() > 0.0);
    assert_eq!(sim["stages"][0]["cross_group_p2p_s"].as_f64().unwrap(), 0.0);
    let (code, text, _) = plait(&args[..args.len() - 1]);
    assert_eq!(code, 0);
    assert!(
        text.contains("a100×2 → dgx-h100×2") || text.contains("dgx-a100-80g×2 → dgx-h100×2"),
        "{text}"
    );
}

#[test]
fn an_infeasible_request_says_why() {
    let (code, text, _) = plait(&[
        "mixed",
        "--mixed",
        "dgx-h100:1,dgx-a100-80g:1",
        "--model",
        "llama3-405b",
        "--gbs",
        "256",
        "--seq",
        "4096",
        "--no-homogeneous",
    ]);
    assert_eq!(code, 0);
    assert!(text.contains("no mixed plan fits memory"), "{text}");
    let doc = json(&[
        "mixed",
        "--mixed",
        "dgx-h100:1,dgx-a100-80g:1",
        "--model",
        "llama3-405b",
        "--gbs",
        "256",
        "--seq",
        "4096",
        "--no-homogeneous",
        "--json",
    ]);
    assert!(doc["plans"].as_array().unwrap().is_empty());
    assert!(doc["infeasible"]["min_memory_ratio"].as_f64().unwrap() > 1.0);
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    check(
        &["mixed", "--mixed", "dgx-h100:1,tpu:1"],
        "`group[1].cluster`: unknown cluster preset `tpu`",
    );
    check(
        &["mixed", "--mixed", "dgx-h100:1"],
        "2 to 4 [[group]] tables",
    );
    let dir = std::env::temp_dir().join(format!("plait-mixed-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[group]]\ncluster = \"h100\"\nnodes = 1\n[[group]]\ncluster = \"a100\"\nnodez = 1\n",
    )
    .unwrap();
    check(&["mixed", "--mixed", bad.to_str().unwrap()], "`nodez`");
    std::fs::write(
        &bad,
        "[[group]]\ncluster = \"h100\"\nnodes = 1\n[[group]]\ncluster = \"a100\"\nnodes = 1\n[link]\nbandwidth_gb_per_s = -1\n",
    )
    .unwrap();
    check(
        &["mixed", "--mixed", bad.to_str().unwrap()],
        "`link.bandwidth_gb_per_s`",
    );
    check(
        &[
            "mixed",
            "--mixed",
            "dgx-h100:1,dgx-a100-80g:1",
            "--gpus",
            "8",
        ],
        "--gpus",
    );
    check(
        &[
            "mixed",
            "--mixed",
            "dgx-h100:1,dgx-a100-80g:1",
            "--model",
            "llama3-8b",
            "--config",
            "dp3 tp1",
        ],
        "does not split into whole pipeline stages",
    );
    check(
        &[
            "mixed",
            "--mixed",
            "dgx-h100:1,dgx-a100-80g:1",
            "--model",
            "llama3-8b",
            "--config",
            "dp2 tp4",
            "--order",
            "h100,x",
        ],
        "--order: no group `h100`",
    );
}
