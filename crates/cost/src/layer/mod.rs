//! Time and memory of one layer (embedding, transformer block, head) for one micro-batch on
//! one GPU: kernel by kernel for compute, collective by collective for communication, and
//! saved tensor by saved tensor for activation memory (Korthikanti et al. 2022, §4).
//!
//! Knows layers and kernels; knows nothing of pipelines, schedules or optimizers.

use plait_spec::{
    Activation, AttentionImpl, BlockKind, Gemm, ModelSpec, ParallelConfig, Positions, Recompute,
    Shard, TrainSpec,
};

use crate::comm::Groups;
use crate::device::{DeviceModel, KERNEL_DISPATCH_S};
use crate::engine::{contention_per_overlap_s, nccl_channels, EngineProfile};

mod ends;
mod mamba;
pub use ends::{embedding_cost, head_cost, mtp_projection_cost};
pub use mamba::{ssd_scan_flops_per_token, SsdScan};

/// Bytes per parameter of fp32 main-gradient accumulation (read-modify-write of 4 + 4 bytes
/// in the weight-gradient GEMM epilogue; Megatron-LM `gradient_accumulation_fusion`).
const GRAD_ACCUMULATE_BYTES_PER_PARAM: f64 = 8.0;
/// Bytes per element of the fp32 copies the vocab-parallel cross-entropy keeps
/// (Megatron-LM upcasts logits and saves the fp32 softmax for the backward).
const FP32: f64 = 4.0;

/// Time of one pass split into compute and the communication left exposed.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Phase {
    pub compute_s: f64,
    pub tp_comm_s: f64,
    pub cp_comm_s: f64,
    pub ep_comm_s: f64,
}

impl Phase {
    /// Compute plus tensor-parallel communication only (embedding, head).
    fn compute_and_tp(compute_s: f64, tp_comm_s: f64) -> Phase {
        Phase {
            compute_s,
            tp_comm_s,
            ..Phase::default()
        }
    }

    pub fn total_s(&self) -> f64 {
        self.compute_s + self.comm_s()
    }
    pub fn comm_s(&self) -> f64 {
        self.tp_comm_s + self.cp_comm_s + self.ep_comm_s
    }
    pub fn add(&mut self, o: &Phase, times: f64) {
        self.compute_s += o.compute_s * times;
        self.tp_comm_s += o.tp_comm_s * times;
        self.cp_comm_s += o.cp_comm_s * times;
        self.ep_comm_s += o.ep_comm_s * times;
    }
}

/// One layer, one micro-batch, one GPU.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct LayerCost {
    pub forward: Phase,
    /// Backward without any recomputation.
    pub backward: Phase,
    /// The forward work redone before the backward under the recompute policy.
    pub recompute: Phase,
    /// Bytes kept from forward to backward under the recompute policy.
    pub activation_bytes: f64,
    /// Extra bytes live only while this layer's backward runs (rematerialised
    /// activations, activation gradients).
    pub transient_bytes: f64,
    /// The weight-gradient part of the backward compute (zero-bubble schedules defer it).
    pub weight_grad_s: f64,
    /// Parameters held on this GPU (dense part, sharded by tp).
    pub params: f64,
    /// Expert parameters held on this GPU (sharded by ep × tp), reduced over a smaller group.
    pub expert_params: f64,
    /// Of the parameters, those the run trains (gradients, optimizer states, data-parallel
    /// reduction): all of them, or only the LoRA adapters beside frozen weights (which
    /// `params` includes).
    pub trainable_params: f64,
    pub trainable_expert_params: f64,
}

impl LayerCost {
    /// Two layers run one after the other as one: times, activations, parameters and
    /// weight-gradient work add up; the transient peak is the larger one.
    pub fn plus(&self, o: &LayerCost) -> LayerCost {
        let mut out = *self;
        out.forward.add(&o.forward, 1.0);
        out.backward.add(&o.backward, 1.0);
        out.recompute.add(&o.recompute, 1.0);
        out.activation_bytes += o.activation_bytes;
        out.transient_bytes = out.transient_bytes.max(o.transient_bytes);
        out.weight_grad_s += o.weight_grad_s;
        out.params += o.params;
        out.expert_params += o.expert_params;
        out.trainable_params += o.trainable_params;
        out.trainable_expert_params += o.trainable_expert_params;
        out
    }

    /// The blocks' mean: each field averaged with the given weights (block counts).
    pub fn weighted_mean(parts: &[(LayerCost, f64)]) -> LayerCost {
        let total: f64 = parts.iter().map(|(_, n)| n).sum();
        let mut out = LayerCost::default();
        if total <= 0.0 {
            return parts.first().map_or(out, |(l, _)| *l);
        }
        for (l, n) in parts {
            let w = n / total;
            out.forward.add(&l.forward, w);
            out.backward.add(&l.backward, w);
            out.recompute.add(&l.recompute, w);
            out.activation_bytes += l.activation_bytes * w;
            out.transient_bytes = out.transient_bytes.max(l.transient_bytes);
            out.weight_grad_s += l.weight_grad_s * w;
            out.params += l.params * w;
            out.expert_params += l.expert_params * w;
            out.trainable_params += l.trainable_params * w;
            out.trainable_expert_params += l.trainable_expert_params * w;
        }
        out
    }
}

/// Everything about one micro-batch's shape on one GPU.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub mbs: f64,
    /// Full sequence.
    pub seq: f64,
    /// Sequence on this GPU (seq / cp).
    pub seq_local: f64,
    pub tp: u64,
    pub ep: u64,
    pub sp: bool,
    pub recompute: Recompute,
    pub attention: AttentionImpl,
    pub dropout: bool,
    /// Bytes per activation element.
    pub e: f64,
    /// The format of the block linears' GEMM operands.
    pub linear_format: plait_spec::Dtype,
    pub engine: EngineProfile,
    /// Assumption level of the uncertain mechanisms: 0 optimistic, 1 central, 2 pessimistic.
    pub level: usize,
    /// MoE load imbalance given by the user (busiest expert rank over the balanced share).
    pub moe_skew: f64,
    /// Keys each query attends over: the packed sample, or the whole sequence.
    pub attention_span: f64,
    /// LoRA adapters beside frozen weights (`None`: every weight trains).
    pub lora: Option<plait_spec::Lora>,
}

impl Workload {
    pub fn new(c: &ParallelConfig, t: &TrainSpec) -> Workload {
        Workload {
            mbs: c.mbs as f64,
            seq: t.seq as f64,
            seq_local: (t.seq / c.cp) as f64,
            tp: c.tp,
            ep: c.ep,
            sp: c.sp && c.tp > 1,
            recompute: c.recompute,
            attention: t.attention,
            dropout: t.dropout,
            e: t.dtype.activation_bytes(),
            linear_format: t.dtype,
            engine: EngineProfile::of(t.engine),
            level: 1,
            moe_skew: t.moe_skew.max(1.0),
            attention_span: t.attention_span() as f64,
            lora: t.lora_adapters(),
        }
    }

    /// MoE imbalance at this assumption level: balanced at the optimistic end, the user's
    /// skew at the centre, at least Switch Transformer's training capacity factor of 1.25
    /// (Fedus et al. 2021, §2.1: tokens per expert up to 1.25× the balanced share) at the
    /// pessimistic end.
    fn skew(&self) -> f64 {
        match self.level {
            0 => 1.0,
            1 => self.moe_skew,
            _ => self.moe_skew.max(1.25),
        }
    }

    /// Kernel time at this assumption level: the analytic kernel model's mean error either
    /// way ([`crate::device::GEMM_MODEL_MEAN_ERROR`]).
    fn kernel_scale(&self) -> f64 {
        match self.level {
            0 => 1.0 - crate::device::GEMM_MODEL_MEAN_ERROR,
            1 => 1.0,
            _ => 1.0 + crate::device::GEMM_MODEL_MEAN_ERROR,
        }
    }

    /// Whether the block linears run in a low-precision format (fp8, mxfp8, nvfp4).
    pub fn low_precision(&self) -> bool {
        self.linear_format.low_precision_linears()
    }

    /// Bytes per element read and written by the quantisation of one GEMM operand: the
    /// engine's per-tensor fp8 cast, or for the block-scaled formats one read of the 16-bit
    /// tensor (each block's scale comes from the block itself) and a row-wise and a
    /// column-wise copy with their scales, both quantised from the 16-bit input (TE's
    /// `MXFP8BlockScaling` and `NVFP4BlockScaling`; NVFP4's random Hadamard transform of the
    /// column-wise copy runs inside that cast).
    pub fn cast_bytes_per_element(&self) -> f64 {
        match self.linear_format {
            plait_spec::Dtype::Mxfp8 | plait_spec::Dtype::Nvfp4 => {
                2.0 + 2.0 * self.quantised_copy_bytes()
            }
            _ => self.engine.fp8_cast_bytes_per_element,
        }
    }

    /// Bytes per element of one quantised copy: the element and its share of block scales.
    pub fn quantised_copy_bytes(&self) -> f64 {
        self.linear_format.gemm_element_bytes() + self.linear_format.scale_bytes_per_element()
    }

    /// The same workload at another assumption level.
    pub fn at_level(self, level: usize) -> Workload {
        Workload { level, ..self }
    }

    /// Tokens on this GPU.
    fn tokens(&self) -> f64 {
        self.mbs * self.seq_local
    }

    /// Elements of a hidden-sized tensor outside the tensor-parallel region (norms,
    /// residuals, dropout): replicated over tp, or split by sequence parallelism.
    fn replicated(&self, hidden: f64) -> f64 {
        let full = self.tokens() * hidden;
        if self.sp {
            full / self.tp as f64
        } else {
            full
        }
    }
}

/// Vocabulary padded as Megatron-LM pads it: to a multiple of 128 × tp.
pub fn padded_vocab(vocab: u64, tp: u64) -> u64 {
    let unit = 128 * tp;
    vocab.div_ceil(unit) * unit
}

/// Accumulates kernels of one pass: GPU time and kernel count (for the host-issue floor).
#[derive(Default)]
struct Kernels {
    gpu_s: f64,
    count: f64,
}

impl Kernels {
    fn gemm(&mut self, d: &DeviceModel, g: &Gemm) {
        self.gpu_s += d.gemm_s(g.m, g.n, g.k, g.count);
        self.count += g.count as f64;
    }
    /// Expert GEMMs: one grouped launch, or one GEMM (and wave tail) per expert.
    fn expert_gemm(&mut self, d: &DeviceModel, g: &Gemm, grouped: bool) {
        self.gpu_s += expert_gemm_s(d, g, grouped);
        self.count += g.count as f64;
    }
    fn gemm_shape(&mut self, d: &DeviceModel, m: f64, n: f64, k: f64, count: f64) {
        self.gpu_s += d.gemm_s(m as u64, n as u64, k as u64, count as u64);
        self.count += 1.0;
    }
    /// A memory-bound kernel moving `bytes` (read + write).
    fn stream(&mut self, d: &DeviceModel, bytes: f64) {
        self.gpu_s += d.memory_s(bytes);
        self.count += 1.0;
    }
    fn fixed(&mut self, seconds: f64, kernels: f64) {
        self.gpu_s += seconds;
        self.count += kernels;
    }
    /// The backward's gradient accumulation of `trainable` parameters, and the slowdown of
    /// the GEMMs that run beside `tp_hidden_s` of hidden tp collectives (they lose the SMs
    /// those use). Returns the accumulation's time (part of the weight-gradient pass).
    fn accumulate_and_contend(
        &mut self,
        d: &DeviceModel,
        w: &Workload,
        g: &Groups,
        trainable: f64,
        tp_hidden_s: f64,
    ) -> f64 {
        let accumulate_s = d.memory_s(GRAD_ACCUMULATE_BYTES_PER_PARAM * trainable);
        self.fixed(accumulate_s, 0.0);
        self.fixed(
            tp_hidden_s
                * contention_per_overlap_s(w.level, nccl_channels(g.tp.spans_nodes), d.sms()),
            0.0,
        );
        accumulate_s
    }
    /// A stream of kernels takes the longer of its device time and its host issue time.
    fn time_s(&self) -> f64 {
        self.gpu_s.max(self.count * KERNEL_DISPATCH_S)
    }
}

/// Time of `g` when its `count` GEMMs are experts: grouped into one launch, or run one after
/// another (each with its own wave quantisation).
fn expert_gemm_s(d: &DeviceModel, g: &Gemm, grouped: bool) -> f64 {
    if grouped || g.count <= 1 {
        d.gemm_s(g.m, g.n, g.k, g.count)
    } else {
        g.count as f64 * d.gemm_s(g.m, g.n, g.k, 1)
    }
}

/// Backward GEMMs of a forward GEMM `[m×k]·[k×n]`: input gradient and weight gradient.
fn backward_gemms(g: &Gemm) -> (Gemm, Gemm) {
    (
        Gemm {
            name: "dgrad",
            m: g.m,
            n: g.k,
            k: g.n,
            count: g.count,
        },
        Gemm {
            name: "wgrad",
            m: g.k,
            n: g.n,
            k: g.m,
            count: g.count,
        },
    )
}

/// Attention core on one GPU: forward/backward kernels and the bytes it saves beyond its
/// inputs (which selective recomputation drops).
struct AttentionCore {
    forward: Kernels,
    backward: Kernels,
    /// Saved inside the core (softmax output, dropout mask and output; flash: the
    /// log-sum-exp).
    internal_bytes: f64,
}

fn attention_core(m: &ModelSpec, d: &DeviceModel, w: &Workload) -> AttentionCore {
    let (heads, _kv, dim) = m.attention_shape(w.tp);
    let (heads, dim) = (heads as f64, dim as f64);
    // Score elements per GPU: local queries × the keys they attend over — the context (the
    // sequence, or the packed sample) or the block's sliding window where it is shorter.
    let context = w.seq.min(w.attention_span);
    let keys = m
        .attention_window
        .map_or(context, |win| context.min(win as f64));
    let scores = w.mbs * heads * w.seq_local * keys;
    // Causal: a query sees on average keys · (1 − keys / 2·context) of them (half the
    // context without a window; nearly the whole window when it is much shorter).
    let causal_share = if m.causal {
        1.0 - keys / (2.0 * context)
    } else {
        1.0
    };
    let mut forward = Kernels::default();
    let mut backward = Kernels::default();
    let internal_bytes = match w.attention {
        AttentionImpl::Flash => {
            let flops = 4.0 * scores * dim * causal_share;
            let (f_s, b_s) = d.attention_s(
                w.engine.attention,
                flops,
                w.seq_local.min(keys),
                dim,
                m.causal,
                w.level,
            );
            forward.fixed(f_s, 1.0);
            backward.fixed(b_s, 2.0);
            w.mbs * heads * w.seq_local * FP32
        }
        AttentionImpl::Unfused => {
            let batch = w.mbs * heads;
            let (sq, sk) = (w.seq_local, keys);
            // Q·Kᵀ, fused scale-mask-softmax, dropout, P·V (Megatron-LM before flash attention).
            forward.gemm_shape(d, sq, sk, dim, batch);
            forward.stream(d, scores * 2.0 * w.e);
            if w.dropout {
                forward.stream(d, scores * (2.0 * w.e + 1.0));
            }
            forward.gemm_shape(d, sq, dim, sk, batch);
            // Backward: dP = dO·Vᵀ, dV = Pᵀ·dO, softmax and dropout backward, dQ = dS·K, dK = dSᵀ·Q.
            backward.gemm_shape(d, sq, sk, dim, batch);
            backward.gemm_shape(d, sk, dim, sq, batch);
            if w.dropout {
                backward.stream(d, scores * (2.0 * w.e + 1.0));
            }
            backward.stream(d, scores * 3.0 * w.e);
            backward.gemm_shape(d, sq, dim, sk, batch);
            backward.gemm_shape(d, sk, dim, sq, batch);
            // Softmax output; with dropout also its mask and output.
            scores
                * if w.dropout {
                    2.0 * w.e + 1.0 + w.e
                } else {
                    w.e
                }
        }
    };
    AttentionCore {
        forward,
        backward,
        internal_bytes,
    }
}

/// One transformer block.
///
/// A block holds what its kind says ([`plait_spec::BlockKind`]): attention and MLP, or
/// either half alone (Nemotron-H's `*` and `-` layers: the same kernels, collectives and
/// saved tensors as that half of a transformer block), or a Mamba-2 mixer
/// ([`mamba::mamba_block_cost`]).
pub fn block_cost(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCost {
    if m.block == BlockKind::Mamba {
        return mamba::mamba_block_cost(m, d, g, w);
    }
    let (has_attn, has_mlp) = (m.block.has_attention(), m.block.has_mlp());
    let e = w.e;
    let t = w.tp as f64;
    let h = m.hidden as f64;
    let tokens = w.tokens();
    let rep = w.replicated(h);
    let full_hidden_bytes = tokens * h * e;
    let mut gemms = m.block_gemms(tokens as u64, Shard { tp: w.tp, ep: w.ep });
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
    let f_local = (m.ffn_hidden / w.tp) as f64;
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
    if has_attn {
        fwd.stream(d, 2.0 * rep * e); // norm 1
        bwd.stream(d, 3.0 * rep * e);
        if let Some([down, kv_up]) = gemms.attn_pre {
            fwd.gemm(d, &down);
            latent_bytes = (down.m * down.n) as f64 * e;
            fwd.stream(d, 2.0 * latent_bytes);
            bwd.stream(d, 3.0 * latent_bytes);
            fwd.gemm(d, &kv_up);
        }
        fwd.gemm(d, &qkv);
        if m.positions == Positions::Rotary {
            let rope = 2.0 * rope_width * tokens * e;
            fwd.stream(d, rope);
            bwd.stream(d, rope);
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
    let routed_tokens = if has_mlp { tokens * topk * skew } else { 0.0 };
    let grouped = w.engine.grouped_expert_gemm;
    let mut shared_f = 0.0;
    if has_mlp {
        fwd.stream(d, 2.0 * rep * e); // norm 2
        bwd.stream(d, 3.0 * rep * e);
        if let Some(router) = gemms.router {
            fwd.gemm(d, &router);
            // Permute tokens to experts and back: read + write of routed hidden states, twice.
            let permute = 2.0 * 2.0 * routed_tokens * h * e;
            fwd.stream(d, permute);
            bwd.stream(d, permute);
            let (rd, rw) = backward_gemms(&router);
            bwd.gemm(d, &rd);
            bwd.gemm(d, &rw);
        }
        fwd.expert_gemm(d, &up, grouped);
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
        fwd.stream(d, act_fwd * routed_tokens * f_local * e);
        bwd.stream(d, act_bwd * routed_tokens * f_local * e);
        fwd.expert_gemm(d, &down, grouped);
        // Shared experts: a dense MLP over every token, its output added to the routed ones'.
        if let Some([s_up, s_down]) = gemms.shared {
            shared_f = s_down.k as f64;
            fwd.gemm(d, &s_up);
            fwd.stream(d, act_fwd * tokens * shared_f * e);
            bwd.stream(d, act_bwd * tokens * shared_f * e);
            fwd.gemm(d, &s_down);
            fwd.stream(d, 3.0 * rep * e);
        }
        fwd.stream(d, 3.0 * rep * e + dropout_mask);
        bwd.stream(d, 3.0 * rep * e + dropout_mask);
    }
    // The linears beyond the four of a standard block (MLA's down and kv-up projections,
    // the shared experts), for casts and gradients below.
    let extra_linears: Vec<Gemm> = gemms
        .attn_pre
        .iter()
        .filter(|_| has_attn)
        .flatten()
        .chain(gemms.shared.iter().filter(|_| has_mlp).flatten())
        .copied()
        .collect();
    // The block's own linears with their place (0 qkv, 1 attention output, 2 fc1, 3 fc2):
    // those of the halves it holds.
    let linears: Vec<(usize, Gemm)> = [qkv, attn_out, up, down]
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| if i < 2 { has_attn } else { has_mlp })
        .collect();

    if w.low_precision() {
        // Quantisation of the fp8 GEMM operands, per micro-batch: the inputs of the four
        // block linears (fused into the norm for qkv and fc1 under Transformer Engine) and
        // the output gradients in the backward; weights are cast once per step (optimizer).
        let cast = w.cast_bytes_per_element();
        let fused = w.engine.fp8_cast_fused_into_norm;
        let inputs = linears
            .iter()
            // Under Transformer Engine the casts of qkv's and fc1's inputs are in the norms.
            .filter(|(i, _)| !fused || i % 2 == 1)
            .map(|(_, g)| g)
            .chain(&extra_linears)
            .map(|g| (g.m * g.k * g.count) as f64)
            .sum::<f64>();
        let output_grads = linears
            .iter()
            .map(|(_, g)| g)
            .chain(&extra_linears)
            .map(|g| (g.m * g.n * g.count) as f64)
            .sum::<f64>();
        fwd.stream(d, cast * inputs);
        fwd.count += if w.engine.fp8_cast_fused_into_norm {
            1.0
        } else {
            3.0
        };
        bwd.stream(d, cast * output_grads);
        bwd.count += 3.0;
    }

    // Backward GEMMs, with Megatron's overlap of each column-parallel input-gradient
    // collective behind the weight-gradient GEMM.
    let mut column_parallel_exposed = 0.0;
    let mut column_parallel_hidden = 0.0;
    let mut weight_grad_s = 0.0;
    // LoRA (Hu et al. 2021): frozen linears compute only their input gradient; each
    // adapted linear adds x·A (k → r) and (x·A)·B (r → n) in 16-bit, their input and
    // weight gradients, and the add of the adapter's output into the linear's.
    let mut adapter_params = 0.0;
    // Megatron's MoE blocks with tp > 1 (sequence parallelism is then required) gather the
    // expert inputs over tp in the token dispatcher rather than before fc1.
    let moe_dispatch_over_tp = m.moe.is_some() && w.sp && w.tp > 1;
    for &(i, ref gm) in &linears {
        let (dg, wg) = backward_gemms(gm);
        let dg_s = expert_gemm_s(d, &dg, grouped);
        let wg_s = if w.lora.is_some() {
            0.0
        } else {
            expert_gemm_s(d, &wg, grouped)
        };
        bwd.gpu_s += dg_s + wg_s;
        bwd.count += if w.lora.is_some() { 1.0 } else { 2.0 } * dg.count as f64;
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
            let wg_s = d.gemm_s(wg.m, wg.n, wg.k, wg.count);
            bwd.fixed(wg_s, 1.0);
            weight_grad_s += wg_s;
        }
    }
    // Attention and dense MLP weights split over tp; norms (and the MoE router) replicated.
    let router = m.moe.map_or(0, |moe| m.hidden * moe.experts) as f64;
    let norms = (m.block_params() - m.attention_params() - m.mlp_params()) as f64;
    let params = (m.attention_params() + m.mlp_params() - m.expert_params()) as f64 / t
        + norms
        + router * (1.0 - 1.0 / t);
    let expert_params = m.expert_params() as f64 / (t * w.ep as f64);
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
        trainable_params + trainable_expert_params,
        column_parallel_hidden,
    );

    // --- communication ---
    if w.tp > 1 {
        let ag = g.tp.all_gather_s(full_hidden_bytes);
        let rs = g.tp.reduce_scatter_s(full_hidden_bytes);
        let gemm = |gm: &Gemm| d.gemm_s(gm.m, gm.n, gm.k, gm.count);
        // Userbuffers map the peers' memory (CUDA IPC): the tp group must sit in one node.
        if w.sp && w.engine.tp_comm_overlap && !g.tp.spans_nodes {
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
                    overlapped(ag, t, gemm(&qkv), 1.0) + overlapped(rs, 4.0, gemm(&attn_out), 16.0);
                row_parallel += overlapped(ag, t, gemm(&dg_proj), 1.0);
            }
            if has_mlp && !moe_dispatch_over_tp {
                fwd_phase.tp_comm_s +=
                    overlapped(ag, t, gemm(&up), 1.0) + overlapped(rs, 4.0, gemm(&down), 16.0);
                row_parallel += overlapped(ag, t, gemm(&dg_down), 1.0);
            }
            bwd_phase.tp_comm_s = row_parallel + column_parallel_exposed;
            fwd.fixed(contention, 0.0);
        } else {
            // Forward: an all-reduce per half, or all-gather + reduce-scatter pairs with sp
            // (none for the MLP of a MoE block whose dispatcher moves its tokens).
            let pairs = f64::from(u8::from(has_attn))
                + f64::from(u8::from(has_mlp && !moe_dispatch_over_tp));
            let halves = f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp));
            fwd_phase.tp_comm_s = if w.sp {
                pairs * (ag + rs)
            } else {
                halves * g.tp.all_reduce_s(full_hidden_bytes)
            };
            // Backward of the row-parallel outputs: identity without sp, all-gather with sp.
            let row_parallel = if w.sp { pairs * ag } else { 0.0 };
            bwd_phase.tp_comm_s = row_parallel + column_parallel_exposed;
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
    if g.cp.size > 1 && has_attn {
        // Ring attention: cp − 1 exchanges of the local K and V, overlapped with the
        // attention of the chunk already present; backward also returns dK, dV.
        let kv_bytes = 2.0 * w.mbs * w.seq_local * kv_local * e;
        let steps = (g.cp.size - 1) as f64;
        let per_step_f = core.forward.gpu_s / g.cp.size as f64;
        let per_step_b = core.backward.gpu_s / g.cp.size as f64;
        fwd_phase.cp_comm_s = steps * (g.cp.p2p_s(kv_bytes) - per_step_f).max(0.0);
        bwd_phase.cp_comm_s = steps * (g.cp.p2p_s(2.0 * kv_bytes) - per_step_b).max(0.0);
    }
    if m.moe.is_some() && (g.ep.size > 1 || moe_dispatch_over_tp) {
        // Token dispatch and combine, forward and backward (the backward runs the mirror
        // image). Megatron's all-to-all dispatcher with sequence parallelism sends each tp
        // rank's own slice of the sequence over the expert group, then gathers the tokens
        // its experts received over the expert-tp group (= tp) and reduce-scatters the
        // expert output back before the combine (Megatron-LM d98e8a6
        // `moe/token_dispatcher.py`, `MoEAlltoAllTokenDispatcher.token_dispatch` /
        // `dispatch_postprocess` / `combine_preprocess`).
        let gathered = routed_tokens * h * e;
        let tp_slices = if w.sp { g.tp.size as f64 } else { 1.0 };
        let a2a = g.ep.all_to_all_s(gathered / tp_slices);
        let etp = if moe_dispatch_over_tp {
            g.tp.all_gather_s(gathered) + g.tp.reduce_scatter_s(gathered)
        } else {
            0.0
        };
        fwd_phase.ep_comm_s = 2.0 * a2a + etp;
        bwd_phase.ep_comm_s = 2.0 * a2a + etp;
    }
    fwd_phase.compute_s = fwd.time_s() * w.kernel_scale();
    bwd_phase.compute_s = bwd.time_s() * w.kernel_scale();

    // --- activation memory (per micro-batch) ---
    let attention_saved = if has_attn {
        let core_io = match w.attention {
            // q, k, v inputs of the kernel and its output (also the projection input).
            AttentionImpl::Flash => {
                (q_local + 2.0 * kv_local) * tokens * e + out_local * tokens * e
            }
            // q, k for Q·Kᵀ, v for P·V, and the context (projection input).
            AttentionImpl::Unfused => {
                (q_local + 2.0 * kv_local) * tokens * e + out_local * tokens * e
            }
        };
        core_io + latent_bytes // MLA's latents: the up projections' inputs
    } else {
        0.0
    };
    let mlp_saved = match m.activation {
        // fc1 output (GELU input) and GELU output (fc2 input); for squared ReLU, relu's
        // output (which pow reads again) and pow's (fc2 input).
        Activation::Gelu | Activation::Relu2 => {
            2.0 * (routed_tokens * f_local + tokens * shared_f) * e
        }
        // gate and up outputs, and their product (down input); the shared experts keep
        // the same per element of their width.
        Activation::SwiGlu => 3.0 * (routed_tokens * f_local + tokens * shared_f) * e,
    };
    let moe_saved = match m.moe {
        // Router logits (fp32) and the permuted expert inputs and outputs.
        Some(moe) => tokens * moe.experts as f64 * FP32 + 2.0 * routed_tokens * h * e,
        None => 0.0,
    };
    // Per half it holds: the norm input and the QKV or fc1 input (sharded with sp), the
    // dropout mask.
    let halves = f64::from(u8::from(has_attn)) + f64::from(u8::from(has_mlp));
    let outside = halves * (2.0 * rep * e + dropout_mask);
    let all_saved = outside + attention_saved + core.internal_bytes + mlp_saved + moe_saved;
    // Largest activation-gradient pair alive in the MLP backward (one expert at a time).
    let gradient_pair = 2.0 * routed_tokens * f_local * e / experts_local;
    let (activation_bytes, recompute_phase, rematerialised) = match w.recompute {
        Recompute::None => (all_saved, Phase::default(), 0.0),
        Recompute::Selective => (
            all_saved - core.internal_bytes,
            Phase {
                compute_s: core.forward.time_s() * w.kernel_scale(),
                ..Phase::default()
            },
            core.internal_bytes,
        ),
        // Only the block input is kept; the whole forward (with its communication) reruns.
        Recompute::Full => (rep * e, fwd_phase, all_saved - rep * e),
    };
    LayerCost {
        forward: fwd_phase,
        backward: bwd_phase,
        recompute: recompute_phase,
        activation_bytes,
        transient_bytes: rematerialised + gradient_pair,
        weight_grad_s,
        params,
        expert_params,
        trainable_params,
        trainable_expert_params,
    }
}

/// The backward tensor-parallel traffic of a column-parallel GEMM's input, as (exposed,
/// hidden behind its GEMMs) seconds: with sequence parallelism the input is re-gathered for
/// the weight gradient (behind dgrad) and the input gradient reduce-scattered (behind
/// wgrad); without, the input gradient is all-reduced (behind wgrad). An engine that does
/// not overlap them exposes all of it.
pub(crate) fn column_parallel_backward_comm(
    g: &Groups,
    w: &Workload,
    full_hidden_bytes: f64,
    dg_s: f64,
    wg_s: f64,
) -> (f64, f64) {
    let pairs = if w.sp {
        [
            (g.tp.all_gather_s(full_hidden_bytes), dg_s),
            (g.tp.reduce_scatter_s(full_hidden_bytes), wg_s),
        ]
    } else {
        [(g.tp.all_reduce_s(full_hidden_bytes), wg_s), (0.0, 0.0)]
    };
    let (mut exposed, mut hidden) = (0.0, 0.0);
    for (comm, behind) in pairs {
        if w.engine.overlaps_tp_backward {
            exposed += (comm - behind).max(0.0);
            hidden += comm.min(behind);
        } else {
            exposed += comm;
        }
    }
    (exposed, hidden)
}

/// A collective pipelined behind a GEMM by Transformer Engine's userbuffers (TE d0067d0
/// `module/base.py:373-392`): in `splits` chunks, the first exposed and the rest behind
/// `gemm_s`, on `channels` SMs that slow the GEMM while they run. Returns (exposed seconds,
/// compute slowdown seconds).
pub(crate) fn userbuffer_overlap(
    comm: f64,
    splits: f64,
    gemm_s: f64,
    channels: f64,
    level: usize,
    sms: f64,
) -> (f64, f64) {
    let first = comm / splits;
    let rest = comm - first;
    (
        first + (rest - gemm_s).max(0.0),
        rest.min(gemm_s) * contention_per_overlap_s(level, channels, sms),
    )
}
