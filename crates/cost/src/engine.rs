//! Engine profiles: what each training engine fuses, overlaps and keeps in memory, with the
//! upstream file and commit (or the paper) behind every entry. The layer and estimate
//! modules ask the profile instead of assuming one ideal implementation.
//!
//! Knows engines' behaviour; knows nothing of shapes or times (those are `layer` and
//! `estimate`). Sources read for this module (git snapshots):
//! * Megatron-LM d98e8a6 (core_v0.15.0rc7-2333), TransformerEngine d0067d0, NeMo 8cfedd7;
//! * DeepSpeed 38327e0 (v0.16.4-6);
//! * PyTorch FSDP1 `torch/distributed/fsdp` (2.1+), Composer 6405188, llm-foundry 8c8dd48
//!   (benchmark script at 5e85bd6, 2024-01-06);
//! * torchtitan v0.2.0 (29624e3);
//! * NCCL 5067397 (`src/graph/tuning.cc`, `src/graph/connect.cc`).

use plait_spec::{Engine, Sdpa, TrainSpec};

use crate::device::AttentionKernel;

/// How a sharded data-parallel engine (ZeRO-3 / FSDP) moves parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShardedParams {
    /// The weights are gathered again before the backward (FSDP FULL_SHARD "unshards before
    /// the backward computation", torch `fsdp/api.py`; DeepSpeed `pre_sub_module_backward_
    /// function` fetches again, `zero/parameter_offload.py:485-500`).
    pub regather_in_backward: bool,
    /// Whether it still re-gathers when the model is also pipelined: torchtitan keeps the
    /// weights gathered from forward to backward under pipelining (`reshard_after_forward
    /// = not pp_enabled`, torchtitan `distributed/fsdp.py:112-136`).
    pub regather_with_pipeline: bool,
    /// Under pipelining the gradients of a stage are reduce-scattered once, after the last
    /// micro-batch's backward, and accumulate unsharded until then, upcast to the reduce
    /// dtype: torch's `PipelineStage.backward_maybe_with_nosync` turns an FSDP2 module's
    /// `set_requires_gradient_sync` and `set_reshard_after_backward` off for every backward
    /// but the last (torch `distributed/pipelining/stage.py`, 2.5 on), and
    /// `FSDPParam.to_accumulated_grad_if_needed` keeps the unsharded gradient in
    /// `reduce_dtype` (`_fully_shard/_fsdp_param.py`).
    pub defers_reduce_with_pipeline: bool,
    /// Parameters an engine prefetches ahead of the unit in use; `None` = the whole next
    /// unit. DeepSpeed's `stage3_prefetch_bucket_size` = 5e7 (`zero/config.py:208`).
    pub prefetch_params: Option<f64>,
    /// Collectives per transformer block and direction: FSDP wraps each block as one unit
    /// (llm-foundry `_fsdp_wrap_fn` returns `isinstance(module, MPTBlock)`; torchtitan
    /// `fully_shard` per TransformerBlock); DeepSpeed fetches per sub-module, the four
    /// linear layers of a block.
    pub collectives_per_block: f64,
    /// The weights are gathered a third time for the recomputed forward of full
    /// recomputation: DeepSpeed's forward hooks fetch and release each sub-module's
    /// parameters also inside the checkpointed re-run (`stage3.py`
    /// `pre_sub_module_forward_function` / `post_sub_module_forward_function` →
    /// `release_sub_module`), and its backward hook fetches them again. FSDP recomputes
    /// inside a unit whose weights its pre-backward hook already gathered.
    pub regather_for_recompute: bool,
    /// Host-side work per collective that grows with the group: eager ops issued per rank
    /// of the group (0 for engines that gather into one flat tensor). See
    /// [`ShardedParams::DEEPSPEED_2021`].
    pub host_ops_per_rank: f64,
    /// Every parameter tensor of a block (biases and norms included) is reduce-scattered by
    /// a collective of its own, rather than in buckets of `collectives_per_block`.
    pub reduce_per_tensor: bool,
    /// Each gathered unit is copied out of the all-gather's flat output into the
    /// parameters' own unsharded storage on the compute stream, before the unit runs: FSDP2
    /// (`fully_shard`), whose `wait_for_unshard` calls `foreach_all_gather_copy_out`
    /// (torch `distributed/fsdp/_fully_shard/_fsdp_collectives.py`, 2.5–2.9:
    /// `split_with_sizes_copy` of the whole output, after the current stream waits on the
    /// all-gather's event). FSDP1 gathers into its `FlatParameter`, whose views the modules
    /// use, and Megatron's and DeepSpeed's flat buffers are likewise used in place. Its
    /// reduce-scatter copy-in (`foreach_reduce_scatter_copy_in`) runs on the reduce-scatter
    /// stream, beside the backward, and is not counted. The breakdown reports the copy with
    /// the unit's exposed gathers (`dp comm (exposed)`): it is the gather's last step.
    pub copies_out_gathers: bool,
}

impl ShardedParams {
    /// DeepSpeed v0.3.13 (c814abdad, March 2021) on PyTorch 1.8, as SC'21 ran ZeRO-3:
    /// * each parameter of at least `param_persistence_threshold` = 1e5 elements (the four
    ///   weight matrices of a GPT block; biases and norms stay gathered) is all-gathered by
    ///   its own `torch.distributed.all_gather` into a list of one view per rank
    ///   (`partition_parameters.py` `_allgather_param`), after a `torch.cuda.synchronize()`;
    ///   `fetch_sub_module` then waits with another (`stage3.py`
    ///   `_synchronize_communication`): the device drains before each gather is issued, so
    ///   the host's issue time is not hidden behind queued kernels;
    /// * every parameter's gradient is reduce-scattered by its own
    ///   `torch.distributed.reduce_scatter` over a list of one view per rank
    ///   (`_reduce_scatter_gradient`);
    /// * PyTorch 1.8's `ProcessGroupNCCL::allgather` and `reduce_scatter` take such lists by
    ///   flattening: one `copy_` per rank into (or out of) a flat buffer, issued by the host
    ///   (`torch/lib/c10d/ProcessGroupNCCL.cpp`, the loops over `outputFlattened[i][j]`) —
    ///   one eager op per rank and collective;
    /// * prefetch: `stage3_prefetch_bucket_size` = 5e7 elements (`stage3.py`).
    pub const DEEPSPEED_2021: ShardedParams = ShardedParams {
        regather_in_backward: true,
        regather_with_pipeline: true,
        defers_reduce_with_pipeline: false,
        prefetch_params: Some(5e7),
        collectives_per_block: 4.0,
        regather_for_recompute: true,
        host_ops_per_rank: 1.0,
        reduce_per_tensor: true,
        copies_out_gathers: false,
    };
}

/// Memory traffic of the cross-entropy loss, bytes per logit element (the LM head's output,
/// 16-bit), and what it keeps for the backward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropy {
    pub forward_bytes: f64,
    pub backward_bytes: f64,
    pub saved_bytes: f64,
    /// Bytes per logit alive beside the saved ones at the loss's peak (its working set).
    pub transient_bytes: f64,
}

impl CrossEntropy {
    /// Megatron-Core's `vocab_parallel_cross_entropy`, its default
    /// (`cross_entropy_loss_fusion = False`, `model_parallel_config.py:320`; NeMo 24.07 has
    /// no such field, its current recipes set it): `.float()` (read 2, write 4), max (read
    /// 4), subtract, exp and divide in place (read and write 4 each), sum (read 4); the
    /// backward scales the saved softmax in place (8) and autograd casts the fp32 gradient
    /// to the 16-bit input's dtype (read 4, write 2) (`tensor_parallel/cross_entropy.py`).
    pub const MEGATRON_UNFUSED: CrossEntropy = CrossEntropy {
        forward_bytes: 2.0 + 4.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0,
        backward_bytes: 8.0 + 6.0,
        saved_bytes: 4.0,
        // The fp32 copy is the saved softmax; the 16-bit logits (forward) or the 16-bit
        // gradient (backward) beside it.
        transient_bytes: 2.0,
    };
    /// flash-attn's Triton cross-entropy, llm-foundry's default `loss_fn:
    /// fused_crossentropy` (`modeling_mpt.py:981` at 5e85bd6): the forward reads the logits
    /// once (online log-sum-exp per row), the backward reads them and writes their gradient.
    pub const FLASH_FUSED: CrossEntropy = CrossEntropy {
        forward_bytes: 2.0,
        backward_bytes: 4.0,
        saved_bytes: 2.0,
        // The logits' gradient.
        transient_bytes: 2.0,
    };
    /// `F.cross_entropy(pred.float(), labels)` (torchtitan `components/loss.py`): the cast
    /// (read 2, write 4), log-softmax's max and sum passes and its output (read 3 × 4, write
    /// 4); backward: the zero-filled NLL gradient (write 4), log-softmax backward (sum pass,
    /// then read gradient and output, write; 16) and the cast back (read 4, write 2).
    pub const TORCH: CrossEntropy = CrossEntropy {
        forward_bytes: 6.0 + 16.0,
        backward_bytes: 4.0 + 16.0 + 6.0,
        saved_bytes: 4.0,
        // Backward: the NLL's fp32 gradient and log-softmax's fp32 input gradient at once
        // (forward: the 16-bit logits and their fp32 copy, 6).
        transient_bytes: 8.0,
    };
    /// `F.cross_entropy(pred.float(), labels)` on logits that tp shards over the vocabulary,
    /// torchtitan's default with tp > 1 (9dec370 `parallel_dims.py:119`,
    /// `loss_parallel_enabled`; `utils.py:200` enters `loss_parallel()`): DTensor runs the
    /// loss as torch's decomposition with all-reduces inserted, op by op in fp32 (torch
    /// 02eef6b `distributed/tensor/parallel/loss.py`, `_log_softmax`: the cast (read 2,
    /// write 4), max (read 4), `x - max` (read 4, write 4), `exp` (read 4, write 4), its sum
    /// (read 4), `shifted - logsumexp` (read 4, write 4); `_nll_loss_and_log_softmax_backward`:
    /// `zeros_like` (write 4), `exp(x)` (read 4, write 4), the sum with the one-hot (read 8,
    /// write 4), the product with the gradient (read 4, write 4), then the cast back (read
    /// 4, write 2)). It keeps the fp32 log-softmax; at its backward peak the zero-filled
    /// gradient, the exponentials and their sum (or the product) are alive beside it.
    pub const TORCH_LOSS_PARALLEL: CrossEntropy = CrossEntropy {
        forward_bytes: 6.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0,
        backward_bytes: 4.0 + 8.0 + 12.0 + 8.0 + 6.0,
        saved_bytes: 4.0,
        transient_bytes: 12.0,
    };
    /// The same loss under `torch.compile` (torchtitan compiles it with the model, e7c0cae
    /// `components/loss.py`; v0.2.2 `[compile] components = ["model", "loss"]`): inductor
    /// fuses the cast, the log-softmax and the NLL into row reductions that read the 16-bit
    /// logits twice (max, then sum of exponentials), and the backward reads them again and
    /// writes their gradient; the logits themselves are what it keeps.
    pub const COMPILED: CrossEntropy = CrossEntropy {
        forward_bytes: 4.0,
        backward_bytes: 4.0,
        saved_bytes: 2.0,
        transient_bytes: 2.0,
    };
}

/// Memory traffic of one elementwise stage (a norm, RoPE), bytes per element of the tensor
/// it transforms (16-bit activations), and the kernels it launches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Elementwise {
    pub forward_bytes: f64,
    pub backward_bytes: f64,
    pub forward_kernels: f64,
    pub backward_kernels: f64,
}

impl Elementwise {
    /// A fused norm (Transformer Engine's `LayerNormLinear`/`RMSNorm`, Apex's fused
    /// LayerNorm, MPT's low-precision `F.layer_norm`, an inductor-compiled norm): the
    /// forward reads the input and writes the output; the backward reads the input and the
    /// output gradient and writes the input gradient (the per-row statistics are a few
    /// bytes per token).
    pub const FUSED_NORM: Elementwise = Elementwise {
        forward_bytes: 4.0,
        backward_bytes: 6.0,
        forward_kernels: 1.0,
        backward_kernels: 1.0,
    };
    /// An eager RMSNorm as torchtitan runs it (its own `RMSNorm` at 9dec370
    /// `models/norms.py`, `nn.RMSNorm` from e7c0cae on, whose eager path is ATen's composite
    /// `rms_norm`: the same chain): `x.float()` (read 2, write 4), `pow(2)` (read 4, write
    /// 4), `mean` (read 4), `x * rsqrt(…)` (read 4, write 4), `type_as` (read 4, write 2),
    /// `* weight` (read 2, write 2): 36 bytes in 6 element-sized kernels (and 2 per-row
    /// ones). Autograd runs each op's backward: the weight's (gradient times weight, read
    /// 2 write 2; the weight gradient's product and sum, read 4 write 2 then read 2), the
    /// cast to fp32 (read 2, write 4), the product's two gradients (read 4 write 4; read 8
    /// write 4, its row sum read 4), `pow`'s (`2·x` read 4 write 4, times the broadcast
    /// gradient read 4 write 4), the sum of the two input gradients (read 8, write 4) and
    /// the cast back (read 4, write 2): 76 bytes in 11 kernels.
    pub const EAGER_RMS_NORM: Elementwise = Elementwise {
        forward_bytes: 6.0 + 8.0 + 4.0 + 8.0 + 6.0 + 4.0,
        backward_bytes: 4.0 + 8.0 + 6.0 + 8.0 + 12.0 + 4.0 + 16.0 + 12.0 + 6.0,
        forward_kernels: 8.0,
        backward_kernels: 11.0,
    };
    /// Megatron-Core's fused RoPE (`apply_rope_fusion`, TE's `FusedRoPEFunc`) and any
    /// compiled RoPE: read and write q or k once, forward and backward.
    pub const FUSED_ROPE: Elementwise = Elementwise {
        forward_bytes: 4.0,
        backward_bytes: 4.0,
        forward_kernels: 1.0,
        backward_kernels: 1.0,
    };
    /// torchtitan's eager `apply_rotary_emb` (9dec370 `models/llama/model.py:87-113`,
    /// v0.2.2 `models/llama3/model/model.py:141-170`): `x.float()` (read 2, write 4), the
    /// complex product with `freqs_cis` (read 4, write 4), `type_as` (read 4, write 2):
    /// 20 bytes in 3 kernels per tensor; the backward mirrors it.
    pub const EAGER_COMPLEX_ROPE: Elementwise = Elementwise {
        forward_bytes: 20.0,
        backward_bytes: 20.0,
        forward_kernels: 3.0,
        backward_kernels: 3.0,
    };
}

/// What "selective" recomputation keeps and reruns, per engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectiveRecompute {
    /// Megatron's (Korthikanti et al. 2022): the attention core alone is recomputed.
    AttentionCore,
    /// torchtitan's op-level policy (`selective_ac_option = "op"`; 9dec370
    /// `parallelisms/parallelize_llama.py` `_save_list`, v0.2.2
    /// `distributed/activation_checkpoint.py`): inside each block it saves the outputs of
    /// the attention kernel and of every odd-numbered matmul (`aten.mm`, counted in
    /// forward order; the policy recomputes "every second mm") and recomputes everything
    /// else: the even-numbered matmuls, the norms, RoPE, the activation, the casts. The
    /// experts' grouped GEMMs are not `aten.mm` and are recomputed too.
    EveryOtherMatmul,
}

/// One engine's behaviour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineProfile {
    pub engine: Engine,
    /// The fused attention kernel (where the run asks for flash attention).
    pub attention: AttentionKernel,
    /// Bias+activation and SwiGLU run as fused kernels (Megatron's `bias_gelu_fusion`,
    /// `bias_swiglu_fusion`); eager engines run `silu`, `mul` (and bias adds) separately.
    pub fused_elementwise: bool,
    /// Transformer Engine fuses the fp8 cast of the qkv and fc1 inputs into the preceding
    /// LayerNorm (`LayerNormLinear`); other fp8 stacks cast in a kernel of their own.
    pub fp8_cast_fused_into_norm: bool,
    /// Bytes per element read+written by the fp8 quantisation of one GEMM operand: read the
    /// 16-bit tensor, write the fp8 copy and its transpose (TE `cast_transpose`; torchao's
    /// dynamic scaling reads the tensor once more for its amax).
    pub fp8_cast_bytes_per_element: f64,
    /// Reads of the 16-bit tensor per block-scaled (MXFP8, NVFP4) quantisation of one GEMM
    /// operand into its row-wise and column-wise copies: 1 where one kernel writes both
    /// (Transformer Engine's MXFP8 quantizer with row- and column-wise usage), 2 where each
    /// copy has a cast of its own (torchao 06f5ff4 `mx_formats/mx_linear.py` `mx_mm`: a dim0
    /// cast of the input in the forward, a dim1 cast of the saved input in the backward,
    /// and the same two of the output gradient).
    pub block_cast_reads: f64,
    /// fp8 copies of the block weights kept beside the 16-bit ones, bytes per parameter (TE
    /// caches a row-wise and a column-wise fp8 copy in `_fp8_workspaces`, `module/base.py`;
    /// torchao casts on the fly and keeps none).
    pub fp8_weight_copy_bytes: f64,
    /// In a low-precision run the linears keep the quantised copy of their input for the
    /// weight-gradient GEMM (1 byte per element for fp8, with its scales for the block
    /// formats) rather than the 16-bit tensor: Transformer Engine's `Linear` saves its
    /// quantised input with only the column-wise data it needs (TE d0067d0
    /// `module/linear.py`, "Discard row-wise data since it is not needed in backward
    /// pass", `saved_inputmat = inputmat`), `LayerNormLinear` its quantised `ln_out`
    /// (`module/layernorm_linear.py`). torchao's float8 training saves the high-precision
    /// input (`matmul_with_hp_or_float8_args.forward`: `ctx.save_for_backward(input_hp,
    /// weight_hp_t)`), as plait's runtime keeps its 16-bit tensors.
    pub saves_quantized_linear_inputs: bool,
    /// The router's probabilities scale the expert activation's output (Megatron-Core
    /// d98e8a6 `transformer/moe/experts.py:955-1010`, `bias_act_func` with
    /// `permuted_probs`), so the combine's unpermute takes no probabilities and keeps no
    /// input for its backward (`token_dispatcher.py:891-899` and `:1460-1467` call `unpermute`
    /// without them), and the fused permute keeps only its row map: a routed token's saved
    /// tensors are its experts' linear inputs and activation inputs alone. Otherwise (the
    /// scores applied to the experts' output, as torchtitan's MoE does) the permuted input
    /// and the experts' output are kept too, in 16 bits.
    pub moe_probs_in_expert_activation: bool,
    /// Bytes per element of gradients in the data-parallel reduction with 16-bit training:
    /// Megatron-LM reduces fp32 main gradients with bf16, NVIDIA's performance recipes bf16
    /// ones (sources at the `megatron` profile), Composer's FSDP `mixed_precision: DEFAULT` reduces in fp32
    /// (`mosaic_parallelism.py:59-98`), torchtitan's `mixed_precision_reduce = "float32"`,
    /// DeepSpeed's `communication_data_type` defaults to the model dtype.
    pub grad_reduce_bf16_bytes: f64,
    /// ZeRO-1/2 gradient reduction overlapped with the backward: DeepSpeed's `overlap_comm`
    /// resolves to `stage == 3` (`zero/config.py:134, 351-354`), so ZeRO-1/2 reduce after
    /// the backward.
    pub overlaps_zero12_reduce: bool,
    pub sharded: ShardedParams,
    /// Megatron overlaps the column-parallel input-gradient all-reduce with the weight
    /// gradient GEMM (`tensor_parallel/layers.py`, async grad all-reduce); DTensor TP
    /// without async-TP runs its collectives in line.
    pub overlaps_tp_backward: bool,
    /// Tensor-parallel collectives overlapped with the GEMMs beside them (Transformer
    /// Engine userbuffers, `tp_comm_overlap`; requires sequence parallelism). Megatron's
    /// default is off (`model_parallel_config.py:265`), NeMo's performance recipes turn it
    /// on for the large models that use tp (gpt3_175b.py:230, llama3_70b.py:232,
    /// llama31_405b.py:239): the profile follows NeMo.
    pub tp_comm_overlap: bool,
    /// The overlap of `tp_comm_overlap` covers the backward's collectives too (Transformer
    /// Engine's ring-exchange all-gathers before the row-parallel dgrad GEMMs); torchtitan's
    /// async TP pipelines the forward's only.
    pub tp_comm_overlap_in_backward: bool,
    /// fp8 runs gather the tp-sharded inputs of the linears in fp8 (torchtitan's float8
    /// tensorwise tp); Transformer Engine gathers the 16-bit activations (its fp8 cast is
    /// fused into the norm before the gather's consumer).
    pub fp8_tp_all_gather: bool,
    /// Pipeline sends and receives of the interleaved schedule overlap compute (NeMo's
    /// comm-overlap callback sets `overlap_p2p_comm` when vp > 1,
    /// `megatron_comm_overlap.py:153-157`; Megatron turns it off without interleaving,
    /// `arguments.py:1001-1016`).
    pub overlaps_interleaved_p2p: bool,
    /// The block weights of an fp8 or MXFP8 run are kept in Transformer Engine's quantised
    /// storage and gathered as such (per-tensor fp8 in 1 byte; MXFP8 through the 16-bit
    /// gradient buffer under the distributed optimizer; `estimate::weights` says what each
    /// step does with them) rather than as 16-bit weights cast each step: NeMo's fp8 recipes
    /// set `fp8_param_gather = True` (NeMo 8cfedd7 `recipes/precision/mixed_precision.py`
    /// lines 70 and 101, `bf16_with_fp8_mixed`, `bf16_with_mxfp8_mixed`; it has no NVFP4
    /// recipe), so Megatron's distributed optimizer gathers the Transformer Engine fp8
    /// weights (Megatron-LM d98e8a6 `--fp8-param-gather`). Off in Megatron-LM's
    /// own defaults, Composer's FSDP, DeepSpeed and torchtitan's
    /// (`enable_fsdp_float8_all_gather = False`, `config/job_config.py`), which a run turns
    /// on with `TrainSpec::float8_all_gather` (`for_run`).
    pub fp8_param_gather: bool,
    /// The local experts' GEMMs run as one grouped GEMM (tiles of all experts share the
    /// waves over the SMs) rather than one GEMM per expert. Megatron-Core's field defaults
    /// to off (`transformer_config.py`, `moe_grouped_gemm=False`), but its MoE runs turn it
    /// on: Megatron-LM d98e8a6's own MoE scripts (`examples/mixtral/
    /// train_mixtral_8x7b_distributed.sh`, `examples/gptoss/02_train.sh`,
    /// `examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh`) and NeMo 8cfedd7's model
    /// configs (`deepseek.py`, `qwen3.py`, `gpt_oss.py`, Llama 4 in `llama.py`; its Mixtral
    /// recipe alone leaves it off, which its runs at one expert per GPU never feel), so the
    /// `megatron` profile groups and its export writes `--moe-grouped-gemm`. torchtitan's
    /// `GroupedExperts` (`use_grouped_mm = True`, `torch._grouped_mm`) and llm-foundry's
    /// MegaBlocks experts group them as well; DeepSpeed-MoE and plait's runtime loop over
    /// their experts, and the 2021 engines had none.
    pub grouped_expert_gemm: bool,
    /// The weight-gradient GEMMs accumulate into the fp32 main gradient in their epilogue
    /// (cuBLAS with beta = 1), so the accumulation's traffic is part of the GEMM's roofline
    /// rather than a pass of its own: Megatron-LM's `gradient_accumulation_fusion`, on by
    /// default (d98e8a6 `arguments.py`, `--no-gradient-accumulation-fusion`; Transformer
    /// Engine's `fuse_wgrad_accumulation`), added on 2022-02-16 (83b1e42f30), after SC'21.
    /// DeepSpeed's ZeRO hooks, FSDP and eager PyTorch add each gradient in a kernel of
    /// their own.
    pub fused_grad_accumulation: bool,
    /// The loss kernel(s) after the LM head.
    pub cross_entropy: CrossEntropy,
    /// The loss the engine runs instead of `cross_entropy` where tp shards the LM head's
    /// output over the vocabulary (torchtitan's `loss_parallel`); `None`: the same code
    /// either way (Megatron's `vocab_parallel_cross_entropy`) or no such engine path.
    pub cross_entropy_loss_parallel: Option<CrossEntropy>,
    /// The pre-attention and pre-MLP norms (and the final one).
    pub norm: Elementwise,
    /// Rotary embedding of q and k.
    pub rope: Elementwise,
    /// Grouped-query attention's keys and values are copied out to every query head before
    /// the attention kernel: torchtitan's `repeat_kv` (9dec370 `models/llama/model.py:201`,
    /// e7c0cae `models/llama3/model.py:250`) feeds SDPA full-width k and v; the fused
    /// kernels of the other engines read the shared heads in place.
    pub repeats_kv_heads: bool,
    /// The query, key and value projections, and the gate and up projections of a gated
    /// MLP, run as separate linears over the same input rather than one fused GEMM each:
    /// torchtitan's Llama has `wq`, `wk`, `wv` and `w1`, `w3` as `nn.Linear`s of their own
    /// (9dec370 `models/llama/model.py:158-162, 248-250`), so each is a GEMM of its own
    /// width (the key and value ones narrow under grouped-query attention and tp), their
    /// input gradients are summed by autograd, and each is a matmul of its own in
    /// torchtitan's op-level selective recomputation. Megatron-Core (`linear_qkv`,
    /// `linear_fc1`) and llm-foundry's MPT (`Wqkv`) fuse them.
    pub separate_projections: bool,
    /// What selective recomputation reruns.
    pub selective: SelectiveRecompute,
    /// How context parallelism combines the attention of a rank's queries over the key
    /// chunks, in memory traffic on the compute stream.
    pub cp_merge: CpMerge,
    /// Context parallelism's backward gathers the keys and values again and returns their
    /// gradients around the ring in fp32, one exchange per step after that step's kernel,
    /// whichever way the forward rotated them: PyTorch's experimental context parallelism
    /// (torch 2.6.0, git 2236df1, `distributed/tensor/experimental/_attention.py`,
    /// `_templated_ring_attention_backward`: fp32 `grad_key`/`grad_value` under
    /// `convert_to_f32`, `dkv_rotater = _create_rotater(pg, 2, method=ALL_TO_ALL)`, `size`
    /// exchanges, the last waited on after the loop). Transformer Engine reduce-scatters
    /// 16-bit gradients (all-gather variant) or passes them in 16 bits (ring).
    pub cp_grads_ring_fp32: bool,
    /// Context parallelism's collectives are waited on where they are issued, so none
    /// overlaps attention: PyTorch's context parallelism under `torch.compile` (torch 2.6.0
    /// `distributed/_functional_collectives.py` `_maybe_wrap_tensor`: while tracing every
    /// functional collective is followed by its `wait_tensor`; `_inductor/config.py`
    /// `reorder_for_compute_comm_overlap = False`, so inductor does not move the waits).
    /// Eager, the same code overlaps each exchange with the next step's kernel.
    pub cp_collectives_in_line: bool,
}

/// The memory traffic of context parallelism's per-chunk merges, bytes per element of the
/// rank's attention output (queries × heads × head dim).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpMerge {
    /// Each forward step after the first (a partial output merged into the running one).
    pub forward_per_step: f64,
    /// Each backward step (the chunk's gradients added into the accumulated ones).
    pub backward_per_step: f64,
    /// Once per forward (the first step's cast and the final one).
    pub forward_fixed: f64,
    /// Once per backward (the zeroed accumulators and the casts back).
    pub backward_fixed: f64,
}

impl CpMerge {
    /// Transformer Engine: its ring corrects the output inside fused kernels
    /// (`flash_attn_fwd_out_correction`) and its all-gather variant runs one kernel per
    /// query half over the gathered keys; counted as no extra traffic.
    pub const FUSED: CpMerge = CpMerge {
        forward_per_step: 0.0,
        backward_per_step: 0.0,
        forward_fixed: 0.0,
        backward_fixed: 0.0,
    };
    /// PyTorch's experimental context parallelism (`torch/distributed/tensor/experimental/
    /// _attention.py`, `_cp_options.convert_to_f32 = True`), which torchtitan uses: each
    /// step's output is cast to fp32 (read 2, write 4) and merged by `out - sigmoid(lse_b -
    /// lse) * (out - out_b)` in three fp32 element-wise ops (read 8 write 4, read 4 write 4,
    /// read 8 write 4): 38 bytes; the backward adds each step's 16-bit dq, dk and dv into
    /// fp32 accumulators (read 4 + 2, write 4 each; k and v as wide as q after `repeat_kv`)
    /// and concatenates dk and dv for the rotation (read 8, write 8 per element of each):
    /// 30 + 16 = 46 bytes. Fixed: the first step's cast and the cast back of the output
    /// (6 + 6), and the three zeroed fp32 accumulators and their casts back (3 × (4 + 6)).
    /// Half-chunk steps of the round-robin load balance touch half the rows but copy the
    /// whole tensor back (`_partial_update`'s `torch.cat`); they are counted as whole steps.
    pub const PYTORCH_FP32: CpMerge = CpMerge {
        forward_per_step: 38.0,
        backward_per_step: 46.0,
        forward_fixed: 12.0,
        backward_fixed: 30.0,
    };
}

impl EngineProfile {
    /// The profile of `engine`, compiled with `torch.compile` when `compile` is set (only
    /// engines that [`Engine::compiles`] accept it; the request is checked where it is
    /// parsed). Inductor fuses what the eager engine runs op by op: the norms, RoPE, the
    /// SwiGLU product and the loss. It cannot fuse into the attention kernel (an extern
    /// call), so torchtitan's repeated k and v heads are still written out.
    ///
    /// `async_tp` (torchtitan's `enable_async_tensor_parallel`, which needs the compile)
    /// lets inductor's micro-pipelining pass (`torch._inductor.config._micro_pipeline_tp`,
    /// torchtitan v0.2.2 `distributed/tensor_parallel.py`) fuse the all-gather → matmul and
    /// matmul → reduce-scatter pairs of the sequence-parallel blocks into chunked pipelines
    /// over symmetric memory whose copies run on the copy engines
    /// (`torch.distributed._symmetric_memory` `_fused_all_gather_matmul`,
    /// `_fused_matmul_reduce_scatter`). Its authors measured "up to ~29 % forward pass
    /// speedup and ~8 % E2E speedup in Llama3 7B", ~20 % and ~8 % in 70B (PyTorch
    /// dev-discuss, "[Distributed w/ TorchTitan] Introducing Async Tensor Parallelism in
    /// PyTorch", 2024): costed as the chunked overlap of Transformer Engine's userbuffers
    /// in the forward and the recomputed forward, the backward's collectives in line.
    ///
    /// `compile_loss` compiles the loss as well (`TrainSpec::compile_loss`); without it the
    /// loss keeps the eager engine's kernels and memory.
    pub fn for_run(t: &TrainSpec) -> EngineProfile {
        let (engine, compile, compile_loss, async_tp) =
            (t.engine, t.compile, t.compile_loss, t.async_tp);
        let mut eager = EngineProfile::of(engine);
        // PyTorch's SDPA backend, where the engine calls it.
        if t.sdpa == Sdpa::Cudnn && engine.calls_sdpa() {
            eager.attention = AttentionKernel::CudnnSdpa;
        }
        // torchao's float8 all-gather under FSDP (tensor-wise only).
        if t.gathers_float8() {
            eager.fp8_param_gather = true;
        }
        // Megatron-Core left at its 16-bit weights (`TrainSpec::sixteen_bit_weights`): gathered
        // in 16 bits, and Transformer Engine caches a row-wise and a column-wise quantised copy
        // of each beside it across the step's micro-batches (Megatron-Core passes
        // `is_first_microbatch`, `extensions/transformer_engine.py:1338`; TE d0067d0
        // `module/linear.py` keeps them in `_fp8_workspaces`), as under DeepSpeed and FSDP.
        if t.sixteen_bit_weights {
            eager.fp8_param_gather = false;
            eager.fp8_weight_copy_bytes = 2.0;
        }
        if !compile || !engine.compiles() {
            return eager;
        }
        EngineProfile {
            fused_elementwise: true,
            norm: Elementwise::FUSED_NORM,
            rope: Elementwise::FUSED_ROPE,
            cross_entropy: if compile_loss {
                CrossEntropy::COMPILED
            } else {
                eager.cross_entropy
            },
            // The compiled loss replaces the eager one, sharded or not.
            cross_entropy_loss_parallel: if compile_loss {
                None
            } else {
                eager.cross_entropy_loss_parallel
            },
            tp_comm_overlap: async_tp,
            tp_comm_overlap_in_backward: false,
            // Compiled blocks trace PyTorch's context parallelism, waits and all.
            cp_collectives_in_line: eager.cp_grads_ring_fp32,
            ..eager
        }
    }

    pub fn of(engine: Engine) -> EngineProfile {
        let megatron = EngineProfile {
            engine,
            attention: AttentionKernel::CudnnFused,
            fused_elementwise: true,
            fp8_cast_fused_into_norm: true,
            // read 2, write 1 (fp8) + 1 (fp8 transpose for the wgrad GEMM).
            fp8_cast_bytes_per_element: 4.0,
            block_cast_reads: 1.0,
            // NeMo's fp8 recipe (`bf16_with_fp8_mixed`, `fp8_param_gather=True`,
            // recipes/precision/mixed_precision.py:56-71) keeps only the fp8 copies (row- and
            // column-wise, 2 bytes like the 16-bit weight they replace) next to the fp32
            // master weights of the optimizer: no extra bytes.
            fp8_weight_copy_bytes: 0.0,
            saves_quantized_linear_inputs: true,
            moe_probs_in_expert_activation: true,
            // NVIDIA's performance configurations reduce gradients in bf16: NeMo 8cfedd7
            // `scripts/performance/helpers.py` `set_precision_configs`
            // (`grad_reduce_in_fp32 = False`; for fp8 runs since 81d94d1501, Feb 2025, and
            // in Mixtral's `pretrain_performance_optimizations`), and the NeMo launcher's
            // `conf/training/gpt3/175b_fp8_performance.yaml` (`grad_sync_dtype: bf16`).
            // Megatron-LM alone reduces bf16 runs in fp32 (`arguments.py` sets
            // `accumulate_allreduce_grads_in_fp32`); `megatron-2021` keeps that.
            grad_reduce_bf16_bytes: 2.0,
            overlaps_zero12_reduce: true,
            sharded: ShardedParams {
                regather_in_backward: true,
                regather_with_pipeline: true,
                defers_reduce_with_pipeline: false,
                prefetch_params: None,
                collectives_per_block: 1.0,
                regather_for_recompute: false,
                host_ops_per_rank: 0.0,
                reduce_per_tensor: false,
                copies_out_gathers: false,
            },
            overlaps_tp_backward: true,
            tp_comm_overlap: true,
            tp_comm_overlap_in_backward: true,
            fp8_tp_all_gather: false,
            overlaps_interleaved_p2p: true,
            grouped_expert_gemm: true,
            fp8_param_gather: true,
            fused_grad_accumulation: true,
            cross_entropy: CrossEntropy::MEGATRON_UNFUSED,
            cross_entropy_loss_parallel: None,
            norm: Elementwise::FUSED_NORM,
            rope: Elementwise::FUSED_ROPE,
            repeats_kv_heads: false,
            separate_projections: false,
            selective: SelectiveRecompute::AttentionCore,
            cp_merge: CpMerge::FUSED,
            cp_grads_ring_fp32: false,
            cp_collectives_in_line: false,
        };
        match engine {
            Engine::Megatron => megatron,
            // Megatron-DeepSpeed: Megatron's fused kernels with FlashAttention-2, ZeRO from
            // DeepSpeed.
            Engine::Deepspeed => EngineProfile {
                moe_probs_in_expert_activation: false,
                attention: AttentionKernel::Flash2,
                grouped_expert_gemm: false,
                fp8_weight_copy_bytes: 2.0,
                grad_reduce_bf16_bytes: 2.0,
                overlaps_zero12_reduce: false,
                sharded: ShardedParams {
                    regather_in_backward: true,
                    regather_with_pipeline: true,
                    defers_reduce_with_pipeline: false,
                    prefetch_params: Some(5e7),
                    collectives_per_block: 4.0,
                    // The recomputed forward runs the sub-modules' fetch/release hooks
                    // too (`zero/parameter_offload.py` `_pre_forward_module_hook`,
                    // `_post_forward_module_hook`).
                    regather_for_recompute: true,
                    // `all_gather_into_tensor` / `reduce_scatter_tensor` on flat buffers
                    // (`zero/partition_parameters.py`, `stage3.py` `__avg_scatter_grads`),
                    // gradients in buckets of `reduce_bucket_size`.
                    host_ops_per_rank: 0.0,
                    reduce_per_tensor: false,
                    copies_out_gathers: false,
                },
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
            // llm-foundry on Composer: eager PyTorch, Triton flash attention, TE linears for
            // fp8 (`fc_type='te'`) without the norm fusion.
            Engine::Fsdp => EngineProfile {
                moe_probs_in_expert_activation: false,
                grad_reduce_bf16_bytes: 4.0,
                attention: AttentionKernel::Triton,
                cross_entropy: CrossEntropy::FLASH_FUSED,
                // TE linears keep the 16-bit weight and cache its fp8 copies.
                fp8_weight_copy_bytes: 2.0,
                fused_elementwise: false,
                fp8_cast_fused_into_norm: false,
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
            // torchtitan: SDPA's flash backend, eager, torchao float8 (dynamic tensor-wise
            // scaling: amax pass + cast + transposed cast), DTensor TP in line. Flash is
            // SDPA's default on Hopper in the PyTorch of torchtitan's published runs (2.5.1
            // through 2.9, read from the release wheels' `select_sdp_backend`); from 2.10 with
            // cuDNN ≥ 9.15.1, and in 2.11's cu130 wheels, cuDNN attention comes first (it ran
            // for a torchtitan block on the H200, `scripts/h200_kernels.py block`): the run
            // says so with `TrainSpec::sdpa` (`for_run`).
            Engine::Torchtitan => EngineProfile {
                moe_probs_in_expert_activation: false,
                grad_reduce_bf16_bytes: 4.0,
                attention: AttentionKernel::Flash2,
                fused_elementwise: false,
                fp8_cast_fused_into_norm: false,
                fp8_cast_bytes_per_element: 6.0,
                block_cast_reads: 2.0,
                fp8_weight_copy_bytes: 0.0,
                saves_quantized_linear_inputs: false,
                cross_entropy: CrossEntropy::TORCH,
                cross_entropy_loss_parallel: Some(CrossEntropy::TORCH_LOSS_PARALLEL),
                norm: Elementwise::EAGER_RMS_NORM,
                rope: Elementwise::EAGER_COMPLEX_ROPE,
                repeats_kv_heads: true,
                separate_projections: true,
                selective: SelectiveRecompute::EveryOtherMatmul,
                cp_merge: CpMerge::PYTORCH_FP32,
                cp_grads_ring_fp32: true,
                fp8_tp_all_gather: true,
                sharded: ShardedParams {
                    regather_with_pipeline: false,
                    defers_reduce_with_pipeline: true,
                    copies_out_gathers: true,
                    ..megatron.sharded
                },
                overlaps_tp_backward: false,
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
            // Megatron-LM of 2021–22 (SC'21, Korthikanti et al.): Megatron's fused kernels
            // and dgrad/wgrad overlap, but neither Transformer Engine's userbuffers (TE came
            // in 2022) nor `overlap_p2p_comm` (added with Megatron-Core).
            Engine::MegatronLm2021 => EngineProfile {
                attention: AttentionKernel::Flash2,
                grouped_expert_gemm: false,
                grad_reduce_bf16_bytes: 4.0,
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
            // DeepSpeed of March 2021 driving Megatron-LM's GPT (SC'21 Table 2): that
            // Megatron's kernels, ZeRO-3 as `ShardedParams::DEEPSPEED_2021` describes.
            Engine::Deepspeed2021 => EngineProfile {
                attention: AttentionKernel::Flash2,
                grouped_expert_gemm: false,
                grad_reduce_bf16_bytes: 2.0,
                overlaps_zero12_reduce: false,
                sharded: ShardedParams::DEEPSPEED_2021,
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
            // plait's runtime: eager, in-line collectives.
            Engine::Plait => EngineProfile {
                moe_probs_in_expert_activation: false,
                saves_quantized_linear_inputs: false,
                grouped_expert_gemm: false,
                grad_reduce_bf16_bytes: 4.0,
                attention: AttentionKernel::Flash2,
                cross_entropy: CrossEntropy::TORCH,
                fused_elementwise: false,
                fp8_cast_fused_into_norm: false,
                overlaps_tp_backward: false,
                tp_comm_overlap: false,
                overlaps_interleaved_p2p: false,
                fp8_param_gather: false,
                fused_grad_accumulation: false,
                ..megatron
            },
        }
    }
}

/// NCCL channels (one thread block, i.e. one SM, each) a ring collective occupies: 24 inside
/// an 8-GPU NVSwitch node, 16 across nodes with 8 NICs (NCCL 5067397 `connect.cc:460-476`
/// and `search.cc`; logs in NVIDIA/nccl-tests#100 (`Channel 00/24`, HGX A100) and
/// NVIDIA/nccl#1453 (`Channel xx/16`, 3 × 8 H100)).
pub fn nccl_channels(spans_nodes: bool) -> f64 {
    if spans_nodes {
        16.0
    } else {
        24.0
    }
}

/// Lee et al. 2025 ("Characterizing Compute-Communication Overlap in GPU-Accelerated
/// Distributed Deep Learning", abstract; A100/H100/MI250/MI210): overlapped compute slows
/// by 18.9 % on average and 40 % at most. Their ratio scales the central slowdown to the
/// pessimistic end.
const WORST_OVER_MEAN_OVERLAP_SLOWDOWN: f64 = 40.0 / 18.9;

/// Compute slowed by a collective running beside it, per second of overlap, at the three
/// assumption levels (optimistic, central, pessimistic): none; the SMs the collective's
/// channels take (`channels / SMs`, which for NCCL's 16–24 channels on 108–132 SMs is
/// 12–22 %, around Lee et al.'s 18.9 % mean); that times their worst-over-mean ratio.
pub fn contention_per_overlap_s(level: usize, channels: f64, sms: f64) -> f64 {
    let central = channels / sms;
    match level {
        0 => 0.0,
        1 => central,
        _ => central * WORST_OVER_MEAN_OVERLAP_SLOWDOWN,
    }
}
