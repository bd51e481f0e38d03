//! Time and memory of one layer (embedding, transformer block, head) for one micro-batch on
//! one GPU: kernel by kernel for compute, collective by collective for communication, and
//! saved tensor by saved tensor for activation memory (Korthikanti et al. 2022, §4).
//!
//! Knows layers and kernels; knows nothing of pipelines, schedules or optimizers.

use plait_spec::{
    AttentionImpl, BlockKind, Gemm, ModelSpec, ParallelConfig, Positions, Recompute, TrainSpec,
};

use crate::comm::Groups;
use crate::device::DeviceModel;
use crate::engine::{contention_per_overlap_s, nccl_channels, EngineProfile};

mod attention;
mod context_parallel;
mod dispatch;
mod ends;
mod mamba;
mod quantise;
mod selective;
mod transformer;
pub use dispatch::{distinct_dispatchers, remote_domains};
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
    /// Of `compute_s`, the time the GPU waits on the host to launch the pass's kernels: what
    /// the launches take beyond the kernels' own run time (zero where the kernels outlast
    /// their launches).
    pub launch_wait_s: f64,
    pub tp_comm_s: f64,
    pub cp_comm_s: f64,
    pub ep_comm_s: f64,
}

impl Phase {
    /// Compute (its time and launch wait, [`Kernels::timed`]) plus tensor-parallel
    /// communication only (embedding, head).
    fn compute_and_tp((compute_s, launch_wait_s): (f64, f64), tp_comm_s: f64) -> Phase {
        Phase {
            compute_s,
            launch_wait_s,
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
        self.launch_wait_s += o.launch_wait_s * times;
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
    pub cp: u64,
    /// How context parallelism moves the sequence for attention.
    pub cp_comm: plait_spec::CpComm,
    pub tp: u64,
    pub ep: u64,
    /// Tensor parallelism of the expert MLPs (a divisor of tp).
    pub etp: u64,
    pub sp: bool,
    pub recompute: Recompute,
    /// What selective recomputation reruns under Megatron-Core (`recompute_modules`).
    pub recompute_modules: plait_spec::RecomputeModules,
    pub attention: AttentionImpl,
    pub dropout: bool,
    /// Bytes per activation element.
    pub e: f64,
    /// The format of the block linears' GEMM operands.
    pub linear_format: plait_spec::Dtype,
    /// The fp8 recipe in force (`TrainSpec::fp8_recipe`): none unless the run is fp8.
    pub fp8_recipe: Option<plait_spec::Float8Recipe>,
    pub engine: EngineProfile,
    /// Assumption level of the uncertain mechanisms: 0 optimistic, 1 central, 2 pessimistic.
    pub level: usize,
    /// MoE load imbalance given by the user (busiest expert rank over the balanced share).
    pub moe_skew: f64,
    /// Expert capacity factor with padding to capacity (`TrainSpec::moe_capacity`).
    pub moe_capacity: Option<f64>,
    /// Keys each query attends over: the packed sample, or the whole sequence.
    pub attention_span: f64,
    /// LoRA adapters beside frozen weights (`None`: every weight trains).
    pub lora: Option<plait_spec::Lora>,
    /// How expert layers dispatch tokens (`ParallelConfig::moe_dispatcher`).
    pub moe_dispatcher: plait_spec::MoeDispatcher,
    /// Blocks at the start and at the end whose linears run in bf16
    /// (`TrainSpec::bf16_layers`; none unless the run is low-precision).
    pub bf16_layers: (u64, u64),
    /// Whether the transformer and Mamba layers' kernels are each launched from the host
    /// (and wait on [`DeviceModel::kernel_issue_s`] each): yes unless whole layers replay as
    /// CUDA graphs (`TrainSpec::cuda_graphs`; a graph's replay issues its kernels from the
    /// device). The ends (`ends`) launch from the host either way.
    pub layers_host_launched: bool,
}

impl Workload {
    pub fn new(c: &ParallelConfig, t: &TrainSpec) -> Workload {
        Workload {
            mbs: c.mbs as f64,
            seq: t.seq as f64,
            seq_local: (t.seq / c.cp) as f64,
            cp: c.cp,
            cp_comm: if c.cp > 1 {
                c.cp_comm
            } else {
                plait_spec::CpComm::P2p
            },
            tp: c.tp,
            ep: c.ep,
            etp: c.expert_tp(),
            sp: c.sp && c.tp > 1,
            recompute: c.recompute,
            recompute_modules: c.recompute_modules,
            attention: t.attention,
            dropout: t.dropout,
            e: t.dtype.activation_bytes(),
            linear_format: t.dtype,
            fp8_recipe: t.fp8_recipe(),
            engine: EngineProfile::for_run(t),
            level: 1,
            moe_skew: t.moe_skew.max(1.0),
            moe_capacity: t.moe_capacity,
            attention_span: t.attention_span() as f64,
            lora: t.lora_adapters(),
            moe_dispatcher: c.moe_dispatcher,
            bf16_layers: t.bf16_layers(),
            layers_host_launched: t.cuda_graphs == plait_spec::CudaGraphs::None,
        }
    }

    /// Host time per kernel that the transformer and Mamba layers wait on, on `d`: its
    /// host's issue cost where the layers launch their kernels, none under layer graphs.
    pub fn layer_issue_s(&self, d: &DeviceModel) -> f64 {
        if self.layers_host_launched {
            d.kernel_issue_s
        } else {
            0.0
        }
    }

    /// The same micro-batch with the block linears in bf16 (the layers a low-precision
    /// run keeps there), for [`DeviceModel::sixteen_bit`].
    pub fn in_sixteen_bit(&self) -> Workload {
        Workload {
            linear_format: plait_spec::Dtype::Bf16,
            fp8_recipe: None,
            ..*self
        }
    }

    /// MoE imbalance at this assumption level: balanced at the optimistic end, the user's
    /// skew at the centre, at least Switch Transformer's training capacity factor of 1.25
    /// (Fedus et al. 2021, §2.1: tokens per expert up to 1.25× the balanced share) at the
    /// pessimistic end. With a capacity factor and padding, every expert runs its capacity
    /// at every level: the factor, certain.
    fn skew(&self) -> f64 {
        if let Some(factor) = self.moe_capacity {
            return factor;
        }
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
#[derive(Default, Clone, Copy)]
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
    /// The backward's gradient accumulation of `trainable` parameters (those no fused
    /// weight-gradient GEMM accumulated, [`weight_grad_gemm_s`]), and the slowdown of
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
        // Beside TE's userbuffers the backward's collectives are its bulk overlaps, on the
        // SMs those are given; otherwise NCCL's channels.
        let channels = if userbuffers(w, g) {
            USERBUFFER_BULK_SMS
        } else {
            nccl_channels(g.tp.spans_nodes)
        };
        self.fixed(
            tp_hidden_s * contention_per_overlap_s(w.level, channels, d.sms()),
            0.0,
        );
        accumulate_s
    }
    /// The kernels added since `before` (a copy taken earlier of the same stream).
    fn since(self, before: Kernels) -> Kernels {
        Kernels {
            gpu_s: self.gpu_s - before.gpu_s,
            count: self.count - before.count,
        }
    }
    fn add(self, other: Kernels) -> Kernels {
        Kernels {
            gpu_s: self.gpu_s + other.gpu_s,
            count: self.count + other.count,
        }
    }
    /// A stream of kernels takes the longer of its device time and the time the host takes
    /// to issue them (`issue_s` each: [`Workload::layer_issue_s`]); each scaled by `scale`
    /// ([`Workload::kernel_scale`]). Returns that time and the part of it the device waits
    /// on the launches.
    fn timed(&self, issue_s: f64, scale: f64) -> (f64, f64) {
        let host_s = self.count * issue_s;
        (
            self.gpu_s.max(host_s) * scale,
            (host_s - self.gpu_s).max(0.0) * scale,
        )
    }
}

/// The forward and backward kernels of an elementwise stage over `elements` elements.
fn elementwise(
    fwd: &mut Kernels,
    bwd: &mut Kernels,
    d: &DeviceModel,
    stage: crate::engine::Elementwise,
    elements: f64,
) {
    fwd.fixed(
        d.memory_s(stage.forward_bytes * elements),
        stage.forward_kernels,
    );
    bwd.fixed(
        d.memory_s(stage.backward_bytes * elements),
        stage.backward_kernels,
    );
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

/// Time of the weight-gradient GEMM `wg` (experts grouped or not, as [`expert_gemm_s`]),
/// and the parameters whose gradient it accumulates into the fp32 main gradient in its
/// epilogue (`EngineProfile::fused_grad_accumulation`; zero where a pass of its own adds
/// them, [`Kernels::accumulate_and_contend`]).
///
/// Whether the epilogue's accumulator traffic hides behind the other tiles' main loops
/// depends on the kernel cuBLAS picks (a warp-specialised ping-pong kernel overlaps them, a
/// cooperative or multistage one runs each tile's epilogue after its loop): the
/// optimistic and central ends take the roofline of the whole GEMM, the pessimistic end
/// the accumulator's traffic in series with the GEMM.
fn weight_grad_gemm_s(d: &DeviceModel, w: &Workload, wg: &Gemm, grouped: bool) -> (f64, f64) {
    if w.weight_grad_sixteen_bit() {
        let s = if grouped || wg.count <= 1 {
            d.gemm16_s(wg.m, wg.n, wg.k, wg.count)
        } else {
            wg.count as f64 * d.gemm16_s(wg.m, wg.n, wg.k, 1)
        };
        return (s, 0.0);
    }
    if !w.engine.fused_grad_accumulation {
        return (expert_gemm_s(d, wg, grouped), 0.0);
    }
    let accumulated = (wg.m * wg.n * wg.count) as f64;
    if w.level >= 2 {
        let serial = expert_gemm_s(d, wg, grouped)
            + d.memory_s(GRAD_ACCUMULATE_BYTES_PER_PARAM * accumulated);
        return (serial, accumulated);
    }
    let s = if grouped || wg.count <= 1 {
        d.gemm_accumulate_s(wg.m, wg.n, wg.k, wg.count)
    } else {
        wg.count as f64 * d.gemm_accumulate_s(wg.m, wg.n, wg.k, 1)
    };
    (s, accumulated)
}

/// The GEMMs of linear `g` run as separate linears of the given relative output widths
/// (`EngineProfile::separate_projections`); one width is `g` itself.
fn column_parts<'a>(g: &'a Gemm, widths: &'a [f64]) -> impl Iterator<Item = Gemm> + 'a {
    let total: f64 = widths.iter().sum();
    widths.iter().map(move |w| match widths.len() {
        1 => *g,
        _ => Gemm {
            n: ((g.n as f64 * w / total).round() as u64).max(1),
            ..*g
        },
    })
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

/// One block of the layer list.
///
/// A block holds what its kind says ([`plait_spec::BlockKind`]): attention and MLP, or
/// either half alone (Nemotron-H's `*` and `-` layers: the same kernels, collectives and
/// saved tensors as that half of a transformer block; `transformer`), or a Mamba-2 mixer
/// (`mamba`).
pub fn block_cost(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCost {
    if m.block == BlockKind::Mamba {
        mamba::mamba_block_cost(m, d, g, w)
    } else {
        transformer::transformer_block_cost(m, d, g, w)
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

/// SMs Transformer Engine gives a userbuffers overlap it is not configured for: 1 for a
/// ring exchange (the peers' chunks move by copy engine), 16 for a pipelined or bulk one
/// (TE d0067d0 `pytorch/module/base.py:384`, `get_default_config`). The backward's
/// all-gather beside the dgrad GEMM and reduce-scatter beside the wgrad GEMM are bulk
/// overlaps (`qkv_dgrad`, `qkv_wgrad`, `fc1_dgrad`, `fc1_wgrad`, base.py:358); NeMo's
/// per-model configurations give them 2–24 (`recipes/tp_overlap_configs/userbuffers.py`).
pub(crate) const USERBUFFER_BULK_SMS: f64 = 16.0;
pub(crate) const USERBUFFER_PIPELINE_SMS: f64 = 16.0;
pub(crate) const USERBUFFER_RING_EXCHANGE_SMS: f64 = 1.0;
/// Chunks of a pipelined userbuffers reduce-scatter (TE's default `num_splits`, base.py:387).
pub(crate) const USERBUFFER_PIPELINE_SPLITS: f64 = 4.0;

/// Whether the tp collectives of `w` run in Transformer Engine's userbuffers: the engine
/// overlaps them, with sequence parallelism, and the tp group sits in one node (the
/// buffers map the peers' memory by CUDA IPC).
pub(crate) fn userbuffers(w: &Workload, g: &Groups) -> bool {
    w.tp > 1 && w.sp && w.engine.tp_comm_overlap && !g.tp.spans_nodes
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
