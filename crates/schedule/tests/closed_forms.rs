//! Generators against the closed forms of the papers: uniform stages, free communication.
//! Durations are integers scaled by v so that every sum is exact in floating point.

use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{generate, simulate, validate, Costs, ScheduleSpec, Simulation};
use proptest::prelude::*;

/// Generates, validates and simulates; `f`, `b`, `w` are one micro-batch's forward, full
/// backward and weight part on one rank, `r` its recompute.
fn run(
    kind: Kind,
    p: u32,
    m: u32,
    v: u32,
    (f, b, w, r): (f64, f64, f64, f64),
    recompute: bool,
) -> Simulation {
    let mut spec = ScheduleSpec::new(kind, p, m, v);
    if recompute {
        spec.recompute = vec![true; p as usize];
    }
    let s = generate(&spec).unwrap();
    validate(&s).unwrap_or_else(|e| panic!("{kind} p={p} m={m} v={v}: {e}"));
    let mut costs = Costs::uniform(p, v, f, b, w);
    for rank in &mut costs.ranks {
        for c in &mut rank.chunks {
            c.recompute_s = r / f64::from(v);
        }
    }
    simulate(&s, &costs).unwrap()
}

fn check(
    kind: Kind,
    p: u32,
    m: u32,
    v: u32,
    fbw: (f64, f64, f64),
    expected_makespan: f64,
    expected_inflight: impl Fn(u32) -> f64,
) {
    let (f, b, w) = fbw;
    let sim = run(kind, p, m, v, (f, b, w, 0.0), false);
    assert_eq!(
        sim.makespan_s, expected_makespan,
        "{kind} p={p} m={m} v={v} F={f} B={b} W={w}"
    );
    for (k, rank) in sim.ranks.iter().enumerate() {
        assert_eq!(
            rank.peak_inflight_microbatches,
            expected_inflight(k as u32),
            "{kind} p={p} m={m} stage {k}"
        );
        assert_eq!(
            rank.busy_s,
            f64::from(m) * (f + b),
            "every rank computes m(F+B)"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// GPipe and 1F1B: (m + p − 1)(F + B); in flight m (GPipe) and p − k (1F1B).
    #[test]
    fn gpipe_and_1f1b(p in 1u32..=32, m in 1u32..=128, f in 1u32..=8, b in 1u32..=16) {
        let (f, b) = (f64::from(f), f64::from(b));
        let t = f64::from(m + p - 1) * (f + b);
        check(Kind::Gpipe, p, m, 1, (f, b, 0.0), t, |_| f64::from(m));
        check(Kind::OneFOneB, p, m, 1, (f, b, 0.0), t, |k| f64::from((p - k).min(m)));
    }

    /// Interleaved with v chunks: m(F + B) + (p − 1)(F + B)/v (Narayanan et al. 2021), for
    /// Megatron-Core's order with m a multiple of p.
    #[test]
    fn interleaved(p in 1u32..=32, k in 1u32..=8, v in 1u32..=4, f in 1u32..=8, b in 1u32..=16) {
        let m = p * k;
        prop_assume!(m <= 128);
        let (f, b) = (f64::from(f * v), f64::from(b * v));
        let t = f64::from(m) * (f + b) + f64::from(p - 1) * (f + b) / f64::from(v);
        // Megatron-Core's (and torch's) warm-up: 2(p − k − 1) + (v − 1)p chunk forwards, one
        // more before the first backward, at most every forward.
        let inflight = |s: u32| {
            let chunks = (2 * (p - s - 1) + (v - 1) * p + 1).min(m * v);
            f64::from(chunks) / f64::from(v)
        };
        check(Kind::Interleaved, p, m, v, (f, b, 0.0), t, inflight);
    }

    /// ZB-H1 (Qi et al. 2024, Table 2): bubble (p − 1)(F + Bi − W) with B = Bi + W. The paper
    /// derives it for m ≥ p and a weight pass no longer than the forward or the input pass
    /// (its figures use F = Bi = W); in flight p − k, as 1F1B.
    #[test]
    fn zb_h1(p in 1u32..=32, m in 1u32..=128, f in 1u32..=8, bi in 1u32..=8, w in 1u32..=8) {
        prop_assume!(m >= p && w <= f && w <= bi);
        let (f, bi, w) = (f64::from(f), f64::from(bi), f64::from(w));
        let t = f64::from(m) * (f + bi + w) + f64::from(p - 1) * (f + bi - w);
        check(Kind::ZbH1, p, m, 1, (f, bi + w, w), t, |k| f64::from(p - k));
    }

    /// ZB-V (torch's `ScheduleZBVZeroBubble` order) with per-chunk forward f, input pass b
    /// and weight pass w, f ≤ b and w ≤ b, m ≥ 2p − 1: bubble (p − 1)·max(b, 2(b − w)); every
    /// rank holds p micro-batches (2p half-stage chunks) at its peak.
    #[test]
    fn zb_v(p in 1u32..=16, extra in 0u32..=32, f in 1u32..=8, bi in 1u32..=8, w in 1u32..=8) {
        prop_assume!(f <= bi && w <= bi);
        let m = 2 * p - 1 + extra;
        // Per rank: both chunks.
        let (f, bi, w) = (f64::from(2 * f), f64::from(2 * bi), f64::from(2 * w));
        let t = f64::from(m) * (f + bi + w) + f64::from(p - 1) * (bi / 2.0).max(bi - w);
        check(Kind::ZbV, p, m, 2, (f, bi + w, w), t, |_| f64::from(p));
    }

    /// Any micro-batch count: ZB-V validates, is never slower than 1F1B with the same passes,
    /// and holds at most p micro-batches on any rank.
    #[test]
    fn zb_v_any_batch(p in 1u32..=12, m in 1u32..=40, f in 1u32..=8, bi in 1u32..=8, w in 1u32..=8) {
        let (f, bi, w) = (f64::from(2 * f), f64::from(2 * bi), f64::from(2 * w));
        let zb = run(Kind::ZbV, p, m, 2, (f, bi + w, w, 0.0), false);
        let one = run(Kind::OneFOneB, p, m, 1, (f, bi + w, w, 0.0), false).makespan_s;
        prop_assert!(zb.makespan_s <= one, "zb-v {} > 1f1b {one}", zb.makespan_s);
        for rank in &zb.ranks {
            prop_assert!(rank.peak_inflight_microbatches <= f64::from(p.min(m)));
        }
    }

    /// DualPipeV (DeepSeek's `dualpipev.py` order) with per-chunk forward f, input pass b and
    /// weight pass w, f ≤ b and w ≤ b, m ≥ 2p: bubble (p − 1)(2b − w) − min(f, (p − 1)(b − f));
    /// every rank holds 2p + 1 half-stage chunks at its peak (the README's PP + 1), and the
    /// closed form the cost model uses is the simulated makespan.
    #[test]
    fn dualpipe_v(p in 1u32..=16, extra in 0u32..=32, f in 1u32..=8, bi in 1u32..=8, w in 0u32..=8) {
        prop_assume!(f <= bi && w <= bi);
        let m = 2 * p + extra;
        let (fc, bc, wc) = (f64::from(f), f64::from(bi), f64::from(w));
        let hops = f64::from(p - 1);
        let bubble = hops * (2.0 * bc - wc) - (hops * (bc - fc)).clamp(0.0, fc);
        let (f, bi, w) = (2.0 * fc, 2.0 * bc, 2.0 * wc);
        let t = f64::from(m) * (f + bi + w) + bubble;
        check(Kind::DualPipeV, p, m, 2, (f, bi + w, w), t, |_| f64::from(p) + 0.5);
        let stage = plait_schedule::closed_form::StageTime {
            forward_s: f,
            backward_s: bi + w,
            weight_grad_s: w,
            p2p_s: 0.0,
        };
        let stages = vec![stage; p as usize];
        let (closed, _) = plait_schedule::closed_form::pipeline_time(Kind::DualPipeV, &stages, m.into(), 2);
        prop_assert_eq!(closed, t);
    }

    /// Any passes and micro-batch count DualPipeV accepts: it validates, holds p + 1/2
    /// micro-batches, and is never slower than 1F1B with the same passes.
    #[test]
    fn dualpipe_v_any_passes(p in 1u32..=12, extra in 0u32..=16, f in 1u32..=8, bi in 1u32..=8, w in 0u32..=8) {
        let m = 2 * p + extra;
        let (f, bi, w) = (f64::from(2 * f), f64::from(2 * bi), f64::from(2 * w));
        let dual = run(Kind::DualPipeV, p, m, 2, (f, bi + w, w, 0.0), false);
        let one = run(Kind::OneFOneB, p, m, 1, (f, bi + w, w, 0.0), false).makespan_s;
        prop_assert!(dual.makespan_s <= one, "dualpipe-v {} > 1f1b {one}", dual.makespan_s);
        for rank in &dual.ranks {
            prop_assert_eq!(rank.peak_inflight_microbatches, f64::from(p) + 0.5);
        }
    }

    /// Outside the paper's regime ZB-H1 is still never slower than 1F1B and never beats the
    /// first rank's own bound: m(F+Bi+W) plus (p − 1)·max(F, Bi) of forward fill / gradient
    /// return that no W can cover.
    #[test]
    fn zb_h1_bounds(p in 1u32..=16, m in 1u32..=64, f in 1u32..=8, bi in 1u32..=8, w in 1u32..=8) {
        let (f, bi, w) = (f64::from(f), f64::from(bi), f64::from(w));
        let zb = run(Kind::ZbH1, p, m, 1, (f, bi + w, w, 0.0), false).makespan_s;
        let one = run(Kind::OneFOneB, p, m, 1, (f, bi + w, w, 0.0), false).makespan_s;
        prop_assert!(zb <= one, "zb-h1 {zb} > 1f1b {one}");
        let floor = f64::from(m) * (f + bi + w) + f64::from(p.min(m) - 1) * f.max(bi).min(f + bi + w);
        prop_assert!(zb >= f64::from(m) * (f + bi + w) && zb + 1e-9 >= floor.min(one), "zb-h1 {zb} below bound {floor}");
    }

    /// Merak's shifted critical path with full recompute R ≤ F on every rank saves at least
    /// p·R over 1F1B, and exactly p·R for full recompute of a transformer stage: the recompute
    /// repeats the forward (R = F) and the backward is at least twice the forward (B ≥ 2F). Plain 1F1B takes (m + p − 1)(F + R + B): the last micro-batch's
    /// round trip through all p ranks pays R on each. scp's last rank keeps its activations
    /// (−R at the turn) and every upstream rank recomputes that micro-batch while it waits for
    /// the downstream gradient (−R per hop). When R < F or B < 2F the faster last rank also
    /// returns gradients earlier than the upstream ranks need them, which saves a little more.
    #[test]
    fn scp_saves_p_recomputes(p in 2u32..=16, extra in 0u32..=32, f in 1u32..=8, b in 1u32..=24, r in 1u32..=8) {
        prop_assume!(r <= f);
        let m = p + extra;
        let (f, b, r) = (f64::from(f), f64::from(b), f64::from(r));
        let one = run(Kind::OneFOneB, p, m, 1, (f, b, 0.0, r), true).makespan_s;
        let scp = run(Kind::Scp, p, m, 1, (f, b, 0.0, r), true).makespan_s;
        prop_assert_eq!(one, f64::from(m + p - 1) * (f + r + b));
        prop_assert!(scp <= one - f64::from(p) * r, "scp {} vs 1f1b {}", scp, one);
        if r == f && b >= 2.0 * f {
            prop_assert_eq!(scp, one - f64::from(p) * r);
        }
    }
}

/// The acceptance example: 4 ranks, 8 micro-batches, F = 1, B = 2, full recompute R = 1.
#[test]
fn scp_example_is_four_units_shorter() {
    let one = run(Kind::OneFOneB, 4, 8, 1, (1.0, 2.0, 0.0, 1.0), true).makespan_s;
    let scp = run(Kind::Scp, 4, 8, 1, (1.0, 2.0, 0.0, 1.0), true).makespan_s;
    assert_eq!((one, scp), (44.0, 40.0));
}

/// With F = Bi = W, ZB-H1's bubble is a third of 1F1B's.
#[test]
fn zb_h1_bubble_is_a_third_of_1f1b() {
    let (p, m) = (8, 32);
    let zb = run(Kind::ZbH1, p, m, 1, (1.0, 2.0, 1.0, 0.0), false);
    let one = run(Kind::OneFOneB, p, m, 1, (1.0, 2.0, 1.0, 0.0), false);
    assert_eq!(zb.bubble_s * 3.0, one.bubble_s);
    assert_eq!(one.bubble_s, 21.0);
}

/// `steady_state_forwards` against the generated programs: the forwards that run beside a
/// backward of another micro-batch, i.e. next to it among the rank's compute instructions
/// (a steady-state forward followed by its partner backward; without a warm-up, each
/// backward followed by the next forward).
#[test]
fn steady_state_forwards_follow_the_generated_warm_up() {
    use plait_schedule::closed_form::steady_state_forwards;
    use plait_schedule::Op;
    for (kind, vs) in [
        (Kind::OneFOneB, vec![1]),
        (Kind::Interleaved, vec![2, 3, 4]),
    ] {
        for p in 1..=8u32 {
            for &v in &vs {
                // Enough micro-batches for a steady state (Megatron-Core's interleaving asks
                // for a pipeline and more micro-batches than the warm-up).
                for m in [p, p + 1, 2 * p, 3 * p + 1] {
                    if m < 2 || (v > 1 && (p == 1 || m < 2 * p)) {
                        continue;
                    }
                    let spec = ScheduleSpec::new(kind, p, m, v);
                    let Ok(s) = generate(&spec) else { continue };
                    for (k, prog) in s.ranks.iter().enumerate() {
                        let compute: Vec<_> = prog.iter().filter(|i| i.op.is_compute()).collect();
                        let pairs = |first: Op, second: Op| {
                            compute
                                .windows(2)
                                .filter(|w| {
                                    w[0].op == first
                                        && w[1].op == second
                                        && (w[0].microbatch, w[0].chunk)
                                            != (w[1].microbatch, w[1].chunk)
                                })
                                .count() as u64
                        };
                        let no_warmup = compute.first().map(|i| i.op) == Some(Op::Forward)
                            && compute.get(1).map(|i| i.op) == Some(Op::Backward);
                        let steady = if no_warmup {
                            pairs(Op::Backward, Op::Forward)
                        } else {
                            pairs(Op::Forward, Op::Backward)
                        };
                        assert_eq!(
                            steady_state_forwards(kind, k as u64, p.into(), m.into(), v.into()),
                            Some(steady),
                            "{kind} p={p} m={m} v={v} rank {k}"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(steady_state_forwards(Kind::Gpipe, 0, 4, 8, 1), None);
}
