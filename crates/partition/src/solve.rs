//! The entry point: [`partition`] a [`Graph`] under [`Limits`] into pipeline stages, exactly
//! when the ideal lattice is small enough, otherwise heuristically with a lower bound; and
//! the exact evaluation of every stage's load from the original nodes.
//!
//! Infeasible is data: a graph that fits no split is a [`Partition`] with `feasible = false`,
//! a reason and the least memory per device that would fit. Errors are for bad input only.

use serde::Serialize;

use crate::coarse::{self, coarse_size, COARSEN_ABOVE, COARSE_MAX_IDEALS};
use crate::error::{PartitionError, Result};
use crate::exact::{self, Budget, Split, WEIGHT_ACC, WEIGHT_CPU, WEIGHT_MIN};
use crate::graph::{Graph, Indexed};
use crate::lattice::Lattice;
use crate::linear;
use crate::units::Units;

/// Largest ideal lattice the exact search enumerates. The reference implementation gives up
/// at 60,000 ideals (IDEALS_LIMIT in throughput-dp/dp.cpp). Measured on the 2-core CI
/// machine: the artifact's GNMT training layer graph (96 units, more than 10⁶ ideals) takes
/// 1.6 s and 170 MB to reach this cap before the heuristic answers; lattices of 37,000 ideals
/// (Inception-v3 training) solve exactly in 0.4 s. Above the cap, the heuristic answers
/// with a lower bound.
pub const MAX_IDEALS: usize = 1_000_000;

/// Most ideals `--max-ideals` may ask the exact search to enumerate (each costs its weights,
/// its Hasse-diagram edges and one value per DP layer: about 1 GiB at this many).
pub const MAX_IDEALS_LIMIT: usize = 1 << 24;

/// Most cells (devices + 1) × (CPUs + 1) × (units + 1) of the table of one split, heuristic
/// or exact (with ideals for units): 16 bytes a cell, 256 MiB at the limit. Devices and CPUs
/// beyond the number of units are never used, so they are counted only up to it.
pub const MAX_TABLE_CELLS: usize = 1 << 24;

/// Least relative gain over the heuristic for which the coarse path runs the exact search
/// over the super-units.
const COARSE_EXACT_GAIN: f64 = 1e-6;
/// Extension steps the exact split of the super-units may take before the heuristic's split
/// answers instead: its pruning is weak when one unit dominates every load (the bound then
/// admits nearly every pair of ideals, up to 50,000² of them). Measured here on a fuzzed
/// 2,300-unit graph (crates/fuzz/corpus/placement_json): its unbounded search took
/// 50,272,617 steps in 11.5 s, about 230 ns a step on one core of this 2-core machine, so
/// 2^23 steps are about 2 s.
const COARSE_EXACT_STEPS: u64 = 1 << 23;

/// Relative slack on the heuristic's load when it bounds the exact search, so that the
/// optimum is not cut off by rounding differences between summation orders.
const BOUND_SLACK: f64 = 1e-9;

/// What the devices allow.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    /// Accelerators (pipeline stages on GPUs/FPGAs), at least 1.
    pub devices: usize,
    /// CPU cores, each able to take one contiguous segment (no memory limit, no
    /// communication cost), 0 or more.
    pub cpus: usize,
    /// Memory of one accelerator.
    pub memory_per_device_bytes: f64,
    /// Ideal-lattice size above which the heuristic is used ([`MAX_IDEALS`] by default).
    pub max_ideals: usize,
}

impl Limits {
    pub fn new(devices: usize, cpus: usize, memory_per_device_bytes: f64) -> Limits {
        Limits {
            devices,
            cpus,
            memory_per_device_bytes,
            max_ideals: MAX_IDEALS,
        }
    }

    /// The limits a graph file carries (placement graphs), if it carries all of them.
    pub fn of_graph(g: &Graph) -> Option<Limits> {
        Some(Limits::new(
            g.devices?,
            g.cpus.unwrap_or(0),
            g.memory_per_device_bytes?,
        ))
    }

    fn check(&self) -> Result<()> {
        if self.devices == 0 {
            return Err(PartitionError::new(
                "limits",
                "devices",
                "must be at least 1, got 0",
                "integers ≥ 1",
            ));
        }
        if self.max_ideals > MAX_IDEALS_LIMIT {
            return Err(PartitionError::new(
                "limits",
                "max_ideals",
                format!(
                    "{} is more than the {MAX_IDEALS_LIMIT} ideals the exact search may enumerate",
                    self.max_ideals
                ),
                format!("1 to {MAX_IDEALS_LIMIT}"),
            ));
        }
        if !(self.memory_per_device_bytes.is_finite() && self.memory_per_device_bytes > 0.0) {
            return Err(PartitionError::new(
                "limits",
                "memory",
                format!(
                    "must be a positive number of bytes, got {}",
                    self.memory_per_device_bytes
                ),
                "bytes > 0",
            ));
        }
        Ok(())
    }
}

/// Where a stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Accelerator,
    Cpu,
}

impl DeviceKind {
    pub fn keyword(self) -> &'static str {
        match self {
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Cpu => "cpu",
        }
    }
}

/// One pipeline stage: a contiguous set of nodes on one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    pub device: DeviceKind,
    /// Node ids, ascending.
    pub ids: Vec<i64>,
    /// `compute + communication`.
    pub load: f64,
    /// Sum of the nodes' latencies on this kind of device.
    pub compute: f64,
    /// Boundary communication (accelerators only; CPUs do not pay it).
    pub communication: f64,
    pub memory_bytes: f64,
}

/// How the answer was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// Dynamic program over the ideal lattice: optimal.
    Exact,
    /// Best split of a few topological orders, or a split proven optimal by the lower bound.
    Heuristic,
}

/// The answer for one graph and limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Partition {
    /// False when no split fits the limits; then `stages` is empty and `reason` says why.
    pub feasible: bool,
    /// Largest stage load (∞ when infeasible).
    pub max_load: f64,
    /// Stages in pipeline order (a stage only depends on earlier ones in forward edges).
    pub stages: Vec<Stage>,
    /// `max_load` is the optimum.
    pub optimal: bool,
    /// No split has a lower max-load (equals `max_load` when optimal).
    pub lower_bound: f64,
    pub method: Method,
    /// Groups of nodes that must share a device (colour classes, fused cycles).
    pub units: usize,
    /// Size of the ideal lattice, when it was enumerated (≤ `max_ideals`).
    pub ideals: Option<usize>,
    pub reason: Option<String>,
    /// When infeasible for memory: the least memory per accelerator with which a split
    /// exists (exact when `optimal`, else the memory of the best split found).
    pub min_memory_bytes: Option<f64>,
    /// Set when the graph had more than [`COARSEN_ABOVE`] units and was split through its
    /// coarsening: what was merged and what is known of the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coarsening: Option<Coarsening>,
}

/// How a large graph was split (see `coarse.rs`): its units merged into super-units (runs
/// of consecutive units of a topological order), the super-units split, then every cut
/// moved to the best position within `refine_window` units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coarsening {
    pub units: usize,
    pub super_units: usize,
    /// The split of the super-units is optimal among splits at their boundaries (their
    /// lattice was searched exactly); otherwise it is the best of the heuristic orders.
    pub coarse_optimal: bool,
    /// Max load of the split of the super-units, before refinement.
    pub coarse_max_load: f64,
    /// Units a cut could move per refinement round.
    pub refine_window: usize,
    /// Refinement rounds that lowered the load.
    pub refine_rounds: usize,
    /// One line for the report: the sizes, how the coarse split was found, and the gap to
    /// the lower bound of the uncoarsened graph (what is proven about the answer).
    pub note: String,
}

/// Splits `g` into at most `limits.devices` accelerator stages and `limits.cpus` CPU stages,
/// minimising the largest stage load (FORMAT.md of the placement graphs).
pub fn partition(g: &Graph, limits: &Limits) -> Result<Partition> {
    limits.check()?;
    let ix = g.index()?;
    let units = Units::build(g, &ix);
    // A split has at most one stage per unit: more devices or CPUs change nothing.
    let budget = Budget {
        devices: limits.devices.min(units.number().max(1)),
        cpus: limits.cpus.min(units.number()),
        memory: limits.memory_per_device_bytes,
    };
    let layers = (budget.devices + 1) * (budget.cpus + 1);
    // Above COARSEN_ABOVE units the tables are sized by the super-units.
    let coarse = (units.number() > COARSEN_ABOVE)
        .then(|| coarse::coarsen(&units, &budget, coarse_size(budget.devices, budget.cpus)));
    let table_units = coarse.as_ref().map_or(units.number(), |c| c.units.number());
    // Devices and CPUs beyond the super-units are never used by their split either.
    let table_layers = coarse.as_ref().map_or(layers, |c| {
        coarse::layers_within(budget.devices, budget.cpus, c.units.number())
    });
    let cells = table_layers.checked_mul(table_units + 1);
    if cells.is_none_or(|c| c > MAX_TABLE_CELLS) {
        return Err(PartitionError::new(
            "limits",
            "devices",
            format!(
                "{} accelerator(s) and {} CPU(s) over {} units{} need a table of ({} + 1) × ({} + 1) × ({} + 1) cells, more than the limit of {MAX_TABLE_CELLS}",
                limits.devices,
                limits.cpus,
                units.number(),
                coarse
                    .as_ref()
                    .map(|c| format!(" (coarsened to {} super-units)", c.units.number()))
                    .unwrap_or_default(),
                budget.devices,
                budget.cpus,
                table_units
            ),
            format!("(devices + 1) × (CPUs + 1) × (units + 1) ≤ {MAX_TABLE_CELLS}"),
        ));
    }
    let infeasible = |reason: String, min_memory: Option<(f64, bool)>, ideals| Partition {
        feasible: false,
        max_load: f64::INFINITY,
        stages: vec![],
        optimal: min_memory.is_none_or(|(_, exact)| exact),
        lower_bound: f64::INFINITY,
        method: Method::Heuristic,
        units: units.number(),
        ideals,
        reason: Some(reason),
        min_memory_bytes: min_memory.map(|(m, _)| m),
        coarsening: None,
    };
    if limits.cpus == 0 {
        if let Some(v) = (0..units.number()).find(|&v| !units.supported[v]) {
            let i = *units.members[v]
                .iter()
                .find(|&&i| !g.nodes[i].supported_on_accelerator)
                .expect("an unsupported unit has an unsupported node");
            return Ok(infeasible(
                format!(
                    "{} is not supported on an accelerator and the limits allow no CPU",
                    describe(g, &units, v, i)
                ),
                None,
                None,
            ));
        }
        if let Some(v) = (0..units.number())
            .filter(|&v| units.mem[v] > budget.memory)
            .max_by(|&a, &b| units.mem[a].total_cmp(&units.mem[b]).then(b.cmp(&a)))
        {
            let i = units.members[v][0];
            let min = match &coarse {
                // Through the coarsening: memory enough, not proven the least.
                Some(c) => min_memory(&c.units, budget, COARSE_MAX_IDEALS).map(|(m, _)| (m, false)),
                None => min_memory(&units, budget, limits.max_ideals),
            };
            return Ok(infeasible(
                format!(
                    "{} needs {} bytes, more than the {} bytes of one device",
                    describe(g, &units, v, i),
                    units.mem[v],
                    budget.memory
                ),
                min,
                None,
            ));
        }
    }
    if let Some(c) = coarse {
        return Ok(coarsened(g, &ix, &units, budget, limits, c));
    }
    let lower = linear::lower_bound(&units, budget);
    let heuristic = linear::heuristic(&units, budget);
    if let Some(h) = &heuristic {
        if h.max_load <= lower * (1.0 + 1e-12) {
            return Ok(answer(
                g,
                &ix,
                &units,
                h,
                true,
                lower,
                Method::Heuristic,
                None,
            ));
        }
    }
    let (w, ratio) = exact::weights(&units, &budget);
    let lattice = Lattice::build(
        &units.preds,
        &[&w[WEIGHT_ACC], &w[WEIGHT_CPU], &w[WEIGHT_MIN]],
        limits.max_ideals.min(MAX_TABLE_CELLS / layers),
    );
    match (lattice, heuristic) {
        (Some(lat), h) => {
            let bound = h
                .as_ref()
                .map_or(f64::INFINITY, |h| h.max_load * (1.0 + BOUND_SLACK) + f64::MIN_POSITIVE);
            match exact::solve(&units, &lat, ratio, budget, bound, lower * (1.0 + 1e-12), u64::MAX)
                .unwrap_or(None)
            {
                Some(s) => {
                    let best = match h {
                        Some(h) if h.max_load < s.max_load => h,
                        _ => s,
                    };
                    let mut p = answer(g, &ix, &units, &best, true, 0.0, Method::Exact, Some(lat.len()));
                    p.lower_bound = p.max_load;
                    Ok(p)
                }
                None => Ok(infeasible(
                    format!(
                        "no split into {} contiguous stages fits {} bytes per device",
                        limits.devices, budget.memory
                    ),
                    min_memory(&units, budget, limits.max_ideals),
                    Some(lat.len()),
                )),
            }
        }
        (None, Some(h)) => Ok(answer(g, &ix, &units, &h, false, lower, Method::Heuristic, None)),
        (None, None) => Ok(infeasible(
            format!(
                "the heuristic found no split into {} contiguous stages within {} bytes per device (the graph is too large for the exact search)",
                limits.devices, budget.memory
            ),
            min_memory(&units, budget, limits.max_ideals),
            None,
        )),
    }
}

/// The answer for a graph of more than [`COARSEN_ABOVE`] units through its coarsening `c`:
/// split the super-units (exactly when their lattice is small), refine the cuts on the
/// units; the lower bound is the uncoarsened graph's.
fn coarsened(
    g: &Graph,
    ix: &Indexed,
    units: &Units,
    budget: Budget,
    limits: &Limits,
    c: coarse::Coarse,
) -> Partition {
    let lower = linear::lower_bound(units, budget);
    // The split of the super-units uses no more devices or CPUs than there are of them.
    let fine_budget = budget;
    let budget = Budget {
        devices: budget.devices.min(c.units.number()),
        cpus: budget.cpus.min(c.units.number()),
        ..budget
    };
    let layers = (budget.devices + 1) * (budget.cpus + 1);
    let cap = limits
        .max_ideals
        .min(COARSE_MAX_IDEALS)
        .min(MAX_TABLE_CELLS / layers);
    let heuristic = linear::heuristic(&c.units, budget);
    let coarse_lower = linear::lower_bound(&c.units, budget);
    let (split, coarse_optimal) = match heuristic {
        Some(h) if h.max_load <= coarse_lower * (1.0 + 1e-12) => (Some(h), true),
        // Within a millionth of the lower bound: the exact search could gain no more, and
        // its pruning is weakest exactly then (one unit dominating every load).
        Some(h) if h.max_load <= coarse_lower * (1.0 + COARSE_EXACT_GAIN) => (Some(h), false),
        h => {
            let (w, ratio) = exact::weights(&c.units, &budget);
            match Lattice::build(
                &c.units.preds,
                &[&w[WEIGHT_ACC], &w[WEIGHT_CPU], &w[WEIGHT_MIN]],
                cap,
            ) {
                Some(lat) => {
                    let bound = h.as_ref().map_or(f64::INFINITY, |h| {
                        h.max_load * (1.0 + BOUND_SLACK) + f64::MIN_POSITIVE
                    });
                    let s = exact::solve(
                        &c.units,
                        &lat,
                        ratio,
                        budget,
                        bound,
                        coarse_lower * (1.0 + 1e-12),
                        COARSE_EXACT_STEPS,
                    );
                    match (s, h) {
                        (Ok(Some(s)), Some(h)) if h.max_load < s.max_load => (Some(h), true),
                        (Ok(Some(s)), _) => (Some(s), true),
                        // The exact search only misses a split when the bound cut it off.
                        (Ok(None), h) => (h, true),
                        // Unfinished: the heuristic's split, not proven optimal.
                        (Err(exact::WorkExceeded), h) => (h, false),
                    }
                }
                None => (h, false),
            }
        }
    };
    let Some(split) = split else {
        return Partition {
            feasible: false,
            max_load: f64::INFINITY,
            stages: vec![],
            optimal: false,
            lower_bound: f64::INFINITY,
            method: Method::Heuristic,
            units: units.number(),
            ideals: None,
            reason: Some(format!(
                "no split into {} contiguous stages at the boundaries of the {} super-units \
                 that the {} units were coarsened to fits {} bytes per device (a split cutting \
                 inside them may)",
                limits.devices,
                c.units.number(),
                units.number(),
                budget.memory
            )),
            min_memory_bytes: min_memory(&c.units, budget, cap).map(|(m, _)| m),
            coarsening: None,
        };
    };
    let coarse_max_load = split.max_load;
    let budget = fine_budget;
    let layers = (budget.devices + 1) * (budget.cpus + 1);
    let window = coarse::refine_window(
        c.longest(),
        budget.devices,
        budget.cpus,
        split.segments.len(),
        MAX_TABLE_CELLS,
    );
    let (mut refined, rounds) = coarse::refine(units, c.expand(&split), budget, window);
    // A chain has one topological order, whose best split is the optimum: when that
    // dynamic program is affordable (bounded by the load found), it proves or improves it.
    let chain_optimal = coarse::is_chain(units)
        && coarse::chain_pass_affordable(units.number(), budget.devices, layers)
        && {
            let order: Vec<u32> = (0..units.number() as u32).collect();
            let bound = refined.max_load * (1.0 + BOUND_SLACK) + f64::MIN_POSITIVE;
            if let Some(s) = linear::split_order(units, &order, budget, bound) {
                if s.max_load < refined.max_load {
                    refined = s;
                }
            }
            true
        };
    let optimal = chain_optimal || refined.max_load <= lower * (1.0 + 1e-12);
    let mut p = answer(
        g,
        ix,
        units,
        &refined,
        optimal,
        lower,
        Method::Heuristic,
        None,
    );
    if chain_optimal {
        p.lower_bound = p.max_load;
    }
    let gap = 100.0 * (p.max_load - p.lower_bound) / p.max_load.max(f64::MIN_POSITIVE);
    let note = format!(
        "coarsened {} units to {} super-units (runs of a topological order); their split \
         ({}) has max load {:.6}, its cuts moved within ±{} units lowered it to {:.6} in {} \
         round(s); {}",
        units.number(),
        c.units.number(),
        if coarse_optimal {
            "optimal at their boundaries"
        } else {
            "the best of the heuristic orders"
        },
        coarse_max_load,
        window,
        p.max_load,
        rounds,
        if chain_optimal {
            "the units form a chain, and the best split of its only order is this: optimal"
                .to_string()
        } else if optimal {
            "equal to the lower bound: optimal".to_string()
        } else {
            format!(
                "within {gap:.2} % of the lower bound {:.6} of the uncoarsened graph",
                p.lower_bound
            )
        }
    );
    p.coarsening = Some(Coarsening {
        units: units.number(),
        super_units: c.units.number(),
        coarse_optimal,
        coarse_max_load,
        refine_window: window,
        refine_rounds: rounds,
        note,
    });
    p
}

fn describe(g: &Graph, units: &Units, v: usize, i: usize) -> String {
    let n = &g.nodes[i];
    let others = units.members[v].len() - 1;
    if others == 0 {
        format!("node `{}` (id {})", n.name, n.id)
    } else {
        format!(
            "node `{}` (id {}) with the {} node(s) that must share its device",
            n.name, n.id, others
        )
    }
}

/// Least memory per accelerator with which `budget.devices` accelerators (no CPU) hold all
/// units in a chain of contiguous stages; `(bytes, exact)`. `None` if a unit can run on no
/// accelerator.
fn min_memory(units: &Units, budget: Budget, max_ideals: usize) -> Option<(f64, bool)> {
    if budget.cpus > 0 || units.supported.iter().any(|s| !s) {
        return None;
    }
    // Same chain problem with memory as the load and no memory limit.
    let mut by_memory = units.clone();
    by_memory.acc = units.mem.clone();
    by_memory.cpu = vec![f64::INFINITY; units.number()];
    by_memory.mem = vec![0.0; units.number()];
    by_memory.comm.clear();
    by_memory.owned_by.iter_mut().for_each(Vec::clear);
    by_memory.targeted_by.iter_mut().for_each(Vec::clear);
    let b = Budget {
        devices: budget.devices,
        cpus: 0,
        memory: f64::INFINITY,
    };
    let h = linear::heuristic(&by_memory, b)?;
    let lower = linear::lower_bound(&by_memory, b);
    if h.max_load <= lower * (1.0 + 1e-12) {
        return Some((h.max_load, true));
    }
    let (w, ratio) = exact::weights(&by_memory, &b);
    match Lattice::build(
        &by_memory.preds,
        &[&w[WEIGHT_ACC], &w[WEIGHT_CPU], &w[WEIGHT_MIN]],
        max_ideals.min(MAX_TABLE_CELLS / (b.devices + 1)),
    ) {
        Some(lat) => {
            let bound = h.max_load * (1.0 + BOUND_SLACK);
            let s = exact::solve(
                &by_memory,
                &lat,
                ratio,
                b,
                bound,
                lower * (1.0 + 1e-12),
                u64::MAX,
            )
            .unwrap_or(None);
            Some((s.map_or(h.max_load, |s| s.max_load.min(h.max_load)), true))
        }
        None => Some((h.max_load, false)),
    }
}

#[allow(clippy::too_many_arguments)]
fn answer(
    g: &Graph,
    ix: &Indexed,
    units: &Units,
    split: &Split,
    optimal: bool,
    lower_bound: f64,
    method: Method,
    ideals: Option<usize>,
) -> Partition {
    let n = g.nodes.len();
    let mut stage_of = vec![usize::MAX; n];
    for (s, (seg, _)) in split.segments.iter().enumerate() {
        for &u in seg {
            for &i in &units.members[u as usize] {
                stage_of[i] = s;
            }
        }
    }
    let kinds: Vec<DeviceKind> = split
        .segments
        .iter()
        .map(|(_, cpu)| {
            if *cpu {
                DeviceKind::Cpu
            } else {
                DeviceKind::Accelerator
            }
        })
        .collect();
    let stages = evaluate(g, ix, &stage_of, &kinds);
    let max_load = stages.iter().map(|s| s.load).fold(0.0, f64::max);
    Partition {
        feasible: true,
        max_load,
        stages,
        optimal,
        lower_bound: lower_bound.min(max_load),
        method,
        units: units.number(),
        ideals,
        reason: None,
        min_memory_bytes: None,
        coarsening: None,
    }
}

/// Loads of the stages of an assignment (`stage_of[node index]`), computed from scratch
/// from the original nodes and edges.
fn evaluate(g: &Graph, ix: &Indexed, stage_of: &[usize], kinds: &[DeviceKind]) -> Vec<Stage> {
    let mut stages: Vec<Stage> = kinds
        .iter()
        .map(|&device| Stage {
            device,
            ids: vec![],
            load: 0.0,
            compute: 0.0,
            communication: 0.0,
            memory_bytes: 0.0,
        })
        .collect();
    for &i in &ix.topo {
        let node = &g.nodes[i];
        let st = &mut stages[stage_of[i]];
        st.ids.push(node.id);
        st.compute += match st.device {
            DeviceKind::Accelerator => node.accelerator_latency,
            DeviceKind::Cpu => node.cpu_latency,
        };
        st.memory_bytes += node.memory_bytes;
        if node.output_cost > 0.0 {
            let mut others: Vec<usize> = ix.succ[i]
                .iter()
                .map(|&d| stage_of[d])
                .filter(|&s| s != stage_of[i])
                .collect();
            others.sort_unstable();
            others.dedup();
            if !others.is_empty() {
                for s in others.into_iter().chain([stage_of[i]]) {
                    if stages[s].device == DeviceKind::Accelerator {
                        stages[s].communication += node.output_cost;
                    }
                }
            }
        }
    }
    for s in &mut stages {
        s.ids.sort_unstable();
        s.load = s.compute + s.communication;
    }
    stages
}
