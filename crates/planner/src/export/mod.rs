//! A plan as the launch configuration of a training engine: Megatron-LM arguments, a
//! DeepSpeed `ds_config.json`, a torchtitan 0.3 config module (`torchtitan_config.py`) or
//! a torchtitan 0.2 job TOML.
//!
//! Pure: the exporters return file names and contents; the CLI writes them. Output is
//! deterministic (same plan, same bytes). An engine that cannot run a plan exactly as plait
//! modelled it refuses with every reason it finds ([`ExportError`]) rather than writing a
//! configuration that would run something else; [`expressible`] answers the same question
//! from the plan alone, so that the search can keep to what an engine runs.
//!
//! Every flag and key written is the engine's own; each exporter module names the upstream
//! file (and commit) it was checked against.

mod deepspeed;
mod megatron;
mod torchtitan;
mod torchtitan_py;

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use thiserror::Error;

use plait_spec::{
    Degree, ModelSpec, ParallelConfig, Recompute, RecomputeModules, Schedule, StageMap, TrainSpec,
};

use crate::Plan;
use plait_spec::GIB;

/// A training engine plait writes launch configurations for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Megatron-LM (Megatron-Core `pretrain_gpt.py` arguments).
    Megatron,
    /// DeepSpeed (`ds_config.json`).
    DeepSpeed,
    /// torchtitan 0.3 (a Python config module, `--module torchtitan_config --config plait`).
    Torchtitan,
    /// torchtitan 0.2.2 (job config TOML), the last release that reads TOML.
    #[serde(rename = "torchtitan-0.2")]
    TorchtitanToml,
}

/// The engine whose behaviour the cost model follows when planning for an export target.
pub fn runs_under(e: Engine) -> plait_spec::Engine {
    match e {
        Engine::Megatron => plait_spec::Engine::Megatron,
        Engine::DeepSpeed => plait_spec::Engine::Deepspeed,
        Engine::Torchtitan | Engine::TorchtitanToml => plait_spec::Engine::Torchtitan,
    }
}

/// The fp8 recipe `e`'s export runs where the plan names none: torchtitan 0.3's float8
/// converter runs `rowwise` by default and has no tensor-wise recipe
/// (`components/quantization/float8.py`, `Float8LinearConverter.Config.recipe_name`); the
/// other exports run their engine's default (`None`) and write what the plan was costed
/// with.
pub fn float8_recipe_of(e: Engine) -> Option<plait_spec::Float8Recipe> {
    match e {
        Engine::Torchtitan => Some(plait_spec::Float8Recipe::Rowwise),
        _ => None,
    }
}

impl Engine {
    pub const ALL: &'static [Engine] = &[
        Engine::Megatron,
        Engine::DeepSpeed,
        Engine::Torchtitan,
        Engine::TorchtitanToml,
    ];

    /// The keyword of `--export`.
    pub fn keyword(self) -> &'static str {
        match self {
            Engine::Megatron => "megatron",
            Engine::DeepSpeed => "deepspeed",
            Engine::Torchtitan => "torchtitan",
            Engine::TorchtitanToml => "torchtitan-0.2",
        }
    }

    /// The accepted keywords, `|`-separated.
    pub fn allowed() -> String {
        Engine::ALL
            .iter()
            .map(|e| e.keyword())
            .collect::<Vec<_>>()
            .join("|")
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.keyword())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Engine::ALL
            .iter()
            .copied()
            .find(|e| e.keyword() == s.to_ascii_lowercase())
            .ok_or_else(|| format!("`{s}` is not one of {}", Engine::allowed()))
    }
}

/// What the engines' checks read of a plan: its configuration, layout and micro-batches.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    pub config: &'a ParallelConfig,
    pub stage_map: &'a StageMap,
    pub microbatches: u64,
}

impl Plan {
    /// The parts of the plan the engines' checks read.
    pub fn layout(&self) -> Layout<'_> {
        Layout {
            config: &self.config,
            stage_map: &self.stage_map,
            microbatches: self.microbatches,
        }
    }
}

/// Whether `engine` can run configuration `c` with `layout` (the search filters with it
/// before any estimate exists); `Err` holds every reason it cannot.
pub fn supports(engine: Engine, layout: &Layout) -> Result<(), String> {
    join(plan_reasons(engine, layout))
}

/// The export target that speaks for `engine`'s capabilities, where plait writes one.
pub fn export_target(engine: plait_spec::Engine) -> Option<Engine> {
    match engine {
        plait_spec::Engine::Megatron | plait_spec::Engine::MegatronLm2021 => Some(Engine::Megatron),
        plait_spec::Engine::Deepspeed | plait_spec::Engine::Deepspeed2021 => {
            Some(Engine::DeepSpeed)
        }
        plait_spec::Engine::Torchtitan => Some(Engine::Torchtitan),
        plait_spec::Engine::Fsdp | plait_spec::Engine::Plait => None,
    }
}

/// Whether `engine` refuses `c`'s pipeline schedule over `microbatches` micro-batches
/// whatever the rest of the plan (the search drops such a kind before it costs anything).
pub fn refuses_schedule(engine: plait_spec::Engine, c: &ParallelConfig, microbatches: u64) -> bool {
    match export_target(engine) {
        Some(Engine::Megatron) => !megatron::schedule_reasons(c).is_empty(),
        Some(Engine::DeepSpeed) => !deepspeed::schedule_reasons(c).is_empty(),
        Some(Engine::Torchtitan | Engine::TorchtitanToml) => {
            !torchtitan::schedule_reasons(c, microbatches).is_empty()
        }
        None => false,
    }
}

/// Why `engine` cannot run `layout`, or `Ok`: the export targets' checks, and for FSDP1 as
/// llm-foundry runs it, data parallelism only (no tensor, pipeline, context or expert
/// parallelism in its MPT models, `llmfoundry/models/mpt/modeling_mpt.py`). plait's own
/// runtime is checked by `plait train`.
pub fn engine_supports(engine: plait_spec::Engine, layout: &Layout) -> Result<(), String> {
    if let Some(target) = export_target(engine) {
        return supports(target, layout);
    }
    let c = layout.config;
    if engine == plait_spec::Engine::Fsdp && (c.tp > 1 || c.pp > 1 || c.cp > 1 || c.ep > 1) {
        return Err(format!(
            "FSDP (llm-foundry) shards data-parallel only; {c} uses tp/pp/cp/ep"
        ));
    }
    Ok(())
}

/// The block layouts `engine` can express: Megatron-LM and torchtitan place any layout
/// (`--pipeline-model-parallel-layout`, `module_fqns_per_model_part`); DeepSpeed's
/// `PipelineModule` partitions evenly. None recomputes different block counts per rank.
pub fn map_shape(engine: Engine) -> crate::MapShape {
    match engine {
        Engine::Megatron | Engine::Torchtitan | Engine::TorchtitanToml => {
            crate::MapShape::UniformRecompute
        }
        Engine::DeepSpeed => crate::MapShape::Even,
    }
}

/// One file of an export: its name (no directory) and its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportFile {
    pub name: String,
    pub contents: String,
}

/// Why an engine cannot run a plan as plait modelled it: one line naming the engine and
/// every reason found, `; `-separated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{engine} cannot express this plan: {reason}")]
pub struct ExportError {
    pub engine: Engine,
    pub reason: String,
}

/// Whether `engine` can run `plan` (its degrees, schedule, ZeRO stage, block layout and
/// recompute) exactly; `Err` holds every reason it cannot, `; `-separated. Model- and
/// batch-dependent limits (model family, dtype, sequence divisibility) are checked by
/// [`export`] only.
pub fn expressible(engine: Engine, plan: &Plan) -> Result<(), String> {
    join(plan_reasons(engine, &plan.layout()))
}

/// The launch configuration of `plan` for `engine`, or every reason it cannot be written.
pub fn export(
    engine: Engine,
    plan: &Plan,
    model: &ModelSpec,
    train: &TrainSpec,
) -> Result<Vec<ExportFile>, ExportError> {
    let mut reasons = Vec::new();
    if let Err(e) = plan.stage_map.validate(model.layers, &plan.config) {
        reasons.push(format!("its stage map does not fit {}: {e}", model.name));
    } else {
        reasons = plan_reasons(engine, &plan.layout());
    }
    // The exporters write one block kind with full attention (Megatron also its hybrid
    // models, whose layer pattern it takes); a model whose blocks differ otherwise or
    // attend over a window would launch as another model.
    if model.is_hybrid() && engine != Engine::Megatron {
        reasons.push(format!(
            "{} is a hybrid of Mamba-2 mixer, attention-only and MLP-only layers{}, which the \
             {} export does not write (Megatron-LM trains such models from a layer pattern: \
             the megatron export)",
            model.name,
            model
                .hybrid_pattern()
                .map_or(String::new(), |p| format!(" (pattern {p})")),
            engine
        ));
    } else if !model.is_hybrid()
        && engine != Engine::Megatron
        && (!model.block_runs.is_empty()
            || model.attention_window.is_some()
            || model.attention_chunk.is_some())
    {
        reasons.push(format!(
            "{} has sliding-window or chunked attention, or blocks of different kinds, which \
             the {} export does not write yet",
            model.name, engine
        ));
    }
    if model.activation == plait_spec::Activation::Relu2 && engine != Engine::Megatron {
        reasons.push(format!(
            "{} has squared-ReLU MLPs, which the {} export does not write yet",
            model.name, engine
        ));
    }
    if train.task == plait_spec::Task::Lora {
        reasons.push(format!(
            "LoRA: the {engine} export writes training launches of every weight, not \
             adapters (NeMo's `llm.peft.LoRA` runs those)"
        ));
    }
    // Megatron's export writes shared experts and MTP layers (and refuses MLA itself).
    if engine != Engine::Megatron
        && (model.mla.is_some()
            || model.mtp_layers > 0
            || model.moe.is_some_and(|m| m.shared_experts > 0))
    {
        reasons.push(format!(
            "{} uses multi-head latent attention, shared experts or multi-token prediction, \
             which the {} export does not write yet",
            model.name, engine
        ));
    }
    let (first, last) = train.bf16_layers();
    if engine != Engine::Megatron && (first, last) != (0, 0) {
        reasons.push(format!(
            "the run keeps {first} first and {last} last blocks in bf16, which the {engine} \
             export does not write (Megatron-Core's first_last_layers_bf16 does)"
        ));
    }
    if engine != Engine::Megatron && train.cpu_offload_layers > 0 {
        reasons.push(format!(
            "the run offloads {} blocks' activations to host memory, which the {engine} \
             export does not write (Megatron-Core's cpu_offloading_num_layers does)",
            train.cpu_offload_layers
        ));
    }
    if !runs_under(engine).offloads_optimizer() && train.optimizer_offload > 0.0 {
        reasons.push(format!(
            "the run keeps {} of the optimizer state in host memory, which the {engine} \
             export does not write (Megatron-Core's optimizer_cpu_offload and DeepSpeed's \
             offload_optimizer do)",
            train.optimizer_offload
        ));
    }
    // Adam's state in bf16 is how Apex's DistributedFusedAdam (NeMo 1.x's
    // `distributed_fused_adam`) runs it; the exporters write no optimizer-state dtypes yet,
    // so a launch from them would hold the fp32 state the plan did not budget.
    if train.optimizer_state != plait_spec::OptimizerState::Fp32 {
        reasons.push(format!(
            "the run keeps Adam's state in {} (Apex's DistributedFusedAdam), which the {engine} \
             export does not write",
            train.optimizer_state
        ));
    }
    // The fp8 recipe the plan was costed with must be one the engine's quantiser runs.
    let as_exported = TrainSpec {
        engine: runs_under(engine),
        ..train.clone()
    };
    if let Some(why) = as_exported.float8_recipe_refused() {
        reasons.push(format!("fp8 as costed: {why}"));
    }
    if model.moe.is_some() && plan.config.ep > 1 {
        let runner = as_exported.engine;
        if let Some(why) = runner.moe_dispatcher_refused(plan.config.moe_dispatcher) {
            reasons.push(format!("the experts' dispatch as costed: {why}"));
        }
        if plan.config.moe_a2a_overlap {
            if let Some(why) = runner.moe_a2a_overlap_refused() {
                reasons.push(format!("the all-to-all overlap as costed: {why}"));
            }
        }
    }
    reasons.extend(match engine {
        Engine::Megatron => megatron::model_reasons(plan, model, train),
        Engine::DeepSpeed => deepspeed::model_reasons(plan, model, train),
        Engine::Torchtitan => {
            let mut reasons = torchtitan::model_reasons(plan, model, train);
            reasons.extend(torchtitan_py::recipe_reasons(train));
            reasons
        }
        Engine::TorchtitanToml => torchtitan::model_reasons(plan, model, train),
    });
    join(reasons).map_err(|reason| ExportError { engine, reason })?;
    Ok(match engine {
        Engine::Megatron => megatron::write(plan, model, train),
        Engine::DeepSpeed => deepspeed::write(plan, model, train),
        Engine::Torchtitan => torchtitan_py::write(plan, model, train),
        Engine::TorchtitanToml => torchtitan::write(plan, model, train),
    })
}

fn join(reasons: Vec<String>) -> Result<(), String> {
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons.join("; "))
    }
}

/// The degrees each export was taught: it writes them or refuses them in its own words. A
/// degree declared in `plait_spec::Degree` since is refused until its export learns it.
fn taught_degrees(engine: Engine) -> &'static [Degree] {
    match engine {
        Engine::Megatron | Engine::DeepSpeed | Engine::Torchtitan | Engine::TorchtitanToml => {
            &crate::TAUGHT_DEGREES
        }
    }
}

fn plan_reasons(engine: Engine, plan: &Layout) -> Vec<String> {
    if let Some(reason) = shape_problem(plan) {
        return vec![reason];
    }
    let c = plan.config;
    let untaught: Vec<Degree> = c.degrees_outside(taught_degrees(engine)).collect();
    if !untaught.is_empty() {
        return vec![format!(
            "the {engine} export does not write the degree {} yet",
            Degree::names(&untaught)
        )];
    }
    if !runs_under(engine).recomputes_modules()
        && c.recompute == Recompute::Selective
        && !c.recompute_modules.is_default()
    {
        // Megatron-Core's module choice; the others recompute their own fixed set.
        let mut reasons = vec![format!(
            "it recomputes the modules {} selectively, a choice only Megatron-Core offers \
             (its `recompute_modules`)",
            c.recompute_modules
        )];
        let default = Layout {
            config: &ParallelConfig {
                recompute_modules: RecomputeModules::CORE_ATTN,
                ..*c
            },
            ..*plan
        };
        reasons.extend(plan_reasons(engine, &default));
        return reasons;
    }
    match engine {
        Engine::Megatron => megatron::plan_reasons(plan),
        Engine::DeepSpeed => deepspeed::plan_reasons(plan),
        // torchtitan 0.3 could run more (ZeRO-0 beside other dimensions as HSDP, tp without
        // sequence parallelism); both exports keep to what 0.2.2 runs.
        Engine::Torchtitan | Engine::TorchtitanToml => torchtitan::plan_reasons(plan),
    }
}

/// A stage map whose lengths do not match the configuration (the helpers below index it).
fn shape_problem(plan: &Layout) -> Option<String> {
    let c = &plan.config;
    let map = &plan.stage_map;
    if c.pp == 0 || c.vp == 0 {
        return Some("pp and vp must be ≥ 1".into());
    }
    if map.chunk_blocks.len() as u64 != c.pp * c.vp || map.recompute_blocks.len() as u64 != c.pp {
        return Some(format!(
            "its stage map lists {} chunks and {} recompute counts for pp×vp = {}×{}",
            map.chunk_blocks.len(),
            map.recompute_blocks.len(),
            c.pp,
            c.vp
        ));
    }
    None
}

/// The pipeline schedule that matters: none without pipelining, and interleaving with one
/// chunk per rank is plain 1F1B. A schedule this list does not name (one added to
/// `plait-schedule` since) is `Other`, which every exporter refuses until it is taught the
/// schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pipe {
    None,
    OneFOneB,
    Interleaved,
    Gpipe,
    ZbH1,
    Scp,
    ZbV,
    DualPipeV,
    Other(Schedule),
}

/// The refusal of a schedule an exporter was not taught.
pub(crate) fn unknown_schedule(engine: &str, kind: Schedule) -> String {
    format!("the {kind} schedule: plait does not write it for {engine}")
}

pub(crate) fn pipe(c: &ParallelConfig) -> Pipe {
    if c.pp == 1 {
        return Pipe::None;
    }
    match c.schedule {
        Schedule::OneFOneB => Pipe::OneFOneB,
        Schedule::Interleaved if c.vp == 1 => Pipe::OneFOneB,
        Schedule::Interleaved => Pipe::Interleaved,
        Schedule::Gpipe => Pipe::Gpipe,
        Schedule::ZbH1 => Pipe::ZbH1,
        Schedule::Scp => Pipe::Scp,
        Schedule::ZbV => Pipe::ZbV,
        Schedule::DualPipeV => Pipe::DualPipeV,
        other => Pipe::Other(other),
    }
}

/// What the plan recomputes, block by block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rc {
    /// Nothing.
    None,
    /// The attention core of every block (Korthikanti et al.), nothing in full.
    Selective,
    /// Every block in full.
    Full,
    /// Some blocks in full (the per-rank counts), the others per `rest`.
    Partial { counts: Vec<u64>, rest: Recompute },
}

pub(crate) fn recompute(plan: &Layout) -> Rc {
    let (c, map) = (plan.config, plan.stage_map);
    let counts = &map.recompute_blocks;
    let rank_blocks: Vec<u64> = (0..c.pp).map(|r| map.rank_blocks(r, c.pp)).collect();
    let rest = match c.recompute {
        // `full` in the configuration means the listed blocks; the others keep everything.
        Recompute::Full => Recompute::None,
        other => other,
    };
    if counts.iter().all(|&n| n == 0) {
        return match rest {
            Recompute::Selective => Rc::Selective,
            _ => Rc::None,
        };
    }
    if counts == &rank_blocks {
        return Rc::Full;
    }
    Rc::Partial {
        counts: counts.clone(),
        rest,
    }
}

/// `[a, b, c]`.
pub(crate) fn list(values: &[u64]) -> String {
    let items: Vec<String> = values.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// The comment lines every export opens with: what plan this is and what plait predicts.
pub(crate) fn summary_lines(plan: &Plan, model: &ModelSpec, train: &TrainSpec) -> Vec<String> {
    let c = &plan.config;
    let e = &plan.estimate;
    let mut lines = vec![
        format!(
            "plait plan for {} on {} GPUs: {}",
            model.name,
            c.gpus(),
            c
        ),
        format!(
            "batch: global {} sequences of {} tokens = {} micro-batches of {} per pipeline × dp {}; {}",
            train.gbs, train.seq, plan.microbatches, c.mbs, c.dp, train.dtype
        ),
        format!(
            "blocks per pipeline chunk (virtual stage j = chunk·pp + rank): {}",
            list(&plan.stage_map.chunk_blocks)
        ),
        format!(
            "blocks recomputed in full per pipeline rank: {} (others: {})",
            list(&plan.stage_map.recompute_blocks),
            match c.recompute {
                Recompute::Selective => "selective",
                _ => "none",
            }
        ),
        format!(
            "predicted by plait: {:.3} s per iteration, {:.0} tokens/s, {:.1} TFLOP/s per GPU (MFU {:.1} %)",
            e.iteration_time_s,
            e.tokens_per_s,
            e.tflops_per_gpu,
            100.0 * e.mfu
        ),
        format!(
            "predicted peak memory: {:.1} GiB of {:.1} GiB per GPU (worst stage {}){}",
            e.peak_memory_bytes / GIB,
            e.memory_capacity_bytes / GIB,
            e.worst_stage,
            if e.fits { "" } else { " — does NOT fit" }
        ),
    ];
    lines.extend(plan.notes.iter().map(|n| format!("note: {n}")));
    lines
}

/// `lines` as `prefix`-commented text, one per line.
pub(crate) fn commented(prefix: &str, lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| {
            if l.is_empty() {
                format!("{}\n", prefix.trim_end())
            } else {
                format!("{prefix}{l}\n")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_keywords_round_trip() {
        for e in Engine::ALL {
            assert_eq!(e.keyword().parse::<Engine>().unwrap(), *e);
            assert_eq!(e.to_string(), e.keyword());
        }
        let err = "colossal".parse::<Engine>().unwrap_err();
        assert!(
            err.contains("megatron|deepspeed|torchtitan|torchtitan-0.2"),
            "{err}"
        );
    }
}
