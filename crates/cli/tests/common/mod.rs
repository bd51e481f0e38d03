//! Helpers shared by the CLI tests: run the `plait` binary, parse its JSON, check its
//! one-line errors.

#![allow(dead_code)] // each test file uses its own subset

use std::process::Command;

/// Runs `plait args…`: (exit code, stdout, stderr).
pub fn plait(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_plait"))
        .args(args)
        .output()
        .expect("run plait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `plait args…`, which must succeed, and parses its stdout as JSON.
pub fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = plait(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

/// The `iteration_time_s` of `plait args… extra…` (`args` asks for `--json`): one run of a
/// comparison between switches.
pub fn step_s(args: &[&str], extra: &[&str]) -> f64 {
    let all: Vec<&str> = args.iter().chain(extra).copied().collect();
    json(&all)["iteration_time_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{all:?}: no iteration_time_s"))
}

/// `check(args, expected)`: exit 2, an `error:` line containing `expected` first (clap adds
/// a "try --help" hint after flag-parsing errors), and no panic.
pub fn check(args: &[&str], expected: &str) {
    let (code, out, err) = plait(args);
    assert_eq!(code, 2, "{args:?}: {out}{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("error: "), "{args:?}: {err}");
    assert!(first.contains(expected), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// DeepSeek-V3 on 1,024 DGX H100 GPUs at tp 2 × pp 8, as NVIDIA's recipe runs it.
pub const DSV3_ON_1024_H100: &str =
    "--model deepseek-v3 --cluster dgx-h100 --gpus 1024 --gbs 8192 --seq 4096 --tp 2 --pp 8";
