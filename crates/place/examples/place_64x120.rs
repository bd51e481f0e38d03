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
                "{name}: {:<10} {:>8.3} s  feasible {} optimal {} value {:.6} s  bound {:.6} s  stages {}  classes {}  labels {}  expanded {}",
                objective.keyword(),
                s,
                a.feasible,
                a.optimal,
                a.value_s.unwrap_or(f64::NAN),
                a.lower_bound_s.unwrap_or(f64::NAN),
                a.stages.len(),
                a.search.device_classes,
                a.search.labels,
                a.search.expanded
            );
        }
    }
}
