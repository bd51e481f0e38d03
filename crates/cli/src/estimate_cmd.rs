//! `plait estimate`: one configuration's time, throughput and memory, as a table or JSON.

use anyhow::Result;
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::{estimate_mapped, first_stage_layers, Estimate, LayerReport};

use crate::inputs::{ConfigArgs, WorkloadArgs};
use plait_spec::{StageMap, GIB};

#[derive(Debug, Args)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Time the pipeline with the event simulator instead of the closed forms.
    #[arg(long)]
    pub simulate: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The JSON document of `plait estimate --json` (stable field names: see design.md).
#[derive(Serialize)]
struct EstimateJson<'a> {
    model: &'a str,
    cluster: &'a str,
    gpu: &'a str,
    gpus: u64,
    profile: Option<&'a str>,
    /// "simulated" (event simulator) or "closed-form".
    pipeline: &'static str,
    #[serde(flatten)]
    estimate: &'a Estimate,
    reason: Option<String>,
    layers: Vec<LayerReport>,
}

pub fn run(args: &EstimateArgs) -> Result<String> {
    let r = args.workload.resolve()?;
    let config = args.config.resolve(args.workload.gpus()?)?;
    if let Some(g) = args.workload.gpus()? {
        config.validate(&r.model, &r.train, g)?;
    }
    let map = args.config.stage_map(&r.model, &r.train, &config)?;
    let e = if args.simulate {
        plait_planner::simulate_mapped(&r.model, &r.cluster, &r.train, &config, &r.device, &map)?
            .estimate
    } else {
        estimate_mapped(&r.model, &r.cluster, &r.train, &config, &r.device, &map)?
    };
    if args.json {
        let doc = EstimateJson {
            model: &r.model.name,
            cluster: &r.cluster.name,
            gpu: &r.cluster.gpu.name,
            gpus: config.gpus(),
            profile: r.profile_name.as_deref(),
            pipeline: if args.simulate {
                "simulated"
            } else {
                "closed-form"
            },
            estimate: &e,
            reason: e.reason(),
            layers: first_stage_layers(&r.model, &r.cluster, &r.train, &config, &r.device),
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    Ok(render(&r, &e, &map, args.simulate))
}

fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

/// The run's numeric format as the headers print it: the dtype, and the fp8 recipe where
/// it is not the engine's default.
pub fn format_name(t: &plait_spec::TrainSpec) -> String {
    match t.fp8_recipe() {
        Some(recipe) if recipe != t.engine.default_float8_recipe() => {
            format!("{} ({recipe} scaling)", t.dtype)
        }
        _ => t.dtype.to_string(),
    }
}

/// "8.03 B parameters" (and "…, 12.88 B active per token" for MoE).
pub(crate) fn parameters_line(m: &plait_spec::ModelSpec) -> String {
    let n = |x: u64| {
        let x = x as f64;
        if x >= 1e9 {
            format!("{:.2} B", x / 1e9)
        } else {
            format!("{:.1} M", x / 1e6)
        }
    };
    let total = m.parameter_count();
    let active = m.active_parameter_count();
    if active == total {
        format!("{} parameters", n(total))
    } else {
        format!("{} parameters, {} active per token", n(total), n(active))
    }
}

/// The node: its GPU count and link, the network share of each GPU, and its host CPU with
/// the time that takes to issue one eager kernel.
pub(crate) fn node_line(c: &plait_spec::ClusterSpec) -> String {
    format!(
        "{} GPUs per node (one intra-node link domain: {:.0} GB/s per GPU per direction; \
         {:.1} GB/s network per GPU across nodes; {} host, {:.0} µs to issue an eager kernel)",
        c.gpus_per_node,
        c.intra_node.bandwidth_bytes_per_s / 1e9,
        c.inter_node.bandwidth_bytes_per_s / 1e9,
        c.host_cpu.label(),
        plait_cost::device::kernel_issue_s(c.host_cpu) * 1e6
    )
}

/// Share of the step from which waiting on kernel launches is worth a line of its own.
const LAUNCH_BOUND_SHARE: f64 = 0.05;

/// A line saying how long the GPUs wait on their host to launch kernels, where that is a
/// notable share of the step, and what removes the wait in this engine.
fn launch_bound_line(
    e: &Estimate,
    cluster: &plait_spec::ClusterSpec,
    t: &plait_spec::TrainSpec,
) -> Option<String> {
    let share = e.breakdown.launch_wait_s / e.iteration_time_s;
    (share >= LAUNCH_BOUND_SHARE).then(|| {
        let graphs = if t.engine == plait_spec::Engine::Megatron
            && t.cuda_graphs == plait_spec::CudaGraphs::None
        {
            "; `--cuda-graphs layers` replays whole layers without them"
        } else {
            ""
        };
        format!(
            "launch-bound: of the compute, {} ({:.1} % of the step) is the GPUs waiting on their {} host to launch kernels one by one; larger micro-batches spread the launches over more work{graphs}\n",
            seconds(e.breakdown.launch_wait_s),
            100.0 * share,
            cluster.host_cpu.label(),
        )
    })
}

/// Where each parallel group of `c` runs: inside one node (at the intra-node link's rate)
/// or across nodes, as the cost model places it.
fn placement_line(cluster: &plait_spec::ClusterSpec, c: &plait_spec::ParallelConfig) -> String {
    let g = plait_cost::comm::Groups::new(cluster, c);
    let hybrid = c.dp_replicas() > 1;
    let groups = [
        ("tp", c.tp, g.tp),
        ("cp", c.cp, g.cp),
        ("ep", c.ep, g.ep),
        ("dp", c.dp * c.cp, g.dp),
        // Hybrid sharding: the ZeRO shard group and the copies that all-reduce its shards.
        (
            "zero shard",
            if hybrid { c.dp_shard() * c.cp } else { 1 },
            g.dp_shard,
        ),
        (
            "shard copies",
            if hybrid { c.dp_replicas() } else { 1 },
            g.dp_replicate,
        ),
    ];
    let parts: Vec<String> = groups
        .iter()
        .filter(|(_, size, _)| *size > 1)
        .map(|(name, size, grp)| {
            if grp.spans_nodes {
                format!("{name} {size} across {} nodes", grp.nodes)
            } else {
                format!("{name} {size} inside one node")
            }
        })
        .collect();
    let mut line = if parts.is_empty() {
        "no collective groups".to_string()
    } else {
        parts.join(", ")
    };
    if c.pp > 1 {
        let pp = if g.pp.spans_nodes {
            "across nodes"
        } else {
            "inside one node"
        };
        line += &format!(", pipeline neighbours {pp}");
    }
    line
}

fn render(r: &crate::inputs::Resolved, e: &Estimate, map: &StageMap, simulated: bool) -> String {
    let c = &e.config;
    // Full recomputation of part of the blocks (`--recompute-layers`): say how many.
    let partial = c.recompute == plait_spec::Recompute::Full
        && (0..c.pp).any(|r| map.recompute_blocks[r as usize] < map.rank_blocks(r, c.pp));
    let recompute_line = if partial {
        format!(
            " ({} of {} blocks per pipeline stage recomputed)",
            map.recompute_blocks[0],
            map.rank_blocks(0, c.pp)
        )
    } else {
        String::new()
    };
    // A layout other than the even split (`--pipeline-layout`): its blocks per stage.
    let layout_line = if map.chunk_blocks == StageMap::uniform(r.model.layers, c).chunk_blocks {
        String::new()
    } else {
        let stage = if c.vp > 1 { "virtual stage" } else { "stage" };
        format!(" · blocks per {stage} {:?}", map.chunk_blocks)
    };
    let offload_line = offload_note(&r.train);
    let mut out = format!(
        "plait estimate: {} ({}) on {} × {} ({}), engine {}\ncluster: {}\nplacement: {}\nconfig: {c}{recompute_line}{layout_line}{offload_line}\nbatch: {} sequences × {} tokens, {} micro-batches of {} per pipeline, {}{}{}\n\n",
        r.model.name,
        parameters_line(&r.model),
        c.gpus(),
        r.cluster.gpu.name,
        r.cluster.name,
        e.engine,
        node_line(&r.cluster),
        placement_line(&r.cluster, c),
        r.train.gbs,
        r.train.seq,
        e.microbatches,
        c.mbs,
        format_name(&r.train),
        r.profile_name.as_ref().map(|p| format!(", profile: {p}")).unwrap_or_default(),
        if simulated { ", pipeline simulated event by event" } else { "" },
    );

    let mut time = Table::new();
    time.load_preset(UTF8_BORDERS_ONLY)
        .set_header(["time per iteration", "seconds", "share"]);
    for (name, s) in e.breakdown.components() {
        if s > 0.0 {
            time.add_row([
                Cell::new(name),
                Cell::new(seconds(s)).set_alignment(CellAlignment::Right),
                Cell::new(format!("{:.1} %", 100.0 * s / e.iteration_time_s))
                    .set_alignment(CellAlignment::Right),
            ]);
        }
    }
    time.add_row([
        Cell::new("total"),
        Cell::new(seconds(e.iteration_time_s)).set_alignment(CellAlignment::Right),
        Cell::new("100 %").set_alignment(CellAlignment::Right),
    ]);
    out += &format!("{time}\n");
    out += &format!(
        "band: {} – {} (kernel efficiency, overlap and contention, attention kernel at their optimistic and pessimistic ends)\n",
        seconds(e.iteration_time_low_s),
        seconds(e.iteration_time_high_s)
    );
    if let Some(line) = launch_bound_line(e, &r.cluster, &r.train) {
        out += &line;
    }
    out += &format!(
        "throughput: {:.0} tokens/s · {:.1} model TFLOP/s per GPU · MFU {:.1} %\n\n",
        e.tokens_per_s,
        e.tflops_per_gpu,
        100.0 * e.mfu
    );

    let m = &e.memory;
    let mut mem = Table::new();
    mem.load_preset(UTF8_BORDERS_ONLY).set_header([
        format!("memory per GPU, stage {} of {}", e.worst_stage, c.pp),
        "GiB".into(),
    ]);
    for (name, bytes) in [
        ("weights", m.weights_bytes),
        ("gradients", m.gradients_bytes),
        ("optimizer states", m.optimizer_bytes),
        (
            &*format!(
                "activations ({:.1} micro-batches in flight)",
                m.inflight_microbatches
            ),
            m.activations_bytes,
        ),
        ("transient (backward working set)", m.transient_bytes),
        ("reserve (context, workspaces)", m.reserve_bytes),
    ] {
        mem.add_row([
            Cell::new(name),
            Cell::new(format!("{:.2}", bytes / GIB)).set_alignment(CellAlignment::Right),
        ]);
    }
    mem.add_row([
        Cell::new(format!("total of {:.1} GiB", e.memory_capacity_bytes / GIB)),
        Cell::new(format!("{:.2}", e.peak_memory_bytes / GIB)).set_alignment(CellAlignment::Right),
    ]);
    out += &format!("{mem}\n");
    if e.host_memory_bytes > 0.0 {
        out += &format!(
            "host memory per GPU: {:.1} GiB offloaded{}\n",
            e.host_memory_bytes / GIB,
            e.host_memory_capacity_bytes
                .map_or(String::new(), |cap| format!(
                    " of its {:.1} GiB share",
                    cap / GIB
                ))
        );
    }
    match e.reason() {
        None => {
            out += &format!(
                "fits: {:.1} GiB free on the fullest GPU\n",
                (e.memory_capacity_bytes - e.peak_memory_bytes) / GIB
            )
        }
        Some(reason) => out += &format!("DOES NOT FIT: {reason}\n"),
    }
    out
}

/// The header's note of activation and optimizer offloading (`--cpu-offload-layers`,
/// `--optimizer-offload`), empty without them.
pub(crate) fn offload_note(t: &plait_spec::TrainSpec) -> String {
    let mut note = match t.cpu_offload_layers {
        0 => String::new(),
        n => format!(" · activations of {n} blocks offloaded to host memory"),
    };
    let f = t.optimizer_offload;
    if f > 0.0 {
        let share = if f >= 1e-3 {
            format!("{:.1} %", 100.0 * f)
        } else {
            format!("a share {f:e}")
        };
        note += &format!(" · {share} of the optimizer state in host memory, stepped by the CPU");
    }
    note
}
