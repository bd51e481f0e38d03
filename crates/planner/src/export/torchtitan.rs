//! torchtitan 0.2: a job config TOML (`torchtitan.toml`, `--export torchtitan-0.2`), and the
//! checks and pieces both torchtitan exports share (`torchtitan_py` writes the 0.3 form).
//!
//! Keys checked against pytorch/torchtitan v0.2.2 (commit
//! 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), `torchtitan/config/job_config.py` — the last
//! release whose trainer reads TOML (`--job.config_file`, `run_train.sh`'s `CONFIG_FILE`); its
//! loader (`config/manager.py`, `_dict_to_dataclass`) rejects unknown keys. torchtitan after
//! #2386 (February 2026; released as 0.3.0) builds the configuration in Python instead and has
//! no `[job]` or `[model]` section: `torchtitan_py` writes that form.
//! * `[model]` `name`, `flavor`, `converters` (`"quantize.linear.float8"`, registered in
//!   `components/quantization/float8.py`); flavors from `models/llama3/__init__.py`.
//! * `[training]` `local_batch_size`, `global_batch_size`, `seq_len`, `max_norm`,
//!   `mixed_precision_param`, `mixed_precision_reduce` (`train.py`: accumulation steps =
//!   global / (local × dp)).
//! * `[parallelism]` `data_parallel_replicate_degree`, `data_parallel_shard_degree`,
//!   `fsdp_reshard_after_forward` (`default|always|never`), `tensor_parallel_degree`,
//!   `enable_async_tensor_parallel` (with `[compile]`),
//!   `context_parallel_degree`, `expert_parallel_degree`, `pipeline_parallel_degree`,
//!   `pipeline_parallel_schedule`, `pipeline_parallel_microbatch_size`,
//!   `module_fqns_per_model_part` (stage i = chunk·pp + rank for looped schedules,
//!   `distributed/pipeline_parallel.py`); schedule names from PyTorch's
//!   `torch/distributed/pipelining/schedules.py` `get_schedule_class` (`1F1B`, `GPipe`,
//!   `Interleaved1F1B`, `InterleavedZeroBubble` = ZB1P, i.e. ZB-H1 per stage).
//! * `[activation_checkpoint]` `mode` (`selective|full|memory_budget|none`),
//!   `selective_ac_option` (`"op"` or a layer frequency; `distributed/activation_checkpoint.py`).
//! * `[compile]` `enable`, `components` (`["model", "loss"]`), written when the plan was
//!   costed compiled (`TrainSpec::compile`).
//! * `[quantize.linear.float8]` `filter_fqns`, `recipe_name` (`tensorwise` when unset,
//!   `rowwise`, `rowwise_with_gw_hp`), `enable_fsdp_float8_all_gather` and
//!   `precompute_float8_dynamic_scale_for_fsdp` (tensor-wise only).
//!
//! What torchtitan cannot run, and where that was read:
//! * ZeRO-0 data parallelism beside other dimensions: `models/llama3/infra/parallelize.py`
//!   applies DDP only when it is the only dimension ("DDP has not supported > 1D
//!   parallelism"); any sharded data parallelism is FSDP2 (`fully_shard`), which shards the
//!   parameters too (ZeRO-3 at rest), over dp_shard × cp (`distributed/parallel_dims.py`).
//! * Tensor parallelism without sequence parallelism: `apply_tp` always shards the norms along
//!   the sequence (`SequenceParallel`).
//! * Per-rank recompute counts: AC wraps every block (`full`), every n-th block by a global
//!   counter, or ops (`selective`); never "the first k blocks of each stage".
//! * Merak's scp schedule; sequences not divisible by 2·tp·cp (`parallel_dims.seq_len_divisor`).
//! * Models other than the llama3 architecture (RMSNorm, SwiGLU, RoPE, no biases, untied head).

use plait_spec::{
    Activation, AttentionImpl, CpComm, Dtype, Engine, Family, ModelSpec, Norm, Positions, Sdpa,
    TrainSpec,
};

use super::{commented, list, pipe, recompute, summary_lines, ExportFile, Layout, Pipe, Rc};
use crate::Plan;

pub(super) const FILE: &str = "torchtitan.toml";

/// torchtitan v0.2.2's llama3 flavors: (flavor, hidden, layers, heads, kv heads, MLP width,
/// vocabulary), MLP widths as its `FeedForward` computes them.
const LLAMA3_FLAVORS: &[(&str, u64, u64, u64, u64, u64, u64)] = &[
    ("8B", 4096, 32, 32, 8, 14336, 128256),
    ("70B", 8192, 80, 64, 8, 28672, 128256),
    ("405B", 16384, 126, 128, 8, 53248, 128256),
];

/// Why torchtitan cannot run `c`'s pipeline schedule over `microbatches` micro-batches, if
/// it cannot.
pub(super) fn schedule_reasons(c: &plait_spec::ParallelConfig, microbatches: u64) -> Vec<String> {
    let mut out = Vec::new();
    match pipe(c) {
        Pipe::Scp => out.push(
            "the shifted-critical-path schedule (scp) is Merak's; torch.distributed.pipelining \
             has none"
                .to_string(),
        ),
        Pipe::ZbH1 => {
            // ScheduleInterleavedZeroBubble runs rounds of pp micro-batches.
            let m = microbatches;
            let rounds = (m / c.pp).max(1);
            if !m.is_multiple_of(rounds) {
                out.push(format!(
                    "ZB-H1 runs as InterleavedZeroBubble, which needs the micro-batch count \
                     ({m}) to be a multiple of its rounds (max(1, m / pp) = {rounds})"
                ));
            }
        }
        Pipe::Other(kind) => out.push(super::unknown_schedule("torchtitan", kind)),
        Pipe::None
        | Pipe::OneFOneB
        | Pipe::Interleaved
        | Pipe::Gpipe
        | Pipe::ZbV
        | Pipe::DualPipeV => {}
    }
    out
}

pub(super) fn plan_reasons(plan: &Layout) -> Vec<String> {
    let c = &plan.config;
    let mut out = schedule_reasons(c, plan.microbatches);
    if c.zero == 0 && c.dp > 1 && (c.tp > 1 || c.pp > 1 || c.cp > 1) {
        out.push(format!(
            "replicated data parallelism (ZeRO-0, dp = {}) beside tp/pp/cp: torchtitan's DDP \
             runs only when data parallelism is the sole dimension; use zero ≥ 1 (FSDP)",
            c.dp
        ));
    }
    if c.cp > 1 && c.cp_comm == CpComm::A2a {
        out.push(format!(
            "all-to-all context parallelism (Ulysses, cp = {}): torchtitan's context \
             parallelism is ring attention over SDPA (its kv shards all-gathered or rotated)",
            c.cp
        ));
    }
    if c.zero == 0 && c.cp > 1 {
        out.push(format!(
            "ZeRO-0 with cp = {}: torchtitan shards parameters with FSDP over the \
             context-parallel ranks; use zero ≥ 1",
            c.cp
        ));
    }
    if c.tp > 1 && !c.sp {
        out.push(format!(
            "tp = {} without sequence parallelism: torchtitan's tensor parallelism always \
             shards the norms along the sequence; use sequence parallelism (sp)",
            c.tp
        ));
    }
    if let Rc::Partial { counts, .. } = recompute(plan) {
        out.push(format!(
            "it recomputes {} blocks in full per pipeline rank, but torchtitan checkpoints \
             every block, every n-th block of the model, or selected ops",
            list(&counts)
        ));
    }
    out
}

pub(super) fn model_reasons(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<String> {
    let c = &plan.config;
    let mut out = Vec::new();
    if matches!(train.dtype, Dtype::Mxfp8 | Dtype::Nvfp4) {
        out.push(format!(
            "{}: the torchtitan exports write only its float8 converter",
            train.dtype
        ));
    }
    if let (Some(factor), Some(_)) = (train.moe_capacity, model.moe) {
        out.push(format!(
            "an expert capacity factor of {factor} (token dropping): the torchtitan exports \
             write no capacity setting, and plait costs its MoE as dropless"
        ));
    }
    match model.family {
        Family::Gpt | Family::Bert => out.push(format!(
            "{} is a {} model (LayerNorm, GELU, learned positions) and torchtitan ships none: \
             its language models are llama3, llama4, qwen3, deepseek_v3 and gpt_oss",
            model.name,
            if model.family == Family::Gpt {
                "GPT"
            } else {
                "BERT"
            }
        )),
        Family::Moe => out.push(format!(
            "{} is a Mixtral-style MoE and torchtitan ships none (its MoE models, llama4, \
             qwen3, deepseek_v3 and gpt_oss, differ in routing and shared experts)",
            model.name
        )),
        Family::Llama => {
            let llama3 = model.norm == Norm::RmsNorm
                && model.activation == Activation::SwiGlu
                && model.positions == Positions::Rotary
                && !model.qkv_bias
                && !model.linear_bias
                && !model.tied_embeddings
                && model.head_dim * model.heads == model.hidden;
            if !llama3 {
                out.push(format!(
                    "{} departs from torchtitan's llama3 block (RMSNorm, SwiGLU, RoPE, no \
                     biases, untied head, head_dim = hidden / heads)",
                    model.name
                ));
            }
            if let Some(scaling) = model
                .rope_scaling
                .as_ref()
                .filter(|r| !matches!(r, plait_spec::RopeScaling::Llama3 { .. }))
            {
                out.push(format!(
                    "{}'s RoPE scaling ({scaling:?}): torchtitan's llama3 knows only Llama \
                     3.1's (`RoPEScalingArgs`, models/llama3/model/args.py)",
                    model.name
                ));
            }
        }
    }
    if train.dtype == Dtype::Fp16 {
        out.push(
            "fp16: torchtitan's mixed precision is bfloat16 or float32 \
             (training.mixed_precision_param)"
                .to_string(),
        );
    }
    let divisor = 2 * c.tp * c.cp;
    if !train.seq.is_multiple_of(divisor) {
        out.push(format!(
            "torchtitan needs the sequence ({}) to be a multiple of tp × 2·cp = {divisor}",
            train.seq
        ));
    }
    out
}

/// `["a", "b"]`: a list of strings as TOML and Python both write it.
pub(super) fn quoted_list<S: AsRef<str>>(items: &[S]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[{}]", quoted.join(", "))
}

pub(super) fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The stock llama3 flavor of `model` (the same shapes in torchtitan 0.2.2 and 0.3.0).
pub(super) fn flavor(model: &ModelSpec) -> Option<&'static str> {
    let key = (
        model.hidden,
        model.layers,
        model.heads,
        model.kv_heads,
        model.ffn_hidden,
        model.vocab,
    );
    // The stock flavors rope at θ = 500000 with Llama 3.1's scaling (torchtitan 0.2.2
    // `models/llama3/__init__.py`, `RoPEScalingArgs` defaults in `model/args.py`); a model
    // of the same shape that ropes otherwise needs a definition of its own.
    let stock_rope =
        model.rope_theta == 500000.0 && rope_scaling_args(model) == rope_scaling_args_default();
    LLAMA3_FLAVORS
        .iter()
        .filter(|_| stock_rope)
        .find(|f| (f.1, f.2, f.3, f.4, f.5, f.6) == key)
        .map(|f| f.0)
}

/// torchtitan 0.2.2's `RoPEScalingArgs` defaults: Llama 3.1's scaling (`model/args.py`).
fn rope_scaling_args_default() -> String {
    "RoPEScalingArgs(scaling_factor=8, low_freq_factor=1, high_freq_factor=4, \
     original_max_position_embeddings=8192)"
        .into()
}

/// `rope_scaling_args` for `model` in torchtitan 0.2.2, which applies a scaling always:
/// the model's Llama 3.1 scaling, or factor 1 (every frequency kept) for a model without.
/// (`model_reasons` refuses the other methods.)
pub(super) fn rope_scaling_args(model: &ModelSpec) -> String {
    match model.rope_scaling {
        Some(plait_spec::RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_positions,
        }) => format!(
            "RoPEScalingArgs(scaling_factor={factor}, low_freq_factor={low_freq_factor}, \
             high_freq_factor={high_freq_factor}, \
             original_max_position_embeddings={original_max_positions})"
        ),
        _ => "RoPEScalingArgs(scaling_factor=1, low_freq_factor=1, high_freq_factor=4, \
              original_max_position_embeddings=8192)"
            .into(),
    }
}

/// The MLP width as torchtitan's arguments give it: `multiple_of` (and `ffn_dim_multiplier`),
/// from hidden = multiple_of · ceil(int(multiplier · int(2·4h/3)) / multiple_of).
pub(super) fn mlp_args(model: &ModelSpec) -> String {
    let base = 8 * model.hidden / 3;
    let ffn = model.ffn_hidden;
    [256u64, 1024, 4096]
        .iter()
        .find(|&&k| base.div_ceil(k) * k == ffn)
        .map(|k| format!("multiple_of={k}"))
        .unwrap_or_else(|| {
            if base <= ffn {
                format!("multiple_of={ffn}")
            } else {
                format!(
                    "multiple_of={ffn}, ffn_dim_multiplier={}",
                    ffn as f64 / base as f64
                )
            }
        })
}

/// The flavor definition to register in torchtitan 0.2.2 for a shape it has none of.
fn definition(model: &ModelSpec) -> String {
    format!(
        "TransformerModelArgs(dim={}, n_layers={}, n_heads={}, n_kv_heads={}, vocab_size={}, \
         {}, rope_theta={}, rope_scaling_args={})",
        model.hidden,
        model.layers,
        model.heads,
        model.kv_heads,
        model.vocab,
        mlp_args(model),
        model.rope_theta,
        rope_scaling_args(model)
    )
}

/// What both torchtitan exports set from the plan's batch and data parallelism.
pub(super) struct Batch {
    /// `training.local_batch_size`: with pipelining, one step's local batch holds all m
    /// micro-batches of the pipeline; without, torchtitan accumulates m local batches of one
    /// micro-batch each.
    pub local: u64,
    /// `parallelism.data_parallel_replicate_degree`, `data_parallel_shard_degree`.
    pub replicate: u64,
    pub shard: u64,
    /// `parallelism.fsdp_reshard_after_forward`, where sharded.
    pub reshard: Option<&'static str>,
}

pub(super) fn batch(plan: &Plan) -> Batch {
    let c = &plan.config;
    let local = if c.pp > 1 {
        c.mbs * plan.microbatches
    } else {
        c.mbs
    };
    // FSDP2 shards over dp_shard and, with hybrid sharding (HSDP), replicates over
    // dp_replicate (`parallel_dims.py`: the two multiply to the data-parallel degree).
    let (replicate, shard) = (c.dp_replicas(), c.dp_shard());
    let (replicate, shard, reshard) = match c.zero {
        0 => (c.dp, 1, None),
        1 | 2 => (replicate, shard, Some("never")),
        _ => (replicate, shard, Some("always")),
    };
    Batch {
        local,
        replicate,
        shard,
        reshard,
    }
}

/// torchao's name of the fp8 recipe `train` was costed with (`Float8LinearRecipeName`):
/// none for a Transformer Engine recipe (which `export` refuses for torchtitan) or a run
/// without fp8.
pub(super) fn torchao_recipe_name(train: &TrainSpec) -> Option<&'static str> {
    match train.fp8_recipe_under(plait_spec::Engine::Torchtitan)? {
        plait_spec::Float8Recipe::Tensorwise => Some("tensorwise"),
        plait_spec::Float8Recipe::Rowwise => Some("rowwise"),
        plait_spec::Float8Recipe::RowwiseGwHp => Some("rowwise_with_gw_hp"),
        plait_spec::Float8Recipe::Delayed | plait_spec::Float8Recipe::Blockwise => None,
    }
}

/// `parallelism.pipeline_parallel_schedule` (PyTorch's `get_schedule_class` names).
pub(super) fn schedule_name(c: &plait_spec::ParallelConfig) -> &'static str {
    match pipe(c) {
        Pipe::Interleaved => "Interleaved1F1B",
        Pipe::Gpipe => "GPipe",
        Pipe::ZbH1 => "InterleavedZeroBubble",
        Pipe::ZbV => "ZBVZeroBubble",
        // torch's `ScheduleDualPipeV`, which torchtitan places in a V as it does ZB-V
        // (torchtitan b5bcd76 `distributed/pipeline_parallel.py`, style "v").
        Pipe::DualPipeV => "DualPipeV",
        _ => "1F1B",
    }
}

/// `parallelism.module_fqns_per_model_part`: stage j = chunk·pp + rank, as plait numbers its
/// virtual stages; `head` is the output projection's name (`output` in 0.2.2, `lm_head` in
/// 0.3.0).
pub(super) fn model_parts(plan: &Plan, head: &str) -> Vec<Vec<String>> {
    let stages = plan.stage_map.chunk_blocks.len();
    let mut next = 0u64;
    let mut parts = Vec::with_capacity(stages);
    for (j, &k) in plan.stage_map.chunk_blocks.iter().enumerate() {
        let mut names: Vec<String> = Vec::new();
        if j == 0 {
            names.push("tok_embeddings".into());
        }
        names.extend((next..next + k).map(|i| format!("layers.{i}")));
        next += k;
        if j + 1 == stages {
            names.push("norm".into());
            names.push(head.into());
        }
        parts.push(names);
    }
    parts
}

/// The notes both exports carry: how plait's ZeRO stages and recompute map onto torchtitan's,
/// and what the plan asked for that torchtitan does its own way. `selective` names the
/// selective policy's setting, `attention` how torchtitan computes attention.
pub(super) fn shared_notes(
    plan: &Plan,
    train: &TrainSpec,
    selective: &str,
    attention: &str,
) -> Vec<String> {
    let c = &plan.config;
    let b = batch(plan);
    let mut notes = Vec::new();
    match c.zero {
        1 | 2 if c.dp > 1 || c.cp > 1 => notes.push(format!(
            "ZeRO-{}: torchtitan's sharded data parallelism is FSDP2, which also shards the \
             parameters at rest; fsdp_reshard_after_forward = \"never\" keeps them gathered \
             from forward to backward, as ZeRO-1/2 do",
            c.zero
        )),
        3 if c.dp > 1 || c.cp > 1 => notes.push(
            "ZeRO-3 is FSDP2 resharding after every forward (fsdp_reshard_after_forward = \
             \"always\")"
                .into(),
        ),
        _ => {}
    }
    if c.cp > 1 {
        notes.push(format!(
            "FSDP shards over dp_shard × cp = {} ranks",
            b.shard * c.cp
        ));
    }
    // Under the torchtitan engine plait costed the op-level policy itself.
    if recompute(&plan.layout()) == Rc::Selective && train.engine != Engine::Torchtitan {
        notes.push(format!(
            "selective recompute is torchtitan's op-level policy ({selective}: it keeps \
             attention outputs and every other matmul output and recomputes the rest), not \
             Megatron's attention-core recompute that plait modelled"
        ));
    }
    if train.attention == AttentionImpl::Unfused {
        notes.push(format!(
            "torchtitan computes attention with {attention}, not unfused"
        ));
    }
    // SDPA's backend follows the PyTorch it runs on, not the config (`plait_spec::Sdpa`).
    notes.push(match train.sdpa {
        Sdpa::Flash => "attention costed as SDPA's flash backend, PyTorch's default on Hopper \
             up to 2.9; PyTorch 2.10+ with cuDNN >= 9.15.1 puts cuDNN first (faster) unless \
             TORCH_CUDNN_SDPA_DEPRIORITIZED=1 is set"
            .into(),
        Sdpa::Cudnn => "attention costed as SDPA's cuDNN backend, first on Hopper and \
             Blackwell from PyTorch 2.10 with cuDNN >= 9.15.1 (2.11's cu130 wheels); older \
             PyTorch runs flash (slower)"
            .into(),
    });
    if train.dropout {
        notes.push("torchtitan's llama3 has no dropout".into());
    }
    if !train.overlap_grad_reduce {
        notes.push("FSDP2 and DDP always overlap gradient reduction with the backward".into());
    }
    notes
}

/// `torchtitan.toml`. Callers have checked the reasons.
pub(super) fn write(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<ExportFile> {
    let c = &plan.config;
    let mut notes: Vec<String> = Vec::new();
    let flavor_name = match flavor(model) {
        Some(f) => f.to_string(),
        None => {
            notes.push(format!(
                "torchtitan has no llama3 flavor with this shape: add \"{}\": {} to \
                 llama3_args in torchtitan/models/llama3/__init__.py",
                model.name,
                definition(model)
            ));
            model.name.clone()
        }
    };
    let pipelined = c.pp > 1;
    let Batch {
        local: local_batch,
        replicate,
        shard,
        reshard,
    } = batch(plan);
    notes.extend(shared_notes(
        plan,
        train,
        "selective_ac_option = \"op\"",
        "SDPA (flash)",
    ));

    let mut out = String::new();
    let mut head = vec![
        "torchtitan 0.2.2 job config written by plait (its torchtitan-0.2 export).".to_string(),
        String::new(),
    ];
    head.extend(summary_lines(plan, model, train));
    head.push(String::new());
    head.push(
        "keys checked against pytorch/torchtitan v0.2.2 (torchtitan/config/job_config.py), the \
         last release that reads TOML; torchtitan 0.3 builds its config in Python, which \
         plait's torchtitan export writes"
            .into(),
    );
    head.extend(notes.iter().map(|n| format!("note: {n}")));
    head.push(String::new());
    head.push(format!(
        "usage: NGPU=<GPUs per node> CONFIG_FILE=torchtitan.toml ./run_train.sh over {} GPUs \
         (dp×tp×pp×cp)",
        c.gpus()
    ));
    out.push_str(&commented("# ", &head));

    out.push_str("\n[job]\n");
    out.push_str(&format!(
        "description = {}\n",
        quote(&format!("plait: {} {}", model.name, c))
    ));

    out.push_str("\n[model]\n");
    out.push_str("name = \"llama3\"\n");
    out.push_str(&format!("flavor = {}\n", quote(&flavor_name)));
    if train.dtype == Dtype::Fp8 {
        out.push_str("converters = [\"quantize.linear.float8\"]\n");
    }

    out.push_str("\n[training]\n");
    out.push_str(&format!("local_batch_size = {local_batch}\n"));
    out.push_str(&format!("global_batch_size = {}\n", train.gbs));
    out.push_str(&format!("seq_len = {}\n", train.seq));
    out.push_str("max_norm = 1.0\n");
    out.push_str("mixed_precision_param = \"bfloat16\"\n");
    out.push_str("mixed_precision_reduce = \"float32\"\n");

    out.push_str("\n[parallelism]\n");
    out.push_str(&format!("data_parallel_replicate_degree = {replicate}\n"));
    out.push_str(&format!("data_parallel_shard_degree = {shard}\n"));
    if let Some(policy) = reshard {
        out.push_str(&format!("fsdp_reshard_after_forward = \"{policy}\"\n"));
    }
    out.push_str(&format!("tensor_parallel_degree = {}\n", c.tp));
    if train.async_tp {
        out.push_str("enable_async_tensor_parallel = true\n");
    }
    out.push_str(&format!("context_parallel_degree = {}\n", c.cp));
    if c.cp > 1 {
        // v0.2.2 `context_parallel_rotate_method`: "allgather" gathers every kv shard after
        // the first sub-SDPA, "alltoall" shuffles the shards round the ranks (the ring).
        let rotate = match c.cp_comm {
            CpComm::Allgather => "allgather",
            CpComm::P2p | CpComm::A2a => "alltoall",
        };
        out.push_str(&format!("context_parallel_rotate_method = \"{rotate}\"\n"));
    }
    out.push_str(&format!("expert_parallel_degree = {}\n", c.ep));
    out.push_str(&format!("pipeline_parallel_degree = {}\n", c.pp));
    if pipelined {
        let schedule = schedule_name(c);
        out.push_str(&format!("pipeline_parallel_schedule = \"{schedule}\"\n"));
        out.push_str(&format!("pipeline_parallel_microbatch_size = {}\n", c.mbs));
        out.push_str("module_fqns_per_model_part = [\n");
        for names in model_parts(plan, "output") {
            out.push_str(&format!("    {},\n", quoted_list(&names)));
        }
        out.push_str("]\n");
    }

    out.push_str("\n[activation_checkpoint]\n");
    match recompute(&plan.layout()) {
        Rc::Full => out.push_str("mode = \"full\"\n"),
        Rc::Selective => {
            out.push_str("mode = \"selective\"\n");
            out.push_str("selective_ac_option = \"op\"\n");
        }
        // `plan_reasons` refuses partial recompute.
        Rc::None | Rc::Partial { .. } => out.push_str("mode = \"none\"\n"),
    }

    if train.compile {
        out.push_str("\n[compile]\n");
        out.push_str("enable = true\n");
        out.push_str(&format!(
            "components = {}\n",
            quoted_list(train.compile_components())
        ));
    }

    if train.dtype == Dtype::Fp8 {
        out.push_str("\n[quantize.linear.float8]\n");
        out.push_str("filter_fqns = [\"output\"]\n");
        // `recipe_name` unset is torchao's tensor-wise recipe, the only one whose weights
        // FSDP gathers in fp8 (with their scales precomputed in one all-reduce).
        if train.float8_all_gather {
            out.push_str("enable_fsdp_float8_all_gather = true\n");
            out.push_str("precompute_float8_dynamic_scale_for_fsdp = true\n");
        }
        if let Some(name) = torchao_recipe_name(train).filter(|n| *n != "tensorwise") {
            out.push_str(&format!("recipe_name = {}\n", quote(name)));
        }
    }

    vec![ExportFile {
        name: FILE.into(),
        contents: out,
    }]
}
