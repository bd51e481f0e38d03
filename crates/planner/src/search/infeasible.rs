//! Why a search found nothing, and what would fit: the least memory any configuration
//! needs, and the smallest GPU count with a plan (every count some well-formed configuration
//! occupies up to 2^20, in increasing order).

use rayon::prelude::*;

use plait_cost::estimate::estimate_from_costs;
use plait_cost::Scenario;
use plait_spec::{StageMap, GIB};

use super::divisors::divisors;
use super::{
    enumerate, Cause, Infeasible, ModelStateBound, Pins, Request, Screened, MIN_CP_TOKENS,
};

/// The answer when the pins leave no well-formed configuration at all.
pub(super) fn no_candidates(req: &Request) -> Infeasible {
    let (state_bytes, lower) = state_lower_bound(req);
    Infeasible {
        cause: Cause::NoWellFormedConfiguration,
        reason: format!(
            "no well-formed configuration of {} matches the given flags (degrees must \
             divide the GPUs, the heads and the batch; see `plait estimate` for the reason a \
             given configuration is rejected)",
            gpus(req.gpus)
        ),
        min_memory_bytes: state_bytes / req.gpus as f64,
        min_gpus: min_gpus(req, lower),
        max_gpus_below: max_gpus_below(req, lower),
        min_gpus_lower_bound: lower,
    }
}

/// The model state fully sharded (16-bit weights and gradients and the optimizer's share on
/// the GPU: 16 bytes per parameter with fp32 Adam and nothing offloaded; a frozen LoRA base
/// its weights only), and the GPUs it needs at least.
/// With the optimizer state offloaded, the GPUs whose shares of host memory hold it bound
/// the count too (the state a single micro-batch's step needs, the least any plan needs).
fn state_lower_bound(req: &Request) -> (f64, u64) {
    let home = plait_cost::estimate::OptimizerHome::of(req.train);
    let [w, g, o] = plait_cost::estimate::zero_state_bytes_per_param(3, 1.0, home);
    let frozen = req.train.lora_adapters().is_some();
    let per_param = if frozen { w } else { w + g + o };
    let params = req.model.parameter_count() as f64;
    let state_bytes = per_param * params;
    let usable = req.cluster.gpu.memory_bytes - req.cluster.memory_reserve_bytes;
    let gpus = |bytes: f64, per_gpu: f64| (bytes / per_gpu).ceil().clamp(1.0, 1e18) as u64;
    let host = match req.cluster.host_memory_per_gpu() {
        Some((per_gpu, _)) if home.offloaded > 0.0 && !frozen => gpus(
            params * home.offloaded * home.host_bytes_per_param(1),
            per_gpu,
        ),
        _ => 1,
    };
    (state_bytes, gpus(state_bytes, usable).max(host))
}

/// Explains an infeasible request: the least memory any configuration needs, and the
/// smallest GPU count with a plan.
pub(super) fn infeasible(req: &Request, rest: &[Screened]) -> Infeasible {
    let params = req.model.parameter_count() as f64;
    let (state_bytes, lower) = state_lower_bound(req);
    let best = rest.iter().min_by(|a, b| {
        a.peak_bytes
            .total_cmp(&b.peak_bytes)
            .then(a.index.cmp(&b.index))
    });
    let (reason, min_memory_bytes) = match best {
        Some(s) => {
            let e = plait_cost::estimate_mapped(
                req.model,
                req.cluster,
                req.train,
                &s.config,
                req.device,
                &s.map(req.model.layers),
            )
            .ok();
            (
                format!(
                    "no configuration of {} fits; the least memory-hungry ({}) {}",
                    gpus(req.gpus),
                    s.config,
                    e.and_then(|e| e.reason()).unwrap_or_default()
                ),
                s.peak_bytes,
            )
        }
        None => (
            format!(
                "no configuration of {} fits: {} parameters need {:.0} GiB of weights, \
                 gradients and optimizer states, more than {} hold even fully sharded",
                gpus(req.gpus),
                params,
                state_bytes / GIB,
                gpus(req.gpus)
            ),
            state_bytes / req.gpus as f64,
        ),
    };
    Infeasible {
        cause: Cause::OutOfMemory,
        reason,
        min_memory_bytes,
        min_gpus: min_gpus(req, lower),
        max_gpus_below: None,
        min_gpus_lower_bound: lower,
    }
}

/// "1 GPU", "8 GPUs".
fn gpus(n: u64) -> String {
    if n == 1 {
        "1 GPU".into()
    } else {
        format!("{n} GPUs")
    }
}

/// Largest GPU count [`min_gpus`] tries.
const MAX_PROBE_GPUS: u64 = 1 << 20;

/// Every GPU count in (`above`, `at_most`] (at most 2^20) that some well-formed configuration of `req`'s model
/// and batch occupies (dp divides the batch, tp the heads, pp ≤ layers, cp the sequence;
/// pinned degrees as pinned), in increasing order: a superset of the counts `enumerate`
/// finds anything for.
fn occupied_counts(req: &Request, above: u64, at_most: u64) -> Vec<u64> {
    let (m, t, p) = (req.model, req.train, &req.pins);
    let cap = at_most.min(MAX_PROBE_GPUS);
    let upto = |n: u64| divisors(n.min(cap)).into_iter().filter(move |d| *d <= cap);
    let dps: Vec<u64> = match p.dp {
        Some(d) => vec![d],
        None if t.gbs <= cap => upto(t.gbs).filter(|d| t.gbs.is_multiple_of(*d)).collect(),
        None => (1..=cap).filter(|d| t.gbs.is_multiple_of(*d)).collect(),
    };
    let tps: Vec<u64> = match p.tp {
        Some(v) => vec![v],
        None => upto(m.heads)
            .filter(|d| m.ffn_hidden.is_multiple_of(*d))
            .collect(),
    };
    let pps: Vec<u64> = match p.pp {
        Some(v) => vec![v],
        None => (1..=m.layers.min(cap)).collect(),
    };
    let cps: Vec<u64> = match p.cp {
        Some(v) => vec![v],
        None => upto(t.seq)
            .filter(|c| *c == 1 || t.seq / c >= MIN_CP_TOKENS)
            .collect(),
    };
    let mut out = std::collections::BTreeSet::new();
    for &tp in &tps {
        for &pp in &pps {
            let Some(tpp) = tp.checked_mul(pp).filter(|v| *v <= cap) else {
                break;
            };
            for &cp in &cps {
                let Some(mesh) = tpp.checked_mul(cp).filter(|v| *v <= cap) else {
                    break;
                };
                for &dp in &dps {
                    match mesh.checked_mul(dp).filter(|v| *v <= cap) {
                        Some(g) if g > above => {
                            out.insert(g);
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The smallest GPU count above `req.gpus` (and at least `from`, the model state's lower
/// bound, unless the task freezes the base weights) with a configuration under the same
/// pins that fits by the analytic estimate with its even layout; every occupied count up to
/// 2^20 is tried in increasing order, so the answer is exact, not a power of two.
fn min_gpus(req: &Request, from: u64) -> Option<u64> {
    let from = state_floor(req, from);
    let fits = FitProbe::new(req);
    occupied_counts(req, req.gpus.max(from.saturating_sub(1)), MAX_PROBE_GPUS)
        .into_iter()
        .find(|&g| fits.at(g))
}

/// The largest GPU count below `req.gpus` (and at least `from`, as in [`min_gpus`]) with a
/// configuration that fits: the nearest smaller answer when the count asked for has no
/// well-formed configuration at all (a prime count, or more GPUs than the batch, heads and
/// layers can occupy).
fn max_gpus_below(req: &Request, from: u64) -> Option<u64> {
    let from = state_floor(req, from);
    let fits = FitProbe::new(req);
    let below = req.gpus.saturating_sub(1);
    occupied_counts(req, from.saturating_sub(1), below)
        .into_iter()
        .rev()
        .find(|&g| fits.at(g))
}

/// `from`, or 1 when the task freezes the base weights (LoRA: the state bound counts
/// gradients and optimizer states the base does not have).
fn state_floor(req: &Request, from: u64) -> u64 {
    if req.train.lora_adapters().is_some() {
        1
    } else {
        from
    }
}

/// Whether some configuration of a GPU count fits by the analytic estimate with its even
/// layout, under `req`'s pins but any dp; layer costs come from one scenario's memo shared
/// across the counts tried.
struct FitProbe<'a> {
    req: &'a Request<'a>,
    capacity: f64,
    scenario: Scenario<'a>,
}

impl<'a> FitProbe<'a> {
    fn new(req: &'a Request<'a>) -> Self {
        FitProbe {
            req,
            capacity: req.cluster.gpu.memory_bytes - req.cluster.memory_reserve_bytes,
            scenario: req.scenario(),
        }
    }

    fn at(&self, g: u64) -> bool {
        let r = Request {
            gpus: g,
            pins: Pins {
                dp: None,
                ..self.req.pins
            },
            top: 1,
            simulate: 0,
            ..self.req.clone()
        };
        let configs = enumerate(&r);
        let bound = ModelStateBound::of(r.model, r.train);
        configs.par_iter().any(|c| {
            if bound.bytes(c) > self.capacity {
                return false;
            }
            // The configuration's own policy for every block, as the even layout of a
            // fully recomputed configuration lists every block anyway.
            let costs = self.scenario.layer_costs(c, c.recompute);
            let map = StageMap::uniform(r.model.layers, c);
            estimate_from_costs(
                r.model, r.cluster, r.train, c, r.device, &costs, &costs, &map,
            )
            .fits
        })
    }
}
