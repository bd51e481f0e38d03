//! `plait schedule`: a pipeline schedule over identical synthetic stages, for teaching and
//! testing — the makespan, bubble and in-flight micro-batches, with the timeline as SVG or
//! Perfetto trace.

use anyhow::{bail, Result};
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::pipeline::{pipeline_time, StageTime};
use plait_schedule::generate::{MAX_STAGES, MAX_STEPS};
use plait_schedule::{generate, simulate, validate, Costs, GenerateError, ScheduleSpec};
use plait_spec::Schedule;

use crate::inputs::{parse_keyword, positive};
use crate::outputs::{write_pictures, Pictures};

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    // Its help lists the kinds `plait-schedule` knows, with their rules.
    #[arg(long, default_value = "1f1b", value_parser = parse_keyword::<Schedule>, help = crate::inputs::schedule_help("--virtual", "--stages"))]
    pub schedule: Schedule,
    /// Pipeline stages (ranks) p.
    #[arg(long, allow_negative_numbers = true, default_value_t = 4)]
    pub stages: i64,
    /// Micro-batches m per iteration.
    #[arg(long, allow_negative_numbers = true, default_value_t = 8)]
    pub microbatches: i64,
    /// One micro-batch's forward time on one rank (all its chunks).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1.0)]
    pub forward: f64,
    /// One micro-batch's full backward time on one rank (input and weight gradients).
    #[arg(long, allow_negative_numbers = true, default_value_t = 2.0)]
    pub backward: f64,
    /// The weight-gradient part of --backward (zero-bubble schedules defer it). Default:
    /// the schedule's own share (half under zb-h1, none otherwise).
    #[arg(long, allow_negative_numbers = true)]
    pub weight: Option<f64>,
    /// Recompute time per micro-batch before each backward (0: no recomputation).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.0)]
    pub recompute: f64,
    /// Transfer time of one activation or gradient between neighbouring ranks.
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.0)]
    pub comm: f64,
    /// Virtual chunks v per rank (default 1; interleaved takes any, a schedule that fixes its
    /// chunks, as the V schedules do, its own).
    #[arg(long = "virtual", allow_negative_numbers = true)]
    pub virtual_chunks: Option<i64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pictures: Pictures,
}

#[derive(Serialize)]
struct ScheduleJson {
    schedule: String,
    stages: u32,
    microbatches: u32,
    #[serde(rename = "virtual")]
    virtual_chunks: u32,
    forward: f64,
    backward: f64,
    weight: f64,
    recompute: f64,
    comm: f64,
    makespan: f64,
    /// Closed form of the same schedule (identical stages, free communication).
    closed_form_makespan: f64,
    /// Mean over stages of the share of the makespan a stage's compute is idle.
    bubble_fraction: f64,
    bubble: f64,
    peak_inflight_microbatches: Vec<f64>,
    busy: Vec<f64>,
    instructions: usize,
    critical_path: Vec<String>,
}

/// Largest time one instruction may take: at most 2^24 instructions (the generator's limit)
/// of at most this long keep every makespan, bubble and share finite (10^12 × 2^24 ≈ 1.7 ×
/// 10^19), and no schedule needs more than 10^12 of its units per step.
const MAX_TIME: f64 = 1e12;

fn time(flag: &str, v: f64) -> Result<f64> {
    if !v.is_finite() || !(0.0..=MAX_TIME).contains(&v) {
        let shown = if v == 0.0 || (1e-4..1e15).contains(&v.abs()) {
            format!("{v}")
        } else {
            format!("{v:e}")
        };
        bail!("--{flag}: must be a finite time from 0 to {MAX_TIME:e}, got {shown}");
    }
    Ok(v)
}

/// A count ≥ 1 and ≤ `max` (a limit of the schedule generator), named by its flag and shown
/// as given, before it is narrowed to the IR's u32.
fn at_most(flag: &str, v: i64, max: u64) -> Result<u32> {
    let n = positive(flag, v)?;
    if n > max {
        bail!("--{flag}: {v} is larger than the {max} a schedule supports");
    }
    Ok(n as u32)
}

pub fn run(args: &ScheduleArgs) -> Result<String> {
    let p = at_most("stages", args.stages, MAX_STAGES)?;
    let m = at_most("microbatches", args.microbatches, MAX_STEPS)?;
    let given = args
        .virtual_chunks
        .unwrap_or(args.schedule.chunks_per_rank(None) as i64);
    let v = at_most("virtual", given, MAX_STAGES)?;
    let kind = if v > 1 && args.schedule == Schedule::OneFOneB {
        Schedule::Interleaved
    } else {
        args.schedule
    };
    let f = time("forward", args.forward)?;
    let b = time("backward", args.backward)?;
    let default_w = b * kind.default_weight_share();
    let w = time("weight", args.weight.unwrap_or(default_w))?;
    if w > b {
        bail!("--weight: the weight part ({w}) cannot exceed the whole backward (--backward {b})");
    }
    let r = time("recompute", args.recompute)?;
    let comm = time("comm", args.comm)?;
    if f + b == 0.0 {
        bail!("--forward and --backward: at least one must be > 0");
    }

    let mut spec = ScheduleSpec::new(kind, p, m, v);
    if r > 0.0 {
        spec.recompute = vec![true; p as usize];
    }
    let schedule = generate(&spec).map_err(|e| match e {
        // The chunk count is this command's `--virtual`.
        GenerateError::ChunksNeedInterleaved { .. } | GenerateError::FixedChunks { .. } => {
            anyhow::anyhow!("--virtual: {e}")
        }
        e => e.into(),
    })?;
    validate(&schedule)?;
    let mut costs = Costs::uniform(p, v, f, b, w);
    for rank in &mut costs.ranks {
        for c in &mut rank.chunks {
            c.recompute_s = r / f64::from(v);
            c.send_activation_s = comm;
            c.send_gradient_s = comm;
        }
    }
    let sim = simulate(&schedule, &costs)?;
    let stage = StageTime {
        forward_s: f,
        backward_s: b + r,
        weight_grad_s: w,
        p2p_s: 0.0,
    };
    let (closed, _) = pipeline_time(kind, &vec![stage; p as usize], u64::from(m), u64::from(v));

    let written = write_pictures(&args.pictures, &schedule, &sim, None)?;
    if args.json {
        let doc = ScheduleJson {
            schedule: kind.to_string(),
            stages: p,
            microbatches: m,
            virtual_chunks: v,
            forward: f,
            backward: b,
            weight: w,
            recompute: r,
            comm,
            makespan: sim.makespan_s,
            closed_form_makespan: closed,
            bubble_fraction: sim.bubble_fraction,
            bubble: sim.bubble_s,
            peak_inflight_microbatches: sim
                .ranks
                .iter()
                .map(|r| r.peak_inflight_microbatches)
                .collect(),
            busy: sim.ranks.iter().map(|r| r.busy_s).collect(),
            instructions: schedule.len(),
            critical_path: sim
                .critical_path
                .iter()
                .map(|&i| {
                    let s = &sim.spans[i as usize];
                    format!("stage {}: {}", s.rank, s.instr)
                })
                .collect(),
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }

    let mut out = format!(
        "plait schedule: {kind}, {p} stages × {m} micro-batches{}; F = {f}, B = {b}{}{}{}\n\n",
        if v > 1 {
            format!(" × {v} chunks")
        } else {
            String::new()
        },
        if w > 0.0 {
            format!(" (W = {w})")
        } else {
            String::new()
        },
        if r > 0.0 {
            format!(", recompute {r}")
        } else {
            String::new()
        },
        if comm > 0.0 {
            format!(", p2p {comm}")
        } else {
            String::new()
        },
    );
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY).set_header([
        "stage",
        "busy",
        "idle",
        "idle %",
        "peak in flight",
    ]);
    for (k, rank) in sim.ranks.iter().enumerate() {
        table.add_row([
            Cell::new(k),
            Cell::new(format!("{:.3}", rank.busy_s)).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.3}", rank.idle_s)).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.1}", 100.0 * rank.idle_s / sim.makespan_s))
                .set_alignment(CellAlignment::Right),
            Cell::new(format!("{}", rank.peak_inflight_microbatches))
                .set_alignment(CellAlignment::Right),
        ]);
    }
    out += &format!("{table}\n");
    out += &format!(
        "makespan {:.3} (closed form {:.3}) · bubble {:.3} · bubble fraction {:.1} % · {} instructions\n",
        sim.makespan_s,
        closed,
        sim.bubble_s,
        100.0 * sim.bubble_fraction,
        schedule.len()
    );
    out += &written;
    Ok(out)
}
