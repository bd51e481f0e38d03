//! `plait mixed`: training on a mixed cluster (several groups of identical nodes, e.g. 8 DGX
//! H100 + 8 DGX A100): the best pipelines across the groups with uneven layers per GPU
//! kind, each group's best plan alone, and why they differ; or, with `--config`, the
//! estimate and simulation of one mixed plan.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::{device_for, DeviceModel, Profile};
use plait_planner::mixed::{
    estimate_mixed, layout_mixed, plan_mixed, simulate_mixed, MixedConfig, MixedEstimate,
    MixedOutcome, MixedRequest,
};
use plait_planner::Pins;
use plait_spec::{
    cluster_from_toml, cluster_preset, mixed_from_inline, mixed_from_toml, ClusterSpec,
    MixedCluster, Recompute, Schedule, SpecError, StageMap, GIB,
};

use crate::inputs::{parse_keyword, positive, read_text, WorkloadArgs, MAX_CONFIG_BYTES};
use crate::outputs::{write_pictures, Pictures};

#[derive(Debug, Args)]
pub struct MixedArgs {
    /// The mixed cluster: a TOML file (`[[group]]` tables with `cluster` = preset or cluster
    /// TOML and `nodes`; optional `[link]` with `bandwidth_gb_per_s` per GPU and
    /// `latency_us`) or presets inline, PRESET:NODES,… (e.g. dgx-h100:8,dgx-a100-80g:8).
    #[arg(long)]
    pub mixed: String,
    /// Model, batch and software (--cluster and --gpus are not used: the groups give them).
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Estimate and simulate this configuration instead of searching, in `plait plan`'s
    /// syntax (e.g. "dp2 tp8 mbs1 zero1 sp 1f1b"); pp follows from the groups (each holds
    /// its GPUs / (dp × tp) stages).
    #[arg(long)]
    pub config: Option<String>,
    /// With --config: the groups along the pipeline, by name, comma-separated (default:
    /// the file's order).
    #[arg(long, requires = "config")]
    pub order: Option<String>,
    /// With --config: blocks per stage, comma-separated (default: the planner's layout).
    #[arg(long, requires = "config")]
    pub blocks: Option<String>,
    /// With --blocks: fully recomputed blocks per stage (default: the fewest that fit).
    #[arg(long, requires = "blocks")]
    pub recompute_blocks: Option<String>,
    /// Pin the data-parallel degree (search).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "config")]
    pub dp: Option<i64>,
    /// Pin the tensor-parallel degree (search).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "config")]
    pub tp: Option<i64>,
    /// Pin the micro-batch size (search).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "config")]
    pub mbs: Option<i64>,
    /// Pin the ZeRO stage (search).
    #[arg(long, allow_negative_numbers = true, conflicts_with = "config")]
    pub zero: Option<i64>,
    /// Pin the schedule: gpipe, 1f1b, zb-h1, scp (search).
    #[arg(long, value_parser = parse_keyword::<Schedule>, conflicts_with = "config")]
    pub schedule: Option<Schedule>,
    /// Pin the recompute policy: none, selective, full (search; default: none or
    /// selective, with full recompute per stage where memory needs it).
    #[arg(long, value_parser = parse_keyword::<Recompute>, conflicts_with = "config")]
    pub recompute: Option<Recompute>,
    /// Mixed plans to show.
    #[arg(long, allow_negative_numbers = true, default_value_t = 3)]
    pub top: i64,
    /// Candidates re-ranked by the event simulator.
    #[arg(long, allow_negative_numbers = true, default_value_t = 8)]
    pub simulate: i64,
    /// Skip planning each group alone.
    #[arg(long)]
    pub no_homogeneous: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Timeline of the best (or given) plan.
    #[command(flatten)]
    pub pictures: Pictures,
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".toml") || Path::new(s).is_file()
}

/// The mixed cluster of `--mixed`: a TOML file (group clusters as presets or TOML paths,
/// relative to the file's directory when not found as given) or the inline form.
pub fn load_mixed(arg: &str) -> Result<MixedCluster> {
    if !looks_like_path(arg) {
        return Ok(mixed_from_inline(arg, "--mixed")?);
    }
    let text = read_text(Path::new(arg), MAX_CONFIG_BYTES)
        .with_context(|| format!("--mixed: cannot read `{arg}`"))?;
    let dir = Path::new(arg)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let resolve = |name: &str| -> Result<ClusterSpec, SpecError> {
        if !looks_like_path(name) {
            return cluster_preset(name);
        }
        let path = if Path::new(name).is_file() {
            Path::new(name).to_path_buf()
        } else {
            dir.join(name)
        };
        let text = read_text(&path, MAX_CONFIG_BYTES).map_err(|e| {
            SpecError::new(
                path.display().to_string(),
                "cluster",
                format!("cannot read: {e}"),
                "a preset or a readable cluster TOML file",
            )
        })?;
        cluster_from_toml(&text, &path.display().to_string())
    };
    Ok(mixed_from_toml(&text, arg, &resolve)?)
}

/// Device model per group (H200 groups with the built-in profile unless --no-profile).
fn group_devices(args: &MixedArgs, mixed: &MixedCluster) -> Result<Vec<DeviceModel>> {
    let w = &args.workload;
    if w.profile.is_some() {
        bail!("--profile: a mixed cluster uses the built-in profiles only (allowed: no --profile, or --no-profile)");
    }
    mixed
        .groups
        .iter()
        .map(|g| {
            let d = device_for(&g.cluster, w.dtype)
                .map_err(|e| anyhow::anyhow!("{e} (group {})", g.name))?;
            Ok(match Profile::builtin_for(&g.cluster.gpu) {
                Some((p, _)) if !w.no_profile => d.with_profile(&p, w.dtype),
                _ => d,
            })
        })
        .collect()
}

fn list(flag: &str, text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                anyhow::anyhow!(
                    "--{flag}: `{}` is not a count (allowed: comma-separated integers ≥ 0)",
                    v.trim()
                )
            })
        })
        .collect()
}

#[derive(Serialize)]
struct GroupJson<'a> {
    name: &'a str,
    cluster: &'a str,
    nodes: u64,
    gpus_per_node: u64,
    gpu: &'a str,
    memory_bytes: f64,
}

#[derive(Serialize)]
struct ClusterJson<'a> {
    name: &'a str,
    gpus: u64,
    groups: Vec<GroupJson<'a>>,
    link_bytes_per_s: f64,
    link_latency_s: f64,
    link_is_default: bool,
}

fn cluster_json(m: &MixedCluster) -> ClusterJson<'_> {
    ClusterJson {
        name: &m.name,
        gpus: m.gpus(),
        groups: m
            .groups
            .iter()
            .map(|g| GroupJson {
                name: &g.name,
                cluster: &g.cluster.name,
                nodes: g.nodes,
                gpus_per_node: g.cluster.gpus_per_node,
                gpu: &g.cluster.gpu.name,
                memory_bytes: g.cluster.gpu.memory_bytes,
            })
            .collect(),
        link_bytes_per_s: m.link.bandwidth_bytes_per_s,
        link_latency_s: m.link.latency_s,
        link_is_default: m.link_is_default,
    }
}

#[derive(Serialize)]
struct PlanJson<'a> {
    model: &'a str,
    cluster: ClusterJson<'a>,
    #[serde(flatten)]
    outcome: &'a MixedOutcome,
    elapsed_s: f64,
}

#[derive(Serialize)]
struct EstimateJson<'a> {
    model: &'a str,
    cluster: ClusterJson<'a>,
    mixed_config: &'a MixedConfig,
    description: String,
    stage_map: &'a StageMap,
    closed_form: &'a MixedEstimate,
    simulated: &'a MixedEstimate,
}

pub fn run(args: &MixedArgs) -> Result<String> {
    if args.workload.gpus.is_some() {
        bail!("--gpus: a mixed cluster's GPUs are its groups' (allowed: no --gpus with --mixed)");
    }
    let r = args.workload.resolve()?;
    let mixed = load_mixed(&args.mixed)?;
    let devices = group_devices(args, &mixed)?;
    let mut req = MixedRequest::new(&r.model, &mixed, &devices, &r.train);
    req.top = positive("top", args.top)? as usize;
    req.simulate = (positive("simulate", args.simulate)? as usize).max(req.top);
    req.homogeneous = !args.no_homogeneous;
    let header = format!(
        "plait mixed: {} ({:.2} B parameters) on {} = {} GPUs, {} sequences × {} tokens, {}, engine {}\nlink between groups: {:.1} GB/s per GPU, {:.0} µs{}\n",
        r.model.name,
        r.model.parameter_count() as f64 / 1e9,
        mixed.describe(),
        mixed.gpus(),
        r.train.gbs,
        r.train.seq,
        r.train.dtype,
        r.train.engine,
        mixed.link.bandwidth_bytes_per_s / 1e9,
        mixed.link.latency_s * 1e6,
        if mixed.link_is_default {
            " (default: the slower group's network)"
        } else {
            ""
        }
    );
    if let Some(text) = &args.config {
        return run_config(args, &req, text, &header);
    }
    let opt = |flag: &str, v: Option<i64>| v.map(|v| positive(flag, v)).transpose();
    req.pins = Pins {
        dp: opt("dp", args.dp)?,
        tp: opt("tp", args.tp)?,
        mbs: opt("mbs", args.mbs)?,
        zero: match args.zero {
            Some(z) if !(0..=3).contains(&z) => {
                bail!("--zero: ZeRO stage {z} does not exist (allowed: 0|1|2|3)")
            }
            z => z.map(|z| z as u8),
        },
        schedule: match args.schedule {
            Some(s) if !s.accepts_chunks(1) || s == Schedule::Interleaved => bail!(
                "--schedule: mixed plans run one chunk per rank (allowed: gpipe|1f1b|zb-h1|scp)"
            ),
            s => s,
        },
        recompute: args.recompute,
        ..Pins::default()
    };
    let started = Instant::now();
    let outcome = plan_mixed(&req)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let mut written = String::new();
    if let Some(best) = outcome.plans.first() {
        if let Some(sim) = &best.simulated {
            let title = format!("{} on {}: {}", r.model.name, mixed.name, best.description);
            written +=
                &write_pictures(&args.pictures, &sim.schedule, &sim.simulation, Some(&title))?;
        }
    }
    if args.json {
        let doc = PlanJson {
            model: &r.model.name,
            cluster: cluster_json(&mixed),
            outcome: &outcome,
            elapsed_s,
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    let mut out = header;
    out += &format!(
        "searched {} mixed candidates ({} fit, {} simulated) in {:.2} s\n\n",
        outcome.search.candidates, outcome.search.feasible, outcome.search.simulated, elapsed_s
    );
    if let Some(why) = &outcome.infeasible {
        out += &format!("{}\n", why.reason);
    }
    if !outcome.plans.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "#",
            "pipeline",
            "configuration",
            "blocks per stage",
            "step (band)",
            "tokens/s",
            "MFU",
            "GiB (tightest)",
        ]);
        for (i, p) in outcome.plans.iter().enumerate() {
            let e = &p.estimate.estimate;
            let pipeline: Vec<String> = p
                .mixed_config
                .order
                .iter()
                .zip(&p.mixed_config.stages)
                .map(|(&g, s)| format!("{}×{s}", mixed.groups[g].name))
                .collect();
            t.add_row(vec![
                Cell::new(i + 1),
                Cell::new(pipeline.join(" → ")),
                Cell::new(p.mixed_config.config.to_string()),
                Cell::new(
                    p.stage_map
                        .chunk_blocks
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                Cell::new(format!(
                    "{:.3} s ({:.2}–{:.2})",
                    e.iteration_time_s, e.iteration_time_low_s, e.iteration_time_high_s
                ))
                .set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.0}", e.tokens_per_s)).set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.1} %", 100.0 * e.mfu)).set_alignment(CellAlignment::Right),
                Cell::new(format!(
                    "{:.1} / {:.0}",
                    e.peak_memory_bytes / GIB,
                    e.memory_capacity_bytes / GIB
                ))
                .set_alignment(CellAlignment::Right),
            ]);
        }
        out += &format!("mixed plans (simulated):\n{t}\n\n");
        out += &stage_table("stages of the best plan", &outcome.plans[0].estimate);
    }
    if !outcome.homogeneous.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "group alone",
            "GPUs",
            "configuration",
            "step",
            "tokens/s",
            "MFU",
        ]);
        for h in &outcome.homogeneous {
            match &h.plan {
                Some(p) => t.add_row(vec![
                    Cell::new(&h.group),
                    Cell::new(h.gpus),
                    Cell::new(p.config.to_string()),
                    Cell::new(format!("{:.3} s", p.estimate.iteration_time_s))
                        .set_alignment(CellAlignment::Right),
                    Cell::new(format!("{:.0}", p.estimate.tokens_per_s))
                        .set_alignment(CellAlignment::Right),
                    Cell::new(format!("{:.1} %", 100.0 * p.estimate.mfu))
                        .set_alignment(CellAlignment::Right),
                ]),
                None => t.add_row(vec![
                    Cell::new(&h.group),
                    Cell::new(h.gpus),
                    Cell::new(format!(
                        "no plan: {}",
                        h.infeasible.as_deref().unwrap_or("nothing fits")
                    )),
                ]),
            };
        }
        out += &format!("homogeneous alternatives:\n{t}\n\n");
    }
    for line in &outcome.explanation {
        out += &format!("* {line}\n");
    }
    Ok(out + &written)
}

fn stage_table(title: &str, e: &MixedEstimate) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "stage",
        "group",
        "GPU",
        "blocks",
        "recomputed",
        "ms per micro-batch",
        "cross-group ms",
        "GiB",
    ]);
    for s in &e.stages {
        t.add_row(vec![
            Cell::new(s.stage),
            Cell::new(&s.group),
            Cell::new(&s.gpu),
            Cell::new(s.blocks).set_alignment(CellAlignment::Right),
            Cell::new(s.recompute_blocks).set_alignment(CellAlignment::Right),
            Cell::new(format!(
                "{:.1}{}",
                s.time_per_microbatch_s * 1e3,
                if s.stage == e.bottleneck_stage {
                    " ◀"
                } else {
                    ""
                }
            ))
            .set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.2}", s.cross_group_p2p_s * 1e3))
                .set_alignment(CellAlignment::Right),
            Cell::new(format!(
                "{:.1} / {:.0}{}",
                s.peak_memory_bytes / GIB,
                s.memory_capacity_bytes / GIB,
                if s.fits { "" } else { " ✗" }
            ))
            .set_alignment(CellAlignment::Right),
        ]);
    }
    format!("{title}:\n{t}\n\n")
}

/// `--config`: one mixed plan, its closed form and its simulation.
fn run_config(args: &MixedArgs, req: &MixedRequest, text: &str, header: &str) -> Result<String> {
    let mixed = req.mixed;
    let (c, dp) = plait_spec::parse_config_items(text).map_err(|e| {
        SpecError::new(
            "--config",
            "config",
            e,
            "the configuration syntax of `plait plan`",
        )
    })?;
    if dp.is_none() {
        bail!("--config: a mixed configuration needs its dp (e.g. \"dp2 tp8 …\"; each group holds its GPUs / (dp × tp) stages)");
    }
    let order: Vec<usize> = match &args.order {
        None => (0..mixed.groups.len()).collect(),
        Some(o) => o
            .split(',')
            .map(|n| {
                mixed.group_index(n.trim()).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--order: no group `{}` (allowed: {})",
                        n.trim(),
                        mixed
                            .groups
                            .iter()
                            .map(|g| g.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect::<Result<_>>()?,
    };
    let given_pp = c.pp;
    // Its degrees came in `--config`, not flags of their own.
    let mc = MixedConfig::new(mixed, &c, &order).map_err(|e| {
        if e.is_request_field() {
            e.in_source("--config")
        } else {
            e
        }
    })?;
    if given_pp != 1 && given_pp != mc.config.pp {
        bail!(
            "--config: pp{given_pp} contradicts the groups, which hold {} stages at dp{} tp{} (allowed: pp{} or no pp)",
            mc.config.pp,
            c.dp,
            c.tp,
            mc.config.pp
        );
    }
    let map = match &args.blocks {
        Some(b) => {
            let chunk_blocks = list("blocks", b)?;
            let recompute_blocks = match &args.recompute_blocks {
                Some(x) => list("recompute-blocks", x)?,
                None => vec![0; chunk_blocks.len()],
            };
            StageMap {
                chunk_blocks,
                recompute_blocks,
                placement: mc.config.schedule.placement(),
            }
        }
        None => match layout_mixed(req, &mc)? {
            Some(m) => m,
            None => StageMap::uniform(req.model.layers, &mc.config),
        },
    };
    let closed = estimate_mixed(req, &mc, &map)?;
    let sim = simulate_mixed(req, &mc, &map)?;
    let title = format!(
        "{} on {}: {}",
        req.model.name,
        mixed.name,
        mc.describe(mixed)
    );
    let written = write_pictures(&args.pictures, &sim.schedule, &sim.simulation, Some(&title))?;
    if args.json {
        let doc = EstimateJson {
            model: &req.model.name,
            cluster: cluster_json(mixed),
            mixed_config: &mc,
            description: mc.describe(mixed),
            stage_map: &map,
            closed_form: &closed,
            simulated: &sim.estimate,
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    let e = &sim.estimate.estimate;
    let mut out = header.to_string();
    out += &format!("plan: {}\n", mc.describe(mixed));
    out += &format!(
        "step {:.3} s simulated ({:.2}–{:.2}; closed form {:.3} s), {:.0} tokens/s, {:.1} TFLOP/s per GPU, MFU {:.1} % of all GPUs' peak\n",
        e.iteration_time_s,
        e.iteration_time_low_s,
        e.iteration_time_high_s,
        closed.estimate.iteration_time_s,
        e.tokens_per_s,
        e.tflops_per_gpu,
        100.0 * e.mfu
    );
    let b = &e.breakdown;
    out += &format!(
        "breakdown: compute {:.3} s, recompute {:.3}, tp {:.3}, pp {:.3}, bubble {:.3}, dp exposed {:.3}, optimizer {:.3}\n",
        b.compute_s, b.recompute_s, b.tp_comm_s, b.pp_comm_s, b.pipeline_bubble_s, b.dp_comm_exposed_s, b.optimizer_s
    );
    match &sim.estimate.reason {
        Some(r) => out += &format!("does not fit: {r}\n\n"),
        None => out += "fits every stage's GPU\n\n",
    }
    out += &stage_table("stages (simulated)", &sim.estimate);
    Ok(out + &written)
}
