//! What a low-precision run's quantisation costs, by format and recipe: bytes moved and
//! kernels launched per quantised GEMM operand, the norms that run the cast, the scales kept
//! beside each copy, current scaling's amax all-reduces, and torchao's row-wise backward.
//! The one place in this crate that knows how each fp8 recipe (`plait_spec::Float8Recipe`)
//! and block format quantises; it knows nothing of which tensors a layer has.

use plait_spec::{Engine, Float8Recipe};

use super::Workload;
use crate::device::Generation;

/// Bytes per element of the amax pass of current scaling: the 16-bit tensor read once more
/// before its cast (TE d0067d0 `quantizer.cpp:1009-1011`, `nvte_compute_amax_with_config`).
const AMAX_READ_BYTES_PER_ELEMENT: f64 = 2.0;
/// Bytes per element of Transformer Engine's block-scaled fp8 scales: one fp32 per 1×128
/// tile of activations and gradients (`Float8BlockScaling`, TE d0067d0
/// `common/recipe/__init__.py`; weights' 128×128 blocks are negligible).
const BLOCKWISE_SCALE_BYTES_PER_ELEMENT: f64 = 4.0 / 128.0;

/// Bytes of one amax all-reduce of current scaling: one fp32 (TE d0067d0
/// `Float8CurrentScalingQuantizer`'s `amax` tensor).
pub(super) const AMAX_BYTES: f64 = 4.0;

/// Backward time per element of a float8 linear module's input, weight and output
/// gradient that torchao's row-wise recipe adds over the tensor-wise one: their second,
/// column-wise quantisation for the input- and weight-gradient GEMMs, with whatever of the
/// compiled backward comes with it. Measured on one H200 (torch 2.11, torchao 0.18;
/// `scripts/h200_kernels.py`, rows `"kind": "block"` of `tests/data/h200_kernels.jsonl`): a
/// compiled torchtitan Llama 3.1 8B block's backward took 13.209 ms longer row-wise than
/// tensor-wise at 2 × 8K tokens (tp 1) and 10.058 ms at tp 8's share of 4 × 8K tokens, over
/// 1.5603 G and 1.1849 G elements of its seven linear modules' inputs, weights and output
/// gradients (wq, wk, wv, wo, w1, w3, w2, each counting its own): 8.466 and 8.489 ps, so
/// 23.267 ms / 2.7452 G together. The two shapes differ 4× in GEMM work and 8× in weights,
/// and the one rate holds both within 0.2 %: the cost follows the quantised elements, not
/// the GEMMs. The kernels behind it are not identified: a column-wise cast into the
/// transposed layout timed alone moves 1.56 TB/s (1.9 ps per element of bf16 input). It is
/// what torchtitan's own analysis found (pytorch/torchtitan#1207, June 2025: row-wise float8
/// with plain tp no faster than bf16, because `wk` and `wv`, whose inputs are as large as
/// `wq`'s and whose GEMMs are small, ran about 40 % slower converted; its fix filters such
/// linears out, `filter_fqns = ["auto_filter_small_kn"]`, which plait does not model).
pub(super) const ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT: f64 = 23.267e-3 / 2.7452e9;
/// The same cost in an older stack, the band's optimistic end: torchao's own 8 × H100 rows
/// (torchao b8708a2 `docs/source/workflows/training.md`, torch 2.7.0a0, torchao 0.10:
/// Llama 3 8B, FSDP, one 8,192-token sequence per GPU, compiled, per-op recompute) ran
/// row-wise at 6,768 tokens/s per GPU and tensor-wise at 7,689.5, 0.1451 s a step longer
/// over 28.45 G quantised elements: at most 5.10 ps, since that tensor-wise run also
/// gathered its weights in fp8.
pub(super) const ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT_LOW: f64 = 0.14505 / 28.454e9;

impl Workload {
    /// Whether the block linears run in a low-precision format (fp8, mxfp8, nvfp4).
    pub fn low_precision(&self) -> bool {
        self.linear_format.low_precision_linears()
    }

    /// Whether the weight-gradient GEMMs of a low-precision run stay 16-bit (torchao's
    /// `rowwise_with_gw_hp`: `cast_config_input_for_grad_weight` and
    /// `cast_config_grad_output_for_grad_weight` disabled, torchao 36027d8
    /// `float8/config.py`).
    pub fn weight_grad_sixteen_bit(&self) -> bool {
        self.torchao_float8() == Some(Float8Recipe::RowwiseGwHp)
    }

    /// torchao's float8 recipe in force: none unless the engine quantises fp8 linears with
    /// torchao.
    pub fn torchao_float8(&self) -> Option<Float8Recipe> {
        self.fp8_recipe
            .filter(|_| self.engine.engine.runs_torchao_float8())
    }

    /// Transformer Engine's fp8 recipe in force: none unless the run is fp8 under an engine
    /// whose linears are TE's.
    fn te_float8(&self) -> Option<Float8Recipe> {
        self.fp8_recipe
            .filter(|_| !self.engine.engine.runs_torchao_float8())
    }

    /// Bytes per element read and written by the quantisation of one GEMM operand: the
    /// engine's per-tensor fp8 cast, or for the block-scaled formats the engine's reads of the
    /// 16-bit tensor (`EngineProfile::block_cast_reads`; each block's scale comes from the
    /// block itself) and a row-wise and a column-wise copy with their scales, both quantised
    /// from the 16-bit input (TE's `MXFP8BlockScaling` and `NVFP4BlockScaling`, one read;
    /// NVFP4's random Hadamard transform of the column-wise copy runs inside that cast).
    /// Transformer Engine's fp8 recipes (TE d0067d0 `pytorch/csrc/quantizer.cpp`): delayed
    /// scaling casts with a scale it already has (the profile's cast); current scaling
    /// (`Float8CurrentScalingQuantizer::quantize_impl`) first reads the tensor for its
    /// amax (2 bytes per element of the 16-bit tensor), then casts; block scaling
    /// (`Float8BlockQuantizer`) writes both copies with their 1×128 scales in one pass. On a
    /// GPU of `generation` whose fp8 GEMMs take every layout (Blackwell) TE's per-tensor
    /// quantisers write no transpose (`per_tensor_cast_bytes`).
    pub fn cast_bytes_per_element(&self, generation: Generation) -> f64 {
        match (self.linear_format, self.te_float8()) {
            (plait_spec::Dtype::Mxfp8 | plait_spec::Dtype::Nvfp4, _)
            | (_, Some(Float8Recipe::Blockwise)) => {
                2.0 * self.engine.block_cast_reads + 2.0 * self.quantised_copy_bytes()
            }
            (_, Some(Float8Recipe::Tensorwise)) => {
                self.per_tensor_cast_bytes(generation) + AMAX_READ_BYTES_PER_ELEMENT
            }
            _ => self.per_tensor_cast_bytes(generation),
        }
    }

    /// The engine's per-tensor fp8 cast (`EngineProfile::fp8_cast_bytes_per_element`), less
    /// the transposed copy where Transformer Engine writes none: its per-tensor quantisers
    /// create the column-wise (transposed) data only where fp8 GEMMs take the TN layout
    /// alone (TE d0067d0 `pytorch/csrc/quantizer.cpp:375, 689`, `with_transpose =
    /// columnwise_usage && !is_non_tn_fp8_gemm_supported`;
    /// [`Generation::fp8_gemms_take_every_layout`]), so on Blackwell the backward's GEMMs
    /// read the one fp8 copy in another layout.
    fn per_tensor_cast_bytes(&self, generation: Generation) -> f64 {
        let transpose = if self.te_float8().is_some() && generation.fp8_gemms_take_every_layout() {
            self.linear_format.gemm_element_bytes()
        } else {
            0.0
        };
        self.engine.fp8_cast_bytes_per_element - transpose
    }

    /// Bytes per element of the quantisation of a linear's input that a norm produces
    /// (qkv's and fc1's). Transformer Engine's `LayerNormLinear` fuses it into the norm
    /// (TE d0067d0 `pytorch/csrc/extensions/normalization.cpp`, `Impl`) fully under delayed
    /// scaling (the norm writes the fp8 copy: nothing more), half under current scaling
    /// (`FUSED_NORM_AMAX_FP8`: the norm writes its 16-bit output and amax, the cast reads
    /// it back without an amax pass) and not at all for the block-scaled quantisers
    /// (`UNFUSED`, MXFP8's cuDNN path aside). Other engines cast it as any other operand.
    pub fn norm_fed_cast_bytes_per_element(&self, generation: Generation) -> f64 {
        if !self.engine.fp8_cast_fused_into_norm {
            return self.cast_bytes_per_element(generation);
        }
        if self.norm_writes_the_cast() {
            return 0.0;
        }
        match (self.linear_format, self.te_float8()) {
            (plait_spec::Dtype::Fp8, Some(Float8Recipe::Tensorwise)) => {
                self.per_tensor_cast_bytes(generation)
            }
            _ => self.cast_bytes_per_element(generation),
        }
    }

    /// Kernels the quantisation of a block's `operands` GEMM operands launches in a pass:
    /// the casts (one in a forward whose norms run them in full, three otherwise) and
    /// [`Workload::extra_cast_kernels`] per operand.
    pub fn cast_kernels(&self, forward: bool, operands: f64) -> f64 {
        let casts = if forward && self.norm_writes_the_cast() {
            1.0
        } else {
            3.0
        };
        casts + self.extra_cast_kernels() * operands
    }

    /// Whether the norm before a linear writes its fp8 input itself: Transformer Engine's
    /// `LayerNormLinear` under delayed scaling (see
    /// [`Workload::norm_fed_cast_bytes_per_element`]).
    fn norm_writes_the_cast(&self) -> bool {
        self.engine.fp8_cast_fused_into_norm
            && self.linear_format == plait_spec::Dtype::Fp8
            && matches!(self.te_float8(), Some(Float8Recipe::Delayed) | None)
    }

    /// Quantisation kernels of one pass over an MoE block's `experts` local experts under
    /// Megatron-Core's Transformer Engine experts, beyond the one per linear
    /// [`Workload::cast_kernels`] counts: its `GroupedLinear` splits each expert linear's
    /// input by expert (`tex.split_quantize` → `multi_tensor_quantize_impl`, TE v2.6 to v2.14
    /// `pytorch/csrc/extensions/cast.cpp`) and quantises every split with kernels of its own,
    /// but for two fused cases: fp8 delayed scaling with column-wise copies
    /// (`nvte_multi_cast_transpose`, which needs a transpose for every output; on a GPU whose
    /// fp8 GEMMs take every layout the quantiser writes none, `per_tensor_cast_bytes`, so
    /// Blackwell casts split by split), and NVFP4 from TE v2.11 (`split_quantize_nvfp4_impl`:
    /// grouped amax and Hadamard-cast kernels for all splits at once). The forward quantises
    /// the fc1 and fc2 inputs, the backward their output gradients (`grouped_linear.py`,
    /// `split_quantize(grad_output_view, ctx.m_splits, …)`), each split with its cast and,
    /// under current scaling, its amax and scale kernels.
    pub fn expert_split_cast_kernels(&self, experts: f64, generation: Generation) -> f64 {
        if !self.low_precision() || experts <= 1.0 || self.engine.engine != Engine::Megatron {
            return 0.0;
        }
        let fused = match (self.linear_format, self.te_float8()) {
            (plait_spec::Dtype::Nvfp4, _) => true,
            (plait_spec::Dtype::Fp8, Some(Float8Recipe::Delayed) | None) => {
                !generation.fp8_gemms_take_every_layout()
            }
            _ => false,
        };
        if fused {
            return 0.0;
        }
        2.0 * (experts - 1.0) * (1.0 + self.extra_cast_kernels())
    }

    /// Kernels each fp8 quantisation adds over delayed scaling's one: current scaling's
    /// amax and scale kernels (`nvte_compute_amax_with_config`,
    /// `nvte_compute_scale_from_amax`, TE d0067d0 `quantizer.cpp:1009-1024`).
    pub fn extra_cast_kernels(&self) -> f64 {
        match self.te_float8() {
            Some(Float8Recipe::Tensorwise) => 2.0,
            _ => 0.0,
        }
    }

    /// Whether each sequence-parallel quantisation all-reduces its amax over the
    /// tensor-parallel group before it casts: current scaling's column-parallel inputs and
    /// row-parallel output gradients (TE d0067d0 `module/linear.py:351-355, 809-824`,
    /// `amax_reduction_group->allreduce(...)->wait()` in `quantizer.cpp:1015-1020`), so
    /// every rank casts its shard with the scale of the gathered tensor.
    pub fn reduces_amax_over_tp(&self) -> bool {
        self.sp && self.te_float8() == Some(Float8Recipe::Tensorwise)
    }

    /// Bytes per element of one quantised copy: the element and its share of block scales.
    pub fn quantised_copy_bytes(&self) -> f64 {
        match self.te_float8() {
            Some(Float8Recipe::Blockwise) if self.linear_format == plait_spec::Dtype::Fp8 => {
                1.0 + BLOCKWISE_SCALE_BYTES_PER_ELEMENT
            }
            _ => {
                self.linear_format.gemm_element_bytes()
                    + self.linear_format.scale_bytes_per_element()
            }
        }
    }
}
