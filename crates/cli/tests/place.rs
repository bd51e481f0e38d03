//! `plait place` as a user meets it: the JSON contract on an explicit-cost chain (hand
//! computed optimum for both objectives and the SLO), an infeasible chain answered with its
//! reason, the model input over the edge-cloud example set, and one-line errors.

mod common;

use common::{check, json, plait};

fn write(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("plait-place-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const EDGE_CLOUD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/devices/edge-cloud.toml"
);

/// Four layers of 1 s on `fast` (memory 2: two layers each) or 3 s on `slow` (holds all);
/// links fast–fast 1 B/s with 0.5 s latency; the last layer's output is irrelevant.
/// Latency: slow alone 12 s vs fast+fast 2 + (0.5 + 1) + 2 = 5.5 s.
/// Throughput: fast+fast bottleneck 2 s.
const CHAIN: &str = r#"{
  "layers": [
    {"name": "a", "time_s": {"fast": 1, "slow": 3}, "memory_bytes": 1, "output_bytes": 1},
    {"name": "b", "time_s": {"fast": 1, "slow": 3}, "memory_bytes": 1, "output_bytes": 1},
    {"name": "c", "time_s": {"fast": 1, "slow": 3}, "memory_bytes": 1, "output_bytes": 1},
    {"name": "d", "time_s": {"fast": 1, "slow": 3}, "memory_bytes": 1, "output_bytes": 1}
  ],
  "devices": [
    {"name": "f0", "kind": "fast", "memory_bytes": 2},
    {"name": "f1", "kind": "fast", "memory_bytes": 2},
    {"name": "s", "kind": "slow", "memory_bytes": 100}
  ],
  "links": [{"a": "f0", "b": "f1", "bytes_per_s": 1, "latency_s": 0.5}]
}"#;

#[test]
fn json_contract_and_hand_computed_optima() {
    let g = write("chain.json", CHAIN);
    let v = json(&["place", "--graph", &g, "--json"]);
    assert_eq!(v["feasible"], true);
    assert_eq!(v["optimal"], true);
    assert_eq!(v["value_s"], 5.5);
    let stages = v["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2);
    for k in [
        "device",
        "first_layer",
        "last_layer",
        "compute_s",
        "transfer_s",
    ] {
        assert!(stages[0].get(k).is_some(), "{k}");
    }
    assert_eq!(
        (
            stages[0]["first_layer"].as_u64(),
            stages[0]["last_layer"].as_u64()
        ),
        (Some(0), Some(1))
    );
    assert_eq!(stages[0]["transfer_s"], 1.5);
    let v = json(&[
        "place",
        "--graph",
        &g,
        "--objective",
        "throughput",
        "--json",
    ]);
    assert_eq!(v["value_s"], 2.0);
    // SLO of 5 s: the quickest placement takes 5.5 s, so none meets it.
    let v = json(&[
        "place",
        "--graph",
        &g,
        "--objective",
        "throughput",
        "--slo-s",
        "5",
        "--json",
    ]);
    assert_eq!(v["feasible"], false);
    assert!(v["reason"]
        .as_str()
        .unwrap()
        .contains("lowest latency any placement reaches is 5.5"));
    let v = json(&[
        "place",
        "--graph",
        &g,
        "--objective",
        "throughput",
        "--slo-s",
        "20",
        "--json",
    ]);
    assert_eq!(v["value_s"], 2.0);
}

#[test]
fn infeasible_chain_gives_reason_and_memory_growth() {
    let g = write(
        "tight.json",
        &CHAIN.replace("\"memory_bytes\": 100", "\"memory_bytes\": 1"),
    );
    let g2 = write("unlinked.json", &g_text_unlinked());
    let v = json(&["place", "--graph", &g, "--json"]);
    assert_eq!(v["feasible"], true); // f0 + f1 still hold 2 + 2
    let v = json(&["place", "--graph", &g2, "--json"]);
    assert_eq!(v["feasible"], false);
    assert_eq!(v["optimal"], true);
    assert_eq!(v["min_memory_scale"], 2.0);
    assert!(v["value_s"].is_null());
    let (code, out, _) = plait(&["place", "--graph", &g2]);
    assert_eq!(code, 0);
    assert!(
        out.contains("no placement:") && out.contains("× 2.0000"),
        "{out}"
    );
}

fn g_text_unlinked() -> String {
    CHAIN
        .replace("\"memory_bytes\": 100", "\"memory_bytes\": 1")
        .replace(
            r#"[{"a": "f0", "b": "f1", "bytes_per_s": 1, "latency_s": 0.5}]"#,
            "[]",
        )
}

#[test]
fn model_input_over_the_edge_cloud_set() {
    let svg = write("edge.svg", "");
    let v = json(&[
        "place",
        "--model",
        "llama3-8b",
        "--devices",
        EDGE_CLOUD,
        "--objective",
        "throughput",
        "--phase",
        "decode",
        "--json",
        "--svg",
        &svg,
    ]);
    assert_eq!(v["feasible"], true);
    assert_eq!(v["optimal"], true);
    assert_eq!(v["layers"], 34);
    assert_eq!(v["devices"], 5);
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 3);
    // The pipeline beats the best single device's decode step.
    let single = json(&[
        "place",
        "--model",
        "llama3-8b",
        "--devices",
        EDGE_CLOUD,
        "--json",
    ]);
    assert!(v["value_s"].as_f64().unwrap() < single["value_s"].as_f64().unwrap());
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.starts_with("<svg") && drawn.contains("orin-0"));
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let g = write("bad.json", &CHAIN.replace("\"b\": \"f1\"", "\"b\": \"f9\""));
    check(
        &["place", "--graph", &g],
        "`links[0].b`: no device is named `f9` (allowed: f0, f1, s)",
    );
    check(
        &["place", "--graph", &g, "--objective", "speed"],
        "allowed: latency, throughput",
    );
    let g = write("ok.json", CHAIN);
    check(&["place", "--graph", &g, "--slo-s", "-1"], "--slo-s");
    let t = write("bad.toml", "[[device]]\nname = \"x\"\npart = \"tpu\"\n");
    check(
        &["place", "--model", "llama3-8b", "--devices", &t],
        "unknown part `tpu`",
    );
    check(
        &[
            "place",
            "--model",
            "llama3-8b",
            "--devices",
            EDGE_CLOUD,
            "--gen-len",
            "0",
        ],
        "--gen-len",
    );
    check(
        &["place", "--graph", "/nonexistent.json"],
        "/nonexistent.json: cannot read",
    );
}
