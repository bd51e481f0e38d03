//! A Mamba-2 layer (pre-norm + mixer, Nemotron-H's `M`) for one micro-batch on one GPU, by
//! its own mechanism: the input and output projections as GEMMs split over tp like
//! Megatron-LM's `MambaMixer` (`megatron/core/ssm/mamba_mixer.py`: `in_proj` a
//! column-parallel linear to [z, x, B, C, dt] over `nheads/tp` heads and `ngroups/tp`
//! groups, `out_proj` a row-parallel linear from `d_inner/tp`, so its collectives are those
//! of an attention half), the causal depthwise conv1d as a memory-bound kernel, the SSD
//! chunked scan as the batched matrix products of the Mamba-2 paper's algorithm, and the
//! gating, norm and residual traffic.
//!
//! The SSD algorithm (Dao & Gu 2024, "Transformers are SSMs", §6 "A Hardware-Efficient
//! Algorithm for SSD Models"): the sequence is cut into chunks of Q tokens; for each chunk
//! (1) the diagonal block — per group, C·Bᵀ (Q×N · N×Q, `mamba_ssm` `_bmm_chunk_fwd`
//! computes CB once per group of heads sharing B and C), masked by the decays and
//! multiplied by X per head (Q×Q · Q×P); (2) the chunk's state per head, Xᵀ·B (P×Q · Q×N,
//! `_chunk_state_fwd`); (3) the state passing between chunks, a scan over chunks of the
//! P×N states (`_state_passing_fwd`, elementwise); (4) the off-diagonal output per head,
//! C·state (Q×N · N×P, inside `_chunk_scan_fwd`). Per token that is 2·Q·N per group (1)
//! plus, per head, 2·Q·P (1), 2·N·P (2) and 2·N·P (4): the intra-chunk quadratic term
//! 2·Q·(N·G + P·H) and the inter-chunk 4·N·P·H. The full Q×Q blocks are counted (the
//! paper's cost; the kernels skip only whole tiles above the diagonal).
//!
//! Backward: every product of the scan has two in the backward (as a GEMM has its input
//! and weight gradients), so 2× the forward's scan FLOPs, and `mamba_ssm`'s
//! `_mamba_chunk_scan_combined_bwd` first recomputes CB and the chunk states (and
//! `mamba_split_conv1d_scan_combined`, the memory-efficient path Megatron-LM trains with,
//! recomputes the conv1d output) rather than saving them; the projections' backward is
//! their dgrad and wgrad GEMMs.

use plait_spec::{MambaSpec, ModelSpec, Recompute};

use super::{backward_gemms, Kernels, LayerCost, Phase, Workload, FP32};
use crate::comm::Groups;
use crate::device::DeviceModel;

/// The SSD scan of one micro-batch on one GPU as batched matrix products (m, n, k, count),
/// one field per step of the paper's §6 algorithm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SsdScan {
    /// (1) C·Bᵀ per chunk and group: Q × Q × N.
    pub cb: [f64; 4],
    /// (1) the masked diagonal block times X per chunk and head: Q × P × Q.
    pub diagonal: [f64; 4],
    /// (2) chunk states Xᵀ·B per chunk and head: P × N × Q.
    pub chunk_state: [f64; 4],
    /// (4) C·state per chunk and head: Q × P × N.
    pub state_output: [f64; 4],
    /// (3) bytes of the state passing: each chunk's P × N states per head read in fp32
    /// (`states_in_fp32=True`) and written in the activation format.
    pub state_passing_bytes: f64,
}

impl SsdScan {
    /// The scan over `sequences` sequences of `seq` tokens with `heads` heads and `groups`
    /// groups on this GPU.
    pub fn new(m: &MambaSpec, sequences: f64, seq: f64, heads: f64, groups: f64, e: f64) -> Self {
        let q = (m.chunk as f64).min(seq).max(1.0);
        let chunks = sequences * (seq / q).ceil();
        let (p, n) = (m.head_dim as f64, m.state as f64);
        SsdScan {
            cb: [q, q, n, chunks * groups],
            diagonal: [q, p, q, chunks * heads],
            chunk_state: [p, n, q, chunks * heads],
            state_output: [q, p, n, chunks * heads],
            state_passing_bytes: chunks * heads * p * n * (FP32 + e),
        }
    }

    fn products(&self) -> [[f64; 4]; 4] {
        [self.cb, self.diagonal, self.chunk_state, self.state_output]
    }

    /// Forward FLOPs of the four products.
    pub fn flops(&self) -> f64 {
        self.products()
            .iter()
            .map(|[m, n, k, c]| 2.0 * m * n * k * c)
            .sum()
    }

    /// Forward time: each product a batched 16-bit GEMM (the Triton kernels' `tl.dot` on
    /// bf16 inputs with fp32 accumulation), the state passing a stream.
    fn forward_s(&self, d: &DeviceModel) -> f64 {
        self.products()
            .iter()
            .map(|&[m, n, k, c]| d.gemm16_s(m as u64, n as u64, k as u64, c as u64))
            .sum::<f64>()
            + d.memory_s(self.state_passing_bytes)
    }

    /// Backward time: each product's two gradient products (2× the forward), the state
    /// passing's backward, and the recomputation of CB, the chunk states and their passing
    /// that `_mamba_chunk_scan_combined_bwd` does first.
    fn backward_s(&self, d: &DeviceModel) -> f64 {
        let gemm = |[m, n, k, c]: [f64; 4]| d.gemm16_s(m as u64, n as u64, k as u64, c as u64);
        2.0 * self.products().iter().map(|&p| gemm(p)).sum::<f64>()
            + gemm(self.cb)
            + gemm(self.chunk_state)
            + 2.0 * d.memory_s(self.state_passing_bytes)
    }

    /// Bytes of the fp32 tensors the backward rebuilds and holds: CB and the states.
    fn rebuilt_bytes(&self) -> f64 {
        let [q, _, _, cg] = self.cb;
        let [p, n, _, ch] = self.chunk_state;
        FP32 * (q * q * cg + p * n * ch)
    }
}

/// Forward FLOPs of the SSD scan per token of a sequence of `seq` tokens over the whole
/// mixer (all heads and groups, no tp split): 2·Q·(N·G + P·H) + 4·N·P·H with Q the chunk
/// (at most the sequence). Model-FLOPs counting uses it as attention uses its score FLOPs.
pub fn ssd_scan_flops_per_token(m: &MambaSpec, seq: f64) -> f64 {
    SsdScan::new(m, 1.0, seq, m.heads as f64, m.groups as f64, 2.0).flops() / seq.max(1.0)
}

/// One Mamba-2 layer: pre-norm, mixer, residual add.
pub fn mamba_block_cost(m: &ModelSpec, d: &DeviceModel, g: &Groups, w: &Workload) -> LayerCost {
    let Some(mamba) = m.mamba else {
        return LayerCost::default();
    };
    let e = w.e;
    let t = w.tp as f64;
    let h = m.hidden as f64;
    let tokens = w.tokens();
    let rep = w.replicated(h);
    let full_hidden_bytes = tokens * h * e;
    let dropout_mask = if w.dropout { rep } else { 0.0 };
    let [in_proj, out_proj] = m
        .mamba_gemms(tokens as u64, w.tp)
        .expect("a Mamba block has its mixer's GEMMs");
    let (heads, groups) = (mamba.heads as f64 / t, mamba.groups as f64 / t);
    let d_inner = mamba.d_inner() as f64 / t;
    let conv_channels = mamba.conv_channels() as f64 / t;
    let in_width = mamba.in_proj_width() as f64 / t;
    let scan = SsdScan::new(&mamba, w.mbs, w.seq_local, heads, groups, e);

    let mut fwd = Kernels::default();
    let mut bwd = Kernels::default();
    let mut fwd_phase = Phase::default();
    let mut bwd_phase = Phase::default();

    // Pre-norm (read, write; backward reads the gradient and input, writes one).
    fwd.stream(d, 2.0 * rep * e);
    bwd.stream(d, 3.0 * rep * e);
    fwd.gemm(d, &in_proj);
    // Causal depthwise conv1d with its SiLU over x, B, C (`causal_conv1d_fwd`, activation
    // fused): memory-bound, one read and one write of its channels (the K-tap weights are
    // a few KiB). Backward: the memory-efficient path recomputes it (read, write), then
    // reads the gradient and the input and writes the input gradient (weight and bias
    // gradients in the same kernel).
    let conv_bytes = conv_channels * tokens * e;
    fwd.stream(d, 2.0 * conv_bytes);
    bwd.stream(d, 2.0 * conv_bytes);
    bwd.stream(d, 3.0 * conv_bytes);
    // dt's softplus and the cumulative decays per chunk (`_chunk_cumsum_fwd`): read dt,
    // write dt and its cumulative sum in fp32; the backward mirrors it.
    let dt_bytes = tokens * heads * (e + 2.0 * FP32);
    fwd.stream(d, dt_bytes);
    bwd.stream(d, dt_bytes);
    // The scan: four batched products and the state passing (five kernels).
    fwd.fixed(scan.forward_s(d), 5.0);
    bwd.fixed(scan.backward_s(d), 9.0);
    // The z gate inside the scan's output kernel (read z) and its backward
    // (`_chunk_scan_bwd_dz`: read z, the scan output and the gradient, write dz and the
    // gradient through the gate).
    fwd.stream(d, d_inner * tokens * e);
    bwd.stream(d, 5.0 * d_inner * tokens * e);
    // Gated RMSNorm over d_inner (per group, Megatron-LM's `ExtendedRMSNorm`).
    fwd.stream(d, 2.0 * d_inner * tokens * e);
    bwd.stream(d, 3.0 * d_inner * tokens * e);
    fwd.gemm(d, &out_proj);
    // Residual add (with dropout when the run has it).
    fwd.stream(d, 3.0 * rep * e + dropout_mask);
    bwd.stream(d, 3.0 * rep * e + dropout_mask);

    if w.low_precision() {
        // fp8 operands of the two projections (the in_proj input's cast fused into the
        // norm under Transformer Engine) and their output gradients, as for the block
        // linears of a transformer block.
        let cast = w.cast_bytes_per_element(d.generation);
        fwd.stream(
            d,
            w.norm_fed_cast_bytes_per_element(d.generation) * tokens * h + cast * tokens * d_inner,
        );
        fwd.count += 1.0 + 2.0 * w.extra_cast_kernels();
        bwd.stream(d, cast * tokens * (in_width + h));
        bwd.count += 1.0 + 2.0 * w.extra_cast_kernels();
    }

    // Projections' backward: input and weight gradients (frozen under LoRA: input only),
    // the column-parallel in_proj's input-gradient collective behind its wgrad.
    let mut weight_grad_s = 0.0;
    let mut column_parallel_exposed = 0.0;
    let mut column_parallel_hidden = 0.0;
    let mut fused_accumulated = 0.0;
    for (i, gm) in [in_proj, out_proj].iter().enumerate() {
        let (dg, wg) = backward_gemms(gm);
        let dg_s = d.gemm_s(dg.m, dg.n, dg.k, dg.count);
        let wg_s = if w.lora.is_some() {
            0.0
        } else {
            let (s, fused) = super::weight_grad_gemm_s(d, w, &wg, true);
            fused_accumulated += fused;
            s
        };
        bwd.gpu_s += dg_s + wg_s;
        bwd.count += if w.lora.is_some() { 1.0 } else { 2.0 };
        weight_grad_s += wg_s;
        if i == 0 && w.tp > 1 {
            let (exposed, hidden) =
                super::column_parallel_backward_comm(g, w, full_hidden_bytes, dg_s, wg_s);
            column_parallel_exposed += exposed;
            column_parallel_hidden += hidden;
        }
    }
    // Every mixer weight is split over tp (in_proj, conv1d, A_log, D, dt_bias and the norm
    // weight by heads and groups, out_proj by d_inner); the pre-norm is replicated.
    let norms = (m.block_params() - m.mixer_params()) as f64;
    let params = m.mixer_params() as f64 / t + norms;
    let trainable_params = if w.lora.is_some() { 0.0 } else { params };
    weight_grad_s += bwd.accumulate_and_contend(
        d,
        w,
        g,
        (trainable_params - fused_accumulated).max(0.0),
        column_parallel_hidden,
    );

    // --- communication: that of an attention half (in_proj column-, out_proj row-parallel)
    if w.tp > 1 {
        let ag = g.tp.all_gather_s(full_hidden_bytes);
        let rs = g.tp.reduce_scatter_s(full_hidden_bytes);
        let gemm = |gm: &plait_spec::Gemm| d.gemm_s(gm.m, gm.n, gm.k, gm.count);
        if super::userbuffers(w, g) {
            // Transformer Engine userbuffers, as for the attention half (`layer/mod.rs`):
            // ring-exchange all-gather before in_proj (1 SM), reduce-scatter after out_proj
            // in 4 splits on 16 SMs, one chunk of each exposed.
            let sms = d.sms();
            let mut contention = 0.0;
            let mut overlapped = |comm: f64, splits: f64, gemm_s: f64, channels: f64| {
                let (exposed, slowdown) =
                    super::userbuffer_overlap(comm, splits, gemm_s, channels, w.level, sms);
                contention += slowdown;
                exposed
            };
            let (dg_out, _) = backward_gemms(&out_proj);
            fwd_phase.tp_comm_s =
                overlapped(ag, t, gemm(&in_proj), super::USERBUFFER_RING_EXCHANGE_SMS)
                    + overlapped(
                        rs,
                        super::USERBUFFER_PIPELINE_SPLITS,
                        gemm(&out_proj),
                        super::USERBUFFER_PIPELINE_SMS,
                    );
            bwd_phase.tp_comm_s =
                overlapped(ag, t, gemm(&dg_out), super::USERBUFFER_RING_EXCHANGE_SMS)
                    + column_parallel_exposed;
            fwd.fixed(contention, 0.0);
        } else {
            fwd_phase.tp_comm_s = if w.sp {
                ag + rs
            } else {
                g.tp.all_reduce_s(full_hidden_bytes)
            };
            bwd_phase.tp_comm_s = if w.sp { ag } else { 0.0 } + column_parallel_exposed;
        }
    }
    (fwd_phase.compute_s, fwd_phase.launch_wait_s) =
        fwd.timed(w.layer_issue_s(d), w.kernel_scale());
    (bwd_phase.compute_s, bwd_phase.launch_wait_s) =
        bwd.timed(w.layer_issue_s(d), w.kernel_scale());

    // --- activation memory (per micro-batch) ---
    // What `mamba_split_conv1d_scan_combined` saves (mamba_ssm `ssd_combined.py`,
    // `MambaSplitConv1dScanCombinedFn`): the in_proj output [z, x, B, C, dt] and the scan
    // output before the gate; the conv1d output, CB and the chunk states are recomputed in
    // the backward. Around it: the pre-norm input and in_proj input (hidden-sized, sharded
    // with sp), the gated norm's input and its fp32 1/rms per group, out_proj's input, the
    // dropout mask.
    let saved = 2.0 * rep * e
        + dropout_mask
        + in_width * tokens * e
        + 3.0 * d_inner * tokens * e
        + groups * tokens * FP32;
    // Alive only in the backward: the recomputed conv output, CB and states in fp32, and
    // the gradient of the in_proj output.
    let rebuilt = conv_bytes + scan.rebuilt_bytes() + in_width * tokens * e;
    let (activation_bytes, recompute_phase, rematerialised) = match w.recompute {
        // Selective recomputation reruns attention cores only: a Mamba layer has none.
        Recompute::None | Recompute::Selective => (saved, Phase::default(), 0.0),
        // Only the layer input is kept; the whole forward (with its communication) reruns.
        Recompute::Full => (rep * e, fwd_phase, saved - rep * e),
    };
    LayerCost {
        forward: fwd_phase,
        backward: bwd_phase,
        recompute: recompute_phase,
        activation_bytes,
        transient_bytes: rematerialised + rebuilt,
        weight_grad_s,
        params,
        expert_params: 0.0,
        trainable_params,
        trainable_expert_params: 0.0,
    }
}
