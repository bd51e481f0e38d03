//! Published runs as estimates: the calibration tables of `shared/data` (SC'21 Table 1,
//! llm-foundry's FSDP benchmarks, NeMo's performance summaries) and torchtitan's benchmarks, turned into
//! `(model, cluster, train, config, measured step time)` under the engine that ran them, and
//! the error of the cost model on each.
//!
//! Takes table text, not paths (no I/O); nothing here is fitted: a row is only translated
//! into plait's vocabulary, with the settings the source does not publish left at the
//! engine's defaults.

use plait_spec::OptimizerState::{Bf16, Fp32};
use plait_spec::{
    cluster_preset, model_preset, AttentionImpl, ClusterSpec, CpComm, Dtype, Engine, Float8Recipe,
    Lora, ModelSpec, MoeSpec, ParallelConfig, Positions, Recompute, Schedule, SpecError, StageMap,
    Task, TrainSpec,
};

use crate::estimate::{device_for, estimate, estimate_mapped, Breakdown};

mod megatron_bridge;
mod nemo_long_context;
mod torchtitan;

pub use megatron_bridge::{megatron_bridge, megatron_bridge_finetuning};
pub use nemo_long_context::nemo_long_context_h100;
pub use torchtitan::torchtitan_benchmarks;

/// One published run.
#[derive(Debug, Clone)]
pub struct Run {
    pub label: String,
    /// The software release the run used (NeMo's container, the torchtitan benchmark
    /// document); empty where the table has one. Only runs of one release are paired: the
    /// same plan under two releases measures the software, not the plan.
    pub software: String,
    pub model: ModelSpec,
    pub cluster: ClusterSpec,
    pub train: TrainSpec,
    pub config: ParallelConfig,
    /// The blocks of each pipeline stage where the run laid them out itself (Megatron-Core's
    /// pipeline layout); `None`: the engine's even split.
    pub stage_map: Option<StageMap>,
    pub measured_step_s: f64,
    /// The peak memory per GPU the run reported, where it did (bytes).
    pub measured_memory_bytes: Option<f64>,
}

/// A row plait cannot express yet, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub label: String,
    pub reason: String,
}

/// One table: its runs and the rows it had to skip.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: &'static str,
    pub engine: Engine,
    pub runs: Vec<Run>,
    pub skipped: Vec<Skipped>,
}

/// The estimate of one run against its measurement.
#[derive(Debug, Clone)]
pub struct RowResult {
    pub label: String,
    pub measured_step_s: f64,
    pub predicted_step_s: f64,
    pub predicted_low_s: f64,
    pub predicted_high_s: f64,
    pub fits: bool,
    /// The run's reported peak memory per GPU, where published, and plait's (bytes).
    pub measured_memory_bytes: Option<f64>,
    pub predicted_memory_bytes: f64,
    /// Where the predicted time goes (the estimate's breakdown), to explain an error.
    pub breakdown: Breakdown,
    /// What a user compares configurations within: the model, cluster, GPU count, batch,
    /// sequence and task (rows that share it differ only in their configuration).
    pub comparable: String,
}

impl RowResult {
    /// predicted / measured − 1.
    pub fn error(&self) -> f64 {
        self.predicted_step_s / self.measured_step_s - 1.0
    }
    /// predicted / measured − 1 of the peak memory, where the run reported it.
    pub fn memory_error(&self) -> Option<f64> {
        self.measured_memory_bytes
            .map(|m| self.predicted_memory_bytes / m - 1.0)
    }
}

/// Errors of one table.
#[derive(Debug, Clone)]
pub struct TableResult {
    pub name: &'static str,
    pub engine: Engine,
    pub rows: Vec<RowResult>,
    pub skipped: Vec<Skipped>,
}

impl TableResult {
    pub fn mean_abs_error(&self) -> f64 {
        mean(self.rows.iter().map(|r| r.error().abs()))
    }
    pub fn mean_signed_error(&self) -> f64 {
        mean(self.rows.iter().map(|r| r.error()))
    }
    pub fn max_abs_error(&self) -> f64 {
        self.rows
            .iter()
            .map(|r| r.error().abs())
            .fold(0.0, f64::max)
    }
    /// Pairs of comparable rows (same model, cluster, GPUs, batch, sequence and task)
    /// whose measured times differ by at least [`PAIR_MIN_GAP`], and how many of them the
    /// predictions order as measured: a planner is only as good as its order.
    pub fn pairs_ordered(&self) -> (usize, usize) {
        let (mut ordered, mut pairs) = (0, 0);
        for (i, a) in self.rows.iter().enumerate() {
            for b in &self.rows[i + 1..] {
                let (fast, slow) = if a.measured_step_s <= b.measured_step_s {
                    (a, b)
                } else {
                    (b, a)
                };
                if a.comparable != b.comparable
                    || slow.measured_step_s < fast.measured_step_s * (1.0 + PAIR_MIN_GAP)
                {
                    continue;
                }
                pairs += 1;
                if fast.predicted_step_s < slow.predicted_step_s {
                    ordered += 1;
                }
            }
        }
        (ordered, pairs)
    }

    /// Rows whose run reported its peak memory.
    pub fn memory_runs(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.measured_memory_bytes.is_some())
            .count()
    }

    /// Mean |error| of the peak memory over the rows that report it (`None`: none do).
    pub fn memory_mean_abs_error(&self) -> Option<f64> {
        let errors: Vec<f64> = self
            .rows
            .iter()
            .filter_map(RowResult::memory_error)
            .collect();
        (!errors.is_empty()).then(|| mean(errors.iter().map(|e| e.abs())))
    }

    /// Share of rows whose measured time lies inside the predicted band.
    pub fn band_coverage(&self) -> f64 {
        mean(self.rows.iter().map(|r| {
            f64::from(u8::from(
                (r.predicted_low_s..=r.predicted_high_s).contains(&r.measured_step_s),
            ))
        }))
    }
}

fn mean(it: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = it.fold((0.0, 0.0), |(s, n), x| (s + x, n + 1.0));
    if n == 0.0 {
        0.0
    } else {
        s / n
    }
}

/// Measured times of a pair must differ by this share for their order to count (issue
/// "Plans you can trust": pairs whose times differ by ≥ 10 %; closer ones are within the
/// noise of published figures).
pub const PAIR_MIN_GAP: f64 = 0.10;

/// Attention span of NeMo 24.07's fine-tuning runs: SQuAD v1.1 samples packed into 4,096-token
/// sequences, attention within each sample (NeMo 8e3d65dcfe,
/// docs/source/performance/performance_summary.md: "we use SQuAD-v1.1 ... packed to 4096
/// tokens"). The length comes from the same table's model FLOPs per token (TFLOP/s ÷
/// tokens/s, which the step time cancels out of): pre-training Llama 2 7B at 4,096 counts
/// 46.06 GFLOP per token, SFT 39.84, so SFT's attention is 6.44 − 6.22 = 0.22 of the 6.44
/// GFLOP that 12·L·h·s gives at s = 4,096: 142 tokens; Llama 2 13B gives 81 (87.21 against
/// 77.34 of 10.07). Each is ± 30 tokens from the column's rounding; their mean is taken.
pub const SQUAD_PACKED_SAMPLE_TOKENS: u64 = 112;

/// Estimates every run of `table` (each on its cluster's GPU in its dtype, published
/// numbers only: no calibration profile).
pub fn evaluate(table: &Table) -> Result<TableResult, SpecError> {
    let mut rows = Vec::with_capacity(table.runs.len());
    for r in &table.runs {
        let device = device_for(&r.cluster, r.train.dtype)?;
        let e = match &r.stage_map {
            None => estimate(&r.model, &r.cluster, &r.train, &r.config, &device)?,
            Some(map) => estimate_mapped(&r.model, &r.cluster, &r.train, &r.config, &device, map)?,
        };
        rows.push(RowResult {
            label: r.label.clone(),
            measured_step_s: r.measured_step_s,
            predicted_step_s: e.iteration_time_s,
            predicted_low_s: e.iteration_time_low_s,
            predicted_high_s: e.iteration_time_high_s,
            fits: e.fits,
            measured_memory_bytes: r.measured_memory_bytes,
            predicted_memory_bytes: e.peak_memory_bytes,
            breakdown: e.breakdown,
            comparable: format!(
                "{} {} on {} × {}, {} × {} tokens, {:?}",
                r.software,
                r.model.name,
                r.config.gpus(),
                r.cluster.name,
                r.train.gbs,
                r.train.seq,
                r.train.task
            ),
        });
    }
    Ok(TableResult {
        name: table.name,
        engine: table.engine,
        rows,
        skipped: table.skipped.clone(),
    })
}

/// The header and data rows of a CSV with `#` comment lines.
fn csv<'a>(text: &'a str, source: &str) -> Result<(Vec<&'a str>, Vec<Vec<&'a str>>), SpecError> {
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| SpecError::new(source, "(header)", "no header row", "a CSV header"))?
        .split(',')
        .map(str::trim)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::trim).collect::<Vec<_>>())
        .collect();
    Ok((header, rows))
}

/// Field access by column name, with errors that name the table, row and column.
struct Row<'a> {
    source: &'a str,
    line: usize,
    header: &'a [&'a str],
    cells: &'a [&'a str],
}

impl Row<'_> {
    fn str(&self, col: &str) -> Result<&str, SpecError> {
        self.header
            .iter()
            .position(|h| *h == col)
            .and_then(|i| self.cells.get(i).copied())
            .ok_or_else(|| {
                SpecError::new(
                    self.source,
                    col,
                    format!("row {} has no `{col}` column", self.line),
                    self.header.join(","),
                )
            })
    }
    fn num(&self, col: &str) -> Result<f64, SpecError> {
        let s = self.str(col)?;
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                SpecError::new(
                    self.source,
                    col,
                    format!("row {}: `{s}` is not a number", self.line),
                    "finite numbers",
                )
            })
    }
    /// A 0|1 column.
    fn flag(&self, col: &str) -> Result<bool, SpecError> {
        match self.str(col)? {
            "0" => Ok(false),
            "1" => Ok(true),
            other => Err(SpecError::new(
                self.source,
                col,
                format!("row {}: `{other}`", self.line),
                "0|1",
            )),
        }
    }
    fn int(&self, col: &str) -> Result<u64, SpecError> {
        let v = self.num(col)?;
        if v >= 0.0 && v.fract() == 0.0 && v < 1e15 {
            Ok(v as u64)
        } else {
            Err(SpecError::new(
                self.source,
                col,
                format!("row {}: {v} is not a non-negative integer", self.line),
                "integers ≥ 0",
            ))
        }
    }
}

fn rows<'a>(
    source: &'a str,
    header: &'a [&'a str],
    data: &'a [Vec<&'a str>],
) -> impl Iterator<Item = Row<'a>> {
    data.iter().enumerate().map(move |(i, cells)| Row {
        source,
        line: i + 1,
        header,
        cells,
    })
}

/// FLOPs of one iteration as SC'21 counts them (its eq. 3, with the recompute forward):
/// 96·B·s·l·h²·(1 + s/6h + V/16lh), at s = 2048.
fn sc21_flops(m: &ModelSpec, gbs: u64) -> f64 {
    let seq = 2048.0;
    let (l, h, v) = (m.layers as f64, m.hidden as f64, m.vocab as f64);
    96.0 * gbs as f64 * seq * l * h * h * (1.0 + seq / (6.0 * h) + v / (16.0 * l * h))
}

/// SC'21 Table 1 (Narayanan et al.): Megatron-LM of 2021 on DGX A100 in fp16 with dropout,
/// the unfused attention chain, full recompute and the gradient all-reduce after the
/// backward. The step time follows from the published TFLOP/s through the paper's FLOP
/// formula (which counts the recompute forward).
pub fn sc21_table1(text: &str) -> Result<Table, SpecError> {
    const SOURCE: &str = "megatron_sc21_table1.csv";
    let (header, data) = csv(text, SOURCE)?;
    let cluster = cluster_preset("dgx-a100-80g")?;
    let mut runs = vec![];
    for (row, (name, ..)) in rows(SOURCE, &header, &data).zip(plait_spec::presets::SC21_GPT) {
        let (tp, pp, gpus) = (row.int("tp")?, row.int("pp")?, row.int("gpus")?);
        let (gbs, mbs, vp) = (row.int("gbs")?, row.int("mbs")?, row.int("vp")?);
        let m = model_preset(name)?;
        let measured = sc21_flops(&m, gbs) / (row.num("tflops_per_gpu")? * 1e12 * gpus as f64);
        runs.push(Run {
            stage_map: None,
            label: format!("{name} tp{tp} pp{pp} vp{vp} mbs{mbs} on {gpus}"),
            software: String::new(),
            model: m,
            cluster: cluster.clone(),
            train: TrainSpec {
                dtype: Dtype::Fp16,
                attention: AttentionImpl::Unfused,
                dropout: true,
                overlap_grad_reduce: false,
                engine: Engine::MegatronLm2021,
                ..TrainSpec::new(gbs, 2048)
            },
            config: ParallelConfig {
                dp: gpus / (tp * pp),
                tp,
                pp,
                vp,
                mbs,
                sp: false,
                recompute: Recompute::Full,
                schedule: Schedule::megatron_for_chunks(vp),
                ..ParallelConfig::default()
            },
            measured_step_s: measured,
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name: "SC'21 Table 1 (Megatron-LM, A100)",
        engine: Engine::MegatronLm2021,
        runs,
        skipped: vec![],
    })
}

/// SC'21 Table 2: GPT-3 175B at batch 1536 as ZeRO-3 without model parallelism (DeepSpeed of
/// March 2021, `deepspeed-2021`) and as PTD-P (Megatron-LM, `megatron-2021`), on 384–1536
/// A100s; fp16, dropout, the unfused attention chain, full recompute. Step times follow from
/// the published TFLOP/s through the paper's FLOP formula, as for Table 1.
pub fn sc21_table2(text: &str) -> Result<Table, SpecError> {
    const SOURCE: &str = "megatron_sc21_table2.csv";
    let (header, data) = csv(text, SOURCE)?;
    let cluster = cluster_preset("dgx-a100-80g")?;
    let m = model_preset("gpt3-175b")?;
    let gbs = 1536u64;
    let flops = sc21_flops(&m, gbs);
    let mut runs = vec![];
    for row in rows(SOURCE, &header, &data) {
        let (tp, pp, gpus, mbs) = (
            row.int("tp")?,
            row.int("pp")?,
            row.int("gpus")?,
            row.int("mbs")?,
        );
        let scheme = row.str("scheme")?;
        let (engine, zero, schedule) = match scheme {
            "zero3" => (Engine::Deepspeed2021, 3, Schedule::OneFOneB),
            "ptdp" => (Engine::MegatronLm2021, 0, Schedule::OneFOneB),
            other => {
                return Err(SpecError::new(
                    SOURCE,
                    "scheme",
                    format!("row {} has {other:?}", row.line),
                    "zero3, ptdp",
                ))
            }
        };
        runs.push(Run {
            stage_map: None,
            label: format!("{scheme} tp{tp} pp{pp} mbs{mbs} on {gpus}"),
            software: String::new(),
            model: m.clone(),
            cluster: cluster.clone(),
            train: TrainSpec {
                dtype: Dtype::Fp16,
                attention: AttentionImpl::Unfused,
                dropout: true,
                engine,
                ..TrainSpec::new(gbs, 2048)
            },
            config: ParallelConfig {
                dp: gpus / (tp * pp),
                tp,
                pp,
                mbs,
                zero,
                recompute: Recompute::Full,
                schedule,
                ..ParallelConfig::default()
            },
            measured_step_s: flops / (row.num("tflops_per_gpu")? * 1e12 * gpus as f64),
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name: "SC'21 Table 2 (ZeRO-3 on DeepSpeed vs PTD-P, A100)",
        engine: Engine::Deepspeed2021,
        runs,
        skipped: vec![],
    })
}

/// MosaicML llm-foundry's MPT benchmarks on A100 80GB: PyTorch FSDP1 through Composer, no
/// tensor or pipeline parallelism, bf16, flash attention, ALiBi (no position parameters).
pub fn llmfoundry_fsdp(text: &str) -> Result<Table, SpecError> {
    llmfoundry_table(
        text,
        "llmfoundry_fsdp_a100_80gb.csv",
        "dgx-a100-80g",
        "llm-foundry MPT (PyTorch FSDP, A100)",
    )
}

/// llm-foundry's A100 40GB section, costed on DGX A100 40GB nodes: the same MPT models and
/// engine as the 80 GB table on a GPU of half the memory, at the micro-batches that fit it.
pub fn llmfoundry_fsdp_a100_40gb(text: &str) -> Result<Table, SpecError> {
    llmfoundry_table(
        text,
        "llmfoundry_fsdp_a100_40gb.csv",
        "dgx-a100-40g",
        "llm-foundry MPT (PyTorch FSDP, A100 40GB)",
    )
}

/// llm-foundry's H100 80GB sections (BF16 at 8–512 GPUs, and FP8), costed on DGX H100s.
pub fn llmfoundry_fsdp_h100(text: &str) -> Result<Table, SpecError> {
    llmfoundry_table(
        text,
        "llmfoundry_fsdp_h100_80gb.csv",
        "dgx-h100",
        "llm-foundry MPT (PyTorch FSDP, H100)",
    )
}

/// One of llm-foundry's benchmark tables on `cluster` (a preset name).
fn llmfoundry_table(
    text: &str,
    source: &'static str,
    cluster: &str,
    name: &'static str,
) -> Result<Table, SpecError> {
    let (header, data) = csv(text, source)?;
    let cluster = cluster_preset(cluster)?;
    let mut runs = vec![];
    for row in rows(source, &header, &data) {
        let (gpus, seq, mbs, gbs) = (
            row.int("gpus")?,
            row.int("seq")?,
            row.int("mbs")?,
            row.int("gbs")?,
        );
        // MPT: GPT's LayerNorm and GELU MLP of width ffn, without biases, ALiBi positions
        // (no position table).
        let model = ModelSpec {
            kv_heads: row.int("kv_heads")?,
            head_dim: row.int("head_dim")?,
            ffn_hidden: row.int("ffn")?,
            qkv_bias: false,
            linear_bias: false,
            tied_embeddings: row.flag("tied")?,
            ..plait_spec::presets::gpt(
                &format!("mpt-{}", row.str("model")?),
                row.int("hidden")?,
                row.int("layers")?,
                row.int("heads")?,
                row.int("vocab")?,
                0,
            )
        };
        let sharding = row.str("sharding")?;
        let zero = match sharding {
            "FULL_SHARD" => 3,
            "SHARD_GRAD_OP" => 2,
            other => {
                return Err(SpecError::new(
                    source,
                    "sharding",
                    format!("unknown sharding `{other}`"),
                    "FULL_SHARD|SHARD_GRAD_OP",
                ))
            }
        };
        // Composer's `amp_fp8` runs the linears as Transformer Engine fp8 layers; the
        // others train in bf16.
        let dtype = match row.str("precision")? {
            "amp_fp8" => Dtype::Fp8,
            "amp_bf16" | "bf16" => Dtype::Bf16,
            other => {
                return Err(SpecError::new(
                    source,
                    "precision",
                    format!("unknown precision `{other}`"),
                    "amp_bf16|bf16|amp_fp8",
                ))
            }
        };
        let recompute = if row.str("act_ckpt")? == "True" {
            Recompute::Full
        } else {
            Recompute::None
        };
        runs.push(Run {
            stage_map: None,
            label: format!(
                "{} seq{seq} mbs{mbs} {}{} on {gpus}{}",
                model.name,
                sharding,
                if recompute == Recompute::Full {
                    " ckpt"
                } else {
                    ""
                },
                if dtype == Dtype::Fp8 { " fp8" } else { "" }
            ),
            software: String::new(),
            model,
            cluster: cluster.clone(),
            train: TrainSpec {
                engine: Engine::Fsdp,
                dtype,
                ..TrainSpec::new(gbs, seq)
            },
            config: ParallelConfig {
                dp: gpus,
                mbs,
                zero,
                recompute,
                ..ParallelConfig::default()
            },
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name,
        engine: Engine::Fsdp,
        runs,
        skipped: vec![],
    })
}

/// NVIDIA NeMo performance summaries: Megatron-Core + Transformer Engine in FP8 with the
/// distributed optimizer (ZeRO-1 style; Megatron-Core's FSDP, ZeRO-3, where a row says
/// `fsdp 1`), sequence parallelism with tp > 1. LoRA rows and
/// systems without a preset are listed as skipped.
pub fn nemo(text: &str) -> Result<Table, SpecError> {
    nemo_table(
        text,
        "nemo_performance.csv",
        "NeMo (Megatron-Core + TE, FP8)",
    )
}

/// NeMo's dense FP8 pre-training runs on Blackwell (`nemo_blackwell_dense.csv`): the same
/// pages and loader as [`nemo`], kept apart so that the shared table stays as shared.
pub fn nemo_blackwell_dense(text: &str) -> Result<Table, SpecError> {
    nemo_table(
        text,
        "nemo_blackwell_dense.csv",
        "NeMo dense on Blackwell (B200, GB200, FP8)",
    )
}

fn nemo_table(text: &str, source: &'static str, name: &'static str) -> Result<Table, SpecError> {
    let (header, data) = csv(text, source)?;
    let mut runs = vec![];
    let mut skipped = vec![];
    for row in rows(source, &header, &data) {
        let release = row.str("release")?;
        let label = format!(
            "{} {} {} on {} {}",
            release,
            row.str("model")?,
            row.str("task")?,
            row.int("gpus")?,
            row.str("system")?
        );
        // Rows without the model's shape: a released model whose config.json plait's preset
        // reproduces (Llama 4 Scout: meta-llama/Llama-4-Scout-17B-16E, `llama4-scout`).
        let preset = if row.str("hidden")?.is_empty() {
            match row.str("model")? {
                "LLAMA4-Scout-LLM" => Some(plait_spec::model_preset("llama4-scout")?),
                _ => {
                    skipped.push(Skipped {
                        label,
                        reason: "the table gives no model shape".into(),
                    });
                    continue;
                }
            }
        } else {
            None
        };
        let cluster = match row.str("system")? {
            "DGX-H100" => cluster_preset("dgx-h100")?,
            "DGX-B200" => cluster_preset("dgx-b200")?,
            "DGX-GB200" => cluster_preset("gb200-nvl72")?,
            other => {
                skipped.push(Skipped {
                    label,
                    reason: format!("no cluster preset for {other}"),
                });
                continue;
            }
        };
        // NeMo's SFT and LoRA runs pack SQuAD samples into each sequence, attention within
        // each ([`SQUAD_PACKED_SAMPLE_TOKENS`]). LoRA as NeMo 24.07 configured it: rank 32 on `attention_qkv`
        // (NeMo 876c8511e5, examples/nlp/language_modeling/tuning/conf/
        // megatron_gpt_finetuning_config.yaml, `peft.lora_tuning`).
        let (task, lora) = match row.str("task")? {
            "lora" => (
                Task::Lora,
                Lora {
                    rank: 32,
                    targets: [true, false, false, false],
                },
            ),
            "sft" => (Task::Sft, Lora::default()),
            _ => (Task::Pretrain, Lora::default()),
        };
        let (gpus, gbs, mbs, seq) = (
            row.int("gpus")?,
            row.int("gbs")?,
            row.int("mbs")?,
            row.int("seq")?,
        );
        let (tp, pp, cp, mut vp, ep) = (
            row.int("tp")?,
            row.int("pp")?,
            row.int("cp")?,
            row.int("vp")?,
            row.int("ep")?,
        );
        // NeMo's fine-tuning table publishes tp and pp only (no VP column); the launcher's
        // example scripts that ran them interleave the pipelined SFT runs
        // (NeMo-Framework-Launcher 24.07, 8325688d, `examples/peft/llama/h100/`:
        // `llama2_13b_1node.sh` VP 10, `llama2_70b_2node.sh` VP 20).
        if task == Task::Sft && vp == 1 {
            vp = match row.str("model")? {
                "LLAMA2-13B" => 10,
                "LLAMA2-70B" => 20,
                _ => vp,
            };
        }
        let model = match preset {
            Some(m) => m,
            None => {
                let (name, hidden, layers, heads, vocab) = (
                    row.str("model")?.to_ascii_lowercase(),
                    row.int("hidden")?,
                    row.int("layers")?,
                    row.int("heads")?,
                    row.int("vocab")?,
                );
                let (kv_heads, head_dim, ffn_hidden, tied_embeddings) = (
                    row.int("kv_heads")?,
                    row.int("head_dim")?,
                    row.int("ffn")?,
                    row.flag("tied")?,
                );
                if row.str("arch_family")? == "gpt2" {
                    // GPT-3 has learned positions and biases; Nemotron rotary positions and
                    // no biases (`add_bias_linear = False`).
                    let gpt3 = row.str("model")?.starts_with("GPT3");
                    ModelSpec {
                        kv_heads,
                        head_dim,
                        ffn_hidden,
                        tied_embeddings,
                        positions: if gpt3 {
                            Positions::Learned
                        } else {
                            Positions::Rotary
                        },
                        qkv_bias: gpt3,
                        linear_bias: gpt3,
                        ..plait_spec::presets::gpt(
                            &name,
                            hidden,
                            layers,
                            heads,
                            vocab,
                            if gpt3 { seq } else { 0 },
                        )
                    }
                } else {
                    let experts = row.int("experts")?;
                    let moe = (experts > 0).then(|| MoeSpec {
                        experts,
                        top_k: row.int("top_k").unwrap_or(2),
                        shared_experts: 0,
                        latent: None,
                    });
                    ModelSpec {
                        head_dim,
                        tied_embeddings,
                        ..plait_spec::presets::llama(
                            &name, hidden, layers, heads, kv_heads, ffn_hidden, vocab, moe,
                        )
                    }
                }
            }
        };
        let moe_capacity = model.moe.map(|_| 1.0);
        runs.push(Run {
            stage_map: None,
            label,
            software: release.to_string(),
            model,
            cluster,
            train: TrainSpec {
                dtype: Dtype::Fp8,
                engine: Engine::Megatron,
                // The 24.07 runs are NeMo-Framework-Launcher's (tag 24.07, 8325688d): its
                // `conf/training/gpt3/{5b,20b,175b}.yaml` set hidden and attention dropout
                // 0.1, the Llama and Nemotron configs 0.0. The 25.x runs are NeMo 2.0's
                // recipes, whose `GPTConfig175B` sets 0 (v2.2.0 `gpt/model/base.py`).
                dropout: release == "24.07" && row.str("model")?.starts_with("GPT3"),
                // The 25.04 and 25.07 pages state the recipe: "per-tensor FP8 quantization,
                // leveraging scaling factors computed in the current step", Transformer
                // Engine's current scaling. 24.07 and 25.02 name none and ran the default,
                // delayed scaling: NeMo's performance scripts gained a choice (`--fp8_recipe
                // ds|cs|mxfp8`, default `ds`) only after 25.02 (NeMo 023b82de24, 2025-04-16).
                float8_recipe: Some(if matches!(release, "24.07" | "25.02") {
                    Float8Recipe::Delayed
                } else {
                    Float8Recipe::Tensorwise
                }),
                // NeMo's MoE performance recipes (Mixtral 8x7B and 8x22B, Llama 4 e16, in
                // `performance_mode`) add `MegatronTokenDropCallback`: capacity factor 1.0,
                // each expert's input padded to capacity (NeMo 8cfedd7
                // `lightning/pytorch/callbacks/moe_token_drop.py`; in the Mixtral recipe
                // since cc494c9d93, 2024-09-16, before the 25.02 release).
                moe_capacity,
                task,
                lora,
                pack_len: (task != Task::Pretrain).then_some(SQUAD_PACKED_SAMPLE_TOKENS),
                // SFT: `dtype: bf16` in NeMo-Framework-Launcher 0da9ad9c's peft/llama/sft.yaml.
                optimizer_state: if task == Task::Sft { Bf16 } else { Fp32 },
                // Quantised weights, as NeMo 2.0's recipes keep them (`fp8_param_gather`).
                // The launcher's 24.07 dense pre-training scripts set no `fp8_params`
                // (8325688d `examples/training/*/h100/*_fp8.sh`; its PEFT scripts do), but
                // with 16-bit weights and the two fp8 copies Transformer Engine caches
                // beside them (`TrainSpec::sixteen_bit_weights`) its Nemotron-340B run on
                // 128 H100 would need 88.8 GiB of 80, and it ran: the table keeps them.
                ..TrainSpec::new(gbs, seq)
            },
            config: ParallelConfig {
                recompute_modules: plait_spec::RecomputeModules::CORE_ATTN,
                dp: gpus / (tp * pp * cp),
                tp,
                pp,
                vp,
                cp,
                // Megatron-Core's default ring (`cp_comm_type` None → p2p; NeMo 8cfedd7 sets
                // a2a only for Mistral's sliding-window configs, `gpt/model/mistral.py`).
                cp_comm: CpComm::P2p,
                ep,
                // NeMo's Mixtral 8x22B runs its experts without tensor parallelism (expert
                // tp 1 beside tp 2: `etp_size` 1 in NeMo 8cfedd7
                // `scripts/performance/recommended_model_configs/model_configs_b200.csv`;
                // the GB200 file lists no 8x22B, taken to be the same); the other rows leave
                // it at tp.
                etp: (row.str("model")? == "Mixtral-8x22B").then_some(1),
                mbs,
                // The launcher's PEFT examples run LoRA on `fused_adam` (the distributed
                // optimizer's keys removed, `examples/peft/llama/h100/*_lora.sh`); every other
                // run on the distributed optimizer.
                zero: if task == Task::Lora {
                    0
                } else if row.int("fsdp")? == 1 {
                    // Megatron-Core's own FSDP (`use_mcore_fsdp`): parameters, gradients and
                    // optimizer states sharded, ZeRO-3.
                    3
                } else {
                    1
                },
                sp: tp > 1,
                // Activation recomputation as the launcher's model configs set it: selective
                // for Nemotron-340B (`conf/training/nemotron/nemotron_340b.yaml`), none in the
                // other 24.07 configs and example scripts, nor in NeMo 2.0's recipes of the
                // 25.x rows (v2.2.0 `recipes/nemotron4_340b.py`, `llama3_70b.py`,
                // `llama31_405b.py`; the recommended configs of v2.3.0 list no recompute
                // layers for these runs).
                recompute: if release == "24.07" && row.str("model")? == "Nemotron-340B" {
                    Recompute::Selective
                } else {
                    Recompute::None
                },
                schedule: Schedule::megatron_for_chunks(vp),
                ..ParallelConfig::default()
            },
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name,
        engine: Engine::Megatron,
        runs,
        skipped,
    })
}

/// The tables this repository carries (copies of shared/data, with their sources).
pub fn builtin_tables() -> Result<Vec<Table>, SpecError> {
    Ok(vec![
        sc21_table1(include_str!("../../data/megatron_sc21_table1.csv"))?,
        sc21_table2(include_str!("../../data/megatron_sc21_table2.csv"))?,
        llmfoundry_fsdp(include_str!("../../data/llmfoundry_fsdp_a100_80gb.csv"))?,
        llmfoundry_fsdp_a100_40gb(include_str!("../../data/llmfoundry_fsdp_a100_40gb.csv"))?,
        llmfoundry_fsdp_h100(include_str!("../../data/llmfoundry_fsdp_h100_80gb.csv"))?,
        nemo(include_str!("../../data/nemo_performance.csv"))?,
        nemo_blackwell_dense(include_str!("../../data/nemo_blackwell_dense.csv"))?,
        nemo_long_context_h100(include_str!("../../data/nemo_long_context_h100.csv"))?,
        torchtitan_benchmarks(include_str!("../../data/torchtitan_benchmarks.csv"))?,
        megatron_bridge(
            include_str!("../../data/megatron_bridge_performance.csv"),
            include_str!("../../data/megatron_bridge_recipes.csv"),
        )?,
        megatron_bridge_finetuning(include_str!("../../data/megatron_bridge_finetuning.csv"))?,
    ])
}

#[cfg(test)]
mod tests;
