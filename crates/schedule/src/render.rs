//! Pictures of a simulated schedule: a Chrome/Perfetto trace ([`chrome_trace`]) and an SVG
//! Gantt chart ([`svg`], [`svg_with`]).
//!
//! Both take a [`Schedule`] and the [`Simulation`] of it and only draw what they are given:
//! this module knows no cost model (durations and bytes come from the simulation as plain
//! numbers) and does no file I/O (it returns a JSON value or a string; the caller writes
//! it). Output is deterministic: events and shapes follow the simulation's span order and
//! every number in the SVG is written with fixed decimals.

use std::collections::BTreeMap;
use std::fmt::{self, Write};

use serde_json::{json, Map, Value};

use crate::ir::{Instr, Op, Schedule};
use crate::simulate::{Simulation, Span, Stream};

/// How one op is named in the trace (`cat`) and drawn in the SVG; in legend order.
struct Style {
    op: Op,
    cat: &'static str,
    label: &'static str,
    rgb: u32,
}

const fn style(op: Op, cat: &'static str, label: &'static str, rgb: u32) -> Style {
    Style {
        op,
        cat,
        label,
        rgb,
    }
}

/// The one colour table. Receives never become spans; they are here to make it total.
const STYLES: [Style; 11] = [
    style(Op::Forward, "forward", "forward", 0x4e79a7),
    style(Op::Backward, "backward", "backward", 0x59a14f),
    style(
        Op::BackwardInput,
        "backward_input",
        "backward (input)",
        0x59a14f,
    ),
    style(
        Op::BackwardWeight,
        "backward_weight",
        "backward (weight)",
        0x2a9d8f,
    ),
    style(Op::Recompute, "recompute", "recompute", 0xf28e2b),
    style(Op::OptimizerStep, "optimizer", "optimizer step", 0x79706e),
    style(
        Op::SendActivation,
        "send_activation",
        "send activation",
        0x8a5cc2,
    ),
    style(Op::SendGradient, "send_gradient", "send gradient", 0xc07ac9),
    style(
        Op::ReduceGradients,
        "reduce",
        "dp gradient reduce",
        0xa8a8a8,
    ),
    style(
        Op::RecvActivation,
        "recv_activation",
        "recv activation",
        0x8a5cc2,
    ),
    style(Op::RecvGradient, "recv_gradient", "recv gradient", 0xc07ac9),
];

fn style_of(op: Op) -> &'static Style {
    STYLES
        .iter()
        .find(|st| st.op == op)
        .expect("every op has a style")
}

/// "F3", "B3", "Bi3", "W3", "R3", "sendA 3", "reduce c0", "step"; ".c1" when chunked.
fn span_name(s: &Schedule, i: Instr) -> String {
    let mut name = match i.op {
        Op::OptimizerStep => return "step".into(),
        Op::ReduceGradients => return format!("reduce c{}", i.chunk),
        op if op.is_compute() => format!("{}{}", op.mnemonic(), i.microbatch),
        op => format!("{} {}", op.mnemonic(), i.microbatch),
    };
    if s.chunks > 1 {
        write!(name, ".c{}", i.chunk).unwrap();
    }
    name
}

/// Whether each span lies on the critical path.
fn critical_flags(sim: &Simulation) -> Vec<bool> {
    let mut flags = vec![false; sim.spans.len()];
    for &i in &sim.critical_path {
        if let Some(f) = flags.get_mut(i as usize) {
            *f = true;
        }
    }
    flags
}

/// Whole nanoseconds of a time in seconds; non-finite or negative times become 0.
fn nanos(t: f64) -> u64 {
    if t.is_finite() {
        (t.max(0.0) * 1e9).round() as u64
    } else {
        0
    }
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The simulated schedule in Chrome's Trace Event Format (JSON object form), for
/// ui.perfetto.dev and chrome://tracing.
///
/// Rank `k` is process `k + 1` named "stage k" (pid 0 is special in Perfetto); its streams
/// are threads: 1 "compute", `2 + j` "send → stage j", `2 + p` "dp reduce". Every span is a
/// complete event (`ph: "X"`, times in µs, rounded to the nanosecond) in span order, whose
/// `args` carry the micro-batch, chunk, times in seconds and `critical: true` on the critical
/// path. Each rank's memory is a counter `memory` in GiB.
pub fn chrome_trace(s: &Schedule, sim: &Simulation) -> Value {
    let p = s.stages;
    let tid = |stream: Stream| match stream {
        Stream::Compute => 1,
        Stream::Send { to } => 2 + to,
        Stream::DataParallel => 2 + p,
    };
    let mut threads: BTreeMap<(u32, u32), String> =
        (0..p).map(|r| ((r, 1), "compute".to_string())).collect();
    for sp in &sim.spans {
        threads
            .entry((sp.rank, tid(sp.stream)))
            .or_insert_with(|| match sp.stream {
                Stream::Compute => "compute".into(),
                Stream::Send { to } => format!("send → stage {to}"),
                Stream::DataParallel => "dp reduce".into(),
            });
    }

    let mut events = Vec::new();
    for r in 0..p {
        let name = json!({"name": format!("stage {r}")});
        events.push(metadata(r + 1, None, "process_name", name));
        events.push(metadata(
            r + 1,
            None,
            "process_sort_index",
            json!({"sort_index": r}),
        ));
    }
    for (&(r, t), name) in &threads {
        events.push(metadata(
            r + 1,
            Some(t),
            "thread_name",
            json!({"name": name}),
        ));
        events.push(metadata(
            r + 1,
            Some(t),
            "thread_sort_index",
            json!({"sort_index": t}),
        ));
    }
    for (sp, crit) in sim.spans.iter().zip(critical_flags(sim)) {
        let (start, end) = (nanos(sp.start_s), nanos(sp.end_s));
        let mut args = Map::new();
        if !matches!(sp.instr.op, Op::ReduceGradients | Op::OptimizerStep) {
            args.insert("microbatch".into(), sp.instr.microbatch.into());
        }
        if sp.instr.op != Op::OptimizerStep {
            args.insert("chunk".into(), sp.instr.chunk.into());
        }
        args.insert("start_s".into(), json!(sp.start_s));
        args.insert("end_s".into(), json!(sp.end_s));
        if crit {
            args.insert("critical".into(), true.into());
        }
        events.push(json!({
            "ph": "X",
            "pid": sp.rank + 1,
            "tid": tid(sp.stream),
            "name": span_name(s, sp.instr),
            "cat": style_of(sp.instr.op).cat,
            "ts": micros(start),
            "dur": micros(end.saturating_sub(start)),
            "args": args,
        }));
    }
    for (r, rank) in sim.ranks.iter().enumerate() {
        for &(t, bytes) in &rank.memory_timeline {
            let gib = bytes / f64::from(1u32 << 30);
            let ts = micros(nanos(t));
            events.push(
                json!({"ph": "C", "pid": r + 1, "name": "memory", "ts": ts, "args": {"GiB": gib}}),
            );
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "schedule": s.name,
            "stages": s.stages,
            "chunks": s.chunks,
            "microbatches": s.microbatches,
            "makespan_s": sim.makespan_s,
            "bubble_fraction": sim.bubble_fraction,
        },
    })
}

/// A metadata event naming or ordering a process (no `tid`) or one of its threads.
fn metadata(pid: u32, tid: Option<u32>, name: &str, args: Value) -> Value {
    let mut event = json!({"ph": "M", "pid": pid, "name": name, "args": args});
    if let Some(tid) = tid {
        event["tid"] = tid.into();
    }
    event
}

/// The unit of the SVG's time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeUnit {
    /// Seconds, milliseconds or microseconds, by the makespan's magnitude.
    #[default]
    Auto,
    Seconds,
    Milliseconds,
    Microseconds,
    /// Plain numbers (synthetic costs such as F = 1, B = 2), labelled "units".
    Unitless,
}

impl TimeUnit {
    /// Seconds per unit and the unit's label, for a schedule of this makespan.
    fn resolve(self, makespan_s: f64) -> (f64, &'static str) {
        match self {
            TimeUnit::Auto if makespan_s >= 1.0 => (1.0, "s"),
            TimeUnit::Auto if makespan_s >= 1e-3 => (1e-3, "ms"),
            TimeUnit::Auto => (1e-6, "µs"),
            TimeUnit::Seconds => (1.0, "s"),
            TimeUnit::Milliseconds => (1e-3, "ms"),
            TimeUnit::Microseconds => (1e-6, "µs"),
            TimeUnit::Unitless => (1.0, "units"),
        }
    }
}

/// Options of [`svg_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SvgOptions {
    pub time_unit: TimeUnit,
}

/// [`svg_with`] with the default options (time unit chosen by the makespan).
pub fn svg(s: &Schedule, sim: &Simulation, title: &str) -> String {
    svg_with(s, sim, title, &SvgOptions::default())
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 58.0;
const COMPUTE_H: f64 = 18.0;
const COMM_H: f64 = 4.0;
const COMM_GAP: f64 = 2.0;
const ROW_GAP: f64 = 10.0;
const BACKGROUND: &str = "#f2f2f2";
const INK: &str = "#222222";

/// A Gantt chart of the simulated schedule, one row per rank: compute spans as coloured
/// boxes (chunks above 0 lighter) with the micro-batch number where the box is wide
/// enough, sends and data-parallel reductions as thin bars below, idle time as the light
/// background, the critical path outlined; title, time axis and legend around it.
pub fn svg_with(s: &Schedule, sim: &Simulation, title: &str, opts: &SvgOptions) -> String {
    let mut out = String::with_capacity(4096 + 200 * sim.spans.len());
    write_svg(&mut out, s, sim, title, opts).expect("writing to a String cannot fail");
    out
}

fn write_svg(
    o: &mut String,
    s: &Schedule,
    sim: &Simulation,
    title: &str,
    opts: &SvgOptions,
) -> fmt::Result {
    // Spans with a visible extent; zero-length ones (free sends, say) have nothing to draw.
    let drawn: Vec<(&Span, bool)> = sim
        .spans
        .iter()
        .zip(critical_flags(sim))
        .filter(|(sp, _)| sp.start_s.is_finite() && sp.end_s.is_finite() && sp.end_s > sp.start_s)
        .collect();
    // Thin lanes below each compute row, only for the streams that carry anything.
    let sends = drawn
        .iter()
        .any(|(sp, _)| matches!(sp.stream, Stream::Send { .. }));
    let reduces = drawn
        .iter()
        .any(|(sp, _)| sp.stream == Stream::DataParallel);
    let comm_lane = COMM_H + COMM_GAP;
    let lane = |stream: Stream| match stream {
        Stream::Compute => (0.0, COMPUTE_H),
        Stream::Send { .. } => (COMPUTE_H + COMM_GAP, COMM_H),
        Stream::DataParallel => (
            COMPUTE_H + COMM_GAP + f64::from(u8::from(sends)) * comm_lane,
            COMM_H,
        ),
    };
    let pitch = COMPUTE_H + f64::from(u8::from(sends) + u8::from(reduces)) * comm_lane + ROW_GAP;
    let rows = s.stages.max(sim.ranks.len() as u32);
    let row_top = |r: u32| TOP + f64::from(r) * pitch;
    let plot_w = WIDTH - LEFT - RIGHT;
    let makespan = if sim.makespan_s.is_finite() && sim.makespan_s > 0.0 {
        sim.makespan_s
    } else {
        0.0
    };
    let x_of = |t: f64| {
        if makespan > 0.0 {
            LEFT + t.clamp(0.0, makespan) / makespan * plot_w
        } else {
            LEFT
        }
    };
    let (unit_s, unit) = opts.time_unit.resolve(makespan);
    let axis_y = row_top(rows) - ROW_GAP + 6.0;
    let (step, decimals) = tick_step(makespan / unit_s);
    let ticks = (makespan / unit_s / step + 1e-9).floor() as u32;
    let tick_x = |k: u32| x_of(f64::from(k) * step * unit_s);
    // Times in the text to a hundredth of a tick step, about a pixel.
    let precise = decimals + 2;

    // Legend: the ops that appear, the idle background, the critical path, the chunk shades.
    let mut legend: Vec<(String, String)> = STYLES
        .iter()
        .filter(|st| drawn.iter().any(|(sp, _)| sp.instr.op == st.op))
        .map(|st| (st.label.to_string(), format!(r#"fill="{}""#, hex(st.rgb))))
        .collect();
    legend.push((
        "idle".into(),
        format!(r##"fill="{BACKGROUND}" stroke="#cccccc""##),
    ));
    if !sim.critical_path.is_empty() {
        legend.push((
            "critical path".into(),
            format!(r#"fill="none" stroke="{INK}" stroke-width="1.5""#),
        ));
    }
    if s.chunks > 1 {
        let last = s.chunks - 1;
        let label = if last == 1 {
            "chunk 1: lighter".to_string()
        } else {
            format!("chunks 1–{last}: lighter")
        };
        let fill = hex(shade(style_of(Op::Forward).rgb, last, s.chunks));
        legend.push((label, format!(r#"fill="{fill}""#)));
    }
    let mut placed = Vec::with_capacity(legend.len());
    let (mut lx, mut ly) = (LEFT, axis_y + 46.0);
    for (label, _) in &legend {
        let w = 18.0 + 6.5 * label.chars().count() as f64 + 18.0;
        if lx + w > WIDTH - RIGHT && lx > LEFT {
            (lx, ly) = (LEFT, ly + 18.0);
        }
        placed.push((lx, ly));
        lx += w;
    }
    let height = ly + 14.0;

    writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    )?;
    writeln!(
        o,
        "<style>.t{{font-size:10px;text-anchor:middle}} .crit{{fill:none;stroke:{INK};stroke-width:1.5}} .tick{{font-size:11px;fill:#444444;text-anchor:middle}}</style>"
    )?;
    writeln!(
        o,
        r##"<rect width="{WIDTH:.0}" height="{height:.0}" fill="#ffffff"/>"##
    )?;
    writeln!(
        o,
        r#"<text x="{LEFT:.0}" y="22" font-size="15" font-weight="bold" fill="{INK}">{}</text>"#,
        esc(title)
    )?;
    writeln!(
        o,
        r##"<text x="{LEFT:.0}" y="42" font-size="12" fill="#444444">{} · p = {} · m = {} · v = {} · makespan {:.precise$} {unit} · bubble {:.1} %</text>"##,
        esc(&s.name),
        s.stages,
        s.microbatches,
        s.chunks,
        makespan / unit_s,
        sim.bubble_fraction * 100.0
    )?;

    // Rows: label and the compute lane's background, where idle time shows.
    writeln!(o, "<g>")?;
    for r in 0..rows {
        let y = row_top(r);
        writeln!(
            o,
            r#"<text x="{:.2}" y="{:.2}" font-size="12" text-anchor="end" fill="{INK}">stage {r}</text>"#,
            LEFT - 8.0,
            y + COMPUTE_H / 2.0 + 4.0
        )?;
        writeln!(
            o,
            r#"<rect x="{LEFT:.2}" y="{y:.2}" width="{:.2}" height="{COMPUTE_H:.2}" fill="{BACKGROUND}"/>"#,
            x_of(makespan) - LEFT
        )?;
    }
    writeln!(o, "</g>")?;

    // Grid: white lines through the rows' backgrounds at the axis ticks.
    writeln!(o, r##"<g stroke="#ffffff" stroke-width="1">"##)?;
    for k in 1..=ticks {
        let x = tick_x(k);
        writeln!(
            o,
            r#"<line x1="{x:.2}" y1="{TOP:.2}" x2="{x:.2}" y2="{:.2}"/>"#,
            axis_y - 6.0
        )?;
    }
    writeln!(o, "</g>")?;

    // Spans, then their labels, then the critical path's outlines on top of everything.
    let boxes: Vec<(&Span, [f64; 4], bool)> = drawn
        .iter()
        .map(|&(sp, crit)| {
            let (dy, h) = lane(sp.stream);
            let x = x_of(sp.start_s);
            (sp, [x, row_top(sp.rank) + dy, x_of(sp.end_s) - x, h], crit)
        })
        .collect();
    let fill = |sp: &Span| match sp.stream {
        Stream::Compute => shade(style_of(sp.instr.op).rgb, sp.instr.chunk, s.chunks),
        _ => style_of(sp.instr.op).rgb,
    };
    writeln!(o, "<g>")?;
    for &(sp, [x, y, bw, h], _) in &boxes {
        writeln!(
            o,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{bw:.2}" height="{h:.2}" fill="{}"><title>{} · stage {} · {:.precise$}–{:.precise$} {unit}</title></rect>"#,
            hex(fill(sp)),
            esc(&span_name(s, sp.instr)),
            sp.rank,
            sp.start_s / unit_s,
            sp.end_s / unit_s
        )?;
    }
    writeln!(o, "</g>\n<g class=\"t\">")?;
    for &(sp, [x, y, bw, h], _) in boxes.iter().filter(|b| b.0.stream == Stream::Compute) {
        let text = match sp.instr.op {
            Op::OptimizerStep => "step".to_string(),
            _ => sp.instr.microbatch.to_string(),
        };
        if bw < 14.0 || bw < 6.0 * text.len() as f64 + 4.0 {
            continue;
        }
        let [_, r, g, b] = fill(sp).to_be_bytes().map(f64::from);
        let ink = if 0.299 * r + 0.587 * g + 0.114 * b > 150.0 {
            INK
        } else {
            "#ffffff"
        };
        writeln!(
            o,
            r#"<text x="{:.2}" y="{:.2}" fill="{ink}">{text}</text>"#,
            x + bw / 2.0,
            y + h / 2.0 + 3.5
        )?;
    }
    writeln!(o, "</g>\n<g class=\"crit\">")?;
    for (_, [x, y, bw, h], _) in boxes.iter().filter(|b| b.2) {
        writeln!(
            o,
            r#"<rect x="{x:.2}" y="{y:.2}" width="{bw:.2}" height="{h:.2}"/>"#
        )?;
    }
    writeln!(o, "</g>")?;

    // Time axis.
    writeln!(o, r##"<g stroke="#444444" stroke-width="1">"##)?;
    writeln!(
        o,
        r#"<line x1="{LEFT:.2}" y1="{axis_y:.2}" x2="{:.2}" y2="{axis_y:.2}"/>"#,
        x_of(makespan)
    )?;
    for k in 0..=ticks {
        let x = tick_x(k);
        writeln!(
            o,
            r#"<line x1="{x:.2}" y1="{axis_y:.2}" x2="{x:.2}" y2="{:.2}"/>"#,
            axis_y + 4.0
        )?;
    }
    writeln!(o, "</g>\n<g class=\"tick\">")?;
    for k in 0..=ticks {
        writeln!(
            o,
            r#"<text x="{:.2}" y="{:.2}">{:.decimals$}</text>"#,
            tick_x(k),
            axis_y + 16.0,
            f64::from(k) * step
        )?;
    }
    writeln!(
        o,
        r#"<text x="{:.2}" y="{:.2}">time ({unit})</text>"#,
        LEFT + plot_w / 2.0,
        axis_y + 32.0
    )?;
    writeln!(o, "</g>")?;

    writeln!(o, r#"<g font-size="12" fill="{INK}">"#)?;
    for ((label, paint), (x, y)) in legend.iter().zip(&placed) {
        writeln!(
            o,
            r#"<rect x="{x:.2}" y="{:.2}" width="12" height="12" {paint}/><text x="{:.2}" y="{y:.2}">{}</text>"#,
            y - 10.0,
            x + 18.0,
            esc(label)
        )?;
    }
    writeln!(o, "</g>\n</svg>")
}

fn hex(rgb: u32) -> String {
    format!("#{rgb:06x}")
}

/// Chunk 0 in the base colour, later chunks progressively mixed with white.
fn shade(rgb: u32, chunk: u32, chunks: u32) -> u32 {
    if chunks <= 1 || chunk == 0 {
        return rgb;
    }
    let t = 0.5 * f64::from(chunk.min(chunks - 1)) / f64::from(chunks - 1);
    let [_, r, g, b] = rgb.to_be_bytes();
    let [r, g, b] = [r, g, b].map(|c| (f64::from(c) + (255.0 - f64::from(c)) * t).round() as u8);
    u32::from_be_bytes([0, r, g, b])
}

/// A round tick step (1, 2 or 5 × 10^k) giving 5 to 10 ticks from 0 to `range`, and the
/// decimals its labels need.
fn tick_step(range: f64) -> (f64, usize) {
    let range = if range.is_finite() && range > 0.0 {
        range
    } else {
        1.0
    };
    let k = (range / 10.0).log10().floor() as i32;
    let base = 10f64.powi(k);
    let (m, k) = match range / base {
        q if q < 20.0 => (2.0, k),
        q if q < 50.0 => (5.0, k),
        _ => (1.0, k + 1),
    };
    (m * 10f64.powi(k), (-k).max(0) as usize)
}

/// Escapes text for XML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_five_to_ten() {
        for range in [
            0.37, 1.0, 3.3, 9.99, 10.0, 19.9, 20.0, 33.7, 49.9, 50.0, 99.9, 100.0, 123.4, 7e5,
            2.5e-4,
        ] {
            let (step, _) = tick_step(range);
            let n = (range / step + 1e-9).floor() as u32 + 1;
            assert!(
                (5..=10).contains(&n),
                "range {range}: step {step} gives {n} ticks"
            );
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                "step {step}"
            );
        }
        assert_eq!(tick_step(33.7), (5.0, 0));
        assert_eq!(tick_step(0.37), (0.05, 2));
    }

    #[test]
    fn escapes_xml() {
        assert_eq!(esc(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
    }
}
