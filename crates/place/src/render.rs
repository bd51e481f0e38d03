//! The pipelined timeline of a placement as a self-contained SVG: `requests` requests (or
//! micro-batches) flow through the stages in order; a stage computes one at a time, a link
//! carries one transfer at a time, and a request enters a stage when its transfer has
//! arrived and the stage is free.

use crate::solve::Stage;

/// (start, end) of one stage's compute and of its outgoing transfer for one request.
pub type Span = ((f64, f64), (f64, f64));

/// Start and end of every compute and transfer: `[request][stage] → (compute, transfer)`.
pub fn timeline(stages: &[Stage], requests: usize) -> Vec<Vec<Span>> {
    let mut stage_free = vec![0.0f64; stages.len()];
    let mut link_free = vec![0.0f64; stages.len()];
    let mut out = Vec::with_capacity(requests);
    for _ in 0..requests {
        let mut row = Vec::with_capacity(stages.len());
        let mut arrive = 0.0f64;
        for (s, st) in stages.iter().enumerate() {
            let c0 = arrive.max(stage_free[s]);
            let c1 = c0 + st.compute_s;
            stage_free[s] = c1;
            let t0 = c1.max(link_free[s]);
            let t1 = t0 + st.transfer_s;
            link_free[s] = t1;
            arrive = t1;
            row.push(((c0, c1), (t0, t1)));
        }
        out.push(row);
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Human time with a unit.
pub fn fmt_s(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// The SVG: one row per stage (its device) and, between rows, one per link in use.
pub fn svg(stages: &[Stage], requests: usize, title: &str) -> String {
    let tl = timeline(stages, requests);
    let end = tl
        .last()
        .and_then(|r| r.last())
        .map_or(0.0, |x| x.1 .1.max(x.0 .1))
        .max(f64::MIN_POSITIVE);
    let (left, width, row_h, top) = (230.0, 900.0, 26.0, 48.0);
    let mut rows: Vec<(String, usize, bool)> = Vec::new(); // label, stage, is_link
    for (s, st) in stages.iter().enumerate() {
        rows.push((
            format!(
                "{} · layers {}–{}",
                st.device, st.first_layer, st.last_layer
            ),
            s,
            false,
        ));
        if s + 1 < stages.len() {
            rows.push((format!("  → {}", stages[s + 1].device), s, true));
        }
    }
    let height = top + rows.len() as f64 * row_h + 50.0;
    let x = |t: f64| left + t / end * width;
    let mut o = String::new();
    o += &format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        left + width + 20.0
    );
    o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    o += &format!(
        "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        esc(title)
    );
    o += &format!(
        "<text x=\"10\" y=\"38\">{requests} requests pipelined; makespan {}</text>\n",
        fmt_s(end)
    );
    for (i, (label, s, link)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h;
        o += &format!(
            "<text x=\"10\" y=\"{}\"{}>{}</text>\n",
            y + row_h * 0.65,
            if *link { " fill=\"#666\"" } else { "" },
            esc(label)
        );
        for (r, req) in tl.iter().enumerate() {
            let ((c0, c1), (t0, t1)) = req[*s];
            let (a, b) = if *link { (t0, t1) } else { (c0, c1) };
            if b <= a {
                continue;
            }
            let hue = (r * 47) % 360;
            let (light, h) = if *link {
                (80, row_h * 0.5)
            } else {
                (60, row_h * 0.8)
            };
            o += &format!(
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{h:.2}\" fill=\"hsl({hue},60%,{light}%)\" stroke=\"#333\" stroke-width=\"0.5\"><title>request {r}: {} – {}</title></rect>\n",
                x(a),
                y + (row_h - h) / 2.0,
                (x(b) - x(a)).max(0.5),
                fmt_s(a),
                fmt_s(b)
            );
        }
    }
    let axis_y = top + rows.len() as f64 * row_h + 10.0;
    o += &format!(
        "<line x1=\"{left}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"#333\"/>\n",
        left + width
    );
    for k in 0..=5 {
        let t = end * k as f64 / 5.0;
        o += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            x(t),
            axis_y + 16.0,
            fmt_s(t)
        );
    }
    o += "</svg>\n";
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(c: f64, t: f64) -> Stage {
        Stage {
            device: "d".into(),
            device_index: 0,
            kind: "k".into(),
            first_layer: 0,
            last_layer: 0,
            first_layer_name: "a".into(),
            last_layer_name: "a".into(),
            compute_s: c,
            transfer_s: t,
            memory_bytes: 0.0,
            device_memory_bytes: 0.0,
        }
    }

    #[test]
    fn steady_state_runs_at_the_bottleneck() {
        // Stages 1, 3 with a transfer of 2: request r finishes stage 1 at 1 + 1 + 2 + 3(r + 1).
        let s = [stage(1.0, 2.0), stage(3.0, 0.0)];
        let tl = timeline(&s, 4);
        assert_eq!(tl[0][1].0, (3.0, 6.0));
        assert_eq!(tl[3][1].0, (12.0, 15.0));
        // One request's end equals the latency (sum of stages and transfers).
        assert_eq!(tl[0][1].0 .1, 1.0 + 2.0 + 3.0);
        let svg = svg(&s, 4, "t <x>");
        assert!(
            svg.starts_with("<svg") && svg.contains("t &lt;x&gt;") && svg.ends_with("</svg>\n")
        );
    }
}
