//! Measured against simulated iteration time on this machine: profiles one CPU worker
//! (or reads `--profile FILE`, as written by `plait profile`), trains tiny-gpt under 1- and
//! 2-worker plans and prints the simulator's prediction beside the measured median step.
//!
//! ```text
//! cargo run --release -p plait --example measured_vs_simulated [-- --profile FILE]
//! ```

// The CLI's prediction of a run on this machine (the example is the CLI package's).
#[path = "../src/auto_plan.rs"]
#[allow(dead_code)]
mod auto_plan;

use plait_runtime::profile::{measure, CpuProfile, MeasureOptions};
use plait_runtime::{parse_plan, train, Dataset, TrainConfig};
use plait_spec::model_preset;

const SEQ: usize = 64;
const GBS: usize = 8;
const STEPS: u64 = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Before any thread: one core per worker, as `plait train` runs.
    plait_runtime::init_compute_threads(1);
    let args: Vec<String> = std::env::args().collect();
    let model = model_preset(
        args.iter()
            .position(|a| a == "--model")
            .map_or("tiny-gpt", |i| &args[i + 1]),
    )?;
    let profile = match args.iter().position(|a| a == "--profile") {
        Some(i) => {
            let path = &args[i + 1];
            CpuProfile::parse(&std::fs::read_to_string(path)?, path)?
        }
        None => {
            eprintln!("measuring this machine (plait profile) …");
            measure(
                &MeasureOptions {
                    models: vec![(model.clone(), SEQ)],
                    mbs: vec![1],
                    quick: false,
                },
                &mut |_, _| {},
            )?
        }
    };
    let data = Dataset::builtin();
    let verbose = args.iter().any(|a| a == "--verbose");
    println!(
        "model {} seq {SEQ} gbs {GBS}, median of steps 2..{STEPS}",
        model.name
    );
    println!(
        "{:<22} {:>9} {:>13} {:>12} {:>8}",
        "plan", "workers", "simulated_s", "measured_s", "error"
    );
    for (plan, workers) in [
        ("dp1", 1),
        ("dp2", 2),
        ("tp2", 2),
        ("tp2,sp", 2),
        ("pp2", 2),
        ("pp2,schedule=gpipe", 2),
        ("pp2,vp2", 2),
    ] {
        let mut cfg = TrainConfig::new(model.clone(), parse_plan(plan, workers)?, SEQ, GBS, STEPS);
        cfg.seed = 1;
        let sim = auto_plan::predict(&cfg, &profile)?;
        let predicted = sim.estimate.iteration_time_s;
        cfg.trace = verbose;
        let report = train(&cfg, &data, |_| {})?;
        if verbose {
            use std::collections::BTreeMap;
            let mut by: BTreeMap<String, (f64, f64, usize, usize)> = BTreeMap::new();
            for s in sim.simulation.spans.iter().filter(|s| s.rank == 0) {
                let e = by.entry(format!("{:?}", s.instr.op)).or_default();
                e.0 += s.end_s - s.start_s;
                e.2 += 1;
            }
            let steps = report.logs.len() as f64;
            for s in report.spans.iter().filter(|s| s.rank == 0) {
                let e = by.entry(format!("{:?}", s.instr.op)).or_default();
                e.1 += (s.end_s - s.start_s) / steps;
                e.3 += 1;
            }
            for (op, (a, b, n, k)) in by {
                println!("    {op:<16} simulated {a:.4} s ({n})  measured {b:.4} s ({k})");
            }
        }
        // Median of the steps after the first: robust to another process taking a core.
        let mut times: Vec<f64> = report.logs.iter().skip(1).map(|l| l.step_time_s).collect();
        times.sort_by(f64::total_cmp);
        let measured = times[times.len() / 2];
        println!(
            "{plan:<22} {workers:>9} {predicted:>13.4} {measured:>12.4} {:>+7.1}%",
            (predicted / measured - 1.0) * 100.0
        );
    }
    Ok(())
}
