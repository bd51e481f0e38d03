//! The pipeline terms the cost model adds to the schedule's closed forms (which live in
//! `plait_schedule::closed_form`): what a deferred weight pass keeps in memory.

pub use plait_schedule::closed_form::{pipeline_time, StageTime};

/// Share of a transformer block's saved activations that its weight-gradient GEMMs read
/// (their inputs): in Korthikanti et al.'s per-layer account of 34·sbh bytes, the inputs of
/// the QKV (2sbh), projection (2sbh), fc1 (2sbh) and fc2 (8sbh) GEMMs are 14·sbh. A split
/// backward (ZB-H1) keeps them from its input pass until its weight pass.
pub const WEIGHT_GRAD_INPUT_SHARE: f64 = 14.0 / 34.0;

/// Micro-batches whose activations stage `k` of `p` holds at its peak under `schedule`
/// (`plait_schedule::closed_form`, with this crate's weight-gradient input share).
pub fn inflight_microbatches(
    schedule: plait_spec::Schedule,
    k: u64,
    p: u64,
    m: u64,
    vp: u64,
) -> f64 {
    plait_schedule::closed_form::inflight_microbatches(
        schedule,
        k,
        p,
        m,
        vp,
        WEIGHT_GRAD_INPUT_SHARE,
    )
}

/// What Megatron-Core's combined 1F1B (`ParallelConfig::moe_a2a_overlap`) saves per micro-batch
/// on one stage: the expert all-to-all time hidden behind the other micro-batch's compute,
/// and the slowdown of that compute while the collective's channels share its SMs.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct A2aOverlap {
    pub hidden_s: f64,
    pub contention_s: f64,
}

/// The overlap of stage `k` of `p` whose chunks hold `layers` (cost, count): in the steady
/// state (`plait_schedule::closed_form::steady_state_forwards`, the share of the stage's
/// chunk forwards that run beside another micro-batch's backward) the forward's
/// all-to-alls run beside the backward's compute and the backward's beside the forward's,
/// each hidden up to that compute (Megatron-LM d98e8a6 `pipeline_parallel/combined_1f1b.py`:
/// the two micro-batches' layers interleaved, communication on its own stream);
/// `contention_per_s` is the compute slowdown per second of overlap
/// (`engine::contention_per_overlap_s`). Nothing for the schedules without that steady
/// state.
pub fn moe_a2a_overlap(
    schedule: plait_spec::Schedule,
    (k, p, m, vp): (u64, u64, u64, u64),
    layers: &[(crate::layer::LayerCost, f64)],
    contention_per_s: f64,
) -> A2aOverlap {
    let Some(steady) = plait_schedule::closed_form::steady_state_forwards(schedule, k, p, m, vp)
    else {
        return A2aOverlap::default();
    };
    let share = steady as f64 / (m * vp).max(1) as f64;
    let (mut comm_f, mut comm_b, mut compute_f, mut compute_b) = (0.0, 0.0, 0.0, 0.0);
    for (l, n) in layers {
        comm_f += n * l.forward.ep_comm_s;
        comm_b += n * (l.backward.ep_comm_s + l.recompute.ep_comm_s);
        compute_f += n * l.forward.compute_s;
        compute_b += n * (l.backward.compute_s + l.recompute.compute_s);
    }
    let hidden_s = share * (comm_f.min(compute_b) + comm_b.min(compute_f));
    A2aOverlap {
        hidden_s,
        contention_s: hidden_s * contention_per_s,
    }
}
