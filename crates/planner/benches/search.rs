//! Search time of `plan` (one search per iteration, all cores): the 1T model on 3,072
//! A100s and GPT-3 175B on 1,024. Run: `cargo bench -p plait-planner --bench search`.
//! Prints the number of candidates each search evaluates.

use criterion::{criterion_group, criterion_main, Criterion};
use plait_cost::device_for;
use plait_planner::{plan, Request};
use plait_spec::{cluster_preset, model_preset, TrainSpec};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let cluster = cluster_preset("dgx-a100-80g").unwrap();
    let mut g = c.benchmark_group("plan");
    g.sample_size(10);
    for (name, gpus, gbs) in [("gpt-1t", 3072, 3072), ("gpt3-175b", 1024, 1536)] {
        let m = model_preset(name).unwrap();
        let t = TrainSpec::new(gbs, 2048);
        let d = device_for(&cluster, t.dtype).unwrap();
        let req = Request::new(&m, &cluster, &t, &d, gpus);
        let out = plan(&req, &|_, _| {}).unwrap();
        eprintln!(
            "{name} on {gpus}: {} candidates, {} pruned, {} estimates, {} simulated; best {}",
            out.search.candidates,
            out.search.pruned,
            out.search.estimated,
            out.search.simulated,
            out.plans[0].config
        );
        g.bench_function(format!("{name} on {gpus} GPUs"), |b| {
            b.iter(|| plan(black_box(&req), &|_, _| {}).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
