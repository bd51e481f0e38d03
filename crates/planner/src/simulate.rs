//! One real configuration through the event simulator: the cost model's per-layer figures
//! become per-instruction durations and bytes, the configuration's schedule is generated
//! and simulated, and the estimate is refined with the simulated iteration and memory.
//!
//! This is the bridge between `plait-cost` (which knows layers, not schedules) and
//! `plait-schedule` (which knows schedules, not layers).

use plait_cost::estimate::{grad_bucket_params, LayerCosts};
use plait_cost::layer::LayerCost;
use plait_cost::pipeline::WEIGHT_GRAD_INPUT_SHARE;
use plait_cost::{DeviceModel, Estimate, Scenario};
use plait_schedule::{
    generate, simulate, validate, ChunkCosts, Costs, Op, RankCosts, Schedule, Simulation, Stream,
};
use plait_spec::{ClusterSpec, ModelSpec, ParallelConfig, Recompute, StageMap, TrainSpec};

use crate::PlanError;

/// A configuration simulated event by event.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulated {
    pub schedule: Schedule,
    pub costs: Costs,
    pub simulation: Simulation,
    /// The analytic estimate with the simulated iteration time and per-rank peak memory.
    pub estimate: Estimate,
    /// The analytic estimate as the closed forms give it.
    pub closed_form: Estimate,
}

/// Per-instruction costs of `c` on every rank and chunk, from the cost model. `estimate` is
/// the analytic estimate of the same configuration and map (its per-stage memory,
/// reductions and optimizer times).
pub fn costs(
    scenario: &Scenario,
    c: &ParallelConfig,
    estimate: &Estimate,
    map: &StageMap,
) -> Costs {
    let (m, t) = (scenario.model, scenario.train);
    let (policy, full) = scenario.policy_and_full(c);
    let kept = scenario.layer_costs(c, Recompute::None);
    let (p, v) = (c.pp, c.vp);
    let ranks = (0..p)
        .map(|r| {
            let stage = &estimate.stages[r as usize];
            let p2p_one = stage.p2p_s / (2 * v) as f64;
            // Ranks the schedule never recomputes on (scp's last), whatever the map.
            let spared = c.schedule.spares_rank(r, p);
            let layers_of = |chunk: u64| {
                let j = map.placement.virtual_stage(r, chunk, p);
                let first = map.chunk_first_block(j as usize);
                let n = map.chunk_blocks[j as usize];
                let x = if spared {
                    0
                } else {
                    map.chunk_recompute_blocks(r, chunk, p).min(n)
                };
                (
                    j,
                    (first, x),
                    chunk_layers(m, j, p * v, &policy, &full, first, n, x),
                )
            };
            let params_of = |layers: &[(LayerCost, f64)]| -> f64 {
                layers
                    .iter()
                    .map(|(l, n)| (l.trainable_params + l.trainable_expert_params) * n)
                    .sum()
            };
            // Each chunk reduces its share of the rank's gradients (the tied output copy of
            // the last rank included, by normalising over the chunks).
            let rank_params: f64 = (0..v).map(|c| params_of(&layers_of(c).2)).sum();
            // ZeRO-1/2 all-gather the updated parameters after the step; with overlap
            // (Megatron-LM --overlap-param-gather) the next iteration's first forward hides
            // what it can, so only the rest is charged here.
            let gather = stage.dp_param_gather_s;
            let gather_exposed = if t.overlap_grad_reduce {
                (gather - stage.forward_s).max(0.0)
            } else {
                gather
            };
            let rank_reduce_s = stage.dp_reduce_s - gather + gather_exposed;
            let chunks: Vec<ChunkCosts> = (0..v)
                .map(|chunk| {
                    let (j, (first, x), layers) = layers_of(chunk);
                    // The fully recomputed blocks, by kind: their rebuild and the bytes
                    // they hold while rebuilt.
                    let rebuilt = |costs: &LayerCosts, f: &dyn Fn(&LayerCost) -> f64| -> f64 {
                        costs
                            .blocks(m, first, x)
                            .iter()
                            .map(|(l, n)| f(l) * n)
                            .sum()
                    };
                    let sum = |f: &dyn Fn(&LayerCost) -> f64| -> f64 {
                        layers.iter().map(|(l, n)| f(l) * n).sum()
                    };
                    let params = sum(&|l| l.trainable_params + l.trainable_expert_params);
                    let forward = sum(&|l| l.forward.total_s());
                    let backward = sum(&|l| l.backward.total_s());
                    let weight = sum(&|l| l.weight_grad_s);
                    // Activation offloading (pp 1, one chunk) keeps the offloaded blocks'
                    // bytes in host memory and exposes what its copies outlast.
                    let activation_bytes =
                        (sum(&|l| l.activation_bytes) - stage.offload_host_bytes).max(0.0);
                    // Fully recomputed blocks re-run their forward in a Recompute
                    // instruction; what the policy recomputes (selective: the attention
                    // core) stays inside the backward.
                    let rebuild_s = rebuilt(&full, &|l| l.recompute.total_s());
                    let in_backward_s = sum(&|l| l.recompute.total_s()) - rebuild_s;
                    // Megatron-LM rebuilds one layer at a time inside the backward (the
                    // estimate's transient); Merak's scp rebuilds the chunk before it.
                    let recompute_bytes = if c.schedule.rebuilds_before_backward() {
                        rebuilt(&kept, &|l| l.activation_bytes)
                            - rebuilt(&full, &|l| l.activation_bytes)
                    } else {
                        0.0
                    };
                    let stage_fwd = stage.forward_s.max(f64::MIN_POSITIVE);
                    // Megatron-Core's all-to-all overlap changes the rank's backward per
                    // micro-batch (`moe_a2a_overlap_s`): each chunk takes its share.
                    let chunk_bwd = backward + sum(&|l| l.recompute.total_s());
                    let rank_bwd =
                        (stage.backward_s - stage.moe_a2a_overlap_s).max(f64::MIN_POSITIVE);
                    let a2a_s = stage.moe_a2a_overlap_s * chunk_bwd / rank_bwd;
                    let share = if rank_params > 0.0 {
                        params / rank_params
                    } else {
                        1.0 / v as f64
                    };
                    ChunkCosts {
                        forward_s: forward
                            + stage.zero3_exposed_per_mb_s * forward / stage_fwd
                            + stage.offload_exposed_forward_s,
                        backward_input_s: (backward - weight
                            + in_backward_s
                            + a2a_s
                            + stage.offload_exposed_backward_s)
                            .max(0.0),
                        backward_weight_s: weight,
                        recompute_s: rebuild_s,
                        send_activation_s: if j + 1 < p * v { p2p_one } else { 0.0 },
                        send_gradient_s: if j > 0 { p2p_one } else { 0.0 },
                        activation_bytes,
                        weight_grad_bytes: WEIGHT_GRAD_INPUT_SHARE * activation_bytes,
                        recompute_bytes,
                        backward_bytes: stage.memory.transient_bytes,
                        reduce_s: rank_reduce_s * share,
                        reduce_buckets: (params / grad_bucket_params((c.dp * c.cp) as f64))
                            .ceil()
                            .clamp(1.0, 1e6) as u32,
                    }
                })
                .collect();
            let mem = &stage.memory;
            RankCosts {
                chunks,
                static_bytes: mem.weights_bytes
                    + mem.gradients_bytes
                    + mem.optimizer_bytes
                    + mem.reserve_bytes,
                optimizer_s: stage.optimizer_s,
            }
        })
        .collect();
    Costs { ranks }
}

/// The layers of virtual stage `j` of `stages` with their multiplicities: its `n` blocks
/// from block `first`, of which the first `x` are fully recomputed, each costed by its
/// kind, and the embedding or head at the ends.
#[allow(clippy::too_many_arguments)]
fn chunk_layers(
    m: &ModelSpec,
    j: u64,
    stages: u64,
    policy: &LayerCosts,
    full: &LayerCosts,
    first: u64,
    n: u64,
    x: u64,
) -> Vec<(LayerCost, f64)> {
    let at = |yes: bool| if yes { 1.0 } else { 0.0 };
    let mut out = full.blocks(m, first, x);
    out.extend(policy.blocks(m, first + x, n - x));
    out.push((policy.embedding, at(j == 0)));
    out.push((policy.head, at(j + 1 == stages)));
    // Multi-token-prediction modules run after the head, on the last stage.
    out.push((policy.mtp, at(j + 1 == stages) * m.mtp_layers as f64));
    out
}

/// Estimates `c` under the even layout, then simulates its schedule and refines the
/// estimate.
pub fn simulate_config(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
) -> Result<Simulated, PlanError> {
    simulate_mapped(m, cluster, t, c, d, &StageMap::uniform_checked(m, t, c)?)
}

/// As [`simulate_config`], with the blocks laid out by `map`.
pub fn simulate_mapped(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
    map: &StageMap,
) -> Result<Simulated, PlanError> {
    simulate_in(&Scenario::new(m, cluster, t, d), c, map)
}

/// As [`simulate_mapped`], with the layer costs of `scenario`'s memo (the search's).
pub fn simulate_in(
    scenario: &Scenario,
    c: &ParallelConfig,
    map: &StageMap,
) -> Result<Simulated, PlanError> {
    let t = scenario.train;
    let closed_form = scenario.estimate(c, map)?;
    let spec = plait_spec::schedule_spec(c, t, map)?;
    let schedule = generate(&spec)?;
    validate(&schedule)?;
    let costs = costs(scenario, c, &closed_form, map);
    let simulation = simulate(&schedule, &costs)?;
    let estimate = refine(&closed_form, &simulation, t);
    Ok(Simulated {
        schedule,
        costs,
        simulation,
        estimate,
        closed_form,
    })
}

/// The estimate with the simulated iteration time (the pipeline bubble and exposed
/// data-parallel time are what the simulation adds to the slowest rank's work) and the
/// simulated per-rank memory peaks.
pub fn refine(e: &Estimate, sim: &Simulation, t: &TrainSpec) -> Estimate {
    let mut out = e.clone();
    let time = sim.makespan_s;
    let b = &mut out.breakdown;
    // ZeRO-3's per-micro-batch exposure is inside the simulated forwards; keep it filed as
    // data-parallel communication, as the closed form does.
    let zero3_s = e
        .stages
        .iter()
        .map(|s| s.zero3_exposed_per_mb_s)
        .fold(0.0, f64::max)
        * e.microbatches as f64;
    let work = b.total_s() - b.pipeline_bubble_s - b.dp_comm_exposed_s + zero3_s;
    // Exposed reduction: on the rank that finishes last, how long its optimizer step waited
    // for the data-parallel stream after its last backward.
    let mut compute_end = vec![0.0f64; sim.ranks.len()];
    let mut step = vec![(0.0f64, 0.0f64); sim.ranks.len()];
    for span in sim.spans.iter().filter(|s| s.stream == Stream::Compute) {
        let r = span.rank as usize;
        if span.instr.op == Op::OptimizerStep {
            step[r] = (span.start_s, span.end_s);
        } else {
            compute_end[r] = compute_end[r].max(span.end_s);
        }
    }
    let dp_exposed = (0..sim.ranks.len())
        .max_by(|&a, &b| step[a].1.total_cmp(&step[b].1))
        .map_or(0.0, |r| (step[r].0 - compute_end[r]).max(0.0));
    // Compute slowed by the reductions it hides, which the simulator's streams do not model.
    let contention_s = e
        .stages
        .iter()
        .map(|s| s.dp_contention_s)
        .fold(0.0, f64::max);
    b.dp_comm_exposed_s = dp_exposed + zero3_s + contention_s;
    b.pipeline_bubble_s = (time - work - dp_exposed).max(0.0);
    out.iteration_time_s = b.total_s();
    // The band keeps its width around the refined centre.
    out.iteration_time_low_s = out.iteration_time_s - (e.iteration_time_s - e.iteration_time_low_s);
    out.iteration_time_high_s =
        out.iteration_time_s + (e.iteration_time_high_s - e.iteration_time_s);
    out.tokens_per_s = t.gbs as f64 * t.seq as f64 / out.iteration_time_s;
    let scale = e.iteration_time_s / out.iteration_time_s;
    out.tflops_per_gpu = e.tflops_per_gpu * scale;
    out.mfu = e.mfu * scale;
    for (stage, rank) in out.stages.iter_mut().zip(&sim.ranks) {
        let mem = &mut stage.memory;
        let fixed = mem.total_bytes() - mem.activations_bytes;
        mem.activations_bytes = (rank.peak_memory_bytes - fixed).max(0.0);
        mem.inflight_microbatches = rank.peak_inflight_microbatches;
        stage.peak_memory_bytes = rank.peak_memory_bytes;
    }
    let (worst, peak) = out
        .stages
        .iter()
        .enumerate()
        .map(|(k, s)| (k, s.peak_memory_bytes))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0));
    out.worst_stage = worst;
    out.memory = out.stages[worst].memory;
    out.peak_memory_bytes = peak;
    out.peak_memory_high_bytes = peak
        + plait_cost::estimate::ALLOCATOR_FRAGMENTATION
            * (out.memory.activations_bytes + out.memory.transient_bytes);
    out.fits = peak <= out.memory_capacity_bytes && out.host_fits();
    out
}
