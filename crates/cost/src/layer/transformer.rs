//! A transformer block (attention and MLP, each behind its pre-norm; or one half alone, as
//! Nemotron-H's `*` and `-` layers) for one micro-batch on one GPU: its GEMMs and
//! elementwise kernels, the attention core, tensor-, context- and expert-parallel
//! collectives with what the engine overlaps them with, and the tensors it saves.

use plait_spec::{Activation, AttentionImpl, Gemm, ModelSpec, Positions, Recompute, Shard};

use super::attention::{attention_core, AttentionCore};
use super::context_parallel::{self, CpShape};
use super::quantise::{
    AMAX_BYTES, ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT,
    ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT_LOW,
};
use super::selective::{megatron_modules, ModuleKernels, Selected};
use super::{
    backward_gemms, column_parallel_backward_comm, column_parts, elementwise, expert_gemm_s,
    userbuffer_overlap, userbuffers, weight_grad_gemm_s, Kernels, LayerCost, Phase, Workload, FP32,
    USERBUFFER_PIPELINE_SMS, USERBUFFER_PIPELINE_SPLITS, USERBUFFER_RING_EXCHANGE_SMS,
};
use crate::comm::Groups;
use crate::device::DeviceModel;
use crate::engine::SelectiveRecompute;

/// A transformer block, or its attention or MLP half alone: kernel by kernel, collective
/// by collective, saved tensor by saved tensor.
pub(super) fn transformer_block_cost(
    m: &ModelSpec,
    d: &DeviceModel,
    g: &Groups,
    w: &Workload,
) -> LayerCost {
    let (has_attn, has_mlp) = (m.block.has_attention(), m.block.has_mlp());
    let e = w.e;
    let t = w.tp as f64;
    let h = m.hidden as f64;
    // Width at which tokens reach the routed experts: LatentMoE's, else the hidden size.
    let expert_width = m.moe.map_or(h, |moe| moe.expert_width(m.hidden) as f64);
    let tokens = w.tokens();
    let rep = w.replicated(h);
    let full_hidden_bytes = tokens * h * e;
    // torchtitan's float8 tensorwise linears cast where the tensors are sequence-sharded
    // and gather the fp8 copies over tp (v0.2.2 `models/llama3/infra/parallelize.py`:
    // "float8 all-gather with TP"): the inputs of the column-parallel linears
    // (torchao eab345c `float8_tensor_parallel.py`, `Float8ColwiseParallel` and
    // `PrepareFloat8ModuleInput._prepare_input_arg`: cast, then `redistribute`) and, in
    // the backward, the output gradients of the row-parallel ones
    // (`Float8RowwiseParallel._prepare_output_fn`: `NoopFwToFloat8BwDynamic` after the
    // reduce-scatter, so its backward all-gather moves fp8). Only the tensor-wise recipe:
    // the row-wise ones run plain tp with 16-bit gathers (torchtitan b0902b2
    // `models/llama3/infra/parallelize.py:73-76`, `enable_float8_tensorwise_tp`).
    let fp8_tp = w.engine.fp8_tp_all_gather
        && w.torchao_float8() == Some(plait_spec::Float8Recipe::Tensorwise)
        && w.tp > 1
        && w.sp;
    let forward_gather_bytes = if fp8_tp {
        tokens * h * w.quantised_copy_bytes()
    } else {
        full_hidden_bytes
    };
    let mut gemms = m.block_gemms(
        tokens as u64,
        Shard {
            tp: w.tp,
            ep: w.ep,
            etp: w.etp,
        },
    );
    let skew = if m.moe.is_some() { w.skew() } else { 1.0 };
    // The busiest expert rank's share of the routed tokens sets everyone's pace.
    for g in gemms.mlp.iter_mut() {
        g.m = (g.m as f64 * skew).ceil() as u64;
    }
    // Per-GPU widths of the query, of one of key/value (their mean under MLA, whose keys
    // are as wide as the queries and values narrower) and of the attention output.
    let (q_local, kv_local, out_local) = match m.mla {
        Some(mla) => {
            let heads = (m.heads / w.tp) as f64;
            let (qk, v) = (mla.qk_head_dim() as f64, mla.v_head_dim as f64);
            (heads * qk, heads * (qk + v) / 2.0, heads * v)
        }
        None => {
            let q = (m.q_width() / w.tp) as f64;
            (q, (m.attention_shape(w.tp).1 * m.head_dim) as f64, q)
        }
    };
    // The rotary part of q and k (all of it without MLA; MLA ropes only its
    // `qk_rope_head_dim` per query head and the one shared key).
    let rope_width = match m.mla {
        Some(mla) => ((m.heads / w.tp + 1) * mla.qk_rope_head_dim) as f64,
        None => q_local + kv_local,
    };
    // The MLP's width on this GPU: the experts split by expert tp, a dense MLP by tp; and
    // the share of the tp group's tokens the experts here see (expert tp / tp: an expert
    // tp below tp gathers the routed tokens over fewer ranks).
    let (f_local, expert_token_share) = if m.moe.is_some() {
        ((m.ffn_hidden / w.etp) as f64, w.etp as f64 / w.tp as f64)
    } else {
        ((m.ffn_hidden / w.tp) as f64, 1.0)
    };
    // Grouped-query keys and values the engine copies out to every query head before the
    // attention kernel (`EngineProfile::repeats_kv_heads`); MLA has no shared heads.
    let repeated_kv =
        has_attn && w.engine.repeats_kv_heads && m.mla.is_none() && kv_local < q_local;
    let dropout_mask = if w.dropout { rep } else { 0.0 };
    let (topk, experts_local) = match m.moe {
        Some(moe) => (moe.top_k as f64, (moe.experts / w.ep) as f64),
        None => (1.0, 1.0),
    };

    let mut fwd = Kernels::default();
    let mut bwd = Kernels::default();
    let mut fwd_phase = Phase::default();
    let mut bwd_phase = Phase::default();

    // --- attention half ---
    let [qkv, attn_out] = gemms.attn;
    // Relative output widths of the separate linears that the qkv and fc1 GEMMs are, where
    // the engine runs them apart (`EngineProfile::separate_projections`): q, k, v; gate, up.
    let separate = w.engine.separate_projections;
    let (q_k_v, gate_up) = ([q_local, kv_local, kv_local], [1.0, 1.0]);
    let qkv_widths: &[f64] = if separate && m.mla.is_none() {
        &q_k_v
    } else {
        &[1.0]
    };
    let up_widths: &[f64] = if separate && m.moe.is_none() && m.activation == Activation::SwiGlu {
        &gate_up
    } else {
        &[1.0]
    };
    let core = if has_attn {
        attention_core(m, d, w)
    } else {
        AttentionCore {
            forward: Kernels::default(),
            backward: Kernels::default(),
            internal_bytes: 0.0,
        }
    };
    // MLA: the replicated down projection, the RMSNorms of its latents, the kv up projection.
    let mut latent_bytes = 0.0;
    // Kernels of the parts Megatron-Core's selective modules rerun (`recompute_modules`).
    let mut parts = ModuleKernels::default();
    if has_attn {
        let before = fwd;
        elementwise(&mut fwd, &mut bwd, d, w.engine.norm, rep); // norm 1
        parts.norm1 = fwd.since(before);
        if let Some([down, kv_up]) = gemms.attn_pre {
            fwd.gemm(d, &down);
            latent_bytes = (down.m * down.n) as f64 * e;
            fwd.stream(d, 2.0 * latent_bytes);
            bwd.stream(d, 3.0 * latent_bytes);
            let before = fwd;
            fwd.gemm(d, &kv_up);
            parts.mla_up = fwd.since(before);
        }
        let before = fwd;
        for part in column_parts(&qkv, qkv_widths) {
            fwd.gemm(d, &part);
        }
        if m.positions == Positions::Rotary {
            elementwise(&mut fwd, &mut bwd, d, w.engine.rope, rope_width * tokens);
        }
        parts.mla_up = parts.mla_up.add(fwd.since(before));
        if repeated_kv {
            // k and v copied out to every query head (read the shared heads, write the
            // full width); the backward sums the copies' gradients back.
            let copy = 2.0 * (kv_local + q_local) * tokens * e;
            fwd.fixed(d.memory_s(copy), 2.0);
            bwd.fixed(d.memory_s(copy), 2.0);
        }
        fwd.gpu_s += core.forward.gpu_s;
        fwd.count += core.forward.count;
        bwd.gpu_s += core.backward.gpu_s;
        bwd.count += core.backward.count;
        fwd.gemm(d, &attn_out);
        fwd.stream(d, 3.0 * rep * e + dropout_mask); // bias-dropout-add
        bwd.stream(d, 3.0 * rep * e + dropout_mask);
    }

    // --- MLP half ---
    let [up, down] = gemms.mlp;
    let routed_tokens = if has_mlp {
        tokens * topk * skew * expert_token_share
    } else {
        0.0
    };
    let grouped = w.engine.grouped_expert_gemm;
    let mut shared_f = 0.0;
    let before_mlp = fwd;
    if has_mlp {
        let before = fwd;
        elementwise(&mut fwd, &mut bwd, d, w.engine.norm, rep); // norm 2
        parts.norm2 = fwd.since(before);
        if let Some(router) = gemms.router {
            fwd.gemm(d, &router);
            // LatentMoE projects the tokens to the experts' width before the dispatch and
            // back after the combine (their backward: the extra linears' below).
            for g in gemms.latent.iter().flatten() {
                fwd.gemm(d, g);
            }
            // Permute tokens to experts and back: read + write of routed hidden states, twice.
            let permute = 2.0 * 2.0 * routed_tokens * expert_width * e;
            fwd.stream(d, permute);
            bwd.stream(d, permute);
            let (rd, rw) = backward_gemms(&router);
            bwd.gemm(d, &rd);
            bwd.gemm(d, &rw);
        }
        for part in column_parts(&up, up_widths) {
            fwd.expert_gemm(d, &part, grouped);
        }
        let (act_fwd, act_bwd) = match (m.activation, w.engine.fused_elementwise) {
            (Activation::Gelu, _) => (2.0, 3.0),
            // Fused: read gate and up, write the product; backward reads the gradient and both
            // inputs, writes two gradients.
            (Activation::SwiGlu, true) => (3.0, 5.0),
            // Eager: silu (read, write) then mul (read two, write); backward of mul (read three,
            // write two) and of silu (read two, write one).
            (Activation::SwiGlu, false) => (5.0, 8.0),
            // Squared ReLU, unfused in Megatron-LM (`squared_relu`: relu then pow, each a read
            // and a write); backward: pow's (read gradient and input, write) and relu's.
            (Activation::Relu2, _) => (4.0, 6.0),
        };
        let before = fwd;
        fwd.stream(d, act_fwd * routed_tokens * f_local * e);
        parts.act = fwd.since(before);
        bwd.stream(d, act_bwd * routed_tokens * f_local * e);
        fwd.expert_gemm(d, &down, grouped);
        // Shared experts: a dense MLP over every token, its output added to the routed ones'.
        if let Some([s_up, s_down]) = gemms.shared {
            let before = fwd;
            shared_f = s_down.k as f64;
            fwd.gemm(d, &s_up);
            fwd.stream(d, act_fwd * tokens * shared_f * e);
            bwd.stream(d, act_bwd * tokens * shared_f * e);
            fwd.gemm(d, &s_down);
            fwd.stream(d, 3.0 * rep * e);
            parts.shared = fwd.since(before);
        }
        fwd.stream(d, 3.0 * rep * e + dropout_mask);
        bwd.stream(d, 3.0 * rep * e + dropout_mask);
        // The MLP (or MoE) module after its norm: router to residual add.
        parts.mlp = fwd.since(before_mlp).since(parts.norm2);
    }
    // The linears beyond the four of a standard block (MLA's down and kv-up projections,
    // the shared experts), for casts and gradients below.
    let extra_linears: Vec<Gemm> = gemms
        .attn_pre
        .iter()
        .filter(|_| has_attn)
        .flatten()
        .chain(gemms.shared.iter().filter(|_| has_mlp).flatten())
        .chain(gemms.latent.iter().filter(|_| has_mlp).flatten())
        .copied()
        .collect();
    // The block's own linears with their place (0 qkv, 1 attention output, 2 fc1, 3 fc2):
    // those of the halves it holds.
    let linears: Vec<(usize, Gemm)> = [qkv, attn_out, up, down]
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| if i < 2 { has_attn } else { has_mlp })
        .collect();
    // The relative widths of the separate linears each of those runs as.
    let widths_of = |i: usize| -> &[f64] {
        match i {
            0 => qkv_widths,
            2 => up_widths,
            _ => &[1.0],
        }
    };

    if w.low_precision() {
        // Quantisation of the fp8 GEMM operands, per micro-batch: the inputs of the four
        // block linears (qkv's and fc1's come from the norms, which may run their cast) and
        // the output gradients in the backward; weights are cast once per step (optimizer).
        let cast = w.cast_bytes_per_element(d.generation);
        let norm_fed_cast = w.norm_fed_cast_bytes_per_element(d.generation);
        // Under float8 tp the column-parallel inputs and the row-parallel output gradients
        // are cast on this rank's sequence shard, before their gather (`fp8_tp`).
        let sharded = |i: usize, column_input: bool| {
            let dense = i < 2 || m.moe.is_none();
            if fp8_tp && dense && i.is_multiple_of(2) == column_input {
                1.0 / t
            } else {
                1.0
            }
        };
        let input_bytes = linears
            .iter()
            .map(|&(i, g)| {
                let per_element = if i % 2 == 0 { norm_fed_cast } else { cast };
                per_element * (g.m * g.k * g.count) as f64 * sharded(i, true)
            })
            .chain(
                extra_linears
                    .iter()
                    .map(|g| cast * (g.m * g.k * g.count) as f64),
            )
            .sum::<f64>();
        let output_grads = linears
            .iter()
            .map(|&(i, g)| (g.m * g.n * g.count) as f64 * sharded(i, false))
            .chain(extra_linears.iter().map(|g| (g.m * g.n * g.count) as f64))
            .sum::<f64>();
        fwd.stream(d, input_bytes);
        let quantised = (linears.len() + extra_linears.len()) as f64;
        fwd.count += w.cast_kernels(true, quantised);
        bwd.stream(d, cast * output_grads);
        bwd.count += w.cast_kernels(false, quantised);
        if m.moe.is_some() && has_mlp {
            let splits = w.expert_split_cast_kernels(experts_local, d.generation);
            fwd.count += splits;
            bwd.count += splits;
        }
        // torchao's row-wise recipe scales every GEMM operand along the axis its GEMM
        // keeps, so the backward quantises each linear module's input, weight and output
        // gradient once more, column-wise, for the input- and weight-gradient GEMMs, where
        // the tensor-wise recipe transposes its one-scale copies: measured at
        // [`ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT`] per element of the three over what
        // the tensor-wise recipe costs. Each of the engine's modules quantises its own, so
        // the separate q, k and v projections (gate and up) count their shared input once
        // each.
        if w.torchao_float8() == Some(plait_spec::Float8Recipe::Rowwise) {
            let modules = |i: usize| widths_of(i).len() as u64;
            let operands = |g: &Gemm, modules: u64| {
                ((g.m * (g.k * modules + g.n) + g.k * g.n) * g.count) as f64
            };
            let elements = linears
                .iter()
                .map(|&(i, g)| operands(&g, modules(i)))
                .chain(extra_linears.iter().map(|g| operands(g, 1)))
                .sum::<f64>();
            let per_element = match w.level {
                0 => ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT_LOW,
                _ => ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT,
            };
            bwd.gpu_s += per_element * elements;
        }
    }

    // Backward GEMMs, with Megatron's overlap of each column-parallel input-gradient
    // collective behind the weight-gradient GEMM.
    let mut column_parallel_exposed = 0.0;
    let mut column_parallel_hidden = 0.0;
    let mut weight_grad_s = 0.0;
    // Parameters whose gradient a weight-gradient GEMM accumulated in its epilogue.
    let mut fused_accumulated = 0.0;
    // LoRA (Hu et al. 2021): frozen linears compute only their input gradient; each
    // adapted linear adds x·A (k → r) and (x·A)·B (r → n) in 16-bit, their input and
    // weight gradients, and the add of the adapter's output into the linear's.
    let mut adapter_params = 0.0;
    // Megatron's MoE blocks with tp > 1 (sequence parallelism is then required) gather the
    // expert inputs over tp in the token dispatcher rather than before fc1.
    let moe_dispatch_over_tp = m.moe.is_some() && w.sp && w.tp > 1;
    // Halves whose sequence-parallel input is gathered over tp and output reduce-scattered
    // (not the MLP of a MoE block whose dispatcher moves its tokens).
    let tp_pairs =
        f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp && !moe_dispatch_over_tp));
    for &(i, ref gm) in &linears {
        let widths = widths_of(i);
        let (mut dg_s, mut wg_s) = (0.0, 0.0);
        for part in column_parts(gm, widths) {
            let (dg, wg) = backward_gemms(&part);
            dg_s += expert_gemm_s(d, &dg, grouped);
            if w.lora.is_none() {
                let (s, fused) = weight_grad_gemm_s(d, w, &wg, grouped);
                fused_accumulated += fused;
                wg_s += s;
            }
            bwd.count += if w.lora.is_some() { 1.0 } else { 2.0 } * dg.count as f64;
        }
        // Separate linears over one input: autograd sums their input gradients, eagerly one
        // add (read two, write one) per further linear, compiled (inductor fuses the adds
        // of one graph) one kernel reading every gradient and writing the sum.
        let parts = widths.len() as f64;
        if parts > 1.0 {
            let passes = if w.engine.fused_elementwise {
                parts + 1.0
            } else {
                3.0 * (parts - 1.0)
            };
            bwd.stream(d, passes * (gm.m * gm.k * gm.count) as f64 * e);
        }
        bwd.gpu_s += dg_s + wg_s;
        weight_grad_s += wg_s;
        if let Some(lora) = w.lora.filter(|l| l.adapts(i)) {
            let r = lora.rank;
            let a = Gemm {
                name: "lora_a",
                m: gm.m,
                n: r,
                k: gm.k,
                count: gm.count,
            };
            let b = Gemm {
                name: "lora_b",
                m: gm.m,
                n: gm.n,
                k: r,
                count: gm.count,
            };
            for ad in [&a, &b] {
                fwd.fixed(d.gemm16_s(ad.m, ad.n, ad.k, ad.count), ad.count as f64);
                let (add, awg) = backward_gemms(ad);
                let s = d.gemm16_s(add.m, add.n, add.k, add.count)
                    + d.gemm16_s(awg.m, awg.n, awg.k, awg.count);
                bwd.fixed(s, 2.0 * ad.count as f64);
                weight_grad_s += d.gemm16_s(awg.m, awg.n, awg.k, awg.count);
                adapter_params += (ad.k * ad.n * ad.count) as f64;
            }
            // Adapter output added into the linear's (read two, write one); its gradient
            // reaches both branches without a kernel of its own.
            fwd.stream(d, 3.0 * (gm.m * gm.n * gm.count) as f64 * e);
        }
        let column_parallel = i % 2 == 0;
        // A MoE block's expert MLP moves its tokens over tp in the dispatcher instead
        // (counted with the expert traffic below).
        let dispatched = i >= 2 && moe_dispatch_over_tp;
        if column_parallel && w.tp > 1 && !dispatched {
            let (exposed, hidden) =
                column_parallel_backward_comm(g, w, full_hidden_bytes, dg_s, wg_s);
            column_parallel_exposed += exposed;
            column_parallel_hidden += hidden;
        }
    }
    // The extra linears' input and weight gradients (frozen under LoRA: input only).
    for gm in &extra_linears {
        let (dg, wg) = backward_gemms(gm);
        bwd.gemm(d, &dg);
        if w.lora.is_none() {
            let (wg_s, fused) = weight_grad_gemm_s(d, w, &wg, true);
            fused_accumulated += fused;
            bwd.fixed(wg_s, 1.0);
            weight_grad_s += wg_s;
        }
    }
    // Attention and dense MLP weights split over tp; norms (and the MoE router and LatentMoE's
    // projections) replicated.
    let router = m.moe.map_or(0, |moe| m.hidden * moe.experts) as f64;
    let norms = (m.block_params() - m.attention_params() - m.mlp_params()) as f64;
    let params = (m.attention_params() + m.mlp_params() - m.expert_params()) as f64 / t
        + norms
        + (router + m.latent_projection_params() as f64) * (1.0 - 1.0 / t);
    let expert_params = m.expert_params() as f64 / (w.etp * w.ep) as f64;
    let (trainable_params, trainable_expert_params) = if w.lora.is_some() {
        (adapter_params, 0.0)
    } else {
        (params, expert_params)
    };
    let params = params
        + if w.lora.is_some() {
            adapter_params
        } else {
            0.0
        };
    weight_grad_s += bwd.accumulate_and_contend(
        d,
        w,
        g,
        (trainable_params + trainable_expert_params - fused_accumulated).max(0.0),
        column_parallel_hidden,
    );

    // --- communication ---
    if w.tp > 1 {
        let ag = g.tp.all_gather_s(full_hidden_bytes);
        // The forward's gathers of the linears' inputs and the backward's of the
        // row-parallel outputs' gradients, in fp8 where the engine casts before it gathers
        // (`fp8_tp`).
        let ag_fwd = g.tp.all_gather_s(forward_gather_bytes);
        let rs = g.tp.reduce_scatter_s(full_hidden_bytes);
        let gemm = |gm: &Gemm| d.gemm_s(gm.m, gm.n, gm.k, gm.count);
        if userbuffers(w, g) {
            // Transformer Engine userbuffers (TE d0067d0 `module/base.py:373-392`): the
            // all-gather before a column-parallel GEMM runs as a ring exchange in tp chunks
            // (copy engines, 1 SM), the reduce-scatter after a row-parallel GEMM is pipelined
            // in 4 splits on 16 SMs; one chunk of each stays exposed. The backward's
            // all-gathers before the row-parallel dgrad GEMMs are ring exchanges too.
            let sms = d.sms();
            let mut contention = 0.0;
            let mut overlapped = |comm: f64, splits: f64, gemm_s: f64, channels: f64| {
                let (exposed, slowdown) =
                    userbuffer_overlap(comm, splits, gemm_s, channels, w.level, sms);
                contention += slowdown;
                exposed
            };
            let (dg_proj, _) = backward_gemms(&attn_out);
            let (dg_down, _) = backward_gemms(&down);
            let mut row_parallel = 0.0;
            if has_attn {
                fwd_phase.tp_comm_s =
                    overlapped(ag_fwd, t, gemm(&qkv), USERBUFFER_RING_EXCHANGE_SMS)
                        + overlapped(
                            rs,
                            USERBUFFER_PIPELINE_SPLITS,
                            gemm(&attn_out),
                            USERBUFFER_PIPELINE_SMS,
                        );
                row_parallel += overlapped(ag, t, gemm(&dg_proj), USERBUFFER_RING_EXCHANGE_SMS);
            }
            if has_mlp && !moe_dispatch_over_tp {
                fwd_phase.tp_comm_s +=
                    overlapped(ag_fwd, t, gemm(&up), USERBUFFER_RING_EXCHANGE_SMS)
                        + overlapped(
                            rs,
                            USERBUFFER_PIPELINE_SPLITS,
                            gemm(&down),
                            USERBUFFER_PIPELINE_SMS,
                        );
                row_parallel += overlapped(ag, t, gemm(&dg_down), USERBUFFER_RING_EXCHANGE_SMS);
            }
            if !w.engine.tp_comm_overlap_in_backward {
                // Only the forward is pipelined: the backward's all-gathers run in line.
                row_parallel = tp_pairs * ag_fwd;
            }
            bwd_phase.tp_comm_s = row_parallel + column_parallel_exposed;
            fwd.fixed(contention, 0.0);
        } else {
            // Forward: an all-reduce per half, or all-gather + reduce-scatter pairs with sp
            // (`tp_pairs`).
            let halves = f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp));
            fwd_phase.tp_comm_s = if w.sp {
                tp_pairs * (ag_fwd + rs)
            } else {
                halves * g.tp.all_reduce_s(full_hidden_bytes)
            };
            // Backward of the row-parallel outputs: identity without sp, all-gather with sp.
            let row_parallel = if w.sp { tp_pairs * ag_fwd } else { 0.0 };
            bwd_phase.tp_comm_s = row_parallel + column_parallel_exposed;
        }
        if w.reduces_amax_over_tp() {
            // Current scaling's amax all-reduces over tp, in line before each cast: the
            // column-parallel linears' inputs in the forward, the row-parallel ones' output
            // gradients in the backward (the dense block's; the experts' dispatcher moves
            // 16-bit tokens).
            let dense_pairs =
                f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp && m.moe.is_none()));
            let amax = g.tp.all_reduce_s(AMAX_BYTES);
            fwd_phase.tp_comm_s += dense_pairs * amax;
            bwd_phase.tp_comm_s += dense_pairs * amax;
        }
        if gemms.shared.is_some() && has_mlp {
            // Megatron's shared experts are a tensor-parallel MLP of their own
            // (`moe/shared_experts.py`, `SharedExpertMLP`): a gather of the
            // sequence-parallel input and a reduce-scatter of the output (an all-reduce
            // without sp), forward and backward, in line.
            let pair = if w.sp {
                ag + rs
            } else {
                g.tp.all_reduce_s(full_hidden_bytes)
            };
            fwd_phase.tp_comm_s += pair;
            bwd_phase.tp_comm_s += pair;
        }
    }
    // Context parallelism's merges, collectives and working memory beside the block's.
    let cp_transient = if g.cp.size > 1 && has_attn {
        let cp = context_parallel::attention_side(
            w,
            g,
            d,
            &CpShape {
                core_forward_s: core.forward.gpu_s,
                core_backward_s: core.backward.gpu_s,
                q_local,
                kv_local,
                out_local,
                repeated_kv,
            },
            &mut fwd,
            &mut bwd,
        );
        fwd_phase.cp_comm_s = cp.forward_comm_s;
        bwd_phase.cp_comm_s = cp.backward_comm_s;
        cp.transient_bytes
    } else {
        0.0
    };
    if m.moe.is_some() && (g.ep.size > 1 || moe_dispatch_over_tp) {
        // Token dispatch and combine, forward and backward (the backward runs the mirror
        // image). Megatron's all-to-all dispatcher with sequence parallelism sends each tp
        // rank's own slice of the sequence over the expert group, then gathers the tokens
        // its experts received over the expert-tp group (tp unless set; none at expert tp
        // 1) and reduce-scatters the expert output back before the combine (Megatron-LM
        // d98e8a6 `moe/token_dispatcher.py`, `MoEAlltoAllTokenDispatcher.token_dispatch` /
        // `dispatch_postprocess` / `combine_preprocess`).
        // DeepEP and HybridEP send each token once per NVLink domain instead (`dispatch`).
        let gathered = routed_tokens * expert_width * e;
        let etp_slices = if w.sp { g.etp.size as f64 } else { 1.0 };
        let a2a = super::dispatch::dispatch_s(
            m,
            w.moe_dispatcher,
            &g.ep,
            gathered / etp_slices,
            gathered / etp_slices / topk.max(1.0),
        );
        let etp = if moe_dispatch_over_tp && g.etp.size > 1 {
            g.etp.all_gather_s(gathered) + g.etp.reduce_scatter_s(gathered)
        } else {
            0.0
        };
        fwd_phase.ep_comm_s = 2.0 * a2a + etp;
        bwd_phase.ep_comm_s = 2.0 * a2a + etp;
    }
    (fwd_phase.compute_s, fwd_phase.launch_wait_s) =
        fwd.timed(w.layer_issue_s(d), w.kernel_scale());
    (bwd_phase.compute_s, bwd_phase.launch_wait_s) =
        bwd.timed(w.layer_issue_s(d), w.kernel_scale());

    // --- activation memory (per micro-batch) ---
    // Bytes per element of each linear's saved input: its quantised copy where the engine
    // keeps that for the weight gradient (Transformer Engine in a low-precision run), else
    // the 16-bit tensor. Under LoRA the frozen linears compute no weight gradient and the
    // 16-bit adapters keep the 16-bit input (counted so, as before).
    let quantised_input =
        w.low_precision() && w.engine.saves_quantized_linear_inputs && w.lora.is_none();
    let linear_in = if quantised_input {
        w.quantised_copy_bytes()
    } else {
        e
    };
    let attention_saved = if has_attn {
        let core_io = match w.attention {
            // q, k, v inputs of the kernel (k and v at the query width where the engine
            // repeats them) and its output (also the projection input).
            AttentionImpl::Flash => {
                let kv_in = if repeated_kv { q_local } else { kv_local };
                (q_local + 2.0 * kv_in) * tokens * e + out_local * tokens * e
            }
            // q, k for Q·Kᵀ, v for P·V, and the context (projection input).
            AttentionImpl::Unfused => {
                (q_local + 2.0 * kv_local) * tokens * e + out_local * tokens * e
            }
        };
        // The output projection keeps its own quantised copy of the attention output
        // beside the 16-bit one the attention kernel keeps.
        let projection_copy = if quantised_input {
            out_local * tokens * linear_in
        } else {
            0.0
        };
        core_io + latent_bytes + projection_copy // MLA's latents: the up projections' inputs
    } else {
        0.0
    };
    // The activation's 16-bit inputs, then fc2's saved input (the activation's output, or
    // its quantised copy).
    let mlp_saved = (routed_tokens * f_local + tokens * shared_f)
        * match m.activation {
            // fc1 output (GELU input) and GELU output (fc2 input); for squared ReLU, relu's
            // output (which pow reads again) and pow's (fc2 input).
            Activation::Gelu | Activation::Relu2 => e + linear_in,
            // gate and up outputs, and their product (down input); the shared experts keep
            // the same per element of their width.
            Activation::SwiGlu => 2.0 * e + linear_in,
        };
    let moe_saved = match m.moe {
        // Router logits (fp32) and what the routed tokens keep; LatentMoE's
        // up projection keeps its input, the combined output at the latent width, per
        // local token (the down projection's is the router's, kept with the norm's).
        Some(moe) => {
            let latent_in = moe
                .latent
                .map_or(0.0, |l| (tokens / t).ceil() * l as f64 * linear_in);
            let routed = if w.engine.moe_probs_in_expert_activation {
                // The experts' first linear input only (its quantised copy in a
                // low-precision run): `EngineProfile::moe_probs_in_expert_activation`.
                routed_tokens * expert_width * linear_in
            } else {
                2.0 * routed_tokens * expert_width * e
            };
            tokens * moe.experts as f64 * FP32 + routed + latent_in
        }
        None => 0.0,
    };
    // Per half it holds: the norm input and the QKV or fc1 input (sharded with sp), the
    // dropout mask.
    let halves = f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp));
    let outside = halves * (rep * (e + linear_in) + dropout_mask);
    let all_saved = outside + attention_saved + core.internal_bytes + mlp_saved + moe_saved;
    // Largest activation-gradient pair alive in the MLP backward (one expert at a time).
    let gradient_pair = 2.0 * routed_tokens * f_local * e / experts_local;
    let (activation_bytes, recompute_phase, rematerialised) = match w.recompute {
        Recompute::None => (all_saved, Phase::default(), 0.0),
        Recompute::Selective if w.engine.selective == SelectiveRecompute::EveryOtherMatmul => {
            // The block's `aten.mm` calls in forward order, each as (seconds, output
            // elements): one per linear, the separate ones each (`column_parts`).
            let mut mms: Vec<(f64, f64)> = Vec::new();
            let mut push = |g: &Gemm, widths: &[f64]| {
                for p in column_parts(g, widths) {
                    mms.push((
                        d.gemm_s(p.m, p.n, p.k, p.count),
                        (p.m * p.n * p.count) as f64,
                    ));
                }
            };
            let swiglu_halves: &[f64] = if m.activation == Activation::SwiGlu {
                &[1.0, 1.0]
            } else {
                &[1.0]
            };
            if has_attn {
                for g in gemms.attn_pre.iter().flatten() {
                    push(g, &[1.0]);
                }
                push(&qkv, qkv_widths);
                push(&attn_out, &[1.0]);
            }
            if has_mlp {
                match (gemms.router, gemms.shared) {
                    // MoE: the router's gate is a matmul; the experts' grouped GEMMs are
                    // not (recomputed); the shared experts' linears are.
                    (Some(router), shared) => {
                        push(&router, &[1.0]);
                        if let Some([s_up, s_down]) = shared {
                            push(&s_up, swiglu_halves);
                            push(&s_down, &[1.0]);
                        }
                    }
                    (None, _) => {
                        push(&up, up_widths);
                        push(&down, &[1.0]);
                    }
                }
            }
            // Saved: every odd-numbered matmul's output (the 1st, 3rd, …).
            let (saved_s, saved_out, saved_count) = mms
                .iter()
                .step_by(2)
                .fold((0.0, 0.0, 0.0), |(s, o, n), &(ms, mo)| {
                    (s + ms, o + mo, n + 1.0)
                });
            // The rest of the forward reruns (the attention kernel's output is kept).
            let rerun = Kernels {
                gpu_s: (fwd.gpu_s - saved_s - core.forward.gpu_s).max(0.0),
                count: (fwd.count - saved_count - core.forward.count).max(0.0),
            };
            // Kept: the block's input, the saved matmul outputs, the attention output and
            // its log-sum-exp.
            let kept = halves * rep * e
                + saved_out * e
                + if has_attn {
                    out_local * tokens * e + core.internal_bytes
                } else {
                    0.0
                };
            // Collectives other than the saved reduce-scatters rerun: the tp all-gathers
            // (or all-reduces) and the expert all-to-alls.
            let tp_rerun = if w.tp > 1 && w.sp && !userbuffers(w, g) {
                tp_pairs * g.tp.all_gather_s(forward_gather_bytes)
            } else {
                // Pipelined as in the forward (async TP), or all-reduces without sp.
                fwd_phase.tp_comm_s
            };
            let (compute_s, launch_wait_s) = rerun.timed(w.layer_issue_s(d), w.kernel_scale());
            (
                kept.min(all_saved),
                Phase {
                    compute_s,
                    launch_wait_s,
                    tp_comm_s: tp_rerun,
                    ep_comm_s: fwd_phase.ep_comm_s,
                    ..Phase::default()
                },
                (all_saved - kept).max(0.0),
            )
        }
        Recompute::Selective => {
            let r = megatron_modules(&Selected {
                set: w.recompute_modules,
                parts: &parts,
                core_forward: core.forward,
                core_saved: core.internal_bytes,
                has_attn,
                has_mlp,
                mla: m.mla.is_some(),
                moe: m.moe.is_some(),
                shared: gemms.shared.is_some(),
                tp_half: if tp_pairs > 0.0 {
                    fwd_phase.tp_comm_s / tp_pairs
                } else {
                    0.0
                },
                ep_fwd: fwd_phase.ep_comm_s,
                norm_out: rep * e,
                dense_mlp_saved: rep * linear_in + mlp_saved,
                moe_saved: mlp_saved + moe_saved,
                act_out: routed_tokens * f_local * linear_in,
                shared_saved: tokens
                    * shared_f
                    * match m.activation {
                        Activation::SwiGlu => 2.0 * e + linear_in,
                        _ => e + linear_in,
                    },
                attention_inputs: (q_local + 2.0 * kv_local) * tokens * e,
            });
            let dropped = r.dropped.min(all_saved - rep * e).max(0.0);
            let (compute_s, launch_wait_s) = r.rerun.timed(w.layer_issue_s(d), w.kernel_scale());
            (
                all_saved - dropped,
                Phase {
                    compute_s,
                    launch_wait_s,
                    tp_comm_s: r.tp_comm_s,
                    ep_comm_s: r.ep_comm_s,
                    ..Phase::default()
                },
                dropped,
            )
        }
        // Only the block input is kept; the whole forward (with its communication) reruns.
        Recompute::Full => (rep * e, fwd_phase, all_saved - rep * e),
    };
    LayerCost {
        forward: fwd_phase,
        backward: bwd_phase,
        recompute: recompute_phase,
        activation_bytes,
        transient_bytes: rematerialised + gradient_pair + cp_transient,
        weight_grad_s,
        params,
        expert_params,
        trainable_params,
        trainable_expert_params,
    }
}
