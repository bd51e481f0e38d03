//! Architecture invariant: no source file of the workspace (Rust under `crates/`, Python
//! under `python/`) is over 900 lines; a file that grows past it is split by topic.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            // Build outputs and virtual environments are not sources.
            if !matches!(name.to_str(), Some("target" | ".venv" | "__pycache__")) {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs" || e == "py") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_900_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    sources(&root.join("crates"), &mut files);
    sources(&root.join("python"), &mut files);
    assert!(files.len() > 100, "found only {} sources", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", f.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines:\n{}",
        long.join("\n")
    );
}
