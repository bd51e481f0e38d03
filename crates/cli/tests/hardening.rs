//! Hardening (issue 15): inputs far beyond any machine are refused at once with the limit
//! named, or answered as the largest meaningful input would be; never a panic, an abort or
//! a number printed other than as given.

mod common;

use common::{check, plait};

const BERT24: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../partition/tests/data/layer_bert24_training.json"
);

/// (arguments, what the first error line contains).
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["schedule", "--stages", "9223372036854775807"],
        "--stages: 9223372036854775807 is larger than the 65536",
    ),
    (
        &["schedule", "--microbatches", "9223372036854775807"],
        "--microbatches: 9223372036854775807 is larger than the 16777216",
    ),
    (
        &["schedule", "--virtual", "9223372036854775807"],
        "--virtual: 9223372036854775807",
    ),
    (
        &["schedule", "--stages", "10000", "--microbatches", "10000"],
        "is larger than the 16777216 a schedule supports",
    ),
    (
        &[
            "partition",
            "--graph",
            BERT24,
            "--max-ideals",
            "9223372036854775807",
        ],
        "--max-ideals: `max-ideals`: 9223372036854775807 is more than the 16777216",
    ),
];

#[test]
fn sizes_past_the_limits_are_refused_with_the_limit() {
    for (args, expected) in REFUSED {
        check(args, expected);
    }
}

/// Devices and CPUs beyond the graph's units answer as the units would.
#[test]
fn huge_partition_limits_answer() {
    for extra in [
        &["--devices", "9223372036854775807"][..],
        &["--devices", "100000000000", "--cpus", "100000000000"],
        &["--cpus", "9223372036854775807"],
    ] {
        let mut args = vec!["partition", "--graph", BERT24, "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = plait(&args);
        assert_eq!(code, 0, "{extra:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["feasible"], true, "{extra:?}");
        assert_eq!(v["optimal"], true, "{extra:?}");
    }
}
