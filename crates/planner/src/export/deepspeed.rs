//! DeepSpeed: `ds_config.json`, with `ds_notes.txt` for what DeepSpeed takes in model code.
//!
//! Keys checked against microsoft/DeepSpeed at commit
//! 38327e07f6cd39b63418f60cedd1651b0be3e7c3 (v0.16.5 development) and against DeepSpeed
//! 0.19.8 as released (deepspeedai/DeepSpeed v0.19.8, the PyPI `deepspeed==0.19.8` that
//! `python/tests/test_engine_exports.py` parses these files with):
//! * `deepspeed/runtime/constants.py`: `train_batch_size`,
//!   `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`, `gradient_clipping`,
//!   `bf16.enabled`, `fp16.enabled`; `deepspeed/runtime/config.py` `_batch_assertion`:
//!   train_batch_size = micro-batch × accumulation steps × `DeepSpeedConfig.world_size`.
//!   That world size (`DeepSpeedConfig.__init__`, the same at both versions) is the mpu's
//!   data-parallel size when `deepspeed.initialize` is given an `mpu` — as it is for a
//!   `PipelineModule`, whose `mpu()` is its grid (`deepspeed/__init__.py`) — and otherwise
//!   `dist.get_world_size()`, every rank. AutoTP training is initialised without an `mpu`
//!   (`engine.py` builds its groups after the config), so with tp > 1 the world DeepSpeed
//!   divides by is dp × tp: `train_batch_size` = micro-batch × accumulation × dp × tp.
//! * `deepspeed/runtime/zero/config.py` (`DeepSpeedZeroConfig`, which forbids unknown keys):
//!   `zero_optimization.stage`, `zero_optimization.overlap_comm`,
//!   `zero_optimization.mics_shard_size` (hybrid sharding, ZeRO-3 only);
//!   `deepspeed/runtime/zero/offload_config.py` (checked at deepspeedai/DeepSpeed edaa722):
//!   `zero_optimization.offload_optimizer` with `device`, `pin_memory` and `ratio`.
//! * `deepspeed/runtime/config.py` `get_pipeline_config`: the `pipeline` section with
//!   `stages`, `partition`, `activation_checkpoint_interval` (read by
//!   `deepspeed/runtime/pipe/engine.py`), `pipe_partitioned`, `grad_partitioned`.
//!   `stages` and `partition` are parsed but not consumed: `PipelineModule(num_stages=…,
//!   partition_method=…)` takes them in code (`deepspeed/runtime/pipe/module.py`), which
//!   `ds_notes.txt` says.
//! * `deepspeed/runtime/activation_checkpointing/config.py`: `activation_checkpointing`
//!   with `partition_activations`, `contiguous_memory_optimization`, `cpu_checkpointing`.
//! * `deepspeed/runtime/tensor_parallel/config.py`: `tensor_parallel.autotp_size` (AutoTP
//!   training, Megatron-style column/row-parallel linears without sequence parallelism).
//!
//! What DeepSpeed cannot run, and where that was read:
//! * ZeRO-2/3 with pipelining: `deepspeed/runtime/pipe/engine.py` asserts "ZeRO-2 and ZeRO-3
//!   are incompatible with pipeline parallelism".
//! * Schedules other than 1F1B: `deepspeed/runtime/pipe/schedule.py` has one training
//!   schedule, `TrainSchedule` (1F1B, one stage per rank).
//! * AutoTP with ZeRO-3: `deepspeed/runtime/engine.py` asserts ZeRO stage ≤ 2 at 38327e0
//!   (0.19.8 allows it; the export keeps to what both run); AutoTP is
//!   tested without `PipelineModule` only (`tests/unit/model_parallelism/test_autotp_training.py`)
//!   and has no sequence parallelism.
//! * Uneven stage maps: `PipelineModule._partition_layers` balances by `uniform` (all layer
//!   specs, embedding and head included), `parameters`, or `type:<regex>` (binary weights,
//!   `partition_balanced`): only an even split of the blocks is reproducible, by
//!   `type:transformer` as Megatron-DeepSpeed's GPT pipeline model uses.
//! * Partial or selective recompute: `activation_checkpoint_interval` checkpoints every layer
//!   in groups of that many; there is no per-stage count and no attention-only recompute.

use serde_json::{json, Map, Value};

use plait_spec::{Dtype, ModelSpec, TrainSpec};

use super::{commented, list, pipe, recompute, summary_lines, ExportFile, Layout, Pipe, Rc};
use crate::Plan;

pub(super) const FILE: &str = "ds_config.json";
pub(super) const NOTES: &str = "ds_notes.txt";

/// The regex `PipelineModule(partition_method="type:…")` matches block class names with.
const PARTITION: &str = "type:transformer";

/// Why DeepSpeed's pipeline engine cannot run `c`'s schedule, if it cannot.
pub(super) fn schedule_reasons(c: &plait_spec::ParallelConfig) -> Vec<String> {
    let mut out = Vec::new();
    let only_1f1b =
        "DeepSpeed's pipeline engine has only its 1F1B TrainSchedule, one stage per rank";
    match pipe(c) {
        Pipe::Interleaved => out.push(format!(
            "the interleaved schedule (vp = {}): {only_1f1b}",
            c.vp
        )),
        Pipe::Gpipe => out.push(format!("GPipe: {only_1f1b}")),
        Pipe::ZbH1 => out.push(format!("the zero-bubble ZB-H1 schedule: {only_1f1b}")),
        Pipe::ZbV => out.push(format!("the zero-bubble ZB-V schedule: {only_1f1b}")),
        Pipe::DualPipeV => out.push(format!("DeepSeek's DualPipeV schedule: {only_1f1b}")),
        Pipe::Scp => out.push(format!(
            "Merak's shifted-critical-path (scp) schedule: {only_1f1b}"
        )),
        Pipe::Other(kind) => out.push(super::unknown_schedule("DeepSpeed", kind)),
        Pipe::None | Pipe::OneFOneB => {}
    }
    out
}

pub(super) fn plan_reasons(plan: &Layout) -> Vec<String> {
    let (c, map) = (&plan.config, &plan.stage_map);
    let mut out = schedule_reasons(c);
    if c.tp > 1 {
        if c.pp > 1 {
            out.push(format!(
                "tp = {} with pp = {}: DeepSpeed's own tensor parallelism (AutoTP training, \
                 tensor_parallel.autotp_size) runs outside its pipeline engine; tensor × \
                 pipeline parallelism needs Megatron-DeepSpeed (export megatron for its flags)",
                c.tp, c.pp
            ));
        }
        if c.sp {
            out.push(
                "sequence parallelism: DeepSpeed's AutoTP has none (Megatron-DeepSpeed has)"
                    .to_string(),
            );
        }
        if c.zero == 3 {
            out.push(
                "ZeRO-3 with tp > 1: AutoTP training allows ZeRO stage ≤ 2 in DeepSpeed \
                 0.16.5 (deepspeed/runtime/engine.py); the export keeps to what every \
                 release it was checked against runs"
                    .to_string(),
            );
        }
    }
    if c.cp > 1 {
        out.push(format!(
            "context parallelism (cp = {}, {}): ds_config.json has none (DeepSpeed-Ulysses, \
             cp-comm=a2a, is set up in model code: deepspeed.sequence.layer.\
             DistributedAttention over the model's sequence-parallel group)",
            c.cp, c.cp_comm
        ));
    }
    if c.ep > 1 && (c.pp > 1 || c.tp > 1) {
        out.push(format!(
            "expert parallelism (ep = {}) with tp or pp: DeepSpeed-MoE takes ep_size in model \
             code (deepspeed.moe.layer.MoE) and is not established upstream together with \
             AutoTP or the pipeline engine",
            c.ep
        ));
    }
    if c.dp_replicas() > 1 && c.zero < 3 {
        out.push(format!(
            "hybrid sharding (shard = {} of dp = {}) under ZeRO-{}: DeepSpeed shards ZeRO-1/2 \
             over all of dp; its hybrid sharding, MiCS (`mics_shard_size`), is ZeRO-3 \
             (deepspeed/runtime/engine.py)",
            c.dp_shard(),
            c.dp,
            c.zero
        ));
    }
    if c.zero >= 2 && c.pp > 1 {
        out.push(format!(
            "ZeRO-{} with pp = {}: DeepSpeed's pipeline engine supports ZeRO-0/1 only \
             (deepspeed/runtime/pipe/engine.py)",
            c.zero, c.pp
        ));
    }
    if c.pp > 1 && !map.is_even() {
        out.push(format!(
            "the uneven stage map {}: PipelineModule's partition_method (uniform, parameters, \
             type:<regex>) only reproduces an even split of the blocks",
            list(&map.chunk_blocks)
        ));
    }
    match recompute(plan) {
        Rc::Selective => out.push(
            "selective recompute: DeepSpeed's activation checkpointing re-runs whole layers, \
             never the attention core alone"
                .to_string(),
        ),
        Rc::Partial { counts, .. } => out.push(format!(
            "it recomputes {} blocks in full per pipeline rank, but DeepSpeed checkpoints \
             every layer or none (pipeline.activation_checkpoint_interval)",
            list(&counts)
        )),
        Rc::None | Rc::Full => {}
    }
    out
}

pub(super) fn model_reasons(_plan: &Plan, _model: &ModelSpec, train: &TrainSpec) -> Vec<String> {
    let mut out = Vec::new();
    if train.dtype.low_precision_linears() {
        out.push(format!(
            "{}: ds_config.json has no FP8/FP4 training switch (low-precision GEMMs come \
             from Transformer Engine layers in model code)",
            train.dtype
        ));
    }
    out
}

/// `ds_config.json` and `ds_notes.txt`. Callers have checked the reasons.
pub(super) fn write(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<ExportFile> {
    let c = &plan.config;
    let full = recompute(&plan.layout()) == Rc::Full;
    // The world `_batch_assertion` divides by: dp with the pipeline engine's mpu (or none
    // needed), every rank (dp × tp) for AutoTP, which runs without an mpu (module doc).
    let world = c.dp * c.tp;
    let mut cfg = Map::new();
    cfg.insert(
        "train_batch_size".into(),
        json!(c.mbs * plan.microbatches * world),
    );
    cfg.insert("train_micro_batch_size_per_gpu".into(), json!(c.mbs));
    cfg.insert(
        "gradient_accumulation_steps".into(),
        json!(plan.microbatches),
    );
    // Megatron-LM's default --clip-grad.
    cfg.insert("gradient_clipping".into(), json!(1.0));
    match train.dtype {
        Dtype::Bf16 => {
            cfg.insert("bf16".into(), json!({ "enabled": true }));
        }
        Dtype::Fp16 => {
            // loss_scale 0: dynamic loss scaling.
            cfg.insert("fp16".into(), json!({ "enabled": true, "loss_scale": 0 }));
        }
        // Refused by `model_reasons`.
        Dtype::Fp8 | Dtype::Mxfp8 | Dtype::Nvfp4 => {}
    }
    let mut zero = Map::new();
    zero.insert("stage".into(), json!(c.zero));
    if c.zero >= 1 {
        zero.insert("overlap_comm".into(), json!(train.overlap_grad_reduce));
    }
    // MiCS: ZeRO-3 states sharded over groups of `mics_shard_size` consecutive ranks,
    // replicated across them (`zero/config.py`, `zero/mics.py`; the model is built under
    // `deepspeed.zero.MiCS_Init`).
    if c.zero == 3 && c.dp_replicas() > 1 {
        zero.insert("mics_shard_size".into(), json!(c.dp_shard()));
    }
    // ZeRO-Offload: the optimizer state in pinned host memory, stepped by DeepSpeedCPUAdam;
    // `ratio` (the share offloaded) only under ZeRO-3 (`zero/offload_config.py`
    // `DeepSpeedZeroOffloadOptimizerConfig`, deepspeedai/DeepSpeed edaa722).
    let offload = train.optimizer_offload;
    if offload > 0.0 {
        let mut section = Map::new();
        section.insert("device".into(), json!("cpu"));
        section.insert("pin_memory".into(), json!(true));
        if offload < 1.0 {
            section.insert("ratio".into(), json!(offload));
        }
        zero.insert("offload_optimizer".into(), Value::Object(section));
    }
    cfg.insert("zero_optimization".into(), Value::Object(zero));
    if c.tp > 1 {
        cfg.insert("tensor_parallel".into(), json!({ "autotp_size": c.tp }));
    }
    if c.pp > 1 {
        cfg.insert(
            "pipeline".into(),
            json!({
                "stages": c.pp,
                "partition": PARTITION,
                "activation_checkpoint_interval": if full { 1 } else { 0 },
            }),
        );
    }
    if full {
        cfg.insert(
            "activation_checkpointing".into(),
            json!({
                "partition_activations": false,
                "contiguous_memory_optimization": false,
                "cpu_checkpointing": false,
            }),
        );
    }
    let mut json = serde_json::to_string_pretty(&Value::Object(cfg))
        .expect("a JSON object of numbers, strings and booleans serialises");
    json.push('\n');

    let mut lines = vec![
        "DeepSpeed configuration written by plait: ds_config.json, and what it cannot say."
            .to_string(),
        String::new(),
    ];
    lines.extend(summary_lines(plan, model, train));
    lines.push(String::new());
    lines.push(format!(
        "world size = dp×tp×pp = {}×{}×{} = {}; train_batch_size {} = micro-batch {} × \
         accumulation {} × {}",
        c.dp,
        c.tp,
        c.pp,
        c.gpus(),
        c.mbs * plan.microbatches * world,
        c.mbs,
        plan.microbatches,
        if c.tp > 1 {
            format!("dp×tp {world}")
        } else {
            format!("dp {}", c.dp)
        }
    ));
    if c.tp > 1 {
        lines.push(format!(
            "train_batch_size counts each sequence once per tensor-parallel rank: \
             deepspeed.initialize without an mpu (AutoTP) checks it against every rank \
             (dist.get_world_size() = {world}); the global batch is still {} sequences, \
             the {} ranks of a tensor-parallel group reading the same ones. Passing an mpu \
             whose data-parallel size is {} needs train_batch_size {} instead",
            train.gbs, c.tp, c.dp, train.gbs
        ));
    }
    lines.push(
        "keys checked against microsoft/DeepSpeed 38327e0 (v0.16.5 development) and DeepSpeed \
         0.19.8"
            .into(),
    );
    lines.push(String::new());
    lines.push("In model code:".into());
    if c.pp > 1 {
        lines.push(format!(
            "- PipelineModule(layers=…, num_stages={}, partition_method=\"{PARTITION}\", \
             activation_checkpoint_interval={}): the regex must match the block class name \
             only, so each stage gets {} blocks; DeepSpeed reads num_stages and \
             partition_method from these arguments, not from the pipeline section",
            c.pp,
            if full { 1 } else { 0 },
            plan.stage_map.chunk_blocks[0]
        ));
    } else if full {
        lines.push(
            "- wrap each transformer block in deepspeed.checkpointing.checkpoint (configured by \
             the activation_checkpointing section)"
                .into(),
        );
    }
    if c.tp > 1 {
        lines.push(format!(
            "- build the model under deepspeed.tp_model_init(model, tp_size={}, dtype=…) \
             (AutoTP training)",
            c.tp
        ));
    }
    if c.ep > 1 {
        // DeepSpeed-MoE drops tokens at capacity factor 1 unless told otherwise
        // (`deepspeed/moe/layer.py`: `capacity_factor=1.0`, `drop_tokens=True`); the plan's
        // is written out either way.
        let capacity = match train.moe_capacity {
            Some(factor) => format!("capacity_factor={factor}, drop_tokens=True"),
            None => "drop_tokens=False".to_string(),
        };
        lines.push(format!(
            "- MoE layers as deepspeed.moe.layer.MoE(…, num_experts={}, ep_size={}, k={}, {capacity})",
            model.moe.map(|m| m.experts).unwrap_or(0),
            c.ep,
            model.moe.map(|m| m.top_k).unwrap_or(0)
        ));
    }
    if offload > 0.0 {
        lines.push(
            "- with offload_optimizer, an optimizer passed to deepspeed.initialize must be \
             deepspeed.ops.adam.DeepSpeedCPUAdam (or leave it to an optimizer section: \
             DeepSpeed builds DeepSpeedCPUAdam for Adam and AdamW when offloading)"
                .into(),
        );
    }
    if c.pp == 1 && !full && c.tp == 1 && c.ep == 1 && offload == 0.0 {
        lines.push("- nothing beyond deepspeed.initialize(config=\"ds_config.json\")".into());
    }
    vec![
        ExportFile {
            name: FILE.into(),
            contents: json,
        },
        ExportFile {
            name: NOTES.into(),
            contents: commented("", &lines),
        },
    ]
}
