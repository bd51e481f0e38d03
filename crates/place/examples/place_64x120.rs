//! Times `place` on the 64-device, 120-layer instances (run with --release):
//! `cargo run --release -p plait-place --example place_64x120`.

use std::time::Instant;

use plait_place::{place, synth, Objective, Options};

fn main() {
    let mut cases = Vec::new();
    for gb in [1.0, 4.0, 12.0] {
        cases.push((format!("fleet {gb} GB/layer"), synth::fleet(120, gb, 1)));
        for (density, seed) in [(0.3, 1), (1.0, 2)] {
            cases.push((
                format!("random {density} links {gb} GB/layer"),
                synth::random(64, 120, gb, density, seed),
            ));
        }
    }

    for (name, p) in &cases {
        for objective in [Objective::Latency, Objective::Throughput] {
            let start = Instant::now();
            let a = place(
                p,
                &Options {
                    objective,
                    ..Options::default()
                },
            );
            let s = start.elapsed().as_secs_f64();
            println!(
                "{name}: {:<10} {:>8.3} s  feasible {} optimal {} value {} s  bound {} s  stages {}  classes {}  labels {}  expanded {}",
                objective.keyword(),
                s,
                a.feasible,
                a.optimal,
                seconds(a.value_s),
                seconds(a.lower_bound_s),
                a.stages.len(),
                a.search.device_classes,
                a.search.labels,
                a.search.expanded
            );
        }
    }
}

/// A time to six decimals, or "none" where the search has none.
fn seconds(v: Option<f64>) -> String {
    v.map_or_else(|| "none".to_string(), |v| format!("{v:.6}"))
}
