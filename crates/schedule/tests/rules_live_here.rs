//! Architecture invariant: schedule rules live in `plait-schedule` only. Other crates ask
//! `ScheduleKind`'s rules (`spares_rank`, `accepts_chunks`, `accepts_microbatches`,
//! `splits_backward`, `stages_finish_in_turn`, `virtual_stage`, `SEARCHED`) and the closed
//! forms in `closed_form`; this test fails when one restates them.

use std::path::{Path, PathBuf};

/// Text that restates a rule, and the rule to call instead.
const RESTATED: &[(&str, &str)] = &[
    (
        "== Schedule::Scp",
        "ScheduleKind::spares_rank / rebuilds_before_backward",
    ),
    ("Schedule::Scp &&", "ScheduleKind::spares_rank"),
    (
        "== Kind::Scp",
        "ScheduleKind::spares_rank / rebuilds_before_backward",
    ),
    (
        "chunk * p + r",
        "ScheduleKind::virtual_stage (the placement)",
    ),
    ("c * p + r", "ScheduleKind::virtual_stage (the placement)"),
    ("* c.pp + r", "ScheduleKind::virtual_stage (the placement)"),
    (
        "fn pipeline_time",
        "plait_schedule::closed_form::pipeline_time",
    ),
    ("fn one_f_one_b", "plait_schedule::generate"),
    ("Schedule::Gpipe {", "ScheduleKind::stages_finish_in_turn"),
    (
        "Schedule::Interleaved && !m",
        "ScheduleKind::accepts_microbatches",
    ),
    (
        "Schedule::ZbH1,",
        "ScheduleKind::SEARCHED (the kinds a search tries)",
    ),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_crate_but_plait_schedule_restates_a_schedule_rule() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(crates).unwrap().flatten() {
        let src = krate.path().join("src");
        if krate.file_name() != "schedule" && src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(
        files.len() > 20,
        "found only {} sources under {crates:?}",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line_no, line) in text.lines().enumerate() {
            for (pattern, instead) in RESTATED {
                if line.contains(pattern) {
                    found.push(format!(
                        "{}:{}: `{pattern}` — use {instead}",
                        f.display(),
                        line_no + 1
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
