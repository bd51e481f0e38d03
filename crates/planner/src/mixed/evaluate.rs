//! One mixed plan, evaluated: the whole pipeline from one estimate per group (each stage
//! from its own group, the cross-group sends on the link), throughput, MFU over every GPU's
//! peak and memory against each stage's own GPU; the closed form (`estimate_mixed`) and the
//! event simulation (`simulate_mixed`).
//!
//! It evaluates the layout it is given: it does not choose layouts or configurations.

use plait_cost::estimate::{estimate_from_costs, LayerCosts};
use plait_cost::layer::LayerCost;
use plait_cost::pipeline::{pipeline_time, StageTime};
use plait_cost::Estimate;
use plait_schedule::{generate, simulate, validate, Costs};
use plait_spec::{schedule_spec, StageMap, GIB};

use super::lines::{cross_send_s, ctxs, group_costs, Ctx};
use super::{MixedConfig, MixedEstimate, MixedRequest, MixedSimulated, MixedStage};
use crate::PlanError;
/// Per stage: the sends that cross groups (before and after it).
pub(super) fn crossings(groups: &[usize]) -> Vec<(bool, bool)> {
    (0..groups.len())
        .map(|k| {
            (
                k > 0 && groups[k - 1] != groups[k],
                k + 1 < groups.len() && groups[k + 1] != groups[k],
            )
        })
        .collect()
}

/// The whole pipeline from one estimate per group (`ests[g]`: the pipeline estimated on
/// group g's hardware), each stage taken from its own group, with the cross-group sends.
fn combine(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    map: &StageMap,
    ests: &[Estimate],
    costs: &[(LayerCosts, LayerCosts)],
    sends: &[(f64, f64)],
) -> MixedEstimate {
    let c = &mc.config;
    let groups = mc.stage_groups();
    let cross = crossings(&groups);
    let mb = c.microbatches(req.train);
    let mut out = ests[groups[0]].clone();
    let mut stage_times = Vec::with_capacity(groups.len());
    let mut stages = Vec::with_capacity(groups.len());
    let mut view = Vec::with_capacity(groups.len());
    for (k, &g) in groups.iter().enumerate() {
        let mut s = ests[g].stages[k].clone();
        let (across, inside) = sends[g];
        let n_cross = u8::from(cross[k].0) + u8::from(cross[k].1);
        let cross_s = f64::from(n_cross) * across;
        s.p2p_s += f64::from(n_cross) * (across - inside);
        let (policy, full) = &costs[g];
        let x = map.recompute_blocks[k].min(s.blocks) as f64;
        let wgrad = (s.blocks as f64 - x) * policy.block.weight_grad_s
            + x * full.block.weight_grad_s
            + if k == 0 {
                policy.embedding.weight_grad_s
            } else {
                0.0
            }
            + if k + 1 == groups.len() {
                policy.head.weight_grad_s
            } else {
                0.0
            };
        stage_times.push(StageTime {
            forward_s: s.forward_s,
            backward_s: s.backward_s,
            weight_grad_s: wgrad,
            p2p_s: s.p2p_s,
        });
        let grp = &req.mixed.groups[g];
        view.push(MixedStage {
            stage: k,
            group: grp.name.clone(),
            gpu: grp.cluster.gpu.name.clone(),
            blocks: s.blocks,
            recompute_blocks: map.recompute_blocks[k],
            time_per_microbatch_s: s.forward_s + s.backward_s + s.p2p_s,
            cross_group_p2p_s: cross_s,
            peak_memory_bytes: s.peak_memory_bytes,
            memory_capacity_bytes: ctxs[g].capacity,
            fits: s.peak_memory_bytes <= ctxs[g].capacity,
        });
        stages.push(s);
    }
    let (pipe_s, _) = pipeline_time(c.schedule, &stage_times, mb, 1);
    let slowest = (0..stages.len())
        .max_by(|&a, &b| {
            stage_times[a]
                .total_s()
                .total_cmp(&stage_times[b].total_s())
        })
        .unwrap_or(0);
    // The slowest stage's work by kind, from its group's layer costs (as the homogeneous
    // estimate files it).
    let (policy, full) = &costs[groups[slowest]];
    let n = stages[slowest].blocks as f64;
    let x = (map.recompute_blocks[slowest] as f64).min(n);
    let layers: [(&LayerCost, f64); 4] = [
        (&policy.block, n - x),
        (&full.block, x),
        (&policy.embedding, f64::from(u8::from(slowest == 0))),
        (
            &policy.head,
            f64::from(u8::from(slowest + 1 == stages.len())),
        ),
    ];
    let mbf = mb as f64;
    let sum =
        |f: &dyn Fn(&LayerCost) -> f64| mbf * layers.iter().map(|(l, n)| n * f(l)).sum::<f64>();
    let b = &mut out.breakdown;
    b.compute_s = sum(&|l| l.forward.compute_s + l.backward.compute_s);
    b.recompute_s = sum(&|l| l.recompute.compute_s);
    b.tp_comm_s = sum(&|l| l.forward.tp_comm_s + l.backward.tp_comm_s + l.recompute.tp_comm_s);
    b.cp_comm_s = 0.0;
    b.ep_comm_s = sum(&|l| l.forward.ep_comm_s + l.backward.ep_comm_s + l.recompute.ep_comm_s);
    b.pp_comm_s = mbf * stage_times[slowest].p2p_s;
    // Closed-form screening only: each group's worst exposed reduction (the simulator
    // replaces it with the reduction of the stage that finishes last).
    b.dp_comm_exposed_s = groups
        .iter()
        .map(|&g| ests[g].breakdown.dp_comm_exposed_s)
        .fold(0.0, f64::max);
    b.optimizer_s = stages.iter().map(|s| s.optimizer_s).fold(0.0, f64::max);
    let work = b.compute_s + b.recompute_s + b.tp_comm_s + b.ep_comm_s + b.pp_comm_s;
    b.pipeline_bubble_s = (pipe_s - work).max(0.0);
    out.stages = stages;
    out.iteration_time_s = out.breakdown.total_s();
    finish(req, ctxs, &mut out, &mut view);
    MixedEstimate {
        estimate: out,
        stages: view,
        bottleneck_stage: slowest,
        simulated: false,
        reason: None,
    }
    .with_reason()
}

/// Throughput, MFU over every GPU's peak, and memory against each stage's own GPU.
fn finish(req: &MixedRequest, ctxs: &[Ctx], e: &mut Estimate, view: &mut [MixedStage]) {
    let t = e.iteration_time_s;
    let gpus = req.mixed.gpus() as f64;
    let peak: f64 = req
        .mixed
        .groups
        .iter()
        .zip(ctxs)
        .map(|(g, c)| g.gpus() as f64 * c.device.peak_flops_per_s)
        .sum();
    let flops = e.model_flops_per_iteration;
    e.tokens_per_s = req.train.gbs as f64 * req.train.seq as f64 / t;
    e.tflops_per_gpu = flops / t / gpus / 1e12;
    e.mfu = flops / t / peak;
    for (v, s) in view.iter_mut().zip(&e.stages) {
        v.peak_memory_bytes = s.peak_memory_bytes;
        v.fits = s.peak_memory_bytes <= v.memory_capacity_bytes;
    }
    let worst = (0..view.len())
        .max_by(|&a, &b| {
            let r = |k: usize| view[k].peak_memory_bytes / view[k].memory_capacity_bytes;
            r(a).total_cmp(&r(b))
        })
        .unwrap_or(0);
    e.worst_stage = worst;
    e.memory = e.stages[worst].memory;
    e.peak_memory_bytes = e.stages[worst].peak_memory_bytes;
    e.peak_memory_high_bytes = e.peak_memory_bytes
        + plait_cost::estimate::ALLOCATOR_FRAGMENTATION
            * (e.memory.activations_bytes + e.memory.transient_bytes);
    e.memory_capacity_bytes = view[worst].memory_capacity_bytes;
    e.fits = view.iter().all(|v| v.fits);
}

impl MixedEstimate {
    fn with_reason(mut self) -> Self {
        self.reason = self.stages.iter().find(|s| !s.fits).map(|s| {
            format!(
                "stage {} ({}, {} blocks, {} recomputed) needs {:.1} GiB per GPU but its {} has {:.1} GiB",
                s.stage,
                s.group,
                s.blocks,
                s.recompute_blocks,
                s.peak_memory_bytes / GIB,
                s.gpu,
                s.memory_capacity_bytes / GIB
            )
        });
        self
    }
}

/// Checks a mixed plan given by the user: degrees and layout.
fn check(req: &MixedRequest, mc: &MixedConfig, map: &StageMap) -> Result<(), PlanError> {
    let c = &mc.config;
    c.validate(req.model, req.train, c.gpus())?;
    map.validate(req.model.layers, c)?;
    if req.devices.len() != req.mixed.groups.len() {
        return Err(PlanError::Graph(format!(
            "{} device models for {} groups",
            req.devices.len(),
            req.mixed.groups.len()
        )));
    }
    Ok(())
}

/// The closed-form estimate of a mixed plan with its blocks laid out by `map`.
pub fn estimate_mixed(
    req: &MixedRequest,
    mc: &MixedConfig,
    map: &StageMap,
) -> Result<MixedEstimate, PlanError> {
    check(req, mc, map)?;
    let ctxs = ctxs(req);
    let costs: Vec<_> = ctxs
        .iter()
        .map(|x| group_costs(req, x, &mc.config))
        .collect();
    Ok(closed_form(req, &ctxs, mc, map, &costs).0)
}

/// Closed form with the per-group estimates it came from (with their bands).
pub(super) fn closed_form(
    req: &MixedRequest,
    ctxs: &[Ctx],
    mc: &MixedConfig,
    map: &StageMap,
    costs: &[(LayerCosts, LayerCosts)],
) -> (MixedEstimate, Vec<Estimate>) {
    let c = &mc.config;
    let ests: Vec<Estimate> = ctxs
        .iter()
        .zip(costs)
        .map(|(x, (p, f))| {
            estimate_from_costs(req.model, x.cluster, req.train, c, x.device, p, f, map)
        })
        .collect();
    let sends: Vec<_> = ctxs.iter().map(|x| cross_send_s(req, x, c)).collect();
    (combine(req, ctxs, mc, map, &ests, costs, &sends), ests)
}

/// Simulates a mixed plan event by event: each rank's instruction costs from its own
/// group (the homogeneous bridge), the cross-group sends on the link, one schedule.
pub fn simulate_mixed(
    req: &MixedRequest,
    mc: &MixedConfig,
    map: &StageMap,
) -> Result<MixedSimulated, PlanError> {
    check(req, mc, map)?;
    let ctxs = ctxs(req);
    let c = &mc.config;
    let costs: Vec<_> = ctxs.iter().map(|x| group_costs(req, x, c)).collect();
    let (closed, ests) = closed_form(req, &ctxs, mc, map, &costs);
    // Bands: each group's relative band at the optimistic and pessimistic levels.
    let mut low: f64 = 1.0;
    let mut high: f64 = 1.0;
    for x in &ctxs {
        let e = plait_cost::estimate_mapped(req.model, x.cluster, req.train, c, x.device, map)?;
        low = low.min(e.iteration_time_low_s / e.iteration_time_s);
        high = high.max(e.iteration_time_high_s / e.iteration_time_s);
    }
    let spec = schedule_spec(c, req.train, map)?;
    let schedule = generate(&spec)?;
    validate(&schedule)?;
    let groups = mc.stage_groups();
    let per_group: Vec<Costs> = ctxs
        .iter()
        .zip(&ests)
        .map(|(x, e)| {
            let scenario = plait_cost::Scenario::new(req.model, x.cluster, req.train, x.device);
            crate::simulate::costs(&scenario, c, e, map)
        })
        .collect();
    let cross = crossings(&groups);
    let ranks = groups
        .iter()
        .enumerate()
        .map(|(k, &g)| {
            let mut r = per_group[g].ranks[k].clone();
            let across = cross_send_s(req, &ctxs[g], c).0;
            if cross[k].1 {
                r.chunks[0].send_activation_s = across;
            }
            if cross[k].0 {
                r.chunks[0].send_gradient_s = across;
            }
            r
        })
        .collect();
    let costs = Costs { ranks };
    let simulation = simulate(&schedule, &costs)?;
    let mut e = crate::simulate::refine(&closed.estimate, &simulation, req.train);
    let centre = e.iteration_time_s;
    e = e.with_band(centre * low, centre * high);
    let mut view = closed.stages.clone();
    finish(req, &ctxs, &mut e, &mut view);
    let estimate = MixedEstimate {
        estimate: e,
        stages: view,
        bottleneck_stage: closed.bottleneck_stage,
        simulated: true,
        reason: None,
    }
    .with_reason();
    Ok(MixedSimulated {
        schedule,
        costs,
        simulation,
        estimate,
    })
}
