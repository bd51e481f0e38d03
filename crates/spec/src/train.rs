//! What to train: the batch and its numeric format, the engine, the task (pre-training,
//! SFT, LoRA), and the keywords a configuration uses (recompute, schedule). The parallel
//! configuration itself is `config`'s.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

keyword_enum!(
    /// Numeric format of weights and GEMM inputs (mixed precision with fp32 master weights).
    /// `fp8` is per-tensor scaled FP8 (Hopper and later); `mxfp8` (32-element blocks with
    /// E8M0 scales) and `nvfp4` (E2M1 in 16-element blocks with E4M3 scales and a per-tensor
    /// fp32 scale) are Blackwell's block-scaled formats (Transformer Engine d0067d0
    /// `common/recipe/__init__.py`, `MXFP8BlockScaling`, `NVFP4BlockScaling`). Each runs the
    /// block linears in that format; activations stay 16-bit.
    Dtype { Bf16 => "bf16", Fp16 => "fp16", Fp8 => "fp8", Mxfp8 => "mxfp8", Nvfp4 => "nvfp4" }
);
keyword_enum!(
    /// Activation recomputation: none, selective (the attention core, Korthikanti et al., or
    /// under Megatron-Core the modules of `ParallelConfig::recompute_modules`), or full
    /// (only each layer's input is kept).
    Recompute { None => "none", Selective => "selective", Full => "full" }
);
keyword_enum!(
    /// A sub-module Megatron-Core recomputes under selective recomputation
    /// (`recompute_modules`, Megatron-LM d98e8a6 `transformer_config.py:560`): the attention
    /// core; the experts' activation function; the separate norms (`input_layernorm`,
    /// `pre_mlp_layernorm` where they are modules of their own); MLA's up projections and
    /// RoPE; the dense MLP; the whole MoE layer; its shared experts.
    RecomputeModule {
        CoreAttn => "core_attn",
        MoeAct => "moe_act",
        Layernorm => "layernorm",
        MlaUpProj => "mla_up_proj",
        Mlp => "mlp",
        Moe => "moe",
        SharedExperts => "shared_experts",
    }
);

/// The set of [`RecomputeModule`]s selective recomputation reruns; Megatron-Core's default is
/// the attention core alone (`recompute_modules = ["core_attn"]`, `transformer_config.py:1941`).
/// Written `core_attn+mla_up_proj+moe` (module keywords joined by `+`, in [`RecomputeModule::ALL`]
/// order); serialised as that string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecomputeModules(u8);

impl RecomputeModules {
    /// The attention core alone: what `recompute = selective` means without a module list.
    pub const CORE_ATTN: RecomputeModules = RecomputeModules(1);

    fn bit(m: RecomputeModule) -> u8 {
        1 << RecomputeModule::ALL
            .iter()
            .position(|&x| x == m)
            .unwrap_or(0)
    }

    /// The set of `modules`.
    pub fn of(modules: &[RecomputeModule]) -> RecomputeModules {
        RecomputeModules(modules.iter().fold(0, |b, &m| b | Self::bit(m)))
    }

    pub fn contains(self, m: RecomputeModule) -> bool {
        self.0 & Self::bit(m) != 0
    }

    /// The modules, in [`RecomputeModule::ALL`] order.
    pub fn modules(self) -> impl Iterator<Item = RecomputeModule> {
        RecomputeModule::ALL
            .iter()
            .copied()
            .filter(move |&m| self.contains(m))
    }

    pub fn is_default(self) -> bool {
        self == RecomputeModules::CORE_ATTN
    }
}

impl Default for RecomputeModules {
    fn default() -> Self {
        RecomputeModules::CORE_ATTN
    }
}

impl fmt::Display for RecomputeModules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.modules().map(|m| m.keyword()).collect();
        f.write_str(&names.join("+"))
    }
}

impl FromStr for RecomputeModules {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let mut modules = Vec::new();
        for part in s.split('+') {
            let m: RecomputeModule = part.trim().parse().map_err(|_| {
                format!(
                    "`{part}` is not a recompute module (allowed: {}, joined by +)",
                    RecomputeModule::allowed()
                )
            })?;
            if modules.contains(&m) {
                return Err(format!("recompute module `{m}` is given twice"));
            }
            modules.push(m);
        }
        Ok(RecomputeModules::of(&modules))
    }
}

impl Serialize for RecomputeModules {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RecomputeModules {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

keyword_enum!(
    /// How context parallelism moves the sequence for attention (Megatron-Core's
    /// `--cp-comm-type`, Megatron-LM d98e8a6 `arguments.py`; Transformer Engine d0067d0
    /// `attention/dot_product_attention/context_parallel.py`):
    /// * `p2p` — ring attention: each rank passes its key/value chunk round the ring,
    ///   overlapped with the attention of the chunk already present
    ///   (`AttnFuncWithCPAndKVP2P`);
    /// * `a2a` — DeepSpeed-Ulysses (Jacobs et al. 2023): an all-to-all turns q, k, v from
    ///   sequence-split to head-split, attention runs over the whole sequence for heads /
    ///   cp heads, and an all-to-all turns the output back (`AttnFuncWithCPAndQKVOA2A`);
    ///   the heads must split over tp × cp;
    /// * `allgather` — the key/value chunks are all-gathered before attention and their
    ///   gradients reduce-scattered after it, as Llama 3 trained (Llama Team 2024, §3.3.2;
    ///   `AttnFuncWithCPAndKVAllGather`).
    CpComm { P2p => "p2p", A2a => "a2a", Allgather => "allgather" }
);
/// Pipeline schedule: the kind and its rules are `plait-schedule`'s.
pub use plait_schedule::ScheduleKind as Schedule;
keyword_enum!(
    /// How attention is computed: a fused flash-attention kernel, or the unfused
    /// matmul–softmax–dropout–matmul chain of older Megatron-LM (SC'21, Korthikanti et al.).
    AttentionImpl { Flash => "flash", Unfused => "unfused" }
);

keyword_enum!(
    /// The backend PyTorch's `scaled_dot_product_attention` runs where an engine calls it
    /// (torchtitan): FlashAttention-2, SDPA's default on Hopper from PyTorch 2.5.1 through
    /// 2.9 (the PyTorch of torchtitan's published runs), or cuDNN attention, which 2.10
    /// puts first on Hopper and Blackwell with cuDNN ≥ 9.15.1 and 2.11's cu130 wheels
    /// always (`select_sdp_backend`'s priority order, read from the release wheels).
    Sdpa { Flash => "flash", Cudnn => "cudnn" }
);

keyword_enum!(
    /// Which of a Megatron-Core run's layers replay as CUDA graphs (Megatron-LM d98e8a6
    /// `transformer_config.py`, `cuda_graph_impl`): `none`, every kernel launched from the
    /// host; `layers`, whole layers replayed forward and backward (`"local"` with its default
    /// modules, or `"full_iteration"`), so no layer waits on its kernels' launches. Partial
    /// scopes (`attn`, `moe_router`, …) leave the experts launched from the host: `none`.
    #[derive(Default)]
    CudaGraphs { #[default] None => "none", Layers => "layers" }
);

keyword_enum!(
    /// The format of Adam's state (master weights, momentum, variance) the optimizer keeps
    /// per trainable parameter: `fp32` (mixed-precision Adam, 12 bytes: Rajbhandari et al.
    /// 2020, ZeRO, §3.1) or `bf16` (6 bytes: Apex's `DistributedFusedAdam` with
    /// `dtype=torch.bfloat16`, its "datatype for optimizer state", which stores the master
    /// shard and both moments in it; NeMo's `distributed_fused_adam` passes `dtype`
    /// through, `nemo/core/optim/distributed_adam.py` at NVIDIA/NeMo 014d03cf, and
    /// NeMo-Framework-Launcher's SFT config sets `dtype: bf16`,
    /// `launcher_scripts/conf/peft/llama/sft.yaml` at 0da9ad9c).
    #[derive(Default)]
    OptimizerState { #[default] Fp32 => "fp32", Bf16 => "bf16" }
);

impl OptimizerState {
    /// Bytes per trainable parameter of Adam's master weights, momentum and variance.
    pub fn bytes_per_param(self) -> f64 {
        match self {
            OptimizerState::Fp32 => 12.0,
            OptimizerState::Bf16 => 6.0,
        }
    }
}

fn is_default_optimizer_state(s: &OptimizerState) -> bool {
    *s == OptimizerState::Fp32
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

keyword_enum!(
    /// How an fp8 run scales its tensors, as the engine's quantiser runs it (`--dtype fp8`
    /// only; the block formats `mxfp8`/`nvfp4` are dtypes of their own). Transformer
    /// Engine's recipes (Megatron-Core's `fp8_recipe`, Megatron-LM d98e8a6
    /// `transformer_config.py:594`, default `delayed`; TE d0067d0 `common/recipe`):
    /// `delayed` (`DelayedScaling`: each tensor cast with a scale from earlier steps' amax
    /// history, the cast fused into the norm before qkv and fc1), `tensorwise`
    /// (`Float8CurrentScaling`: one scale per tensor from its own amax this step) and
    /// `blockwise` (`Float8BlockScaling`: a scale per 1×128 tile of activations and
    /// gradients and per 128×128 block of weights, DeepSeek-V3's). torchao's float8
    /// training (torchtitan's `[float8] recipe_name`; torchao 36027d8 `float8/config.py`,
    /// `Float8LinearConfig.from_recipe_name`): `tensorwise` (its default: dynamic scaling,
    /// one scale per tensor), `rowwise` (one scale per row of every operand of all three
    /// GEMMs, rounded to a power of two) and `rowwise-gw-hp` (`rowwise_with_gw_hp`:
    /// row-wise forward and input-gradient GEMMs, the weight-gradient GEMM in 16-bit).
    /// [`Engine::float8_recipes`] lists which an engine runs.
    Float8Recipe {
        Delayed => "delayed",
        Tensorwise => "tensorwise",
        Blockwise => "blockwise",
        Rowwise => "rowwise",
        RowwiseGwHp => "rowwise-gw-hp",
    }
);

keyword_enum!(
    /// How the expert layers move tokens to their experts and back (expert parallelism
    /// only). `alltoall`: one NCCL all-to-all per dispatch and combine, every routed copy
    /// of a token sent to its expert's rank (Megatron-Core's `alltoall` dispatcher,
    /// torchtitan's, DeepSpeed-MoE's). `deepep` and `hybridep`: Megatron-Core's `flex`
    /// dispatcher (`moe_flex_dispatcher_backend`, Megatron-LM d98e8a6
    /// `transformer_config.py:891-898`) over DeepEP or NVIDIA's HybridEP, which send a
    /// token once to each NVLink domain holding one of its experts and forward the copies
    /// inside the domain over NVLink (DeepSeek-V3 technical report, arXiv 2412.19437
    /// §3.2.2: "transmitted via IB to the GPUs with the same in-node index on their target
    /// nodes … forwarded via NVLink to specific GPUs that host their target experts").
    /// [`Engine::moe_dispatchers`] lists which an engine runs.
    MoeDispatcher {
        AllToAll => "alltoall",
        DeepEp => "deepep",
        HybridEp => "hybridep",
    }
);

keyword_enum!(
    /// The training engine that runs the plan: what it fuses, what it overlaps and what it
    /// keeps in memory differ, and the cost model follows each (plait-cost `engine`).
    /// * `megatron` — Megatron-Core with Transformer Engine (NeMo's runtime);
    /// * `deepspeed` — DeepSpeed ZeRO 1–3 and its pipeline engine;
    /// * `fsdp` — PyTorch FSDP1 (FULL_SHARD / SHARD_GRAD_OP) as llm-foundry/Composer run it;
    /// * `torchtitan` — FSDP2 + DTensor TP/SP/CP + torch.distributed.pipelining;
    /// * `plait` — plait's own runtime;
    /// * `megatron-2021` — Megatron-LM as the SC'21 and Korthikanti et al. (2022) papers ran
    ///   it: no Transformer Engine, no communication overlap beyond its own;
    /// * `deepspeed-2021` — DeepSpeed v0.3.13 (March 2021) on PyTorch 1.8, as SC'21 ran
    ///   ZeRO-3: per-parameter collectives behind a device synchronize.
    Engine {
        Megatron => "megatron",
        Deepspeed => "deepspeed",
        Fsdp => "fsdp",
        Torchtitan => "torchtitan",
        Plait => "plait",
        MegatronLm2021 => "megatron-2021",
        Deepspeed2021 => "deepspeed-2021",
    }
);

impl Engine {
    /// Whether the engine steps part of the optimizer on the CPU (`TrainSpec::optimizer_offload`):
    /// Megatron-Core's `HybridDeviceOptimizer` and DeepSpeed's ZeRO-Offload; the PyTorch
    /// engines plait models have no such optimizer (FSDP's `CPUOffload` moves the parameters
    /// too), nor has plait's runtime.
    pub fn offloads_optimizer(self) -> bool {
        matches!(self, Engine::Megatron | Engine::Deepspeed)
    }

    /// Whether the engine has a `torch.compile` path (`TrainSpec::compile`): torchtitan
    /// compiles each transformer block and the loss (`[compile] enable`); Megatron-Core and
    /// DeepSpeed run hand-fused kernels, llm-foundry's FSDP runs as plait models it eager,
    /// and plait's runtime is not PyTorch.
    pub fn compiles(self) -> bool {
        self == Engine::Torchtitan
    }

    /// Whether the engine's attention is PyTorch's `scaled_dot_product_attention`, whose
    /// backend `TrainSpec::sdpa` picks: torchtitan's; Megatron-Core and DeepSpeed call
    /// Transformer Engine or flash-attn, llm-foundry its Triton kernel.
    pub fn calls_sdpa(self) -> bool {
        self == Engine::Torchtitan
    }

    /// Whether the engine's fp8 linears are torchao's float8 training, whose recipe
    /// `TrainSpec::float8_recipe` picks: torchtitan's; Megatron-Core, DeepSpeed and
    /// llm-foundry's FSDP run Transformer Engine's linears and recipes, as plait models
    /// its own runtime's fp8.
    pub fn runs_torchao_float8(self) -> bool {
        self == Engine::Torchtitan
    }

    /// The fp8 recipes the engine's quantiser runs, its default first: torchao's for
    /// torchtitan (default `tensorwise`, torchao 36027d8 `Float8LinearConfig`), Transformer
    /// Engine's for the others (default `delayed`, Megatron-Core's `fp8_recipe` and TE's
    /// `fp8_autocast` recipe, which llm-foundry's Composer leaves at `DelayedScaling`).
    pub fn float8_recipes(self) -> &'static [Float8Recipe] {
        if self.runs_torchao_float8() {
            &[
                Float8Recipe::Tensorwise,
                Float8Recipe::Rowwise,
                Float8Recipe::RowwiseGwHp,
            ]
        } else {
            &[
                Float8Recipe::Delayed,
                Float8Recipe::Tensorwise,
                Float8Recipe::Blockwise,
            ]
        }
    }

    /// The fp8 recipe the engine runs where the run names none (the first of
    /// [`Engine::float8_recipes`]).
    pub fn default_float8_recipe(self) -> Float8Recipe {
        self.float8_recipes()[0]
    }

    /// Whether the engine runs Megatron-Core's combined 1F1B, which overlaps the expert
    /// all-to-alls of one micro-batch with another's compute (`ParallelConfig::moe_a2a_overlap`).
    pub fn runs_combined_1f1b(self) -> bool {
        self == Engine::Megatron
    }

    /// The expert dispatchers the engine runs, its default first: Megatron-Core's
    /// `alltoall` and its `flex` backends (DeepEP, HybridEP); the other engines' all-to-all
    /// (DeepSpeed-MoE, torchtitan's default `expert_parallel` all-to-all; plait models
    /// llm-foundry's FSDP and its own runtime the same way).
    pub fn moe_dispatchers(self) -> &'static [MoeDispatcher] {
        if self == Engine::Megatron {
            &[
                MoeDispatcher::AllToAll,
                MoeDispatcher::DeepEp,
                MoeDispatcher::HybridEp,
            ]
        } else {
            &[MoeDispatcher::AllToAll]
        }
    }

    /// Why this engine cannot run Megatron-Core's all-to-all overlap, where it cannot (the
    /// plan's own conditions are `ParallelConfig::check_moe_a2a_overlap`'s).
    pub fn moe_a2a_overlap_refused(self) -> Option<String> {
        (!self.runs_combined_1f1b()).then(|| {
            format!(
                "the overlap is Megatron-Core's combined 1F1B, not engine {}'s",
                self.keyword()
            )
        })
    }

    /// Why this engine cannot run `dispatcher`, where it cannot ([`Engine::moe_dispatchers`]
    /// says which it runs).
    pub fn moe_dispatcher_refused(self, dispatcher: MoeDispatcher) -> Option<String> {
        (!self.moe_dispatchers().contains(&dispatcher)).then(|| {
            format!(
                "engine {} does not run the {} dispatcher",
                self.keyword(),
                dispatcher
            )
        })
    }

    /// [`Engine::moe_dispatchers`] by name, joined by commas.
    pub fn moe_dispatcher_names(self) -> String {
        let names: Vec<&str> = self.moe_dispatchers().iter().map(|d| d.keyword()).collect();
        names.join(", ")
    }

    /// Whether the engine runs Megatron-Core's choice of selective recompute modules
    /// (`recompute_modules`).
    pub fn recomputes_modules(self) -> bool {
        self == Engine::Megatron
    }

    /// The engines that accept `compile`, as `a|b` for messages.
    pub fn compiling() -> String {
        let engines: Vec<&str> = Engine::ALL
            .iter()
            .filter(|e| e.compiles())
            .map(|e| e.keyword())
            .collect();
        engines.join("|")
    }
}

impl Dtype {
    /// Whether the block linears run in a low-precision format (fp8, mxfp8, nvfp4) beside
    /// 16-bit activations.
    pub fn low_precision_linears(self) -> bool {
        matches!(self, Dtype::Fp8 | Dtype::Mxfp8 | Dtype::Nvfp4)
    }

    /// Bytes of one GEMM operand element in this format (without block scales).
    pub fn gemm_element_bytes(self) -> f64 {
        match self {
            Dtype::Bf16 | Dtype::Fp16 => 2.0,
            Dtype::Fp8 | Dtype::Mxfp8 => 1.0,
            Dtype::Nvfp4 => 0.5,
        }
    }

    /// Bytes of block scales per element: one E8M0 byte per 32 (MXFP8), one E4M3 byte per
    /// 16 (NVFP4); per-tensor scales are negligible.
    pub fn scale_bytes_per_element(self) -> f64 {
        match self {
            Dtype::Mxfp8 => 1.0 / 32.0,
            Dtype::Nvfp4 => 1.0 / 16.0,
            _ => 0.0,
        }
    }

    /// Bytes of one activation element as stored between layers: 2 for every format, since
    /// fp8 training (Transformer Engine) keeps bf16 activations and casts for the GEMMs.
    pub fn activation_bytes(self) -> f64 {
        2.0
    }
}

keyword_enum!(
    /// What the run trains: every weight (pre-training), every weight on packed samples
    /// (supervised fine-tuning), or low-rank adapters beside frozen weights (LoRA, Hu et al.
    /// 2021).
    Task { Pretrain => "pretrain", Sft => "sft", Lora => "lora" }
);

keyword_enum!(
    /// A block linear that LoRA adapts (Megatron's names: `linear_qkv`, `linear_proj`,
    /// `linear_fc1`, `linear_fc2`).
    LoraTarget { Qkv => "qkv", Proj => "proj", Fc1 => "fc1", Fc2 => "fc2" }
);

/// LoRA adapters: rank and the adapted linears. The default is NeMo 2.0's `llm.peft.LoRA`
/// (`dim = 32` on `linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2`; NeMo 8cfedd7,
/// `nemo/collections/llm/peft/lora.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lora {
    pub rank: u64,
    /// Adapted linears in the order qkv, proj, fc1, fc2.
    pub targets: [bool; 4],
}

impl Default for Lora {
    fn default() -> Self {
        Lora {
            rank: 32,
            targets: [true; 4],
        }
    }
}

impl Lora {
    /// Whether the linear at `index` (0 qkv, 1 proj, 2 fc1, 3 fc2) carries an adapter.
    pub fn adapts(&self, index: usize) -> bool {
        self.targets.get(index).copied().unwrap_or(false)
    }

    /// Parses a comma-separated target list such as `qkv,proj` (or `all`).
    pub fn parse_targets(s: &str) -> std::result::Result<[bool; 4], String> {
        if s.trim().eq_ignore_ascii_case("all") {
            return Ok([true; 4]);
        }
        let mut targets = [false; 4];
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let t: LoraTarget = item.parse()?;
            targets[LoraTarget::ALL.iter().position(|x| *x == t).unwrap_or(0)] = true;
        }
        if targets.iter().all(|t| !t) {
            return Err(format!(
                "`{s}` names no linear; allowed: all, or a list of {}",
                LoraTarget::allowed()
            ));
        }
        Ok(targets)
    }
}

/// One length of the samples packed into a fine-tuning run's sequences and the share of the
/// samples that have it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SampleLength {
    pub tokens: u64,
    pub share: f64,
}

/// Most lengths a sample-length distribution may list: a histogram of a dataset's sample
/// lengths, one bin per token count up to a 4K sequence at most; bounds what a flag parses.
pub const MAX_SAMPLE_LENGTHS: usize = 4096;

/// A sample-length distribution written `LENGTH:SHARE,…` (e.g. `512:0.5,2048:0.3,8192:0.2`:
/// half the samples of 512 tokens…; the shares are relative, normalised here), each length
/// from 1 to `seq` (a longer sample does not fit a sequence), each share a positive number.
pub fn parse_sample_lengths(
    text: &str,
    seq: u64,
) -> std::result::Result<Vec<SampleLength>, String> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if out.len() == MAX_SAMPLE_LENGTHS {
            return Err(format!("more than {MAX_SAMPLE_LENGTHS} lengths"));
        }
        let bad = || format!("`{item}` is not LENGTH:SHARE (e.g. 2048:0.3)");
        let (len, share) = item.split_once(':').ok_or_else(bad)?;
        let tokens: u64 = len.trim().parse().map_err(|_| bad())?;
        let share: f64 = share.trim().parse().map_err(|_| bad())?;
        if tokens == 0 || tokens > seq {
            return Err(format!(
                "a sample of {tokens} tokens does not fit a sequence of {seq} (lengths from 1 to {seq})"
            ));
        }
        if !(share.is_finite() && share > 0.0) {
            return Err(format!(
                "the share of {tokens}-token samples must be a positive number, got {share}"
            ));
        }
        out.push(SampleLength { tokens, share });
    }
    if out.is_empty() {
        return Err("no LENGTH:SHARE given".into());
    }
    let total: f64 = out.iter().map(|s| s.share).sum();
    if !total.is_finite() {
        return Err("the shares add up to more than a number can hold".into());
    }
    for s in &mut out {
        s.share /= total;
    }
    Ok(out)
}

/// The batch and the software behaviour of the training run (not the parallel split).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSpec {
    /// Global batch in sequences.
    pub gbs: u64,
    /// Sequence length in tokens.
    pub seq: u64,
    pub dtype: Dtype,
    pub attention: AttentionImpl,
    /// Dropout layers present (they add masks to memory and memory-bound kernels to time).
    pub dropout: bool,
    /// Data-parallel gradient reduction overlapped with the backward pass (Megatron-core
    /// `--overlap-grad-reduce`); off reproduces older Megatron-LM, which reduced after the
    /// last backward.
    pub overlap_grad_reduce: bool,
    /// The engine that runs the plan (default Megatron-Core).
    #[serde(default = "default_engine")]
    pub engine: Engine,
    /// MoE load imbalance: tokens of the busiest expert rank over the balanced share (1 =
    /// balanced). Every rank waits for the busiest at the all-to-all.
    #[serde(default = "default_moe_skew")]
    pub moe_skew: f64,
    /// MoE expert capacity factor with token dropping, each expert's input padded to its
    /// capacity: capacity = ⌈tokens × top-k / experts × factor⌉ (Megatron-Core
    /// `moe_utils.get_capacity`, `--moe-expert-capacity-factor` with
    /// `--moe-pad-expert-input-to-capacity`; GShard's and Switch Transformer's fixed
    /// capacity). Every expert then runs exactly its capacity, so the experts' work is the
    /// factor times the balanced share whatever the routing. `None`: dropless (the work
    /// follows `moe_skew`).
    #[serde(default)]
    pub moe_capacity: Option<f64>,
    /// Pre-training, SFT or LoRA.
    #[serde(default = "default_task")]
    pub task: Task,
    /// The adapters of a LoRA run (ignored by other tasks).
    #[serde(default)]
    pub lora: Lora,
    /// Length of the samples packed into each sequence (SFT and LoRA on packed data):
    /// attention runs within each sample. `None`: one sample per sequence.
    #[serde(default)]
    pub pack_len: Option<u64>,
    /// The lengths of the packed samples with the share of samples of each, where they
    /// vary (in place of `pack_len`; empty: `pack_len`'s one length).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_lengths: Vec<SampleLength>,
    /// The engine runs under `torch.compile` (torchtitan's `[compile] enable`), which fuses
    /// its elementwise chains; only engines that [`Engine::compiles`] accept it.
    #[serde(default)]
    pub compile: bool,
    /// With `compile`, the loss is compiled too (torchtitan's `[compile] components`
    /// holding "loss", its default since the loss moved to `components/loss.py`: 820504e,
    /// June 2025). `false`: the blocks alone, the loss eager, as torchtitan ran before
    /// (9dec370, Dec 2024: "TODO: compiling loss function causes CUDA errors, turning off
    /// for now" in `train.py`) and as `components = ["model"]` runs it now.
    #[serde(default = "default_compile_loss")]
    pub compile_loss: bool,
    /// torchtitan's async tensor parallelism (`enable_async_tensor_parallel`): the compiled
    /// blocks' tp all-gathers and reduce-scatters pipelined with their matmuls. Needs
    /// `compile`.
    #[serde(default)]
    pub async_tp: bool,
    /// The SDPA backend an engine that calls PyTorch's attention runs (torchtitan).
    #[serde(default = "default_sdpa")]
    pub sdpa: Sdpa,
    /// The fp8 recipe of an fp8 run; `None` = the engine's default
    /// ([`Engine::float8_recipes`]). [`TrainSpec::fp8_recipe`] gives the one in force.
    #[serde(default)]
    pub float8_recipe: Option<Float8Recipe>,
    /// torchtitan's `enable_fsdp_float8_all_gather`: FSDP gathers the float8 linears'
    /// weights cast to fp8 (tensor-wise recipe only; torchtitan b0902b2
    /// `components/quantization/float8.py:60-98`).
    #[serde(default)]
    pub float8_all_gather: bool,
    /// A Megatron-Core run in fp8 or MXFP8 that keeps 16-bit weights, gathered in 16 bits and
    /// cast each step, instead of Transformer Engine's quantised weights: Megatron-LM without
    /// `--fp8-param-gather` (its default), as NeMo 1's launcher ran its dense pre-training
    /// without `fp8_params` (NeMo-Framework-Launcher 8325688d
    /// `examples/training/*/h100/*_fp8.sh`), and Megatron-Bridge's sub-channel (`blockwise`)
    /// recipe (v0.5.0 `training/mixed_precision.py:383-384`). Off: the quantised weights
    /// NeMo 2's and Megatron-Bridge's delayed, tensor-wise and MXFP8 recipes keep.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sixteen_bit_weights: bool,
    /// Which layers replay as CUDA graphs (Megatron-Core's `cuda_graph_impl`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub cuda_graphs: CudaGraphs,
    /// Blocks at the start of the model whose linears run in bf16 in a low-precision run
    /// (Megatron-Core's `--first-last-layers-bf16` with `num_layers_at_start_in_bf16`,
    /// `transformer_config.py`; Transformer Engine leaves those blocks outside its fp8 or
    /// fp4 autocast).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bf16_first_layers: u64,
    /// Blocks at the end of the model kept in bf16 likewise (`num_layers_at_end_in_bf16`;
    /// NVIDIA's NVFP4 recipe for Nemotron 3 Super keeps 14).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bf16_last_layers: u64,
    /// The format the optimizer keeps Adam's state in (default fp32).
    #[serde(default, skip_serializing_if = "is_default_optimizer_state")]
    pub optimizer_state: OptimizerState,
    /// Transformer blocks whose saved activations the engine moves to host memory in the
    /// forward and brings back for the backward, on a copy stream beside the compute
    /// (Megatron-Core's `--cpu-offloading --cpu-offloading-num-layers`, run by Transformer
    /// Engine's `get_cpu_offload_context`, which keeps the activation memory at
    /// `(layers - offloaded) × one block's`: TE d0067d0 `pytorch/cpu_offload.py:748-751`).
    /// Megatron-Core allows it with fewer blocks than the model has, without a pipeline and
    /// without recomputation (Megatron-LM d98e8a6 `transformer_config.py:1884-1899`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_offload_layers: u64,
    /// Share of each rank's optimizer state (Adam's fp32 master weights and moments) kept in
    /// host memory and stepped by the CPU, 0 to 1: Megatron-Core's
    /// `--optimizer-cpu-offload --optimizer-offload-fraction` (its `HybridDeviceOptimizer`,
    /// Megatron-LM d98e8a6 `core/optimizer/cpu_offloading/hybrid_optimizer.py`), DeepSpeed's
    /// `zero_optimization.offload_optimizer` with `device: cpu` (ZeRO-Offload; its `ratio`
    /// below 1 only under ZeRO-3, deepspeedai/DeepSpeed edaa722
    /// `runtime/zero/offload_config.py:99-100`). The conditions each engine sets are
    /// [`crate::ParallelConfig::check_offloads`]'.
    #[serde(default, skip_serializing_if = "is_zero_share")]
    pub optimizer_offload: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_share(x: &f64) -> bool {
    *x == 0.0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Default for MoeDispatcher {
    /// Every engine's: one all-to-all per dispatch and combine.
    fn default() -> Self {
        MoeDispatcher::AllToAll
    }
}

fn default_sdpa() -> Sdpa {
    Sdpa::Flash
}

fn default_compile_loss() -> bool {
    true
}

/// What `torch.compile` compiles, as torchtitan's `[compile] components` list names it:
/// `model` and `loss`, joined by `,` (torchtitan's list, the CLI's flag) or `+` (inside a
/// CSV cell). Returns whether the loss is compiled; the model must be among the components
/// (plait has no profile of an eager model with a compiled loss).
pub fn parse_compile_components(text: &str) -> std::result::Result<bool, String> {
    let (mut model, mut loss) = (false, false);
    for item in text.split([',', '+']).map(str::trim) {
        match item {
            "model" => model = true,
            "loss" => loss = true,
            other => {
                return Err(format!(
                    "unknown component `{other}` (allowed: model, loss; e.g. model,loss)"
                ))
            }
        }
    }
    if !model {
        return Err(format!(
            "`{text}` leaves the model eager (allowed: model or model,loss)"
        ));
    }
    Ok(loss)
}

fn default_task() -> Task {
    Task::Pretrain
}

impl TrainSpec {
    /// torchtitan's `[compile] components` for this run (with `compile`).
    pub fn compile_components(&self) -> &'static [&'static str] {
        if self.compile_loss {
            &["model", "loss"]
        } else {
            &["model"]
        }
    }

    /// Tokens each query attends over: the packed sample, or the whole sequence. With
    /// samples of several lengths, the token-weighted mean length Σ share·L² / Σ share·L: a
    /// sample's attention work grows with the square of its length, so the long samples'
    /// tokens weigh in as many times as they are long.
    pub fn attention_span(&self) -> u64 {
        let seq = self.seq.max(1);
        if !self.sample_lengths.is_empty() {
            let (squares, tokens) = self.sample_lengths.iter().fold((0.0, 0.0), |(q, t), s| {
                let l = s.tokens.clamp(1, seq) as f64;
                (q + s.share * l * l, t + s.share * l)
            });
            if tokens > 0.0 {
                return ((squares / tokens).round() as u64).clamp(1, seq);
            }
        }
        self.pack_len.map_or(self.seq, |p| p.clamp(1, seq))
    }

    /// The fp8 recipe in force: the run's, or its engine's default, for an fp8 run;
    /// otherwise none.
    pub fn fp8_recipe(&self) -> Option<Float8Recipe> {
        self.fp8_recipe_under(self.engine)
    }

    /// The fp8 recipe the run has under `engine`: the one it names, or `engine`'s default
    /// (an export writes a plan for an engine other than the one that costed it).
    pub fn fp8_recipe_under(&self, engine: Engine) -> Option<Float8Recipe> {
        (self.dtype == Dtype::Fp8)
            .then(|| self.float8_recipe.unwrap_or(engine.default_float8_recipe()))
    }

    /// torchao's float8 recipe in force: the run's, for an fp8 run under an engine that
    /// quantises with torchao; otherwise none.
    pub fn torchao_float8(&self) -> Option<Float8Recipe> {
        self.fp8_recipe()
            .filter(|_| self.engine.runs_torchao_float8())
    }

    /// Where the run names an fp8 recipe its engine does not run, or names one without
    /// fp8: the recipe and the ones allowed.
    pub fn float8_recipe_refused(&self) -> Option<String> {
        let recipe = self.float8_recipe?;
        let allowed = self.engine.float8_recipes();
        let names = allowed
            .iter()
            .map(|r| r.keyword())
            .collect::<Vec<_>>()
            .join(", ");
        if self.dtype != Dtype::Fp8 {
            Some(format!(
                "{recipe} is an fp8 recipe and the run is {} (allowed with fp8)",
                self.dtype
            ))
        } else if !allowed.contains(&recipe) {
            Some(format!(
                "engine {} does not run the {recipe} recipe (allowed: {names})",
                self.engine.keyword()
            ))
        } else {
            None
        }
    }

    /// The blocks at the start and at the end whose linears run in bf16: those asked for
    /// in a run whose linears are low-precision, none otherwise.
    pub fn bf16_layers(&self) -> (u64, u64) {
        if self.dtype.low_precision_linears() {
            (self.bf16_first_layers, self.bf16_last_layers)
        } else {
            (0, 0)
        }
    }

    /// Whether the run's weights may be Transformer Engine's quantised ones: Megatron-Core in
    /// fp8 or MXFP8, where [`TrainSpec::sixteen_bit_weights`] chooses 16-bit ones instead.
    pub fn chooses_weight_format(&self) -> bool {
        self.engine == Engine::Megatron && matches!(self.dtype, Dtype::Fp8 | Dtype::Mxfp8)
    }

    /// Whether Megatron-Core keeps the block weights quantised (gathered in their format
    /// under the distributed optimizer, `--fp8-param-gather` in its launch).
    pub fn keeps_quantised_weights(&self) -> bool {
        self.chooses_weight_format() && !self.sixteen_bit_weights
    }

    /// Whether FSDP gathers the float8 weights in fp8: asked for, and torchao's tensor-wise
    /// recipe in force (the only one that can).
    pub fn gathers_float8(&self) -> bool {
        self.float8_all_gather && self.torchao_float8() == Some(Float8Recipe::Tensorwise)
    }

    /// The LoRA adapters when the task trains them.
    pub fn lora_adapters(&self) -> Option<Lora> {
        (self.task == Task::Lora).then_some(self.lora)
    }
}

fn default_moe_skew() -> f64 {
    1.0
}

fn default_engine() -> Engine {
    Engine::Megatron
}

impl TrainSpec {
    /// A modern default: bf16, flash attention, no dropout, overlapped gradient reduction.
    pub fn new(gbs: u64, seq: u64) -> Self {
        Self {
            gbs,
            seq,
            dtype: Dtype::Bf16,
            attention: AttentionImpl::Flash,
            dropout: false,
            overlap_grad_reduce: true,
            engine: Engine::Megatron,
            moe_skew: 1.0,
            moe_capacity: None,
            task: Task::Pretrain,
            lora: Lora::default(),
            pack_len: None,
            sample_lengths: Vec::new(),
            compile: false,
            compile_loss: true,
            async_tp: false,
            sdpa: Sdpa::Flash,
            float8_recipe: None,
            float8_all_gather: false,
            sixteen_bit_weights: false,
            cuda_graphs: CudaGraphs::None,
            bf16_first_layers: 0,
            bf16_last_layers: 0,
            optimizer_state: OptimizerState::Fp32,
            cpu_offload_layers: 0,
            optimizer_offload: 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_round_trip_and_reject_unknown() {
        for s in Schedule::ALL {
            assert_eq!(s.keyword().parse::<Schedule>().unwrap(), *s);
        }
        let e = "pipedream".parse::<Schedule>().unwrap_err();
        assert!(e.contains("gpipe|1f1b|interleaved|zb-h1|scp"), "{e}");
    }
}
