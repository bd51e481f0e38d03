//! `plait plan`: search every parallel configuration of the GPUs and print the best plans,
//! or why nothing fits and what would; optionally write the launch configuration for a
//! training engine.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use indicatif::{ProgressBar, ProgressStyle};
use plait_spec::DeviceMeshShape;
use serde::Serialize;

use plait_planner::export::{export, Engine};
use plait_planner::{plan, simulate_mapped, Infeasible, Pins, Plan, Request, SearchStats};
use plait_spec::{Recompute, Schedule, TrainSpec};

use crate::inputs::{bounded, parse_keyword, positive, KnobArgs, WorkloadArgs};
use crate::outputs::{write_pictures, Pictures};
use crate::simulate_cmd::placement;
use plait_spec::GIB;

/// Configuration flags given to `plan` pin that dimension; the search covers the rest.
#[derive(Debug, Args)]
pub struct PinArgs {
    #[command(flatten)]
    pub knobs: KnobArgs,
    /// Require Megatron sequence parallelism.
    #[arg(long, conflicts_with = "no_sp")]
    pub sp: bool,
    /// Forbid sequence parallelism.
    #[arg(long)]
    pub no_sp: bool,
    /// none, selective, full, or auto (the planner picks per stage); or Megatron-Core's
    /// selective modules joined by + (e.g. core_attn+mla_up_proj+moe, engine megatron).
    #[arg(long, default_value = "auto")]
    pub recompute: String,
    // Its help lists the kinds `plait-schedule` knows, with their rules.
    #[arg(long, value_parser = parse_keyword::<Schedule>, help = crate::inputs::schedule_help("--vp", "pp"))]
    pub schedule: Option<Schedule>,
}

/// Most plans `--top`/`--simulate` may ask for: each is simulated event by event (16 by
/// default). gpt-1.7b, 65,536 sequences on 8 GPUs, two cores: 256 took 1.4 s, 1,024 took
/// 51 s.
const MAX_SIMULATED: u64 = 256;
const SIMULATED_WHY: &str = "the simulator re-ranks (each plan is a full event simulation)";
/// Most search threads: far beyond any machine's cores (rayon gives each a stack).
const MAX_THREADS: u64 = 1024;

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub pins: PinArgs,
    /// Plans to show.
    #[arg(long, allow_negative_numbers = true, default_value_t = 5)]
    pub top: i64,
    /// Candidates re-ranked by the event simulator at a time: batches of this many until
    /// --top plans survive, each batch's after the earlier ones'.
    #[arg(long, allow_negative_numbers = true, default_value_t = 16)]
    pub simulate: i64,
    /// Worker threads for the search (default: all cores). The plan does not depend on it.
    #[arg(long, allow_negative_numbers = true)]
    pub threads: Option<i64>,
    /// Write the best plan's launch configuration: megatron, deepspeed, torchtitan (0.3's
    /// Python config module) or torchtitan-0.2 (its TOML). The search then keeps to what
    /// that engine can run.
    #[arg(long, value_parser = parse_keyword::<Engine>)]
    pub export: Option<Engine>,
    /// Directory for --export files.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Timeline of the best plan.
    #[command(flatten)]
    pub pictures: Pictures,
}

impl PlanArgs {
    /// `--top`, bounded as `--simulate` is: every plan shown was simulated.
    fn top(&self) -> Result<usize, plait_spec::SpecError> {
        Ok(bounded("top", self.top, MAX_SIMULATED, SIMULATED_WHY)? as usize)
    }
}

impl PinArgs {
    fn resolve(&self) -> Result<Pins> {
        let zero = match self.knobs.zero {
            Some(z) if !(0..=3).contains(&z) => {
                bail!("--zero: ZeRO stage {z} does not exist (allowed: 0|1|2|3)")
            }
            z => z.map(|z| z as u8),
        };
        let (recompute, recompute_modules) = match self.recompute.to_ascii_lowercase().as_str() {
            "auto" => (None, None),
            other => {
                let (r, modules) = plait_spec::parse_recompute(other)
                    .map_err(|e| anyhow::anyhow!("--recompute: {e} (or auto)"))?;
                (Some(r), Some(modules))
            }
        };
        Ok(Pins {
            zero,
            sp: if self.sp {
                Some(true)
            } else if self.no_sp {
                Some(false)
            } else {
                None
            },
            recompute,
            recompute_modules,
            schedule: self.schedule,
            ..self.knobs.pins()?
        })
    }
}

#[derive(Serialize)]
struct PlanJson<'a> {
    model: &'a str,
    cluster: &'a str,
    gpus: u64,
    plans: Vec<PlanEntry<'a>>,
    search: SearchJson,
    infeasible: Option<&'a Infeasible>,
    exported: Vec<String>,
    /// What the engine's own switches would do to the best plan (`what_if`).
    what_if: Vec<WhatIf>,
    /// Where nothing fits: the best plan with the optimizer state offloaded, if one fits.
    #[serde(skip_serializing_if = "Option::is_none")]
    if_offloaded: Option<OffloadedPlan>,
}

/// The best plan of the same request with a share of the optimizer state in host memory
/// (`--optimizer-offload F`).
#[derive(Serialize)]
struct OffloadedPlan {
    /// Fits with the allocator's average fragmentation.
    #[serde(skip)]
    roomy: bool,
    optimizer_offload: f64,
    config_text: String,
    iteration_time_s: f64,
    peak_memory_bytes: f64,
    host_memory_bytes: f64,
}

/// The shares of the optimizer state `plan` tries in host memory where nothing fits on the
/// GPUs: quarters, as Megatron-Core's `--optimizer-offload-fraction` and DeepSpeed's
/// `offload_optimizer.ratio` take any share (a smaller share steps less of the optimizer on
/// the CPU and moves fewer bytes over the host link; a larger one frees more GPU memory).
const OFFLOAD_SHARES: [f64; 4] = [0.25, 0.5, 0.75, 1.0];

/// Where no plan fits with the optimizer state on the GPU, the best plan that fits with a
/// share of it offloaded ([`OFFLOAD_SHARES`]): of each share's first plan (as `plan` with that
/// share orders them), one that fits with the allocator's fragmentation before one that
/// does not, then the fastest, ties to the smaller share. Asked only
/// under an engine with a CPU optimizer, on a cluster that gives its host memory, for a
/// request that did not offload already (and whose pins allow it).
fn if_offloaded(req: &Request) -> Option<OffloadedPlan> {
    let t = req.train;
    if t.optimizer_offload > 0.0 || !t.engine.offloads_optimizer() {
        return None;
    }
    let mut best: Option<OffloadedPlan> = None;
    for share in OFFLOAD_SHARES {
        let offloaded = TrainSpec {
            optimizer_offload: share,
            ..t.clone()
        };
        // The run as it is with this share offloaded: what the engine and the cluster allow.
        if plait_spec::ParallelConfig::check_optimizer_offload_train(&offloaded).is_err()
            || plait_cost::check_offload_host(req.cluster, &offloaded).is_err()
        {
            continue;
        }
        // The plan `plait plan --optimizer-offload SHARE` would put first.
        let probe = Request {
            train: &offloaded,
            top: 1,
            ..req.clone()
        };
        let Ok(outcome) = plan(&probe, &|_, _| {}) else {
            continue;
        };
        let Some(plan) = outcome.plans.first() else {
            continue;
        };
        // A plan that fits with the allocator's average fragmentation beats one that fits
        // only without it, as in the plan's own order; then the faster.
        let key = |roomy: bool, step_s: f64| (!roomy, step_s);
        let roomy = plan.estimate.fits_with_fragmentation();
        if best.as_ref().is_none_or(|b| {
            key(roomy, plan.estimate.iteration_time_s) < key(b.roomy, b.iteration_time_s)
        }) {
            best = Some(OffloadedPlan {
                roomy,
                optimizer_offload: share,
                config_text: plan.config.to_string(),
                iteration_time_s: plan.estimate.iteration_time_s,
                peak_memory_bytes: plan.estimate.peak_memory_bytes,
                host_memory_bytes: plan.estimate.host_memory_bytes,
            });
        }
    }
    best
}

/// The best plan's step with one engine switch the request left off.
#[derive(Serialize)]
struct WhatIf {
    flag: &'static str,
    iteration_time_s: f64,
    /// Relative change of the step (negative: faster).
    change: f64,
}

/// What the engine's own switches, left off by the request, would do to `best` (the plan's
/// own layout estimated with and without each): torchtitan's `--compile` for an eager run,
/// then `--async-tp` for a compiled one whose tp runs over sequence parallelism.
/// (Megatron-Core's expert dispatcher and all-to-all overlap are knobs of the plan, which
/// the search picks.)
fn what_if(r: &crate::inputs::Resolved, best: &Plan) -> Result<Vec<WhatIf>> {
    let t = &r.train;
    let step = |train: &TrainSpec| {
        plait_cost::estimate_mapped(
            &r.model,
            &r.cluster,
            train,
            &best.config,
            &r.device,
            &best.stage_map,
        )
        .map(|e| e.iteration_time_s)
    };
    let switch = if !t.engine.compiles() {
        None
    } else if !t.compile {
        let compiled = TrainSpec {
            compile: true,
            ..t.clone()
        };
        Some(("--compile", compiled))
    } else if !t.async_tp && best.config.tp > 1 && best.config.sp {
        let async_tp = TrainSpec {
            async_tp: true,
            ..t.clone()
        };
        Some(("--async-tp", async_tp))
    } else {
        None
    };
    let Some((flag, train)) = switch else {
        return Ok(Vec::new());
    };
    // The plan's step may be simulated: the closed forms give the relative change, which
    // scales the step the table shows.
    let change = step(&train)? / step(t)? - 1.0;
    Ok(vec![WhatIf {
        flag,
        iteration_time_s: best.estimate.iteration_time_s * (1.0 + change),
        change,
    }])
}

#[derive(Serialize)]
struct PlanEntry<'a> {
    #[serde(flatten)]
    plan: &'a Plan,
    reason: Option<String>,
    /// Per pipeline rank and chunk: its virtual stage and its fully recomputed blocks
    /// (the stage map's placement, as `plait.torch` executes it).
    virtual_stages: Vec<Vec<u64>>,
    chunk_recompute_blocks: Vec<Vec<u64>>,
    /// The configuration as a plan string (`--config` and `plait train --plan` parse it
    /// back) and its device mesh, outermost dimension first (torch's `init_device_mesh`).
    config_text: String,
    mesh: DeviceMeshShape,
}

#[derive(Serialize)]
struct SearchJson {
    #[serde(flatten)]
    stats: SearchStats,
    elapsed_s: f64,
    threads: usize,
}

pub fn run(args: &PlanArgs) -> Result<String> {
    if args.workload.is_onnx() {
        return run_onnx(args);
    }
    // `--export X` plans under engine X, and an fp8 run under the float8 recipe X runs.
    let mut engine = plait_spec::Engine::Megatron;
    let float8 = args
        .export
        .and_then(plait_planner::export::float8_recipe_of);
    if let Some(export) = args.export {
        let under = plait_planner::export::runs_under(export);
        match args.workload.engine {
            Some(e) if e != under => bail!(
                "--engine {e} contradicts --export {export}, which plans under engine {under} (allowed: --engine {under} or no --engine)"
            ),
            _ => engine = under,
        }
    }
    let r = args.workload.resolve_under(engine, float8)?;
    let Some(gpus) = args.workload.gpus()? else {
        bail!("--gpus: plan needs the number of GPUs to split the work over (integers ≥ 1)");
    };
    let pins = args.pins.resolve()?;
    // Plans shown and simulated: each simulated candidate costs a full event simulation, so
    // the count is bounded (the default simulates 16).
    let top = args.top()?;
    let simulate = bounded("simulate", args.simulate, MAX_SIMULATED, SIMULATED_WHY)? as usize;
    let threads = match args.threads {
        Some(n) => bounded(
            "threads",
            n,
            MAX_THREADS,
            "the search can use (each thread has a stack of its own)",
        )? as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let engine = args.export;
    // The planner keeps to what the engine it plans under can run (`--export X` plans
    // under X).
    let runs_on = r.train.engine;
    let mut req = Request::new(&r.model, &r.cluster, &r.train, &r.device, gpus);
    req.pins = pins;
    req.top = top;
    // The planner simulates `simulate` candidates at a time until `top` plans survive, each
    // batch ranked after the earlier ones: more plans shown do not reorder the first.
    req.simulate = simulate;

    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("searching {bar:30} {pos}/{len} configurations")
            .expect("static template"),
    );
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("cannot start the search threads")?;
    let outcome = pool.install(|| {
        plan(&req, &|done, total| {
            // Only draw when the search takes longer than a moment.
            if started.elapsed().as_secs_f64() > 0.3 {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
        })
    })?;
    let elapsed_s = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    if let (Some(engine), 0) = (engine, outcome.search.candidates) {
        bail!(
            "--export {engine}: {engine} can run none of the configurations of {gpus} GPUs that the given flags allow"
        );
    }
    if outcome.search.candidates == 0 && runs_on == plait_spec::Engine::Fsdp {
        bail!(
            "--engine fsdp: FSDP shards data-parallel only (tp = pp = cp = ep = 1), and no such configuration of {gpus} GPUs matches the batch of {} sequences and the given flags (allowed: a GPU count that divides the batch, or --engine megatron|deepspeed|torchtitan)",
            r.train.gbs
        );
    }

    let mut written = String::new();
    let mut exported = Vec::new();
    if let (Some(engine), Some(best)) = (engine, outcome.plans.first()) {
        let files = export(engine, best, &r.model, &r.train)?;
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("--out: cannot create `{}`", args.out.display()))?;
        for f in files {
            let path = args.out.join(&f.name);
            std::fs::write(&path, &f.contents)
                .with_context(|| format!("--out: cannot write `{}`", path.display()))?;
            written += &format!("wrote {} (--export {engine})\n", path.display());
            exported.push(path.display().to_string());
        }
    }
    if let Some(best) = outcome.plans.first() {
        if args.pictures.svg.is_some()
            || args.pictures.trace.is_some()
            || args.pictures.ir.is_some()
        {
            let owned;
            let s = match &best.simulated {
                Some(s) => s.as_ref(),
                None => {
                    owned = simulate_mapped(
                        &r.model,
                        &r.cluster,
                        &r.train,
                        &best.config,
                        &r.device,
                        &best.stage_map,
                    )?;
                    &owned
                }
            };
            let title = format!(
                "{} on {gpus} × {}: {}",
                r.model.name, r.cluster.gpu.name, best.config
            );
            written += &write_pictures(&args.pictures, &s.schedule, &s.simulation, Some(&title))?;
        }
    }

    let what_if = match outcome.plans.first() {
        Some(best) => what_if(&r, best)?,
        None => Vec::new(),
    };
    let if_offloaded = match &outcome.infeasible {
        Some(inf) if inf.cause == plait_planner::Cause::OutOfMemory => {
            pool.install(|| if_offloaded(&req))
        }
        _ => None,
    };
    if args.json {
        let doc = PlanJson {
            model: &r.model.name,
            cluster: &r.cluster.name,
            gpus,
            plans: outcome
                .plans
                .iter()
                .map(|p| {
                    let (virtual_stages, chunk_recompute_blocks) =
                        placement(&p.stage_map, p.config.pp, p.config.vp);
                    PlanEntry {
                        plan: p,
                        reason: p.estimate.reason(),
                        virtual_stages,
                        chunk_recompute_blocks,
                        config_text: p.config.to_string(),
                        mesh: p.config.device_mesh(),
                    }
                })
                .collect(),
            search: SearchJson {
                stats: outcome.search,
                elapsed_s,
                threads,
            },
            infeasible: outcome.infeasible.as_ref(),
            exported,
            what_if,
            if_offloaded,
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }

    let mut out = format!(
        "plait plan: {} ({}) on {gpus} × {} ({}), {} sequences × {} tokens, {}, engine {}{}\ncluster: {}\n",
        r.model.name,
        crate::estimate_cmd::parameters_line(&r.model),
        r.cluster.gpu.name,
        r.cluster.name,
        r.train.gbs,
        r.train.seq,
        crate::estimate_cmd::format_name(&r.train),
        r.train.engine,
        crate::estimate_cmd::offload_note(&r.train),
        crate::estimate_cmd::node_line(&r.cluster)
    );
    let s = &outcome.search;
    out += &format!(
        "searched {} configurations ({} pruned by memory bounds, {} estimates, {} fit, {} simulated) in {:.3} s on {threads} threads\n\n",
        s.candidates, s.pruned, s.estimated, s.feasible, s.simulated, elapsed_s
    );
    if let Some(inf) = &outcome.infeasible {
        out += &format!("NO PLAN FITS: {}\n", inf.reason);
        out += &infeasible_bounds(inf, gpus);
        if let Some(o) = &if_offloaded {
            out +=
                &format!(
                "with {} of the optimizer state in host memory (optimizer offload {}) the best \
                 plan fits: {} at {:.3} s per step, {:.1} GiB per GPU and {:.1} GiB of host \
                 memory each\n",
                if o.optimizer_offload < 1.0 { "a share" } else { "all" },
                o.optimizer_offload,
                o.config_text,
                o.iteration_time_s,
                o.peak_memory_bytes / GIB,
                o.host_memory_bytes / GIB
            );
        }
        return Ok(out);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY).set_header([
        "#",
        "configuration",
        "layout",
        "step (band)",
        "tokens/s",
        "TFLOP/s/GPU",
        "MFU",
        "GiB (worst)",
    ]);
    let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
    for (i, p) in outcome.plans.iter().enumerate() {
        let e = &p.estimate;
        table.add_row([
            Cell::new(i + 1),
            Cell::new(p.config.to_string()),
            Cell::new(layout(p)),
            right(format!(
                "{:.3} s ({:.2}–{:.2})",
                e.iteration_time_s, e.iteration_time_low_s, e.iteration_time_high_s
            )),
            right(format!("{:.0}", e.tokens_per_s)),
            right(format!("{:.1}", e.tflops_per_gpu)),
            right(format!("{:.1} %", e.mfu * 100.0)),
            right(format!("{:.1}", e.peak_memory_bytes / GIB)),
        ]);
    }
    out += &format!("{table}\n");
    for (i, p) in outcome.plans.iter().enumerate() {
        out += &format!("{}. {}\n", i + 1, p.notes.join("; "));
    }
    for w in &what_if {
        out += &format!(
            "with {} plan 1 would take {:.3} s ({:+.1} %)\n",
            w.flag,
            w.iteration_time_s,
            100.0 * w.change
        );
    }
    out += &written;
    Ok(out)
}

/// "even" or the blocks per stage, with the fully recomputed blocks when they vary.
fn layout(p: &Plan) -> String {
    let m = &p.stage_map;
    let blocks = if m.is_even() {
        format!("{}×{}", m.chunk_blocks.len(), m.chunk_blocks[0])
    } else {
        format!("{:?}", m.chunk_blocks)
    };
    let recomputed: u64 = m.recompute_blocks.iter().sum();
    if recomputed == 0 || p.config.recompute == Recompute::Full {
        blocks
    } else {
        format!("{blocks}, full recompute {:?}", m.recompute_blocks)
    }
}

/// `plait plan --model model.onnx`: data parallel × pipeline stages cut by the optimal DAG
/// partitioner; `--gbs` counts executions of the graph (its own batch each).
fn run_onnx(args: &PlanArgs) -> Result<String> {
    let w = &args.workload;
    let Some(gpus) = w.gpus()? else {
        bail!("--gpus: plan needs the number of GPUs to split the work over (integers ≥ 1)");
    };
    let batches = positive("gbs", w.gbs)?;
    let top = args.top()?;
    if args.export.is_some() {
        bail!("--export: engines take transformer specs; an ONNX model has no engine export");
    }
    let (cluster, device) = w.resolve_cluster()?;
    let bytes = crate::inputs::read_bytes(
        std::path::Path::new(&w.model),
        crate::inputs::MAX_ONNX_BYTES,
    )
    .with_context(|| format!("--model: cannot read `{}`", w.model))?;
    let graph = plait_partition::onnx::import(
        &bytes,
        &w.model,
        &plait_partition::onnx::Costs::new(&device, &cluster),
    )?;
    let max_pp = args
        .pins
        .knobs
        .degree(plait_spec::Degree::Pp)
        .map(|p| positive("pp", p))
        .transpose()?
        .unwrap_or(64);
    let started = Instant::now();
    let out = plait_planner::dag::plan_graph(&graph, &cluster, gpus, batches, max_pp, top)?;
    let elapsed_s = started.elapsed().as_secs_f64();
    if args.json {
        let doc = serde_json::json!({
            "model": w.model,
            "cluster": cluster.name,
            "gpus": gpus,
            "nodes": graph.nodes.len(),
            "plans": out.plans,
            "search": { "candidates": out.candidates, "elapsed_s": elapsed_s },
            "infeasible": out.infeasible,
        });
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    let mut text = format!(
        "plait plan: {} ({} nodes) on {gpus} × {} ({}), {batches} executions per iteration\n\
         searched {} dp × pp splits in {elapsed_s:.3} s\n\n",
        w.model,
        graph.nodes.len(),
        cluster.gpu.name,
        cluster.name,
        out.candidates
    );
    if let Some(reason) = &out.infeasible {
        text += &format!("NO PLAN FITS: {reason}\n");
        return Ok(text);
    }
    let mut table = Table::new();
    table.load_preset(UTF8_BORDERS_ONLY).set_header([
        "#",
        "dp",
        "pp",
        "micro-batches",
        "step",
        "samples/s",
        "bottleneck",
        "bubble",
        "dp comm",
    ]);
    let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
    for (i, p) in out.plans.iter().enumerate() {
        table.add_row([
            Cell::new(i + 1),
            right(p.dp.to_string()),
            right(p.pp.to_string()),
            right(p.microbatches.to_string()),
            right(format!("{:.3} ms", p.iteration_time_s * 1e3)),
            right(format!("{:.0}", p.samples_per_s)),
            right(format!("{:.3} ms", p.bottleneck_s * 1e3)),
            right(format!("{:.3} ms", p.pipeline_bubble_s * 1e3)),
            right(format!("{:.3} ms", p.dp_comm_s * 1e3)),
        ]);
    }
    text += &format!("{table}\n");
    if let Some(best) = out.plans.first() {
        for (k, s) in best.partition.stages.iter().enumerate() {
            text += &format!(
                "stage {k}: {} nodes, load {:.3} ms, {:.2} GiB\n",
                s.ids.len(),
                s.load * 1e3,
                s.memory_bytes / GIB
            );
        }
    }
    Ok(text)
}

/// The second line of a "NO PLAN FITS" answer: what memory it needs, and the nearest GPU
/// counts that do have a plan.
fn infeasible_bounds(inf: &plait_planner::Infeasible, gpus: u64) -> String {
    let state = format!(
        "the model state alone needs ≥ {} GPUs",
        inf.min_gpus_lower_bound
    );
    let mut out = match inf.cause {
        plait_planner::Cause::OutOfMemory => format!(
            "needs at least {:.1} GiB per GPU with {gpus} GPU{}; {state}",
            inf.min_memory_bytes / GIB,
            if gpus == 1 { "" } else { "s" },
        ),
        _ => state,
    };
    out += &match (inf.max_gpus_below, inf.min_gpus) {
        (Some(b), Some(a)) => format!("; the nearest GPU counts with a plan are {b} and {a}\n"),
        // The probe stops at 2^20 GPUs, so above it "smaller" is as far as it looked.
        (Some(b), None) if gpus > 1 << 20 => {
            format!("; the largest GPU count up to 2^20 with a plan is {b}\n")
        }
        (Some(b), None) => format!("; the largest smaller GPU count with a plan is {b}\n"),
        (None, Some(a)) => format!("; the smallest GPU count with a plan is {a}\n"),
        (None, None) => "; no GPU count up to 2^20 has a plan\n".to_string(),
    };
    out
}
