//! The regression corpus: every input under `corpus/<surface>/` (the reproductions of issue
//! 15 and what the fuzzer found) through its surface's check, each within the case time
//! limit, with no panic and no non-finite number in an answer.
//!
//! Each input runs in a child process (this test binary again, running `replay_one`), so
//! that an abort the harness cannot catch in process — a failed allocation, a stack
//! overflow — is reported with its file instead of ending the run.

mod common;

use std::process::Command;

use plait_fuzz::{case_timeout, run_case, show};

const CHILD: &str = "PLAIT_FUZZ_REPLAY";

/// In a child: replays the one input named by `PLAIT_FUZZ_REPLAY` (`surface:path`); does
/// nothing otherwise.
#[test]
fn replay_one() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (surface, path) = spec.split_once(':').expect("surface:path");
    let input = std::fs::read(path).unwrap();
    if let Err(e) = run_case(&common::check_of(surface), &input, case_timeout()) {
        panic!("FINDING {e}");
    }
}

#[test]
fn every_corpus_input_gets_a_clean_answer() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let root = common::repo().join("crates/fuzz/corpus");
    let exe = std::env::current_exe().unwrap();
    let mut failures = vec![];
    let mut replayed = 0;
    for surface in common::SURFACES {
        let Ok(entries) = std::fs::read_dir(root.join(surface)) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            replayed += 1;
            let out = Command::new(&exe)
                .args(["replay_one", "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, format!("{surface}:{}", path.display()))
                .env("RUST_BACKTRACE", "0")
                .output()
                .unwrap();
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let why = stderr
                    .lines()
                    .find_map(|l| l.split_once("FINDING ").map(|(_, e)| e.to_string()))
                    .or_else(|| {
                        stderr
                            .lines()
                            .find(|l| l.contains("memory allocation") || l.contains("overflow"))
                            .map(|l| format!("abort: {l}"))
                    })
                    .unwrap_or_else(|| format!("exit {}", out.status));
                let input = std::fs::read(&path).unwrap();
                failures.push(format!(
                    "{}: {why}\n    input: {}",
                    path.display(),
                    show(&input)
                ));
            }
        }
    }
    assert!(replayed > 0, "the corpus under {} is empty", root.display());
    assert!(
        failures.is_empty(),
        "{} of {replayed} corpus inputs fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
