//! `estimate`: one configuration → iteration time with its breakdown, throughput and
//! per-GPU memory of the worst pipeline stage. Pure and deterministic.

use plait_spec::{
    even_chunk_blocks, ClusterSpec, Dtype, ModelSpec, ParallelConfig, Recompute, SpecError,
    StageMap, TrainSpec, MAX_BLOCK_KINDS,
};

use crate::comm::{Group, Groups};
use crate::device::DeviceModel;
use crate::engine::{contention_per_overlap_s, nccl_channels};
use crate::layer::{padded_vocab, LayerCost, Workload};
use crate::pipeline::{
    inflight_microbatches, moe_a2a_overlap, pipeline_time, A2aOverlap, StageTime,
};
mod layers;
mod offload;
mod report;
mod weights;
pub use layers::{layer_costs, LayerCosts};
pub use offload::OptimizerHome;
use offload::{activation_offload, optimizer_offload};
pub use report::{Breakdown, Estimate, LayerReport, MemoryBreakdown, StageEstimate};

/// Bytes per parameter of mixed-precision Adam: 2 (16-bit weights) + 2 (16-bit gradients) +
/// the optimizer's state (12 for fp32 master weights, momentum and variance — Rajbhandari et
/// al. 2020 (ZeRO), §3.1; `OptimizerState::bytes_per_param`).
const WEIGHT_BYTES: f64 = 2.0;
const GRADIENT_BYTES: f64 = 2.0;
/// HBM traffic of one fused Adam step per parameter besides its state: read the fp32
/// gradient (4), write the 16-bit weight (2), plus the gradient-norm read for clipping (4).
/// The step also reads and writes the state (master, m, v: 2 × 12 bytes in fp32), 34 in all.
const OPTIMIZER_STEP_OTHER_BYTES_PER_PARAM: f64 = 10.0;
/// Megatron-LM's data-parallel gradient bucket: 40 M parameters (DDP `bucket_size`).
pub const GRAD_BUCKET_PARAMS: f64 = 40e6;

/// Megatron-Core's bucket for a data-parallel group of `dp` ranks: max(40 M, 1 M × dp)
/// parameters (`distributed/distributed_data_parallel.py:122-137`, d98e8a6).
pub fn grad_bucket_params(dp: f64) -> f64 {
    GRAD_BUCKET_PARAMS.max(1e6 * dp)
}

/// PyTorch's caching allocator leaves 15 % of the memory it manages fragmented on average
/// in LLM training with recomputation and sharding (Guo et al., "GMLake", ASPLOS 2024:
/// fragmentation reduced by 15 % on average, up to 33 %, over eight LLMs on A100-80GB).
/// Applied to the dynamic memory for the high end of the memory band.
pub const ALLOCATOR_FRAGMENTATION: f64 = 0.15;

/// Model FLOPs of one iteration (forward + backward = 3 × forward, no recompute), counting
/// attention over the full sequence as the published MFU figures do.
pub fn model_flops(m: &ModelSpec, t: &TrainSpec) -> f64 {
    let tokens = t.gbs as f64 * t.seq as f64;
    let h = m.hidden as f64;
    // Forward, then input and weight gradients (twice the forward); a frozen LoRA base
    // computes no weight gradients (the adapters' FLOPs are not model FLOPs).
    let weight_passes = if t.lora_adapters().is_some() {
        2.0
    } else {
        3.0
    };
    // Each kind of block with its count (the model itself when its blocks are alike).
    let counts = m.kind_counts(0, m.layers);
    let kinds = if m.block_runs.is_empty() {
        std::borrow::Cow::Borrowed(std::slice::from_ref(m))
    } else {
        std::borrow::Cow::Owned(m.block_kinds())
    };
    let blocks_flops_per_kind: Vec<f64> = kinds
        .iter()
        .map(|k| {
            // Every projection weight of the attention (MLA's latents included; its few
            // biases and latent norms are noise).
            let attn_weights = k.attention_params() as f64;
            // Score and value products over (query/key + value) widths per head.
            let score_width = match k.mla {
                Some(mla) => (k.heads * (mla.qk_head_dim() + mla.v_head_dim)) as f64 / 2.0,
                None => k.q_width() as f64,
            };
            let mlp_mats = match k.activation {
                plait_spec::Activation::Gelu | plait_spec::Activation::Relu2 => 2.0,
                plait_spec::Activation::SwiGlu => 3.0,
            };
            // Per token: the routed experts at their width (LatentMoE's latent, else the
            // hidden size) with the latent's down and up projections, the shared experts
            // and a dense MLP at the hidden size, and the router.
            let mlp = |width: f64| mlp_mats * width * k.ffn_hidden as f64;
            let mlp_weights = match k.moe {
                _ if !k.block.has_mlp() => 0.0,
                Some(moe) => {
                    let routed_width = moe.expert_width(m.hidden) as f64;
                    moe.top_k as f64 * mlp(routed_width)
                        + moe.shared_experts as f64 * mlp(h)
                        + k.latent_projection_params() as f64
                        + h * moe.experts as f64
                }
                None => mlp(h),
            };
            // A Mamba-2 mixer: its in_proj and out_proj weights, and the SSD scan's products
            // (counted as attention's score products are, forward and twice backward).
            let (mixer_weights, scan) = match (k.block, k.mamba) {
                (plait_spec::BlockKind::Mamba, Some(mamba)) => (
                    (mamba.in_proj_width() * m.hidden + mamba.d_inner() * m.hidden) as f64,
                    tokens * crate::layer::ssd_scan_flops_per_token(&mamba, t.seq as f64),
                ),
                _ => (0.0, 0.0),
            };
            let linears = 2.0 * tokens * (attn_weights + mlp_weights + mixer_weights);
            // Causal or not, the convention counts every score (as Megatron-LM's formula
            // does), over the packed sample or the sliding window where shorter.
            let span = k.attention_span(t.attention_span());
            let attention = if k.block.has_attention() {
                4.0 * tokens * span as f64 * score_width
            } else {
                0.0
            };
            weight_passes * linears + 3.0 * (attention + scan)
        })
        .collect();
    let blocks: f64 = blocks_flops_per_kind
        .iter()
        .zip(counts)
        .map(|(f, n)| f * n as f64)
        .sum();
    let head = 2.0 * tokens * h * m.vocab as f64;
    // Each multi-token-prediction pass: its module's blocks (counted above per block), its
    // 2h → h projection and one more pass through the head.
    let mtp = if m.mtp_layers > 0 {
        let per_block: f64 = m
            .mtp_kinds()
            .unwrap_or_else(|_| vec![m.last_block_kind()])
            .iter()
            .filter_map(|&k| blocks_flops_per_kind.get(k))
            .sum();
        m.mtp_layers as f64 * (per_block + weight_passes * (2.0 * tokens * 2.0 * h * h + head))
    } else {
        0.0
    };
    blocks + weight_passes * head + mtp
}

/// Estimates one configuration under Megatron-LM's even block layout. Errors only for
/// malformed input (degrees that do not divide, a dtype the GPU lacks); a configuration
/// that does not fit is an answer with `fits = false` and a reason.
pub fn estimate(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
) -> Result<Estimate, SpecError> {
    // The uniform map is valid by construction once `c` is.
    let map = StageMap::uniform_checked(m, t, c)?;
    estimate_mapped(m, cluster, t, c, d, &map)
}

/// Estimates one configuration with its blocks laid out by `map`.
pub fn estimate_mapped(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
    map: &StageMap,
) -> Result<Estimate, SpecError> {
    crate::Scenario::new(m, cluster, t, d).estimate(c, map)
}

/// The estimate with its band of a validated configuration and map, its layer costs asked
/// of `costs(recompute, level)` (computed here, or memoised by [`crate::Scenario`]).
pub(crate) fn estimate_banded(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
    map: &StageMap,
    costs: &dyn Fn(Recompute, usize) -> LayerCosts,
) -> Estimate {
    let g = Groups::new(cluster, c);
    let at_level = |level: usize| {
        let policy = costs(policy_recompute(c.recompute), level);
        let full = if map.recompute_blocks.iter().any(|&x| x > 0) {
            costs(Recompute::Full, level)
        } else {
            policy
        };
        let w = Workload::new(c, t).at_level(level);
        assemble(m, cluster, t, c, d, &g, &w, &policy, &full, map)
    };
    let central = at_level(1);
    let (low, high) = (at_level(0), at_level(2));
    central.with_band(low.iteration_time_s, high.iteration_time_s)
}

/// Bytes per parameter of [weights, gradients, optimizer states] under ZeRO stage `zero`
/// over `shards` data-parallel ranks: stage 1 shards the optimizer states, 2 also the
/// gradients, 3 also the weights; the optimizer's share in host memory is not on the GPU.
pub fn zero_state_bytes_per_param(zero: u8, shards: f64, optimizer: OptimizerHome) -> [f64; 3] {
    let split = |bytes: f64, sharded: bool| if sharded { bytes / shards } else { bytes };
    [
        split(WEIGHT_BYTES, zero >= 3),
        split(GRADIENT_BYTES, zero >= 2),
        split(optimizer.gpu_bytes_per_param(), zero >= 1),
    ]
}

/// Bytes of the 16-bit weights ZeRO-3 gathers around a block: the
/// block in use and the next one being prefetched.
pub fn zero3_gather_buffer_bytes(c: &ParallelConfig, block: &LayerCost) -> f64 {
    if c.zero >= 3 {
        2.0 * (block.params + block.expert_params) * WEIGHT_BYTES
    } else {
        0.0
    }
}

/// The recompute policy of the blocks a stage map does not list as fully recomputed:
/// `full` in a configuration means "every block", which the map lists.
pub fn policy_recompute(r: Recompute) -> Recompute {
    match r {
        Recompute::Full => Recompute::None,
        other => other,
    }
}

/// Rank `r`'s blocks as (cost, count) pairs: each chunk's first `chunk_recompute_blocks`
/// under full recompute, the rest under the policy, each block costed by its kind.
pub fn rank_block_layers(
    kinds: &plait_spec::KindRuns,
    policy: &LayerCosts,
    full: &LayerCosts,
    map: &StageMap,
    r: u64,
    p: u64,
) -> Vec<(LayerCost, f64)> {
    // Counted per kind over the chunks first: one small list per rank (the search calls
    // this for every stage of every candidate).
    let chunks = map.chunk_blocks.len() as u64 / p.max(1);
    let slots = policy.slots();
    let (mut recomputed, mut kept) = ([0u64; 2 * MAX_BLOCK_KINDS], [0u64; 2 * MAX_BLOCK_KINDS]);
    let uniform = policy.uniform(kinds);
    if uniform {
        // One kind: where the blocks sit does not matter.
        let n = map.rank_blocks(r, p);
        recomputed[0] = map.recompute_blocks[r as usize].min(n);
        kept[0] = n - recomputed[0];
    }
    for chunk in (0..chunks).filter(|_| !uniform) {
        let j = map.placement.virtual_stage(r, chunk, p) as usize;
        let first = map.chunk_first_block(j);
        let n = map.chunk_blocks[j];
        let x = map.chunk_recompute_blocks(r, chunk, p).min(n);
        for (k, c) in policy.kind_counts(kinds, first, x).iter().enumerate() {
            recomputed[k] += c;
        }
        for (k, c) in policy
            .kind_counts(kinds, first + x, n - x)
            .iter()
            .enumerate()
        {
            kept[k] += c;
        }
    }
    let mut out = Vec::with_capacity(2 * slots + 2);
    for k in 0..slots {
        if recomputed[k] > 0 {
            out.push((full.kinds[k], recomputed[k] as f64));
        }
        if kept[k] > 0 {
            out.push((policy.kinds[k], kept[k] as f64));
        }
    }
    out
}

/// Estimates from precomputed layer costs (the planner caches them): `policy` under
/// [`policy_recompute`] of the configuration, `full` under full recompute, at the central
/// assumptions; its band is the central value (see [`estimate_mapped`] for the band). The
/// caller has validated `c` and `map`.
#[allow(clippy::too_many_arguments)]
pub fn estimate_from_costs(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
    policy: &LayerCosts,
    full: &LayerCosts,
    map: &StageMap,
) -> Estimate {
    let g = Groups::new(cluster, c);
    let w = Workload::new(c, t);
    assemble(m, cluster, t, c, d, &g, &w, policy, full, map)
}

/// The device model for a cluster's GPU in `dtype`, or an error naming `--dtype`.
pub fn device_for(cluster: &ClusterSpec, dtype: Dtype) -> Result<DeviceModel, SpecError> {
    DeviceModel::new(&cluster.gpu, dtype)
        .map(|d| d.hosted_by(cluster.host_cpu))
        .ok_or_else(|| {
            let allowed: Vec<&str> = Dtype::ALL
                .iter()
                .filter(|d| cluster.gpu.peak_flops_per_s(**d).is_some())
                .map(|d| d.keyword())
                .collect();
            SpecError::for_field(
                "dtype",
                format!("{} has no {} tensor cores", cluster.gpu.name, dtype),
                format!("{} on this GPU", allowed.join("|")),
            )
        })
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
    g: &Groups,
    w: &Workload,
    policy: &LayerCosts,
    full: &LayerCosts,
    map: &StageMap,
) -> Estimate {
    let p = c.pp as usize;
    let mb = c.microbatches(t);
    let h = m.hidden as f64;
    let e = w.e;
    let LayerCosts {
        embedding, head, ..
    } = policy;

    // Pipeline p2p per micro-batch: activations forward and gradients backward across each
    // of the rank's chunk boundaries. Without sp, Megatron's scatter/gather sends 1/tp of the
    // tensor per GPU and re-gathers it over NVLink.
    let p2p_one = if p > 1 {
        let full = w.mbs * w.seq_local * h * e;
        let shard = full / c.tp as f64;
        let regather = if w.sp || c.tp == 1 {
            0.0
        } else {
            g.tp.all_gather_s(full)
        };
        g.pp.p2p_s(shard) + regather
    } else {
        0.0
    };
    let p2p_per_mb = 2.0 * c.vp as f64 * p2p_one;

    // Dense parameters are reduced over dp × cp; expert parameters over the replicas of
    // each expert (the expert-dp dimension of the expert layers' rank order, expert-tp,
    // ep, expert-dp: every expert-tp·ep-th rank of the tp × cp × dp block). ZeRO shards
    // each over its shard group, which is all of it without hybrid sharding; with it, the
    // dp / shard copies all-reduce their gradient shards across the replicate groups.
    let dense_dp = (c.dp * c.cp) as f64;
    let (dense_shards, expert_shards) = c.state_shards();
    let (dense_shards, expert_shard_f) = (dense_shards as f64, expert_shards as f64);
    let expert_stride = c.expert_tp() * c.ep;
    let expert_group = Group::place(cluster, expert_shards, expert_stride);
    let expert_replicate = if c.dp_replicas() > 1 {
        Group::place(cluster, c.dp_replicas(), expert_stride * expert_shards)
    } else {
        Group::place_single()
    };
    let engine = &w.engine;
    let grad_reduce_bytes = match t.dtype {
        // 16-bit gradients with fp16 (loss scaling); with bf16 the engine's choice.
        Dtype::Fp16 => 2.0,
        Dtype::Bf16 | Dtype::Fp8 | Dtype::Mxfp8 | Dtype::Nvfp4 => engine.grad_reduce_bf16_bytes,
    };
    // Whether the engine overlaps the ZeRO-0/1/2 reduction with the backward at all.
    let overlap_dp = t.overlap_grad_reduce && (c.zero >= 3 || engine.overlaps_zero12_reduce);
    let sms = d.sms();
    let dp_contention = contention_per_overlap_s(w.level, nccl_channels(g.dp.spans_nodes), sms);
    let regather =
        engine.sharded.regather_in_backward && (c.pp == 1 || engine.sharded.regather_with_pipeline);
    let prep = weights::weight_prep(w, c.zero, d.generation);

    let kinds = m.kind_runs();
    let mut stage_times = Vec::with_capacity(p);
    let mut stages = Vec::with_capacity(p);
    let mut worst_dp_exposed: f64 = 0.0;
    let mut worst_optimizer: f64 = 0.0;
    let mut zero3_per_mb_worst: f64 = 0.0;
    let mut worst_dp_contention: f64 = 0.0;
    let mut stage_layers = Vec::with_capacity(p);
    // The ranks holding the first and the last virtual stage (the embedding, the head): the
    // first and the last rank, or rank 0 twice when the schedule places its chunks in a V.
    let first_rank = map.placement.locate(0, c.pp).0 as usize;
    let last_rank = map.placement.locate(c.pp * c.vp - 1, c.pp).0 as usize;
    // Megatron-Core's combined 1F1B (`ParallelConfig::moe_a2a_overlap`) on stage `k`.
    let a2a_overlap = |k: usize, layers: &[(LayerCost, f64)]| {
        if !c.moe_a2a_overlap {
            return A2aOverlap::default();
        }
        let contention =
            contention_per_overlap_s(w.level, nccl_channels(g.ep.spans_nodes), d.sms());
        moe_a2a_overlap(
            c.schedule,
            (k as u64, p as u64, mb, c.vp),
            layers,
            contention,
        )
    };
    for k in 0..p {
        let n_blocks = map.rank_blocks(k as u64, c.pp);
        let recomputed = map.recompute_blocks[k].min(n_blocks) as f64;
        let first = k == first_rank;
        let last = k == last_rank;
        let mut layers = rank_block_layers(&kinds, policy, full, map, k as u64, c.pp);
        // Blocks' parameters on this rank (the quantised weight copies are per block).
        let stage_block_dense: f64 = layers.iter().map(|(l, n)| l.params * n).sum();
        let stage_block_expert: f64 = layers.iter().map(|(l, n)| l.expert_params * n).sum();
        let stage_block_params = stage_block_dense + stage_block_expert;
        let offload = activation_offload(t, cluster, &layers);
        layers.push((*embedding, if first { 1.0 } else { 0.0 }));
        layers.push((*head, if last { 1.0 } else { 0.0 }));
        if last && m.mtp_layers > 0 {
            layers.push((policy.mtp, m.mtp_layers as f64));
        }
        stage_layers.push(layers);
        let layers = &stage_layers[k];
        let mut fwd = 0.0;
        let mut bwd = 0.0;
        let mut wgrad = 0.0;
        let mut act = 0.0;
        let mut transient: f64 = 0.0;
        let mut params = 0.0;
        let mut expert_params = 0.0;
        let mut trainable = 0.0;
        let mut trainable_expert = 0.0;
        for (lc, n) in layers {
            let n = *n;
            if n == 0.0 {
                continue;
            }
            fwd += lc.forward.total_s() * n;
            bwd += (lc.backward.total_s() + lc.recompute.total_s()) * n;
            wgrad += lc.weight_grad_s * n;
            act += lc.activation_bytes * n;
            transient = transient.max(lc.transient_bytes);
            params += lc.params * n;
            expert_params += lc.expert_params * n;
            trainable += lc.trainable_params * n;
            trainable_expert += lc.trainable_expert_params * n;
        }
        act -= offload.host_bytes;
        fwd += offload.exposed_forward_s;
        bwd += offload.exposed_backward_s;
        // Megatron-Core's combined 1F1B hides the expert all-to-alls of one micro-batch
        // behind another's compute, which the collective slows.
        let a2a = a2a_overlap(k, layers);
        bwd += a2a.contention_s - a2a.hidden_s;
        // A tied output matrix on another stage than the embedding needs its own copy.
        if last && !first && m.tied_embeddings {
            let copy = (padded_vocab(m.vocab, c.tp) / c.tp) as f64 * h;
            params += copy;
            if w.lora.is_none() {
                trainable += copy;
            }
        }
        // Megatron's interleaved schedule with `overlap_p2p_comm` waits for a transfer only
        // where it outlasts the chunk computed meanwhile.
        let p2p_s = if w.engine.overlaps_interleaved_p2p && c.vp > 1 {
            let chunk = fwd.min(bwd) / c.vp as f64;
            2.0 * c.vp as f64 * (p2p_one - chunk).max(0.0)
        } else {
            p2p_per_mb
        };
        let st = StageTime {
            forward_s: fwd,
            backward_s: bwd,
            weight_grad_s: wgrad,
            p2p_s,
        };

        // Bytes of the gathered weights, `blocks` of `params` being block weights: 16-bit,
        // the block weights in the format their preparation gathers (`weights::weight_prep`).
        let gather_bytes = |params: f64, blocks: f64| {
            let blocks = blocks.min(params);
            (params - blocks) * WEIGHT_BYTES + blocks * prep.gather_bytes
        };
        // Weights, gradients and optimizer states under ZeRO.
        // Frozen weights (LoRA) keep only their 16-bit copy: no gradient, no optimizer state.
        let per_group = |params: f64, trainable: f64, d: f64| {
            let [w, g, o] = zero_state_bytes_per_param(c.zero, d, OptimizerHome::of(t));
            (params * w, trainable * g, trainable * o)
        };
        let (wd, gd, od) = per_group(params, trainable, dense_shards);
        let (we, ge, oe) = per_group(expert_params, trainable_expert, expert_shard_f);
        let inflight = inflight_microbatches(c.schedule, k as u64, c.pp, mb, c.vp);
        let zero3_buffer = zero3_gather_buffer_bytes(c, &policy.block);
        // fp8 copies of the block weights beside the 16-bit ones (of the gathered unit only
        // under ZeRO-3).
        let fp8_copy = if w.low_precision() {
            // Copies of fp8's 1 byte per element, in the run's format.
            engine.fp8_weight_copy_bytes
                * w.quantised_copy_bytes()
                * if c.zero >= 3 {
                    2.0 * (policy.block.params + policy.block.expert_params)
                } else {
                    stage_block_params
                }
        } else {
            0.0
        };
        // Pipelined FSDP2 keeps the stage's weights gathered through the step
        // (`ShardedParams::regather_with_pipeline`) and its gradients unsharded in the reduce
        // dtype until the last backward (`ShardedParams::defers_reduce_with_pipeline`).
        let pipelined_zero3 = c.zero >= 3 && c.pp > 1;
        let keeps_stage_gathered = pipelined_zero3 && !engine.sharded.regather_with_pipeline;
        let defers_reduce = pipelined_zero3 && engine.sharded.defers_reduce_with_pipeline;
        let resident_weights = if keeps_stage_gathered {
            gather_bytes(params, stage_block_dense)
                + gather_bytes(expert_params, stage_block_expert)
        } else {
            0.0
        };
        let resident_grads = if defers_reduce {
            (trainable + trainable_expert) * grad_reduce_bytes
        } else {
            0.0
        };
        let memory = MemoryBreakdown {
            weights_bytes: wd + we + fp8_copy + resident_weights,
            gradients_bytes: gd + ge + resident_grads,
            optimizer_bytes: od + oe,
            activations_bytes: act * inflight,
            inflight_microbatches: inflight,
            transient_bytes: transient + zero3_buffer,
            reserve_bytes: cluster.memory_reserve_bytes,
        };

        // Data-parallel traffic of this stage's parameters.
        let dp_bytes_reduce = |params: f64| params * grad_reduce_bytes;
        let dense_gather = gather_bytes(trainable, stage_block_dense);
        let expert_gather = gather_bytes(trainable_expert, stage_block_expert);
        // ZeRO-0 all-reduces over the whole group; ZeRO-1/2 reduce-scatter over the shard
        // group, all-reduce the shard across the hybrid copies (none without hybrid
        // sharding) and gather the updated weights back over the shard group.
        let reduce = |grp: &Group, copies: &Group, params: f64, gathered: f64| match c.zero {
            0 => grp.all_reduce_s(dp_bytes_reduce(params)),
            _ => {
                grp.reduce_scatter_s(dp_bytes_reduce(params))
                    + copies.all_reduce_s(dp_bytes_reduce(params) / grp.size.max(1) as f64)
                    + grp.all_gather_s(gathered)
            }
        };
        let dp_total = if c.zero >= 3 {
            0.0
        } else {
            reduce(&g.dp_shard, &g.dp_replicate, trainable, dense_gather)
                + reduce(
                    &expert_group,
                    &expert_replicate,
                    trainable_expert,
                    expert_gather,
                )
        };
        // The ZeRO-1/2 parameter all-gather within `dp_total` (after the optimizer step).
        let param_gather = if (1..3).contains(&c.zero) {
            g.dp_shard.all_gather_s(dense_gather) + expert_group.all_gather_s(expert_gather)
        } else {
            0.0
        };
        let exposed = if overlap_dp {
            // Buckets reduce while the last micro-batch's backward runs (Megatron's
            // `overlap_grad_reduce`: a bucket's collective starts once its gradients are
            // ready); the last bucket cannot hide. The parameter all-gather of ZeRO-1/2
            // overlaps the first forward of the next step (`overlap_param_gather`: each
            // bucket is gathered in the forward pre-hook of the module before it), so
            // each has its own window: the reduction the backward, the gather the forward.
            let reduce = dp_total - param_gather;
            let last_bucket = reduce
                * (grad_bucket_params(dense_dp) / (trainable + trainable_expert).max(1.0)).min(1.0);
            (reduce - bwd).max(last_bucket) + (param_gather - fwd).max(0.0)
        } else {
            dp_total
        };
        let mut dp_contention_s = (dp_total - exposed).max(0.0) * dp_contention;
        // Later stages finish their pipeline work earlier (1F1B drains from the last stage
        // back to the first), which hides their reduction behind the others' backward.
        let slack = if c.schedule.stages_finish_in_turn() {
            k as f64 * bwd
        } else {
            0.0
        };
        worst_dp_exposed = worst_dp_exposed.max(exposed - slack);
        let mut zero3_exposed = 0.0;
        if c.zero >= 3 {
            // Per micro-batch, unit by unit (a unit is a block, or one of its linears for
            // DeepSpeed): gather the weights for the forward, again for the backward, and
            // reduce-scatter the gradients. A prefetch hides a unit's traffic only behind
            // the compute it runs beside (the previous unit's), and only as far as the
            // engine prefetches; the first gather of each pass waits, and the last
            // reduce-scatter of the iteration has nothing left to hide behind.
            let block = &policy.block;
            let per_block = engine.sharded.collectives_per_block;
            let units = n_blocks as f64 * per_block;
            let unit_dense = block.params / per_block;
            let unit_expert = block.expert_params / per_block;
            let gather_u = g
                .dp_shard
                .all_gather_s(gather_bytes(unit_dense, unit_dense))
                + expert_group.all_gather_s(gather_bytes(unit_expert, unit_expert));
            // Each unit's gradients reduce-scatter over the shard group, and with hybrid
            // sharding its shard all-reduces across the copies (FSDP2's HSDP all-reduce
            // after each reduce-scatter, `_fsdp_collectives.py` `foreach_reduce`).
            let (dense_grad, expert_grad) = (
                block.trainable_params / per_block * grad_reduce_bytes,
                block.trainable_expert_params / per_block * grad_reduce_bytes,
            );
            let scatter_u = g.dp_shard.reduce_scatter_s(dense_grad)
                + g.dp_replicate.all_reduce_s(dense_grad / dense_shards)
                + expert_group.reduce_scatter_s(expert_grad)
                + expert_replicate.all_reduce_s(expert_grad / expert_shard_f);
            let hidden_share = engine
                .sharded
                .prefetch_params
                .map_or(1.0, |p| (p / (unit_dense + unit_expert).max(1.0)).min(1.0));
            let (fwd_u, bwd_u) = if units > 0.0 {
                (fwd / units, bwd / units)
            } else {
                (0.0, 0.0)
            };
            // One unit's pass: `comm` of which `hideable` was issued ahead (prefetched
            // gathers, asynchronous reduce-scatters) and runs beside the unit's `compute`.
            let pass = |comm: f64, hideable: f64, compute: f64| {
                let exposed = comm - hideable + (hideable - compute).max(0.0);
                (exposed, comm - exposed)
            };
            // Pipelined FSDP2 gathers in the first micro-batch's forward only and
            // reduce-scatters after the last backward, all units at once.
            let once = if keeps_stage_gathered { mb as f64 } else { 1.0 };
            let scatter_mb = if defers_reduce { 0.0 } else { scatter_u };
            let (fe, fh) = pass(gather_u, gather_u * hidden_share, fwd_u);
            // Blocks recomputed in full gather once more inside the backward, where the
            // engine releases weights after the recomputed forward.
            let recompute_share = if engine.sharded.regather_for_recompute && n_blocks > 0 {
                recomputed / n_blocks as f64
            } else {
                0.0
            };
            let bgather = if regather { gather_u } else { 0.0 } + recompute_share * gather_u;
            let (be, bh) = pass(
                bgather + scatter_mb,
                bgather * hidden_share + scatter_mb,
                bwd_u,
            );
            let first = gather_u + bgather;
            let n = units.max(1.0);
            // Per micro-batch, as the breakdown counts it.
            let deferred_scatter = if defers_reduce {
                n * scatter_u / mb as f64
            } else {
                0.0
            };
            let exposed = (first + (n - 1.0) * (fe + be)) / once + deferred_scatter;
            let hidden = (n - 1.0) * (fh + bh) / once;
            let contention =
                hidden * contention_per_overlap_s(w.level, nccl_channels(g.dp.spans_nodes), sms);
            // Host work that scales with the group and that the engine does not hide
            // (`ShardedParams::host_ops_per_rank`): each gather and reduce-scatter issues
            // eager ops per rank while the device waits.
            let gathers = units * (1.0 + bgather / gather_u.max(f64::MIN_POSITIVE)) / once;
            let host_s = if engine.sharded.host_ops_per_rank > 0.0 {
                let scatters = if engine.sharded.reduce_per_tensor {
                    n_blocks as f64 * m.block_param_tensors() as f64
                } else {
                    units
                };
                (gathers + scatters)
                    * (dense_shards * engine.sharded.host_ops_per_rank)
                    * d.kernel_issue_s
            } else {
                0.0
            };
            // FSDP2 copies each gathered unit out on the compute stream
            // (`ShardedParams::copies_out_gathers`): it reads and writes the gathered bytes.
            let copy_out_s = if engine.sharded.copies_out_gathers {
                let unit =
                    gather_bytes(unit_dense, unit_dense) + gather_bytes(unit_expert, unit_expert);
                gathers * d.memory_s(2.0 * unit)
            } else {
                0.0
            };
            zero3_exposed = exposed + contention + host_s + copy_out_s;
            dp_contention_s += scatter_u;
            zero3_per_mb_worst = zero3_per_mb_worst.max(zero3_exposed);
        }
        worst_dp_contention = worst_dp_contention.max(dp_contention_s);
        let opt_params = trainable / if c.zero >= 1 { dense_shards } else { 1.0 }
            + trainable_expert / if c.zero >= 1 { expert_shard_f } else { 1.0 };
        let fp8_block_params = if w.low_precision() {
            stage_block_params
        } else {
            0.0
        };
        let adam_s = d.memory_s(
            opt_params
                * (OPTIMIZER_STEP_OTHER_BYTES_PER_PARAM
                    + 2.0 * t.optimizer_state.bytes_per_param()),
        );
        // Offloaded, part of the step runs on the host (its copies, the CPU's Adam).
        let host_optimizer =
            optimizer_offload(&OptimizerHome::of(t), cluster, opt_params, adam_s, bwd, mb);
        // The block weights readied once per step for the GEMMs (`weights::weight_prep`).
        let optimizer_s = host_optimizer.step_s + d.memory_s(fp8_block_params * prep.step_bytes);
        worst_optimizer = worst_optimizer.max(optimizer_s);

        stage_times.push(st);
        stages.push(StageEstimate {
            blocks: n_blocks,
            recomputed_blocks: recomputed as u64,
            forward_s: fwd,
            backward_s: bwd,
            p2p_s,
            params: params + expert_params,
            dp_reduce_s: dp_total,
            dp_param_gather_s: param_gather,
            zero3_exposed_per_mb_s: zero3_exposed,
            moe_a2a_overlap_s: a2a.contention_s - a2a.hidden_s,
            dp_contention_s,
            optimizer_s,
            offload_host_bytes: offload.host_bytes,
            optimizer_host_bytes: host_optimizer.host_bytes,
            offload_exposed_forward_s: offload.exposed_forward_s,
            offload_exposed_backward_s: offload.exposed_backward_s,
            peak_memory_bytes: memory.total_bytes(),
            memory,
        });
    }

    let (pipe_s, bubble_s) = pipeline_time(c.schedule, &stage_times, mb, c.vp);
    let slowest = (0..p)
        .max_by(|&a, &b| {
            stage_times[a]
                .total_s()
                .total_cmp(&stage_times[b].total_s())
        })
        .unwrap_or(0);
    let mbf = mb as f64;
    let sum = |f: &dyn Fn(&LayerCost) -> f64| {
        mbf * stage_layers[slowest]
            .iter()
            .map(|(l, n)| n * f(l))
            .sum::<f64>()
    };
    let a2a = a2a_overlap(slowest, &stage_layers[slowest]);
    let mut breakdown = Breakdown {
        compute_s: sum(&|l| l.forward.compute_s + l.backward.compute_s) + mbf * a2a.contention_s,
        recompute_s: sum(&|l| l.recompute.compute_s),
        launch_wait_s: sum(&|l| {
            l.forward.launch_wait_s + l.backward.launch_wait_s + l.recompute.launch_wait_s
        }),
        tp_comm_s: sum(&|l| l.forward.tp_comm_s + l.backward.tp_comm_s + l.recompute.tp_comm_s),
        cp_comm_s: sum(&|l| l.forward.cp_comm_s + l.backward.cp_comm_s + l.recompute.cp_comm_s),
        ep_comm_s: sum(&|l| l.forward.ep_comm_s + l.backward.ep_comm_s + l.recompute.ep_comm_s)
            - mbf * a2a.hidden_s,
        pp_comm_s: mbf * stage_times[slowest].p2p_s,
        pipeline_bubble_s: bubble_s,
        dp_comm_exposed_s: worst_dp_exposed.max(0.0)
            + mbf * zero3_per_mb_worst
            + worst_dp_contention,
        optimizer_s: worst_optimizer,
        offload_copies_s: stages.get(slowest).map_or(0.0, |s| {
            mbf * (s.offload_exposed_forward_s + s.offload_exposed_backward_s)
        }),
    };
    // Guard against rounding: the components must add up to the pipeline time (never
    // leaving a negative bubble behind).
    breakdown.pipeline_bubble_s += pipe_s
        - (breakdown.offload_copies_s
            + breakdown.compute_s
            + breakdown.recompute_s
            + breakdown.tp_comm_s
            + breakdown.cp_comm_s
            + breakdown.ep_comm_s
            + breakdown.pp_comm_s
            + breakdown.pipeline_bubble_s);
    breakdown.pipeline_bubble_s = breakdown.pipeline_bubble_s.max(0.0);
    let iteration_time_s = breakdown.total_s();

    let worst_stage = (0..p)
        .max_by(|&a, &b| {
            stages[a]
                .peak_memory_bytes
                .total_cmp(&stages[b].peak_memory_bytes)
        })
        .unwrap_or(0);
    let memory = stages[worst_stage].memory;
    let peak = memory.total_bytes();
    let capacity = cluster.gpu.memory_bytes;
    let host_memory_bytes = stages
        .iter()
        .map(StageEstimate::host_bytes)
        .fold(0.0, f64::max);
    let host_memory_capacity_bytes = cluster.host_memory_per_gpu().map(|(bytes, _)| bytes);
    let fits =
        peak <= capacity && host_memory_capacity_bytes.is_none_or(|cap| host_memory_bytes <= cap);
    let flops = model_flops(m, t);
    let gpus = c.gpus() as f64;
    Estimate {
        config: *c,
        engine: t.engine,
        microbatches: mb,
        iteration_time_s,
        iteration_time_low_s: iteration_time_s,
        iteration_time_high_s: iteration_time_s,
        tokens_per_s: t.gbs as f64 * t.seq as f64 / iteration_time_s,
        tflops_per_gpu: flops / iteration_time_s / gpus / 1e12,
        mfu: flops / iteration_time_s / gpus / d.peak_flops_per_s,
        model_flops_per_iteration: flops,
        peak_memory_bytes: peak,
        peak_memory_high_bytes: peak
            + ALLOCATOR_FRAGMENTATION * (memory.activations_bytes + memory.transient_bytes),
        memory_capacity_bytes: capacity,
        host_memory_bytes,
        host_memory_capacity_bytes,
        fits,
        worst_stage,
        breakdown,
        memory,
        stages,
    }
}

/// Per-layer figures of pipeline rank 0 (all its chunks), per micro-batch and per GPU.
pub fn first_stage_layers(
    m: &ModelSpec,
    cluster: &ClusterSpec,
    t: &TrainSpec,
    c: &ParallelConfig,
    d: &DeviceModel,
) -> Vec<LayerReport> {
    let g = Groups::new(cluster, c);
    let w = Workload::new(c, t);
    let costs = layer_costs(m, d, &g, &w);
    let report = |name: String, l: &LayerCost| LayerReport {
        name,
        forward_compute_s: l.forward.compute_s,
        backward_compute_s: l.backward.compute_s,
        recompute_s: l.recompute.compute_s,
        activation_bytes: l.activation_bytes,
    };
    let mut out = vec![report("embedding".into(), &costs.embedding)];
    // Rank 0 holds global chunks 0, pp, 2·pp, …; list their blocks in execution order,
    // each with its kind's cost.
    let kinds = m.kind_runs();
    for j in 0..c.vp {
        for b in even_chunk_blocks(m.layers, c.pp * c.vp, c.schedule.virtual_stage(0, j, c.pp)) {
            let counts = costs.kind_counts(&kinds, b, 1);
            let kind = counts.iter().position(|&n| n > 0).unwrap_or(0);
            out.push(report(format!("block.{b}"), &costs.kinds[kind]));
        }
    }
    if c.pp == 1 {
        out.push(report("head".into(), &costs.head));
        for i in 0..m.mtp_layers.min(64) {
            out.push(report(format!("mtp.{i}"), &costs.mtp));
        }
    }
    out
}
