//! torchtitan 0.3: a config module (`torchtitan_config.py`, `--export torchtitan`).
//!
//! torchtitan 0.3.0 (PyPI `torchtitan==0.3.0`, the release after pytorch/torchtitan#2386)
//! reads no TOML: `torchtitan/config/manager.py` `ConfigManager` imports `--module M` (a
//! module of `torchtitan.models` or any importable module) and calls its function
//! `--config F` for a `Trainer.Config`, then lets tyro apply `--section.key value` overrides
//! and re-run every `__post_init__` check. The model (`Trainer.Config.model_spec`, with its
//! flavor and float8 converter) is suppressed on the command line, so the form that says
//! everything a plan needs is such a module; this one defines `plait()`. Checked against
//! torchtitan 0.3.0's sources:
//! * `models/llama3/config_registry.py`: the recipes `llama3_8b`, `llama3_70b`,
//!   `llama3_405b` (optimizer, data, checkpointing; `llama3_405b` also turns on float8 and
//!   compile); `models/llama3/__init__.py` `model_registry(flavor, converters=…)` and the
//!   flavors of `llama3_configs`.
//! * `config/configs.py` `TrainingConfig` (`local_batch_size`, `global_batch_size`,
//!   `seq_len`, `max_norm`, `mixed_precision_param`, `mixed_precision_reduce`,
//!   `disable_cuda_graphs`) and `ParallelismConfig` (the 0.2.2 names, plus
//!   `enable_sequence_parallel`); `trainer.py`: accumulation steps = global / (local × dp),
//!   pipeline micro-batches = local / `pipeline_parallel_microbatch_size`, and CUDA graphs
//!   (on by default) refuse pipeline parallelism.
//! * `distributed/activation_checkpoint.py` `ActivationCheckpointingConfig`: `SelectiveAC`,
//!   `FullAC`, or `None` (the command line's `activation_checkpoint:none`).
//! * `config/configs.py` `CompileConfig` (`enable`, `enable_async_tensor_parallel`,
//!   `components`: `["model", "loss"]` by default); the export sets them from
//!   `TrainSpec::compile` and `async_tp` rather than inherit the recipe's.
//! * `components/quantization/float8.py` `Float8LinearConverter.Config(filter_fqns=…,
//!   recipe_name=…, model_compile_enabled=…)`: `recipe_name` is `rowwise` (its default) or
//!   `rowwise_with_gw_hp`; 0.3.0 has no tensor-wise recipe, so a plan costed tensor-wise is
//!   refused (`recipe_reasons`).
//! * `models/common/decoder.py`: module names `tok_embeddings`, `layers.<i>`, `norm`,
//!   `lm_head` (0.2.2's `output`).
//!
//! What it cannot run is what 0.2.2 cannot (`torchtitan::plan_reasons`, `model_reasons`).

use plait_spec::{Dtype, Float8Recipe, ModelSpec, TrainSpec};

use super::torchtitan::{
    batch, flavor, mlp_args, model_parts, quote, schedule_name, shared_notes, torchao_recipe_name,
};
use super::{commented, recompute, summary_lines, ExportFile, Rc};
use crate::Plan;

pub(super) const FILE: &str = "torchtitan_config.py";

/// The release this form was checked against.
const VERSION: &str = "0.3.0";

/// torchtitan's recipe for each stock flavor; other shapes start from the 8B recipe.
fn recipe(flavor: Option<&str>) -> &'static str {
    match flavor {
        Some("70B") => "llama3_70b",
        Some("405B") => "llama3_405b",
        _ => "llama3_8b",
    }
}

/// `name` as it may stand inside a Python docstring.
fn docstring_safe(name: &str) -> String {
    name.chars().filter(|c| !matches!(c, '"' | '\\')).collect()
}

/// What the 0.3 export cannot write of `train`: torchao's tensor-wise float8 recipe, which
/// its float8 converter no longer offers.
pub(super) fn recipe_reasons(train: &TrainSpec) -> Vec<String> {
    // The dtype and recipe alone: the plan may have been costed under another engine.
    if train.fp8_recipe_under(plait_spec::Engine::Torchtitan) == Some(Float8Recipe::Tensorwise) {
        vec![
            "fp8 costed with torchao's tensor-wise float8 recipe: torchtitan 0.3.0's float8 \
              converter runs only rowwise or rowwise_with_gw_hp (allowed: the float8 \
              recipe rowwise or rowwise-gw-hp, or the torchtitan-0.2 export)"
                .into(),
        ]
    } else {
        Vec::new()
    }
}

/// `torchtitan_config.py`. Callers have checked the reasons.
pub(super) fn write(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<ExportFile> {
    let c = &plan.config;
    let stock = flavor(model);
    let flavor_name = stock.map_or_else(|| model.name.clone(), str::to_string);
    let base = recipe(stock);
    let b = batch(plan);
    let pipelined = c.pp > 1;
    let fp8 = train.dtype == Dtype::Fp8;

    let mut notes: Vec<String> = Vec::new();
    if stock.is_none() {
        notes.push(format!(
            "torchtitan has no llama3 flavor with this shape: add \"{}\" to llama3_configs in \
             torchtitan/models/llama3/__init__.py, a builder like _8b with dim={}, \
             n_layers={}, n_heads={}, n_kv_heads={}, vocab_size={}, \
             compute_ffn_hidden_dim(dim, {}), rope theta={}, RoPE scaling {}; the rest of \
             the recipe is {base}'s",
            model.name,
            model.hidden,
            model.layers,
            model.heads,
            model.kv_heads,
            model.vocab,
            mlp_args(model),
            model.rope_theta,
            super::torchtitan::rope_scaling_args(model)
                .trim_start_matches("RoPEScalingArgs(")
                .trim_end_matches(')')
        ));
    }
    notes.extend(shared_notes(plan, train, "SelectiveAC", "FlexAttention"));
    if fp8 {
        notes.push(format!(
            "fp8 is torchtitan's float8 converter with torchao's {} recipe, lm_head kept in \
             bf16; it needs torchao",
            torchao_recipe_name(train).unwrap_or("its own")
        ));
    }
    if pipelined {
        notes.push(
            "training.disable_cuda_graphs: torchtitan's CUDA graphs (on by default) do not \
             support pipeline parallelism"
                .into(),
        );
    }

    let mut head = vec![
        format!("torchtitan {VERSION} config module written by plait (its torchtitan export)."),
        String::new(),
    ];
    head.extend(summary_lines(plan, model, train));
    head.push(String::new());
    head.push(format!(
        "checked against pytorch/torchtitan {VERSION} (config/manager.py ConfigManager, \
         config/configs.py, trainer.py); torchtitan 0.2.2 reads TOML instead, which \
         plait's torchtitan-0.2 export writes"
    ));
    head.extend(notes.iter().map(|n| format!("note: {n}")));
    head.push(String::new());
    head.push(format!(
        "usage, from the directory holding this file, over {} GPUs (dp×tp×pp×cp): \
         torchrun --nproc_per_node=<GPUs per node> -m torchtitan.train --module \
         torchtitan_config --config plait (or MODULE=torchtitan_config CONFIG=plait \
         ./run_train.sh with this directory on PYTHONPATH); --section.key value flags \
         override any setting",
        c.gpus()
    ));

    let mut out = commented("# ", &head);
    out.push('\n');
    out.push_str("from torchtitan.config import CompileConfig, ParallelismConfig\n");
    match recompute(&plan.layout()) {
        Rc::Full => {
            out.push_str("from torchtitan.distributed.activation_checkpoint import FullAC\n")
        }
        Rc::Selective => {
            out.push_str("from torchtitan.distributed.activation_checkpoint import SelectiveAC\n")
        }
        Rc::None | Rc::Partial { .. } => {}
    }
    if fp8 {
        out.push_str("from torchtitan.components.quantization import Float8LinearConverter\n");
    }
    out.push_str("from torchtitan.models.llama3 import model_registry\n");
    out.push_str(&format!(
        "from torchtitan.models.llama3.config_registry import {base}\n"
    ));
    out.push_str("from torchtitan.trainer import Trainer\n\n\n");

    out.push_str("def plait() -> Trainer.Config:\n");
    out.push_str(&format!(
        "    \"\"\"plait: {} on {} GPUs, {}.\"\"\"\n",
        docstring_safe(&model.name),
        c.gpus(),
        c
    ));
    out.push_str(&format!("    config = {base}()\n"));
    // Compile as plait costed the run (some recipes turn it on: `llama3_405b`).
    out.push_str(&format!(
        "    config.compile = CompileConfig(\n        enable={},\n        enable_async_tensor_parallel={},\n        components={},\n    )\n",
        py_bool(train.compile),
        py_bool(train.async_tp),
        super::torchtitan::quoted_list(train.compile_components())
    ));
    if fp8 {
        out.push_str(
            "    compiled = config.compile.enable and \"model\" in config.compile.components\n",
        );
        out.push_str(&format!(
            "    config.model_spec = model_registry(\n        {},\n        converters=[\n            \
             Float8LinearConverter.Config(\n                filter_fqns=[\"lm_head\"], \
             recipe_name={},\n                model_compile_enabled=compiled\n            \
             ),\n        ],\n    )\n",
            quote(&flavor_name),
            quote(torchao_recipe_name(train).unwrap_or_default())
        ));
    } else {
        out.push_str(&format!(
            "    config.model_spec = model_registry({})\n",
            quote(&flavor_name)
        ));
    }
    out.push_str(&format!(
        "    config.training.local_batch_size = {}\n",
        b.local
    ));
    out.push_str(&format!(
        "    config.training.global_batch_size = {}\n",
        train.gbs
    ));
    out.push_str(&format!("    config.training.seq_len = {}\n", train.seq));
    out.push_str("    config.training.max_norm = 1.0\n");
    out.push_str("    config.training.mixed_precision_param = \"bfloat16\"\n");
    out.push_str("    config.training.mixed_precision_reduce = \"float32\"\n");
    if pipelined {
        out.push_str("    config.training.disable_cuda_graphs = True\n");
    }
    out.push_str("    config.parallelism = ParallelismConfig(\n");
    let mut p = vec![
        format!("data_parallel_replicate_degree={}", b.replicate),
        format!("data_parallel_shard_degree={}", b.shard),
    ];
    if let Some(policy) = b.reshard {
        p.push(format!("fsdp_reshard_after_forward=\"{policy}\""));
    }
    p.push(format!("tensor_parallel_degree={}", c.tp));
    if c.tp > 1 {
        p.push(format!("enable_sequence_parallel={}", py_bool(c.sp)));
    }
    p.push(format!("context_parallel_degree={}", c.cp));
    p.push(format!("expert_parallel_degree={}", c.ep));
    p.push(format!("pipeline_parallel_degree={}", c.pp));
    if pipelined {
        p.push(format!(
            "pipeline_parallel_schedule=\"{}\"",
            schedule_name(c)
        ));
        p.push(format!("pipeline_parallel_microbatch_size={}", c.mbs));
    }
    for line in p {
        out.push_str(&format!("        {line},\n"));
    }
    if pipelined {
        out.push_str("        module_fqns_per_model_part=[\n");
        for names in model_parts(plan, "lm_head") {
            out.push_str(&format!(
                "            {},\n",
                super::torchtitan::quoted_list(&names)
            ));
        }
        out.push_str("        ],\n");
    }
    out.push_str("    )\n");
    match recompute(&plan.layout()) {
        Rc::Full => out.push_str("    config.activation_checkpoint = FullAC.Config()\n"),
        Rc::Selective => out.push_str("    config.activation_checkpoint = SelectiveAC.Config()\n"),
        // `plan_reasons` refuses partial recompute.
        Rc::None | Rc::Partial { .. } => out.push_str("    config.activation_checkpoint = None\n"),
    }
    out.push_str("    return config\n");

    vec![ExportFile {
        name: FILE.into(),
        contents: out,
    }]
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}
