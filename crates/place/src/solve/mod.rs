//! The exact solver: best-first branch and bound over (layers placed, last device class,
//! devices used per class), bounded below by a relaxation that may reuse devices.
//!
//! * **Symmetry.** Devices that can swap places without changing any cost (same layer
//!   times, same memory, the same links to every other device) form a class; the symmetric
//!   group acts on each class, so a set of used devices is known up to symmetry by how many
//!   of each class it holds, and the last device by its class. The search state is
//!   `(j, class of the last device, counts)`: the dynamic program over (layer prefix, last
//!   device, used set), quotiented by the symmetry, and exactly that DP when all devices
//!   differ.
//! * **Bound.** `h[j][c]`: the best completion of layers `j..` starting a stage on class
//!   `c`, computed backwards when devices may be reused (a relaxation: every placement is a
//!   relaxed placement). A state's bound is its cost so far combined with the best
//!   transfer-plus-`h` over the classes it can still use. Costs never decrease along a
//!   path (sums of non-negative terms, or maxima), so the bound is admissible and the first
//!   time the smallest open bound reaches the incumbent, the incumbent is optimal.
//! * **Incumbent.** A beam over layer boundaries (the best few states per boundary by
//!   bound) finds a placement before the exact search starts, so a search stopped by its
//!   label budget still answers, with the bound it proved (`optimal: false`).
//! * **SLO.** Under the throughput objective with a latency SLO, each state keeps a Pareto
//!   set of (bottleneck, latency) labels; a label whose latency plus the relaxed remaining
//!   latency exceeds the SLO is cut.
//!
//! Deterministic: no clock, no threads, fixed expansion order, index tie-breaks.
//!
//! Split by what it does: `classes` (the problem over classes of interchangeable devices,
//! stage costs, transfers and the relaxation that gives the bound), `search` (the beam,
//! the best-first search and the greedy dives over those classes), `evaluate` (the check
//! and costs of one concrete placement). This file holds the options and answer types and
//! `place`, which runs the searches and words an infeasible answer; it knows nothing of
//! where the problem came from (devices, models, JSON) or how it is rendered.

use serde::{Deserialize, Serialize};

use crate::problem::Problem;

mod classes;
mod evaluate;
mod search;

use classes::{Combine, Core, Metric};
pub use evaluate::evaluate;
use search::{solve, Path};
/// Labels (search states) the exact search may create before it stops and reports its
/// bound: about 30 MB at 64 bytes per label plus its map entry, and under a second on one
/// core of the development machine (a shared 2-core VM).
pub const DEFAULT_MAX_LABELS: usize = 400_000;

/// What the placement minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// One request's end-to-end time: every stage's compute plus every transfer.
    Latency,
    /// A pipelined stream: the largest stage time or transfer (its inverse is the rate).
    Throughput,
}

impl Objective {
    pub fn keyword(self) -> &'static str {
        match self {
            Objective::Latency => "latency",
            Objective::Throughput => "throughput",
        }
    }
}

impl std::str::FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "latency" => Ok(Objective::Latency),
            "throughput" => Ok(Objective::Throughput),
            _ => Err(format!(
                "unknown objective `{s}` (allowed: latency, throughput)"
            )),
        }
    }
}

/// Solver options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    pub objective: Objective,
    /// Latency limit of one request (seconds); with the throughput objective, the best
    /// bottleneck among placements whose latency meets it.
    pub slo_s: Option<f64>,
    /// Label budget of the exact search.
    pub max_labels: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            objective: Objective::Latency,
            slo_s: None,
            max_labels: DEFAULT_MAX_LABELS,
        }
    }
}

/// One stage of a placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    pub device: String,
    pub device_index: usize,
    pub kind: String,
    pub first_layer: usize,
    pub last_layer: usize,
    pub first_layer_name: String,
    pub last_layer_name: String,
    /// Sum of the stage's layer times on its device.
    pub compute_s: f64,
    /// Transfer of the stage's output to the next stage (0 for the last stage).
    pub transfer_s: f64,
    pub memory_bytes: f64,
    pub device_memory_bytes: f64,
}

/// What the search did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchStats {
    pub devices: usize,
    /// Classes of interchangeable devices the search works over.
    pub device_classes: usize,
    pub labels: usize,
    pub expanded: usize,
    /// The label budget ran out before optimality was proven.
    pub budget_exhausted: bool,
}

/// The answer of [`place`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub feasible: bool,
    pub objective: Objective,
    /// The objective's value of the placement (`null` when infeasible).
    pub value_s: Option<f64>,
    /// Proven optimal (or, when infeasible, proven infeasible).
    pub optimal: bool,
    /// The best proven lower bound on the objective (equals `value_s` when optimal).
    pub lower_bound_s: Option<f64>,
    /// The placement's latency (sum of stage times and transfers).
    pub latency_s: Option<f64>,
    /// The placement's bottleneck (largest stage time or transfer).
    pub bottleneck_s: Option<f64>,
    pub slo_s: Option<f64>,
    pub stages: Vec<Stage>,
    /// Why no placement exists (infeasible answers).
    pub reason: Option<String>,
    /// Bytes all layers need together.
    pub memory_needed_bytes: f64,
    /// Infeasible by memory: the least factor every device's memory would need to grow by
    /// for some placement to fit (≥ 1).
    pub min_memory_scale: Option<f64>,
    pub search: SearchStats,
}

/// The concrete devices of a class path: each class hands out its members in order.
fn devices_of(core: &Core, path: &Path) -> Vec<(usize, usize, usize)> {
    let mut next = vec![0usize; core.nc()];
    path.iter()
        .map(|&(c, a, b)| {
            let d = core.classes[c].members[next[c]];
            next[c] += 1;
            (d, a, b)
        })
        .collect()
}

fn fmt_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.3} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.3} MB", b / 1e6)
    } else {
        format!("{b:.4} bytes")
    }
}

/// Places the layer chain of `p` over its devices, optimally where the search finishes.
pub fn place(p: &Problem, opts: &Options) -> Placement {
    let core = Core::new(p);
    let (comb, slo) = match opts.objective {
        Objective::Latency => (Combine::Sum, None),
        Objective::Throughput => (Combine::Max, opts.slo_s),
    };
    let max_labels = opts.max_labels.max(1);
    let mut out = solve(&core, Metric::Time, comb, slo, max_labels);
    if opts.objective == Objective::Throughput {
        // Among the placements with the best bottleneck, the one with the least latency:
        // minimise latency with every stage and transfer held to that bottleneck.
        // Only for a proven bottleneck, with a quarter of the budget: a tie-break, not a
        // second search.
        if let Some(value) = out.best.as_ref().map(|b| b.0).filter(|_| out.proven) {
            let capped = core.with_cap(value);
            let second = solve(
                &capped,
                Metric::Time,
                Combine::Sum,
                slo,
                (max_labels / 4).max(1),
            );
            if let Some((_, p2)) = second.best {
                out.best = Some((value, p2));
            }
            out.labels += second.labels;
            out.expanded += second.expanded;
        }
    }
    let memory_needed_bytes: f64 = p.layers.iter().map(|l| l.memory_bytes).sum();
    let mut stats = SearchStats {
        devices: p.devices.len(),
        device_classes: core.nc(),
        labels: out.labels,
        expanded: out.expanded,
        budget_exhausted: out.budget_exhausted,
    };
    let mut answer = Placement {
        feasible: false,
        objective: opts.objective,
        value_s: None,
        optimal: false,
        lower_bound_s: None,
        latency_s: None,
        bottleneck_s: None,
        slo_s: opts.slo_s,
        stages: Vec::new(),
        reason: None,
        memory_needed_bytes,
        min_memory_scale: None,
        search: stats.clone(),
    };
    if let Some((value, path)) = &out.best {
        let concrete = devices_of(&core, path);
        if let Some((stages, latency, bottleneck)) = evaluate(p, &concrete) {
            // The latency objective with an SLO: the best latency either meets it or nothing does.
            if let (Objective::Latency, Some(s)) = (opts.objective, opts.slo_s) {
                if latency > s && out.proven {
                    answer.reason = Some(format!(
                        "no placement meets the latency SLO of {s} s: the lowest latency any placement reaches is {latency:.6} s"
                    ));
                    answer.optimal = true;
                    answer.lower_bound_s = Some(latency);
                    return answer;
                }
            }
            answer.feasible = true;
            answer.value_s = Some(*value);
            answer.optimal = out.proven;
            answer.lower_bound_s = Some(if out.proven { *value } else { out.lower_bound });
            answer.latency_s = Some(latency);
            answer.bottleneck_s = Some(bottleneck);
            answer.stages = stages;
            return answer;
        }
        // Cannot happen: the search only builds valid placements.
        answer.reason = Some("internal error: the search returned an invalid placement".into());
        return answer;
    }
    if !out.proven {
        answer.reason = Some(format!(
            "the search stopped at its budget of {max_labels} labels before finding a placement; not proven infeasible"
        ));
        return answer;
    }
    // Proven infeasible: say why.
    answer.optimal = true;
    let nc = core.nc();
    let n = p.layers.len();
    let mut too_big: Option<String> = None;
    for (j, l) in p.layers.iter().enumerate() {
        let runners: Vec<usize> = (0..nc).filter(|&c| core.t[c * n + j].is_finite()).collect();
        if runners.is_empty() {
            answer.reason = Some(format!(
                "layer {j} (`{}`) has no time on any device kind present ({})",
                l.name,
                p.kinds.join(", ")
            ));
            return answer;
        }
        let cap = runners
            .iter()
            .map(|&c| core.classes[c].memory_bytes)
            .fold(0.0, f64::max);
        if l.memory_bytes > cap && too_big.is_none() {
            too_big = Some(format!(
                "layer {j} (`{}`) needs {} but the largest device that runs it has {}",
                l.name,
                fmt_bytes(l.memory_bytes),
                fmt_bytes(cap)
            ));
        }
    }
    if slo.is_some() && too_big.is_none() {
        let free = solve(&core, Metric::Time, comb, None, max_labels);
        if free.best.is_some() {
            let lat = solve(&core, Metric::Time, Combine::Sum, None, max_labels);
            let best = lat.best.map(|b| b.0).unwrap_or(f64::NAN);
            answer.reason = Some(format!(
                "no placement meets the latency SLO of {} s: the lowest latency any placement reaches is {best:.6} s{}",
                opts.slo_s.unwrap_or(0.0),
                if lat.proven { "" } else { " (not proven the lowest)" }
            ));
            answer.lower_bound_s = Some(free.lower_bound);
            return answer;
        }
    }
    // Memory or links: the smallest memory growth that makes some chain fit.
    let scale = solve(&core, Metric::MemoryScale, Combine::Max, None, max_labels);
    stats.labels += scale.labels;
    stats.expanded += scale.expanded;
    answer.search = stats;
    match scale.best {
        None if scale.proven => {
            answer.reason = Some(
                "no chain of directly linked devices can run the layers in order (check the links and the kinds that run each layer)".into(),
            );
        }
        None => {
            answer.reason = Some("no placement fits memory; the search for the least memory growth stopped at its budget".into());
        }
        Some((s, _)) => {
            let total_cap: f64 = p.devices.iter().map(|d| d.memory_bytes).sum();
            let why = too_big.unwrap_or_else(|| {
                format!(
                    "the layers need {} together and no chain of linked devices holds them (all devices: {})",
                    fmt_bytes(memory_needed_bytes),
                    fmt_bytes(total_cap)
                )
            });
            answer.reason = Some(format!(
                "{why}; the best chain needs every device's memory × {s:.4}{}",
                if scale.proven {
                    ""
                } else {
                    " (or less: not proven)"
                }
            ));
            answer.min_memory_scale = Some(s);
        }
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Device, Layer, Link};

    fn chain(
        times: &[&[f64]],
        mem: &[f64],
        devs: &[(usize, f64)],
        links: &[(usize, usize, f64, f64)],
    ) -> Problem {
        let kinds = (0..times[0].len()).map(|k| format!("k{k}")).collect();
        let layers = times
            .iter()
            .zip(mem)
            .enumerate()
            .map(|(i, (t, &m))| Layer {
                name: format!("l{i}"),
                time_s: t.iter().map(|&x| Some(x)).collect(),
                memory_bytes: m,
                output_bytes: 1.0,
                output_messages: 1.0,
            })
            .collect();
        let devices = devs
            .iter()
            .enumerate()
            .map(|(i, &(k, m))| Device {
                name: format!("d{i}"),
                kind: k,
                memory_bytes: m,
            })
            .collect();
        let links = links
            .iter()
            .map(|&(a, b, bw, lat)| Link {
                a,
                b,
                bytes_per_s: bw,
                latency_s: lat,
            })
            .collect();
        Problem::new(kinds, layers, devices, links, "test").unwrap()
    }

    #[test]
    fn one_device_takes_all_when_it_fits() {
        let p = chain(&[&[1.0], &[2.0]], &[1.0, 1.0], &[(0, 10.0)], &[]);
        let a = place(&p, &Options::default());
        assert!(a.feasible && a.optimal);
        assert_eq!(a.value_s, Some(3.0));
        assert_eq!(a.stages.len(), 1);
    }

    #[test]
    fn memory_forces_a_split_and_throughput_balances() {
        // Two identical devices, each holds 2 of 4 layers; link costs 1 + 1/1 = 2 s... use a fast link.
        let p = chain(
            &[&[1.0], &[1.0], &[1.0], &[1.0]],
            &[1.0; 4],
            &[(0, 2.0), (0, 2.0)],
            &[(0, 1, 1e9, 0.0)],
        );
        let a = place(
            &p,
            &Options {
                objective: Objective::Throughput,
                ..Options::default()
            },
        );
        assert!(a.feasible && a.optimal, "{a:?}");
        assert!((a.value_s.unwrap() - 2.0).abs() < 1e-6);
        assert_eq!(a.search.device_classes, 1);
    }

    #[test]
    fn infeasible_memory_reports_the_growth_needed() {
        let p = chain(
            &[&[1.0], &[1.0]],
            &[3.0, 3.0],
            &[(0, 2.0), (0, 2.0)],
            &[(0, 1, 1.0, 0.0)],
        );
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert!((a.min_memory_scale.unwrap() - 1.5).abs() < 1e-12, "{a:?}");
        assert!(a
            .reason
            .unwrap()
            .contains("layer 0 (`l0`) needs 3.0000 bytes"));
    }

    #[test]
    fn unlinked_devices_cannot_share_the_chain() {
        // Memory: either device alone would need twice its memory.
        let p = chain(&[&[1.0], &[1.0]], &[2.0, 2.0], &[(0, 2.0), (0, 2.0)], &[]);
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert_eq!(a.min_memory_scale, Some(2.0));
        // Kinds: layer 0 runs only on kind 0, layer 1 only on kind 1, and no link joins them.
        let mut p = chain(
            &[&[1.0, 1.0], &[1.0, 1.0]],
            &[1.0, 1.0],
            &[(0, 9.0), (1, 9.0)],
            &[],
        );
        p.layers[0].time_s[1] = None;
        p.layers[1].time_s[0] = None;
        let a = place(&p, &Options::default());
        assert!(!a.feasible && a.optimal);
        assert!(a
            .reason
            .unwrap()
            .contains("no chain of directly linked devices"));
    }

    #[test]
    fn slo_trades_bottleneck_for_latency() {
        // Fast device with a slow link vs one slow device alone.
        // Split over d0 (kind 0) and d1 (kind 0): bottleneck 1, latency 1 + 5 + 1 = 7.
        // All on d2 (kind 1, big memory): bottleneck = latency = 4.
        let p = chain(
            &[&[1.0, 2.0], &[1.0, 2.0]],
            &[1.0, 1.0],
            &[(0, 1.0), (0, 1.0), (1, 10.0)],
            &[(0, 1, 1.0, 4.0)],
        );
        let free = place(
            &p,
            &Options {
                objective: Objective::Throughput,
                ..Options::default()
            },
        );
        // Split: transfer 4 + 1/1 = 5 is the bottleneck; d2 alone takes 4.
        assert_eq!(free.value_s, Some(4.0));
        let p2 = chain(
            &[&[1.0, 1.2], &[1.0, 1.2]],
            &[1.0, 1.0],
            &[(0, 1.0), (0, 1.0), (1, 10.0)],
            &[(0, 1, 1.0, 0.5)],
        );
        let thr = Options {
            objective: Objective::Throughput,
            ..Options::default()
        };
        let free = place(&p2, &thr);
        assert_eq!(free.value_s, Some(1.5));
        assert_eq!(free.latency_s, Some(3.5));
        let slo = place(
            &p2,
            &Options {
                slo_s: Some(3.0),
                ..thr
            },
        );
        assert!(slo.optimal);
        assert_eq!(slo.value_s, Some(2.4));
        assert_eq!(slo.stages.len(), 1);
        let none = place(
            &p2,
            &Options {
                slo_s: Some(1.0),
                ..thr
            },
        );
        assert!(!none.feasible);
        let r = none.reason.unwrap();
        assert!(
            r.contains("lowest latency any placement reaches is 2.4"),
            "{r}"
        );
    }
}
