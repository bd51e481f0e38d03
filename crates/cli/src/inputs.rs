//! Turns command-line flags into specs: resolves presets and files (the only place that
//! reads them), derives the data-parallel degree from `--gpus`, and checks every number.

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Args;

use plait_cost::{device_for, DeviceModel, Profile};
use plait_runtime::error::PlanMismatch;
use plait_runtime::RuntimeError;
use plait_spec::{
    cluster_from_toml, cluster_preset, model_from_hf_config, model_preset, AttentionImpl,
    ClusterSpec, CpComm, Degree, Dtype, Engine, Float8Recipe, Lora, ModelSpec, MoeDispatcher,
    OptimizerState, ParallelConfig, ParallelPins, Recompute, RecomputeModules, Schedule, Sdpa,
    SpecError, Task, TrainSpec,
};

/// Model, cluster and batch.
#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Model preset (e.g. gpt3-175b, llama3-70b) or a Hugging Face config.json.
    #[arg(long, default_value = "gpt3-175b")]
    pub model: String,
    /// Cluster preset (dgx-a100-80g, dgx-a100-40g, dgx-h100, grand-teton-h100, hgx-h800,
    /// dgx-h200, dgx-b200, dgx-b300, gb200-nvl72, gb300-nvl72, dgx-v100, l40s-8, mi300x-8) or
    /// a TOML file.
    #[arg(long, default_value = "dgx-a100-80g")]
    pub cluster: String,
    /// GPUs to use (default: dp × tp × pp × cp).
    #[arg(long, allow_negative_numbers = true)]
    pub gpus: Option<i64>,
    /// Global batch in sequences.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1536)]
    pub gbs: i64,
    /// Sequence length in tokens.
    #[arg(long, allow_negative_numbers = true, default_value_t = 2048)]
    pub seq: i64,
    /// Numeric format: bf16, fp16, fp8 (per-tensor scaled; Hopper and later), mxfp8 or nvfp4
    /// (block-scaled; Blackwell).
    #[arg(long, default_value = "bf16", value_parser = parse_keyword::<Dtype>)]
    pub dtype: Dtype,
    /// Calibration profile (profile JSON or measurement JSON lines). H200 clusters use the
    /// built-in H200 profile unless --no-profile.
    #[arg(long)]
    pub profile: Option<String>,
    /// Use published numbers only, not the built-in profile.
    #[arg(long)]
    pub no_profile: bool,
    /// Attention kernel: flash, or the unfused matmul–softmax chain of older Megatron-LM.
    #[arg(long, default_value = "flash", value_parser = parse_keyword::<AttentionImpl>)]
    pub attention: AttentionImpl,
    /// Model has dropout layers.
    #[arg(long)]
    pub dropout: bool,
    /// Reduce gradients after the backward instead of overlapping them with it.
    #[arg(long)]
    pub no_overlap_grad_reduce: bool,
    /// Training engine whose behaviour the estimate follows: megatron (Megatron-Core +
    /// Transformer Engine, default), deepspeed, fsdp (PyTorch FSDP1 as llm-foundry runs
    /// it), torchtitan (FSDP2 + DTensor), plait (plait's runtime), megatron-2021 (Megatron-LM
    /// as SC'21 ran it).
    #[arg(long, value_parser = parse_keyword::<Engine>)]
    pub engine: Option<Engine>,
    /// MoE load imbalance: tokens of the busiest expert rank over the balanced share
    /// (1 = balanced; the band's pessimistic end assumes at least 1.25).
    #[arg(long, default_value_t = 1.0)]
    pub moe_skew: f64,
    /// MoE expert capacity factor with token dropping, each expert's input padded to its
    /// capacity (Megatron's --moe-expert-capacity-factor with
    /// --moe-pad-expert-input-to-capacity): every expert runs the factor times the balanced
    /// share (default: dropless, the work follows --moe-skew).
    #[arg(long)]
    pub moe_capacity: Option<f64>,
    /// What the run trains: pretrain, sft (every weight, packed samples) or lora (low-rank
    /// adapters beside frozen weights).
    #[arg(long, default_value = "pretrain", value_parser = parse_keyword::<Task>)]
    pub task: Task,
    /// LoRA adapter rank (NeMo's default: 32).
    #[arg(long, allow_negative_numbers = true, default_value_t = 32)]
    pub lora_rank: i64,
    /// Linears LoRA adapts: all, or a comma list of qkv, proj, fc1, fc2.
    #[arg(long, default_value = "all")]
    pub lora_targets: String,
    /// Length of the samples packed into each sequence (sft, lora): attention runs within
    /// each sample instead of over the whole sequence.
    #[arg(long, allow_negative_numbers = true)]
    pub pack_len: Option<i64>,
    /// Lengths of the samples packed into each sequence when they vary, with the share of
    /// samples of each (sft, lora): LENGTH:SHARE,… e.g. 512:0.5,2048:0.3,8192:0.2 (instead of
    /// --pack-len); attention works as over samples of the token-weighted mean length.
    #[arg(long, conflicts_with = "pack_len")]
    pub sample_lengths: Option<String>,
    /// The engine runs under torch.compile, which fuses its norms, RoPE, SwiGLU and loss
    /// (torchtitan's [compile] enable; allowed with --engine torchtitan).
    #[arg(long)]
    pub compile: bool,
    /// What --compile compiles, as torchtitan's [compile] components: model,loss (its
    /// default since June 2025) or model (the blocks alone, the loss eager: torchtitan of
    /// 2024, or components = ["model"]) [default: model,loss]
    #[arg(long, value_name = "LIST")]
    pub compile_components: Option<String>,
    /// torchtitan's async tensor parallelism: the compiled blocks' tp all-gathers and
    /// reduce-scatters pipelined with their matmuls over symmetric memory (needs --compile
    /// and tp > 1 with sequence parallelism inside a node).
    #[arg(long)]
    pub async_tp: bool,
    /// The backend of PyTorch's scaled_dot_product_attention that torchtitan's attention
    /// runs: flash (PyTorch's default on Hopper up to 2.9) or cudnn (first from 2.10 with
    /// cuDNN >= 9.15.1, and in 2.11's cu130 wheels; 1.77x flash on an H200) (allowed with
    /// --engine torchtitan)
    #[arg(long, default_value = "flash", value_parser = parse_keyword::<Sdpa>)]
    pub sdpa: Sdpa,
    /// How an fp8 run scales its tensors. Transformer Engine's (megatron, deepspeed, fsdp,
    /// plait): delayed (the default: scales from earlier steps' amax), tensorwise (current
    /// scaling: each tensor's own amax this step, as NeMo's 25.04 and later performance
    /// runs) or blockwise (a scale per 1x128 tile, 128x128 for weights: DeepSeek-V3's).
    /// torchao's (torchtitan): tensorwise (the default, except under `plan --export
    /// torchtitan`, whose float8 converter runs rowwise), rowwise (a power-of-two scale per
    /// row of every GEMM operand) or rowwise-gw-hp (the weight-gradient GEMM in 16-bit)
    /// (allowed with --dtype fp8)
    #[arg(long, value_parser = parse_keyword::<Float8Recipe>)]
    pub float8_recipe: Option<Float8Recipe>,
    /// FSDP gathers the float8 linears' weights in fp8 (torchtitan's
    /// enable_fsdp_float8_all_gather; allowed with --dtype fp8 --engine torchtitan and the
    /// tensorwise recipe)
    #[arg(long)]
    pub float8_all_gather: bool,
    /// Megatron-Core keeps the 16-bit weights of an fp8 or mxfp8 run, gathers them in 16
    /// bits and casts them each step (Megatron-LM without --fp8-param-gather; NeMo 1's
    /// launcher without fp8_params; Megatron-Bridge's blockwise recipe) rather than
    /// Transformer Engine's quantised weights, as NeMo 2's and Megatron-Bridge's delayed,
    /// tensor-wise and MXFP8 recipes keep (allowed with --engine megatron and --dtype fp8 or
    /// mxfp8)
    #[arg(long)]
    pub no_fp8_param_gather: bool,
    /// Which layers replay as CUDA graphs: none (every kernel launched from the host, the
    /// default) or layers (whole layers captured forward and backward, Megatron-Core's
    /// --cuda-graph-impl local or full_iteration, so no layer waits on its kernels' launches;
    /// the embedding and the loss still launch from the host) (allowed with --engine
    /// megatron, without full recompute or activation offloading, which Megatron-Core's layer
    /// graphs refuse)
    #[arg(long, default_value = "none", value_parser = parse_keyword::<plait_spec::CudaGraphs>)]
    pub cuda_graphs: plait_spec::CudaGraphs,
    /// Blocks at the start of the model whose linears run in bf16 in an fp8, mxfp8 or nvfp4
    /// run (Megatron-Core's --first-last-layers-bf16 --num-layers-at-start-in-bf16)
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub bf16_first_layers: i64,
    /// Blocks at the end of the model kept in bf16 likewise (--num-layers-at-end-in-bf16;
    /// NVIDIA's NVFP4 recipe for Nemotron 3 Super keeps 14)
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub bf16_last_layers: i64,
    /// The format the optimizer keeps Adam's master weights and moments in: fp32 (12 bytes
    /// per trainable parameter) or bf16 (6: Apex's DistributedFusedAdam with dtype bf16, as
    /// NeMo's SFT configs run it)
    #[arg(long, default_value = "fp32", value_parser = parse_keyword::<OptimizerState>)]
    pub optimizer_state: OptimizerState,
    /// Transformer blocks whose activations go to host memory in the forward and come back
    /// for the backward (Megatron-Core's --cpu-offloading --cpu-offloading-num-layers; with
    /// --engine megatron, pp 1 and no recompute; copied over the cluster's GPU-host link)
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub cpu_offload_layers: i64,
    /// Share of each rank's optimizer state (fp32 master weights and Adam moments) kept in
    /// host memory and stepped by the CPU, 0 to 1 (Megatron-Core's --optimizer-cpu-offload
    /// --optimizer-offload-fraction with the distributed optimizer; DeepSpeed's ZeRO-Offload,
    /// a share below 1 only with ZeRO-3). Needs a cluster with host memory figures
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.0)]
    pub optimizer_offload: f64,
}

/// One flag per parallel degree (`--dp`, `--tp`, …), written from `plait_spec::Degree::ALL`
/// with each degree's own words (`Degree::what`): a new degree has its flag without a change
/// here.
#[derive(Debug, Clone, Default)]
pub struct DegreeArgs(Vec<(Degree, i64)>);

impl DegreeArgs {
    /// The flag of degree `d`, if given.
    pub fn get(&self, d: Degree) -> Option<i64> {
        self.0.iter().find(|(x, _)| *x == d).map(|&(_, v)| v)
    }
}

impl clap::FromArgMatches for DegreeArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(DegreeArgs(
            Degree::ALL
                .iter()
                .filter_map(|&d| m.get_one::<i64>(d.name()).map(|&v| (d, v)))
                .collect(),
        ))
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for DegreeArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // Where the command takes a whole `--config` (declared before these flags), a
        // degree's flag conflicts with it.
        let config = cmd.get_arguments().any(|a| a.get_id() == "config");
        Degree::ALL.iter().fold(cmd, |cmd, &d| {
            let arg = clap::Arg::new(d.name());
            let arg = if config {
                arg.conflicts_with("config")
            } else {
                arg
            };
            cmd.arg(
                arg.long(d.name())
                    .value_name(d.name().to_ascii_uppercase())
                    .value_parser(clap::value_parser!(i64))
                    .allow_negative_numbers(true)
                    .help(format!("{}; plan: searched", d.what().trim_end_matches(')')) + ")"),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// The degree, micro-batch and ZeRO flags, shared by the commands that take a configuration
/// (`estimate`, `simulate`: a flag not given takes its default) and by `plan` (a flag given
/// pins that knob; the search covers the rest).
#[derive(Debug, Args)]
pub struct KnobArgs {
    #[command(flatten)]
    pub degrees: DegreeArgs,
    /// How context parallelism moves the sequence for attention (Megatron's
    /// --cp-comm-type): p2p (ring attention, overlapped), a2a (DeepSpeed-Ulysses: heads
    /// split over cp, all-to-alls in line) or allgather (keys and values gathered, as
    /// Llama 3) (default: p2p; plan: p2p or a2a, searched).
    #[arg(long, value_parser = parse_keyword::<CpComm>)]
    pub cp_comm: Option<CpComm>,
    /// Tensor parallelism of the expert MLPs (MoE models), a divisor of tp; below tp, ep
    /// may take the rest of the tp ranks (Megatron's --expert-tensor-parallel-size;
    /// default: 1 as NVIDIA's MoE recipes and torchtitan run it, or tp where tp > 1 runs
    /// without --sp; plan: tp or 1, searched).
    #[arg(long, allow_negative_numbers = true)]
    pub etp: Option<i64>,
    /// Data-parallel ranks the ZeRO states are sharded over, a divisor of dp (hybrid
    /// sharding: FSDP's HYBRID_SHARD, torchtitan's dp_shard, DeepSpeed's MiCS, Megatron's
    /// distributed-optimizer instances); the dp / shard copies all-reduce their gradient
    /// shards (default: = dp; plan: dp or one node's worth, searched).
    #[arg(long, allow_negative_numbers = true)]
    pub shard: Option<i64>,
    /// Micro-batch size in sequences (default: 1; plan: searched).
    #[arg(long, allow_negative_numbers = true)]
    pub mbs: Option<i64>,
    /// ZeRO stage 0–3 (default: 0; plan: searched).
    #[arg(long, allow_negative_numbers = true)]
    pub zero: Option<i64>,
    /// How expert layers send tokens to their experts: alltoall (every routed copy to its
    /// expert's rank), or deepep / hybridep (Megatron-Core's flex dispatcher: each token
    /// once per NVLink domain holding one of its experts, forwarded inside it; allowed with
    /// --engine megatron) (default: alltoall; plan: the engine's fastest, searched).
    #[arg(long, value_parser = parse_keyword::<MoeDispatcher>)]
    pub moe_dispatcher: Option<MoeDispatcher>,
    /// Megatron-Core's overlap of the expert all-to-alls with another micro-batch's compute
    /// in the 1F1B steady state (--overlap-moe-expert-parallel-comm, as NVIDIA's MoE
    /// performance recipes run; allowed with --engine megatron, --ep > 1, interleaving
    /// wherever --pp > 1, and no full recompute) (default: off; plan: on wherever it runs,
    /// off where only recomputed blocks fit).
    #[arg(long, conflicts_with = "no_moe_a2a_overlap")]
    pub moe_a2a_overlap: bool,
    /// plan: no all-to-all overlap in any plan (unpinned, the search takes it wherever it runs).
    #[arg(long)]
    pub no_moe_a2a_overlap: bool,
}

impl KnobArgs {
    /// The flag of degree `d`, if given.
    pub fn degree(&self, d: Degree) -> Option<i64> {
        self.degrees.get(d)
    }

    /// The degrees and micro-batch given, as pins (each at least 1; ZeRO is left to the
    /// caller, whose error it words).
    pub fn pins(&self) -> Result<ParallelPins, SpecError> {
        let opt = |flag: &str, v: Option<i64>| v.map(|v| positive(flag, v)).transpose();
        let mut p = ParallelPins::default();
        for &d in Degree::ALL {
            *p.degree_mut(d) = opt(d.name(), self.degree(d))?;
        }
        p.mbs = opt("mbs", self.mbs)?;
        p.etp = opt("etp", self.etp)?.map(Some);
        p.dp_shard = opt("shard", self.shard)?.map(Some);
        p.cp_comm = self.cp_comm;
        p.moe_dispatcher = self.moe_dispatcher;
        p.moe_a2a_overlap = match (self.moe_a2a_overlap, self.no_moe_a2a_overlap) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        Ok(p)
    }
}

/// One parallel configuration.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The whole configuration as `plait plan` prints it, e.g. "dp32 tp8 pp4 vp8 mbs4 zero1
    /// sp recompute=selective interleaved" (instead of the flags below; dp may be left to
    /// --gpus).
    #[arg(long, conflicts_with_all = ["cp_comm", "etp", "shard", "mbs", "zero", "sp", "recompute", "schedule", "moe_dispatcher", "moe_a2a_overlap", "no_moe_a2a_overlap"])]
    pub config: Option<String>,
    #[command(flatten)]
    pub knobs: KnobArgs,
    /// Megatron sequence parallelism.
    #[arg(long)]
    pub sp: bool,
    /// Activation recomputation: none, selective or full; or Megatron-Core's selective
    /// modules joined by + (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe,
    /// shared_experts; engine megatron), e.g. core_attn+mla_up_proj+moe.
    #[arg(long, default_value = "none", value_parser = plait_spec::parse_recompute)]
    pub recompute: (Recompute, RecomputeModules),
    /// With full recomputation, recompute only the first N blocks of each pipeline stage's
    /// model chunk (Megatron's --recompute-method block --recompute-num-layers N); the
    /// other blocks keep their activations (default: every block).
    #[arg(long, allow_negative_numbers = true)]
    pub recompute_layers: Option<i64>,
    /// Megatron-Core's pipeline layout (its --pipeline-model-parallel-layout): the layers of
    /// each virtual stage in model order, E the embedding, t a decoder layer, m an MTP
    /// layer, L the loss, stages separated by |, (…)*n and x*n to repeat; e.g.
    /// "Et|(tt|)*30mL" (DeepSeek-V3 at pp 8 × vp 4). Default: the even split.
    #[arg(long)]
    pub pipeline_layout: Option<String>,
    // Its help lists the kinds `plait-schedule` knows, with their rules.
    #[arg(long, default_value = "1f1b", value_parser = parse_keyword::<Schedule>, help = schedule_help("--vp", "pp"))]
    pub schedule: Schedule,
}

/// The help of a `--schedule` flag: every kind `plait-schedule` knows, what it is and the
/// rules a user meets (`chunks` names the flag of the chunks per rank, `ranks` the pipeline
/// ranks), so that a new schedule needs no edit here.
pub(crate) fn schedule_help(chunks: &str, ranks: &str) -> String {
    let kinds: Vec<String> = Schedule::ALL
        .iter()
        .map(|&k| {
            let mut rules = vec![k.summary().to_string()];
            match k.fixed_chunks() {
                Some(n) => rules.push(format!("implies {chunks} {n}")),
                None if k.accepts_chunks(2) => rules.push(format!("implied by {chunks} > 1")),
                None => {}
            }
            if let Some(allowed) = k.microbatches_allowed() {
                rules.push(format!("micro-batches: {}", allowed.replace("pp", ranks)));
            }
            format!("{} ({})", k.keyword(), rules.join("; "))
        })
        .collect();
    format!("Pipeline schedule: {}", kinds.join(", "))
}

pub(crate) fn parse_keyword<T: std::str::FromStr<Err = String>>(
    s: &str,
) -> std::result::Result<T, String> {
    s.parse()
}

/// Longest sequence a workload may have: 2^27 = 134,217,728 tokens, 13× the longest context
/// any published model trains or serves (Llama 4 Scout's 10M). Beyond it no answer changes
/// but the searches that scale with it (activation memory, the smallest GPU count) run on.
pub(crate) const MAX_SEQ: u64 = 1 << 27;

/// `--seq`: at least 1 and at most [`MAX_SEQ`].
pub(crate) fn sequence(v: i64) -> Result<u64, SpecError> {
    let seq = positive("seq", v)?;
    if seq > MAX_SEQ {
        return Err(SpecError::new(
            "--seq",
            "seq",
            format!("{seq} tokens is longer than any model trains on"),
            format!("integers from 1 to {MAX_SEQ}"),
        ));
    }
    Ok(seq)
}

/// `--flag`: at least 1 and at most `max` (a count whose work grows with it).
pub(crate) fn bounded(flag: &str, v: i64, max: u64, why: &str) -> Result<u64, SpecError> {
    let n = positive(flag, v)?;
    if n > max {
        return Err(SpecError::new(
            format!("--{flag}"),
            flag,
            format!("{n} is more than {why}"),
            format!("integers from 1 to {max}"),
        ));
    }
    Ok(n)
}

/// A count of blocks that may be 0.
fn layer_count(flag: &str, v: i64) -> Result<u64, SpecError> {
    u64::try_from(v).map_err(|_| {
        SpecError::new(
            format!("--{flag}"),
            flag,
            format!("must be ≥ 0, got {v}"),
            "integers ≥ 0",
        )
    })
}

pub(crate) fn positive(flag: &str, v: i64) -> Result<u64, SpecError> {
    if v <= 0 {
        Err(SpecError::new(
            format!("--{flag}"),
            flag,
            format!("must be ≥ 1, got {v}"),
            "integers ≥ 1",
        ))
    } else {
        Ok(v as u64)
    }
}

/// A runtime error whose message names the request's fields (`workers`, `seq`,
/// `checkpoint.dir`) reworded with the flags that set them (`--workers`, `--seq`,
/// `--checkpoint-dir`); any other error as it is.
pub(crate) fn runtime_flags(e: anyhow::Error) -> anyhow::Error {
    match e.downcast::<RuntimeError>() {
        Ok(r) if r.names_fields() => {
            let mut text = r.message_naming(&|field| crate::flag_for(field));
            // The command line takes `auto` as well as an explicit plan.
            if matches!(r, RuntimeError::PlanMismatch(PlanMismatch::Syntax { .. })) {
                text += " (or auto)";
            }
            anyhow::Error::msg(text)
        }
        Ok(r) => r.into(),
        Err(e) => e,
    }
}

/// Everything one estimate needs.
pub struct Resolved {
    pub model: ModelSpec,
    pub cluster: ClusterSpec,
    pub train: TrainSpec,
    pub device: DeviceModel,
    pub profile_name: Option<String>,
}

pub(crate) use plait_runtime::files::{
    read_capped as read_bytes, read_text_capped as read_text, MAX_CONFIG_BYTES, MAX_GRAPH_BYTES,
    MAX_ONNX_BYTES,
};

fn looks_like_path(s: &str) -> bool {
    s.contains('/')
        || s.contains('\\')
        || s.ends_with(".json")
        || s.ends_with(".toml")
        || Path::new(s).is_file()
}

/// A preset by name, or a file parsed by `parse` when `name` looks like a path.
fn preset_or_file<T>(
    flag: &str,
    name: &str,
    preset: fn(&str) -> Result<T, SpecError>,
    parse: fn(&str, &str) -> Result<T, SpecError>,
) -> Result<T> {
    if looks_like_path(name) {
        let text = read_text(Path::new(name), MAX_CONFIG_BYTES)
            .with_context(|| format!("{flag}: cannot read `{name}`"))?;
        Ok(parse(&text, name)?)
    } else {
        Ok(preset(name)?)
    }
}

pub fn load_model(name: &str) -> Result<ModelSpec> {
    // A Hugging Face model directory holds its config.json.
    let dir = Path::new(name);
    if dir.is_dir() {
        let config = dir.join("config.json");
        if !config.is_file() {
            bail!("--model: `{name}` is a directory without a config.json (allowed: a preset, a config.json, or a model directory holding one)");
        }
        return load_model(&config.to_string_lossy());
    }
    preset_or_file("--model", name, model_preset, model_from_hf_config)
}

pub fn load_cluster(name: &str) -> Result<ClusterSpec> {
    preset_or_file("--cluster", name, cluster_preset, cluster_from_toml)
}

impl WorkloadArgs {
    /// Whether `--model` names an ONNX file (a general DAG rather than a transformer).
    pub fn is_onnx(&self) -> bool {
        self.model.to_ascii_lowercase().ends_with(".onnx")
    }

    /// The cluster and its device model, for inputs that are not a transformer spec.
    pub fn resolve_cluster(&self) -> Result<(ClusterSpec, DeviceModel)> {
        let cluster = load_cluster(&self.cluster)?;
        let device = device_for(&cluster, self.dtype)?;
        Ok((cluster, device))
    }

    pub fn resolve(&self) -> Result<Resolved> {
        self.resolve_under(Engine::Megatron, None)
    }

    /// As [`WorkloadArgs::resolve`], with `default_engine` where no --engine is given and
    /// `default_float8` where an fp8 run gives no --float8-recipe (`plan --export X` plans
    /// under X's engine and the recipe X's converter runs; `None`: the engine's default).
    pub fn resolve_under(
        &self,
        default_engine: Engine,
        default_float8: Option<Float8Recipe>,
    ) -> Result<Resolved> {
        let model = load_model(&self.model)?;
        let cluster = load_cluster(&self.cluster)?;
        let mut train = TrainSpec {
            dtype: self.dtype,
            attention: self.attention,
            dropout: self.dropout,
            overlap_grad_reduce: !self.no_overlap_grad_reduce,
            engine: self.engine.unwrap_or(default_engine),
            moe_skew: if self.moe_skew.is_finite() && (1.0..=64.0).contains(&self.moe_skew) {
                self.moe_skew
            } else {
                bail!(
                    "--moe-skew: {} is not a load imbalance (allowed: a number from 1 to 64)",
                    self.moe_skew
                )
            },
            moe_capacity: match self.moe_capacity {
                Some(f) if !(f.is_finite() && (0.01..=64.0).contains(&f)) => bail!(
                    "--moe-capacity: {f} is not a capacity factor (allowed: a number from 0.01 to 64)"
                ),
                other => other,
            },
            task: self.task,
            lora: Lora {
                rank: positive("lora-rank", self.lora_rank)?,
                targets: Lora::parse_targets(&self.lora_targets)
                    .map_err(|e| anyhow::anyhow!("--lora-targets: {e}"))?,
            },
            pack_len: match self.pack_len {
                None => None,
                Some(_) if self.task == Task::Pretrain => bail!(
                    "--pack-len: packing applies to fine-tuning (allowed with --task sft or lora)"
                ),
                Some(p) => {
                    let p = positive("pack-len", p)?;
                    if p > sequence(self.seq)? {
                        bail!(
                            "--pack-len: {p} is longer than the sequence (allowed: 1 to --seq = {})",
                            self.seq
                        );
                    }
                    Some(p)
                }
            },
            sample_lengths: match &self.sample_lengths {
                None => Vec::new(),
                Some(_) if self.task == Task::Pretrain => bail!(
                    "--sample-lengths: packing applies to fine-tuning (allowed with --task sft or lora)"
                ),
                Some(text) => plait_spec::parse_sample_lengths(text, sequence(self.seq)?)
                    .map_err(|e| anyhow::anyhow!("--sample-lengths: {e}"))?,
            },
            compile: self.compile,
            compile_loss: match &self.compile_components {
                None => true,
                Some(list) => {
                    if !self.compile {
                        bail!("--compile-components: says what --compile compiles (allowed with --compile)");
                    }
                    plait_spec::parse_compile_components(list)
                        .map_err(|e| anyhow::anyhow!("--compile-components: {e}"))?
                }
            },
            async_tp: self.async_tp,
            sdpa: self.sdpa,
            float8_recipe: self.float8_recipe,
            float8_all_gather: self.float8_all_gather,
            sixteen_bit_weights: self.no_fp8_param_gather,
            cuda_graphs: self.cuda_graphs,
            bf16_first_layers: layer_count("bf16-first-layers", self.bf16_first_layers)?,
            bf16_last_layers: layer_count("bf16-last-layers", self.bf16_last_layers)?,
            optimizer_state: self.optimizer_state,
            cpu_offload_layers: layer_count("cpu-offload-layers", self.cpu_offload_layers)?,
            optimizer_offload: self.optimizer_offload,
            ..TrainSpec::new(positive("gbs", self.gbs)?, sequence(self.seq)?)
        };
        if let Err(e) = plait_spec::ParallelConfig::check_bf16_layers(&model, &train)
            .and_then(|()| plait_spec::ParallelConfig::check_cpu_offload_train(&model, &train))
            .and_then(|()| plait_spec::ParallelConfig::check_optimizer_offload_train(&train))
            .and_then(|()| plait_spec::ParallelConfig::check_cuda_graphs_train(&train))
        {
            bail!(
                "{}: {} (allowed: {})",
                crate::flag_for(&e.field),
                e.problem,
                e.allowed
            );
        }
        // An fp8 run that names no recipe runs the one the caller expects.
        if self.float8_recipe.is_none() && train.dtype == Dtype::Fp8 {
            train.float8_recipe = default_float8;
        }
        if train.sdpa == Sdpa::Cudnn && !train.engine.calls_sdpa() {
            bail!(
                "--sdpa: engine {} does not call PyTorch's scaled_dot_product_attention (allowed: flash; cudnn with --engine torchtitan)",
                train.engine.keyword()
            );
        }
        if let Some(why) = train.float8_recipe_refused() {
            bail!("--float8-recipe: {why}");
        }
        if train.float8_all_gather && !train.gathers_float8() {
            bail!(
                "--float8-all-gather: torchao gathers fp8 weights under the tensorwise recipe alone (allowed with --dtype fp8 --engine torchtitan --float8-recipe tensorwise; got --dtype {} --engine {} --float8-recipe {})",
                train.dtype,
                train.engine.keyword(),
                train.fp8_recipe().map_or("none", Float8Recipe::keyword)
            );
        }
        if train.sixteen_bit_weights && !train.chooses_weight_format() {
            bail!(
                "--no-fp8-param-gather: only Megatron-Core keeps quantised weights to turn off (allowed with --engine megatron --dtype fp8 or mxfp8; got --engine {} --dtype {})",
                train.engine.keyword(),
                train.dtype
            );
        }
        if train.async_tp && !train.compile {
            bail!("--async-tp: torchtitan's async tensor parallelism runs in compiled blocks (allowed with --compile)");
        }
        if train.compile && !train.engine.compiles() {
            bail!(
                "--compile: engine {} has no torch.compile path (allowed with --engine {})",
                train.engine.keyword(),
                plait_spec::Engine::compiling()
            );
        }
        if train.task == Task::Lora && train.lora.rank > model.hidden {
            bail!(
                "--lora-rank: {} exceeds the model's hidden size {} (allowed: 1 to {})",
                train.lora.rank,
                model.hidden,
                model.hidden
            );
        }
        let mut device = device_for(&cluster, self.dtype)?;
        let profile = match (&self.profile, self.no_profile) {
            (Some(_), true) => bail!("--profile and --no-profile contradict each other"),
            (Some(path), false) => {
                let text = read_text(Path::new(path), MAX_CONFIG_BYTES)
                    .with_context(|| format!("--profile: cannot read `{path}`"))?;
                Some((Profile::parse(&text, path)?, path.clone()))
            }
            (None, false) => {
                Profile::builtin_for(&cluster.gpu).map(|(p, name)| (p, name.to_string()))
            }
            _ => None,
        };
        let profile_name = match profile {
            Some((p, name)) => {
                device.check_profile(
                    &p,
                    self.dtype,
                    cluster.gpu.memory_bandwidth_bytes_per_s,
                    &name,
                )?;
                device = device.clone().with_profile(&p, self.dtype);
                Some(name)
            }
            None => None,
        };
        Ok(Resolved {
            model,
            cluster,
            train,
            device,
            profile_name,
        })
    }

    /// GPUs requested, if given.
    pub fn gpus(&self) -> Result<Option<u64>, SpecError> {
        self.gpus.map(|g| positive("gpus", g)).transpose()
    }
}

/// Model replicas (the data-parallel degree) that `gpus` GPUs hold at `model_parallel`
/// GPUs each.
fn replicas(gpus: u64, model_parallel: u64) -> Result<u64, SpecError> {
    if !gpus.is_multiple_of(model_parallel) {
        return Err(SpecError::new(
            "--gpus",
            "gpus",
            format!("{gpus} GPUs do not split into tp×pp×cp = {model_parallel} model replicas"),
            format!("multiples of {model_parallel}"),
        ));
    }
    Ok(gpus / model_parallel)
}

impl ConfigArgs {
    /// The layout of `c`'s blocks: Megatron's even split, or the given pipeline layout; with
    /// `--recompute-layers` blocks of each chunk recomputed where given (which needs full
    /// recomputation).
    pub fn stage_map(
        &self,
        m: &plait_spec::ModelSpec,
        t: &plait_spec::TrainSpec,
        c: &ParallelConfig,
    ) -> Result<plait_spec::StageMap, SpecError> {
        let map = match &self.pipeline_layout {
            None => plait_spec::StageMap::uniform_checked(m, t, c)?,
            Some(layout) => {
                c.validate(m, t, c.gpus())?;
                plait_spec::StageMap::from_megatron_layout(layout, m, c)?
            }
        };
        let Some(n) = self.recompute_layers else {
            return Ok(map);
        };
        let n = positive("recompute-layers", n)?;
        if c.recompute != Recompute::Full {
            return Err(SpecError::new(
                "--recompute-layers",
                "recompute_layers",
                format!(
                    "counts fully recomputed blocks, but recomputation is {}",
                    c.recompute
                ),
                "--recompute full (or recompute=full in --config) with it",
            ));
        }
        Ok(map.with_block_recompute(n, c.pp))
    }

    /// The configuration, with dp derived from `gpus` when not given.
    pub fn resolve(&self, gpus: Option<u64>) -> Result<ParallelConfig, SpecError> {
        if let Some(text) = &self.config {
            let (mut c, dp) = plait_spec::parse_config_items(text).map_err(|e| {
                SpecError::new(
                    "--config",
                    "config",
                    e,
                    "the configuration syntax of `plait plan`",
                )
            })?;
            if let (None, Some(g)) = (dp, gpus) {
                c.dp = replicas(g, c.replica_gpus())?;
            }
            return Ok(c.normalised());
        }
        let k = &self.knobs;
        let given = |d: Degree| positive(d.name(), k.degree(d).unwrap_or(1));
        let mut c = ParallelConfig {
            sp: self.sp,
            recompute: self.recompute.0,
            recompute_modules: self.recompute.1,
            ..ParallelConfig::default()
        };
        // The degrees that split a replica first: dp is the replicas the GPUs hold.
        for &d in Degree::ALL.iter().filter(|d| d.splits_replica()) {
            *c.degree_mut(d) = given(d)?;
        }
        c.dp = match (k.degree(Degree::Dp), gpus) {
            (Some(dp), _) => positive("dp", dp)?,
            (None, Some(g)) => replicas(g, c.replica_gpus())?,
            (None, None) => 1,
        };
        let zero = k.zero.unwrap_or(0);
        if !(0..=3).contains(&zero) {
            return Err(SpecError::new(
                "--zero",
                "zero",
                format!("ZeRO stage {zero} does not exist"),
                "0|1|2|3",
            ));
        }
        c.zero = zero as u8;
        for &d in Degree::ALL.iter().filter(|d| d.mesh_dim().is_none()) {
            *c.degree_mut(d) = given(d)?;
        }
        c.mbs = positive("mbs", k.mbs.unwrap_or(1))?;
        c.etp = k.etp.map(|e| positive("etp", e)).transpose()?;
        c.dp_shard = k.shard.map(|s| positive("shard", s)).transpose()?;
        c.cp_comm = k.cp_comm.unwrap_or(CpComm::P2p);
        c.moe_dispatcher = k.moe_dispatcher.unwrap_or_default();
        c.moe_a2a_overlap = k.moe_a2a_overlap;
        c = c.normalised();
        if c.vp > 1 && self.schedule == Schedule::OneFOneB {
            c.schedule = Schedule::Interleaved;
        } else {
            c.schedule = self.schedule;
        }
        // A schedule of a fixed chunk count (ZB-V: two) sets vp when --vp is not given.
        c.vp = c
            .schedule
            .chunks_per_rank(k.degree(Degree::Vp).map(|_| c.vp));
        Ok(c)
    }
}
