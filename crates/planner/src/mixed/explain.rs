//! The explanation of the best mixed plan, in sentences: where the blocks went and why (a
//! block's time on each GPU kind), the bottleneck stage, the link between groups, the even
//! split, and the comparison with each group alone.
//!
//! It only reads the plan and the per-group layer costs; it changes and ranks nothing.

use super::lines::{group_costs, Ctx};
use super::{Homogeneous, MixedPlan, MixedRequest};
fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

pub(super) fn explain(
    req: &MixedRequest,
    ctxs: &[Ctx],
    best: &MixedPlan,
    homo: &[Homogeneous],
) -> Vec<String> {
    let e = &best.estimate;
    let mc = &best.mixed_config;
    let layers = req.model.layers;
    let mut out = Vec::new();
    // Where the blocks went, and why: a block's time on each GPU kind.
    let mut parts = Vec::new();
    let mut first = 0usize;
    for (&g, &s) in mc.order.iter().zip(&mc.stages) {
        let stages = &e.stages[first..first + s as usize];
        let blocks: u64 = stages.iter().map(|s| s.blocks).sum();
        let (policy, _) = group_costs(req, &ctxs[g], &mc.config);
        let per_block = policy.block.forward.total_s()
            + policy.block.backward.total_s()
            + policy.block.recompute.total_s();
        let counts: Vec<String> = stages.iter().map(|s| s.blocks.to_string()).collect();
        parts.push((
            g,
            first,
            first + s as usize - 1,
            blocks,
            counts.join("/"),
            per_block,
        ));
        first += s as usize;
    }
    let text: Vec<String> = parts
        .iter()
        .map(|(g, a, b, blocks, counts, per)| {
            format!(
                "{} ({}) holds {blocks} of {layers} blocks ({counts}; a block's forward+backward {} per micro-batch)",
                req.mixed.groups[*g].name,
                if a == b { format!("stage {a}") } else { format!("stages {a}–{b}") },
                ms(*per)
            )
        })
        .collect();
    out.push(format!("Layout: {}.", text.join("; ")));
    if let (Some(fast), Some(slow)) = (
        parts.iter().min_by(|a, b| a.5.total_cmp(&b.5)),
        parts.iter().max_by(|a, b| a.5.total_cmp(&b.5)),
    ) {
        if fast.0 != slow.0 {
            let per_stage =
                |p: &(usize, usize, usize, u64, String, f64)| p.3 as f64 / (p.2 - p.1 + 1) as f64;
            out.push(format!(
                "{} computes a block {:.2}× faster than {}, so its stages hold {:.2}× the blocks ({:.1} vs {:.1} per stage); the rest of the imbalance is the embedding and head, memory and whole blocks.",
                req.mixed.groups[fast.0].name,
                slow.5 / fast.5,
                req.mixed.groups[slow.0].name,
                per_stage(fast) / per_stage(slow),
                per_stage(fast),
                per_stage(slow)
            ));
        }
    }
    let k = e.bottleneck_stage;
    let bs = &e.stages[k];
    let b = &e.estimate.breakdown;
    out.push(format!(
        "The pipeline is bound by stage {k} on {} ({} blocks, {} per micro-batch × {} micro-batches); the bubble is {:.1} % of the {:.3} s step, exposed data-parallel time {:.3} s.",
        bs.group,
        bs.blocks,
        ms(bs.time_per_microbatch_s),
        e.estimate.microbatches,
        100.0 * b.pipeline_bubble_s / e.estimate.iteration_time_s,
        e.estimate.iteration_time_s,
        b.dp_comm_exposed_s
    ));
    if let Some(cross) = e.stages.iter().find(|s| s.cross_group_p2p_s > 0.0) {
        out.push(format!(
            "Between groups the link ({:.1} GB/s per GPU{}) carries a micro-batch's activation or gradient in {} ({:.1} % of the bottleneck stage's time).",
            req.mixed.link.bandwidth_bytes_per_s / 1e9,
            if req.mixed.link_is_default { ", the slower group's network" } else { "" },
            ms(cross.cross_group_p2p_s),
            100.0 * cross.cross_group_p2p_s / bs.time_per_microbatch_s
        ));
    }
    if let Some(even) = best.even_layout_iteration_time_s {
        out.push(format!(
            "An even split ({:.1} blocks per stage) would take {:.3} s: the balanced layout is {:.1} % faster.",
            layers as f64 / mc.config.pp as f64,
            even,
            100.0 * (even / e.estimate.iteration_time_s - 1.0)
        ));
    }
    for h in homo {
        match &h.plan {
            Some(p) => {
                let (t, mixed_t) = (p.estimate.iteration_time_s, e.estimate.iteration_time_s);
                let ratio = t / mixed_t;
                let verdict = if ratio > 1.0 {
                    format!("the mixed plan is {:.2}× faster", ratio)
                } else {
                    format!("{} alone is {:.2}× faster", h.group, 1.0 / ratio)
                };
                let hb = &p.estimate.breakdown;
                let diffs = [
                    (
                        "compute of the slowest stage",
                        b.compute_s + b.recompute_s - hb.compute_s - hb.recompute_s,
                    ),
                    ("tensor-parallel communication", b.tp_comm_s - hb.tp_comm_s),
                    ("pipeline transfers", b.pp_comm_s - hb.pp_comm_s),
                    (
                        "pipeline bubble",
                        b.pipeline_bubble_s - hb.pipeline_bubble_s,
                    ),
                    (
                        "exposed data-parallel time",
                        b.dp_comm_exposed_s - hb.dp_comm_exposed_s,
                    ),
                    ("optimizer step", b.optimizer_s - hb.optimizer_s),
                ];
                let (what, by) = if ratio > 1.0 {
                    diffs
                        .iter()
                        .min_by(|a, b| a.1.total_cmp(&b.1))
                        .copied()
                        .unwrap_or(("", 0.0))
                } else {
                    diffs
                        .iter()
                        .max_by(|a, b| a.1.total_cmp(&b.1))
                        .copied()
                        .unwrap_or(("", 0.0))
                };
                out.push(format!(
                    "Against {} alone ({} GPUs, {}: {:.3} s, {:.0} tokens/s, MFU {:.1} %): {verdict} ({:.0} tokens/s, MFU {:.1} % of all {} GPUs' peak); the largest difference is the {what} ({:+.3} s).",
                    h.group,
                    h.gpus,
                    p.config,
                    t,
                    p.estimate.tokens_per_s,
                    100.0 * p.estimate.mfu,
                    e.estimate.tokens_per_s,
                    100.0 * e.estimate.mfu,
                    req.mixed.gpus(),
                    by
                ));
            }
            None => out.push(format!(
                "{} alone ({} GPUs) has no plan: {}.",
                h.group,
                h.gpus,
                h.infeasible.as_deref().unwrap_or("nothing fits")
            )),
        }
    }
    out
}
