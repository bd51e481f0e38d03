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
