//! Simulator semantics beyond the closed forms: where data-parallel reductions run, memory
//! of recomputed activations, and malformed input answered with errors, not panics.

use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{generate, simulate, Costs, GradReduce, Instr, Op, ScheduleSpec, SimError};

fn with_reduce(how: GradReduce) -> f64 {
    let mut spec = ScheduleSpec::new(Kind::OneFOneB, 2, 4, 1);
    spec.grad_reduce = how;
    let s = generate(&spec).unwrap();
    let mut costs = Costs::uniform(2, 1, 1.0, 2.0, 0.0);
    for r in &mut costs.ranks {
        r.chunks[0].reduce_s = 4.0;
        r.chunks[0].reduce_buckets = 4;
    }
    simulate(&s, &costs).unwrap().makespan_s
}

/// 1F1B, p = 2, m = 4, F = 1, B = 2: compute ends at 15. A 4-unit reduction in 4 buckets
/// launched after the backward adds all 4; overlapped with the last backward (2 units, a
/// bucket ready every half unit), only the last bucket's 1 unit plus the queueing behind
/// the earlier buckets remains.
#[test]
fn reductions_overlap_only_when_the_schedule_says_so() {
    let none = with_reduce(GradReduce::None);
    let at_end = with_reduce(GradReduce::AtEnd);
    let overlapped = with_reduce(GradReduce::Overlapped);
    assert_eq!(none, 15.0);
    assert_eq!(at_end, 19.0);
    assert_eq!(overlapped, 17.5);
}

/// Recompute allocates its rebuilt activations and the backward frees exactly those: with
/// no recompute instruction, declared recompute bytes never drive memory negative.
#[test]
fn backward_frees_only_what_a_recompute_rebuilt() {
    let s = generate(&ScheduleSpec::new(Kind::OneFOneB, 2, 4, 1)).unwrap();
    let mut costs = Costs::uniform(2, 1, 1.0, 2.0, 0.0);
    for r in &mut costs.ranks {
        r.chunks[0].recompute_bytes = 5.0;
    }
    let sim = simulate(&s, &costs).unwrap();
    for rank in &sim.ranks {
        assert!(
            rank.memory_timeline.iter().all(|&(_, b)| b >= 0.0),
            "{:?}",
            rank.memory_timeline
        );
    }
    let mut spec = ScheduleSpec::new(Kind::OneFOneB, 2, 4, 1);
    spec.recompute = vec![true, true];
    let sim = simulate(&generate(&spec).unwrap(), &costs).unwrap();
    // Stage 0 holds 2 micro-batches (1 unit each) and rebuilds one (5) before its backward.
    assert_eq!(sim.ranks[0].peak_memory_bytes, 7.0);
    assert_eq!(sim.ranks[0].memory_timeline.last().unwrap().1, 0.0);
}

#[test]
fn malformed_schedules_are_errors_not_panics() {
    let mut s = generate(&ScheduleSpec::new(Kind::OneFOneB, 2, 2, 1)).unwrap();
    let costs = Costs::uniform(2, 1, 1.0, 2.0, 0.0);
    s.ranks.pop();
    assert!(matches!(
        simulate(&s, &costs),
        Err(SimError::Malformed(_) | SimError::Shape { .. })
    ));
    let mut s = generate(&ScheduleSpec::new(Kind::OneFOneB, 2, 2, 1)).unwrap();
    s.ranks[0].insert(0, Instr::new(Op::RecvActivation, 0, 0));
    assert!(matches!(simulate(&s, &costs), Err(SimError::Malformed(_))));
    let mut s = generate(&ScheduleSpec::new(Kind::OneFOneB, 2, 2, 1)).unwrap();
    s.ranks[1][0].chunk = 7;
    assert!(matches!(simulate(&s, &costs), Err(SimError::Malformed(_))));
}

#[test]
fn huge_schedules_are_refused_up_front() {
    let e = generate(&ScheduleSpec::new(Kind::OneFOneB, 70_000, 8, 1)).unwrap_err();
    assert!(e.to_string().contains("stages = 70000"), "{e}");
    let e = generate(&ScheduleSpec::new(Kind::Interleaved, 4, 1 << 24, 4)).unwrap_err();
    assert!(e.to_string().contains("micro-batches × chunks"), "{e}");
}
