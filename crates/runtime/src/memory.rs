//! Whether a run fits this machine's memory, checked before anything is allocated.

use plait_spec::ModelSpec;

use crate::error::{DoesNotFit, RuntimeError};

type Result<T> = std::result::Result<T, RuntimeError>;

/// The share of the available memory (`MemAvailable`) a run may be estimated to need. A
/// safety margin, not a measurement: the estimates below leave out the allocator's slack
/// and fragmentation, transient tensors (gradients in flight, GEMM packing buffers),
/// thread stacks, and what the OS and other processes take while the run lasts.
pub(crate) const MEMORY_HEADROOM: f64 = 0.8;

/// Bytes per parameter: f32 weights, gradients and Adam's two moments (16), plus one more
/// copy for the checkpoint and the gathered full weights.
pub(crate) const BYTES_PER_PARAMETER: f64 = 20.0;

/// `seq × seq` f32 tensors per attention head that one block keeps for its backward
/// (`StageModel::block`): q·kᵀ, its scaled and masked versions, the scores shifted by
/// their row maximum, their exponentials and the probabilities. candle's graph holds every
/// operation's inputs until the backward has run.
pub(crate) const SCORE_TENSORS_PER_BLOCK: f64 = 6.0;

/// Attention activations of `blocks` blocks for one micro-batch of `mbs` sequences, all
/// heads (summed over the tensor-parallel group), in bytes:
/// `blocks · 6 · mbs · heads · seq² · 4`.
pub(crate) fn attention_bytes(m: &ModelSpec, seq: usize, mbs: u64, blocks: u64) -> f64 {
    let seq2 = (seq as f64).powi(2);
    blocks as f64 * SCORE_TENSORS_PER_BLOCK * mbs as f64 * m.heads as f64 * seq2 * 4.0
}

/// [`TrainConfig::activation_bytes`](crate::config::TrainConfig::activation_bytes) for the
/// smallest plan (one sequence per micro-batch, one block per
/// chunk): what any run of `m` at `seq` needs at least, before a plan is chosen.
pub fn min_activation_bytes(m: &ModelSpec, seq: usize) -> f64 {
    (seq as f64).powi(2) * 4.0 + attention_bytes(m, seq, 1, 1)
}

/// Refuses a run whose weights, gradients and Adam states (16 bytes per parameter in f32
/// for each of its `replicas` model copies, the data-parallel degree, plus one more copy
/// for the checkpoint and the gathered full weights) and attention
/// activations (`activation_bytes`, from
/// [`TrainConfig::activation_bytes`](crate::config::TrainConfig::activation_bytes) or
/// [`min_activation_bytes`])
/// would not fit in 80 % of this machine's available memory (`MEMORY_HEADROOM`: a safety
/// margin, not a measurement).
pub fn check_memory(m: &ModelSpec, seq: usize, activation_bytes: f64, replicas: u64) -> Result<()> {
    let Some(avail) = available_memory_bytes() else {
        return Ok(());
    };
    let budget = MEMORY_HEADROOM * avail;
    let state = BYTES_PER_PARAMETER - 4.0;
    let params = m.parameter_count() as f64
        * (state * replicas.max(1) as f64 + (BYTES_PER_PARAMETER - state));
    let fit = |e: DoesNotFit| Err(RuntimeError::DoesNotFit(e));
    if replicas > 1 && params > budget {
        return fit(DoesNotFit::Replicas {
            model: m.name.clone(),
            parameters: m.parameter_count(),
            replicas,
            need_bytes: params,
            available_bytes: avail,
            headroom: MEMORY_HEADROOM,
        });
    }
    if params > budget {
        return fit(DoesNotFit::Parameters {
            model: m.name.clone(),
            parameters: m.parameter_count(),
            need_bytes: params,
            available_bytes: avail,
        });
    }
    if params + activation_bytes > budget {
        return fit(DoesNotFit::Activations {
            model: m.name.clone(),
            seq,
            activation_bytes,
            need_bytes: params + activation_bytes,
            available_bytes: avail,
            headroom: MEMORY_HEADROOM,
        });
    }
    Ok(())
}

/// The fewest model copies any plan of `workers` workers keeps: the least dp =
/// workers / (tp·pp) over tp dividing the heads and pp up to the layers with tp·pp dividing
/// the workers (1 when no plan splits them: the planner then says why).
pub fn min_replicas(m: &ModelSpec, workers: usize) -> u64 {
    let w = workers.max(1) as u64;
    (1..=m.heads.max(1))
        .filter(|tp| m.heads.is_multiple_of(*tp) && w.is_multiple_of(*tp))
        .flat_map(|tp| {
            (1..=m.layers.max(1).min(w / tp))
                .filter(move |pp| w.is_multiple_of(tp * pp))
                .map(move |pp| w / (tp * pp))
        })
        .min()
        .unwrap_or(1)
}

/// `MemAvailable` of /proc/meminfo (Linux), in bytes.
pub fn available_memory_bytes() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}
