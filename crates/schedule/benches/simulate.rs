//! Speed of the schedule pipeline: generate + simulate a large interleaved schedule
//! (64 stages × 512 micro-batches × 2 chunks, ~400 k instructions), and validation alone.
//! Run: `cargo bench -p plait-schedule --bench simulate`.

use criterion::{criterion_group, criterion_main, Criterion};
use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{generate, simulate, validate, Costs, GradReduce, ScheduleSpec};
use std::hint::black_box;

fn spec() -> ScheduleSpec {
    let mut spec = ScheduleSpec::new(Kind::Interleaved, 64, 512, 2);
    spec.grad_reduce = GradReduce::Overlapped;
    spec
}

fn costs() -> Costs {
    let mut costs = Costs::uniform(64, 2, 1.0, 2.0, 0.0);
    for rank in &mut costs.ranks {
        for c in &mut rank.chunks {
            c.send_activation_s = 0.05;
            c.send_gradient_s = 0.05;
            c.reduce_s = 3.0;
            c.reduce_buckets = 8;
        }
    }
    costs
}

fn bench(c: &mut Criterion) {
    let schedule = generate(&spec()).unwrap();
    let costs = costs();
    let mut g = c.benchmark_group("64 stages x 512 micro-batches x 2 chunks");
    g.sample_size(20);
    g.bench_function("generate", |b| {
        b.iter(|| generate(black_box(&spec())).unwrap())
    });
    g.bench_function("simulate", |b| {
        b.iter(|| simulate(black_box(&schedule), black_box(&costs)).unwrap())
    });
    g.bench_function("validate", |b| {
        b.iter(|| validate(black_box(&schedule)).unwrap())
    });
    g.finish();
    eprintln!("instructions: {}", schedule.len());
}

criterion_group!(benches, bench);
criterion_main!(benches);
