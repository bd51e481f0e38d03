//! The layers at the two ends of the model: the embedding, the LM head with its loss, and
//! a multi-token-prediction module's projection.
//!
//! Costed with the parent's kernels and workload; knows nothing of blocks. Their kernels
//! launch from the host whatever `TrainSpec::cuda_graphs` says: Megatron-Core's per-layer
//! graphs capture the transformer and Mamba layers alone.

use super::*;

/// The part of a multi-token-prediction module besides its block and the shared head
/// (Megatron-Core `multi_token_prediction.py`): RMSNorms of the next token's embedding and
/// of the hidden state, their concatenation, and the 2h → h projection `eh_proj`
/// (column-parallel over tp).
pub fn mtp_projection_cost(m: &ModelSpec, d: &DeviceModel, w: &Workload) -> LayerCost {
    let h = m.hidden as f64;
    let tokens = w.tokens();
    let e = w.e;
    let mut fwd = Kernels::default();
    let mut bwd = Kernels::default();
    // Two norms (read, write) and the concatenation (read two halves, write the whole).
    fwd.stream(d, 2.0 * 2.0 * tokens * h * e + 2.0 * 2.0 * tokens * h * e);
    bwd.stream(d, 2.0 * 3.0 * tokens * h * e + 2.0 * 2.0 * tokens * h * e);
    let proj = Gemm {
        name: "eh_proj",
        m: tokens as u64,
        n: m.hidden / w.tp,
        k: 2 * m.hidden,
        count: 1,
    };
    fwd.gemm(d, &proj);
    let (dg, wg) = backward_gemms(&proj);
    bwd.gemm(d, &dg);
    let wg_s = if w.lora.is_some() {
        0.0
    } else {
        d.gemm_s(wg.m, wg.n, wg.k, wg.count)
    };
    bwd.fixed(wg_s, 1.0);
    let params = 2.0 * h * h / w.tp as f64 + 2.0 * h;
    LayerCost {
        forward: Phase::compute_and_tp(fwd.timed(d.kernel_issue_s, w.kernel_scale()), 0.0),
        backward: Phase::compute_and_tp(bwd.timed(d.kernel_issue_s, w.kernel_scale()), 0.0),
        recompute: Phase::default(),
        // The concatenated input of the projection.
        activation_bytes: 2.0 * tokens * h * e,
        transient_bytes: 0.0,
        weight_grad_s: wg_s,
        params,
        expert_params: 0.0,
        trainable_params: if w.lora.is_some() { 0.0 } else { params },
        trainable_expert_params: 0.0,
    }
}

/// The embedding layer (token + position + type lookups; vocab-parallel over tp).
pub fn embedding_cost(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCost {
    let h = m.hidden as f64;
    let tokens = w.tokens();
    let rep = w.replicated(h);
    let e = w.e;
    let mut fwd = Kernels::default();
    let mut bwd = Kernels::default();
    // Gather rows, add positions (and types), write the hidden states.
    fwd.stream(d, 3.0 * tokens * h * e);
    // Scatter-add the output gradient into the fp32 embedding gradient (nothing for a
    // frozen table: no gradient flows below the first block).
    if w.lora.is_none() {
        bwd.stream(d, tokens * h * (e + 2.0 * FP32));
    }
    let v = padded_vocab(m.vocab, w.tp) as f64;
    let pos = if m.positions == Positions::Learned {
        m.max_positions as f64
    } else {
        0.0
    };
    let full = tokens * h * e;
    let tp_fwd = if w.sp {
        g.tp.reduce_scatter_s(full)
    } else {
        g.tp.all_reduce_s(full)
    };
    let tp_bwd = if w.sp { g.tp.all_gather_s(full) } else { 0.0 };
    LayerCost {
        forward: Phase::compute_and_tp(fwd.timed(d.kernel_issue_s, w.kernel_scale()), tp_fwd),
        backward: Phase::compute_and_tp(bwd.timed(d.kernel_issue_s, w.kernel_scale()), tp_bwd),
        recompute: Phase::default(),
        activation_bytes: if w.dropout { rep } else { 0.0 },
        transient_bytes: 0.0,
        weight_grad_s: 0.0,
        params: v * h / w.tp as f64 + (pos + m.type_vocab as f64) * h,
        expert_params: 0.0,
        trainable_params: if w.lora.is_some() {
            0.0
        } else {
            v * h / w.tp as f64 + (pos + m.type_vocab as f64) * h
        },
        trainable_expert_params: 0.0,
    }
}

/// The head: final norm, output projection (vocab-parallel) and cross-entropy loss. With
/// `tied` the output matrix is the embedding's and its parameters are counted there
/// (unless the head sits on another pipeline stage, where the caller adds a copy).
pub fn head_cost(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCost {
    let h = m.hidden as f64;
    let tokens = w.tokens();
    let rep = w.replicated(h);
    let e = w.e;
    let v_local = (padded_vocab(m.vocab, w.tp) / w.tp) as f64;
    let mut fwd = Kernels::default();
    let mut bwd = Kernels::default();
    // The final norm, as the engine runs it.
    elementwise(&mut fwd, &mut bwd, d, w.engine.norm, rep);
    let proj = Gemm {
        name: "lm_head",
        m: tokens as u64,
        n: v_local as u64,
        k: m.hidden,
        count: 1,
    };
    // The output layer stays in 16-bit in fp8 runs: Megatron's `output_layer` is a plain
    // ColumnParallelLinear (fp8 only with `fp8_output_proj`, `gpt_model.py:270-289`), and
    // torchtitan's float8 converter filters `output` in every shipped config.
    fwd.fixed(d.gemm16_s(proj.m, proj.n, proj.k, 1), 1.0);
    let (dg, wg) = backward_gemms(&proj);
    let dg_s = d.gemm16_s(dg.m, dg.n, dg.k, 1);
    // A frozen output layer (LoRA) computes no weight gradient.
    let wg_s = if w.lora.is_some() {
        0.0
    } else {
        d.gemm16_s(wg.m, wg.n, wg.k, 1)
    };
    bwd.fixed(dg_s + wg_s, if w.lora.is_some() { 1.0 } else { 2.0 });
    // Cross-entropy, as the engine computes it (`engine::CrossEntropy`) on this GPU's
    // share of the vocabulary.
    let logits = tokens * v_local;
    let ce = match w.engine.cross_entropy_loss_parallel {
        Some(sharded) if w.tp > 1 => sharded,
        _ => w.engine.cross_entropy,
    };
    fwd.stream(d, logits * ce.forward_bytes);
    bwd.stream(d, logits * ce.backward_bytes);
    // Final norm (or BERT's pooler) plus, when untied, this GPU's slice of the output matrix;
    // a tied output matrix is the embedding's.
    let own_matrix = if m.tied_embeddings {
        0.0
    } else {
        m.vocab as f64 * h
    };
    let params =
        m.head_params() as f64 - own_matrix + if m.tied_embeddings { 0.0 } else { v_local * h };
    let trainable_params = if w.lora.is_some() { 0.0 } else { params };
    bwd.stream(d, GRAD_ACCUMULATE_BYTES_PER_PARAM * trainable_params);
    let full = tokens * h * e;
    let (tp_fwd, tp_bwd) = if w.tp > 1 {
        // Input gathered with sp; the loss's max/sum all-reduces are a few bytes per token.
        let gather = if w.sp { g.tp.all_gather_s(full) } else { 0.0 };
        let loss = 3.0 * g.tp.all_reduce_s(tokens * FP32);
        let input_grad = if w.sp {
            g.tp.reduce_scatter_s(full)
        } else {
            g.tp.all_reduce_s(full)
        };
        (gather + loss, (input_grad - wg_s).max(0.0))
    } else {
        (0.0, 0.0)
    };
    LayerCost {
        forward: Phase::compute_and_tp(fwd.timed(d.kernel_issue_s, w.kernel_scale()), tp_fwd),
        backward: Phase::compute_and_tp(bwd.timed(d.kernel_issue_s, w.kernel_scale()), tp_bwd),
        recompute: Phase::default(),
        // Norm input, projection input and what the loss keeps (softmax or logits).
        activation_bytes: 2.0 * rep * e + logits * ce.saved_bytes,
        transient_bytes: logits * ce.transient_bytes,
        weight_grad_s: wg_s,
        params,
        expert_params: 0.0,
        trainable_params,
        trainable_expert_params: 0.0,
    }
}
