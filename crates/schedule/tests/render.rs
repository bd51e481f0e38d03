//! The trace and the SVG of simulated schedules: snapshots of a small 1F1B, and the
//! structural checks that a trace viewer and an SVG reader rely on.

use std::collections::BTreeSet;

use plait_schedule::render::{chrome_trace, svg, svg_with, SvgOptions, TimeUnit};
use plait_schedule::ScheduleKind as Kind;
use plait_schedule::{
    generate, simulate, validate, Costs, Schedule, ScheduleSpec, Simulation, Stream,
};
use serde_json::Value;

/// Generates, validates and simulates with F = 1, B = 2 per micro-batch and rank, sends of
/// 0.1 and an optimizer step of 0.5.
fn simulated(kind: Kind, p: u32, m: u32, v: u32) -> (Schedule, Simulation) {
    let s = generate(&ScheduleSpec::new(kind, p, m, v)).unwrap();
    validate(&s).unwrap();
    let mut costs = Costs::uniform(p, v, 1.0, 2.0, 0.0);
    for rank in &mut costs.ranks {
        rank.optimizer_s = 0.5;
        for c in &mut rank.chunks {
            c.send_activation_s = 0.1;
            c.send_gradient_s = 0.1;
        }
    }
    let sim = simulate(&s, &costs).unwrap();
    (s, sim)
}

fn one_f_one_b() -> (Schedule, Simulation) {
    simulated(Kind::OneFOneB, 4, 8, 1)
}

fn events(s: &Schedule, sim: &Simulation) -> Vec<Value> {
    // Through the serialised text, as a viewer reads it.
    let text = serde_json::to_string(&chrome_trace(s, sim)).unwrap();
    let trace: Value = serde_json::from_str(&text).unwrap();
    trace["traceEvents"].as_array().unwrap().clone()
}

#[test]
fn svg_snapshot() {
    let (s, sim) = one_f_one_b();
    let opts = SvgOptions {
        time_unit: TimeUnit::Unitless,
    };
    insta::assert_snapshot!(svg_with(&s, &sim, "1F1B, 4 stages, 8 micro-batches", &opts));
}

#[test]
fn trace_snapshot() {
    let (s, sim) = one_f_one_b();
    insta::assert_snapshot!(serde_json::to_string_pretty(&chrome_trace(&s, &sim)).unwrap());
}

/// What chrome://tracing and Perfetto need of the events.
fn check_trace(s: &Schedule, sim: &Simulation) {
    let events = events(s, sim);
    let mut named = BTreeSet::new();
    let mut used = BTreeSet::new();
    let mut complete = 0;
    for e in &events {
        let pid = e["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("pid not an integer: {e}"));
        assert!(pid >= 1, "pid 0 is special in Perfetto: {e}");
        assert!(e["name"].is_string(), "{e}");
        match e["ph"].as_str().unwrap() {
            "X" => {
                complete += 1;
                let tid = e["tid"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("tid not an integer: {e}"));
                used.insert((pid, tid));
                for key in ["ts", "dur"] {
                    let t = e[key]
                        .as_f64()
                        .unwrap_or_else(|| panic!("{key} not a number: {e}"));
                    assert!(t.is_finite() && t >= 0.0, "{e}");
                }
                assert!(e["cat"].is_string() && e["args"].is_object(), "{e}");
            }
            "M" => {
                if e["name"] == "thread_name" {
                    named.insert((pid, e["tid"].as_u64().unwrap()));
                    assert!(e["args"]["name"].is_string(), "{e}");
                }
            }
            "C" => {
                let gib = e["args"]["GiB"].as_f64().unwrap();
                assert!(gib.is_finite() && e["ts"].as_f64().unwrap() >= 0.0, "{e}");
            }
            ph => panic!("unexpected phase {ph}: {e}"),
        }
    }
    assert_eq!(
        complete,
        sim.spans.len(),
        "{}: one complete event per span",
        s.name
    );
    assert!(
        used.is_subset(&named),
        "{}: threads without names: {:?}",
        s.name,
        used.difference(&named)
    );
    let critical = events
        .iter()
        .filter(|e| e["args"]["critical"] == true)
        .count();
    assert_eq!(critical, sim.critical_path.len());
}

#[test]
fn trace_is_valid_chrome_trace_json() {
    for (s, sim) in [
        one_f_one_b(),
        simulated(Kind::Interleaved, 4, 8, 2),
        simulated(Kind::ZbH1, 3, 6, 1),
    ] {
        check_trace(&s, &sim);
    }
}

#[test]
fn broken_times_still_give_a_valid_trace_and_svg() {
    let (s, mut sim) = one_f_one_b();
    sim.spans[0].start_s = f64::NAN;
    sim.spans[1].start_s = -1.0;
    sim.spans[2].end_s = f64::INFINITY;
    check_trace(&s, &sim);
    check_svg(&svg(&s, &sim, ""), &sim);
}

#[test]
fn trace_names_streams_and_spans() {
    let (s, sim) = one_f_one_b();
    let events = events(&s, &sim);
    let names: BTreeSet<&str> = events.iter().filter_map(|e| e["name"].as_str()).collect();
    for name in [
        "F0",
        "B7",
        "sendA 3",
        "sendG 3",
        "step",
        "memory",
        "process_name",
    ] {
        assert!(names.contains(name), "no event named {name}");
    }
    let threads: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(
        threads,
        BTreeSet::from([
            "compute",
            "send → stage 0",
            "send → stage 1",
            "send → stage 2",
            "send → stage 3"
        ])
    );
    let processes: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(processes, ["stage 0", "stage 1", "stage 2", "stage 3"]);
}

#[test]
fn interleaved_trace_has_chunk_suffixes() {
    let (s, sim) = simulated(Kind::Interleaved, 4, 8, 2);
    let events = events(&s, &sim);
    let names: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["name"].as_str())
        .collect();
    for name in ["F0.c0", "F0.c1", "B7.c1", "sendA 0.c1", "step"] {
        assert!(names.contains(name), "no span named {name}");
    }
    assert!(!names.contains("F0"), "chunked spans carry their chunk");
}

/// Checks that the SVG's elements close and that every visible span is drawn.
fn check_svg(svg: &str, sim: &Simulation) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<g").count(),
        svg.matches("</g>").count(),
        "balanced groups"
    );
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    assert_eq!(
        svg.matches("<title>").count(),
        svg.matches("</title>").count()
    );
    // Spans of finite, positive length; the others have nothing to draw.
    let visible = sim
        .spans
        .iter()
        .filter(|sp| sp.start_s.is_finite() && sp.end_s.is_finite() && sp.end_s > sp.start_s);
    let compute = visible
        .clone()
        .filter(|sp| sp.stream == Stream::Compute)
        .count();
    assert!(svg.matches("<rect").count() >= compute + sim.ranks.len());
    assert_eq!(
        svg.matches("<title>").count(),
        visible.count(),
        "one box per visible span"
    );
}

#[test]
fn svg_is_well_formed_with_legend() {
    let (s, sim) = one_f_one_b();
    let out = svg(&s, &sim, "a <title> & more");
    check_svg(&out, &sim);
    assert!(out.contains("a &lt;title&gt; &amp; more"));
    for entry in [
        ">forward<",
        ">backward<",
        ">optimizer step<",
        ">send activation<",
        ">send gradient<",
        ">idle<",
        ">critical path<",
    ] {
        assert!(out.contains(entry), "legend lacks {entry}");
    }
    assert!(
        !out.contains(">recompute<"),
        "only the ops that occur are in the legend"
    );
    for r in 0..4 {
        assert!(out.contains(&format!(">stage {r}</text>")));
    }
    // 35.1 seconds: the default unit is the second.
    assert!(out.contains("time (s)"));
}

#[test]
fn svg_time_unit_follows_the_makespan() {
    let (s, mut sim) = one_f_one_b();
    for sp in &mut sim.spans {
        sp.start_s *= 1e-3;
        sp.end_s *= 1e-3;
    }
    sim.makespan_s *= 1e-3;
    assert!(svg(&s, &sim, "").contains("time (ms)"));
    for sp in &mut sim.spans {
        sp.start_s *= 1e-3;
        sp.end_s *= 1e-3;
    }
    sim.makespan_s *= 1e-3;
    assert!(svg(&s, &sim, "").contains("time (µs)"));
}

#[test]
fn svg_of_interleaved_and_large_schedules() {
    let (s, sim) = simulated(Kind::Interleaved, 4, 8, 2);
    let out = svg(&s, &sim, "interleaved");
    check_svg(&out, &sim);
    assert!(out.contains("chunk 1: lighter"));

    let (s, sim) = simulated(Kind::OneFOneB, 64, 512, 1);
    let out = svg(&s, &sim, "large");
    check_svg(&out, &sim);
    assert!(out.contains(">stage 63</text>"));
    // Boxes of under a pixel get no text.
    assert!(out.matches("<text").count() < sim.spans.len() / 2);
}
