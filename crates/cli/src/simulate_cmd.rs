//! `plait simulate`: one configuration of a real model through the event simulator — the
//! iteration time and per-GPU memory as the schedule actually unfolds, next to the closed
//! forms, with the timeline as SVG or Perfetto trace.

use anyhow::Result;
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::Estimate;
use plait_planner::{simulate_mapped, Simulated};
use plait_schedule::RankReport;

use crate::inputs::{ConfigArgs, WorkloadArgs};
use crate::outputs::{write_pictures, Pictures};
use plait_spec::{StageMap, GIB};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub pictures: Pictures,
}

#[derive(Serialize)]
struct StageJson<'a> {
    #[serde(flatten)]
    simulated: &'a RankReportSummary,
    modelled_peak_memory_bytes: f64,
    blocks: u64,
}

#[derive(Serialize)]
struct RankReportSummary {
    busy_s: f64,
    idle_s: f64,
    peak_memory_bytes: f64,
    peak_inflight_microbatches: f64,
}

impl From<&RankReport> for RankReportSummary {
    fn from(r: &RankReport) -> Self {
        RankReportSummary {
            busy_s: r.busy_s,
            idle_s: r.idle_s,
            peak_memory_bytes: r.peak_memory_bytes,
            peak_inflight_microbatches: r.peak_inflight_microbatches,
        }
    }
}

#[derive(Serialize)]
struct SimulateJson<'a> {
    model: &'a str,
    cluster: &'a str,
    gpus: u64,
    /// The estimate with the simulated iteration and memory (same fields as `estimate`).
    #[serde(flatten)]
    estimate: &'a Estimate,
    reason: Option<String>,
    makespan_s: f64,
    bubble_fraction: f64,
    closed_form_iteration_time_s: f64,
    instructions: usize,
    simulated_stages: Vec<StageJson<'a>>,
    critical_path: Vec<String>,
    /// The block layout simulated (and executed by `plait.torch`): `chunk_blocks` per
    /// virtual stage, `recompute_blocks` per pipeline rank, and per rank and chunk its
    /// virtual stage and fully recomputed blocks.
    stage_map: StageMapJson,
    /// The device mesh, outermost dimension first (torch's `init_device_mesh`).
    mesh: plait_spec::DeviceMeshShape,
}

#[derive(Serialize)]
struct StageMapJson {
    #[serde(flatten)]
    map: StageMap,
    virtual_stages: Vec<Vec<u64>>,
    chunk_recompute_blocks: Vec<Vec<u64>>,
}

impl StageMapJson {
    fn new(map: StageMap, pp: u64, vp: u64) -> Self {
        let (virtual_stages, chunk_recompute_blocks) = placement(&map, pp, vp);
        StageMapJson {
            virtual_stages,
            chunk_recompute_blocks,
            map,
        }
    }
}

/// Per pipeline rank and chunk: its virtual stage, and its blocks recomputed in full.
pub(crate) fn placement(map: &StageMap, pp: u64, vp: u64) -> (Vec<Vec<u64>>, Vec<Vec<u64>>) {
    let per_rank = |f: &dyn Fn(u64, u64) -> u64| -> Vec<Vec<u64>> {
        (0..pp)
            .map(|r| (0..vp).map(|c| f(r, c)).collect())
            .collect()
    };
    (
        per_rank(&|r, c| map.placement.virtual_stage(r, c, pp)),
        per_rank(&|r, c| map.chunk_recompute_blocks(r, c, pp)),
    )
}

pub fn run(args: &SimulateArgs) -> Result<String> {
    let r = args.workload.resolve()?;
    let gpus = args.workload.gpus()?;
    let config = args.config.resolve(gpus)?;
    if let Some(g) = gpus {
        config.validate(&r.model, &r.train, g)?;
    }
    let map = args.config.stage_map(&r.model, &r.train, &config)?;
    let s = simulate_mapped(&r.model, &r.cluster, &r.train, &config, &r.device, &map)?;
    let title = format!(
        "{} on {} × {}: {config}",
        r.model.name,
        config.gpus(),
        r.cluster.gpu.name
    );
    let written = write_pictures(&args.pictures, &s.schedule, &s.simulation, Some(&title))?;
    if args.json {
        let summaries: Vec<RankReportSummary> = s
            .simulation
            .ranks
            .iter()
            .map(RankReportSummary::from)
            .collect();
        let doc = SimulateJson {
            model: &r.model.name,
            cluster: &r.cluster.name,
            gpus: config.gpus(),
            estimate: &s.estimate,
            reason: s.estimate.reason(),
            makespan_s: s.simulation.makespan_s,
            bubble_fraction: s.simulation.bubble_fraction,
            closed_form_iteration_time_s: s.closed_form.iteration_time_s,
            instructions: s.schedule.len(),
            simulated_stages: summaries
                .iter()
                .zip(&s.closed_form.stages)
                .map(|(sim, st)| StageJson {
                    simulated: sim,
                    modelled_peak_memory_bytes: st.peak_memory_bytes,
                    blocks: st.blocks,
                })
                .collect(),
            critical_path: critical_path(&s),
            // The map simulate_config lays the blocks out by.
            stage_map: StageMapJson::new(
                StageMap::uniform(r.model.layers, &config),
                config.pp,
                config.vp,
            ),
            mesh: config.device_mesh(),
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    Ok(render(&title, &s) + &written)
}

/// The critical path as "stage k: instruction" lines.
fn critical_path(s: &Simulated) -> Vec<String> {
    s.simulation
        .critical_path
        .iter()
        .map(|&i| {
            let span = &s.simulation.spans[i as usize];
            format!("stage {}: {}", span.rank, span.instr)
        })
        .collect()
}

fn render(title: &str, s: &Simulated) -> String {
    let e = &s.estimate;
    let sim = &s.simulation;
    let mut out = format!(
        "plait simulate: {title}\n{} schedule, {} micro-batches, {} instructions\n\n",
        s.schedule.name,
        e.microbatches,
        s.schedule.len()
    );
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY).set_header([
        "stage",
        "blocks",
        "busy",
        "idle %",
        "peak in flight",
        "peak GiB (sim)",
        "peak GiB (model)",
    ]);
    let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
    for (k, (rank, stage)) in sim.ranks.iter().zip(&s.closed_form.stages).enumerate() {
        table.add_row([
            Cell::new(k),
            right(stage.blocks.to_string()),
            right(format!("{:.3} s", rank.busy_s)),
            right(format!("{:.1}", 100.0 * rank.idle_s / sim.makespan_s)),
            right(format!("{:.2}", rank.peak_inflight_microbatches)),
            right(format!("{:.2}", rank.peak_memory_bytes / GIB)),
            right(format!("{:.2}", stage.peak_memory_bytes / GIB)),
        ]);
    }
    out += &format!("{table}\n");
    out += &format!(
        "iteration: {:.3} s simulated (band {:.3}–{:.3} s, engine {}) vs {:.3} s closed form ({:+.1} %) · bubble fraction {:.1} %\n",
        e.iteration_time_s,
        e.iteration_time_low_s,
        e.iteration_time_high_s,
        e.engine,
        s.closed_form.iteration_time_s,
        100.0 * (e.iteration_time_s / s.closed_form.iteration_time_s - 1.0),
        100.0 * sim.bubble_fraction,
    );
    out += &format!(
        "throughput: {:.0} tokens/s · {:.1} model TFLOP/s per GPU · MFU {:.1} %\n",
        e.tokens_per_s,
        e.tflops_per_gpu,
        100.0 * e.mfu
    );
    let path = &sim.critical_path;
    if let (Some(&first), Some(&last)) = (path.first(), path.last()) {
        let (a, b) = (&sim.spans[first as usize], &sim.spans[last as usize]);
        out += &format!(
            "critical path: {} spans, from stage {} {} to stage {} {}\n",
            path.len(),
            a.rank,
            a.instr,
            b.rank,
            b.instr
        );
    }
    match e.reason() {
        None => {
            out += &format!(
                "fits: {:.1} GiB free on the fullest GPU (stage {})\n",
                (e.memory_capacity_bytes - e.peak_memory_bytes) / GIB,
                e.worst_stage
            )
        }
        Some(reason) => out += &format!("DOES NOT FIT: {reason}\n"),
    }
    out
}
