//! One concrete placement, checked and costed: every layer covered in order, each device
//! used once, memory within each device, consecutive stages linked; its stages, latency
//! and bottleneck.
//!
//! Independent of the search: it reads only the `Problem`, so it can judge any placement,
//! the solver's or a user's.

use super::Stage;
use crate::problem::Problem;
/// Evaluates a placement given as (device index, first layer, last layer) per stage:
/// its stages with their costs, its latency and its bottleneck. `None` if it is not a
/// valid placement (layers not covered in order, a device repeated or unable to run its
/// layers, memory exceeded, consecutive devices not linked).
pub fn evaluate(p: &Problem, stages: &[(usize, usize, usize)]) -> Option<(Vec<Stage>, f64, f64)> {
    let n = p.layers.len();
    let mut used = vec![false; p.devices.len()];
    let mut expect = 0;
    let mut out: Vec<Stage> = Vec::with_capacity(stages.len());
    for (i, &(d, a, b)) in stages.iter().enumerate() {
        if d >= p.devices.len() || a != expect || b < a || b >= n || used[d] {
            return None;
        }
        used[d] = true;
        expect = b + 1;
        let dev = &p.devices[d];
        let mut compute = 0.0;
        let mut mem = 0.0;
        for l in &p.layers[a..=b] {
            compute += l.time_s[dev.kind]?;
            mem += l.memory_bytes;
        }
        if mem > dev.memory_bytes {
            return None;
        }
        let transfer = match stages.get(i + 1) {
            None => 0.0,
            Some(&(e, _, _)) => {
                let l = &p.layers[b];
                p.links
                    .iter()
                    .filter(|k| (k.a == d && k.b == e) || (k.a == e && k.b == d))
                    .map(|k| k.transfer_s(l.output_bytes, l.output_messages))
                    .min_by(f64::total_cmp)?
            }
        };
        out.push(Stage {
            device: dev.name.clone(),
            device_index: d,
            kind: p.kinds[dev.kind].clone(),
            first_layer: a,
            last_layer: b,
            first_layer_name: p.layers[a].name.clone(),
            last_layer_name: p.layers[b].name.clone(),
            compute_s: compute,
            transfer_s: transfer,
            memory_bytes: mem,
            device_memory_bytes: dev.memory_bytes,
        });
    }
    if expect != n {
        return None;
    }
    let latency: f64 = out.iter().map(|s| s.compute_s + s.transfer_s).sum();
    let bottleneck = out
        .iter()
        .map(|s| s.compute_s.max(s.transfer_s))
        .fold(0.0, f64::max);
    Some((out, latency, bottleneck))
}
