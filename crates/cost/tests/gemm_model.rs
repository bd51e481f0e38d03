//! The analytic GEMM model against GEMM throughput measured by others: OpenXLA's H100 table
//! (`tests/data/xla_h100_bf16_gemms.csv`), whose thin and short shapes are where tile
//! quantisation and split-K decide the time.

use plait_cost::device_for;
use plait_spec::{cluster_preset, Dtype};

#[test]
fn gemm_model_follows_openxla_h100_measurements() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let text = include_str!("data/xla_h100_bf16_gemms.csv");
    let mut errors = vec![];
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let v: Vec<f64> = line.split(',').map(|x| x.parse().unwrap()).collect();
        let (b, m, n, k, measured) = (v[0] as u64, v[1] as u64, v[2] as u64, v[3] as u64, v[4]);
        // XLA times each GEMM alone: the boost clock, as `gemm_burst_s` models it.
        let s = d.gemm_burst_s(m, n, k, b);
        let predicted = 2.0 * (b * m * n * k) as f64 / s / 1e12;
        errors.push((predicted / measured - 1.0, format!("{b}×{m}×{n}×{k}")));
    }
    assert_eq!(errors.len(), 41);
    let mean = errors.iter().map(|(e, _)| e.abs()).sum::<f64>() / errors.len() as f64;
    let (worst, shape) = errors
        .iter()
        .max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()))
        .unwrap();
    assert!(mean < 0.22, "mean |error| {:.1} %", 100.0 * mean);
    assert!(worst.abs() < 0.5, "worst {:.1} % at {shape}", 100.0 * worst);
}

/// Relative errors (predicted / measured − 1) of the analytic GEMM model on OpenXLA's B200
/// table (`tests/data/xla_b200_gemms.csv`, every entry of its `sm_100_B200` table) for the
/// column `col` (4: bf16, 5: fp8 e4m3) in `dtype`, over the GEMMs of at least `min_flops`.
fn b200_errors(col: usize, dtype: Dtype, min_flops: f64) -> Vec<(f64, String)> {
    let cluster = cluster_preset("dgx-b200").unwrap();
    let d = device_for(&cluster, dtype).unwrap();
    let text = include_str!("data/xla_b200_gemms.csv");
    let mut errors = vec![];
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let v: Vec<f64> = line.split(',').map(|x| x.parse().unwrap()).collect();
        let (b, m, n, k, measured) = (v[0] as u64, v[1] as u64, v[2] as u64, v[3] as u64, v[col]);
        let flops = 2.0 * (b * m * n * k) as f64;
        if flops < min_flops {
            continue;
        }
        let predicted = flops / d.gemm_burst_s(m, n, k, b) / 1e12;
        errors.push((predicted / measured - 1.0, format!("{b}×{m}×{n}×{k}")));
    }
    errors
}

/// The B200 model where training's GEMMs are: on XLA's shapes of at least 2^34 FLOPs (108
/// of the 375) it is within 10.5 % on average in bf16 (worst 28 %) and 19.7 % in fp8 (worst
/// 49 %, both at 4 × 4096 × 256 × 2048, a thin n the model runs too fast).
/// Below that the model has no per-kernel fixed time and runs the smallest shapes several
/// times too fast (XLA's 256³ took 4.9 µs), which these bounds leave out on purpose.
#[test]
fn gemm_model_follows_openxla_b200_measurements_at_training_sizes() {
    for (col, dtype, bound, worst_bound) in
        [(4, Dtype::Bf16, 0.12, 0.35), (5, Dtype::Fp8, 0.21, 0.55)]
    {
        let errors = b200_errors(col, dtype, 2f64.powi(34));
        assert_eq!(errors.len(), 108);
        let mean = errors.iter().map(|(e, _)| e.abs()).sum::<f64>() / errors.len() as f64;
        let (worst, shape) = errors
            .iter()
            .max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()))
            .unwrap();
        println!(
            "{dtype:?}: mean |error| {:.1} %, worst {:.1} % at {shape}",
            100.0 * mean,
            100.0 * worst
        );
        assert!(
            mean < bound,
            "{dtype:?}: mean |error| {:.1} %",
            100.0 * mean
        );
        assert!(
            worst.abs() < worst_bound,
            "{dtype:?}: worst {:.1} % at {shape}",
            100.0 * worst
        );
    }
}
