//! `DeviceModel`: how long one GPU takes for a GEMM, a memory-bound kernel and an
//! attention kernel — from the GPU's published peaks and a few measured constants, corrected
//! by a calibration profile where one is given.
//!
//! Knows kernels only; it does not know what a transformer layer is.

use plait_spec::{Dtype, GpuSpec};

use crate::profile::{LayerSample, Profile};

/// cuBLAS/CUTLASS large-tile shape for 16-bit GEMMs on sm80/sm90 (128×256 output tile);
/// used to count waves of tiles over the SMs (wave quantisation).
const TILE_M: f64 = 128.0;
const TILE_N: f64 = 256.0;

/// Per-tile fixed work (prologue, pipeline fill, epilogue) in units of the k loop: a GEMM
/// costs as if k were `k + GEMM_TILE_OVERHEAD_K`. Fitted to the 25 H200 GEMMs of
/// shared/data/h200_pytorch_calibration.jsonl together with the wave model and the MAMF
/// rate (max error 22 % over shapes from 1024×1536×512 to 16384×36864×12288; without it,
/// thin-k GEMMs such as k = 512 are predicted 2× too fast).
const GEMM_TILE_OVERHEAD_K: f64 = 500.0;
/// Shortest k loop a split-K GEMM gives one split, chosen on OpenXLA's measured H100 bf16
/// GEMMs (tensorflow 372d578b, `xla/service/gpu/model/matmul_interpolator_data.h`,
/// "sm_90"; shapes 256–4096 in m, n, k, batch 1–4; the 41 of them in
/// `tests/data/xla_h100_bf16_gemms.csv`): of {128, 256, 512, 1024} the least biased
/// (mean log error −0.165; mean |error| 19.9 %, against 18.7 % at 128, 19.8 % at 512,
/// 23.0 % at 1024, and 34.7 % with a worst of 77 % without split-K, where few output
/// tiles leave SMs idle).
const SPLIT_K_MIN_K: f64 = 256.0;
/// Bytes per element of an fp32 accumulator that a GEMM epilogue reads and writes back.
const FP32_ACCUMULATOR_BYTES: f64 = 8.0;

/// CPU-side cost of issuing one kernel from eager PyTorch (dispatch + launch) on an x86 host,
/// fitted as the fixed term of the same H200 GEMM sample (12 µs). A stream of kernels cannot
/// run faster than the host issues them; layers with small kernels hit this floor.
pub const KERNEL_DISPATCH_S: f64 = 12e-6;

/// The same cost on a Grace host: [`KERNEL_DISPATCH_S`] times the ratio of the host time of
/// one `torch.nn.Linear` forward (one GEMM launch, bf16, 8,192 × 2,048) measured by the same
/// script on a GB200 (Grace) and on a DGX H100 (Xeon Platinum 8480C): 37.08 µs against
/// 13.48 µs (NVIDIA/TransformerEngine#2053, August 2025; a GH200 took 33.17 µs). The PyTorch
/// dispatcher, the Python interpreter and the CUDA launch path run 2.75× slower per call
/// there, so eager layers on GB200 and GB300 racks hit the host floor sooner.
pub const GRACE_KERNEL_DISPATCH_S: f64 = KERNEL_DISPATCH_S * 37.08 / 13.48;

/// The host time to issue one eager kernel from a process on `host`.
pub fn kernel_issue_s(host: plait_spec::HostCpu) -> f64 {
    match host {
        plait_spec::HostCpu::X86 => KERNEL_DISPATCH_S,
        plait_spec::HostCpu::Grace => GRACE_KERNEL_DISPATCH_S,
    }
}

/// Fraction of the peak HBM bandwidth that streaming kernels reach: the H200 device copy
/// measured 4.24 TB/s (read+write) of 4.8 TB/s peak = 88.3 %
/// (shared/data/h200_pytorch_calibration.jsonl). Assumed to hold for other HBM GPUs.
const HBM_EFFICIENCY: f64 = 4.2377 / 4.8;

/// GPU generation, for the kernels whose published rates are per generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    Volta,
    Ampere,
    Hopper,
    Blackwell,
}

impl Generation {
    /// Whether fp8 GEMMs take every operand layout, so that a per-tensor fp8 tensor needs no
    /// transposed copy for the backward (Transformer Engine d0067d0 `pytorch/utils.py:658-663`,
    /// `is_non_tn_fp8_gemm_supported`: compute capability 10.x, or 13 and later; Hopper's
    /// take only TN).
    pub fn fp8_gemms_take_every_layout(self) -> bool {
        self == Generation::Blackwell
    }

    /// From the GPU's name; unknown names (custom TOML GPUs) count as Hopper, the
    /// generation of the TOML defaults.
    pub fn of(gpu: &GpuSpec) -> Generation {
        let name = gpu.name.to_ascii_uppercase();
        if name.contains("V100") {
            Generation::Volta
        } else if name.contains("A100") || name.contains("A10") || name.contains("A40") {
            Generation::Ampere
        } else if name.contains("B200") || name.contains("B300") {
            Generation::Blackwell
        } else {
            Generation::Hopper
        }
    }
}

/// The fused attention kernel an engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// FlashAttention-2 (flash-attn package, or PyTorch SDPA's flash backend).
    Flash2,
    /// cuDNN fused attention, which Transformer Engine prefers on Hopper and later
    /// (TransformerEngine d0067d0, `attention/dot_product_attention/utils.py`:
    /// "Disabling FlashAttention to give FusedAttention preference on Hopper+"); on Ampere
    /// TE runs FlashAttention-2.
    CudnnFused,
    /// The Triton flash-attention kernel of llm-foundry (`attn_impl: triton`, the default
    /// of its benchmark script in January 2024, llm-foundry 5e85bd6).
    Triton,
    /// PyTorch SDPA's cuDNN backend (`Sdpa::Cudnn`), as PyTorch 2.10+ runs it on Hopper
    /// and Blackwell: [`CUDNN_SDPA_OVER_FA2`] times FlashAttention-2's rate there; on
    /// older GPUs SDPA keeps flash first, so FlashAttention-2's rate.
    CudnnSdpa,
}

/// FlashAttention-2 forward+backward throughput on the A100 80GB in TFLOP/s at sequence
/// lengths 512, 1k, 2k, 4k, 8k, 16k (Dao 2023, "FlashAttention-2", Figure 4; FLOPs counted as
/// 3.5 × the forward, halved when causal). Rows: head dim 64, 128, 64 causal, 128 causal.
const FA2_A100_TFLOPS: [[f64; 6]; 4] = [
    [132.0, 162.0, 171.0, 175.0, 176.0, 176.0],
    [131.0, 181.0, 196.0, 201.0, 203.0, 203.0],
    [88.0, 119.0, 140.0, 158.0, 165.0, 171.0],
    [99.0, 131.0, 155.0, 182.0, 189.0, 189.0],
];
/// Peak the A100 figure was measured against (dense 16-bit).
const FA2_A100_PEAK_TFLOPS: f64 = 312.0;
/// Backward over forward throughput of FlashAttention-2 on the A100 (Dao 2023, Figures 5–6,
/// head dim 128 at 16k: 196 / 225 TFLOP/s), used to split the A100 forward+backward rate.
const FA2_BACKWARD_OVER_FORWARD: f64 = 196.0 / 225.0;

/// FlashAttention-2 on Hopper, forward and backward TFLOP/s at sequence lengths 512, 1k, 2k,
/// 4k, 8k, 16k, 32k, 64k and 128k (FLOPs 4·s²·d per head forward, halved when causal; the
/// backward does 2.5×), measured on one H200 (PyTorch 2.11 SDPA's flash backend, bf16,
/// `scripts/h200_kernels.py`, rows `"kind": "attention", "backend": "flash"` of
/// `crates/cost/tests/data/h200_kernels.jsonl` with batch × heads of at least
/// [`FA2_HOPPER_HEADS`]). Rows: head dim 64, 128, 256, then the same causal. The kernels ran
/// back to back for a minute, as in a training step, and no sustained-clock factor is
/// applied to them: that factor is the power cap's, which GEMMs near the tensor peak run
/// into and kernels at a third of it are taken not to. Two sets of training runs bear this
/// out: NeMo's long-context runs give Transformer Engine's attention 1.03× this rate
/// (`TE_FUSED_OVER_FA2`), and llm-foundry's H100 runs at 16K–64K tokens (flash-attn,
/// attention most of the step) are predicted −4 … +2 % with it, against +7 … +13 % with the
/// factor. Against Dao 2023's H100 figure (Figure 7) these rates are 1–19 % slower, 1–5 % at
/// 4k–16k without a causal mask. The H200's tensor cores are the H100's (same 132 SMs and
/// clocks); its faster HBM does not bound these kernels. A kernel over fewer sequences and
/// heads runs slower at long sequences: [`FA2_HOPPER_FEW_HEADS`].
#[rustfmt::skip]
const FA2_HOPPER_FWD_TFLOPS: [[f64; 9]; 6] = [
    [272.1, 289.2, 304.7, 308.5, 307.2, 304.2, 309.9, 314.0, 310.5],
    [299.1, 326.6, 336.5, 341.8, 348.7, 346.1, 351.7, 343.4, 348.1],
    [288.9, 305.4, 312.3, 320.2, 307.6, 320.9, 310.8, 320.6, 303.7],
    [162.1, 231.4, 276.6, 293.9, 299.3, 293.0, 305.1, 314.7, 310.8],
    [200.2, 265.9, 305.8, 321.0, 323.9, 317.0, 339.0, 342.3, 324.1],
    [222.8, 268.5, 292.7, 292.2, 297.1, 307.0, 305.8, 282.3, 263.0],
];
#[rustfmt::skip]
const FA2_HOPPER_BWD_TFLOPS: [[f64; 9]; 6] = [
    [176.3, 221.3, 253.5, 273.7, 283.5, 287.6, 291.9, 297.1, 298.1],
    [189.8, 239.2, 274.7, 294.4, 303.9, 303.2, 310.0, 318.5, 323.0],
    [169.5, 207.7, 234.0, 248.8, 255.4, 259.7, 266.1, 270.6, 268.5],
    [110.8, 159.1, 202.2, 234.4, 251.6, 265.0, 276.7, 282.2, 286.1],
    [124.4, 178.6, 227.0, 264.3, 286.1, 303.1, 313.0, 319.2, 324.7],
    [115.4, 160.3, 198.1, 224.2, 236.6, 251.3, 254.5, 259.3, 264.6],
];
/// Batch × heads of one kernel call at and above which the Hopper tables hold: 32, a
/// Llama 3 8B layer's heads at one sequence per micro-batch (the table's rows at 8K tokens
/// and shorter ran more).
const FA2_HOPPER_HEADS: f64 = 32.0;
/// The same kernels at 16k, 32k, 64k and 128k tokens with fewer sequences × heads per call
/// (the first run of the script's attention section, the rows of `h200_kernels.jsonl` whose
/// batch × heads is below 32): these counts per head dim (64, 128, 256), and the forward and
/// backward TFLOP/s they reached, rows as in [`FA2_HOPPER_FWD_TFLOPS`]. A causal forward
/// loses most (7 heads at 32k: 293 against 339 TFLOP/s; 2 at 64k: 272 against 342): its
/// thread blocks do unequal work, and with few of them the last wave leaves SMs idle. A
/// kernel's rate is interpolated in log(batch × heads) between these and the main table,
/// clamped at both ends.
const FA2_HOPPER_FEW_HEADS: [[f64; 4]; 3] = [
    [48.0, 15.0, 4.0, 1.0],
    [16.0, 7.0, 2.0, 1.0],
    [15.0, 4.0, 1.0, 1.0],
];
#[rustfmt::skip]
const FA2_HOPPER_FEW_FWD_TFLOPS: [[f64; 4]; 6] = [
    [304.8, 303.8, 303.7, 303.8],
    [325.8, 339.3, 343.3, 350.4],
    [316.9, 322.1, 321.5, 321.2],
    [294.2, 289.8, 283.4, 271.3],
    [285.6, 293.4, 272.1, 308.3],
    [269.1, 271.4, 271.5, 271.2],
];
#[rustfmt::skip]
const FA2_HOPPER_FEW_BWD_TFLOPS: [[f64; 4]; 6] = [
    [287.8, 284.7, 287.7, 289.5],
    [301.3, 303.3, 306.4, 308.8],
    [255.4, 257.8, 259.6, 261.2],
    [266.9, 273.0, 277.8, 278.4],
    [296.9, 309.9, 313.6, 319.8],
    [248.1, 253.0, 255.6, 253.4],
];

/// Row `row` of a Hopper table at `parallel_heads` (batch × heads of one call): the main
/// table's rates, lowered at 16k–128k tokens toward the few-heads run's where the call has
/// fewer than [`FA2_HOPPER_HEADS`].
fn hopper_row(
    table: &[[f64; 9]; 6],
    few: &[[f64; 4]; 6],
    row: usize,
    parallel_heads: f64,
) -> [f64; 9] {
    // Rows run head dim 64, 128, 256 without a mask, then the same causal; columns 5–8 are
    // 16k–128k tokens, the few-heads run's four.
    const FIRST_LONG: usize = 5;
    let mut out = table[row];
    let head_dim = row % 3;
    for (col, rate) in out.iter_mut().enumerate().skip(FIRST_LONG) {
        let few_heads = FA2_HOPPER_FEW_HEADS[head_dim][col - FIRST_LONG];
        if few_heads >= FA2_HOPPER_HEADS {
            continue;
        }
        let t = ((parallel_heads.max(1.0).ln() - few_heads.ln())
            / (FA2_HOPPER_HEADS.ln() - few_heads.ln()))
        .clamp(0.0, 1.0);
        let slow = few[row][col - FIRST_LONG];
        *rate = slow + (*rate - slow) * t;
    }
    out
}

/// Dense 16-bit peak of the GPU the Hopper table was measured on (H200 = H100 datasheet).
const FA2_HOPPER_PEAK_TFLOPS: f64 = 989.4;
/// Transformer Engine's cuDNN fused attention in training on Hopper and later, over the
/// measured FlashAttention-2 rate above (pessimistic, central, optimistic).
/// * Central: the rate NVIDIA's own training run measured. In NeMo's
///   long-context table (NeMo 8cfedd7 `docs/source/performance/performance_long_sequence.md`,
///   NeMo 24.03 on DGX-H100), Llama 2 7B at 1,024K tokens (tp 8, cp 32, 4 sequences on
///   1,024 GPUs) reaches 536 TFLOP/s per GPU by the launcher's formula
///   (NeMo-Framework-Launcher `auto_configurator/autoconfig/scripts/compare_throughput.py`
///   `calculate_tflops`, full rather than causal attention): a 12.905 s step, 97.7 % of
///   whose FLOPs are attention. At the FA2 rate above (4 heads per call at 32K local tokens:
///   the few-heads rates, `FA2_HOPPER_FEW_HEADS`) this model gives that step's attention
///   12.922 s and the rest 0.329 s, so the attention ran at 12.922 / (12.905 − 0.329) =
///   1.03× FA2.
/// * Pessimistic: FA2's rate itself; TE users measure its cuDNN backend at parity with
///   FlashAttention-2 (NVIDIA/TransformerEngine#1113).
/// * Optimistic: the isolated kernel of a current cuDNN. On the same H200, PyTorch 2.11's
///   cuDNN backend (cuDNN 9.19) ran forward+backward 1.65–1.79× faster than its flash
///   backend at head dim 128 and at least 32 sequences × heads (median 1.77×;
///   `h200_kernels.jsonl`, `"backend": "cudnn"`). Training runs have not shown it.
pub const TE_FUSED_OVER_FA2: [f64; 3] = [1.0, 12.922 / (12.905 - 0.329), 1.77];
/// PyTorch SDPA's cuDNN backend over its flash backend, forward and backward together
/// (pessimistic, central, optimistic): PyTorch 2.11 with cuDNN 9.19 on one H200 at head dim
/// 128 and at least 32 sequences × heads per call, 512–128K tokens, causal or not: 1.65–1.79×,
/// median 1.77× (`h200_kernels.jsonl`, the third run's `"backend": "cudnn"` rows against its
/// flash rows). Inside a compiled torchtitan block at tp 8's share (4 × 8K tokens, 4 heads)
/// PyTorch's default picked it and it ran 1.73× the flash model's time (1.88 ms per step,
/// the profiler's cuDNN kernels; `"run": "kernels"`).
pub const CUDNN_SDPA_OVER_FA2: [f64; 3] = [1.65, 1.77, 1.79];
/// Blackwell Ultra's (B300's) attention over Blackwell's at the same 16-bit peak (both
/// GB300 and GB200 2.5 PFLOP/s dense): NVIDIA's cuDNN 9.22 SDPA training benchmark on one
/// GB300 against one GB200 (cudnn-frontend 3929da2
/// `benchmark/sdpa_benchmark_training/results/llama3.1/{gb300,gb200}/*.csv`: bf16, 64 query
/// and 8 key-value heads of dim 128, 2K–32K tokens, causal and not), forward 1.121–1.260×
/// (mean 1.186), backward 1.059–1.215× (mean 1.108) over the ten shapes: (optimistic,
/// central, pessimistic) = (highest, mean, lowest).
const BLACKWELL_ULTRA_ATTENTION: [(f64, f64); 3] = [(1.260, 1.215), (1.186, 1.108), (1.121, 1.059)];

/// "FlashAttention-2 is around 1.3-1.5x faster than FlashAttention in Triton in the forward
/// pass and around 2x faster in the backward pass" (Dao 2023, §4.1): forward (optimistic,
/// central, pessimistic) over the stated range, backward "around 2×" read as ±10 %.
pub const FA2_OVER_TRITON_FORWARD: [f64; 3] = [1.3, 1.4, 1.5];
pub const FA2_OVER_TRITON_BACKWARD: [f64; 3] = [1.8, 2.0, 2.2];
/// V100 has no FlashAttention-2 kernel; memory-efficient attention at ~30 % of the fp16
/// peak forward and 25 % backward is assumed (no public measurement found).
const VOLTA_ATTENTION_FRACTION: (f64, f64) = (0.30, 0.25);

/// Whether `gen`'s attention rates were measured back to back, at the clock a training
/// step holds (the Hopper table, `FA2_HOPPER_FWD_TFLOPS`), rather than as burst rates that
/// take the sustained clock as GEMMs do (the A100 figure, Volta's assumption).
fn attention_rates_sustained(gen: Generation) -> bool {
    matches!(gen, Generation::Hopper | Generation::Blackwell)
}

/// Log-linear interpolation in a row of rates at sequence lengths 512 · 2^i, clamped at
/// both ends.
fn by_seq<const N: usize>(row: &[f64; N], seq: f64) -> f64 {
    let x = (seq.max(1.0).log2() - 9.0).clamp(0.0, (N - 1) as f64);
    let i = (x.floor() as usize).min(N - 2);
    let t = x - i as f64;
    row[i] + (row[i + 1] - row[i]) * t
}

/// Fraction of the 16-bit peak (forward, backward) that `kernel` reaches at sequence length
/// `seq` and head dimension `head_dim` on `gen`, by log-linear interpolation in the
/// FlashAttention-2 tables (clamped outside their sequence lengths and head dims), for a
/// call over `parallel_heads` sequences × heads (Hopper and later; the A100 figure has no
/// such axis). `level` picks the optimistic, central or pessimistic end (0, 1, 2) of the
/// kernel's range against FlashAttention-2.
pub fn attention_fraction(
    gen: Generation,
    kernel: AttentionKernel,
    seq: f64,
    head_dim: f64,
    causal: bool,
    parallel_heads: f64,
    level: usize,
) -> (f64, f64) {
    let (fwd, bwd) = match gen {
        Generation::Volta => return VOLTA_ATTENTION_FRACTION,
        Generation::Ampere => {
            let base = if causal { 2 } else { 0 };
            let hd = (head_dim.max(1.0).log2() - 6.0).clamp(0.0, 1.0);
            let t = &FA2_A100_TFLOPS;
            let combined = (by_seq(&t[base], seq) * (1.0 - hd) + by_seq(&t[base + 1], seq) * hd)
                / FA2_A100_PEAK_TFLOPS;
            // FlashAttention-2: 3.5 / combined = 1 / fwd + 2.5 / bwd with bwd = r·fwd.
            let r = FA2_BACKWARD_OVER_FORWARD;
            let fwd = combined * (1.0 + 2.5 / r) / 3.5;
            (fwd, fwd * r)
        }
        Generation::Hopper | Generation::Blackwell => {
            let base = if causal { 3 } else { 0 };
            let x = (head_dim.max(1.0).log2() - 6.0).clamp(0.0, 2.0);
            let (i, t) = ((x.floor() as usize).min(1), x - (x.floor()).min(1.0));
            let at = |table: &[[f64; 9]; 6], few: &[[f64; 4]; 6]| {
                let lo = by_seq(&hopper_row(table, few, base + i, parallel_heads), seq);
                let hi = by_seq(&hopper_row(table, few, base + i + 1, parallel_heads), seq);
                (lo + (hi - lo) * t) / FA2_HOPPER_PEAK_TFLOPS
            };
            (
                at(&FA2_HOPPER_FWD_TFLOPS, &FA2_HOPPER_FEW_FWD_TFLOPS),
                at(&FA2_HOPPER_BWD_TFLOPS, &FA2_HOPPER_FEW_BWD_TFLOPS),
            )
        }
    };
    let level = level.min(2);
    match (kernel, gen) {
        (
            AttentionKernel::CudnnFused | AttentionKernel::CudnnSdpa,
            Generation::Hopper | Generation::Blackwell,
        ) => {
            let over_fa2 = if kernel == AttentionKernel::CudnnFused {
                TE_FUSED_OVER_FA2
            } else {
                CUDNN_SDPA_OVER_FA2
            };
            let s = over_fa2[2 - level];
            (fwd * s, bwd * s)
        }
        (AttentionKernel::Triton, _) => (
            fwd / FA2_OVER_TRITON_FORWARD[level],
            bwd / FA2_OVER_TRITON_BACKWARD[level],
        ),
        _ => (fwd, bwd),
    }
}

/// Mean |error| of the analytic GEMM model (no profile) on the 8 H200 GEMMs of
/// shared/data/h200_pytorch_calibration.jsonl that run ≥ 1 ms: 6.3 % (7.9 % over all 25).
/// The kernel-efficiency part of every estimate's band.
pub const GEMM_MODEL_MEAN_ERROR: f64 = 0.063;

/// Timing model of one GPU for one numeric format.
#[derive(Debug, Clone)]
pub struct DeviceModel {
    /// Attention-kernel rate over its generation's model at the same 16-bit peak, forward
    /// and backward (optimistic, central, pessimistic): [`BLACKWELL_ULTRA_ATTENTION`] on
    /// B300, 1 elsewhere.
    attention_speedup: [(f64, f64); 3],
    /// Dense tensor-core peak for the dtype.
    pub peak_flops_per_s: f64,
    /// Rate of a large, well-shaped GEMM in a short benchmark (peak × MAMF fraction).
    gemm_flops_per_s: f64,
    /// Sustained over burst tensor throughput (power-capped clock): applies to the GEMMs
    /// and attention kernels of a training step, not to isolated benchmarks.
    sustained: f64,
    sms: f64,
    /// Achieved read+write bandwidth of streaming kernels.
    pub memory_bytes_per_s: f64,
    /// Dense 16-bit tensor peak (attention and 16-bit GEMMs in fp8 runs).
    pub sixteen_bit_peak_flops_per_s: f64,
    /// GEMM rate in 16-bit (equal to `gemm_flops_per_s` unless the dtype is fp8).
    gemm16_flops_per_s: f64,
    pub generation: Generation,
    /// log2(m), log2(n), log2(k) and ln(measured / modelled) of each profile GEMM.
    gemm_corrections: Vec<([f64; 3], f64)>,
    /// Whole-layer measurements of the profile (empty without one).
    pub layer_samples: Vec<LayerSample>,
    pub element_bytes: f64,
    /// Host time to issue one eager kernel to this GPU ([`kernel_issue_s`] of the node's
    /// host CPU; [`KERNEL_DISPATCH_S`] for a GPU alone).
    pub kernel_issue_s: f64,
}

impl DeviceModel {
    /// The model of `gpu` running `dtype`, from published numbers only.
    /// `None` if the GPU has no tensor cores for `dtype` (fp8 before Hopper).
    pub fn new(gpu: &GpuSpec, dtype: Dtype) -> Option<DeviceModel> {
        let peak = gpu.peak_flops_per_s(dtype)?;
        let sixteen_bit = gpu.peak_bf16_flops_per_s;
        Some(DeviceModel {
            peak_flops_per_s: peak,
            gemm_flops_per_s: peak * gpu.matmul_efficiency_for(dtype),
            sustained: gpu.sustained_clock_ratio,
            attention_speedup: if gpu.name.contains("B300") {
                BLACKWELL_ULTRA_ATTENTION
            } else {
                [(1.0, 1.0); 3]
            },
            sms: gpu.sms as f64,
            memory_bytes_per_s: gpu.memory_bandwidth_bytes_per_s * HBM_EFFICIENCY,
            sixteen_bit_peak_flops_per_s: sixteen_bit,
            gemm16_flops_per_s: sixteen_bit * gpu.matmul_efficiency,
            generation: Generation::of(gpu),
            gemm_corrections: vec![],
            layer_samples: vec![],
            element_bytes: dtype.gemm_element_bytes() + dtype.scale_bytes_per_element(),
            kernel_issue_s: KERNEL_DISPATCH_S,
        })
    }

    /// The same GPU driven by processes on `host` (the kernel issue cost of its node).
    pub fn hosted_by(self, host: plait_spec::HostCpu) -> DeviceModel {
        DeviceModel {
            kernel_issue_s: kernel_issue_s(host),
            ..self
        }
    }

    /// The same GPU running its GEMMs in 16-bit: the layers a low-precision run keeps in
    /// bf16 (Megatron Bridge's multi-token-prediction modules). A profile's GEMM corrections,
    /// measured in the run's format, are dropped.
    pub fn sixteen_bit(&self) -> DeviceModel {
        DeviceModel {
            peak_flops_per_s: self.sixteen_bit_peak_flops_per_s,
            gemm_flops_per_s: self.gemm16_flops_per_s,
            gemm_corrections: vec![],
            element_bytes: Dtype::Bf16.gemm_element_bytes(),
            ..self.clone()
        }
    }

    /// Checks `profile` against this GPU's physical limits before it is applied: no
    /// measured GEMM (in this dtype) beats the dense tensor peak, and the measured copy
    /// bandwidth is at most the HBM's. `source` names the profile in the error.
    pub fn check_profile(
        &self,
        profile: &Profile,
        dtype: Dtype,
        hbm_bytes_per_s: f64,
        source: &str,
    ) -> Result<(), crate::profile::ProfileError> {
        let bad = |field: String, problem: String| crate::profile::ProfileError {
            source_name: source.into(),
            location: format!("`{field}`: "),
            problem,
        };
        if profile.memory_bandwidth_bytes_per_s > hbm_bytes_per_s {
            return Err(bad(
                "memory_bandwidth_bytes_per_s".into(),
                format!(
                    "{:.3e} B/s is more than this GPU's memory bandwidth of {:.3e} B/s (allowed: up to {:.3e})",
                    profile.memory_bandwidth_bytes_per_s, hbm_bytes_per_s, hbm_bytes_per_s
                ),
            ));
        }
        let same_dtype = profile
            .dtype
            .as_deref()
            .is_none_or(|d| d.eq_ignore_ascii_case(dtype.keyword()));
        if !same_dtype {
            return Ok(());
        }
        for (i, g) in profile.gemm.iter().enumerate() {
            let flops = 2.0 * g.m as f64 * g.n as f64 * g.k as f64;
            let fastest = flops / self.peak_flops_per_s;
            if g.time_s < fastest {
                return Err(bad(
                    format!("gemm[{i}].time_s"),
                    format!(
                        "{:e} s for {}×{}×{} is {} TFLOP/s, faster than the GPU's {dtype} peak of {:.1} TFLOP/s (allowed: time_s ≥ {fastest:.3e} s)",
                        g.time_s,
                        g.m,
                        g.n,
                        g.k,
                        match flops / g.time_s / 1e12 { r if r.is_finite() => format!("{r:.3e}"), _ => "unboundedly many".into() },
                        self.peak_flops_per_s / 1e12
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Adds a calibration profile: measured bandwidth replaces the assumed one, GEMM times
    /// are corrected towards the measured shapes, and layer samples become available.
    /// GEMM corrections apply only when the profile was measured in the same dtype.
    pub fn with_profile(mut self, profile: &Profile, dtype: Dtype) -> DeviceModel {
        self.memory_bytes_per_s = profile.memory_bandwidth_bytes_per_s;
        let same_dtype = profile
            .dtype
            .as_deref()
            .is_none_or(|d| d.eq_ignore_ascii_case(dtype.keyword()));
        if same_dtype {
            self.gemm_corrections = profile
                .gemm
                .iter()
                .map(|g| {
                    // The sample's time includes one kernel issue (timed alone between events);
                    // the floor keeps tiny GEMMs from turning it negative.
                    let device_s = (g.time_s - KERNEL_DISPATCH_S).max(0.2 * g.time_s);
                    let modelled = self.gemm_raw_s(g.m as f64, g.n as f64, g.k as f64, 1.0);
                    (
                        [
                            (g.m as f64).log2(),
                            (g.n as f64).log2(),
                            (g.k as f64).log2(),
                        ],
                        (device_s / modelled).ln(),
                    )
                })
                .collect();
            self.layer_samples = profile.layers.clone();
        }
        self
    }

    /// Device time of `count` GEMMs `[m×k]·[k×n]` before profile correction:
    /// the slower of the tile-wave compute time and the operand traffic.
    fn gemm_raw_s(&self, m: f64, n: f64, k: f64, count: f64) -> f64 {
        self.gemm_raw_at_s(m, n, k, count, self.gemm_flops_per_s, self.element_bytes)
    }

    fn gemm_raw_at_s(&self, m: f64, n: f64, k: f64, count: f64, rate: f64, bytes: f64) -> f64 {
        let tiles = (m / TILE_M).ceil() * (n / TILE_N).ceil() * count;
        // Split-K: with fewer output tiles than SMs the library splits the k loop so that
        // every SM has work (cuBLAS heuristics, CUTLASS split-K / stream-K), each split a
        // tile of its own with its own fixed work, the partial sums reduced in fp32.
        let splits = if tiles < self.sms {
            (self.sms / tiles)
                .floor()
                .min((k / SPLIT_K_MIN_K).floor())
                .max(1.0)
        } else {
            1.0
        };
        let work_tiles = tiles * splits;
        let waves = (work_tiles / self.sms).ceil();
        let quantisation = waves * self.sms / work_tiles;
        let compute =
            quantisation * 2.0 * m * n * (k + splits * self.tile_overhead_k(rate)) * count / rate;
        let partials = if splits > 1.0 {
            FP32_ACCUMULATOR_BYTES * m * n * splits
        } else {
            0.0
        };
        let traffic =
            (bytes * (m * k + k * n + m * n) + partials) * count / self.memory_bytes_per_s;
        compute.max(traffic)
    }

    /// The per-tile fixed work in units of k at GEMM rate `rate`. The overhead is time (the
    /// prologue and the 16-bit epilogue do not speed up with the input format), so a faster
    /// format's k loop makes it worth more k: fp8 runs the loop at twice the 16-bit rate.
    fn tile_overhead_k(&self, rate: f64) -> f64 {
        GEMM_TILE_OVERHEAD_K * rate / self.gemm16_flops_per_s
    }

    /// Device time of `count` GEMMs `[m×k]·[k×n]` inside a training step (sustained clock).
    pub fn gemm_s(&self, m: u64, n: u64, k: u64, count: u64) -> f64 {
        self.gemm_burst_s(m, n, k, count) / self.sustained
    }

    /// Device time of `count` GEMMs `[m×k]·[k×n]` run alone at the boost clock (as GEMM
    /// benchmarks measure them), corrected by the profile's nearby measurements
    /// (inverse-distance weighting in log-shape space).
    pub fn gemm_burst_s(&self, m: u64, n: u64, k: u64, count: u64) -> f64 {
        if m == 0 || n == 0 || k == 0 || count == 0 {
            return 0.0;
        }
        let (mf, nf, kf) = (m as f64, n as f64, k as f64);
        let raw = self.gemm_raw_s(mf, nf, kf, count as f64);
        if self.gemm_corrections.is_empty() {
            return raw;
        }
        let q = [mf.log2(), nf.log2(), kf.log2()];
        let (mut wsum, mut acc) = (0.0, 0.0);
        for (p, ln_ratio) in &self.gemm_corrections {
            let d2 = (q[0] - p[0]).powi(2) + (q[1] - p[1]).powi(2) + (q[2] - p[2]).powi(2);
            // Power-4 weights keep the correction local; the floor avoids division by zero
            // on an exact match.
            let w = 1.0 / (d2 * d2 + 1e-6);
            wsum += w;
            acc += w * ln_ratio;
        }
        raw * (acc / wsum).exp()
    }

    /// Device time of `count` weight-gradient GEMMs that accumulate their `[m×n]` result
    /// into an fp32 main gradient in the epilogue (beta = 1): the GEMM's roofline with the
    /// accumulator's read and write (4 + 4 bytes per element) in its traffic.
    pub fn gemm_accumulate_s(&self, m: u64, n: u64, k: u64, count: u64) -> f64 {
        let gemm = self.gemm_burst_s(m, n, k, count);
        let (mf, nf, kf, c) = (m as f64, n as f64, k as f64, count as f64);
        let traffic = (self.element_bytes * (mf * kf + kf * nf) + FP32_ACCUMULATOR_BYTES * mf * nf)
            * c
            / self.memory_bytes_per_s;
        gemm.max(traffic) / self.sustained
    }

    /// Device time of `count` 16-bit GEMMs inside a training step: the GEMMs an fp8 run
    /// keeps in bf16 (the LM head under Transformer Engine). Equals `gemm_s` in 16-bit runs.
    pub fn gemm16_s(&self, m: u64, n: u64, k: u64, count: u64) -> f64 {
        if self.element_bytes >= 2.0 {
            return self.gemm_s(m, n, k, count);
        }
        if m == 0 || n == 0 || k == 0 || count == 0 {
            return 0.0;
        }
        self.gemm_raw_at_s(
            m as f64,
            n as f64,
            k as f64,
            count as f64,
            self.gemm16_flops_per_s,
            2.0,
        ) / self.sustained
    }

    /// Streaming multiprocessors.
    pub fn sms(&self) -> f64 {
        self.sms
    }

    /// Time of a kernel that streams `bytes` (read + write) through HBM.
    pub fn memory_s(&self, bytes: f64) -> f64 {
        bytes / self.memory_bytes_per_s
    }

    /// Forward and backward time of a fused attention kernel doing `forward_flops` (already
    /// halved for causal masks; the backward does 2.5×) at key length `seq`, over
    /// `parallel_heads` sequences × heads in one call.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_s(
        &self,
        kernel: AttentionKernel,
        forward_flops: f64,
        seq: f64,
        head_dim: f64,
        causal: bool,
        parallel_heads: f64,
        level: usize,
    ) -> (f64, f64) {
        let (f, b) = attention_fraction(
            self.generation,
            kernel,
            seq,
            head_dim,
            causal,
            parallel_heads,
            level,
        );
        let clock = if attention_rates_sustained(self.generation) {
            1.0
        } else {
            self.sustained
        };
        let rate = self.sixteen_bit_peak_flops_per_s * clock;
        let (sf, sb) = self.attention_speedup[level.min(2)];
        (
            forward_flops / (rate * f * sf),
            2.5 * forward_flops / (rate * b * sb),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plait_spec::cluster::{a100_80g, h200};

    #[test]
    fn profile_gemms_are_reproduced_closely() {
        let p = Profile::builtin_h200();
        let d = DeviceModel::new(&h200(), Dtype::Bf16)
            .unwrap()
            .with_profile(&p, Dtype::Bf16);
        for g in &p.gemm {
            let got = d.gemm_burst_s(g.m, g.n, g.k, 1) + KERNEL_DISPATCH_S;
            let err = (got / g.time_s - 1.0).abs();
            assert!(err < 0.02, "{}x{}x{}: {got} vs {}", g.m, g.n, g.k, g.time_s);
        }
    }

    #[test]
    fn analytic_gemm_model_is_within_25_percent_of_h200_measurements() {
        // Without the profile's corrections: the published-number model alone.
        let p = Profile::builtin_h200();
        let d = DeviceModel::new(&h200(), Dtype::Bf16).unwrap();
        let mut worst: f64 = 0.0;
        for g in &p.gemm {
            let got = d.gemm_burst_s(g.m, g.n, g.k, 1) + KERNEL_DISPATCH_S;
            worst = worst.max((got / g.time_s).ln().abs());
        }
        assert!(worst < 0.25f64.ln_1p(), "worst log error {worst}");
    }

    #[test]
    fn bigger_gemms_take_longer_and_fp8_is_refused_on_a100() {
        let d = DeviceModel::new(&a100_80g(), Dtype::Bf16).unwrap();
        assert!(d.gemm_s(4096, 4096, 4096, 1) < d.gemm_s(8192, 4096, 4096, 1));
        assert!(d.gemm_s(4096, 4096, 4096, 2) > 1.9 * d.gemm_s(4096, 4096, 4096, 1));
        assert!(DeviceModel::new(&a100_80g(), Dtype::Fp8).is_none());
        // A large GEMM benchmark runs near the MAMF rate: 8192³ on A100 ≈ 268 TFLOP/s.
        let rate = 2.0 * 8192f64.powi(3) / d.gemm_burst_s(8192, 8192, 8192, 1) / 1e12;
        assert!((230.0..270.0).contains(&rate), "{rate}");
    }
}
