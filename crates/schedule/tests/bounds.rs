//! Sizes are checked before anything is generated, with the limit named, and the validator's
//! work grows with the instructions, not with the square of the stages.

use plait_schedule::generate::{MAX_INSTRUCTIONS, MAX_STAGES, MAX_STEPS};
use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{generate, validate, GenerateError, ScheduleSpec};

/// (kind, stages, micro-batches, chunks, what the error names, its limit).
const TOO_LARGE: &[(Kind, u32, u32, u32, &str, u64)] = &[
    (
        Kind::OneFOneB,
        10_000,
        10_000,
        1,
        "instructions",
        MAX_INSTRUCTIONS,
    ),
    (Kind::Gpipe, 4096, 4096, 1, "instructions", MAX_INSTRUCTIONS),
    (
        Kind::Interleaved,
        64,
        65_536,
        64,
        "instructions",
        MAX_INSTRUCTIONS,
    ),
    (Kind::OneFOneB, 65_537, 8, 1, "stages", MAX_STAGES),
    (
        Kind::OneFOneB,
        4,
        u32::MAX,
        1,
        "micro-batches × chunks",
        MAX_STEPS,
    ),
];

#[test]
fn schedules_past_the_limits_are_refused_before_generation() {
    for &(kind, p, m, v, what, max) in TOO_LARGE {
        match generate(&ScheduleSpec::new(kind, p, m, v)) {
            Err(e @ GenerateError::TooLarge { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with(what), "{p} {m} {v}: {text}");
                assert!(text.contains(&max.to_string()), "{p} {m} {v}: {text}");
            }
            other => panic!("{kind:?} {p} {m} {v}: {other:?}"),
        }
    }
}

/// The largest pipeline a schedule may have validates (the validator ran every rank in
/// sweeps until none moved: 65,536 stages took about a minute; each rank now runs until it
/// blocks and is woken by the send it waits for).
#[test]
fn the_largest_pipeline_validates() {
    let s = generate(&ScheduleSpec::new(Kind::OneFOneB, MAX_STAGES as u32, 2, 1)).unwrap();
    validate(&s).unwrap();
}
