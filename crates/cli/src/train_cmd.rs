//! `plait train`: real training on CPU worker threads (the runtime), with a plan chosen by
//! the planner (`--plan auto`) or given (`--plan dp2,tp2,pp2`); progress bar, JSON step
//! log, measured Perfetto trace, sharded checkpoints and resume.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::auto_plan::{plan_auto, predict};
use plait_runtime::checkpoint::{self, ResumePoint};
use plait_runtime::memory::{min_activation_bytes, min_replicas};
use plait_runtime::profile::{measure, CpuProfile, MeasureOptions};
use plait_runtime::{
    init_compute_threads, parse_plan, train, CheckpointConfig, Dataset, Fault, OptimConfig,
    StepLog, TrainConfig,
};
use plait_spec::Schedule;

use crate::inputs::{load_model, parse_keyword, positive, runtime_flags};

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Model preset (tiny-gpt, tiny-llama, …) or a Hugging Face config.json (GPT or LLaMA).
    #[arg(long)]
    pub model: String,
    /// Worker threads, one per rank (each computes on one core).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    pub workers: i64,
    /// `auto` (the planner picks for these workers on this machine), or degrees and options
    /// such as `dp2,tp2,pp2`, `pp2,vp2`, `tp2,sp`, `dp2,zero1`, `pp2,recompute=full`, `mbs2`.
    #[arg(long, default_value = "auto")]
    pub plan: String,
    // Overrides the plan's; its help lists the kinds `plait-schedule` knows.
    #[arg(long, value_parser = parse_keyword::<Schedule>, help = crate::inputs::schedule_help("vp", "pp"))]
    pub schedule: Option<Schedule>,
    /// Optimizer steps of the run.
    #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
    pub steps: i64,
    /// Seed of initialisation and data order (every plan starts from the same model).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Training text: plain text, or JSON lines with a `text` field (default: the built-in
    /// corpus).
    #[arg(long, value_name = "PATH")]
    pub data: Option<PathBuf>,
    /// Sequence length in tokens (bytes).
    #[arg(long, allow_negative_numbers = true, default_value_t = 64)]
    pub seq: i64,
    /// Global batch in sequences.
    #[arg(long, allow_negative_numbers = true, default_value_t = 16)]
    pub gbs: i64,
    /// Peak learning rate (warm-up over 10 % of the steps, cosine decay to a tenth).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Write one JSON object per step (step, loss, grad_norm, lr, tokens, step_time_s,
    /// tokens_per_s). With --resume the file continues: the lines of steps after the
    /// checkpoint resumed from are dropped first, so each step is in it once.
    #[arg(long, value_name = "FILE")]
    pub json_log: Option<PathBuf>,
    /// Write the measured per-rank timeline of pipeline 0 as a Perfetto trace (the
    /// simulator's format).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write sharded checkpoints (safetensors per rank + manifest) here.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Steps between checkpoints (and always at the end); 0: only at the end.
    #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
    pub checkpoint_every: i64,
    /// Continue from the newest checkpoint in --checkpoint-dir (with --plan auto, under the
    /// checkpoint's plan). Without it, --checkpoint-dir must hold no checkpoints.
    #[arg(long)]
    pub resume: bool,
    /// Calibration profile from `plait profile` (for --plan auto and the simulated step
    /// time; without it, --plan auto measures this machine first).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Sub-pipelined tensor parallelism (Merak): split each micro-batch in two so one
    /// half's tensor-parallel collectives overlap the other half's compute (tp ≥ 2, even
    /// micro-batch).
    #[arg(long)]
    pub sub_pipeline_tp: bool,
    /// Seconds any rank may wait for another before the run stops with an error.
    #[arg(long, allow_negative_numbers = true, default_value_t = 300)]
    pub timeout: i64,
    /// Test switch: make this rank fail (with --fail-step).
    #[arg(long, hide = true)]
    pub fail_rank: Option<usize>,
    #[arg(long, hide = true, default_value_t = 1)]
    pub fail_step: u64,
    #[arg(long, hide = true, default_value_t = 0)]
    pub fail_instruction: usize,
    #[arg(long, hide = true)]
    pub fail_panic: bool,
}

fn load_profile(path: &std::path::Path) -> Result<CpuProfile> {
    let text = crate::inputs::read_text(path, crate::inputs::MAX_CONFIG_BYTES)
        .with_context(|| format!("--profile: cannot read `{}`", path.display()))?;
    Ok(CpuProfile::parse(&text, &path.display().to_string())?)
}

pub fn run(args: &TrainArgs) -> Result<String> {
    train_run(args).map_err(runtime_flags)
}

fn train_run(args: &TrainArgs) -> Result<String> {
    // First, while this is the only thread: candle's thread counts come from the
    // environment, which may only change before threads exist (see the function).
    init_compute_threads(1);
    let model = load_model(&args.model)?;
    let workers = positive("workers", args.workers)? as usize;
    let steps = positive("steps", args.steps)?;
    let seq = positive("seq", args.seq)? as usize;
    let gbs = positive("gbs", args.gbs)? as usize;
    // Before anything slow (measuring the machine for --plan auto): does it fit at all,
    // under the plan that needs the least memory? The chosen plan is checked again.
    plait_runtime::check_memory(
        &model,
        seq,
        min_activation_bytes(&model, seq),
        min_replicas(&model, workers),
    )?;
    if args.checkpoint_every < 0 {
        bail!(
            "--checkpoint-every must be 0 (only at the end) or more, got {}",
            args.checkpoint_every
        );
    }
    let timeout = positive("timeout", args.timeout)?;
    let data = match &args.data {
        Some(path) => Dataset::from_path(path).map_err(|e| anyhow::anyhow!("--data: {e}"))?,
        None => Dataset::builtin(),
    };
    let mut cfg = TrainConfig::new(model, Default::default(), seq, gbs, steps);
    cfg.seed = args.seed;
    if let Some(lr) = args.lr {
        if !(lr.is_finite() && lr > 0.0) {
            bail!("--lr must be a positive number, got {lr}");
        }
        cfg.optim = OptimConfig {
            lr,
            min_lr: lr / 10.0,
            ..OptimConfig::for_steps(steps)
        };
    }
    cfg.timeout = Duration::from_secs(timeout);
    cfg.trace = args.trace.is_some();
    if let Some(dir) = &args.checkpoint_dir {
        cfg.checkpoint = Some(CheckpointConfig {
            dir: dir.clone(),
            every: args.checkpoint_every as u64,
            keep: 2,
        });
    } else if args.resume {
        bail!("--resume needs --checkpoint-dir");
    }
    cfg.resume = args.resume;
    cfg.sub_pipeline_tp = args.sub_pipeline_tp;
    cfg.fault = args.fail_rank.map(|rank| Fault {
        rank,
        step: args.fail_step,
        instruction: args.fail_instruction,
        panic: args.fail_panic,
    });

    // The checkpoint a resumed run continues (train() verifies it again); a fresh run's
    // directory must hold none (train() checks too: here it is before measuring). Planning
    // again would measure this machine again, and timing noise can change the choice: a
    // resumed run with --plan auto keeps the plan its checkpoint was written under, so its
    // workers must be the checkpoint's.
    let auto = args.plan.trim().eq_ignore_ascii_case("auto");
    let resumed: Option<ResumePoint> = match &args.checkpoint_dir {
        Some(dir) => checkpoint::resume_point(dir, args.resume, auto.then_some(workers))?,
        None => None,
    };

    let mut out = String::new();
    let mut profile = match &args.profile {
        Some(p) => Some(load_profile(p)?),
        None => None,
    };
    if let (
        true,
        Some(ResumePoint {
            path, manifest: m, ..
        }),
    ) = (auto, &resumed)
    {
        let mut config = m.parallel;
        if let Some(s) = args.schedule {
            override_schedule(&mut config, s);
        }
        cfg.parallel = config;
        cfg.stage_map = Some(m.stage_map.clone());
        out += &format!(
            "plan (auto): {} — the plan of the checkpoint resumed from ({}), not planned again\n",
            cfg.parallel,
            path.display()
        );
    } else if auto {
        let prof = match profile.take() {
            Some(p) => p,
            None => {
                let started = Instant::now();
                let p = measure(
                    &MeasureOptions {
                        models: vec![(cfg.model.clone(), seq)],
                        mbs: [1, 2, 4, 8].into_iter().filter(|&b| b <= gbs).collect(),
                        quick: true,
                    },
                    &mut |_, _| {},
                )?;
                out += &format!(
                    "measured this machine in {:.1} s (save it with `plait profile --output FILE`, reuse it with --profile FILE)\n",
                    started.elapsed().as_secs_f64()
                );
                p
            }
        };
        cfg.parallel.dp = workers as u64;
        let (mut config, map, plan) = plan_auto(&cfg, workers, &prof)?;
        if let Some(s) = args.schedule {
            override_schedule(&mut config, s);
        }
        cfg.parallel = config;
        cfg.stage_map = Some(map);
        out += &format!(
            "plan (auto): {} — simulated {:.3} s per step\n",
            cfg.parallel, plan.estimate.iteration_time_s
        );
        profile = Some(prof);
    } else {
        let mut config = parse_plan(&args.plan, workers)?;
        if let Some(s) = args.schedule {
            override_schedule(&mut config, s);
        }
        cfg.parallel = config;
        out += &format!("plan: {}\n", cfg.parallel);
    }

    // A resumed run continues the log of the run it resumes, from its checkpoint's step.
    let resumed_step = args.resume.then(|| resumed.as_ref().map_or(0, |p| p.step));
    let mut log = match &args.json_log {
        Some(path) => Some(open_log(path, resumed_step)?),
        None => None,
    };
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} step {pos}/{len} {msg}").expect("static template"),
    );
    let mut log_error = None;
    let started = Instant::now();
    // A panicking rank is caught and reported once, with its rank, step and instruction;
    // keep Rust's own panic print-out for RUST_BACKTRACE debugging only.
    let quiet_panics = std::env::var_os("RUST_BACKTRACE").is_none();
    if quiet_panics {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let result = train(&cfg, &data, |l: &StepLog| {
        bar.set_position(l.step);
        bar.set_message(format!(
            "loss {:.4} · {:.0} tokens/s",
            l.loss, l.tokens_per_s
        ));
        if let Some(w) = log.as_mut() {
            let line = serde_json::to_string(l).expect("a step log serializes");
            if let Err(e) = writeln!(w, "{line}").and_then(|_| w.flush()) {
                log_error.get_or_insert(e);
            }
        }
    });
    bar.finish_and_clear();
    if quiet_panics {
        let _ = std::panic::take_hook();
    }
    let report = result?;
    if let (Some(e), Some(path)) = (log_error, &args.json_log) {
        bail!("--json-log: cannot write `{}`: {e}", path.display());
    }
    let elapsed = started.elapsed().as_secs_f64();

    out += &summary(&cfg, &report, workers, elapsed, &data.source);
    if let Some(p) = &profile {
        let sim = predict(&cfg, p)?;
        out += &format!(
            "step time: measured {:.4} s (mean after the first step), simulated {:.4} s ({:+.1} %)\n",
            report.mean_step_time_s(),
            sim.estimate.iteration_time_s,
            (sim.estimate.iteration_time_s / report.mean_step_time_s() - 1.0) * 100.0
        );
    }
    if let Some(path) = &args.trace {
        let trace = plait_runtime::trace::chrome_trace(&report.schedule, &report.spans);
        std::fs::write(path, serde_json::to_string(&trace)?)
            .with_context(|| format!("--trace: cannot write `{}`", path.display()))?;
        out += &format!("wrote {} (--trace)\n", path.display());
    }
    if let Some(path) = &args.json_log {
        out += &format!("wrote {} (--json-log)\n", path.display());
    }
    if let Some(last) = report.checkpoints.last() {
        out += &format!("checkpoint: {}\n", last.display());
    }
    Ok(out)
}

/// Opens the step log: a new file, or (resuming after `resumed_step`) the existing one
/// without the lines of later steps, which the resumed run writes again.
fn open_log(path: &PathBuf, resumed_step: Option<u64>) -> Result<BufWriter<File>> {
    let cannot = || format!("--json-log: cannot write `{}`", path.display());
    let kept = match resumed_step {
        None => String::new(),
        Some(step) => match std::fs::read_to_string(path) {
            Ok(text) => text
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v.get("step").and_then(serde_json::Value::as_u64))
                        .is_some_and(|s| s <= step)
                })
                .map(|l| format!("{l}\n"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("--json-log: cannot read `{}`", path.display()))
            }
        },
    };
    let mut w = BufWriter::new(File::create(path).with_context(cannot)?);
    w.write_all(kept.as_bytes())
        .and_then(|_| w.flush())
        .with_context(cannot)?;
    Ok(w)
}

/// The run in a few lines: losses at tenths of the run, speed.
fn summary(
    cfg: &TrainConfig,
    r: &plait_runtime::TrainReport,
    workers: usize,
    elapsed_s: f64,
    source: &str,
) -> String {
    let mut s = format!(
        "{} ({:.2} M parameters) on {workers} CPU worker{}, schedule {}, {} micro-batches of {} × {} tokens per step, data: {source}\n",
        cfg.model.name,
        cfg.model.parameter_count() as f64 / 1e6,
        if workers == 1 { "" } else { "s" },
        r.schedule.name,
        r.schedule.microbatches,
        cfg.parallel.mbs,
        cfg.seq,
    );
    if r.resumed_from > 0 {
        s += &format!("resumed after step {}\n", r.resumed_from);
    }
    let n = r.logs.len();
    if n == 0 {
        s += "no steps run\n";
        return s;
    }
    s += "   step      loss  tokens/s\n";
    let mut shown = Vec::new();
    for k in 0..=10 {
        let i = (k * (n - 1)) / 10;
        if !shown.contains(&i) {
            shown.push(i);
            let l = &r.logs[i];
            s += &format!("{:>7} {:>9.4} {:>9.0}\n", l.step, l.loss, l.tokens_per_s);
        }
    }
    let first = r.logs[0].loss;
    let last = r.logs[n - 1].loss;
    let tokens: u64 = r.logs.iter().map(|l| l.tokens).sum();
    s += &format!(
        "loss {first:.4} → {last:.4} ({:.1} % of the first) in {n} steps, {elapsed_s:.1} s, {:.0} tokens/s\n",
        100.0 * last / first,
        tokens as f64 / elapsed_s
    );
    s
}

/// `--schedule` over a plan's own: a schedule of a fixed chunk count (ZB-V: two) also sets
/// vp where the plan runs one chunk per rank, as `estimate --schedule zb-v` does.
fn override_schedule(config: &mut plait_spec::ParallelConfig, s: Schedule) {
    config.schedule = s;
    config.vp = s.chunks_per_rank((config.vp > 1).then_some(config.vp));
}
