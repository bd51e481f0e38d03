//! The attention core of a transformer block (scores, softmax, their product with the
//! values) on one GPU: the fused flash kernel at the engine's rate, or the unfused
//! matmul–softmax chain of older Megatron-LM, and the bytes it saves beyond its inputs.
//!
//! Knows the core's kernels; the projections around it are the block's (`transformer`).

use plait_spec::{AttentionImpl, CpComm, ModelSpec};

use super::{Kernels, Workload, FP32};
use crate::device::DeviceModel;

/// Attention core on one GPU: forward/backward kernels and the bytes it saves beyond its
/// inputs (which selective recomputation drops).
pub(super) struct AttentionCore {
    pub(super) forward: Kernels,
    pub(super) backward: Kernels,
    /// Saved inside the core (softmax output, dropout mask and output; flash: the
    /// log-sum-exp).
    pub(super) internal_bytes: f64,
}

pub(super) fn attention_core(m: &ModelSpec, d: &DeviceModel, w: &Workload) -> AttentionCore {
    let (heads, _kv, dim) = m.attention_shape(w.tp);
    let (heads, dim) = (heads as f64, dim as f64);
    // Score elements per GPU: local queries × the keys they attend over — the context (the
    // sequence, the packed sample, or the block's attention chunk: a chunk is attended like
    // a packed sample of its length) or the block's sliding window where it is shorter.
    let context = w
        .seq
        .min(w.attention_span)
        .min(m.attention_chunk.map_or(f64::INFINITY, |c| c as f64));
    let keys = m
        .attention_window
        .map_or(context, |win| context.min(win as f64));
    // The queries one kernel sees: the local chunk of the sequence, or under Ulysses
    // (`cp_comm = a2a`) the whole sequence for heads / cp of the heads.
    let (queries, heads) = if w.cp_comm == CpComm::A2a {
        (w.seq, heads / w.cp as f64)
    } else {
        (w.seq_local, heads)
    };
    let scores = w.mbs * heads * queries * keys;
    // Causal: a query sees on average keys · (1 − keys / 2·context) of them (half the
    // context without a window; nearly the whole window when it is much shorter).
    let causal_share = if m.causal {
        1.0 - keys / (2.0 * context)
    } else {
        1.0
    };
    let mut forward = Kernels::default();
    let mut backward = Kernels::default();
    let internal_bytes = match w.attention {
        AttentionImpl::Flash => {
            let flops = 4.0 * scores * dim * causal_share;
            let (f_s, b_s) = d.attention_s(
                w.engine.attention,
                flops,
                queries.min(keys),
                dim,
                m.causal,
                w.mbs * heads,
                w.level,
            );
            forward.fixed(f_s, 1.0);
            backward.fixed(b_s, 2.0);
            w.mbs * heads * queries * FP32
        }
        AttentionImpl::Unfused => {
            let batch = w.mbs * heads;
            let (sq, sk) = (w.seq_local, keys);
            // Q·Kᵀ, fused scale-mask-softmax, dropout, P·V (Megatron-LM before flash attention).
            forward.gemm_shape(d, sq, sk, dim, batch);
            forward.stream(d, scores * 2.0 * w.e);
            if w.dropout {
                forward.stream(d, scores * (2.0 * w.e + 1.0));
            }
            forward.gemm_shape(d, sq, dim, sk, batch);
            // Backward: dP = dO·Vᵀ, dV = Pᵀ·dO, softmax and dropout backward, dQ = dS·K, dK = dSᵀ·Q.
            backward.gemm_shape(d, sq, sk, dim, batch);
            backward.gemm_shape(d, sk, dim, sq, batch);
            if w.dropout {
                backward.stream(d, scores * (2.0 * w.e + 1.0));
            }
            backward.stream(d, scores * 3.0 * w.e);
            backward.gemm_shape(d, sq, dim, sk, batch);
            backward.gemm_shape(d, sk, dim, sq, batch);
            // Softmax output; with dropout also its mask and output.
            scores
                * if w.dropout {
                    2.0 * w.e + 1.0 + w.e
                } else {
                    w.e
                }
        }
    };
    AttentionCore {
        forward,
        backward,
        internal_bytes,
    }
}
