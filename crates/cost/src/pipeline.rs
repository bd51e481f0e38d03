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
