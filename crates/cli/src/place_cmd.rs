//! `plait place`: a chain of layers over heterogeneous devices. Reads the explicit-cost JSON
//! (`--graph`) or a transformer (`--model`) with a device-set TOML (`--devices`), calls
//! `plait_place::place`, and prints a stage table or JSON; `--svg` draws the pipelined
//! timeline.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_place::model::{self, Phase, Workload};
use plait_place::render::{self, fmt_s};
use plait_place::{
    device_set_from_toml, evaluate, place, DeviceSet, Objective, Options, Placement, Precision,
    Problem,
};
use plait_spec::SpecError;

use crate::inputs::load_model;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["graph", "model"])))]
pub struct PlaceArgs {
    /// Explicit-cost chain JSON: {"layers":[{"name","time_s":{KIND: s},"memory_bytes",
    /// "output_bytes"}], "devices":[{"name","kind","memory_bytes"}],
    /// "links":[{"a","b","bytes_per_s","latency_s"}]}.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["model", "devices", "phase", "batch", "prompt_len", "gen_len", "dtype"])]
    pub graph: Option<PathBuf>,
    /// A transformer: preset (e.g. llama3-8b) or a Hugging Face config.json (needs --devices).
    #[arg(long, requires = "devices")]
    pub model: Option<String>,
    /// Device-set TOML (parts, counts, LANs, links): see examples/devices/.
    #[arg(long, value_name = "FILE")]
    pub devices: Option<PathBuf>,
    /// What to minimise: latency (one request end to end) or throughput (the largest stage
    /// time or transfer of a pipelined stream).
    #[arg(long, default_value = "latency")]
    pub objective: Objective,
    /// Latency limit of one request in seconds (with --objective throughput: the best
    /// throughput among placements that meet it).
    #[arg(long, allow_negative_numbers = true)]
    pub slo_s: Option<f64>,
    /// Inference phase the placement is for (model input): prefill (time to first token),
    /// decode (one step, averaged over the generation) or both (the whole request).
    #[arg(long, default_value = "decode")]
    pub phase: Phase,
    /// Sequences per request batch (model input).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    pub batch: i64,
    /// Prompt tokens per sequence (model input).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1024)]
    pub prompt_len: i64,
    /// Generated tokens per sequence (model input).
    #[arg(long, allow_negative_numbers = true, default_value_t = 256)]
    pub gen_len: i64,
    /// Weight format (fp32, fp16, bf16, fp8, int8, int4 weight-only) (model input).
    #[arg(long, default_value = "bf16")]
    pub dtype: Precision,
    /// Label budget of the exact search; above it the answer says `optimal: false` with
    /// the bound it proved.
    #[arg(long, allow_negative_numbers = true, default_value_t = plait_place::solve::DEFAULT_MAX_LABELS as i64)]
    pub max_labels: i64,
    /// Requests drawn in the --svg timeline (default: stages + 3).
    #[arg(long, allow_negative_numbers = true)]
    pub requests: Option<i64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of the placement's pipelined timeline.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// A placement evaluated for one phase.
#[derive(Serialize)]
struct PhaseFigures {
    latency_s: f64,
    bottleneck_s: f64,
    /// Requests (prefill, whole request) or decode steps per second in a full pipeline.
    per_s: f64,
    /// Generated tokens per second (decode: batch per step; request: batch × gen per request).
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_s: Option<f64>,
}

#[derive(Serialize)]
struct PlaceJson<'a> {
    input: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<Phase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workload: Option<Workload>,
    layers: usize,
    devices: usize,
    links: usize,
    elapsed_s: f64,
    #[serde(flatten)]
    placement: &'a Placement,
    /// Model input: the placement evaluated for each phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    phases: Option<Vec<(&'static str, PhaseFigures)>>,
}

fn flag_error(flag: &str, problem: String, allowed: &str) -> anyhow::Error {
    SpecError::new(flag, flag.trim_start_matches('-'), problem, allowed).into()
}

fn read(path: &std::path::Path, what: &str, limit: u64) -> Result<String> {
    crate::inputs::read_text(path, limit)
        .with_context(|| format!("{}: cannot read the {what}", path.display()))
}

fn gb(b: f64) -> String {
    format!("{:.2}", b / 1e9)
}

pub fn run(args: &PlaceArgs) -> Result<String> {
    if let Some(s) = args.slo_s {
        if !(s.is_finite() && s > 0.0) {
            return Err(flag_error(
                "--slo-s",
                format!("must be a positive number of seconds, got {s}"),
                "seconds > 0",
            ));
        }
    }
    if args.max_labels < 1 {
        return Err(flag_error(
            "--max-labels",
            format!("must be at least 1, got {}", args.max_labels),
            "integers ≥ 1",
        ));
    }
    let requests = match args.requests {
        None => None,
        Some(r) if (1..=10_000).contains(&r) => Some(r as usize),
        Some(r) => {
            return Err(flag_error(
                "--requests",
                format!("{r} is out of range"),
                "1 to 10000",
            ))
        }
    };
    let opts = Options {
        objective: args.objective,
        slo_s: args.slo_s,
        max_labels: args.max_labels as usize,
    };
    // The problem, and for model input the context to evaluate other phases.
    struct ModelCtx {
        name: String,
        set: DeviceSet,
        workload: Workload,
        spec: plait_spec::ModelSpec,
    }
    let (problem, input, ctx): (Problem, String, Option<ModelCtx>) =
        match (&args.graph, &args.model) {
            (Some(path), None) => {
                let name = path.display().to_string();
                let text = read(path, "graph file", crate::inputs::MAX_GRAPH_BYTES)?;
                (Problem::from_json(&text, &name)?, name, None)
            }
            (None, Some(m)) => {
                let Some(dpath) = &args.devices else {
                    bail!("--devices: a device-set TOML is required with --model");
                };
                let spec = load_model(m)?;
                let dname = dpath.display().to_string();
                let set = device_set_from_toml(
                    &read(dpath, "device-set file", crate::inputs::MAX_CONFIG_BYTES)?,
                    &dname,
                )?;
                let count = |flag: &str, v: i64| -> Result<u64> {
                    if v < 0 {
                        return Err(flag_error(
                            flag,
                            format!("must be ≥ 0, got {v}"),
                            "non-negative integers",
                        ));
                    }
                    Ok(v as u64)
                };
                let workload = Workload {
                    batch: count("--batch", args.batch)?,
                    prompt_len: count("--prompt-len", args.prompt_len)?,
                    gen_len: count("--gen-len", args.gen_len)?,
                    precision: args.dtype,
                };
                let (p, _) = model::problem(&spec, &set, &workload, args.phase)?;
                (
                    p,
                    dname,
                    Some(ModelCtx {
                        name: spec.name.clone(),
                        set,
                        workload,
                        spec,
                    }),
                )
            }
            _ => bail!("give exactly one of --graph FILE or --model M --devices FILE"),
        };

    let start = Instant::now();
    let answer = place(&problem, &opts);
    let elapsed_s = start.elapsed().as_secs_f64();

    // Model input: the same placement under every phase.
    let phases = match (&ctx, answer.feasible) {
        (Some(c), true) => {
            let placement: Vec<(usize, usize, usize)> = answer
                .stages
                .iter()
                .map(|s| (s.device_index, s.first_layer, s.last_layer))
                .collect();
            let mut v = Vec::new();
            let mut list = vec![("prefill", Phase::Prefill)];
            if c.workload.gen_len > 0 {
                list.push(("decode", Phase::Decode));
                list.push(("request", Phase::Both));
            }
            for (label, ph) in list {
                let (p, _) = model::problem(&c.spec, &c.set, &c.workload, ph)?;
                let Some((_, latency_s, bottleneck_s)) = evaluate(&p, &placement) else {
                    continue;
                };
                let per_s = 1.0 / bottleneck_s.max(f64::MIN_POSITIVE);
                let b = c.workload.batch as f64;
                let tokens_per_s = match ph {
                    Phase::Prefill => None,
                    Phase::Decode => Some(b * per_s),
                    Phase::Both => Some(b * c.workload.gen_len as f64 * per_s),
                };
                v.push((
                    label,
                    PhaseFigures {
                        latency_s,
                        bottleneck_s,
                        per_s,
                        tokens_per_s,
                    },
                ));
            }
            Some(v)
        }
        _ => None,
    };

    let mut out = String::new();
    if let Some(path) = &args.svg {
        if !answer.feasible {
            bail!(
                "--svg: no placement to draw ({})",
                answer.reason.as_deref().unwrap_or("infeasible")
            );
        }
        let r = requests.unwrap_or(answer.stages.len() + 3);
        let title = match &ctx {
            Some(c) => format!(
                "{} on {} — {} phase, {} objective",
                c.name,
                c.set.name,
                args.phase.keyword(),
                args.objective.keyword()
            ),
            None => format!("{input} — {} objective", args.objective.keyword()),
        };
        std::fs::write(path, render::svg(&answer.stages, r, &title))
            .with_context(|| format!("--svg: cannot write `{}`", path.display()))?;
        if !args.json {
            out += &format!("wrote {} (--svg)\n", path.display());
        }
    }
    if args.json {
        let doc = PlaceJson {
            input: &input,
            model: ctx.as_ref().map(|c| c.name.as_str()),
            phase: ctx.as_ref().map(|_| args.phase),
            workload: ctx.as_ref().map(|c| c.workload),
            layers: problem.layers.len(),
            devices: problem.devices.len(),
            links: problem.links.len(),
            elapsed_s,
            placement: &answer,
            phases,
        };
        return Ok(out + &serde_json::to_string_pretty(&doc)? + "\n");
    }

    // Text report.
    let head = match &ctx {
        Some(c) => {
            let mut parts: Vec<(String, usize)> = Vec::new();
            for d in &c.set.devices {
                match parts.iter_mut().find(|p| p.0 == d.part.name) {
                    Some(p) => p.1 += 1,
                    None => parts.push((d.part.name.clone(), 1)),
                }
            }
            let parts: Vec<String> = parts.iter().map(|(n, k)| format!("{k} × {n}")).collect();
            format!(
                "plait place: {} ({}) on {} ({}), batch {}, prompt {}, generate {}; {} phase, {} objective{}\n",
                c.name,
                c.workload.precision.keyword(),
                c.set.name,
                parts.join(" + "),
                c.workload.batch,
                c.workload.prompt_len,
                c.workload.gen_len,
                args.phase.keyword(),
                args.objective.keyword(),
                args.slo_s.map(|s| format!(", latency SLO {}", fmt_s(s))).unwrap_or_default()
            )
        }
        None => format!(
            "plait place: {input} ({} layers, {} devices, {} links); {} objective{}\n",
            problem.layers.len(),
            problem.devices.len(),
            problem.links.len(),
            args.objective.keyword(),
            args.slo_s
                .map(|s| format!(", latency SLO {}", fmt_s(s)))
                .unwrap_or_default()
        ),
    };
    out += &head;
    let s = &answer.search;
    let search = format!(
        "searched {} labels ({} expanded) over {} device classes in {:.3} s",
        s.labels, s.expanded, s.device_classes, elapsed_s
    );
    if !answer.feasible {
        out += &format!(
            "no placement: {}\n",
            answer.reason.as_deref().unwrap_or("infeasible")
        );
        if let Some(m) = answer.min_memory_scale {
            out += &format!(
                "the layers need {} GB in all; every device's memory would have to grow × {m:.4}\n",
                gb(answer.memory_needed_bytes)
            );
        }
        out += &format!(
            "{search}{}\n",
            if answer.optimal { " (proven)" } else { "" }
        );
        return Ok(out);
    }
    let value = answer.value_s.unwrap_or(f64::NAN);
    out += &format!(
        "{} {}: {}{} · {} stages · {search}\n",
        args.objective.keyword(),
        if args.objective == Objective::Latency {
            "(sum of stages and transfers)"
        } else {
            "(largest stage or transfer)"
        },
        fmt_s(value),
        if answer.optimal {
            " (optimal)".to_string()
        } else {
            format!(
                " (not proven optimal: the search stopped at its budget; lower bound {})",
                fmt_s(answer.lower_bound_s.unwrap_or(0.0))
            )
        },
        answer.stages.len(),
    );
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "#",
        "device",
        "kind",
        "layers",
        "compute",
        "transfer out",
        "memory GB (usable)",
    ]);
    for (i, st) in answer.stages.iter().enumerate() {
        t.add_row(vec![
            Cell::new(i),
            Cell::new(&st.device),
            Cell::new(&st.kind),
            Cell::new(format!(
                "{}–{} ({} … {})",
                st.first_layer, st.last_layer, st.first_layer_name, st.last_layer_name
            )),
            Cell::new(fmt_s(st.compute_s)).set_alignment(CellAlignment::Right),
            Cell::new(if i + 1 == answer.stages.len() {
                "—".to_string()
            } else {
                fmt_s(st.transfer_s)
            })
            .set_alignment(CellAlignment::Right),
            Cell::new(format!(
                "{} ({})",
                gb(st.memory_bytes),
                gb(st.device_memory_bytes)
            ))
            .set_alignment(CellAlignment::Right),
        ]);
    }
    out += &format!("{t}\n");
    out += &format!(
        "latency {} · bottleneck {} → {:.3} per s in a full pipeline\n",
        fmt_s(answer.latency_s.unwrap_or(0.0)),
        fmt_s(answer.bottleneck_s.unwrap_or(0.0)),
        1.0 / answer.bottleneck_s.unwrap_or(f64::INFINITY)
    );
    if let (Some(c), Some(ph)) = (&ctx, &phases) {
        for (label, f) in ph {
            let what = match *label {
                "prefill" => format!(
                    "prefill of {} × {} tokens (time to first token)",
                    c.workload.batch, c.workload.prompt_len
                ),
                "decode" => {
                    "decode step (time per output token, mean over the generation)".to_string()
                }
                _ => format!("whole request (prefill + {} steps)", c.workload.gen_len),
            };
            out += &format!(
                "  {what}: latency {}, bottleneck {}{}\n",
                fmt_s(f.latency_s),
                fmt_s(f.bottleneck_s),
                match f.tokens_per_s {
                    Some(tok) => format!(
                        " → {tok:.1} tokens/s pipelined ({:.1} tokens/s one request at a time)",
                        if *label == "decode" {
                            c.workload.batch as f64 / f.latency_s
                        } else {
                            (c.workload.batch * c.workload.gen_len) as f64 / f.latency_s
                        }
                    ),
                    None => format!(" → {:.3} prefills/s pipelined", f.per_s),
                }
            );
        }
    }
    Ok(out)
}
