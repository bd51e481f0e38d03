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

/// CPU-side cost of issuing one kernel from eager PyTorch (dispatch + launch), fitted as the
/// fixed term of the same H200 GEMM sample (12 µs). A stream of kernels cannot run faster
/// than the host issues them; layers with small kernels hit this floor.
pub const KERNEL_DISPATCH_S: f64 = 12e-6;

/// Fraction of the peak HBM bandwidth that streaming kernels reach: the H200 device copy
/// measured 4.24 TB/s (read+write) of 4.8 TB/s peak = 88.3 %
/// (shared/data/h200_pytorch_calibration.jsonl). Assumed to hold for other HBM GPUs.
const HBM_EFFICIENCY: f64 = 4.2377 / 4.8;

/// Flash-attention kernel efficiency (fraction of the dense 16-bit peak), forward and
/// backward, with the usual accounting (backward = 2.5 × forward FLOPs).
/// * A100: FlashAttention-2 reaches 50–73 % of peak forward (Dao 2023, abstract); causal
///   head-dim-128 sequences of 2k sit at the low end, and its backward runs ~20 % slower.
/// * Hopper and later: FlashAttention-2 reaches 35 % of the H100 peak (Shah et al. 2024,
///   FlashAttention-3, abstract); assumed for H200/B200 and for the backward.
/// * V100: no FlashAttention-2 kernel exists; a memory-efficient attention at ~30 % is assumed.
fn flash_efficiency(gpu: &GpuSpec) -> (f64, f64) {
    let name = gpu.name.to_ascii_uppercase();
    if name.contains("A100") {
        (0.55, 0.45)
    } else if name.contains("V100") {
        (0.30, 0.25)
    } else {
        (0.35, 0.30)
    }
}

/// Timing model of one GPU for one numeric format.
#[derive(Debug, Clone)]
pub struct DeviceModel {
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
    flash_forward_flops_per_s: f64,
    flash_backward_flops_per_s: f64,
    /// log2(m), log2(n), log2(k) and ln(measured / modelled) of each profile GEMM.
    gemm_corrections: Vec<([f64; 3], f64)>,
    /// Whole-layer measurements of the profile (empty without one).
    pub layer_samples: Vec<LayerSample>,
    pub element_bytes: f64,
}

impl DeviceModel {
    /// The model of `gpu` running `dtype`, from published numbers only.
    /// `None` if the GPU has no tensor cores for `dtype` (fp8 before Hopper).
    pub fn new(gpu: &GpuSpec, dtype: Dtype) -> Option<DeviceModel> {
        let peak = gpu.peak_flops_per_s(dtype)?;
        let sixteen_bit = gpu.peak_bf16_flops_per_s;
        let (ff, fb) = flash_efficiency(gpu);
        Some(DeviceModel {
            peak_flops_per_s: peak,
            gemm_flops_per_s: peak * gpu.matmul_efficiency,
            sustained: gpu.sustained_clock_ratio,
            sms: gpu.sms as f64,
            memory_bytes_per_s: gpu.memory_bandwidth_bytes_per_s * HBM_EFFICIENCY,
            // Attention runs in 16-bit even in fp8 training.
            flash_forward_flops_per_s: sixteen_bit * ff * gpu.sustained_clock_ratio,
            flash_backward_flops_per_s: sixteen_bit * fb * gpu.sustained_clock_ratio,
            gemm_corrections: vec![],
            layer_samples: vec![],
            element_bytes: dtype.activation_bytes(),
        })
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
        let tiles = (m / TILE_M).ceil() * (n / TILE_N).ceil() * count;
        let waves = (tiles / self.sms).ceil();
        let quantisation = waves * self.sms / tiles;
        let compute =
            quantisation * 2.0 * m * n * (k + GEMM_TILE_OVERHEAD_K) * count / self.gemm_flops_per_s;
        let traffic =
            self.element_bytes * (m * k + k * n + m * n) * count / self.memory_bytes_per_s;
        compute.max(traffic)
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

    /// Time of a kernel that streams `bytes` (read + write) through HBM.
    pub fn memory_s(&self, bytes: f64) -> f64 {
        bytes / self.memory_bytes_per_s
    }

    /// Flash-attention forward time for `flops` (already halved for causal masks).
    pub fn flash_forward_s(&self, flops: f64) -> f64 {
        flops / self.flash_forward_flops_per_s
    }

    /// Flash-attention backward time for `flops` (2.5 × the forward FLOPs).
    pub fn flash_backward_s(&self, flops: f64) -> f64 {
        flops / self.flash_backward_flops_per_s
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
