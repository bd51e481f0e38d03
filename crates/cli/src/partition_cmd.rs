//! `plait partition`: reads an ONNX model or a placement-graph JSON, calls
//! `plait_partition::partition`, and prints a stage table or JSON; `--svg` draws the stage
//! loads as a bar chart.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::device_for;
use plait_partition::onnx::{self, Costs};
use plait_partition::{partition, DeviceKind, Graph, Limits, Partition, PartitionError};
use plait_spec::Dtype;

use crate::inputs::load_cluster;

#[derive(Debug, Args)]
pub struct PartitionArgs {
    /// The graph: an ONNX model (.onnx) or a placement-graph JSON (Tarnawski et al. format).
    #[arg(long, value_name = "FILE")]
    pub graph: PathBuf,
    /// Accelerators (pipeline stages). Default: the file's `maxFPGAs`, or the GPUs of one
    /// node of the cluster for ONNX.
    #[arg(long, allow_negative_numbers = true)]
    pub devices: Option<i64>,
    /// Memory of one accelerator in bytes (e.g. 80e9). Default: the file's
    /// `maxSizePerFPGA`, or the GPU's memory less the cluster's reserve for ONNX.
    #[arg(long, allow_negative_numbers = true)]
    pub memory: Option<f64>,
    /// CPU cores, each able to run one contiguous segment. Default: the file's `maxCPUs`,
    /// or 0 for ONNX.
    #[arg(long, allow_negative_numbers = true)]
    pub cpus: Option<i64>,
    /// Cluster preset or TOML whose GPU and links price an ONNX graph.
    #[arg(long, default_value = "dgx-h100")]
    pub cluster: String,
    /// Largest ideal lattice searched exactly; above it a heuristic answers with a lower bound.
    #[arg(long, allow_negative_numbers = true, default_value_t = plait_partition::MAX_IDEALS as i64)]
    pub max_ideals: i64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG bar chart of the stage loads.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// The JSON document of `plait partition --json` (stable fields: see design.md).
#[derive(Serialize)]
struct PartitionJson<'a> {
    graph: &'a str,
    format: &'static str,
    nodes: usize,
    edges: usize,
    time_unit: &'a str,
    devices: usize,
    cpus: usize,
    memory_per_device_bytes: f64,
    elapsed_s: f64,
    #[serde(flatten)]
    partition: &'a Partition,
}

fn flag_error(flag: &str, problem: String, allowed: &str) -> anyhow::Error {
    PartitionError::new(flag, flag.trim_start_matches('-'), problem, allowed).into()
}

fn count(flag: &str, v: i64, min: i64) -> Result<usize> {
    if v < min {
        return Err(flag_error(
            flag,
            format!("must be at least {min}, got {v}"),
            &format!("integers ≥ {min}"),
        ));
    }
    Ok(v as usize)
}

fn is_onnx(path: &Path, bytes: &[u8]) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("onnx") => true,
        Some(e) if e.eq_ignore_ascii_case("json") => false,
        _ => bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{'),
    }
}

pub fn run(args: &PartitionArgs) -> Result<String> {
    let path = &args.graph;
    let name = path.display().to_string();
    // An `.onnx` file may be as large as protobuf allows; anything else is read up to the
    // placement-graph limit (an ONNX model under another name too).
    let named_onnx = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
    let limit = if named_onnx {
        crate::inputs::MAX_ONNX_BYTES
    } else {
        crate::inputs::MAX_GRAPH_BYTES
    };
    let bytes = crate::inputs::read_bytes(path, limit)
        .with_context(|| format!("{name}: cannot read the graph file"))?;
    let onnx = is_onnx(path, &bytes);
    let (graph, default_limits) = if onnx {
        let cluster = load_cluster(&args.cluster)?;
        let device = device_for(&cluster, Dtype::Bf16)?;
        let g = onnx::import(&bytes, &name, &Costs::new(&device, &cluster))?;
        let memory = cluster.gpu.memory_bytes - cluster.memory_reserve_bytes;
        (g, Limits::new(cluster.gpus_per_node as usize, 0, memory))
    } else {
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            PartitionError::new(
                &name,
                "JSON",
                "the file is not UTF-8 text",
                "a placement-graph JSON or an .onnx model",
            )
        })?;
        let g = Graph::from_placement_json(text, &name)?;
        let limits = Limits::of_graph(&g).expect("placement graphs carry their limits");
        (g, limits)
    };
    let mut limits = default_limits;
    if let Some(k) = args.devices {
        limits.devices = count("--devices", k, 1)?;
    }
    if let Some(c) = args.cpus {
        limits.cpus = count("--cpus", c, 0)?;
    }
    if let Some(m) = args.memory {
        if !(m.is_finite() && m > 0.0) {
            return Err(flag_error(
                "--memory",
                format!("must be a positive number of bytes, got {m}"),
                "bytes > 0, e.g. 80e9",
            ));
        }
        limits.memory_per_device_bytes = m;
    }
    limits.max_ideals = count("--max-ideals", args.max_ideals, 1)?;
    if limits.max_ideals > plait_partition::MAX_IDEALS_LIMIT {
        return Err(flag_error(
            "--max-ideals",
            format!(
                "{} is more than the {} ideals the exact search may enumerate",
                args.max_ideals,
                plait_partition::MAX_IDEALS_LIMIT
            ),
            &format!("1 to {}", plait_partition::MAX_IDEALS_LIMIT),
        ));
    }

    let start = Instant::now();
    let p = partition(&graph, &limits)?;
    let elapsed_s = start.elapsed().as_secs_f64();

    let mut out = String::new();
    if let Some(svg_path) = &args.svg {
        std::fs::write(svg_path, svg(&graph, &p))
            .with_context(|| format!("--svg: cannot write `{}`", svg_path.display()))?;
        if !args.json {
            out += &format!("wrote {} (--svg)\n", svg_path.display());
        }
    }
    if args.json {
        let doc = PartitionJson {
            graph: &name,
            format: if onnx { "onnx" } else { "placement" },
            nodes: graph.nodes.len(),
            edges: graph.edges.len(),
            time_unit: &graph.time_unit,
            devices: limits.devices,
            cpus: limits.cpus,
            memory_per_device_bytes: limits.memory_per_device_bytes,
            elapsed_s,
            partition: &p,
        };
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    Ok(render(&graph, &limits, &p, elapsed_s) + &out)
}

/// A load in the graph's unit: milliseconds for seconds, the file's unit otherwise.
fn load_text(g: &Graph, x: f64) -> String {
    if g.time_unit == "s" {
        format!("{:.4} ms", x * 1e3)
    } else {
        format!("{x:.6}")
    }
}

/// Node ids as ranges ("0-5, 9, 12-15"), cut to about `max` characters.
fn id_ranges(ids: &[i64], max: usize) -> String {
    let mut parts: Vec<String> = vec![];
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ids[i], ids[j])
        } else {
            ids[i].to_string()
        });
        i = j + 1;
    }
    let mut s = String::new();
    for (k, p) in parts.iter().enumerate() {
        if s.len() + p.len() > max {
            s += &format!("… (+{} more)", parts.len() - k);
            break;
        }
        if k > 0 {
            s += ", ";
        }
        s += p;
    }
    s
}

fn render(g: &Graph, limits: &Limits, p: &Partition, elapsed_s: f64) -> String {
    let gb = |b: f64| format!("{:.2} GB", b / 1e9);
    let mut out = format!(
        "plait partition: {} — {} nodes, {} edges, {} units{}\nlimits: {} accelerator(s) of {}, {} CPU(s)\n",
        g.name,
        g.nodes.len(),
        g.edges.len(),
        p.units,
        p.ideals.map(|n| format!(", {n} ideals")).unwrap_or_default(),
        limits.devices,
        gb(limits.memory_per_device_bytes),
        limits.cpus,
    );
    if !p.feasible {
        out += &format!(
            "INFEASIBLE: {}\n",
            p.reason.as_deref().unwrap_or("no split fits")
        );
        if let Some(m) = p.min_memory_bytes {
            out += &format!(
                "{} memory per accelerator that fits: {:.0} bytes ({})\n",
                if p.optimal { "least" } else { "enough" },
                m,
                gb(m)
            );
        }
        return out;
    }
    let quality = if p.optimal {
        "optimal".to_string()
    } else {
        format!(
            "heuristic; lower bound {}, gap ≤ {:.1} %",
            load_text(g, p.lower_bound),
            100.0 * (p.max_load - p.lower_bound) / p.max_load.max(f64::MIN_POSITIVE)
        )
    };
    out += &format!(
        "max load: {} ({quality}) in {:.3} s\n",
        load_text(g, p.max_load),
        elapsed_s
    );
    if let Some(c) = &p.coarsening {
        out += &format!("{}\n", c.note);
    }
    out += "\n";
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY).set_header([
        "stage", "device", "nodes", "compute", "comm", "load", "memory", "node ids",
    ]);
    let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
    for (k, s) in p.stages.iter().enumerate() {
        t.add_row([
            right(k.to_string()),
            Cell::new(s.device.keyword()),
            right(s.ids.len().to_string()),
            right(load_text(g, s.compute)),
            right(load_text(g, s.communication)),
            right(load_text(g, s.load)),
            right(gb(s.memory_bytes)),
            Cell::new(id_ranges(&s.ids, 40)),
        ]);
    }
    out += &format!("{t}\n");
    out
}

/// A bar per stage (compute, then communication, stacked), the max load and the lower bound
/// as lines.
fn svg(g: &Graph, p: &Partition) -> String {
    const W: f64 = 720.0;
    const H: f64 = 360.0;
    const LEFT: f64 = 70.0;
    const BOTTOM: f64 = 40.0;
    const TOP: f64 = 40.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{LEFT}" y="20" font-size="14">{} — stage loads</text>
"#,
        xml(&g.name)
    );
    if !p.feasible || p.stages.is_empty() {
        s += &format!(
            "<text x=\"{LEFT}\" y=\"60\">infeasible: {}</text>\n</svg>\n",
            xml(p.reason.as_deref().unwrap_or(""))
        );
        return s;
    }
    let top = p.max_load.max(f64::MIN_POSITIVE) * 1.1;
    let plot_h = H - TOP - BOTTOM;
    let y = |v: f64| TOP + plot_h * (1.0 - v / top);
    let n = p.stages.len() as f64;
    let slot = (W - LEFT - 20.0) / n;
    let bar = slot * 0.6;
    for (k, st) in p.stages.iter().enumerate() {
        let x = LEFT + slot * k as f64 + (slot - bar) / 2.0;
        let colour = match st.device {
            DeviceKind::Accelerator => "#4e79a7",
            DeviceKind::Cpu => "#59a14f",
        };
        s += &format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>stage {k}: compute {}</title></rect>\n",
            y(st.compute),
            y(0.0) - y(st.compute),
            load_text(g, st.compute)
        );
        if st.communication > 0.0 {
            s += &format!(
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"#f28e2b\"><title>stage {k}: communication {}</title></rect>\n",
                y(st.load),
                y(st.compute) - y(st.load),
                load_text(g, st.communication)
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{k} ({}, {} nodes)</text>\n",
            x + bar / 2.0,
            H - BOTTOM + 16.0,
            st.device.keyword(),
            st.ids.len()
        );
    }
    let line = |v: f64, label: &str, dash: &str| {
        format!(
            "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-dasharray=\"{dash}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label} {}</text>\n",
            W - 20.0,
            y(v),
            y(v),
            W - 20.0,
            y(v) - 4.0,
            load_text(g, v)
        )
    };
    s += &line(p.max_load, "max load", "6 3");
    if p.lower_bound < p.max_load {
        s += &line(p.lower_bound, "lower bound", "2 3");
    }
    s += &format!(
        "<line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{TOP}\" y2=\"{:.1}\" stroke=\"black\"/>\n<text x=\"10\" y=\"{:.1}\">0</text>\n",
        y(0.0),
        y(0.0)
    );
    s += "<text x=\"10\" y=\"34\">legend: compute (blue: accelerator, green: CPU), communication (orange)</text>\n</svg>\n";
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
