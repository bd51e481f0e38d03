//! Files a command writes besides its report: the SVG timeline, the Perfetto trace and the
//! schedule IR as JSON.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use plait_schedule::{render, Schedule, Simulation};

/// Pictures and machine-readable forms of a simulated schedule.
#[derive(Debug, Args)]
pub struct Pictures {
    /// Write an SVG Gantt chart of the timeline.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace (open in ui.perfetto.dev).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Write the schedule IR (per-rank instruction lists) as JSON.
    #[arg(long, value_name = "FILE")]
    pub ir: Option<PathBuf>,
}

fn write(flag: &str, path: &PathBuf, text: &str) -> Result<String> {
    std::fs::write(path, text)
        .with_context(|| format!("{flag}: cannot write `{}`", path.display()))?;
    Ok(format!("wrote {} ({flag})\n", path.display()))
}

/// Writes what `p` asks for; `title` heads the SVG (None: a synthetic schedule whose
/// times are plain units). Returns one "wrote …" line per file.
pub fn write_pictures(
    p: &Pictures,
    s: &Schedule,
    sim: &Simulation,
    title: Option<&str>,
) -> Result<String> {
    let mut out = String::new();
    if let Some(path) = &p.svg {
        let svg = match title {
            Some(t) => render::svg(s, sim, t),
            None => render::svg_with(
                s,
                sim,
                &format!("{} schedule", s.name),
                &render::SvgOptions {
                    time_unit: render::TimeUnit::Unitless,
                },
            ),
        };
        out += &write("--svg", path, &svg)?;
    }
    if let Some(path) = &p.trace {
        let trace = serde_json::to_string(&render::chrome_trace(s, sim))?;
        out += &write("--trace", path, &trace)?;
    }
    if let Some(path) = &p.ir {
        out += &write("--ir", path, &(serde_json::to_string_pretty(s)? + "\n"))?;
    }
    Ok(out)
}
