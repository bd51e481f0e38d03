//! Context parallelism's side of a transformer block's attention: the merges of the
//! per-chunk partial outputs, the collectives that move the keys and values (ring, Ulysses'
//! all-to-all, all-gather) as each engine runs them, and the working memory they hold.
//!
//! Knows the attention core's kernel times, which the collectives may hide behind; knows
//! nothing else of the block.

use plait_spec::CpComm;

use super::{Kernels, Workload, FP32};
use crate::comm::Groups;
use crate::device::DeviceModel;

/// What context parallelism needs to know of one block's attention on this GPU.
pub(super) struct CpShape {
    /// Seconds of the attention core's kernels, forward and backward.
    pub core_forward_s: f64,
    pub core_backward_s: f64,
    /// Widths on this GPU (heads × head dim) of the queries, keys (or values) and output.
    pub q_local: f64,
    pub kv_local: f64,
    pub out_local: f64,
    /// Whether the engine repeats the key and value heads before the kernel.
    pub repeated_kv: bool,
}

/// Context parallelism's exposed communication and working memory for one block.
pub(super) struct CpCost {
    pub forward_comm_s: f64,
    pub backward_comm_s: f64,
    pub transient_bytes: f64,
}

/// Adds the merges to `fwd` and `bwd` (the compute stream) and returns the collectives
/// left exposed and the memory they hold, for a block whose attention runs over
/// `g.cp.size` > 1 ranks.
pub(super) fn attention_side(
    w: &Workload,
    g: &Groups,
    d: &DeviceModel,
    s: &CpShape,
    fwd: &mut Kernels,
    bwd: &mut Kernels,
) -> CpCost {
    let e = w.e;
    let cp = g.cp.size as f64;
    // The keys and values context parallelism moves: those the attention kernel reads,
    // after `repeat_kv` where the engine repeats them (PyTorch's context parallelism
    // shards the kernel's own inputs).
    let kv_moved = if s.repeated_kv { s.q_local } else { s.kv_local };
    let kv_bytes = 2.0 * w.mbs * w.seq_local * kv_moved * e;
    // The per-chunk merges of the ring and the all-gather (`EngineProfile::cp_merge`),
    // forward and backward; Ulysses attends over whole sequences and merges nothing.
    let merge = w.engine.cp_merge;
    let out_elements = w.mbs * w.seq_local * s.out_local;
    let steps = cp - 1.0;
    if w.cp_comm != CpComm::A2a {
        fwd.stream(
            d,
            out_elements * (merge.forward_fixed + steps * merge.forward_per_step),
        );
        bwd.stream(
            d,
            out_elements * (merge.backward_fixed + cp * merge.backward_per_step),
        );
    }
    let per_step_f = s.core_forward_s / cp;
    let per_step_b = s.core_backward_s / cp;
    // A collective beside `beside` seconds of attention: what shows, or all of it when the
    // engine waits on it where it is issued (`EngineProfile::cp_collectives_in_line`).
    let exposed = |comm_s: f64, beside: f64| {
        if w.engine.cp_collectives_in_line {
            comm_s
        } else {
            (comm_s - beside).max(0.0)
        }
    };
    // PyTorch's backward: cp exchanges of the fp32 dK and dV after each step's kernel, the
    // last one waited on after the loop (`EngineProfile::cp_grads_ring_fp32`).
    let fp32_grads = kv_bytes * FP32 / e;
    let with_fp32_grads = |kv_s: f64| {
        let dkv = g.cp.p2p_s(fp32_grads);
        kv_s + steps * exposed(dkv, per_step_b) + dkv
    };
    let (forward_comm_s, backward_comm_s, transient_bytes) = match w.cp_comm {
        CpComm::P2p if w.engine.cp_grads_ring_fp32 => {
            // PyTorch's all-to-all rotation: cp − 1 exchanges of the local K and V forward
            // and again backward, then the fp32 gradients' ring. Held: the chunk in use and
            // the one arriving; the fp32 accumulators, the one sent and the one received.
            let kv = |beside| steps * exposed(g.cp.p2p_s(kv_bytes), beside);
            (
                kv(per_step_f),
                with_fp32_grads(kv(per_step_b)),
                2.0 * kv_bytes + 3.0 * fp32_grads,
            )
        }
        // Ring attention: cp − 1 exchanges of the local K and V, overlapped with the
        // attention of the chunk already present; backward also returns dK, dV. Held: the
        // chunk in use and the one arriving, and in the backward their gradients travelling
        // the other way.
        CpComm::P2p => (
            steps * exposed(g.cp.p2p_s(kv_bytes), per_step_f),
            steps * exposed(g.cp.p2p_s(2.0 * kv_bytes), per_step_b),
            4.0 * kv_bytes,
        ),
        CpComm::A2a => {
            // Ulysses: q, k, v to head-split before the kernel and the output back after
            // it, in line on the compute stream (TE d0067d0 `AttnFuncWithCPAndQKVOA2A`:
            // each `flash_attn_a2a_communicate` waits for its all-to-all); the backward
            // runs the mirror image (dO in, dQ, dK, dV out). Held: the head-split copies of
            // q, k, v and the output.
            let q_bytes = w.mbs * w.seq_local * s.q_local * e;
            let out_bytes = w.mbs * w.seq_local * s.out_local * e;
            let qkv = g.cp.all_to_all_s(q_bytes + kv_bytes);
            let out = g.cp.all_to_all_s(out_bytes);
            (qkv + out, out + qkv, q_bytes + kv_bytes + out_bytes)
        }
        CpComm::Allgather => {
            // K and V gathered over cp before the kernel; only the attention of the rank's
            // own chunk runs beside them (TE d0067d0 `AttnFuncWithCPAndKVAllGather`, Llama
            // Team 2024 §3.3.2: "we all-gather the key and value tensors ... then compute
            // attention output for the local query tensor chunk").
            let gathered = cp * kv_bytes;
            let forward = exposed(g.cp.all_gather_s(gathered), per_step_f);
            if w.engine.cp_grads_ring_fp32 {
                // PyTorch gathers K and V again for the backward, then sends the fp32
                // gradients around the ring. Held: the gathered keys and values; the fp32
                // accumulators, the one sent and the one received.
                (
                    forward,
                    with_fp32_grads(exposed(g.cp.all_gather_s(gathered), per_step_b)),
                    gathered + 3.0 * fp32_grads,
                )
            } else {
                // dK and dV reduce-scattered after the kernel. Held: the gathered keys and
                // values, and in the backward their gradients over the whole sequence.
                (
                    forward,
                    exposed(g.cp.reduce_scatter_s(gathered), per_step_b),
                    2.0 * gathered,
                )
            }
        }
    };
    CpCost {
        forward_comm_s,
        backward_comm_s,
        transient_bytes,
    }
}
