//! NVIDIA Megatron-Bridge's performance summaries (NeMo containers 25.09 to 26.08) as a
//! calibration table: dense and MoE pre-training on DGX-H100, B200, B300, GB200 and GB300 in
//! BF16, FP8 (current scaling), MXFP8 and NVFP4, each row costed with only what the page
//! states (`megatron_bridge_performance.csv`'s header gives every mapping and its reason),
//! and, where the performance recipe that ran it was traced in Megatron-Bridge's code at the
//! release's tag, with what that recipe set beyond the page (`megatron_bridge_recipes.csv`:
//! the experts' dispatcher, the all-to-all overlap, selective recomputation, the pipeline
//! layout).

use std::collections::HashMap;

use plait_spec::{
    cluster_preset, model_preset, CpComm, CudaGraphs, Dtype, Engine, Float8Recipe, Lora, ModelSpec,
    MoeDispatcher, ParallelConfig, Recompute, RecomputeModules, Schedule, SpecError, StageMap,
    Task, TrainSpec,
};

use super::{csv, rows, Row, Run, Skipped, Table};
use crate::estimate::device_for;

const SOURCE: &str = "megatron_bridge_performance.csv";
const FINETUNING: &str = "megatron_bridge_finetuning.csv";
const RECIPES: &str = "megatron_bridge_recipes.csv";

/// What a run's performance recipe set that the page does not print.
#[derive(Debug, Clone, PartialEq)]
struct Recipe {
    dispatcher: MoeDispatcher,
    a2a_overlap: bool,
    recompute: Recompute,
    recompute_modules: RecomputeModules,
    /// Megatron-Core's pipeline layout; `None`: its even split.
    layout: Option<String>,
    /// Multi-token-prediction passes (Megatron-Core's `mtp_num_layers`) where the recipe
    /// sets them over the model's; `None`: the model's.
    mtp: Option<u64>,
    /// Blocks at the start and at the end kept in bf16 (`TrainSpec::bf16_first_layers`,
    /// `bf16_last_layers`).
    bf16_layers: (u64, u64),
    /// The layers the run replays as CUDA graphs: whole ones under `local:full` and
    /// `full_iteration`; partial `te:` scopes leave the experts issued from the host and
    /// read as none (`plait_spec::CudaGraphs`).
    cuda_graphs: CudaGraphs,
}

impl Default for Recipe {
    /// Megatron-Core's defaults (plait's), for a run whose recipe was not traced.
    fn default() -> Self {
        let c = ParallelConfig::default();
        Recipe {
            dispatcher: MoeDispatcher::AllToAll,
            a2a_overlap: false,
            recompute: c.recompute,
            recompute_modules: c.recompute_modules,
            layout: None,
            mtp: None,
            bf16_layers: (0, 0),
            cuda_graphs: CudaGraphs::None,
        }
    }
}

impl Recipe {
    /// The recompute column: `none`, `full` or `selective:<modules joined by +>`.
    fn recompute(row: &Row) -> Result<(Recompute, RecomputeModules), SpecError> {
        let bad = |why: String| {
            SpecError::new(
                RECIPES,
                "recompute",
                format!("row {}: {why}", row.line),
                "none|full|selective:<modules joined by +>",
            )
        };
        match row.str("recompute")? {
            "none" => Ok((Recompute::None, RecomputeModules::CORE_ATTN)),
            "full" => Ok((Recompute::Full, RecomputeModules::CORE_ATTN)),
            other => {
                let modules = other
                    .strip_prefix("selective:")
                    .ok_or_else(|| bad(format!("`{other}`")))?;
                Ok((Recompute::Selective, modules.parse().map_err(bad)?))
            }
        }
    }

    /// The bf16_layers column: empty, or `first+last`.
    fn bf16_layers(row: &Row) -> Result<(u64, u64), SpecError> {
        let text = row.str("bf16_layers")?;
        if text.is_empty() {
            return Ok((0, 0));
        }
        let bad = || {
            SpecError::new(
                RECIPES,
                "bf16_layers",
                format!("row {}: `{text}`", row.line),
                "empty, or first+last block counts",
            )
        };
        let (first, last) = text.split_once('+').ok_or_else(bad)?;
        Ok((
            first.parse().map_err(|_| bad())?,
            last.parse().map_err(|_| bad())?,
        ))
    }
}

/// The key that joins a page row to its recipe: release, system, model, precision, GPUs,
/// global batch and degrees (two runs of one model on one system differ in these).
fn recipe_key(row: &Row) -> Result<String, SpecError> {
    let mut key = ["release", "system", "model", "precision"]
        .map(|c| row.str(c).map(str::to_string))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    for col in ["gpus", "gbs", "tp", "pp", "vp", "ep"] {
        key.push(degree(row, col)?.to_string());
    }
    Ok(key.join("|"))
}

/// `megatron_bridge_recipes.csv`: each traced run's recipe by its key.
fn recipes(text: &str) -> Result<HashMap<String, Recipe>, SpecError> {
    let (header, data) = csv(text, RECIPES)?;
    let mut out = HashMap::new();
    for row in rows(RECIPES, &header, &data) {
        let dispatcher = row.str("dispatcher")?.parse().map_err(|e: String| {
            SpecError::new(
                RECIPES,
                "dispatcher",
                format!("row {}: {e}", row.line),
                MoeDispatcher::allowed(),
            )
        })?;
        let (recompute, recompute_modules) = Recipe::recompute(&row)?;
        let layout = row.str("layout")?;
        let mtp = match row.str("mtp")? {
            "" => None,
            _ => Some(row.int("mtp")?),
        };
        let cuda_graphs = match row.str("cuda_graph")? {
            "local:full" | "full_iteration" => CudaGraphs::Layers,
            "none" => CudaGraphs::None,
            scopes if scopes.starts_with("te:") => CudaGraphs::None,
            other => {
                return Err(SpecError::new(
                    RECIPES,
                    "cuda_graph",
                    format!("row {}: `{other}`", row.line),
                    "none|local:full|full_iteration|te:<scopes joined by +>",
                ))
            }
        };
        let recipe = Recipe {
            cuda_graphs,
            mtp,
            bf16_layers: Recipe::bf16_layers(&row)?,
            dispatcher,
            a2a_overlap: row.flag("a2a_overlap")?,
            recompute,
            recompute_modules,
            layout: (!layout.is_empty()).then(|| layout.to_string()),
        };
        if out.insert(recipe_key(&row)?, recipe).is_some() {
            return Err(SpecError::new(
                RECIPES,
                "(key)",
                format!("row {}: a second recipe for one run", row.line),
                "one row per run",
            ));
        }
    }
    Ok(out)
}

/// The page's model name → plait's preset; `None`: no preset of this model.
fn preset_of(model: &str) -> Option<&'static str> {
    Some(match model {
        "LLAMA3_8B" => "llama3-8b",
        "LLAMA3_70B" => "llama3-70b",
        "LLAMA3.1_405B" => "llama3.1-405b",
        "DeepSeekV3" => "deepseek-v3",
        "GPT OSS 120B" => "gpt-oss-120b",
        "Qwen3_30B_a3B" => "qwen3-30b-a3b",
        "Qwen3_235B_a22B" => "qwen3-235b-a22b",
        "Kimi_K2" => "kimi-k2",
        "Nemotron_3_Nano" => "nemotron-3-nano-30b-a3b",
        "Nemotron_3_Super" => "nemotron-3-super-120b-a12b",
        "Nemotron_3_5_Lightning" => "nemotron-3.5-lightning-30b-a3b",
        _ => return None,
    })
}

/// The page's system → plait's cluster preset.
fn cluster_of(system: &str) -> Option<&'static str> {
    Some(match system {
        "DGX-H100" => "dgx-h100",
        "DGX-B200" => "dgx-b200",
        "DGX-B300" => "dgx-b300",
        "DGX-GB200" => "gb200-nvl72",
        "DGX-GB300" => "gb300-nvl72",
        _ => return None,
    })
}

/// A degree the page may print as `n/a` (no virtual pipeline, no experts): 1 then.
fn degree(row: &Row, col: &str) -> Result<u64, SpecError> {
    match row.str(col)? {
        "n/a" => Ok(1),
        _ => row.int(col),
    }
}

/// `{release} {model} {precision} on {gpus} {system}`.
fn label(row: &Row) -> Result<String, SpecError> {
    Ok(format!(
        "{} {} {} on {} {}",
        row.str("release")?,
        row.str("model")?,
        row.str("precision")?,
        row.int("gpus")?,
        row.str("system")?
    ))
}

/// The row's batch and degrees, to tell apart rows that share a label.
fn settings(row: &Row) -> Result<String, SpecError> {
    Ok(format!(
        "gbs{} mbs{} tp{} pp{} cp{} vp{} ep{}{}",
        row.int("gbs")?,
        row.int("mbs")?,
        row.int("tp")?,
        row.int("pp")?,
        row.int("cp")?,
        degree(row, "vp")?,
        degree(row, "ep")?,
        if fsdp(row)? { " fsdp" } else { "" }
    ))
}

/// FSDP > 0: Megatron-Core's FSDP; 0 or no column (empty): the distributed optimizer.
fn fsdp(row: &Row) -> Result<bool, SpecError> {
    Ok(match row.str("fsdp")? {
        "" => false,
        _ => row.int("fsdp")? > 0,
    })
}

/// Blocks whose activations NVIDIA's dense Megatron-FSDP recipes offload to host memory
/// (`cpu_offloading_num_layers`), by model, system and precision: 25.09's and from 25.11 on.
/// Traced in Megatron-Bridge: v0.1.0rc4 `scripts/performance/configs/llama3/
/// llama3_70b_llm_pretrain.yaml:133,146` and `llama31/llama31_405b_llm_pretrain.yaml:123`;
/// v0.3.0 `scripts/performance/configs/llama/llama3_workload_base_configs.py:57,66,88,96,161`
/// and `llama31_workload_base_configs.py:40,50,94`, the same values in v0.2.0's
/// `workload_base_configs.py` and at every tag to v0.5.1, and v0.6.0's
/// `src/megatron/bridge/perf_recipes/llama/{gb300,gb200,b200}/llama3.py`. The recipes set it
/// with Megatron-FSDP and no pipeline only.
const FSDP_OFFLOADED_BLOCKS: [(&str, &str, &str, Option<u64>, u64); 8] = [
    ("LLAMA3_70B", "DGX-GB300", "BF16", None, 30),
    ("LLAMA3_70B", "DGX-GB300", "FP8-CS", None, 20),
    ("LLAMA3_70B", "DGX-GB200", "BF16", Some(20), 20),
    ("LLAMA3_70B", "DGX-GB200", "FP8-CS", Some(40), 40),
    ("LLAMA3_70B", "DGX-B200", "FP8-CS", None, 5),
    ("LLAMA3.1_405B", "DGX-GB300", "BF16", None, 40),
    ("LLAMA3.1_405B", "DGX-GB300", "FP8-CS", None, 10),
    ("LLAMA3.1_405B", "DGX-GB200", "FP8-CS", Some(95), 92),
];

/// The blocks a run's recipe offloads ([`FSDP_OFFLOADED_BLOCKS`]): a Megatron-FSDP run
/// without a pipeline of a listed model, system and precision.
fn offloaded_blocks(row: &Row) -> Result<u64, SpecError> {
    if !fsdp(row)? || row.int("pp")? != 1 {
        return Ok(0);
    }
    let key = (row.str("model")?, row.str("system")?, row.str("precision")?);
    let first = row.str("release")? == "25.09";
    Ok(FSDP_OFFLOADED_BLOCKS
        .iter()
        .find(|(m, s, p, _, _)| (*m, *s, *p) == key)
        .and_then(|&(_, _, _, at_first, later)| if first { at_first } else { Some(later) })
        .unwrap_or(0))
}

/// The precision column → dtype and fp8 recipe.
fn precision(row: &Row, source: &str) -> Result<(Dtype, Option<Float8Recipe>), SpecError> {
    Ok(match row.str("precision")? {
        "BF16" => (Dtype::Bf16, None),
        "FP8-CS" => (Dtype::Fp8, Some(Float8Recipe::Tensorwise)),
        "FP8-SC" => (Dtype::Fp8, Some(Float8Recipe::Blockwise)),
        "MXFP8" => (Dtype::Mxfp8, None),
        "NVFP4" => (Dtype::Nvfp4, None),
        other => {
            return Err(SpecError::new(
                source,
                "precision",
                format!("row {}: unknown precision `{other}`", row.line),
                "BF16|FP8-CS|FP8-SC|MXFP8|NVFP4",
            ))
        }
    })
}

/// The routing column → the expert capacity factor (`None`: dropless).
fn capacity(row: &Row) -> Result<Option<f64>, SpecError> {
    match row.str("routing")? {
        "dense" | "dropless" => Ok(None),
        // NeMo's token-drop runs: capacity factor 1.0, inputs padded to capacity.
        "tokendrop" => Ok(Some(1.0)),
        other => Err(SpecError::new(
            SOURCE,
            "routing",
            format!("row {}: `{other}`", row.line),
            "dense|dropless|tokendrop",
        )),
    }
}

/// The model of a row: its preset, with the MTP layers the row states.
fn model(row: &Row, preset: &str) -> Result<ModelSpec, SpecError> {
    let m = model_preset(preset)?;
    Ok(match row.str("mtp")? {
        "" => m,
        _ => ModelSpec {
            mtp_layers: row.int("mtp")?,
            ..m
        },
    })
}

/// `megatron_bridge_performance.csv`: Megatron-Core under Megatron-Bridge's performance
/// recipes, the distributed optimizer (Megatron-Core's FSDP where `fsdp` > 0), sequence
/// parallelism with tp > 1; the experts' dispatcher, the all-to-all overlap, selective
/// recomputation and the pipeline layout from `recipes_text` (`megatron_bridge_recipes.csv`)
/// where the run's recipe was traced; the activation offloading of the dense Megatron-FSDP recipes (`FSDP_OFFLOADED_BLOCKS`);
/// what neither publishes (CUDA graphs, other offloading, expert tp, and the traced
/// settings of the other runs) at plait's defaults. Rows without a model or cluster
/// preset, and plans plait refuses, are listed as skipped with the reason.
pub fn megatron_bridge(text: &str, recipes_text: &str) -> Result<Table, SpecError> {
    let (header, data) = csv(text, SOURCE)?;
    let mut recipes = recipes(recipes_text)?;
    let labels = rows(SOURCE, &header, &data)
        .map(|r| label(&r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut runs = vec![];
    let mut skipped = vec![];
    for (row, base) in rows(SOURCE, &header, &data).zip(&labels) {
        let label = if labels.iter().filter(|l| *l == base).count() > 1 {
            format!("{base} ({})", settings(&row)?)
        } else {
            base.clone()
        };
        let release = row.str("release")?;
        let (dtype, float8_recipe) = precision(&row, SOURCE)?;
        let moe_capacity = capacity(&row)?;
        let Some(cluster) = cluster_of(row.str("system")?) else {
            let reason = format!("no cluster preset for {}", row.str("system")?);
            skipped.push(Skipped { label, reason });
            continue;
        };
        let Some(preset) = preset_of(row.str("model")?) else {
            let reason = "no preset of this model".into();
            skipped.push(Skipped { label, reason });
            continue;
        };
        let (cluster, mut model) = (cluster_preset(cluster)?, model(&row, preset)?);
        let (gpus, gbs, mbs, seq) = (
            row.int("gpus")?,
            row.int("gbs")?,
            row.int("mbs")?,
            row.int("seq")?,
        );
        let (tp, pp, cp, vp, ep) = (
            row.int("tp")?,
            row.int("pp")?,
            row.int("cp")?,
            degree(&row, "vp")?,
            degree(&row, "ep")?,
        );
        // What the run's recipe set beyond the page, where it was traced; else
        // Megatron-Core's defaults.
        let recipe = recipes.remove(&recipe_key(&row)?).unwrap_or_default();
        if let Some(passes) = recipe.mtp {
            model.mtp_layers = passes;
        }
        let train = TrainSpec {
            dtype,
            engine: Engine::Megatron,
            float8_recipe,
            moe_capacity,
            bf16_first_layers: recipe.bf16_layers.0,
            bf16_last_layers: recipe.bf16_layers.1,
            cpu_offload_layers: offloaded_blocks(&row)?,
            cuda_graphs: recipe.cuda_graphs,
            ..TrainSpec::new(gbs, seq)
        };
        let config = ParallelConfig {
            dp: gpus / (tp * pp * cp).max(1),
            tp,
            pp,
            cp,
            vp,
            ep,
            mbs,
            zero: if fsdp(&row)? { 3 } else { 1 },
            sp: tp > 1,
            schedule: Schedule::megatron_for_chunks(vp),
            recompute: recipe.recompute,
            recompute_modules: recipe.recompute_modules,
            // Expert tp at plait's default (1, as NVIDIA's MoE perf recipes set it).
            etp: None,
            // Megatron-Core's default ring (`cp_comm_type` p2p).
            cp_comm: CpComm::P2p,
            moe_dispatcher: recipe.dispatcher,
            moe_a2a_overlap: recipe.a2a_overlap,
            ..ParallelConfig::default()
        };
        // The recipe's pipeline layout, where it set one (read once the plan is checked).
        // A plan plait refuses (e.g. more pipeline chunks than layers), a format the GPU
        // has no tensor cores for, or a layout plait cannot cost, is skipped with plait's
        // reason, not an error of the whole table.
        let laid_out = |()| {
            recipe
                .layout
                .as_deref()
                .map(|l| StageMap::from_megatron_layout(l, &model, &config))
                .transpose()
        };
        let checked = config
            .validate(&model, &train, gpus)
            .and_then(|()| device_for(&cluster, dtype).map(|_| ()))
            .and_then(laid_out);
        let stage_map = match checked {
            Ok(map) => map,
            Err(e) => {
                skipped.push(Skipped {
                    label,
                    reason: format!("plait refuses the plan: {e}"),
                });
                continue;
            }
        };
        runs.push(Run {
            stage_map,
            label,
            software: release.to_string(),
            model,
            cluster,
            train,
            config,
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: None,
        });
    }
    // Every traced recipe belongs to a run of the page.
    if let Some(key) = recipes.keys().min() {
        return Err(SpecError::new(
            RECIPES,
            "(key)",
            format!("`{key}` matches no run of {SOURCE}"),
            "release|system|model|precision|gpus|gbs|tp|pp|vp|ep of a run",
        ));
    }
    Ok(Table {
        name: "Megatron-Bridge (NeMo 25.09–26.08, H100 to GB300)",
        engine: Engine::Megatron,
        runs,
        skipped,
    })
}

/// `megatron_bridge_finetuning.csv`: NVIDIA's SFT and LoRA runs of Llama 3 70B (NeMo 26.06)
/// as their recipes set them (the file's header traces each setting at Megatron-Bridge
/// v0.5.0): the distributed optimizer with fp32 state, sequence parallelism with tp > 1, no
/// recomputation, SQuAD samples packed into each sequence (attention within a sample of
/// [`super::SQUAD_PACKED_SAMPLE_TOKENS`]), LoRA of rank 16 on the qkv projection beside the
/// frozen base.
pub fn megatron_bridge_finetuning(text: &str) -> Result<Table, SpecError> {
    let (header, data) = csv(text, FINETUNING)?;
    let mut runs = vec![];
    let mut skipped = vec![];
    for row in rows(FINETUNING, &header, &data) {
        let task = row.str("task")?;
        let label = format!(
            "{} {} {} {} on {} {}",
            row.str("release")?,
            row.str("model")?,
            task.to_uppercase(),
            row.str("precision")?,
            row.int("gpus")?,
            row.str("system")?
        );
        let (dtype, float8_recipe) = precision(&row, FINETUNING)?;
        let (task, lora) = match task {
            "sft" => (Task::Sft, Lora::default()),
            "lora" => (
                Task::Lora,
                Lora {
                    rank: 16,
                    targets: [true, false, false, false],
                },
            ),
            other => {
                return Err(SpecError::new(
                    FINETUNING,
                    "task",
                    format!("row {}: `{other}`", row.line),
                    "sft|lora",
                ))
            }
        };
        let (Some(cluster), Some(preset)) =
            (cluster_of(row.str("system")?), preset_of(row.str("model")?))
        else {
            let reason = "no cluster or model preset".into();
            skipped.push(Skipped { label, reason });
            continue;
        };
        let (gpus, tp, pp, cp) = (
            row.int("gpus")?,
            row.int("tp")?,
            row.int("pp")?,
            row.int("cp")?,
        );
        let vp = degree(&row, "vp")?;
        let train = TrainSpec {
            dtype,
            engine: Engine::Megatron,
            float8_recipe,
            task,
            lora,
            pack_len: Some(super::SQUAD_PACKED_SAMPLE_TOKENS),
            ..TrainSpec::new(row.int("gbs")?, row.int("seq")?)
        };
        let config = ParallelConfig {
            dp: gpus / (tp * pp * cp).max(1),
            tp,
            pp,
            cp,
            vp,
            ep: degree(&row, "ep")?,
            mbs: row.int("mbs")?,
            zero: 1,
            sp: tp > 1,
            schedule: Schedule::megatron_for_chunks(vp),
            ..ParallelConfig::default()
        };
        let (model, cluster) = (model_preset(preset)?, cluster_preset(cluster)?);
        if let Err(e) = config
            .validate(&model, &train, gpus)
            .and_then(|()| device_for(&cluster, dtype).map(|_| ()))
        {
            let reason = format!("plait refuses the plan: {e}");
            skipped.push(Skipped { label, reason });
            continue;
        }
        runs.push(Run {
            label,
            software: row.str("release")?.to_string(),
            model,
            cluster,
            train,
            config,
            stage_map: None,
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name: "Megatron-Bridge fine-tuning (NeMo 26.06, Llama 3 70B SFT and LoRA)",
        engine: Engine::Megatron,
        runs,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = include_str!("../../data/megatron_bridge_performance.csv");
    const RECIPE_TABLE: &str = include_str!("../../data/megatron_bridge_recipes.csv");

    /// Every row's `step_s` is gbs × seq over its published tokens per second of all GPUs.
    fn check_step_times(text: &str, source: &str) {
        let (header, data) = csv(text, source).unwrap();
        for row in rows(source, &header, &data) {
            let tokens = (row.int("gbs").unwrap() * row.int("seq").unwrap()) as f64;
            let rate = row.num("tokens_per_s_per_gpu").unwrap() * row.int("gpus").unwrap() as f64;
            let step = row.num("step_s").unwrap();
            assert!(
                (step / (tokens / rate) - 1.0).abs() < 1e-5,
                "{source} row {}",
                row.line
            );
        }
    }

    #[test]
    fn step_times_follow_from_the_published_throughput() {
        check_step_times(TABLE, SOURCE);
    }

    #[test]
    fn fine_tuning_runs_load_as_their_recipes_set_them() {
        let text = include_str!("../../data/megatron_bridge_finetuning.csv");
        check_step_times(text, FINETUNING);
        let t = megatron_bridge_finetuning(text).unwrap();
        assert!(t.skipped.is_empty(), "{:?}", t.skipped);
        assert_eq!(t.runs.len(), 10);
        for run in &t.runs {
            assert_eq!(run.config.zero, 1, "{}", run.label);
            assert_eq!(
                run.train.pack_len,
                Some(super::super::SQUAD_PACKED_SAMPLE_TOKENS)
            );
            if run.train.task == Task::Lora {
                assert_eq!(
                    (run.train.lora.rank, run.train.lora.targets),
                    (16, [true, false, false, false])
                );
            }
        }
        // A task the loader does not know is an error naming the column.
        let bad = text.replace("LLAMA3_70B,sft,", "LLAMA3_70B,dpo,");
        assert_eq!(megatron_bridge_finetuning(&bad).unwrap_err().field, "task");
    }

    #[test]
    fn printed_accumulation_matches_the_batch_but_where_the_header_says() {
        // The two rows whose printed GA disagrees with gbs / (mbs × dp), named in the header.
        let known = [
            ["25.11", "DGX-GB300", "Qwen3_235B_a22B"],
            ["25.11", "DGX-H100", "GPT OSS 120B"],
        ];
        let (header, data) = csv(TABLE, SOURCE).unwrap();
        let mut off = vec![];
        for row in rows(SOURCE, &header, &data) {
            if row.str("ga").unwrap().is_empty() {
                continue;
            }
            let dp = row.int("gpus").unwrap()
                / (row.int("tp").unwrap() * row.int("pp").unwrap() * row.int("cp").unwrap());
            let ga = row.int("gbs").unwrap() / (row.int("mbs").unwrap() * dp);
            if ga != row.int("ga").unwrap() {
                let key = ["release", "system", "model"].map(|c| row.str(c).unwrap().to_string());
                off.push(key);
            }
        }
        assert_eq!(off, known);
    }

    #[test]
    fn every_row_is_run_or_skipped_with_a_reason() {
        let (_, data) = csv(TABLE, SOURCE).unwrap();
        let t = megatron_bridge(TABLE, RECIPE_TABLE).unwrap();
        assert_eq!(t.runs.len() + t.skipped.len(), data.len());
        let mut labels: Vec<&str> = t.runs.iter().map(|r| r.label.as_str()).collect();
        labels.extend(t.skipped.iter().map(|s| s.label.as_str()));
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), n, "labels are unique");
        // Only models without a preset and plans plait refuses are skipped.
        for s in &t.skipped {
            assert!(
                s.reason == "no preset of this model" || s.reason.starts_with("plait refuses"),
                "{}: {}",
                s.label,
                s.reason
            );
        }
        // 25.11's DeepSeek-V3 without MTP runs drop the preset's MTP layer.
        let r = t
            .runs
            .iter()
            .find(|r| r.label == "25.11 DeepSeekV3 BF16 on 256 DGX-GB300")
            .unwrap();
        assert_eq!(r.model.mtp_layers, 0);
    }

    #[test]
    fn dense_fsdp_runs_offload_the_blocks_their_recipes_name() {
        let t = megatron_bridge(TABLE, RECIPE_TABLE).unwrap();
        let offloaded = |label: &str| {
            t.runs
                .iter()
                .find(|r| r.label == label)
                .unwrap_or_else(|| panic!("{label}"))
                .train
                .cpu_offload_layers
        };
        for (label, blocks) in [
            ("26.04 LLAMA3_70B FP8-CS on 64 DGX-GB300", 20),
            ("26.04 LLAMA3_70B FP8-CS on 64 DGX-GB200", 40),
            ("25.09 LLAMA3.1_405B FP8-CS on 128 DGX-GB200", 95),
            // Not Megatron-FSDP (pp 16): nothing offloaded.
            ("26.04 LLAMA3.1_405B FP8-CS on 256 DGX-GB200", 0),
            ("26.04 LLAMA3_70B FP8-CS on 64 DGX-H100", 0),
        ] {
            assert_eq!(offloaded(label), blocks, "{label}");
        }
    }

    /// The recipes table's header and one run of the page (26.04 Qwen3 235B on 256 H100).
    const HEADER: &str = "release,system,model,precision,gpus,gbs,tp,pp,vp,ep,dispatcher,\
                          a2a_overlap,recompute,cuda_graph,layout,mtp,bf16_layers,source\n";
    const QWEN3_235B: &str = "26.04,DGX-H100,Qwen3_235B_a22B,FP8-CS,256,8192,2,8,4,32";

    fn check_recipes(rows: &str, expected: Result<(), &str>) {
        let got = megatron_bridge(TABLE, &format!("{HEADER}{rows}"));
        match (got, expected) {
            (Ok(_), Ok(())) => {}
            (Err(e), Err(needle)) => {
                let e = e.to_string();
                assert!(e.contains(RECIPES) && e.contains(needle), "{e}");
            }
            (got, expected) => panic!("{:?} against {expected:?}", got.map(|t| t.runs.len())),
        }
    }

    #[test]
    fn a_recipe_sets_what_the_page_does_not_print() {
        let row = format!("{QWEN3_235B},alltoall,1,selective:core_attn+moe_act,none,,,,test\n");
        let t = megatron_bridge(TABLE, &format!("{HEADER}{row}")).unwrap();
        let run = |t: &Table| {
            t.runs
                .iter()
                .find(|r| r.label == "26.04 Qwen3_235B_a22B FP8-CS on 256 DGX-H100")
                .cloned()
                .unwrap()
        };
        let (traced, plain) = (run(&t), run(&megatron_bridge(TABLE, HEADER).unwrap()));
        assert!(traced.config.moe_a2a_overlap && !plain.config.moe_a2a_overlap);
        assert_eq!(traced.config.recompute, Recompute::Selective);
        assert_eq!(
            traced.config.recompute_modules.to_string(),
            "core_attn+moe_act"
        );
        assert_eq!(plain.config.recompute, Recompute::None);
        assert_eq!(traced.model.mtp_layers, plain.model.mtp_layers);
        // A recipe's MTP passes replace the model's.
        let row = format!("{QWEN3_235B},alltoall,0,none,none,,2,,test\n");
        let t = megatron_bridge(TABLE, &format!("{HEADER}{row}")).unwrap();
        assert_eq!((run(&t).model.mtp_layers, plain.model.mtp_layers), (2, 0));
        // So do the blocks it keeps in bf16.
        let row = format!("{QWEN3_235B},alltoall,0,none,none,,,2+14,test\n");
        let t = megatron_bridge(TABLE, &format!("{HEADER}{row}")).unwrap();
        let train = run(&t).train;
        assert_eq!((train.bf16_first_layers, train.bf16_last_layers), (2, 14));
    }

    #[test]
    fn a_recipe_row_that_is_malformed_or_matches_no_run_is_an_error() {
        check_recipes("", Ok(()));
        let ok = format!("{QWEN3_235B},hybridep,0,none,none,,,,test\n");
        check_recipes(&ok, Ok(()));
        check_recipes(&format!("{ok}{ok}"), Err("a second recipe"));
        check_recipes(
            &format!("{QWEN3_235B},nccl,0,none,none,,,,test\n"),
            Err("dispatcher"),
        );
        check_recipes(
            &format!("{QWEN3_235B},alltoall,0,some,none,,,,test\n"),
            Err("recompute"),
        );
        check_recipes(
            &format!("{QWEN3_235B},alltoall,0,selective:everything,none,,,,test\n"),
            Err("recompute"),
        );
        check_recipes(
            &format!("{QWEN3_235B},alltoall,yes,none,none,,,,test\n"),
            Err("a2a_overlap"),
        );
        check_recipes(
            &format!("{QWEN3_235B},alltoall,0,none,none,,two,,test\n"),
            Err("mtp"),
        );
        check_recipes(
            &format!("{QWEN3_235B},alltoall,0,none,none,,,14,test\n"),
            Err("bf16_layers"),
        );
        check_recipes(
            "26.04,DGX-H100,Qwen3_235B_a22B,FP8-CS,256,8192,2,8,4,64,alltoall,0,none,none,,,,test\n",
            Err("matches no run"),
        );
    }
}
