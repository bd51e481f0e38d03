//! Throughput of `estimate`: configurations evaluated per second on one thread.
//!
//! The planner calls `estimate` once per candidate configuration, millions of times per
//! search, so each benchmark times one pass over a fixed batch of distinct, valid
//! configurations and reports `Throughput::Elements` (criterion prints elements/s, i.e.
//! configurations/s). Target: ≥ 1 M/s for the analytic path (no profile).
//!
//! Run with `cargo bench -p plait-cost --bench estimate`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use plait_cost::{device_for, estimate, DeviceModel, Profile};
use plait_spec::{
    cluster_preset, model_preset, ClusterSpec, Dtype, ModelSpec, ParallelConfig, Recompute,
    Schedule, TrainSpec,
};

/// GPUs of every configuration in the batch.
const GPUS: u64 = 1024;
/// Global batch (sequences) and sequence length of the benchmarked run.
const GBS: u64 = 1536;
const SEQ: u64 = 2048;
/// Configurations per timed pass.
const BATCH: usize = 64;

/// Every well-formed configuration of the grid tp × pp × mbs × zero × recompute ×
/// schedule on `GPUS` GPUs (dp fills the rest; sequence parallelism whenever tp > 1;
/// interleaved runs with vp = 2), thinned evenly to `BATCH` distinct ones.
fn configs(m: &ModelSpec, t: &TrainSpec) -> Vec<ParallelConfig> {
    let mut valid = Vec::new();
    for tp in [1, 2, 4, 8] {
        for pp in [1, 2, 4, 8, 16] {
            for mbs in [1, 2, 4] {
                for zero in 0..=3u8 {
                    for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                        for (schedule, vp) in [(Schedule::OneFOneB, 1), (Schedule::Interleaved, 2)]
                        {
                            if !GPUS.is_multiple_of(tp * pp) {
                                continue;
                            }
                            let c = ParallelConfig {
                                dp: GPUS / (tp * pp),
                                tp,
                                pp,
                                vp,
                                mbs,
                                zero,
                                sp: tp > 1,
                                recompute,
                                schedule,
                                ..ParallelConfig::default()
                            };
                            if c.validate(m, t, GPUS).is_ok() {
                                valid.push(c);
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(
        valid.len() >= BATCH,
        "only {} valid configurations for {}",
        valid.len(),
        m.name
    );
    // An even stride over the grid keeps every degree, ZeRO stage and schedule represented.
    let stride = valid.len() as f64 / BATCH as f64;
    (0..BATCH)
        .map(|i| valid[(i as f64 * stride) as usize])
        .collect()
}

/// Registers one benchmark: a pass of `estimate` over the whole batch.
fn bench_batch(
    c: &mut Criterion,
    name: &str,
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    d: &DeviceModel,
) {
    let batch = configs(m, t);
    // Every configuration must be an answer, not an error, or the pass would time the
    // early-return path.
    for cfg in &batch {
        if let Err(e) = estimate(m, cluster, t, cfg, d) {
            panic!("{cfg}: {e}");
        }
    }
    let mut group = c.benchmark_group("estimate");
    group.throughput(Throughput::Elements(batch.len() as u64));
    group.bench_function(name, |b| {
        b.iter(|| {
            for cfg in &batch {
                black_box(estimate(
                    black_box(m),
                    black_box(cluster),
                    black_box(t),
                    black_box(cfg),
                    black_box(d),
                ))
                .ok();
            }
        })
    });
    group.finish();
}

fn analytic(c: &mut Criterion) {
    let m = model_preset("gpt3-175b").expect("preset");
    let cluster = cluster_preset("dgx-a100-80g").expect("preset");
    let t = TrainSpec::new(GBS, SEQ);
    let d = device_for(&cluster, Dtype::Bf16).expect("A100 has bf16");
    bench_batch(c, "analytic/gpt3-175b-a100", &m, &cluster, &t, &d);
}

fn profiled(c: &mut Criterion) {
    let m = model_preset("llama3-70b").expect("preset");
    let cluster = cluster_preset("dgx-h200").expect("preset");
    let t = TrainSpec::new(GBS, SEQ);
    let d = DeviceModel::new(&cluster.gpu, Dtype::Bf16)
        .expect("H200 has bf16")
        .with_profile(&Profile::builtin_h200(), Dtype::Bf16);
    bench_batch(c, "profiled/llama3-70b-h200", &m, &cluster, &t, &d);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = analytic, profiled
}
criterion_main!(benches);
