//! The measured timeline in the simulator's shapes: spans become a
//! `plait_schedule::Simulation`, so the Perfetto trace is written by the very renderer the
//! simulator uses (`plait_schedule::render::chrome_trace`) and the two open side by side.

use plait_schedule::{RankReport, Schedule, Simulation, Span, Stream};
use serde_json::Value;

/// A `Simulation` holding measured spans (seconds since the run started). Memory and the
/// critical path are not measured and stay empty.
pub fn measured_simulation(schedule: &Schedule, spans: &[Span]) -> Simulation {
    let p = schedule.stages as usize;
    let start = spans
        .iter()
        .map(|s| s.start_s)
        .fold(f64::INFINITY, f64::min);
    let start = if start.is_finite() { start } else { 0.0 };
    let end = spans.iter().map(|s| s.end_s).fold(start, f64::max);
    let makespan_s = end - start;
    let mut busy = vec![0.0f64; p];
    let mut spans: Vec<Span> = spans
        .iter()
        .map(|s| Span {
            start_s: s.start_s - start,
            end_s: s.end_s - start,
            ..*s
        })
        .collect();
    spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s).then(a.rank.cmp(&b.rank)));
    for s in spans.iter().filter(|s| s.stream == Stream::Compute) {
        if let Some(b) = busy.get_mut(s.rank as usize) {
            *b += s.end_s - s.start_s;
        }
    }
    let ranks: Vec<RankReport> = busy
        .iter()
        .map(|&b| RankReport {
            busy_s: b,
            idle_s: (makespan_s - b).max(0.0),
            peak_memory_bytes: 0.0,
            peak_inflight_microbatches: 0.0,
            memory_timeline: Vec::new(),
        })
        .collect();
    let bubble_fraction = if makespan_s > 0.0 {
        ranks.iter().map(|r| r.idle_s / makespan_s).sum::<f64>() / p.max(1) as f64
    } else {
        0.0
    };
    let max_busy = busy.iter().copied().fold(0.0, f64::max);
    Simulation {
        makespan_s,
        bubble_fraction,
        bubble_s: (makespan_s - max_busy).max(0.0),
        ranks,
        spans,
        critical_path: Vec::new(),
    }
}

/// The measured timeline as a Chrome/Perfetto trace (the simulator's format).
pub fn chrome_trace(schedule: &Schedule, spans: &[Span]) -> Value {
    let sim = measured_simulation(schedule, spans);
    let mut v = plait_schedule::render::chrome_trace(schedule, &sim);
    if let Some(other) = v.get_mut("otherData").and_then(Value::as_object_mut) {
        other.insert("measured".into(), Value::Bool(true));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use plait_schedule::{Instr, Op};

    #[test]
    fn spans_shift_to_zero_and_count_busy_time() {
        let s = plait_schedule::generate(&plait_schedule::ScheduleSpec::new(
            plait_spec::Schedule::OneFOneB,
            1,
            1,
            1,
        ))
        .unwrap();
        let span = |op, a, b| Span {
            rank: 0,
            stream: Stream::Compute,
            instr: Instr::new(op, 0, 0),
            start_s: a,
            end_s: b,
            pred: None,
        };
        let sim = measured_simulation(
            &s,
            &[span(Op::Forward, 1.0, 2.0), span(Op::Backward, 3.0, 5.0)],
        );
        assert_eq!(sim.makespan_s, 4.0);
        assert_eq!(sim.ranks[0].busy_s, 3.0);
        assert_eq!(sim.spans[0].start_s, 0.0);
        let trace = chrome_trace(&s, &[span(Op::Forward, 1.0, 2.0)]);
        assert_eq!(trace["otherData"]["measured"], true);
        assert!(trace["traceEvents"].as_array().unwrap().len() > 2);
    }
}
