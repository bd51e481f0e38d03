//! The surfaces: for each, the seed inputs (valid examples from the repository) and the
//! check of one input — in process, through the same entry points as the binary: the
//! parser's own function, then the `plait` command line (`plait::run_cli`) on the input as
//! a file. A check fails (`Err`) on a non-finite number in an answer; a panic is caught by
//! the harness; an error (`Err` from the code) is a fine answer.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use plait_fuzz::{non_finite, Check};

pub const SURFACES: &[&str] = &[
    "flags",
    "hf_config",
    "cluster_toml",
    "profile_json",
    "placement_json",
    "onnx",
    "plan_string",
    "pipeline_layout",
    "data",
    "checkpoint",
];

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> Vec<u8> {
    let p = repo().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("seed {}: {e}", p.display()))
}

/// A fresh scratch path (unique per case, so cases on parallel tests do not collide; and
/// emptied first, since an earlier process with the same id may have left it behind).
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("plait-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path = dir.join(format!("{}-{name}", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs the command line `args` (after `plait`); an answer with a non-finite number is a
/// finding.
/// A token the input itself holds (a name such as `A1[NaN`, a value echoed in a message)
/// is not a finding when the output shows it.
pub fn cli(args: &[&str]) -> Result<(), String> {
    let argv = std::iter::once("plait").chain(args.iter().copied());
    match plait::run_cli(argv) {
        Ok(out) => match non_finite(&out) {
            Some(t) if !echoed(&t, args) => {
                Err(format!("`{t}` in the output of plait {}", args.join(" ")))
            }
            _ => Ok(()),
        },
        Err(e) => {
            let text = e.to_string();
            if text.trim().is_empty() {
                Err(format!("an empty error from plait {}", args.join(" ")))
            } else {
                Ok(())
            }
        }
    }
}

thread_local! {
    /// The input of the case running on this thread (each case has a thread of its own).
    static ECHO: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn set_echo(input: &[u8]) {
    ECHO.with(|e| *e.borrow_mut() = String::from_utf8_lossy(input).to_lowercase());
}

fn echoed(token: &str, args: &[&str]) -> bool {
    let t = token.to_lowercase();
    ECHO.with(|e| e.borrow().contains(&t)) || args.iter().any(|a| a.to_lowercase().contains(&t))
}

/// `text` without its double-quoted strings (names are not numbers).
fn without_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut inside, mut escaped) = (false, false);
    for c in text.chars() {
        if inside {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                inside = false;
            }
        } else if c == '"' {
            inside = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// A finding when `what`'s debug form shows a non-finite number (outside its strings).
fn finite_debug(what: &str, v: &impl std::fmt::Debug) -> Result<(), String> {
    let text = without_strings(&format!("{v:?}"));
    match non_finite(&text) {
        Some(t) => Err(format!("`{t}` in the parsed {what}")),
        None => Ok(()),
    }
}

/// The input written to a scratch file named `*.{ext}`; the file is removed afterwards.
fn with_file<T>(bytes: &[u8], ext: &str, f: impl FnOnce(&str) -> T) -> T {
    let path = scratch(&format!("input.{ext}"));
    std::fs::write(&path, bytes).expect("a scratch file");
    let r = f(path.to_str().expect("UTF-8 scratch path"));
    std::fs::remove_file(&path).ok();
    r
}

/// Arguments that write files or run for minutes are left out of the flag fuzzing (the
/// surfaces that own those inputs fuzz them).
const SKIPPED_ARGS: &[&str] = &[
    "--svg",
    "--trace",
    "--ir",
    "--out",
    "--export",
    "--json-log",
    "--checkpoint-dir",
    "--resume",
];
const SKIPPED_COMMANDS: &[&str] = &["train", "profile"];

fn check_flags(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    let args: Vec<&str> = text.split('\n').collect();
    let skipped = args.first().is_some_and(|c| SKIPPED_COMMANDS.contains(c))
        || args
            .iter()
            .any(|a| SKIPPED_ARGS.iter().any(|s| a.starts_with(s)));
    if skipped {
        return Ok(());
    }
    cli(&args)
}

fn flag_seeds() -> Vec<Vec<u8>> {
    let data = repo().join("crates/partition/tests/data");
    let repo = repo();
    let lines = [
        "estimate\n--model\ngpt-1.7b\n--gpus\n8\n--tp\n2\n--pp\n2".to_string(),
        "estimate\n--model\ngpt3-175b\n--tp\n8\n--pp\n8\n--dp\n2\n--vp\n2\n--schedule\ninterleaved\n--mbs\n1"
            .into(),
        "estimate\n--model\nmixtral-8x7b\n--gpus\n16\n--tp\n2\n--ep\n8\n--zero\n1".into(),
        "estimate\n--model\nmixtral-8x7b\n--gpus\n16\n--ep\n8\n--moe-dispatcher\ndeepep\n--moe-a2a-overlap"
            .into(),
        "estimate\n--model\nllama3-8b\n--task\nsft\n--seq\n4096\n--gbs\n64\n--sample-lengths\n512:1,3584:1"
            .into(),
        "estimate\n--model\nllama3-8b\n--cluster\ndgx-b200\n--dtype\nnvfp4\n--bf16-first-layers\n1\n--bf16-last-layers\n2"
            .into(),
        "estimate\n--config\ndp2 tp2 pp2 mbs1 1f1b\n--model\ngpt-1.7b\n--gbs\n16".into(),
        "estimate\n--model\nllama3-8b\n--cluster\ndgx-h100\n--gpus\n8\n--zero\n1\n--optimizer-offload\n0.5"
            .into(),
        "schedule\n--stages\n4\n--microbatches\n8".into(),
        "schedule\n--stages\n4\n--microbatches\n8\n--schedule\nzb-h1\n--forward\n1\n--backward\n2\n--weight\n0.5"
            .into(),
        "schedule\n--stages\n4\n--microbatches\n8\n--schedule\ninterleaved\n--virtual\n2\n--comm\n0.1"
            .into(),
        "schedule\n--stages\n4\n--microbatches\n8\n--schedule\ndualpipe-v\n--backward\n2\n--weight\n1"
            .into(),
        "estimate\n--model\nllama3-8b\n--cluster\ndgx-h100\n--gpus\n16\n--tp\n2\n--sp\n--engine\ntorchtitan\n--dtype\nfp8\n--float8-recipe\nrowwise\n--compile"
            .into(),
        "estimate\n--model\nllama3-8b\n--cluster\ndgx-h100\n--gpus\n16\n--tp\n4\n--sp\n--dtype\nfp8\n--float8-recipe\ntensorwise"
            .into(),
        "estimate\n--model\nmixtral-8x7b\n--gpus\n32\n--pp\n2\n--vp\n2\n--ep\n8\n--moe-a2a-overlap"
            .into(),
        "simulate\n--model\ngpt-1.7b\n--gpus\n8\n--tp\n2\n--pp\n2".into(),
        "plan\n--model\ngpt-1.7b\n--gpus\n8\n--gbs\n64\n--top\n2\n--simulate\n2".into(),
        "plan\n--model\ngpt-1.7b\n--gpus\n16\n--gbs\n128\n--seq\n4096\n--cluster\ndgx-h100\n--top\n1\n--simulate\n1\n--threads\n1"
            .into(),
        format!(
            "partition\n--graph\n{}\n--devices\n4",
            data.join("layer_bert24_training.json").display()
        ),
        format!(
            "partition\n--graph\n{}\n--devices\n4\n--cpus\n1\n--memory\n8e9",
            data.join("layer_resnet50_training.json").display()
        ),
        format!("partition\n--graph\n{}", data.join("cnn.onnx").display()),
        format!(
            "place\n--graph\n{}",
            repo.join("examples/devices/explicit-chain.json").display()
        ),
        format!(
            "place\n--model\nllama3-8b\n--devices\n{}\n--phase\ndecode\n--objective\nthroughput",
            repo.join("examples/devices/edge-cloud.toml").display()
        ),
        format!(
            "mixed\n--mixed\n{}\n--model\ngpt-1.7b",
            repo.join("examples/clusters/h100-a100.toml").display()
        ),
    ];
    lines.iter().map(|l| l.as_bytes().to_vec()).collect()
}

fn check_hf(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    if let Ok(m) = plait_spec::model_from_hf_config(&text, "fuzz.json") {
        finite_debug("model", &m)?;
        let _ = m.parameter_count();
    }
    with_file(input, "json", |p| {
        cli(&["estimate", "--model", p, "--gbs", "8", "--seq", "512"])
    })
}

/// The HF fixtures and the presets' released config.json files (MPT's and DBRX's nested
/// objects among them).
fn hf_seeds() -> Vec<Vec<u8>> {
    let mut names: Vec<PathBuf> = ["crates/spec/tests/fixtures/hf", "crates/spec/presets"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(repo().join(dir)).expect("the HF configs"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    names.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn check_cluster(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    if let Ok(c) = plait_spec::cluster_from_toml(&text, "fuzz.toml") {
        finite_debug("cluster", &c)?;
    }
    with_file(input, "toml", |p| {
        cli(&[
            "estimate",
            "--cluster",
            p,
            "--model",
            "gpt-1.7b",
            "--gpus",
            "16",
            "--tp",
            "2",
        ])?;
        cli(&[
            "plan",
            "--cluster",
            p,
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--gbs",
            "32",
            "--top",
            "1",
            "--simulate",
            "1",
        ])
    })
}

fn cluster_seeds() -> Vec<Vec<u8>> {
    [
        "base = \"dgx-h100\"\n",
        "name = \"mine\"\nbase = \"dgx-a100-80g\"\ngpus_per_node = 8\nnvlink_bidirectional_gb_per_s = 600\n\
         nvlink_latency_us = 3\nnics_per_node = 8\nnic_gbit_per_s = 200\ninter_node_latency_us = 14\n\
         memory_reserve_gib = 2\n\n[gpu]\nname = \"A100\"\npeak_bf16_tflops = 312\npeak_fp16_tflops = 312\n\
         matmul_efficiency = 0.75\nsustained_clock_ratio = 0.95\nmemory_gib = 80\n\
         memory_bandwidth_gb_per_s = 2039\nsms = 108\n",
        "base = \"dgx-h100\"\n[gpu]\npeak_fp8_tflops = 1979\nfp8_matmul_efficiency = 0.6\nmemory_gb = 80\n",
        "base = \"dgx-b200\"\nhost_link_gb_per_s = 64\nhost_memory_gb = 2048\n\
         host_memory_bandwidth_gb_per_s = 563.2\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn check_profile(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    if let Ok(p) = plait_cost::Profile::parse(&text, "fuzz.json") {
        finite_debug("profile", &p)?;
    }
    with_file(input, "json", |p| {
        cli(&[
            "estimate",
            "--cluster",
            "dgx-h200",
            "--profile",
            p,
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--tp",
            "2",
        ])?;
        cli(&[
            "plan",
            "--cluster",
            "dgx-h200",
            "--profile",
            p,
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--gbs",
            "32",
            "--top",
            "1",
            "--simulate",
            "1",
        ])
    })
}

fn profile_seeds() -> Vec<Vec<u8>> {
    let json = serde_json::json!({
        "format": "plait-profile/1",
        "gpu": "NVIDIA H200", "dtype": "bf16", "memory_bandwidth_bytes_per_s": 4.2e12,
        "gemm": [{"m": 4096, "n": 12288, "k": 4096, "time_s": 5.38e-4},
                 {"m": 4096, "n": 4096, "k": 4096, "time_s": 1.9e-4}],
        "layers": [{"family": "gpt", "hidden": 2304, "heads": 24, "seq": 2048, "mbs": 1,
                    "tp": 2, "forward_s": 1.35e-3, "backward_s": 3.17e-3}],
        "cpu": {"cores": 2, "memory_bytes": 8e9,
                "link": {"latency_s": 1e-5, "bandwidth_bytes_per_s": 1e10}}
    });
    let lines = read("crates/cost/profiles/h200_pytorch_calibration.jsonl");
    // The measurement lines are long: the first 60 lines are enough to mutate.
    let head: Vec<u8> = lines
        .split(|&b| b == b'\n')
        .take(60)
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    vec![serde_json::to_vec_pretty(&json).unwrap(), head]
}

fn check_placement(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    if let Ok(g) = plait_partition::Graph::from_placement_json(&text, "fuzz.json") {
        finite_debug("graph", &g.nodes)?;
        let limits = plait_partition::Limits::of_graph(&g)
            .unwrap_or_else(|| plait_partition::Limits::new(4, 1, 1e12));
        if let Ok(p) = plait_partition::partition(&g, &limits) {
            if p.feasible {
                finite_debug("partition", &p)?;
            }
        }
    }
    with_file(input, "json", |p| cli(&["partition", "--graph", p]))
}

fn placement_seeds() -> Vec<Vec<u8>> {
    use plait_partition::synthetic::{chain, placement_json, random_dag};
    // Above the coarsening threshold (2,048 units): the size-aware path, in release builds
    // only (a debug build takes seconds a case on them; `cargo test` stays quick).
    let large = if cfg!(debug_assertions) {
        vec![]
    } else {
        vec![
            placement_json(&chain(2_500, 9)).into_bytes(),
            placement_json(&random_dag(2_300, 200, 9)).into_bytes(),
        ]
    };
    let mut seeds = large;
    seeds.extend([
        read("crates/partition/tests/data/layer_bert24_training.json"),
        read("crates/partition/tests/data/layer_resnet50_training.json"),
        br#"{"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1, "nodes": [
{"id": 1, "supportedOnFpga": 1, "cpuLatency": 5.0, "fpgaLatency": 1.0, "isBackwardNode": 0, "colorClass": 1, "size": 10.0},
{"id": 2, "supportedOnFpga": 1, "cpuLatency": 6.0, "fpgaLatency": 2.0, "isBackwardNode": 0, "size": 20.0},
{"id": 3, "supportedOnFpga": 0, "cpuLatency": 1.0, "fpgaLatency": 0.0, "isBackwardNode": 0, "size": 0.0},
{"id": 4, "supportedOnFpga": 1, "cpuLatency": 5.0, "fpgaLatency": 1.5, "isBackwardNode": 1, "colorClass": 1, "size": 5.0}],
"edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.25},
{"sourceId": 1, "destId": 4, "cost": 0.5}]}"#
            .to_vec(),
    ]);
    seeds
}

fn onnx_costs() -> &'static (plait_cost::DeviceModel, plait_spec::ClusterSpec) {
    static C: OnceLock<(plait_cost::DeviceModel, plait_spec::ClusterSpec)> = OnceLock::new();
    C.get_or_init(|| {
        let cluster = plait_spec::cluster_preset("dgx-h100").unwrap();
        let d = plait_cost::device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
        (d, cluster)
    })
}

fn check_onnx(input: &[u8]) -> Result<(), String> {
    let (device, cluster) = onnx_costs();
    let costs = plait_partition::onnx::Costs::new(device, cluster);
    if let Ok(g) = plait_partition::onnx::import(input, "fuzz.onnx", &costs) {
        finite_debug("ONNX graph", &g.nodes)?;
        if let Ok(p) = plait_partition::partition(&g, &plait_partition::Limits::new(4, 0, 80e9)) {
            if p.feasible {
                finite_debug("partition", &p)?;
            }
        }
    }
    with_file(input, "onnx", |p| {
        cli(&["partition", "--graph", p, "--devices", "4"])
    })
}

fn onnx_seeds() -> Vec<Vec<u8>> {
    vec![read("crates/partition/tests/data/cnn.onnx")]
}

fn check_plan_string(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    if let Ok(c) = text.parse::<plait_spec::ParallelConfig>() {
        // What `plait plan` prints parses back to the same configuration.
        let again: plait_spec::ParallelConfig = c
            .to_string()
            .parse()
            .map_err(|e| format!("`{c}` (printed from `{text}`) does not parse back: {e}"))?;
        if again != c {
            return Err(format!("`{text}` → `{c}` → {again:?}, not {c:?}"));
        }
    }
    cli(&[
        "estimate", "--config", &text, "--model", "gpt-1.7b", "--gbs", "64",
    ])?;
    cli(&[
        "simulate", "--config", &text, "--model", "gpt-1.7b", "--gbs", "64",
    ])
}

fn check_pipeline_layout(input: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(input);
    // DeepSeek-V3 (61 blocks and an MTP layer) at pp 8 × vp 4, in process and through the
    // command line.
    let model = plait_spec::model_preset("deepseek-v3").map_err(|e| e.to_string())?;
    let c: plait_spec::ParallelConfig = "dp4 tp2 pp8 vp4 ep8 mbs1 zero1 sp interleaved".parse()?;
    if let Ok(map) = plait_spec::StageMap::from_megatron_layout(&text, &model, &c) {
        map.validate(model.layers, &c)
            .map_err(|e| format!("`{text}` read into an invalid map: {e}"))?;
    }
    cli(&[
        "estimate",
        "--model",
        "deepseek-v3",
        "--cluster",
        "dgx-h100",
        "--gpus",
        "512",
        "--config",
        "dp4 tp2 pp8 vp4 ep8 mbs1 zero1 sp interleaved",
        "--gbs",
        "512",
        "--pipeline-layout",
        &text,
    ])
}

fn pipeline_layout_seeds() -> Vec<Vec<u8>> {
    [
        "Et|(tt|)*30mL",
        "Et*2|(tt|)*29,t|mL",
        "E(t|)*31tmL",
        "Ett|(tt|)*29mL|L",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn plan_string_seeds() -> Vec<Vec<u8>> {
    [
        "dp8 tp1 pp1 mbs1 1f1b",
        "dp2 tp2 pp2 mbs1 1f1b",
        "dp1 tp2 pp4 vp2 mbs2 zero1 sp recompute=selective interleaved",
        "dp4 tp2 mbs4 zero3 recompute=full gpipe",
        "tp2 pp2 cp2 mbs1 zb-h1",
        "pp4 mbs1 recompute=full scp",
        "dp2 tp2 cp2 cp-comm=a2a mbs1 1f1b",
        "tp2 cp4 cp-comm=allgather mbs1 zero1 sp 1f1b",
        "dp2 pp4 vp2 mbs1 zero1 dualpipe-v",
        "dp8 tp2 pp2 vp2 ep8 mbs1 zero1 sp dispatcher=deepep a2a-overlap interleaved",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// First byte: `T` a text file, `J` JSON lines; the rest is the file.
fn check_data(input: &[u8]) -> Result<(), String> {
    let (kind, body) = input.split_first().unwrap_or((&b'T', &[]));
    let ext = if *kind == b'J' { "jsonl" } else { "txt" };
    let path = scratch(&format!("data.{ext}"));
    std::fs::write(&path, body).expect("a scratch file");
    let r = plait_runtime::Dataset::from_path(&path);
    std::fs::remove_file(&path).ok();
    if let Ok(d) = r {
        for seq in [1usize, 7, 64, 1 << 20] {
            if d.check(seq).is_ok() {
                let w = d.windows(seq) as u64;
                for index in [0, 1, w, w.saturating_mul(3) + 1, u64::MAX] {
                    let s = d.sample(7, seq, index);
                    if s.inputs.len() != seq {
                        return Err(format!(
                            "sample {index} of seq {seq}: {} tokens",
                            s.inputs.len()
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn data_seeds() -> Vec<Vec<u8>> {
    let corpus = plait_runtime::data::builtin_corpus();
    let text: String = corpus.chars().take(3000).collect();
    let jsonl = "{\"text\": \"the weaver spun a thread\"}\n{\"text\": \"a patient teacher waits 3 days\"}\n\
                 {\"text\": \"caf\\u00e9 \\n 12 é\", \"id\": 7}\n";
    vec![
        [b"T".as_slice(), text.as_bytes()].concat(),
        [b"J".as_slice(), jsonl.as_bytes()].concat(),
    ]
}

/// A real two-step checkpoint of tiny-gpt, written once per test process.
fn checkpoint_base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = scratch("checkpoint-base");
        let d = dir.to_str().unwrap().to_string();
        plait::run_cli([
            "plait",
            "train",
            "--model",
            "tiny-gpt",
            "--plan",
            "dp1",
            "--steps",
            "2",
            "--seq",
            "16",
            "--gbs",
            "2",
            "--checkpoint-dir",
            &d,
            "--checkpoint-every",
            "1",
        ])
        .expect("a tiny run writes its checkpoints");
        dir
    })
}

const STEP: &str = "step-00000002";

/// FNV-1a 64, as the checkpoint manifest's own checksum uses.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// The manifest `bytes` with its own checksum recomputed, when they parse as a manifest.
fn resign(bytes: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<plait_runtime::checkpoint::Manifest>(bytes) {
        Ok(mut m) => {
            m.manifest_fnv1a = None;
            let bare = serde_json::to_string_pretty(&m).unwrap();
            m.manifest_fnv1a = Some(format!("{:016x}", fnv1a(bare.as_bytes())));
            serde_json::to_vec_pretty(&m).unwrap()
        }
        Err(_) => bytes.to_vec(),
    }
}

/// First byte: `S` the manifest of the newest step (its checksum recomputed after the
/// mutation, so that the checks behind it are reached), `R` that manifest as mutated, `L`
/// the `latest` pointer. The checkpoint directory is a copy of a real one (shards linked).
fn check_checkpoint(input: &[u8]) -> Result<(), String> {
    use plait_runtime::checkpoint::{latest, verify};
    let base = checkpoint_base();
    let (kind, body) = input.split_first().unwrap_or((&b'R', &[]));
    let dir = scratch("checkpoint");
    for step in ["step-00000001", STEP] {
        let (from, to) = (base.join(step), dir.join(step));
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(&from).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            if std::fs::hard_link(e.path(), to.join(&name)).is_err() {
                std::fs::copy(e.path(), to.join(&name)).unwrap();
            }
        }
    }
    std::fs::write(dir.join("latest"), STEP).unwrap();
    let manifest = dir.join(STEP).join("manifest.json");
    match kind {
        b'L' => std::fs::write(dir.join("latest"), body).unwrap(),
        b'S' => {
            std::fs::remove_file(&manifest).ok();
            std::fs::write(&manifest, resign(body)).unwrap()
        }
        _ => {
            std::fs::remove_file(&manifest).ok();
            std::fs::write(&manifest, body).unwrap()
        }
    }
    let r = (|| {
        let _ = verify(&dir.join(STEP));
        let found = latest(&dir);
        if let Ok(Some((_, m))) = &found {
            finite_debug("manifest", m)?;
        }
        // A manifest accepted with other fields than the one written: resuming must refuse
        // it or continue cleanly.
        let original = std::fs::read(base.join(STEP).join("manifest.json")).unwrap();
        if *kind != b'L' && matches!(found, Ok(Some(_))) && body != original.as_slice() {
            let d = dir.to_str().unwrap();
            cli(&[
                "train",
                "--model",
                "tiny-gpt",
                "--plan",
                "dp1",
                "--steps",
                "3",
                "--seq",
                "16",
                "--gbs",
                "2",
                "--checkpoint-dir",
                d,
                "--resume",
            ])?;
        }
        Ok(())
    })();
    std::fs::remove_dir_all(&dir).ok();
    r
}

fn checkpoint_seeds() -> Vec<Vec<u8>> {
    let manifest = std::fs::read(checkpoint_base().join(STEP).join("manifest.json")).unwrap();
    vec![
        [b"S".as_slice(), &manifest].concat(),
        [b"R".as_slice(), &manifest].concat(),
        [b"L".as_slice(), STEP.as_bytes()].concat(),
    ]
}

/// The seeds and the check of `surface`.
pub fn surface(name: &str) -> (Vec<Vec<u8>>, Check) {
    let seeds = match name {
        "flags" => flag_seeds(),
        "hf_config" => hf_seeds(),
        "cluster_toml" => cluster_seeds(),
        "profile_json" => profile_seeds(),
        "placement_json" => placement_seeds(),
        "onnx" => onnx_seeds(),
        "plan_string" => plan_string_seeds(),
        "pipeline_layout" => pipeline_layout_seeds(),
        "data" => data_seeds(),
        "checkpoint" => checkpoint_seeds(),
        other => panic!("no surface `{other}`"),
    };
    (seeds, check_of(name))
}

/// Only the check of `surface` (the corpus replay needs no seeds).
pub fn check_of(name: &str) -> Check {
    let check: fn(&[u8]) -> Result<(), String> = match name {
        "flags" => check_flags,
        "hf_config" => check_hf,
        "cluster_toml" => check_cluster,
        "profile_json" => check_profile,
        "placement_json" => check_placement,
        "onnx" => check_onnx,
        "plan_string" => check_plan_string,
        "pipeline_layout" => check_pipeline_layout,
        "data" => check_data,
        "checkpoint" => check_checkpoint,
        other => panic!("no surface `{other}`"),
    };
    Arc::new(move |input: &[u8]| {
        set_echo(input);
        check(input)
    })
}
