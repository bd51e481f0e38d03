//! The validator: every generator's output passes; hand-written mistakes are rejected with
//! the offending rank and instruction named.

use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{generate, validate, GradReduce, Instr, Op, Schedule, ScheduleSpec};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every generator, with any recompute pattern and reduction placement, validates.
    #[test]
    fn generators_validate(kind in 0usize..Kind::ALL.len(), p in 1u32..=12, k in 1u32..=6, v in 1u32..=4, recompute in proptest::collection::vec(any::<bool>(), 12), reduce in 0u8..3) {
        let kind = Kind::ALL[kind];
        let v = match kind.fixed_chunks() {
            Some(n) => n as u32,
            None if kind == Kind::Interleaved => v,
            None => 1,
        };
        // Micro-batches the kind accepts: p·k, or twice that (DualPipeV needs 2p).
        let m = if kind.accepts_microbatches((p * k).into(), p.into()) { p * k } else { 2 * p * k };
        let mut spec = ScheduleSpec::new(kind, p, m, v);
        spec.recompute = recompute[..p as usize].to_vec();
        spec.grad_reduce = [GradReduce::None, GradReduce::Overlapped, GradReduce::AtEnd][reduce as usize];
        let s = generate(&spec).unwrap();
        prop_assert!(validate(&s).is_ok(), "{}", validate(&s).unwrap_err());
    }
}

fn one_f_one_b(p: u32, m: u32) -> Schedule {
    generate(&ScheduleSpec::new(Kind::OneFOneB, p, m, 1)).unwrap()
}

/// `check(schedule, expected)`: validation fails with exactly this message.
fn check(s: &Schedule, expected: &str) {
    let err = validate(s).expect_err("schedule should be rejected");
    assert_eq!(err.to_string(), expected);
}

fn position(s: &Schedule, rank: usize, instr: Instr) -> usize {
    s.ranks[rank].iter().position(|&i| i == instr).unwrap()
}

#[test]
fn backward_before_forward_is_named() {
    let mut s = one_f_one_b(2, 2);
    // Rank 1 (last) runs F0 B0 F1 B1: swap its first forward and backward.
    let f = position(&s, 1, Instr::new(Op::Forward, 0, 0));
    let b = position(&s, 1, Instr::new(Op::Backward, 0, 0));
    s.ranks[1].swap(f, b);
    check(
        &s,
        &format!("rank 1, instruction {f} (B micro-batch 0 chunk 0): backward before its forward"),
    );
}

#[test]
fn missing_backward_is_named() {
    let mut s = one_f_one_b(2, 3);
    let b = position(&s, 0, Instr::new(Op::Backward, 2, 0));
    s.ranks[0].remove(b);
    check(&s, "rank 0: micro-batch 2 chunk 0 never gets its backward");
}

#[test]
fn duplicate_forward_is_named() {
    let mut s = one_f_one_b(1, 2);
    s.ranks[0].insert(1, Instr::new(Op::Forward, 0, 0));
    check(
        &s,
        "rank 0, instruction 1 (F micro-batch 0 chunk 0): forwards this micro-batch a second time",
    );
}

#[test]
fn recompute_after_backward_is_named() {
    let mut s = one_f_one_b(1, 1);
    // F0 B0 step → F0 B0 R0 step
    s.ranks[0].insert(2, Instr::new(Op::Recompute, 0, 0));
    check(&s, "rank 0, instruction 2 (R micro-batch 0 chunk 0): recompute after the backward that needed it");
}

#[test]
fn receives_out_of_order_are_named() {
    let mut s = one_f_one_b(2, 2);
    // Rank 0 runs F0 sendA0 F1 sendA1 …; make it send activation 1 before activation 0.
    // Locally fine, but rank 1 waits for activation 0 and the link delivers 1 first.
    assert_eq!(
        &s.ranks[0][..4],
        &[
            Instr::new(Op::Forward, 0, 0),
            Instr::new(Op::SendActivation, 0, 0),
            Instr::new(Op::Forward, 1, 0),
            Instr::new(Op::SendActivation, 1, 0),
        ]
    );
    s.ranks[0][..4].copy_from_slice(&[
        Instr::new(Op::Forward, 0, 0),
        Instr::new(Op::Forward, 1, 0),
        Instr::new(Op::SendActivation, 1, 0),
        Instr::new(Op::SendActivation, 0, 0),
    ]);
    check(&s, "rank 1, instruction 0 (recvA micro-batch 0 chunk 0): the link from rank 0 delivers its next message in order, which is instruction 2 (sendA micro-batch 1 chunk 0); receives must match sends in order");
}

#[test]
fn circular_wait_is_a_deadlock() {
    let mut s = one_f_one_b(2, 1);
    // Rank 0: F0 sendA B0(recvG first) … make rank 0 wait for the gradient before sending
    // the activation the gradient depends on.
    let send = position(&s, 0, Instr::new(Op::SendActivation, 0, 0));
    let recv = position(&s, 0, Instr::new(Op::RecvGradient, 0, 0));
    let instr = s.ranks[0].remove(send);
    s.ranks[0].insert(recv, instr);
    check(&s, "deadlock: rank 0 at instruction 1 (recvG micro-batch 0 chunk 0), rank 1 at instruction 0 (recvA micro-batch 0 chunk 0) wait for messages that are never sent");
}

#[test]
fn send_without_receive_is_named() {
    let mut s = one_f_one_b(2, 1);
    let recv = position(&s, 1, Instr::new(Op::RecvActivation, 0, 0));
    s.ranks[1].remove(recv);
    check(&s, &format!("rank 1, instruction {recv} (F micro-batch 0 chunk 0): forward before its input activation was received"));
}

#[test]
fn weight_pass_needs_its_input_pass() {
    let mut s = generate(&ScheduleSpec::new(Kind::ZbH1, 1, 1, 1)).unwrap();
    // F0 Bi0 W0 step → F0 W0 Bi0 step
    s.ranks[0].swap(1, 2);
    check(&s, "rank 0, instruction 1 (W micro-batch 0 chunk 0): weight gradient before its input-gradient pass (Bi)");
}

#[test]
fn reduction_before_the_last_gradient_is_named() {
    let mut spec = ScheduleSpec::new(Kind::OneFOneB, 1, 2, 1);
    spec.grad_reduce = GradReduce::AtEnd;
    let mut s = generate(&spec).unwrap();
    // F0 B0 F1 B1 reduce step → move the reduce to the front.
    let r = s.ranks[0].remove(4);
    s.ranks[0].insert(0, r);
    check(&s, "rank 0, instruction 0 (reduce chunk 0): reduces gradients before all weight gradients exist (0 of 2 micro-batches done)");
}

#[test]
fn out_of_range_and_shape_errors() {
    let mut s = one_f_one_b(1, 1);
    s.ranks[0][0] = Instr::new(Op::Forward, 5, 0);
    check(&s, "rank 0, instruction 0 (F micro-batch 5 chunk 0): micro-batch out of range (the schedule has 1 micro-batches)");
    let mut s = one_f_one_b(2, 1);
    s.ranks.pop();
    check(&s, "the schedule declares 2 stages but has 1 rank programs");
}

#[test]
fn partial_reductions_and_misplaced_fields_are_named() {
    let mut spec = ScheduleSpec::new(Kind::OneFOneB, 2, 2, 1);
    spec.grad_reduce = GradReduce::AtEnd;
    let mut s = generate(&spec).unwrap();
    let at = s.ranks[1]
        .iter()
        .position(|i| i.op == Op::ReduceGradients)
        .unwrap();
    s.ranks[1].remove(at);
    check(&s, "1 of the 2 (rank, chunk) gradient reductions are present: every rank must reduce every chunk, or none");
    let mut s = one_f_one_b(1, 1);
    let last = s.ranks[0].len() - 1;
    s.ranks[0][last].microbatch = 999;
    check(&s, &format!("rank 0, instruction {last} (step): names a micro-batch, but it acts on the whole iteration (use 0)"));
}

/// ZB-V's turn: the last rank hands its chunk 0's output to its own chunk 1 in memory, with
/// no send or receive; a program that sends there, or runs chunk 1 first, is named.
#[test]
fn a_v_turns_inside_its_rank() {
    let s = generate(&ScheduleSpec::new(Kind::ZbV, 2, 4, 2)).unwrap();
    validate(&s).unwrap();
    // Rank 1 holds virtual stages 1 (chunk 0) and 2 (chunk 1): nothing crosses between them.
    assert!(!s.ranks[1]
        .iter()
        .any(|i| matches!(i.op, Op::SendActivation) && i.chunk == 0));
    let mut sends_home = s.clone();
    let f = position(&sends_home, 1, Instr::new(Op::Forward, 0, 0));
    sends_home.ranks[1].insert(f + 1, Instr::new(Op::SendActivation, 0, 0));
    check(
        &sends_home,
        &format!(
            "rank 1, instruction {} (sendA micro-batch 0 chunk 0): sends to its own rank, which holds the next virtual stage",
            f + 1
        ),
    );
    let mut early = s.clone();
    let f0 = position(&early, 1, Instr::new(Op::Forward, 0, 0));
    let f1 = position(&early, 1, Instr::new(Op::Forward, 0, 1));
    early.ranks[1].swap(f0, f1);
    check(
        &early,
        &format!(
            "rank 1, instruction {f0} (F micro-batch 0 chunk 1): forward before this rank's previous virtual stage ran it"
        ),
    );
}
