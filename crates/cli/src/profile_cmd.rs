//! `plait profile`: measure this machine's CPU worker (one core running candle in f32):
//! GEMM times over a grid of shapes and the models' own shapes, whole-block forward and
//! backward times, memory bandwidth and the in-process communicator; write them as a
//! calibration profile (`plait-profile/1` plus a `cpu` section) for `plait train --plan
//! auto --profile FILE` and the measured-vs-simulated comparison.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use plait_runtime::profile::{measure, MeasureOptions};

use crate::inputs::{load_model, positive, runtime_flags};

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Models whose GEMM shapes and blocks to measure too (presets or config.json files).
    #[arg(long, default_value = "tiny-gpt")]
    pub model: Vec<String>,
    /// Sequence length the models will train with.
    #[arg(long, allow_negative_numbers = true, default_value_t = 64)]
    pub seq: i64,
    /// Micro-batch sizes to measure the models at (comma-separated).
    #[arg(
        long,
        allow_negative_numbers = true,
        value_delimiter = ',',
        default_value = "1,2,4,8"
    )]
    pub mbs: Vec<i64>,
    /// Fewer shapes (no 1024³ GEMMs) and shorter timings: a few seconds.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the profile.
    #[arg(long, short, value_name = "FILE", default_value = "plait-profile.json")]
    pub output: PathBuf,
}

pub fn run(args: &ProfileArgs) -> Result<String> {
    // Measure with the threading training uses (one compute thread per worker).
    plait_runtime::init_compute_threads(1);
    let seq = positive("seq", args.seq)? as usize;
    let mbs = args
        .mbs
        .iter()
        .map(|&b| Ok(positive("mbs", b)? as usize))
        .collect::<Result<Vec<_>>>()?;
    let models = args
        .model
        .iter()
        .map(|m| Ok((load_model(m)?, seq)))
        .collect::<Result<Vec<_>>>()?;
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("measuring {bar:30} {pos}/{len}").expect("static template"),
    );
    let profile = measure(
        &MeasureOptions {
            models,
            mbs,
            quick: args.quick,
        },
        &mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )
    .map_err(|e| runtime_flags(e.into()))?;
    bar.finish_and_clear();
    std::fs::write(&args.output, profile.to_json()?)
        .with_context(|| format!("--output: cannot write `{}`", args.output.display()))?;
    let p = &profile.profile;
    let mut out = format!(
        "{}: {} cores, {:.1} GiB\n",
        p.gpu,
        profile.cpu.cores,
        profile.cpu.memory_bytes / f64::from(1u32 << 30)
    );
    out += &format!(
        "GEMM: best {:.1} GFLOP/s over {} shapes\n",
        p.max_gemm_flops_per_s() / 1e9,
        p.gemm.len()
    );
    out += &format!(
        "memory bandwidth: {:.1} GB/s (read + write)\n",
        p.memory_bandwidth_bytes_per_s / 1e9
    );
    out += &format!(
        "in-process link: {:.1} µs per step, {:.1} GB/s\n",
        profile.cpu.link.latency_s * 1e6,
        profile.cpu.link.bandwidth_bytes_per_s / 1e9
    );
    for l in &p.layers {
        out += &format!(
            "block {} h{} heads {} seq {} mbs {} tp {}: forward {:.3} ms, backward {:.3} ms\n",
            l.family,
            l.hidden,
            l.heads,
            l.seq,
            l.mbs,
            l.tp,
            l.forward_s * 1e3,
            l.backward_s * 1e3
        );
    }
    out += &format!("wrote {}\n", args.output.display());
    Ok(out)
}
