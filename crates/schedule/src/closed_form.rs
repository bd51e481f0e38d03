//! Closed-form pipeline timing and in-flight micro-batches per schedule: the papers'
//! formulas for what the generators produce (the proptests in `tests/closed_forms.rs` hold
//! them to the simulated makespans).
//!
//! These formulas assume each stage repeats the same per-micro-batch work; the event
//! simulator refines them for uneven stages and communication.

use crate::kind::ScheduleKind as Schedule;

/// Per-micro-batch time of one pipeline rank (all its chunks).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTime {
    pub forward_s: f64,
    /// Backward including recomputation.
    pub backward_s: f64,
    /// The weight-gradient part of `backward_s`.
    pub weight_grad_s: f64,
    /// Point-to-point transfers of activations and gradients.
    pub p2p_s: f64,
}

impl StageTime {
    pub fn total_s(&self) -> f64 {
        self.forward_s + self.backward_s + self.p2p_s
    }
}

/// Pipeline time of one iteration: the steady state of the slowest stage for every
/// micro-batch plus the fill and drain of the schedule (the bubble). Returns
/// `(total, bubble)`, with `bubble = total − m × slowest`.
pub fn pipeline_time(schedule: Schedule, stages: &[StageTime], m: u64, vp: u64) -> (f64, f64) {
    let p = stages.len();
    let m = m as f64;
    let slowest = stages.iter().map(StageTime::total_s).fold(0.0, f64::max);
    if p <= 1 {
        return (m * slowest, 0.0);
    }
    let steady = m * slowest;
    let bubble = match schedule {
        // A micro-batch passes every stage once on the way in and out; the slowest stage
        // sets the pace in between: (m − 1)·max + Σ stages, = (m + p − 1)·t for equal stages.
        Schedule::Gpipe | Schedule::OneFOneB | Schedule::Scp => {
            stages.iter().map(StageTime::total_s).sum::<f64>() - slowest
        }
        // Narayanan et al. 2021: the bubble shrinks by the number of chunks v.
        Schedule::Interleaved => (p - 1) as f64 * slowest / vp.max(1) as f64,
        // ZB-V in torch's order: each rank's two chunks take f, b and w (half the rank's
        // F, B_input and W); with f ≤ b and w ≤ b, the regime of Qi et al. 2024 ("Pipeline
        // Parallelism with Controllable Memory", whose figures take F = B = W), the bubble
        // is (p − 1)·max(b, 2(b − w)) once m ≥ 2p − 1 (tests/closed_forms.rs holds the
        // simulator to it): one chunk's input pass per hop of the gradients' return, or the
        // input passes' excess over the weight passes that fill the drain (and a chunk's
        // forward per hop where that is longer, outside the regime).
        Schedule::ZbV => {
            let worst = slowest_stage(stages);
            let input_grad = worst.backward_s - worst.weight_grad_s;
            (p - 1) as f64
                * ((worst.forward_s + worst.p2p_s) / 2.0)
                    .max(input_grad / 2.0)
                    .max(input_grad - worst.weight_grad_s)
        }
        // DualPipeV in DeepSeek's order: with the chunk passes f, b and w as for ZB-V and
        // f ≤ b, w ≤ b, the bubble is (p − 1)(2b − w) − min(f, (p − 1)(b − f)) once m ≥ 2p
        // (tests/closed_forms.rs holds the simulator to it): each hop of the gradients'
        // return costs two input passes, one per chunk, less the weight pass the drain
        // defers into it; the last round's forward overlaps that return by up to one
        // forward. DeepSeek's own count, (PP/2 − 1)(F&B + B − 3W) for PP = 2p stages
        // (deepseek-ai/DualPipe README), times the overlapped pair F&B as one block. Outside
        // the regime a chunk's forward per hop bounds it instead.
        Schedule::DualPipeV => {
            let worst = slowest_stage(stages);
            let f = (worst.forward_s + worst.p2p_s) / 2.0;
            let b = (worst.backward_s - worst.weight_grad_s) / 2.0;
            let w = worst.weight_grad_s / 2.0;
            let hops = (p - 1) as f64;
            (hops * (2.0 * b - w).max(f) - (hops * (b - f)).clamp(0.0, f)).max(0.0)
        }
        // Qi et al. 2024 (ZB-H1): bubble (p − 1)(F + B_input − W), B = B_input + W.
        Schedule::ZbH1 => {
            let worst = slowest_stage(stages);
            let input_grad = worst.backward_s - worst.weight_grad_s;
            (p - 1) as f64
                * (worst.forward_s + worst.p2p_s + input_grad - worst.weight_grad_s).max(0.0)
        }
    };
    (steady + bubble, bubble)
}

/// The stage whose micro-batch takes longest: the one that paces the zero-bubble schedules.
fn slowest_stage(stages: &[StageTime]) -> StageTime {
    stages
        .iter()
        .copied()
        .max_by(|a, b| a.total_s().total_cmp(&b.total_s()))
        .unwrap_or_default()
}

/// Micro-batches whose activations stage `k` of `p` holds at its peak, in units of one
/// micro-batch's activations of the whole stage (all its chunks). `weight_input_share` is
/// the share of a micro-batch's activations a deferred weight pass keeps (ZB-H1).
pub fn inflight_microbatches(
    schedule: Schedule,
    k: u64,
    p: u64,
    m: u64,
    vp: u64,
    weight_input_share: f64,
) -> f64 {
    match schedule {
        Schedule::Gpipe => m as f64,
        Schedule::OneFOneB | Schedule::Scp => (p - k).min(m) as f64,
        // ZB-H1 holds p − k micro-batches until their input pass, like 1F1B, and rank k
        // delays its weight passes by k micro-batches, each keeping its GEMM inputs.
        Schedule::ZbH1 => {
            (p - k).min(m) as f64 + k.min(m.saturating_sub(p - k)) as f64 * weight_input_share
        }
        // ZB-V: every rank runs 2p − r − 1 chunk-0 and r + 1 chunk-1 forwards before its
        // first input pass frees one, 2p chunks of half a stage each: p micro-batches.
        // DualPipeV: 2(p − k − 1) + (k + 1) chunk-0 and k + 1 chunk-1 forwards before the
        // first backward, and each steady round's forward runs before the backward beside
        // it frees a chunk: 2p + 1 half-stage chunks (the README's "PP + 1" stages).
        Schedule::DualPipeV => p as f64 + 0.5,
        Schedule::ZbV => ((2 * p - k - 1).min(m) + (k + 1).min(m)) as f64 / 2.0,
        // The interleaved warm-up (Megatron-Core's and torch's, `generate::interleaved`):
        // 2(p − k − 1) + (v − 1)p chunk forwards, then one more before the first backward,
        // at most every forward; each chunk holds 1/v of the stage's activations.
        Schedule::Interleaved => {
            let chunks = (2 * (p - k - 1) + (vp - 1) * p + 1).min(m * vp);
            chunks as f64 / vp as f64
        }
    }
}

/// Chunk forwards rank `k` of `p` runs in the 1F1B steady state beside a backward of another
/// micro-batch or chunk, with which Megatron-Core's combined 1F1B overlaps its
/// communication (`overlap_moe_expert_parallel_comm`): after the warm-up
/// (`generate::one_f_one_b`, `generate::interleaved`), each forward is issued with the
/// oldest backward, unless that is its own (the last rank's last chunk); without a
/// warm-up, each backward with the next micro-batch's forward. `None` for the schedules
/// without that steady state (GPipe, the zero-bubble kinds, Merak's scp).
pub fn steady_state_forwards(schedule: Schedule, k: u64, p: u64, m: u64, vp: u64) -> Option<u64> {
    match schedule {
        Schedule::OneFOneB => {
            let warmup = crate::generate::one_f_one_b_warmup(k, p, m);
            Some(if warmup == 0 {
                m.saturating_sub(1)
            } else {
                m - warmup
            })
        }
        Schedule::Interleaved => {
            let total = m * vp;
            let warmup = crate::generate::interleaved_warmup(k, p, m, vp);
            if warmup == 0 {
                return Some(total.saturating_sub(1));
            }
            let step = |i, forward| crate::generate::interleaved_step(i, p, vp, forward);
            let differs = |i: &u64| step(i + warmup, true) != step(*i, false);
            // Whether the forward `warmup` steps ahead is another micro-batch's depends on
            // the step only through its place in a round of p · vp steps (the micro-batch
            // advances by p a round): count one round, then the rest, not every step.
            let (steps, round) = (total - warmup, (p * vp).max(1));
            let per_round = (0..round.min(steps)).filter(differs).count() as u64;
            let rest = (0..steps % round).filter(differs).count() as u64;
            Some((steps / round) * per_round + rest)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(p: usize) -> Vec<StageTime> {
        vec![
            StageTime {
                forward_s: 1.0,
                backward_s: 2.0,
                weight_grad_s: 1.0,
                p2p_s: 0.0
            };
            p
        ]
    }

    #[test]
    fn closed_forms_match_the_papers() {
        let (t, b) = pipeline_time(Schedule::OneFOneB, &uniform(4), 8, 1);
        assert_eq!((t, b), ((8.0 + 3.0) * 3.0, 9.0));
        let (t, _) = pipeline_time(Schedule::Gpipe, &uniform(4), 8, 1);
        assert_eq!(t, 33.0);
        let (t, b) = pipeline_time(Schedule::Interleaved, &uniform(4), 8, 2);
        assert_eq!((t, b), (24.0 + 4.5, 4.5));
        // F = Bi = W = 1: ZB-H1 bubble is (p − 1)(F + Bi − W) = a third of 1F1B's (p − 1)·3.
        let (_, b) = pipeline_time(Schedule::ZbH1, &uniform(4), 8, 1);
        assert_eq!(b, 3.0);
    }

    #[test]
    fn inflight_follows_the_schedule() {
        assert_eq!(
            inflight_microbatches(Schedule::OneFOneB, 0, 8, 64, 1, 0.4),
            8.0
        );
        assert_eq!(
            inflight_microbatches(Schedule::OneFOneB, 7, 8, 64, 1, 0.4),
            1.0
        );
        assert_eq!(
            inflight_microbatches(Schedule::OneFOneB, 0, 8, 4, 1, 0.4),
            4.0
        );
        assert_eq!(
            inflight_microbatches(Schedule::Gpipe, 3, 8, 64, 1, 0.4),
            64.0
        );
        // Stage 0 of interleaved holds p(1 + (p − 1)/(pv)) micro-batches (Korthikanti et al.).
        let got = inflight_microbatches(Schedule::Interleaved, 0, 8, 64, 2, 0.4);
        assert!((got - 8.0 * (1.0 + 7.0 / 16.0)).abs() < 1e-12, "{got}");
    }
}
