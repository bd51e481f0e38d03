//! Megatron-LM: the arguments of Megatron-Core's `pretrain_gpt.py` (`pretrain_hybrid.py`
//! for Mamba-2 hybrids), as a bash array in `megatron_args.sh`.
//!
//! Every flag was checked against NVIDIA/Megatron-LM at commit
//! d98e8a64ddf34856e74b24714e3bedb2f5a39553:
//! * `megatron/training/arguments.py` — hand-written flags: `--rotary-base` (RoPE θ,
//!   `type=int`, default 10000), `--group-query-attention`,
//!   `--max-position-embeddings`, `--position-embedding-type {learned_absolute,rope,yarn,…}`
//!   with YaRN's `--rotary-scaling-factor`, `--yarn-original-max-position-embeddings`,
//!   `--yarn-beta-fast`, `--yarn-beta-slow`, `--mscale`, `--mscale-all-dim`,
//!   `--no-yarn-correction-range-round-to-int`,
//!   `--swiglu`, `--untie-embeddings-and-output-weights`, `--seq-length`, `--num-experts`,
//!   `--moe-grouped-gemm`, `--moe-token-dispatcher-type` (`--moe-flex-dispatcher-backend`),
//!   `--moe-expert-capacity-factor`,
//!   `--moe-pad-expert-input-to-capacity` (the last three `TransformerConfig` fields),
//!   `--decoder-first-pipeline-num-layers`, `--decoder-last-pipeline-num-layers`,
//!   `--pipeline-model-parallel-layout`, `--num-virtual-stages-per-pipeline-rank`,
//!   `--overlap-grad-reduce`, `--use-distributed-optimizer`,
//!   `--num-distributed-optimizer-instances` (hybrid sharding),
//!   `--data-parallel-sharding-strategy {no_shard,optim,optim_grads,optim_grads_params}`;
//!   `_add_network_size_args` builds the rest from the `TransformerConfig` dataclass with
//!   `ArgumentGroupFactory` (`megatron/training/argument_utils.py`: field `a_b` → `--a-b`,
//!   a `bool` defaulting to false → a store-true switch).
//! * `megatron/core/model_parallel_config.py` (dataclass fields, hence flags):
//!   `--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
//!   `--context-parallel-size`, `--expert-model-parallel-size`, `--sequence-parallel`,
//!   `--bf16`, `--fp16`.
//! * `megatron/core/transformer/transformer_config.py`: `--num-layers`, `--hidden-size`,
//!   `--num-attention-heads`, `--num-query-groups`, `--ffn-hidden-size`, `--kv-channels`,
//!   `--normalization {LayerNorm,RMSNorm}`, `--norm-epsilon` (field `layernorm_epsilon`,
//!   its `argparse_meta`), `--disable-bias-linear` (its `argparse_meta`),
//!   `--add-qkv-bias`, `--hidden-dropout`, `--attention-dropout`,
//!   `--attention-backend {flash,fused,unfused,local,auto}` (enum `AttnBackend`),
//!   `--recompute-granularity {full,selective}`, `--recompute-method {uniform,block}`,
//!   `--recompute-num-layers`, `--recompute-modules` (selective modules, space-separated),
//!   `--fp8-format {e4m3,hybrid}` (field `fp8`, its
//!   `argparse_meta`), `--fp8-recipe {tensorwise,delayed,mxfp8,blockwise}` (field
//!   `fp8_recipe`), `--overlap-moe-expert-parallel-comm` (field
//!   `overlap_moe_expert_parallel_comm`), `--moe-router-topk`.
//! * Hybrids (`HybridModel`, `pretrain_hybrid.py`): `--hybrid-layer-pattern` and `--spec`
//!   (arguments.py `_add_experimental_args`; `|` separates pipeline segments, segment
//!   `vp_stage·pp + pp_rank`, `megatron/core/models/hybrid/hybrid_layer_allocation.py`
//!   `select_pipeline_segment`; the pattern sets `num_layers` and the virtual stages, and
//!   excludes `--num-virtual-stages-per-pipeline-rank` and the layout flags,
//!   `validate_args`), `--squared-relu` (arguments.py), `--mamba-state-dim`,
//!   `--mamba-head-dim`, `--mamba-num-groups`, `--mamba-num-heads` (`TransformerConfig`),
//!   `--position-embedding-type none`; the `--spec` value and the flag set as
//!   `examples/mamba/train.sh` writes them. A hybrid's MTP module follows its layers in
//!   the unified pattern, `/` before each depth (`hybrid_model.py`, "M*M*/MM/MM"), with
//!   `--mtp-num-layers` and, for one module run at every depth, `--mtp-use-repeated-layer`
//!   (`TransformerConfig.mtp_use_repeated_layer`).
//! * `megatron/training/config/training_config.py` (`TrainingConfig`): `--micro-batch-size`,
//!   `--global-batch-size`; `megatron/training/config/common_config.py`
//!   (`DistributedInitConfig`): `--use-megatron-fsdp`; `training_config.py`
//!   (`CheckpointConfig.ckpt_format`): `--ckpt-format fsdp_dtensor`.
//!
//! What Megatron cannot run, and where that was read:
//! * GPipe, ZB-H1 and Merak's scp: `megatron/core/pipeline_parallel/schedules.py` has only
//!   `forward_backward_no_pipelining`, `…_pipelining_without_interleaving` (1F1B) and
//!   `…_pipelining_with_interleaving`; `--delay-wgrad-compute` only defers MoE expert weight
//!   gradients for all-to-all overlap (transformer_config.py), it is no zero-bubble schedule.
//! * Per-rank recompute counts: `megatron/core/recompute.py` — the `block` method
//!   recomputes the first `recompute_num_layers` layers of each `TransformerBlock`, i.e. of
//!   each virtual chunk, the same number everywhere; full and selective granularity are
//!   exclusive (`recompute_granularity` is one value).
//! * ZeRO-3 with pp > 1: ZeRO-3 is Megatron-FSDP (`--use-megatron-fsdp
//!   --data-parallel-sharding-strategy optim_grads_params`, docs/user-guide/features/
//!   megatron_fsdp.md), whose v2 rejects pipeline parallelism
//!   (`megatron/core/distributed/fsdp/mcore_fsdp_adapter.py`) and whose examples use pp = 1.
//!
//! Stage maps: Megatron splits a rank's layers evenly over its virtual chunks; an even map
//! needs no flag, first/last-rank differences map to `--decoder-{first,last}-pipeline-num-layers`
//! (`transformer_block.py`), and anything else to `--pipeline-model-parallel-layout`
//! (`megatron/core/transformer/pipeline_parallel_layer_layout.py`: stages split by `|`,
//! stage i = chunk·pp + rank, `E` embedding, `t` a block, `L` the loss, `x*n` repeats).
//!
//! The model's architecture flags (MoE, RoPE scaling, MLA, router, hybrids) are `model`'s;
//! this module writes the parallel layout, the schedule and the files.

use plait_spec::{
    AttentionImpl, CpComm, Dtype, Family, ModelSpec, MoeDispatcher, Norm, Positions, TrainSpec,
};

use super::{commented, list, pipe, recompute, summary_lines, ExportFile, Layout, Pipe, Rc};
use crate::Plan;
use model::{
    dense_layer_width, hybrid_reasons, mla_flags, moe_layer_flags, rope_scaling_flags, router_flags,
};

mod model;

pub(super) const FILE: &str = "megatron_args.sh";

/// Why Megatron-LM cannot run `c`'s pipeline schedule, if it cannot: it runs 1F1B and
/// interleaved 1F1B.
pub(super) fn schedule_reasons(c: &plait_spec::ParallelConfig) -> Vec<String> {
    let mut out = Vec::new();
    match pipe(c) {
        Pipe::Gpipe => out.push(
            "Megatron-LM has no GPipe schedule (megatron/core/pipeline_parallel/schedules.py \
             offers 1F1B and interleaved 1F1B); use --schedule 1f1b"
                .to_string(),
        ),
        Pipe::ZbH1 => out.push(
            "Megatron-LM has no zero-bubble (ZB-H1) schedule: its pipeline schedules are 1F1B \
             and interleaved 1F1B"
                .to_string(),
        ),
        Pipe::Scp => out.push(
            "the shifted-critical-path schedule (scp) is Merak's; Megatron-LM runs 1F1B or \
             interleaved 1F1B"
                .to_string(),
        ),
        Pipe::ZbV => out.push(
            "Megatron-LM has no zero-bubble ZB-V schedule: its pipeline schedules are 1F1B and \
             interleaved 1F1B"
                .to_string(),
        ),
        Pipe::DualPipeV => out.push(
            "Megatron-LM has no DualPipeV schedule: its pipeline schedules are 1F1B and \
             interleaved 1F1B"
                .to_string(),
        ),
        Pipe::Other(kind) => out.push(super::unknown_schedule("Megatron-LM", kind)),
        Pipe::None | Pipe::OneFOneB | Pipe::Interleaved => {}
    }
    out
}

pub(super) fn plan_reasons(plan: &Layout) -> Vec<String> {
    let c = &plan.config;
    let mut out = schedule_reasons(c);
    if c.zero == 3 && c.pp > 1 {
        out.push(format!(
            "ZeRO-3 is Megatron-FSDP (--use-megatron-fsdp), which upstream runs without \
             pipeline parallelism (pp = {})",
            c.pp
        ));
    }
    if let Err(reason) = recompute_flags(plan) {
        out.push(reason);
    }
    // The combined 1F1B refuses full recomputation of every block or of some
    // (Megatron-LM d98e8a6 `transformer_config.py:3021-3029`: "disable full recomputation
    // when enabling overlap_moe_expert_parallel_comm", `recompute_num_layers` None).
    // (Full recomputation lists every block in the stage map.)
    let recomputes_blocks = plan.stage_map.recompute_blocks.iter().any(|&n| n > 0);
    if c.moe_a2a_overlap && recomputes_blocks {
        out.push(
            "Megatron-Core's all-to-all overlap runs without full recomputation \
             (transformer_config.py)"
                .into(),
        );
    }
    out
}

pub(super) fn model_reasons(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<String> {
    let c = &plan.config;
    let mut out = Vec::new();
    // Megatron-Core keeps first and last blocks in bf16 under the current-scaling, block
    // and MX recipes, at most a pipeline stage's blocks at each end
    // (`transformer_config.py` `__post_init__`: "Delayed scaling does not support first /
    // last layer in BF16", `max_bf16_layers_per_pipeline_stage`).
    let (first, last) = train.bf16_layers();
    if (first, last) != (0, 0) {
        if train.fp8_recipe_under(plait_spec::Engine::Megatron)
            == Some(plait_spec::Float8Recipe::Delayed)
        {
            out.push(
                "Megatron-Core keeps no first or last blocks in bf16 under delayed fp8 scaling \
                 (transformer_config.py)"
                    .into(),
            );
        }
        let per_stage = model.layers / c.pp.max(1);
        if first.max(last) > per_stage {
            out.push(format!(
                "Megatron-Core keeps at most a pipeline stage's {per_stage} blocks in bf16 at \
                 each end, not {} (transformer_config.py)",
                first.max(last)
            ));
        }
    }
    if model.family == Family::Bert {
        out.push(format!(
            "{} is a BERT encoder; plait writes pretrain_gpt.py (decoder) arguments",
            model.name
        ));
    }
    if c.cp > 1 && !train.seq.is_multiple_of(2 * c.cp) {
        out.push(format!(
            "context parallelism needs the sequence ({}) to be a multiple of 2·cp = {} \
             (megatron/training/arguments.py)",
            train.seq,
            2 * c.cp
        ));
    }
    if model.positions == Positions::Alibi {
        out.push(format!(
            "{} uses ALiBi attention biases; Megatron-LM's --position-embedding-type is \
             learned_absolute, rope, mrope, relative, yarn or none (megatron/training/arguments.py)",
            model.name
        ));
    }
    let theta = model.rope_theta;
    if model.positions == Positions::Rotary
        && !(theta.fract() == 0.0 && theta >= 1.0 && theta <= u64::MAX as f64)
    {
        out.push(format!(
            "Megatron's --rotary-base takes an integer (type=int in \
             megatron/training/arguments.py); RoPE θ = {theta} is not one"
        ));
    }
    if model.is_hybrid() {
        out.extend(hybrid_reasons(model));
    }
    if let Err(reason) = rope_scaling_flags(model) {
        out.push(reason);
    }
    if model.linear_bias && !model.qkv_bias {
        out.push(
            "Megatron's linear biases (on unless --disable-bias-linear) include the q/k/v \
             projection; a model with linear biases but none on q/k/v has no flag"
                .to_string(),
        );
    }
    if let Err(reason) = mla_flags(model) {
        out.push(reason);
    }
    if let Err(reason) = router_flags(model) {
        out.push(reason);
    }
    if model.qk_norm == Some(plait_spec::QkNorm::FullWidth) {
        out.push(format!(
            "{} normalises q and k over their full width; Megatron's --qk-layernorm \
             normalises each head",
            model.name
        ));
    }
    // Sliding-window attention that bites at this sequence length (a window at least as
    // long as the sequence is full attention).
    let bites = |w: Option<u64>| w.is_some_and(|w| w < train.seq);
    if !model.is_hybrid()
        && (bites(model.attention_window) || model.block_runs.iter().any(|r| bites(r.window)))
    {
        out.push(format!(
            "{} has sliding-window attention over fewer keys than the sequence ({}); the \
             Megatron export writes full causal attention only",
            model.name, train.seq
        ));
    }
    // Chunked local attention (Llama 4) that bites at this sequence length; and Llama 4's
    // layout of chunked RoPE layers beside full-attention NoPE ones, whose NoPE layers
    // (Megatron's --no-rope-freq) the export does not write.
    if bites(model.attention_chunk) || model.block_runs.iter().any(|r| bites(r.chunk)) {
        out.push(format!(
            "{} attends within chunks shorter than the sequence ({}); the Megatron export \
             writes full causal attention only",
            model.name, train.seq
        ));
    } else if model.block_runs.iter().any(|r| r.chunk.is_some())
        && model.block_runs.iter().any(|r| r.chunk.is_none())
    {
        out.push(format!(
            "{} has chunked-attention RoPE layers beside NoPE ones (Llama 4); the Megatron \
             export does not write the NoPE layers (--no-rope-freq) yet",
            model.name
        ));
    }
    if let Err(reason) = moe_layer_flags(model) {
        out.push(reason);
    }
    out
}

/// A hybrid's `--hybrid-layer-pattern`: one symbol per layer, and with a pipeline the
/// virtual stages in Megatron's order (segment `chunk·pp + rank`,
/// `hybrid_layer_allocation.select_pipeline_segment`), separated by `|`.
fn hybrid_layer_pattern(plan: &Plan, pattern: &str) -> String {
    if plan.config.pp == 1 {
        return pattern.to_string();
    }
    let mut rest = pattern;
    let segments: Vec<&str> = plan
        .stage_map
        .chunk_blocks
        .iter()
        .map(|&n| {
            let (segment, tail) = rest.split_at((n as usize).min(rest.len()));
            rest = tail;
            segment
        })
        .collect();
    segments.join("|")
}

/// The recompute flags, or why Megatron cannot recompute as the plan does.
fn recompute_flags(plan: &Layout) -> Result<Vec<(&'static str, String)>, String> {
    let (c, map) = (&plan.config, &plan.stage_map);
    Ok(match recompute(plan) {
        Rc::None => vec![],
        Rc::Selective if c.recompute_modules.is_default() => {
            vec![("--recompute-granularity", "selective".into())]
        }
        // Megatron-Core's module list (`--recompute-modules`, nargs '*': the words of the
        // value are its items in the MEGATRON_ARGS array).
        Rc::Selective => vec![
            ("--recompute-granularity", "selective".into()),
            (
                "--recompute-modules",
                c.recompute_modules
                    .modules()
                    .map(|m| m.keyword())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        ],
        // Each block checkpointed on its own: only its input is kept.
        Rc::Full => vec![
            ("--recompute-granularity", "full".into()),
            ("--recompute-method", "uniform".into()),
            ("--recompute-num-layers", "1".into()),
        ],
        Rc::Partial { counts, rest } => {
            if rest == plait_spec::Recompute::Selective {
                return Err(format!(
                    "it recomputes {} blocks per pipeline rank in full and the others \
                     selectively, but Megatron's --recompute-granularity is either full or \
                     selective",
                    list(&counts)
                ));
            }
            // The block method: the first N blocks of every chunk, on every rank.
            let per_chunk: Vec<(u64, u64)> = (0..c.vp)
                .flat_map(|ch| (0..c.pp).map(move |r| (r, ch)))
                .map(|(r, ch)| {
                    (
                        map.chunk_recompute_blocks(r, ch, c.pp),
                        map.blocks_of(r, ch, c.pp),
                    )
                })
                .collect();
            let n = per_chunk.iter().map(|&(k, _)| k).max().unwrap_or(0);
            if per_chunk.iter().any(|&(k, blocks)| k != n.min(blocks)) {
                let unit = if c.vp > 1 {
                    "virtual chunk"
                } else {
                    "pipeline stage"
                };
                return Err(format!(
                    "it recomputes {} blocks in full on pipeline ranks 0..{} (filled chunk by \
                     chunk), but Megatron's block recompute method recomputes the same number \
                     of layers (--recompute-num-layers) in every {unit}",
                    list(&counts),
                    c.pp - 1
                ));
            }
            vec![
                ("--recompute-granularity", "full".into()),
                ("--recompute-method", "block".into()),
                ("--recompute-num-layers", n.to_string()),
            ]
        }
    })
}

/// How the blocks are placed on the pipeline.
#[derive(Debug, PartialEq, Eq)]
enum Split {
    Even,
    FirstLast {
        first: Option<u64>,
        last: Option<u64>,
    },
    Layout(String),
}

fn split(plan: &Plan, mtp_layers: u64) -> Split {
    let (c, blocks) = (&plan.config, &plan.stage_map.chunk_blocks);
    let (p, v) = (c.pp as usize, c.vp as usize);
    if blocks.windows(2).all(|w| w[0] == w[1]) {
        return Split::Even;
    }
    // Megatron gives each of a rank's chunks the same share of the rank's layers.
    let rank_even = (0..p).all(|r| (1..v).all(|ch| blocks[ch * p + r] == blocks[r]));
    if p >= 2 && rank_even {
        let totals: Vec<u64> = (0..p).map(|r| blocks[r] * v as u64).collect();
        let middle = &totals[1..p - 1];
        let middle_even = middle.windows(2).all(|w| w[0] == w[1]);
        if p == 2 {
            return Split::FirstLast {
                first: Some(totals[0]),
                last: Some(totals[1]),
            };
        }
        if middle_even && middle[0] > 0 {
            let m = middle[0];
            return Split::FirstLast {
                first: (totals[0] != m).then_some(totals[0]),
                last: (totals[p - 1] != m).then_some(totals[p - 1]),
            };
        }
    }
    Split::Layout(plan.stage_map.to_megatron_layout(mtp_layers))
}

/// `megatron_args.sh`. Callers have checked `plan_reasons` and `model_reasons`.
pub(super) fn write(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<ExportFile> {
    let c = &plan.config;
    let mut notes: Vec<String> = Vec::new();
    let mut groups: Vec<(&str, Vec<(&str, String)>)> = Vec::new();
    let flag = |name: &'static str| (name, String::new());

    // The model. A hybrid's layer count and pipeline layout come from its pattern.
    let pattern = model.hybrid_pattern();
    let mut m: Vec<(&str, String)> = match &pattern {
        Some(p) => {
            // Megatron-Core's unified pattern carries the MTP depths after `/`, one module
            // pattern per depth (`HybridModel`, "M*M*/MM/MM": two depths).
            let mtp = model
                .mtp_pattern
                .as_deref()
                .map(|mtp| format!("/{mtp}").repeat(model.mtp_layers as usize))
                .unwrap_or_default();
            vec![(
                "--hybrid-layer-pattern",
                format!("\"{}{mtp}\"", hybrid_layer_pattern(plan, p)),
            )]
        }
        None => vec![("--num-layers", model.layers.to_string())],
    };
    m.push(("--hidden-size", model.hidden.to_string()));
    m.push(("--num-attention-heads", model.heads.to_string()));
    if model.kv_heads != model.heads {
        m.push(flag("--group-query-attention"));
        m.push(("--num-query-groups", model.kv_heads.to_string()));
    }
    if model.head_dim * model.heads != model.hidden {
        m.push(("--kv-channels", model.head_dim.to_string()));
    }
    // A MoE model's dense layers take this width, its experts `--moe-ffn-hidden-size`.
    let ffn = match model.moe {
        Some(_) => dense_layer_width(model).unwrap_or(model.ffn_hidden),
        None => model.ffn_hidden,
    };
    m.push(("--ffn-hidden-size", ffn.to_string()));
    m.push(("--seq-length", train.seq.to_string()));
    m.push((
        "--max-position-embeddings",
        model.max_positions.max(train.seq).to_string(),
    ));
    let yarn = model.mla.is_none()
        && matches!(
            model.rope_scaling,
            Some(plait_spec::RopeScaling::Yarn { .. })
        );
    m.push((
        "--position-embedding-type",
        match model.positions {
            Positions::Rotary if yarn => "yarn",
            Positions::Rotary => "rope",
            Positions::Learned => "learned_absolute",
            Positions::None => "none",
            // Refused by `model_reasons`.
            Positions::Alibi => "none",
        }
        .into(),
    ));
    if model.positions == Positions::Rotary {
        // `--rotary-base` is `type=int` (arguments.py); `model_reasons` refuses other θ.
        m.push(("--rotary-base", format!("{}", model.rope_theta as u64)));
        // `model_reasons` has accepted the rescaling.
        m.extend(rope_scaling_flags(model).unwrap_or_default());
    }
    match model.activation {
        plait_spec::Activation::SwiGlu => m.push(flag("--swiglu")),
        plait_spec::Activation::Relu2 => m.push(flag("--squared-relu")),
        plait_spec::Activation::Gelu => {}
    }
    if let (Some(_), Some(mamba)) = (&pattern, model.mamba) {
        m.push(("--mamba-num-heads", mamba.heads.to_string()));
        m.push(("--mamba-head-dim", mamba.head_dim.to_string()));
        m.push(("--mamba-num-groups", mamba.groups.to_string()));
        m.push(("--mamba-state-dim", mamba.state.to_string()));
        // The layer specs of the hybrid stack, as examples/mamba/train.sh names them.
        m.push((
            "--spec",
            "megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec".into(),
        ));
    }
    m.push((
        "--normalization",
        match model.norm {
            Norm::RmsNorm => "RMSNorm",
            Norm::LayerNorm => "LayerNorm",
        }
        .into(),
    ));
    m.push(("--norm-epsilon", format!("{:e}", model.norm_eps)));
    if !model.linear_bias {
        m.push(flag("--disable-bias-linear"));
        if model.qkv_bias {
            m.push(flag("--add-qkv-bias"));
        }
    }
    if !model.tied_embeddings {
        m.push(flag("--untie-embeddings-and-output-weights"));
    }
    if let Some(moe) = model.moe {
        m.push(("--num-experts", moe.experts.to_string()));
        m.push(("--moe-router-topk", moe.top_k.to_string()));
        // The local experts as one grouped GEMM, as the `megatron` profile costs them
        // (`plait_cost::engine::EngineProfile::grouped_expert_gemm`).
        m.push(flag("--moe-grouped-gemm"));
        // The dispatcher the cost model prices (Megatron's default is `allgather`,
        // `transformer_config.py` `moe_token_dispatcher_type`; NVIDIA's MoE recipes and
        // scripts run `alltoall`, or `flex` over DeepEP or HybridEP,
        // `moe_flex_dispatcher_backend`).
        match plan.config.moe_dispatcher {
            MoeDispatcher::AllToAll => {
                m.push(("--moe-token-dispatcher-type", "alltoall".into()));
            }
            backend @ (MoeDispatcher::DeepEp | MoeDispatcher::HybridEp) => {
                m.push(("--moe-token-dispatcher-type", "flex".into()));
                m.push(("--moe-flex-dispatcher-backend", backend.keyword().into()));
            }
        }
        // Token dropping at a capacity, each expert's input padded to it (the
        // `moe_expert_capacity_factor` and `moe_pad_expert_input_to_capacity` fields).
        if let Some(factor) = train.moe_capacity {
            m.push(("--moe-expert-capacity-factor", format!("{factor}")));
            m.push(flag("--moe-pad-expert-input-to-capacity"));
        }
        // `model_reasons` has accepted the layer mix.
        m.extend(moe_layer_flags(model).unwrap_or_default());
    }
    // `model_reasons` has accepted the router and the MLA configuration.
    m.extend(router_flags(model).unwrap_or_default());
    m.extend(mla_flags(model).unwrap_or_default());
    if model.qk_norm == Some(plait_spec::QkNorm::PerHead) && model.mla.is_none() {
        m.push(flag("--qk-layernorm"));
    }
    if model.mtp_layers > 0 {
        m.push(("--mtp-num-layers", model.mtp_layers.to_string()));
        if model.mtp_shared {
            m.push(flag("--mtp-use-repeated-layer"));
        }
    }
    if !train.dropout {
        m.push(("--hidden-dropout", "0.0".into()));
        m.push(("--attention-dropout", "0.0".into()));
    }
    m.push((
        "--attention-backend",
        match train.attention {
            AttentionImpl::Flash => "flash",
            AttentionImpl::Unfused => "unfused",
        }
        .into(),
    ));
    groups.push(("model", m));

    // Parallelism.
    let mut par: Vec<(&str, String)> = vec![
        ("--tensor-model-parallel-size", c.tp.to_string()),
        ("--pipeline-model-parallel-size", c.pp.to_string()),
    ];
    let interleaved = pipe(c) == Pipe::Interleaved;
    // A hybrid's pattern carries its pipeline layout (and so the virtual stages).
    let split = if pattern.is_some() {
        Split::Even
    } else {
        split(plan, model.mtp_layers)
    };
    match split {
        Split::Even => {
            if interleaved && pattern.is_none() {
                par.push(("--num-virtual-stages-per-pipeline-rank", c.vp.to_string()));
            }
        }
        Split::FirstLast { first, last } => {
            if interleaved {
                par.push(("--num-virtual-stages-per-pipeline-rank", c.vp.to_string()));
            }
            if let Some(n) = first {
                par.push(("--decoder-first-pipeline-num-layers", n.to_string()));
            }
            if let Some(n) = last {
                par.push(("--decoder-last-pipeline-num-layers", n.to_string()));
            }
        }
        Split::Layout(layout) => {
            // The layout also sets the virtual-chunk count (its stages / pp).
            par.push(("--pipeline-model-parallel-layout", format!("\"{layout}\"")));
        }
    }
    if c.vp > 1 && !interleaved {
        notes.push(format!(
            "vp = {} is ignored without the interleaved schedule",
            c.vp
        ));
    }
    if c.cp > 1 {
        par.push(("--context-parallel-size", c.cp.to_string()));
        // `--cp-comm-type` takes p2p, a2a, allgather or a2a+p2p, default p2p
        // (`arguments.py:3221`): written where the plan is not the ring.
        if c.cp_comm != CpComm::P2p {
            par.push(("--cp-comm-type", c.cp_comm.to_string()));
        }
    }
    if c.ep > 1 {
        par.push(("--expert-model-parallel-size", c.ep.to_string()));
    }
    // Megatron-Core's expert tp defaults to tp (`ModelParallelConfig.
    // expert_tensor_parallel_size`, `arguments.py:587-588`), not plait's default: written
    // wherever the plan's differs from tp.
    if model.moe.is_some() && c.expert_tp() != c.tp {
        let etp = c.expert_tp();
        par.push(("--expert-tensor-parallel-size", etp.to_string()));
    }
    if c.sp && c.tp > 1 {
        par.push(flag("--sequence-parallel"));
    }
    // `TransformerConfig`'s field (`model_parallel_config.py:343`, made a flag by
    // `ArgumentGroupFactory(TransformerConfig)`, `arguments.py:2373`).
    if c.moe_a2a_overlap {
        par.push(flag("--overlap-moe-expert-parallel-comm"));
    }
    match c.zero {
        1 => par.push(flag("--use-distributed-optimizer")),
        2 => {
            par.push(flag("--use-distributed-optimizer"));
            notes.push(
                "ZeRO-2: Megatron's distributed optimizer shards the optimizer state and \
                 reduce-scatters gradients, but keeps a full-size gradient buffer (gradient \
                 memory as with ZeRO-1); the exact ZeRO-2 layout is Megatron-FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy \
                 optim_grads --ckpt-format fsdp_dtensor"
                    .into(),
            );
        }
        3 => {
            par.push(flag("--use-megatron-fsdp"));
            par.push((
                "--data-parallel-sharding-strategy",
                "optim_grads_params".into(),
            ));
            par.push(("--ckpt-format", "fsdp_dtensor".into()));
            notes.push(
                "ZeRO-3 is Megatron-FSDP (it turns on the distributed optimizer itself and needs \
                 CUDA_DEVICE_MAX_CONNECTIONS unset or > 1)"
                    .into(),
            );
        }
        _ => {}
    }
    // Hybrid sharding: dp / shard copies of the distributed optimizer (Megatron-FSDP's
    // HSDP under ZeRO-3, `mcore_fsdp_adapter.py` `enable_hsdp`), each over a contiguous
    // slice of the dp × cp ranks (`parallel_state.py`, the intra-partial groups).
    if c.dp_replicas() > 1 {
        par.push((
            "--num-distributed-optimizer-instances",
            c.dp_replicas().to_string(),
        ));
    }
    if train.overlap_grad_reduce {
        par.push(flag("--overlap-grad-reduce"));
    }
    groups.push(("parallelism", par));

    // Batch.
    groups.push((
        "batch",
        vec![
            ("--micro-batch-size", c.mbs.to_string()),
            ("--global-batch-size", train.gbs.to_string()),
        ],
    ));

    // Recompute: `plan_reasons` has accepted it.
    let rc = recompute_flags(&plan.layout()).unwrap_or_default();
    if !rc.is_empty() {
        groups.push(("activation recompute", rc));
    }

    // Precision.
    let prec: Vec<(&str, String)> = match train.dtype {
        Dtype::Bf16 => vec![flag("--bf16")],
        Dtype::Fp16 => vec![flag("--fp16")],
        // The recipe the plan was costed with (Megatron-Core's `fp8_recipe`: `delayed`,
        // `tensorwise` or `blockwise`, `transformer_config.py:594`); block scaling runs
        // E4M3 throughout as DeepSeek-V3 trains (TE `Float8BlockScaling`'s default format).
        Dtype::Fp8 => {
            let recipe = train
                .fp8_recipe_under(plait_spec::Engine::Megatron)
                .unwrap_or(plait_spec::Float8Recipe::Delayed);
            let format = if recipe == plait_spec::Float8Recipe::Blockwise {
                "e4m3"
            } else {
                "hybrid"
            };
            vec![
                flag("--bf16"),
                ("--fp8-format", format.into()),
                ("--fp8-recipe", recipe.keyword().into()),
            ]
        }
        // MXFP8 is E4M3 throughout (TE `MXFP8BlockScaling`); Megatron-Core's
        // `fp8_recipe` and `fp4`/`fp4_recipe` (`transformer_config.py:673-679`).
        Dtype::Mxfp8 => vec![
            flag("--bf16"),
            ("--fp8-format", "e4m3".into()),
            ("--fp8-recipe", "mxfp8".into()),
        ],
        Dtype::Nvfp4 => vec![
            flag("--bf16"),
            ("--fp4-format", "e2m1".into()),
            ("--fp4-recipe", "nvfp4".into()),
        ],
    };
    let mut prec = prec;
    // The engine profile's NeMo recipe gathers fp8 weights (`EngineProfile::
    // fp8_param_gather`) unless the run keeps 16-bit ones; Megatron takes it with the
    // distributed optimizer only, and MXFP8 weights are gathered through the gradient
    // buffer (`estimate::weights`; Megatron-FSDP turns that off, arguments.py:1137).
    if train.keeps_quantised_weights() && c.zero >= 1 {
        prec.push(flag("--fp8-param-gather"));
        if train.dtype == Dtype::Mxfp8 && c.zero < 3 {
            prec.push(flag("--reuse-grad-buf-for-mxfp8-param-ag"));
        }
    }
    // `TransformerConfig.first_last_layers_bf16` and its two counts (each 1 by default).
    let (first, last) = train.bf16_layers();
    if (first, last) != (0, 0) {
        prec.push(flag("--first-last-layers-bf16"));
        prec.push(("--num-layers-at-start-in-bf16", first.to_string()));
        prec.push(("--num-layers-at-end-in-bf16", last.to_string()));
    }
    groups.push(("precision", prec));
    // Whole layers as CUDA graphs: Megatron-Core's own capture, whose modules default to the
    // whole layer (d98e8a6 `transformer_config.py`, `cuda_graph_impl = "local"`,
    // `cuda_graph_modules = "full"`).
    if train.cuda_graphs == plait_spec::CudaGraphs::Layers {
        groups.push(("cuda graphs", vec![("--cuda-graph-impl", "local".into())]));
    }
    // Activation offloading: the count alone turns it on (Megatron-LM d98e8a6
    // `training/arguments.py:1950-1951` sets `cpu_offloading` when it is above 0).
    if train.cpu_offload_layers > 0 {
        groups.push((
            "activation offloading",
            vec![(
                "--cpu-offloading-num-layers",
                train.cpu_offload_layers.to_string(),
            )],
        ));
    }
    // Optimizer offloading: the HybridDeviceOptimizer, which needs the precision-aware
    // optimizer (Megatron-LM d98e8a6 `training/arguments.py:1884-1888`, flags at 2918-2923;
    // the fraction's default is 1.0, written anyway).
    if train.optimizer_offload > 0.0 {
        groups.push((
            "optimizer offloading",
            vec![
                flag("--optimizer-cpu-offload"),
                (
                    "--optimizer-offload-fraction",
                    train.optimizer_offload.to_string(),
                ),
                flag("--use-precision-aware-optimizer"),
            ],
        ));
    }

    let mut head = vec![
        "Megatron-LM launch arguments written by plait.".to_string(),
        String::new(),
    ];
    head.extend(summary_lines(plan, model, train));
    head.push(String::new());
    head.push(format!(
        "world size = dp×tp×pp×cp = {}×{}×{}×{} = {} (Megatron derives dp from it); the \
         vocabulary ({}) comes from the tokenizer flags",
        c.dp,
        c.tp,
        c.pp,
        c.cp,
        c.gpus(),
        model.vocab
    ));
    head.push(
        "flag names checked against NVIDIA/Megatron-LM d98e8a6 (megatron/training/arguments.py)"
            .into(),
    );
    head.extend(notes.iter().map(|n| format!("note: {n}")));
    head.push(String::new());
    head.push(format!(
        "usage: source megatron_args.sh; torchrun … {} \"${{MEGATRON_ARGS[@]}}\" <data, \
         tokenizer, optimizer and checkpoint flags>",
        if pattern.is_some() {
            "pretrain_hybrid.py"
        } else {
            "pretrain_gpt.py"
        }
    ));

    let mut out = String::from("#!/usr/bin/env bash\n");
    out.push_str(&commented("# ", &head));
    out.push('\n');
    if (c.tp > 1 || c.cp > 1) && c.zero != 3 {
        out.push_str(
            "# Megatron asserts this with tensor or context parallelism (before Blackwell).\n",
        );
        out.push_str("export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n");
    }
    out.push_str("MEGATRON_ARGS=(\n");
    for (i, (title, flags)) in groups.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("    # {title}\n"));
        for (name, value) in flags {
            if value.is_empty() {
                out.push_str(&format!("    {name}\n"));
            } else {
                out.push_str(&format!("    {name} {value}\n"));
            }
        }
    }
    out.push_str(")\n");
    vec![ExportFile {
        name: FILE.into(),
        contents: out,
    }]
}
