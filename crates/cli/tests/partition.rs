//! `plait partition` as a user meets it: the JSON contract and the optimum on every
//! placement graph, the table, the SVG, ONNX input, an infeasible graph answered (not an
//! error), and one-line errors with exit code 2 for bad input.

mod common;

use common::plait;

use std::path::PathBuf;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../partition/tests/data");

fn data(name: &str) -> String {
    format!("{DATA}/{name}")
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plait-partition-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(name: &str, bytes: &[u8]) -> String {
    let p = temp_dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn json_contract_and_reference_optimum_on_every_placement_graph() {
    let csv = std::fs::read_to_string(data("reference.csv")).unwrap();
    let rows: Vec<(String, f64)> = csv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("graph,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[1].parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 3);
    for (name, optimum) in rows {
        let (code, out, err) = plait(&["partition", "--graph", &data(&name), "--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let max_load = v["max_load"].as_f64().unwrap();
        assert!(
            (max_load - optimum).abs() / optimum < 1e-6,
            "{name}: {max_load} vs {optimum}"
        );
        assert_eq!(v["optimal"], true);
        assert_eq!(v["lower_bound"].as_f64().unwrap(), max_load);
        assert!(v["elapsed_s"].as_f64().unwrap() >= 0.0);
        let stages = v["stages"].as_array().unwrap();
        assert!(!stages.is_empty());
        let mut nodes = 0;
        for s in stages {
            assert!(["accelerator", "cpu"].contains(&s["device"].as_str().unwrap()));
            assert!(s["load"].as_f64().unwrap() <= max_load);
            assert!(s["memory_bytes"].as_f64().is_some());
            nodes += s["ids"].as_array().unwrap().len();
        }
        assert_eq!(nodes as u64, v["nodes"].as_u64().unwrap());
    }
}

#[test]
fn table_svg_and_overrides() {
    let svg = temp_dir().join("stages.svg");
    let svg = svg.to_string_lossy();
    let (code, out, err) = plait(&[
        "partition",
        "--graph",
        &data("layer_bert24_training.json"),
        "--devices",
        "4",
        "--cpus",
        "0",
        "--svg",
        &svg,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("limits: 4 accelerator(s)"), "{out}");
    assert!(out.contains("(optimal)"), "{out}");
    assert!(out.contains("accelerator"), "{out}");
    assert!(!out.contains(" cpu "), "{out}");
    let picture = std::fs::read_to_string(&*svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    assert!(picture.matches("<title>stage ").count() >= 4);

    // A tiny lattice cap forces the heuristic, which reports its lower bound.
    let (code, out, _) = plait(&[
        "partition",
        "--graph",
        &data("ops_bert_l-3_training.json"),
        "--max-ideals",
        "5",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["method"], "heuristic");
    assert!(v["lower_bound"].as_f64().unwrap() <= v["max_load"].as_f64().unwrap());
}

#[test]
fn onnx_model_partitions_on_a_cluster_preset() {
    let (code, out, err) = plait(&[
        "partition",
        "--graph",
        &data("cnn.onnx"),
        "--devices",
        "3",
        "--cluster",
        "dgx-a100-80g",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["format"], "onnx");
    assert_eq!(v["nodes"], 12);
    assert_eq!(v["time_unit"], "s");
    assert_eq!(v["optimal"], true);
    assert!(v["stages"].as_array().unwrap().len() <= 3);
    // Default memory: the A100's 80 GiB less the cluster's 2 GiB reserve.
    let mem = v["memory_per_device_bytes"].as_f64().unwrap();
    assert_eq!(mem, 78.0 * 1024f64.powi(3));
    let (code, out, _) = plait(&["partition", "--graph", &data("cnn.onnx"), "--devices", "2"]);
    assert_eq!(code, 0);
    assert!(out.contains(" ms "), "{out}");
}

const SMALL: &str = r#"{"maxSizePerFPGA": 100, "maxFPGAs": 2, "maxCPUs": 0,
 "nodes": [
  {"id": 1, "supportedOnFpga": 1, "cpuLatency": 10, "fpgaLatency": 1, "isBackwardNode": 0, "size": 10},
  {"id": 2, "supportedOnFpga": 1, "cpuLatency": 10, "fpgaLatency": 1, "isBackwardNode": 0, "size": SIZE},
  {"id": 3, "supportedOnFpga": 1, "cpuLatency": 10, "fpgaLatency": 1, "isBackwardNode": 0, "size": 10}],
 "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": DEST, "cost": 0.5}]}"#;

fn small(size: &str, dest: &str) -> String {
    SMALL.replace("SIZE", size).replace("DEST", dest)
}

#[test]
fn a_node_larger_than_a_device_is_an_infeasible_answer() {
    let g = write("big.json", small("250", "3").as_bytes());
    let (code, out, err) = plait(&["partition", "--graph", &g]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("INFEASIBLE: node `node2` (id 2) needs 250 bytes, more than the 100 bytes of one device"),
        "{out}"
    );
    // Stages {1}, {2, 3}: the least memory that fits is 260 bytes.
    assert!(
        out.contains("least memory per accelerator that fits: 260 bytes"),
        "{out}"
    );
    let (code, out, _) = plait(&["partition", "--graph", &g, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["feasible"], false);
    assert_eq!(v["max_load"], serde_json::Value::Null);
    assert_eq!(v["min_memory_bytes"], 260.0);
    assert!(v["reason"].as_str().unwrap().contains("250 bytes"));
    // With enough memory it is an ordinary answer.
    let (code, out, _) = plait(&["partition", "--graph", &g, "--memory", "260"]);
    assert_eq!(code, 0);
    assert!(out.contains("(optimal)"), "{out}");
}

/// Each bad input: exit code 2, one `error:` line naming `what`, no panic.
fn check_error(args: &[&str], what: &[&str]) {
    let (code, out, err) = plait(args);
    assert_eq!(code, 2, "{args:?} gave {code}: {out}{err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for w in what {
        assert!(err.contains(w), "{args:?}: expected `{w}` in: {err}");
    }
}

#[test]
fn bad_input_is_a_one_line_error() {
    let cyclic = write("cyclic.json", small("10", "1").as_bytes());
    check_error(
        &["partition", "--graph", &cyclic],
        &["cyclic.json", "`edges`", "cycle: 1 → 2 → 1"],
    );
    let dangling = write("dangling.json", small("10", "7").as_bytes());
    check_error(
        &["partition", "--graph", &dangling],
        &["dangling.json", "`edges[1].destId`", "no node has id 7"],
    );
    let g = write("ok.json", small("10", "3").as_bytes());
    check_error(
        &["partition", "--graph", &g, "--devices", "0"],
        &["`devices`", "at least 1", "integers ≥ 1"],
    );
    check_error(&["partition", "--graph", &g, "--cpus", "-1"], &["`cpus`"]);
    check_error(
        &["partition", "--graph", &g, "--memory", "0"],
        &["`memory`", "bytes > 0"],
    );
    let zero = write(
        "zero.json",
        small("10", "3")
            .replace("\"maxFPGAs\": 2", "\"maxFPGAs\": 0")
            .as_bytes(),
    );
    check_error(
        &["partition", "--graph", &zero],
        &["zero.json", "`maxFPGAs`", "integers ≥ 1"],
    );
    let typo = write(
        "typo.json",
        small("10", "3")
            .replace("fpgaLatency", "fpgaLatncy")
            .as_bytes(),
    );
    check_error(
        &["partition", "--graph", &typo],
        &["`nodes[0].fpgaLatency`", "missing"],
    );
    let not_json = write("broken.json", b"{\"maxFPGAs\": ");
    check_error(
        &["partition", "--graph", &not_json],
        &["broken.json", "not valid JSON"],
    );
    let onnx = std::fs::read(data("cnn.onnx")).unwrap();
    let cut = write("cut.onnx", &onnx[..onnx.len() / 3]);
    check_error(
        &["partition", "--graph", &cut],
        &["cut.onnx", "`ModelProto`", "not a valid ONNX model"],
    );
    check_error(
        &["partition", "--graph", "/nonexistent/g.json"],
        &["cannot read"],
    );
    check_error(
        &[
            "partition",
            "--graph",
            &data("cnn.onnx"),
            "--cluster",
            "tpu-v9",
        ],
        &["dgx-h100"],
    );
}
