//! `plait validate`: the cost model against every published table this repository carries
//! (SC'21 Table 1, llm-foundry FSDP, NeMo), each run under its engine, with the error per
//! row and per table. README's Accuracy section is this command's output.

use anyhow::Result;
use clap::Args;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, Table};
use serde::Serialize;

use plait_cost::calibration::{builtin_tables, evaluate, TableResult};
use plait_cost::Breakdown;
use plait_spec::GIB;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Print every row, not only the per-table summary.
    #[arg(long)]
    pub rows: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct RowJson<'a> {
    label: &'a str,
    measured_step_s: f64,
    predicted_step_s: f64,
    predicted_low_s: f64,
    predicted_high_s: f64,
    error: f64,
    fits: bool,
    /// The run's reported peak memory per GPU (GiB), where published, and plait's.
    measured_memory_gib: Option<f64>,
    predicted_memory_gib: f64,
    memory_error: Option<f64>,
    breakdown: &'a Breakdown,
}

#[derive(Serialize)]
struct TableJson<'a> {
    table: &'a str,
    engine: String,
    runs: usize,
    mean_abs_error: f64,
    mean_signed_error: f64,
    max_abs_error: f64,
    band_coverage: f64,
    /// Comparable pairs (same model, cluster, GPUs, batch, sequence, task) measured ≥ 10 %
    /// apart, and how many the predictions order as measured.
    pairs: usize,
    pairs_ordered: usize,
    /// Mean |error| of the peak memory over the runs that reported it, and how many did.
    memory_mean_abs_error: Option<f64>,
    memory_runs: usize,
    /// Published runs the estimate says fit in the GPUs' memory (every one ran).
    runs_that_fit: usize,
    rows: Vec<RowJson<'a>>,
    skipped: Vec<(&'a str, &'a str)>,
}

fn to_json(t: &TableResult) -> TableJson<'_> {
    TableJson {
        table: t.name,
        engine: t.engine.to_string(),
        runs: t.rows.len(),
        mean_abs_error: t.mean_abs_error(),
        mean_signed_error: t.mean_signed_error(),
        max_abs_error: t.max_abs_error(),
        band_coverage: t.band_coverage(),
        pairs: t.pairs_ordered().1,
        pairs_ordered: t.pairs_ordered().0,
        memory_mean_abs_error: t.memory_mean_abs_error(),
        memory_runs: t.memory_runs(),
        runs_that_fit: fitting(t),
        rows: t
            .rows
            .iter()
            .map(|r| RowJson {
                label: &r.label,
                measured_step_s: r.measured_step_s,
                predicted_step_s: r.predicted_step_s,
                predicted_low_s: r.predicted_low_s,
                predicted_high_s: r.predicted_high_s,
                error: r.error(),
                fits: r.fits,
                measured_memory_gib: r.measured_memory_bytes.map(|b| b / GIB),
                predicted_memory_gib: r.predicted_memory_bytes / GIB,
                memory_error: r.memory_error(),
                breakdown: &r.breakdown,
            })
            .collect(),
        skipped: t
            .skipped
            .iter()
            .map(|s| (s.label.as_str(), s.reason.as_str()))
            .collect(),
    }
}

/// The table's runs the estimate fits in memory: all ran, so each other one is a plan
/// plait would wrongly call infeasible.
fn fitting(t: &TableResult) -> usize {
    t.rows.iter().filter(|r| r.fits).count()
}

fn pct(x: f64) -> String {
    format!("{:+.1} %", 100.0 * x)
}

pub fn run(args: &ValidateArgs) -> Result<String> {
    let results = builtin_tables()?
        .iter()
        .map(evaluate)
        .collect::<Result<Vec<_>, _>>()?;
    if args.json {
        let doc: Vec<_> = results.iter().map(to_json).collect();
        return Ok(serde_json::to_string_pretty(&doc)? + "\n");
    }
    let mut out = String::new();
    if args.rows {
        for t in &results {
            let mut rows = Table::new();
            rows.load_preset(UTF8_BORDERS_ONLY).set_header([
                format!("{} — engine {}", t.name, t.engine),
                "measured".into(),
                "predicted (band)".into(),
                "error".into(),
                "memory: measured, predicted".into(),
            ]);
            for r in &t.rows {
                rows.add_row([
                    Cell::new(&r.label),
                    Cell::new(format!("{:.3} s", r.measured_step_s))
                        .set_alignment(CellAlignment::Right),
                    Cell::new(format!(
                        "{:.3} s ({:.3}–{:.3}){}",
                        r.predicted_step_s,
                        r.predicted_low_s,
                        r.predicted_high_s,
                        if r.fits { "" } else { " DOES NOT FIT" }
                    ))
                    .set_alignment(CellAlignment::Right),
                    Cell::new(pct(r.error())).set_alignment(CellAlignment::Right),
                    Cell::new(match (r.measured_memory_bytes, r.memory_error()) {
                        (Some(m), Some(e)) => format!(
                            "{:.1} GiB, {:.1} GiB ({})",
                            m / GIB,
                            r.predicted_memory_bytes / GIB,
                            pct(e)
                        ),
                        _ => String::new(),
                    })
                    .set_alignment(CellAlignment::Right),
                ]);
            }
            out += &format!("{rows}\n");
            for s in &t.skipped {
                out += &format!("  skipped {}: {}\n", s.label, s.reason);
            }
            out += "\n";
        }
    }
    let mut summary = Table::new();
    summary.load_preset(UTF8_BORDERS_ONLY).set_header([
        "table",
        "engine",
        "runs",
        "mean |error|",
        "mean signed",
        "max |error|",
        "in band",
        "pairs ordered",
        "memory |error|",
        "fit",
    ]);
    for t in &results {
        summary.add_row([
            Cell::new(t.name),
            Cell::new(t.engine),
            Cell::new(t.rows.len()).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.1} %", 100.0 * t.mean_abs_error()))
                .set_alignment(CellAlignment::Right),
            Cell::new(pct(t.mean_signed_error())).set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.1} %", 100.0 * t.max_abs_error()))
                .set_alignment(CellAlignment::Right),
            Cell::new(format!("{:.0} %", 100.0 * t.band_coverage()))
                .set_alignment(CellAlignment::Right),
            Cell::new(match t.pairs_ordered() {
                (_, 0) => "no pairs".to_string(),
                (ordered, pairs) => format!("{ordered} of {pairs}"),
            })
            .set_alignment(CellAlignment::Right),
            Cell::new(match t.memory_mean_abs_error() {
                Some(e) => format!("{:.1} % ({} runs)", 100.0 * e, t.memory_runs()),
                None => "not published".into(),
            })
            .set_alignment(CellAlignment::Right),
            Cell::new(format!("{} of {}", fitting(t), t.rows.len()))
                .set_alignment(CellAlignment::Right),
        ]);
    }
    out += &format!("{summary}\n");
    Ok(out)
}
