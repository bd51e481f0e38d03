//! How the block weights of a low-precision run are made ready for each step's GEMMs: the
//! format their data-parallel all-gather moves, and the memory traffic of the kernels that
//! turn the updated weights into the copies the GEMMs read. Knows formats, fp8 recipes, the
//! GPU generation and what each engine keeps as its weights; nothing of schedules or of
//! what a collective costs.

use plait_spec::{Dtype, Float8Recipe};

use super::WEIGHT_BYTES;
use crate::device::Generation;
use crate::layer::Workload;

/// Per element of a block weight on this rank, once per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct WeightPrep {
    /// Bytes the ZeRO parameter all-gather moves.
    pub gather_bytes: f64,
    /// HBM bytes read and written on the compute stream to ready the GEMMs' copies.
    pub step_bytes: f64,
}

/// The block weights' preparation in a run of `w` under ZeRO stage `zero` on a GPU of
/// `generation`.
///
/// An engine that keeps its block weights in the GEMMs' low-precision format
/// (`EngineProfile::fp8_param_gather`: Megatron-Core with Transformer Engine's quantised
/// parameters, as NeMo's and Megatron-Bridge's fp8 and MXFP8 recipes set it) does not cast
/// them each step under its distributed optimizer (ZeRO 1 and 2): the optimizer writes its
/// shard of each weight in that format, and what the gather leaves to do depends on it
/// (Megatron-LM d98e8a6 `core/distributed/param_and_grad_buffer.py` `_post_param_sync`,
/// TransformerEngine d0067d0 `pytorch/tensor/utils.py` `post_all_gather_processing`):
/// * per-tensor fp8 (delayed or current scaling) is gathered in fp8, and a GPU whose fp8
///   GEMMs take only the TN layout (before Blackwell; TE `is_non_tn_fp8_gemm_supported`:
///   compute capability 10.x, or 13 and later) writes the transpose the backward reads
///   (read 1, write 1);
/// * fp8 with 128 × 128 block scales is gathered in fp8 and writes its column-wise copy
///   from the row-wise one (`_create_columnwise`);
/// * MXFP8's tile scales do not fit the contiguous parameter buffer, so the gather moves the
///   16-bit weights through the gradient buffer (`reuse_grad_buf_for_mxfp8_param_ag`,
///   which Megatron-Core recommends for it, warning of the extra memory without it,
///   `optimizer/optimizer_config.py:416-424`, and Megatron-Bridge's `bf16_with_mxfp8_mixed` sets, v0.5.0
///   `training/mixed_precision.py:264-265`); each rank then casts every gathered weight into
///   its row- and column-wise MXFP8 copies inside the forward and zeroes the borrowed buffer
///   for the gradients (`copy_tensors_to_quantized_params`, `bucket.param_data.zero_()`):
///   read 2, write both copies, write 2.
///
/// Frozen weights kept in that format (LoRA's base) need nothing. Every other run gathers
/// the 16-bit weights, or under ZeRO-3 the engine's quantised ones, and casts each weight
/// once per step at its first micro-batch into the copies its GEMMs read (TE
/// `module/linear.py:479`, `is_first_microbatch`): read 2, write the row- and column-wise
/// copies.
pub(super) fn weight_prep(w: &Workload, zero: u8, generation: Generation) -> WeightPrep {
    if !w.low_precision() {
        return WeightPrep {
            gather_bytes: WEIGHT_BYTES,
            step_bytes: 0.0,
        };
    }
    let copy = w.quantised_copy_bytes();
    let quantised_gather =
        w.engine.fp8_param_gather && matches!(w.linear_format, Dtype::Fp8 | Dtype::Mxfp8);
    let cast_each_step = WeightPrep {
        gather_bytes: if quantised_gather && w.lora.is_none() {
            copy
        } else {
            WEIGHT_BYTES
        },
        step_bytes: WEIGHT_BYTES + 2.0 * copy,
    };
    // Transformer Engine's quantised parameters; torchao's float8 all-gather casts 16-bit
    // weights before each gather instead.
    let quantised_storage = quantised_gather && !w.engine.engine.runs_torchao_float8();
    if !quantised_storage || !(1..3).contains(&zero) {
        return cast_each_step;
    }
    if w.lora.is_some() {
        return WeightPrep {
            gather_bytes: WEIGHT_BYTES,
            step_bytes: 0.0,
        };
    }
    match (w.linear_format, w.fp8_recipe) {
        (Dtype::Mxfp8, _) => WeightPrep {
            gather_bytes: WEIGHT_BYTES,
            step_bytes: WEIGHT_BYTES + 2.0 * copy + WEIGHT_BYTES,
        },
        (_, Some(Float8Recipe::Blockwise)) => WeightPrep {
            gather_bytes: copy,
            step_bytes: 2.0 * copy,
        },
        _ => WeightPrep {
            gather_bytes: copy,
            step_bytes: if generation.fp8_gemms_take_every_layout() {
                0.0
            } else {
                2.0 * copy
            },
        },
    }
}
