//! The mixed search (`plan_mixed`): every configuration (dp, tp, mbs, ZeRO, sp, schedule,
//! recompute policy) in a fixed order, × every group order, laid out and screened by the
//! closed form, the best re-ranked by the event simulator; each group planned alone (the
//! homogeneous alternatives), and why no mixed plan exists when none does.
//!
//! Deterministic whatever the thread count (index tie-breaks). It prices nothing itself
//! (`lines`, `evaluate`) and lays out nothing itself (`layout`).

use std::collections::HashMap;

use rayon::prelude::*;

use plait_cost::estimate::LayerCosts;
use plait_spec::{ParallelConfig, Recompute, Schedule as Kind, StageMap, GIB};

use super::evaluate::{closed_form, simulate_mixed};
use super::explain::explain;
use super::layout::{even_fit, fit_exactly, layout_from_lines, memory_floor};
use super::lines::{cross_send_s, ctxs, group_costs, stage_lines, Ctx};
use super::{
    gpu_counts, Homogeneous, MixedConfig, MixedInfeasible, MixedOutcome, MixedPlan, MixedRequest,
    MixedStats,
};
use crate::export::{engine_supports, Layout};
use crate::PlanError;
/// Largest micro-batch the mixed search tries (a subset of the homogeneous search's 16:
/// every group's memory must hold it, and the order loop multiplies the work).
const MAX_MIXED_MBS: u64 = 8;

fn divisors(n: u64) -> Vec<u64> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Every order of `n` groups, lexicographic.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for first in 0..n {
        for rest in permutations(n - 1) {
            let mut v = vec![first];
            v.extend(rest.into_iter().map(|r| if r >= first { r + 1 } else { r }));
            out.push(v);
        }
    }
    out
}

/// Every configuration of the mixed search, in a fixed order (orders come later).
fn enumerate(req: &MixedRequest) -> (Vec<ParallelConfig>, Vec<String>) {
    let (m, t, pins) = (req.model, req.train, &req.pins);
    let counts: Vec<u64> = req.mixed.groups.iter().map(|g| g.gpus()).collect();
    let common = counts.iter().fold(0, |a, &b| gcd(a, b));
    let node = req
        .mixed
        .groups
        .iter()
        .map(|g| g.cluster.gpus_per_node)
        .min()
        .unwrap_or(1);
    let mut out = Vec::new();
    let mut why = Vec::new();
    let pick = |pin: Option<u64>, v: u64| pin.is_none_or(|p| p == v);
    for dp in divisors(common) {
        if !pick(pins.dp, dp) || !t.gbs.is_multiple_of(dp) {
            continue;
        }
        for tp in divisors(common / dp) {
            if !pick(pins.tp, tp) || tp > node {
                continue;
            }
            let pp: u64 = counts.iter().map(|n| n / (dp * tp)).sum();
            if pp > m.layers || pins.pp.is_some_and(|p| p != pp) {
                continue;
            }
            let per_replica = t.gbs / dp;
            for mbs in (1..=MAX_MIXED_MBS).chain(pins.mbs.filter(|&b| b > MAX_MIXED_MBS)) {
                if !pick(pins.mbs, mbs) || !per_replica.is_multiple_of(mbs) {
                    continue;
                }
                let zeros: &[u8] = if dp > 1 { &[0, 1, 2, 3] } else { &[0] };
                for &zero in zeros {
                    if pins.zero.is_some_and(|z| z != zero) {
                        continue;
                    }
                    for sp in [false, true] {
                        if (sp && tp == 1) || pins.sp.is_some_and(|s| s != sp) {
                            continue;
                        }
                        for schedule in [Kind::OneFOneB, Kind::Gpipe, Kind::ZbH1, Kind::Scp] {
                            if pins.schedule.is_some_and(|s| s != schedule) {
                                continue;
                            }
                            let recomputes = match pins.recompute {
                                Some(r) => vec![r],
                                None => vec![Recompute::None, Recompute::Selective],
                            };
                            for recompute in recomputes {
                                let c = ParallelConfig {
                                    dp,
                                    tp,
                                    pp,
                                    mbs,
                                    zero,
                                    sp,
                                    recompute,
                                    schedule,
                                    ..ParallelConfig::default()
                                };
                                if let Err(e) = c.validate(m, t, c.gpus()) {
                                    why.push(e.problem);
                                    continue;
                                }
                                let map = StageMap::uniform(m.layers, &c);
                                let layout = Layout {
                                    config: &c,
                                    stage_map: &map,
                                    microbatches: c.microbatches(t),
                                };
                                if let Err(e) = engine_supports(t.engine, &layout) {
                                    why.push(e);
                                    continue;
                                }
                                out.push(c);
                            }
                        }
                    }
                }
            }
        }
    }
    (out, why)
}

/// One screened mixed candidate.
struct Screened {
    index: usize,
    mc: MixedConfig,
    map: StageMap,
    time_s: f64,
}

/// Plans `req`: the best mixed plans by simulated iteration time, each group's best plan
/// alone, and the explanation; or why no mixed plan exists.
pub fn plan_mixed(req: &MixedRequest) -> Result<MixedOutcome, PlanError> {
    let ctxs = ctxs(req);
    if req.devices.len() != ctxs.len() {
        return Err(PlanError::Graph("one device model per group".into()));
    }
    // Host memory is a per-group budget the mixed plan does not yet check stage by stage.
    let t = req.train;
    for (field, on) in [
        ("cpu_offload_layers", t.cpu_offload_layers > 0),
        ("optimizer_offload", t.optimizer_offload > 0.0),
    ] {
        if on {
            return Err(PlanError::Spec(plait_spec::SpecError::for_field(
                field,
                "offloading to host memory in a plan over mixed groups (each group's host \
                 memory is not checked stage by stage)"
                    .to_string(),
                "no offloading with mixed clusters (plan each group's cluster on its own)",
            )));
        }
    }
    let (configs, why) = enumerate(req);
    let orders = permutations(req.mixed.groups.len());
    // Layer costs per (group, tp, mbs, sp, policy), computed once.
    type Key = (usize, u64, u64, bool, u8);
    let key = |g: usize, c: &ParallelConfig| -> Key { (g, c.tp, c.mbs, c.sp, c.recompute as u8) };
    let mut keys: Vec<(Key, ParallelConfig)> = Vec::new();
    for c in &configs {
        for g in 0..ctxs.len() {
            let k = key(g, c);
            if !keys.iter().any(|(x, _)| *x == k) {
                keys.push((k, *c));
            }
        }
    }
    let cache: HashMap<Key, (LayerCosts, LayerCosts)> = keys
        .par_iter()
        .map(|(k, c)| (*k, group_costs(req, &ctxs[k.0], c)))
        .collect();
    type Found = (Vec<Screened>, Option<(f64, String)>);
    let found: Vec<Found> = configs
        .par_iter()
        .enumerate()
        .map(|(i, c)| {
            let costs: Vec<_> = (0..ctxs.len()).map(|g| cache[&key(g, c)]).collect();
            let lines: Vec<_> = ctxs
                .iter()
                .zip(&costs)
                .map(|(x, lc)| stage_lines(req, x, c, lc))
                .collect();
            let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
            let mut kept = Vec::new();
            let mut floor: Option<(f64, String)> = None;
            for (o, order) in orders.iter().enumerate() {
                let Ok(mc) = MixedConfig::new(req.mixed, c, order) else {
                    continue;
                };
                let Some(map) = layout_from_lines(req, &mc, &lines, &sends) else {
                    if let Some((r, k)) = memory_floor(&mc, req.model.layers, &lines) {
                        if floor.as_ref().is_none_or(|f| r < f.0) {
                            let g = &req.mixed.groups[mc.stage_groups()[k]];
                            floor = Some((
                                r,
                                format!(
                                    "{}: stage {k} on {} ({:.1} GiB of {:.1})",
                                    mc.describe(req.mixed),
                                    g.name,
                                    r * g.cluster.gpu.memory_bytes / GIB,
                                    g.cluster.gpu.memory_bytes / GIB
                                ),
                            ));
                        }
                    }
                    continue;
                };
                let (e, _) = closed_form(req, &ctxs, &mc, &map, &costs);
                if !e.estimate.fits {
                    continue;
                }
                let layout = Layout {
                    config: &mc.config,
                    stage_map: &map,
                    microbatches: mc.config.microbatches(req.train),
                };
                if engine_supports(req.train.engine, &layout).is_err() {
                    continue;
                }
                kept.push(Screened {
                    index: i * orders.len() + o,
                    time_s: e.estimate.iteration_time_s,
                    mc,
                    map,
                });
            }
            (kept, floor)
        })
        .collect();
    let mut stats = MixedStats {
        candidates: configs.len() * orders.len(),
        ..MixedStats::default()
    };
    let mut screened: Vec<Screened> = Vec::new();
    let mut floor: Option<(f64, String)> = None;
    for (kept, f) in found {
        screened.extend(kept);
        if let Some(f) = f {
            if floor.as_ref().is_none_or(|g| f.0 < g.0) {
                floor = Some(f);
            }
        }
    }
    stats.feasible = screened.len();
    screened.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.index.cmp(&b.index)));
    screened.truncate(req.simulate.max(req.top));
    stats.simulated = screened.len();
    let simulated: Vec<Result<(usize, MixedPlan), PlanError>> = screened
        .par_iter()
        .map(|s| {
            let map = fit_exactly(req, &ctxs, &s.mc, s.map.clone());
            let sim = simulate_mixed(req, &s.mc, &map)?;
            Ok((
                s.index,
                MixedPlan {
                    description: s.mc.describe(req.mixed),
                    mixed_config: s.mc.clone(),
                    stage_map: map,
                    estimate: sim.estimate.clone(),
                    even_layout_iteration_time_s: None,
                    simulated: Some(std::sync::Arc::new(sim)),
                },
            ))
        })
        .collect();
    let mut plans: Vec<(usize, MixedPlan)> = Vec::new();
    for r in simulated {
        let (i, p) = r?;
        if p.estimate.estimate.fits {
            plans.push((i, p));
        }
    }
    // Times within 0.1 % of each other count as a tie, broken by the tightest stage's
    // memory (headroom for what the model leaves out), then by enumeration order.
    let bin = |p: &MixedPlan| (p.estimate.estimate.iteration_time_s.ln() / 1e-3).floor() as i64;
    let ratio = |p: &MixedPlan| {
        p.estimate.estimate.peak_memory_bytes / p.estimate.estimate.memory_capacity_bytes
    };
    plans.sort_by(|a, b| {
        bin(&a.1)
            .cmp(&bin(&b.1))
            .then(ratio(&a.1).total_cmp(&ratio(&b.1)))
            .then(a.0.cmp(&b.0))
    });
    plans.truncate(req.top);
    let mut plans: Vec<MixedPlan> = plans.into_iter().map(|(_, p)| p).collect();
    if let Some(best) = plans.first_mut() {
        let even = StageMap::uniform(req.model.layers, &best.mixed_config.config);
        let even = fit_exactly(
            req,
            &ctxs,
            &best.mixed_config,
            even_fit(req, &ctxs, &best.mixed_config, even),
        );
        best.even_layout_iteration_time_s = simulate_mixed(req, &best.mixed_config, &even)
            .ok()
            .filter(|s| s.estimate.estimate.fits)
            .map(|s| s.estimate.estimate.iteration_time_s);
    }
    let homogeneous = if req.homogeneous {
        homogeneous(req, &ctxs)?
    } else {
        Vec::new()
    };
    let infeasible = plans
        .is_empty()
        .then(|| infeasible(req, &configs, &why, floor));
    let explanation = match plans.first() {
        Some(best) => explain(req, &ctxs, best, &homogeneous),
        None => Vec::new(),
    };
    Ok(MixedOutcome {
        plans,
        homogeneous,
        explanation,
        search: stats,
        infeasible,
    })
}

fn infeasible(
    req: &MixedRequest,
    configs: &[ParallelConfig],
    why: &[String],
    floor: Option<(f64, String)>,
) -> MixedInfeasible {
    if configs.is_empty() {
        let first = why
            .first()
            .map(|w| format!("; e.g. {w}"))
            .unwrap_or_default();
        return MixedInfeasible {
            reason: format!(
                "no mixed configuration exists: dp×tp must split every group into whole pipeline stages ({}), dp divide the batch of {} sequences, tp stay inside a node and the stages number at most the model's {} layers{first}",
                gpu_counts(req.mixed),
                req.train.gbs,
                req.model.layers
            ),
            min_memory_ratio: None,
        };
    }
    match floor {
        Some((ratio, at)) => MixedInfeasible {
            reason: format!(
                "no mixed plan fits memory: even recomputing every block with the memory-balanced layout, the least any configuration needs is {ratio:.2}× a GPU's memory ({at})"
            ),
            min_memory_ratio: Some(ratio),
        },
        None => MixedInfeasible {
            reason: "no mixed plan fits memory and runs under the engine".into(),
            min_memory_ratio: None,
        },
    }
}

fn homogeneous(req: &MixedRequest, ctxs: &[Ctx]) -> Result<Vec<Homogeneous>, PlanError> {
    let mut out = Vec::new();
    for (g, x) in req.mixed.groups.iter().zip(ctxs) {
        let mut r = crate::Request::new(req.model, x.cluster, req.train, x.device, g.gpus());
        r.top = 1;
        let o = crate::plan(&r, &|_, _| {})?;
        out.push(Homogeneous {
            group: g.name.clone(),
            gpus: g.gpus(),
            plan: o.plans.into_iter().next(),
            infeasible: o.infeasible.map(|i| i.reason),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_complete() {
        let p = permutations(3);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0], vec![0, 1, 2]);
        assert_eq!(p[5], vec![2, 1, 0]);
    }
}
