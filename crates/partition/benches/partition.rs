//! Speed of `partition` on the placement graphs of Tarnawski et al. against the wall time
//! of their C++ DP (reference.csv, `reference_s`, measured on a 2-core x86-64 machine like
//! plait's CI). Acceptance: the BERT-3 operator graph at least 10× faster than the reference.
//!
//! First prints, per graph, the median of 5 timed runs and the ratio reference_s / median;
//! then runs criterion on the same calls.
//!
//! Run with `cargo bench -p plait-partition --bench partition`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;

use plait_partition::{partition, Graph, Limits};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

/// Timed runs per graph for the median (the acceptance criterion says median of 5).
const RUNS: usize = 5;

struct Case {
    name: String,
    reference_s: f64,
    graph: Graph,
    limits: Limits,
}

fn cases() -> Vec<Case> {
    let csv = std::fs::read_to_string(format!("{DATA}/reference.csv")).expect("reference.csv");
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("graph,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let text = std::fs::read_to_string(format!("{DATA}/{}", f[0])).expect("graph file");
            let graph = Graph::from_placement_json(&text, f[0]).expect("valid graph");
            let limits = Limits::of_graph(&graph).expect("limits in the file");
            Case {
                name: f[0].to_string(),
                reference_s: f[2].parse().expect("reference_s"),
                graph,
                limits,
            }
        })
        .collect()
}

fn median_table(cases: &[Case]) {
    println!(
        "{:<32} {:>8} {:>12} {:>12} {:>9}",
        "graph", "nodes", "median_s", "reference_s", "speed-up"
    );
    for c in cases {
        let mut times: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                black_box(partition(black_box(&c.graph), &c.limits).expect("partition"));
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[RUNS / 2];
        println!(
            "{:<32} {:>8} {:>12.6} {:>12.3} {:>8.0}×",
            c.name,
            c.graph.nodes.len(),
            median,
            c.reference_s,
            c.reference_s / median
        );
    }
}

fn main() {
    let cases = cases();
    median_table(&cases);
    let mut crit = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for c in &cases {
        crit.bench_function(&format!("partition/{}", c.name), |b| {
            b.iter(|| partition(black_box(&c.graph), &c.limits).expect("partition"))
        });
    }
    crit.final_summary();
}
