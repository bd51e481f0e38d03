//! `plait train` and `plait profile` as a user meets them: the step log and trace files,
//! checkpoints and resume, a failing rank, `--plan auto`, and bad input.

mod common;

use common::plait;

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("plait-cli-train-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_file(&p);
    p
}

fn log_lines(path: &PathBuf) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The losses of a step log, in order.
fn losses(path: &PathBuf) -> Vec<f64> {
    log_lines(path)
        .iter()
        .map(|r| r["loss"].as_f64().unwrap())
        .collect()
}

#[test]
fn train_writes_the_step_log_trace_and_checkpoints_and_resumes() {
    let (log, trace, ck) = (tmp("log.jsonl"), tmp("trace.json"), tmp("ck"));
    let base = [
        "train",
        "--model",
        "tiny-gpt",
        "--workers",
        "4",
        "--plan",
        "dp2,pp2",
        "--gbs",
        "8",
        "--checkpoint-every",
        "2",
    ];
    let mut args = base.to_vec();
    let (l, t, c) = (
        log.to_str().unwrap(),
        trace.to_str().unwrap(),
        ck.to_str().unwrap(),
    );
    args.extend([
        "--steps",
        "4",
        "--json-log",
        l,
        "--trace",
        t,
        "--checkpoint-dir",
        c,
    ]);
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan: dp2 tp1 pp2"), "{out}");
    assert!(out.contains("loss "), "{out}");
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 4);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["step"], i as u64 + 1);
        assert!(l["loss"].as_f64().unwrap() > 0.0);
        assert!(l["tokens_per_s"].as_f64().unwrap() > 0.0);
    }
    // The simulator's trace format: one process per pipeline stage.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    assert!(events
        .iter()
        .any(|e| e["name"] == "process_name" && e["args"]["name"] == "stage 1"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "X" && e["cat"] == "forward"));
    assert_eq!(doc["otherData"]["measured"], true);
    assert_eq!(
        std::fs::read_to_string(ck.join("latest")).unwrap(),
        "step-00000004"
    );

    let log2 = tmp("log2.jsonl");
    let mut args = base.to_vec();
    args.extend([
        "--steps",
        "6",
        "--json-log",
        log2.to_str().unwrap(),
        "--checkpoint-dir",
        c,
        "--resume",
    ]);
    let (code, out, err) = plait(&args);
    // A different run length changes the learning-rate schedule: refused.
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("different run"), "{err}");
    let mut args = base.to_vec();
    args.extend([
        "--steps",
        "4",
        "--json-log",
        log2.to_str().unwrap(),
        "--checkpoint-dir",
        c,
        "--resume",
    ]);
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("resumed after step 4") && out.contains("no steps run"),
        "{out}"
    );
    for p in [&log, &trace, &log2] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&ck);
}

/// ZB-V: each rank's second chunk runs back up the pipeline; the last rank hands its first
/// chunk's output to its second itself, and rank 0 holds the head (tiny-gpt's tied
/// embedding twice) and the loss. A resumed run repeats the uninterrupted one.
#[test]
fn a_v_schedule_trains_traces_its_sends_both_ways_and_resumes() {
    let (trace, ck, log) = (tmp("zb-v-trace.json"), tmp("zb-v-ck"), tmp("zb-v.jsonl"));
    let (t, c, l) = (
        trace.to_str().unwrap(),
        ck.to_str().unwrap(),
        log.to_str().unwrap(),
    );
    let base = [
        "train",
        "--model",
        "tiny-gpt",
        "--workers",
        "2",
        "--plan",
        "pp2,zb-v",
        "--gbs",
        "4",
        "--steps",
        "4",
        "--checkpoint-every",
        "2",
        "--checkpoint-dir",
        c,
        "--json-log",
        l,
    ];
    let mut args = base.to_vec();
    args.extend(["--trace", t]);
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("zb-v"), "{out}");
    let whole = losses(&log);
    // Activations flow down the ranks (chunk 0) and back up (chunk 1): both ranks send them.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let senders: std::collections::BTreeSet<u64> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "send_activation")
        .filter_map(|e| e["pid"].as_u64())
        .collect();
    assert_eq!(senders.len(), 2, "activation senders {senders:?}");

    std::fs::remove_dir_all(ck.join("step-00000004")).unwrap();
    let mut args = base.to_vec();
    args.push("--resume");
    let (code, out, err) = plait(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resumed after step 2"), "{out}");
    let resumed = losses(&log);
    assert_eq!(
        resumed[resumed.len() - 2..],
        whole[2..],
        "{resumed:?} vs {whole:?}"
    );
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_dir_all(&ck);
    let _ = std::fs::remove_file(&log);
}

/// `--schedule zb-v` over a plan of one chunk per rank sets its two chunks, as `estimate
/// --schedule zb-v` does.
#[test]
fn the_schedule_flag_brings_its_fixed_chunk_count() {
    let (code, out, err) = plait(&[
        "train",
        "--model",
        "tiny-gpt",
        "--workers",
        "2",
        "--plan",
        "pp2",
        "--schedule",
        "zb-v",
        "--gbs",
        "4",
        "--steps",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan: dp1 tp1 pp2 vp2"), "{out}");
}

#[test]
fn a_failing_rank_exits_non_zero_within_seconds_naming_it() {
    let ck = tmp("fail-ck");
    let ck_dir = ck.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--model",
            "tiny-gpt",
            "--workers",
            "2",
            "--plan",
            "pp2",
            "--gbs",
            "4",
            "--steps",
            "6",
            "--checkpoint-dir",
            ck_dir,
            "--checkpoint-every",
            "2",
        ];
        args.extend_from_slice(extra);
        plait(&args)
    };
    let start = Instant::now();
    let (code, _, err) = run(&[
        "--fail-rank",
        "1",
        "--fail-step",
        "3",
        "--fail-instruction",
        "2",
    ]);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("rank 1 (dp 0, tp 0, pp 1) failed at step 3, instruction 2"),
        "{err}"
    );
    // The checkpoint of step 2 still loads: resuming runs steps 3 and 4.
    let (code, out, err) = run(&["--resume"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resumed after step 2"), "{out}");
    let _ = std::fs::remove_dir_all(&ck);
}

#[test]
fn a_resumed_run_keeps_its_plan_its_directory_and_one_line_per_step() {
    let (ck, log) = (tmp("resume-ck"), tmp("resume-log.jsonl"));
    let (c, l) = (ck.to_str().unwrap(), log.to_str().unwrap());
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--model",
            "tiny-gpt",
            "--seq",
            "32",
            "--gbs",
            "4",
            "--steps",
            "6",
            "--checkpoint-dir",
            c,
            "--checkpoint-every",
            "2",
            "--json-log",
            l,
        ];
        args.extend(extra);
        plait(&args)
    };
    let steps = |path: &PathBuf| -> Vec<u64> {
        log_lines(path)
            .iter()
            .map(|l| l["step"].as_u64().unwrap())
            .collect()
    };
    // Stopped at step 4: the log has steps 1 to 3, the checkpoint is step 2's.
    let (code, _, err) = run(&[
        "--workers",
        "2",
        "--plan",
        "pp2",
        "--fail-rank",
        "1",
        "--fail-step",
        "4",
    ]);
    assert_ne!(code, 0, "{err}");
    assert_eq!(steps(&log), [1, 2, 3]);
    // A fresh run may not reuse the directory (its steps would mix with these).
    let (code, _, err) = run(&["--workers", "2", "--plan", "dp2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("already holds checkpoints") && err.contains(c),
        "{err}"
    );
    // --plan auto with --resume takes the checkpoint's plan: nothing is measured or
    // planned again (which made it fail at random when timing noise changed the plan).
    let (code, _, err) = run(&["--plan", "auto", "--resume", "--workers", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("written by 2 workers"), "{err}");
    let (code, out, err) = run(&["--workers", "2", "--plan", "auto", "--resume"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("plan (auto): dp1 tp1 pp2") && out.contains("not planned again"),
        "{out}"
    );
    assert!(!out.contains("measured this machine"), "{out}");
    assert!(out.contains("resumed after step 2"), "{out}");
    // Step 3 is in the log once: the lines after the checkpoint were dropped first.
    assert_eq!(steps(&log), [1, 2, 3, 4, 5, 6]);
    let _ = std::fs::remove_dir_all(&ck);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn profile_then_plan_auto_trains() {
    let prof = tmp("profile.json");
    let p = prof.to_str().unwrap();
    let (code, out, err) = plait(&["profile", "--quick", "--output", p]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("GFLOP/s") && out.contains("block gpt h128"),
        "{out}"
    );
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    assert_eq!(profile["format"], "plait-profile/1");
    assert!(profile["gemm"].as_array().unwrap().len() > 5);
    assert!(profile["cpu"]["link"]["latency_s"].as_f64().unwrap() > 0.0);
    let (code, out, err) = plait(&[
        "train",
        "--model",
        "tiny-gpt",
        "--workers",
        "2",
        "--plan",
        "auto",
        "--profile",
        p,
        "--steps",
        "2",
        "--gbs",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("plan (auto): "), "{out}");
    assert!(out.contains("simulated"), "{out}");
    let _ = std::fs::remove_file(&prof);
}

#[test]
fn bad_input_is_one_clear_error() {
    let empty = tmp("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--workers", "4", "--plan", "dp2,tp2,pp2"],
            "--workers is 4",
        ),
        (
            vec!["--data", "/nonexistent/corpus.txt", "--plan", "dp1"],
            "cannot read",
        ),
        (
            vec!["--data", empty.to_str().unwrap(), "--plan", "dp1"],
            "holds no text",
        ),
        (vec!["--plan", "dp1", "--seq", "1000"], "learned positions"),
        (vec!["--plan", "zz3"], "cannot read `zz3`"),
        (
            vec!["--resume", "--plan", "dp1"],
            "--resume needs --checkpoint-dir",
        ),
        (
            vec!["--plan", "dp1", "--checkpoint-every", "-1"],
            "--checkpoint-every must be 0",
        ),
        (vec!["--plan", "dp1,dp2"], "`dp` is given twice"),
        (
            vec!["--plan", "tp9223372036854775809,dp2", "--workers", "2"],
            "more than 2⁶⁴",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["train", "--model", "tiny-gpt", "--steps", "1"];
        args.extend(extra.iter());
        let (code, _, err) = plait(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(want),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let (code, _, err) = plait(&[
        "train",
        "--model",
        "gpt3-175b",
        "--plan",
        "dp1",
        "--steps",
        "1",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("GiB"), "{err}");
    // The same with the default --plan auto: refused before measuring the machine.
    let (code, _, err) = plait(&["train", "--model", "llama3-405b", "--steps", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("GiB"), "{err}");
    // Attention activations grow with seq²: a sequence far too long for this machine is
    // one error naming --seq (it used to abort on a failed allocation, exit 134).
    for plan in ["dp1", "auto"] {
        let (code, _, err) = plait(&[
            "train",
            "--model",
            "tiny-llama",
            "--plan",
            plan,
            "--seq",
            "1000000",
            "--gbs",
            "1",
            "--steps",
            "1",
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.starts_with("error: --seq 1000000 is too long") && err.contains("GiB"),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let _ = std::fs::remove_file(&empty);
}
