//! Checkpoints, resume and failures: a resumed run repeats the uninterrupted one exactly; a
//! failing rank stops the run quickly with its name, and the last checkpoint still loads.

use std::path::{Path, PathBuf};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use plait_runtime::checkpoint::{latest, verify};
use plait_runtime::error::{DoesNotFit, ResumeError};
use plait_runtime::memory::available_memory_bytes;
use plait_runtime::{
    parse_plan, train, CheckpointConfig, Dataset, Fault, RuntimeError, TrainConfig,
};
use plait_spec::model_preset;

/// candle's thread counts, set as `plait train` sets them at its start (a test binary has
/// no `main` of its own: every test passes here before it trains).
fn data() -> &'static Dataset {
    static INIT: Once = Once::new();
    INIT.call_once(|| plait_runtime::init_compute_threads(1));
    static DATA: OnceLock<Dataset> = OnceLock::new();
    DATA.get_or_init(Dataset::builtin)
}

/// One worker, short sequences: the checkpoint bookkeeping, cheaply.
fn small(dir: &Path, steps: u64) -> TrainConfig {
    let mut cfg = TrainConfig::new(
        model_preset("tiny-gpt").unwrap(),
        parse_plan("dp1", 1).unwrap(),
        16,
        2,
        steps,
    );
    cfg.checkpoint = Some(CheckpointConfig {
        dir: dir.to_path_buf(),
        every: 5,
        keep: 2,
    });
    cfg
}

/// The `step-*` directories in `dir`, sorted.
fn step_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("step-"))
        .collect();
    names.sort();
    names
}

fn pointer(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("latest")).unwrap()
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plait-runtime-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(plan: &str, workers: usize, dir: Option<&PathBuf>) -> TrainConfig {
    let mut cfg = TrainConfig::new(
        model_preset("tiny-gpt").unwrap(),
        parse_plan(plan, workers).unwrap(),
        64,
        8,
        10,
    );
    cfg.seed = 7;
    cfg.checkpoint = dir.map(|d| CheckpointConfig {
        dir: d.clone(),
        every: 5,
        keep: 2,
    });
    cfg
}

#[test]
fn resume_after_step_5_repeats_steps_6_to_10_exactly() {
    // ZeRO-1 over dp and a pipeline: sharded optimizer states and parameters.
    let plan = "dp2,pp2,zero1";
    let full = train(&config(plan, 4, None), data(), |_| {}).unwrap();
    let dir = tmpdir("resume");
    let mut first = config(plan, 4, Some(&dir));
    first.stop_after = Some(5);
    let head = train(&first, data(), |_| {}).unwrap();
    assert_eq!(head.logs.len(), 5);
    assert_eq!(head.checkpoints.len(), 1);
    let mut second = config(plan, 4, Some(&dir));
    second.resume = true;
    let tail = train(&second, data(), |_| {}).unwrap();
    assert_eq!(tail.resumed_from, 5);
    let steps: Vec<u64> = tail.logs.iter().map(|l| l.step).collect();
    assert_eq!(steps, vec![6, 7, 8, 9, 10]);
    for (a, b) in head.logs.iter().chain(&tail.logs).zip(&full.logs) {
        assert_eq!(a.step, b.step);
        assert_eq!(
            a.loss.to_bits(),
            b.loss.to_bits(),
            "step {}: {} vs {}",
            a.step,
            a.loss,
            b.loss
        );
    }
    // A different plan cannot resume from these shards.
    let mut other = config("dp4", 4, Some(&dir));
    other.resume = true;
    let e = train(&other, data(), |_| {}).unwrap_err().to_string();
    assert!(e.contains("different run"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_rank_stops_every_rank_and_is_named() {
    for panic in [false, true] {
        let dir = tmpdir(&format!("fail-{panic}"));
        let mut cfg = config("dp2,pp2", 4, Some(&dir));
        // Rank 3 (dp 1, pp 1) fails at its fourth instruction of step 7, after the
        // checkpoint of step 5; the other ranks are blocked in receives or collectives.
        cfg.fault = Some(Fault {
            rank: 3,
            step: 7,
            instruction: 3,
            panic,
        });
        let start = Instant::now();
        let err = train(&cfg, data(), |_| {}).unwrap_err();
        let elapsed = start.elapsed();
        assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
        match &err {
            RuntimeError::RankFailed { rank, step, at, .. } => {
                assert_eq!((*rank, *step), (3, 7));
                assert!(at.starts_with("instruction 3 ("), "{at}");
            }
            other => panic!("unexpected error {other}"),
        }
        let text = err.to_string();
        assert!(
            text.starts_with("rank 3 (dp 1, tp 0, pp 1) failed at step 7, instruction 3"),
            "{text}"
        );
        assert!(text.contains("injected failure"), "{text}");
        // Labelled for what it is: no "tensor:" (nor a message repeated by a source chain).
        assert!(!text.contains("tensor:"), "{text}");
        if panic {
            assert!(text.contains("panicked: injected failure"), "{text}");
        }
        // The checkpoint of step 5 is intact and training resumes from it.
        let (path, manifest) = latest(&dir).unwrap().unwrap();
        assert_eq!(manifest.step, 5);
        verify(&path).unwrap();
        let mut again = config("dp2,pp2", 4, Some(&dir));
        again.resume = true;
        again.stop_after = Some(6);
        let r = train(&again, data(), |_| {}).unwrap();
        assert_eq!(r.logs.iter().map(|l| l.step).collect::<Vec<_>>(), vec![6]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn an_interrupted_write_leaves_the_previous_checkpoint() {
    let dir = tmpdir("interrupted");
    let mut cfg = config("dp2", 2, Some(&dir));
    cfg.stop_after = Some(5);
    train(&cfg, data(), |_| {}).unwrap();
    // A crash while writing step 10: a partial temporary directory and pointer.
    let tmp = dir.join(".tmp-step-00000010");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("rank-00000.safetensors"), b"partial").unwrap();
    std::fs::write(dir.join(".latest.tmp"), b"step-000").unwrap();
    let (_, m) = latest(&dir).unwrap().unwrap();
    assert_eq!(m.step, 5);
    // A corrupted shard is detected, not loaded.
    let shard = dir.join("step-00000005").join("rank-00001.safetensors");
    let good = std::fs::read(&shard).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&shard, &bad).unwrap();
    let e = latest(&dir).unwrap_err().to_string();
    assert!(e.contains("checksum"), "{e}");
    std::fs::write(&shard, &good).unwrap();
    // Resuming writes step 10 over the debris.
    let mut cfg = config("dp2", 2, Some(&dir));
    cfg.resume = true;
    train(&cfg, data(), |_| {}).unwrap();
    let (_, m) = latest(&dir).unwrap().unwrap();
    assert_eq!(m.step, 10);
    assert!(!tmp.exists());
    // `latest` naming a directory that is gone (deleted by hand, or the crash the commit
    // order rules out): the newest complete checkpoint instead.
    std::fs::remove_dir_all(dir.join("step-00000010")).unwrap();
    let (path, m) = latest(&dir).unwrap().unwrap();
    assert_eq!((m.step, path), (5, dir.join("step-00000005")));
    std::fs::remove_dir_all(dir.join("step-00000005")).unwrap();
    let e = latest(&dir).unwrap_err().to_string();
    assert!(e.contains("step-00000010") && e.contains("missing"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_holds_one_run_and_the_step_just_written_is_never_pruned() {
    let dir = tmpdir("reused");
    train(&small(&dir, 10), data(), |_| {}).unwrap();
    assert_eq!(step_dirs(&dir), ["step-00000005", "step-00000010"]);
    // A fresh run in a directory with checkpoints is refused, naming the directory (it
    // would mix its steps with the earlier run's).
    let mut other = small(&dir, 20);
    other.checkpoint.as_mut().unwrap().every = 3;
    let e = train(&other, data(), |_| {}).unwrap_err();
    match &e {
        RuntimeError::Resume(ResumeError::DirectoryInUse { dir: d, found }) => {
            assert_eq!(d, &dir);
            assert_eq!(found, &["step-00000005", "step-00000010"]);
        }
        other => panic!("unexpected error {other}"),
    }
    let e = e.to_string();
    assert!(
        e.contains(&dir.display().to_string()) && e.contains("`resume`"),
        "{e}"
    );
    assert_eq!(step_dirs(&dir), ["step-00000005", "step-00000010"]);
    // `latest` naming an older step than the directory's newest, and higher steps lying
    // there too (what a directory shared by two runs used to look like): the resumed run
    // rewrites step 10 under a fresh name, `latest` names it, and neither it nor step 5
    // is pruned for the sake of the higher-numbered ones (keeping the newest two by name
    // deleted the step just written, and `latest` named nothing).
    std::fs::create_dir(dir.join("step-00000020")).unwrap();
    std::fs::create_dir(dir.join("step-00000030")).unwrap();
    std::fs::write(dir.join("latest"), "step-00000005").unwrap();
    let mut resumed = small(&dir, 10);
    resumed.resume = true;
    let r = train(&resumed, data(), |_| {}).unwrap();
    assert_eq!(r.resumed_from, 5);
    assert_eq!(r.checkpoints, [dir.join("step-00000010.1")]);
    assert_eq!(pointer(&dir), "step-00000010.1");
    assert_eq!(
        step_dirs(&dir),
        [
            "step-00000005",
            "step-00000010.1",
            "step-00000020",
            "step-00000030"
        ]
    );
    let (path, m) = latest(&dir).unwrap().unwrap();
    assert_eq!((m.step, path), (10, dir.join("step-00000010.1")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_stopped_inside_a_tensor_parallel_op_is_a_bystander() {
    // Rank 1 fails before its first forward; rank 0 is then waiting in the forward's
    // tensor-parallel all-reduce, inside a candle op, whose error comes back as a candle
    // error: rank 1 is the one reported, every time.
    for _ in 0..3 {
        let mut cfg = config("tp2", 2, None);
        cfg.fault = Some(Fault {
            rank: 1,
            step: 1,
            instruction: 0,
            panic: false,
        });
        match train(&cfg, data(), |_| {}).unwrap_err() {
            RuntimeError::RankFailed { rank, message, .. } => {
                assert_eq!(rank, 1, "{message}");
                assert_eq!(message, "injected failure (test switch)");
            }
            other => panic!("unexpected error {other}"),
        }
    }
}

#[test]
fn bad_requests_are_clear_errors() {
    let e = parse_plan("dp2,tp2,pp2", 4).unwrap_err().to_string();
    assert!(e.contains("`workers` is 4"), "{e}");
    let big = TrainConfig::new(
        model_preset("gpt3-175b").unwrap(),
        Default::default(),
        64,
        8,
        1,
    );
    let e = train(&big, data(), |_| {}).unwrap_err().to_string();
    assert!(e.contains("GiB") && e.contains("available"), "{e}");
    // Attention activations grow with seq²: a long sequence is refused before any tensor
    // is allocated (it used to abort the process), naming `seq`.
    if available_memory_bytes().is_some() {
        let long = TrainConfig::new(
            model_preset("tiny-llama").unwrap(),
            Default::default(),
            1_000_000,
            1,
            1,
        );
        let e = train(&long, data(), |_| {}).unwrap_err();
        assert!(
            matches!(
                &e,
                RuntimeError::DoesNotFit(DoesNotFit::Activations { seq: 1_000_000, .. })
            ),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("`seq` 1000000") && e.contains("GiB"), "{e}");
    }
    let e = Dataset::from_text("  \n", "empty.txt")
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty.txt") && e.contains("no text"), "{e}");
    let short = Dataset::from_text("short text", "short.txt").unwrap();
    let e = train(&config("dp1", 1, None), &short, |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs at least 65"), "{e}");
    let e = train(&config("tp8", 8, None), data(), |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("tp"), "{e}");
    let mut gqa = config("tp4", 4, None);
    gqa.model = model_preset("tiny-llama").unwrap();
    let e = train(&gqa, data(), |_| {}).unwrap_err().to_string();
    assert!(e.contains("key/value heads"), "{e}");
}

/// The manifest is checked like the shards (issue 15 item 8): a one-bit change to its
/// `step` (10 → 11) would have made `--resume` skip a step; now it fails its own checksum,
/// and the error names the newest intact older checkpoint and how to resume from it. A
/// step that disagrees with its directory's name is refused too.
#[test]
fn a_changed_manifest_is_caught_and_the_intact_one_named() {
    let dir = tmpdir("manifest");
    let cfg = small(&dir, 10);
    train(&cfg, data(), |_| {}).unwrap();
    assert_eq!(step_dirs(&dir), ["step-00000005", "step-00000010"]);
    let manifest = dir.join("step-00000010").join("manifest.json");
    let good = std::fs::read_to_string(&manifest).unwrap();
    for (what, edit) in [
        ("step", good.replacen("\"step\": 10", "\"step\": 11", 1)),
        (
            "data position",
            good.replacen("\"data_position\": 20", "\"data_position\": 22", 1),
        ),
        ("no checksum", {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            v.as_object_mut().unwrap().remove("manifest_fnv1a");
            serde_json::to_string_pretty(&v).unwrap()
        }),
    ] {
        assert_ne!(edit, good, "{what}");
        std::fs::write(&manifest, &edit).unwrap();
        let e = latest(&dir).unwrap_err().to_string();
        assert!(e.contains("manifest"), "{what}: {e}");
        assert!(
            !e.contains("checkpoint: checkpoint:") && !e.contains("  "),
            "{what}: {e}"
        );
        assert!(
            e.contains("the newest intact checkpoint is")
                && e.contains("step-00000005 (step 5)")
                && e.contains("echo step-00000005 >"),
            "{what}: {e}"
        );
        assert!(verify(&dir.join("step-00000005")).is_ok());
    }
    std::fs::write(&manifest, &good).unwrap();
    assert_eq!(latest(&dir).unwrap().unwrap().1.step, 10);
    // A whole checkpoint under another step's name.
    let copy = dir.join("step-00000007");
    std::fs::create_dir_all(&copy).unwrap();
    for f in std::fs::read_dir(dir.join("step-00000005")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let e = verify(&copy).unwrap_err().to_string();
    assert!(
        e.contains("step 5 but the directory is `step-00000007`"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
