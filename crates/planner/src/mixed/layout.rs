//! The layout of a mixed plan: the bottleneck search over contiguous block ranges (binary
//! search with a greedy feasibility test) on the per-group stage lines, the fewest fully
//! recomputed blocks that fit each stage's own GPU, the memory floor an infeasible shape
//! reaches, and the even layout the explanation compares with.
//!
//! It takes its costs from `lines` and its checks from `evaluate`; it knows nothing of the
//! enumeration of configurations or of how plans are ranked.

use plait_spec::{ParallelConfig, Recompute, StageMap};

use super::evaluate::{closed_form, crossings};
use super::lines::{cross_send_s, ctxs, group_costs, stage_lines, Ctx, StageLine};
use super::{MixedConfig, MixedRequest};
use crate::layout::MapShape;
use crate::PlanError;
/// The least bottleneck over contiguous layouts of `layers` blocks on `p` stages (each at
/// least one block), where `cost(k, b)` is nondecreasing in b (None: does not fit). Binary
/// search over the candidate values with a greedy feasibility test (each stage takes the
/// most blocks under the bound, leaving one for each later stage), which is exact for
/// costs that depend only on the stage and its block count.
fn bottleneck(
    p: usize,
    layers: u64,
    cost: &dyn Fn(usize, u64) -> Option<f64>,
) -> Option<(Vec<u64>, f64)> {
    if p == 0 || layers < p as u64 {
        return None;
    }
    let most = layers - p as u64 + 1;
    let feasible = |limit: f64| -> Option<Vec<u64>> {
        let mut blocks = Vec::with_capacity(p);
        let mut placed = 0;
        for k in 0..p {
            let later = (p - 1 - k) as u64;
            let cap = layers - placed - later;
            if k + 1 == p {
                cost(k, cap).filter(|&t| t <= limit)?;
                blocks.push(cap);
                break;
            }
            let ok = |b: u64| cost(k, b).is_some_and(|t| t <= limit);
            if !ok(1) {
                return None;
            }
            // Largest b in [1, cap] with ok(b) (ok is monotone).
            let (mut lo, mut hi) = (1, cap);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if ok(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            blocks.push(lo);
            placed += lo;
        }
        Some(blocks)
    };
    let mut values: Vec<f64> = (0..p)
        .flat_map(|k| (1..=most).filter_map(move |b| cost(k, b)))
        .collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    let last = *values.last()?;
    feasible(last)?;
    let (mut lo, mut hi) = (0, values.len() - 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if feasible(values[mid]).is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    feasible(values[lo]).map(|b| (b, values[lo]))
}

/// Engines recompute the same number of blocks on every stage (scp's last never).
fn uniform_recompute(c: &ParallelConfig, map: &mut StageMap) {
    let x = *map.recompute_blocks.iter().max().unwrap_or(&0);
    for k in 0..c.pp {
        map.recompute_blocks[k as usize] = if c.schedule.spares_rank(k, c.pp) {
            0
        } else {
            x.min(map.chunk_blocks[k as usize])
        };
    }
}

/// The best layout of `mc` (bottleneck per micro-batch, every stage fitting its GPU), from
/// per-group stage lines, or None when no layout fits.
pub(super) fn layout_from_lines(
    req: &MixedRequest,
    mc: &MixedConfig,
    lines: &[Vec<StageLine>],
    sends: &[(f64, f64)],
) -> Option<StageMap> {
    let c = &mc.config;
    let groups = mc.stage_groups();
    let cross = crossings(&groups);
    let stage: Vec<StageLine> = groups
        .iter()
        .enumerate()
        .map(|(k, &g)| {
            let mut l = lines[g][k];
            let n = f64::from(u8::from(cross[k].0) + u8::from(cross[k].1));
            l.t0 += n * (sends[g].0 - sends[g].1);
            l
        })
        .collect();
    let all_full = c.recompute == Recompute::Full;
    let p = groups.len();
    let blocks: Vec<u64> = if req.shape() == MapShape::Even {
        StageMap::uniform(req.model.layers, c).chunk_blocks
    } else {
        let cost = |k: usize, b: u64| {
            let x = stage[k].min_recompute(b, all_full)?;
            Some(stage[k].time_s(b, x))
        };
        bottleneck(p, req.model.layers, &cost)?.0
    };
    let recompute: Option<Vec<u64>> = blocks
        .iter()
        .enumerate()
        .map(|(k, &b)| stage[k].min_recompute(b, all_full))
        .collect();
    let mut map = StageMap {
        chunk_blocks: blocks,
        recompute_blocks: recompute?,
        placement: c.schedule.placement(),
    };
    if req.shape() != MapShape::Any {
        uniform_recompute(c, &mut map);
    }
    Some(map)
}

/// The least memory ratio of `mc`'s memory-balanced layout (every block recomputed where
/// allowed), and the stage that sets it.
pub(super) fn memory_floor(
    mc: &MixedConfig,
    layers: u64,
    lines: &[Vec<StageLine>],
) -> Option<(f64, usize)> {
    let groups = mc.stage_groups();
    let cost = |k: usize, b: u64| Some(lines[groups[k]][k].min_ratio(b));
    let (blocks, value) = bottleneck(groups.len(), layers, &cost)?;
    let k = (0..groups.len())
        .max_by(|&a, &b| {
            lines[groups[a]][a]
                .min_ratio(blocks[a])
                .total_cmp(&lines[groups[b]][b].min_ratio(blocks[b]))
        })
        .unwrap_or(0);
    Some((value, k))
}

/// The best layout of a mixed shape (the planner's layout, for a configuration the user
/// gives): None when no layout fits every stage.
pub fn layout_mixed(req: &MixedRequest, mc: &MixedConfig) -> Result<Option<StageMap>, PlanError> {
    let c = &mc.config;
    c.validate(req.model, req.train, c.gpus())?;
    let ctxs = ctxs(req);
    let lines: Vec<_> = ctxs
        .iter()
        .map(|x| stage_lines(req, x, c, &group_costs(req, x, c)))
        .collect();
    let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
    Ok(layout_from_lines(req, mc, &lines, &sends).map(|m| fit_exactly(req, &ctxs, mc, m)))
}

/// Raises recompute counts where the exact estimate exceeds a stage's memory (the lines
/// are exact up to rounding; this guards the rounding).
pub(super) fn fit_exactly(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    mut map: StageMap,
) -> StageMap {
    let c = &mc.config;
    let costs: Vec<_> = ctxs.iter().map(|x| group_costs(req, x, c)).collect();
    for _ in 0..4 {
        let (e, _) = closed_form(req, ctxs, mc, &map, &costs);
        let mut changed = false;
        for s in e.stages.iter().filter(|s| !s.fits) {
            let k = s.stage;
            if !c.schedule.spares_rank(k as u64, c.pp)
                && map.recompute_blocks[k] < map.chunk_blocks[k]
            {
                map.recompute_blocks[k] += 1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    map
}

/// The even layout with the fewest fully recomputed blocks per stage that fit.
pub(super) fn even_fit(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    mut map: StageMap,
) -> StageMap {
    let c = &mc.config;
    let lines: Vec<_> = ctxs
        .iter()
        .map(|x| stage_lines(req, x, c, &group_costs(req, x, c)))
        .collect();
    for (k, g) in mc.stage_groups().into_iter().enumerate() {
        let b = map.chunk_blocks[k];
        map.recompute_blocks[k] = lines[g][k]
            .min_recompute(b, c.recompute == Recompute::Full)
            .unwrap_or(b);
    }
    if req.shape() != MapShape::Any {
        uniform_recompute(c, &mut map);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bottleneck_equals_brute_force() {
        // Stage k costs (k + 1) × b, stage 2 cannot hold more than 2 blocks.
        let cost = |k: usize, b: u64| {
            if k == 2 && b > 2 {
                None
            } else {
                Some((k + 1) as f64 * b as f64)
            }
        };
        let (blocks, v) = bottleneck(3, 9, &cost).unwrap();
        assert_eq!(blocks.iter().sum::<u64>(), 9);
        let mut best = f64::INFINITY;
        for a in 1..=7u64 {
            for b in 1..=(8 - a) {
                let c = 9 - a - b;
                if c == 0 {
                    continue;
                }
                let t = [cost(0, a), cost(1, b), cost(2, c)];
                if t.iter().all(Option::is_some) {
                    best = best.min(t.iter().map(|x| x.unwrap()).fold(0.0, f64::max));
                }
            }
        }
        assert_eq!(v, best);
        assert!(bottleneck(3, 2, &cost).is_none());
    }
}
