//! Errors of the runtime. Bad input is a typed variant carrying what was given and what
//! would be accepted (a plan that does not fit the workers, a run that does not fit in
//! memory, a missing data file); a failure while training names the rank, its
//! coordinates, the step and the instruction it was executing.
//!
//! Messages name the request's fields (`workers`, `seq`, `checkpoint.dir`), never a
//! program's flags: [`RuntimeError::message_naming`] renders them with other names (the
//! CLI's `--workers`).

use std::fmt;
use std::path::PathBuf;

use plait_cost::ProfileError;
use plait_schedule::{GenerateError, ValidationError};
use plait_spec::{Family, SpecError};
use thiserror::Error;

use crate::comm::CommError;

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A count that must be positive is 0 (`what`: the fields, `seq, gbs and steps`).
    #[error("{what} must be at least 1")]
    NotPositive { what: &'static str },
    /// A feature the runtime does not implement.
    #[error(transparent)]
    Unsupported(Unsupported),
    /// The model is not one the runtime can build or split.
    #[error("{model}: {problem}")]
    Model {
        model: String,
        problem: ModelProblem,
    },
    /// The plan does not match the workers, the batch or the model.
    #[error(transparent)]
    PlanMismatch(PlanMismatch),
    /// The run (or a measurement) would not fit in this machine's memory.
    #[error(transparent)]
    DoesNotFit(DoesNotFit),
    /// A checkpoint directory used the wrong way: a fresh run in a used directory, a
    /// resumed run without one, or a checkpoint of another run.
    #[error(transparent)]
    Resume(ResumeError),
    /// The plan or the stage map is not valid for the model (the spec's own check).
    #[error(transparent)]
    Spec(SpecError),
    /// The plan has no schedule.
    #[error("schedule: {0}")]
    ScheduleSpec(SpecError),
    #[error("schedule: {0}")]
    Generate(GenerateError),
    #[error("schedule is invalid: {0}")]
    InvalidSchedule(ValidationError),
    /// A calibration profile that does not parse.
    #[error(transparent)]
    Profile(ProfileError),
    /// A CPU profile whose `cpu` section is missing, does not parse or is out of range
    /// (`field`: `cpu.cores`, …; `None` for the file as a whole).
    #[error("{}", invalid_profile(file, field.as_deref(), problem))]
    InvalidProfile {
        file: String,
        field: Option<String>,
        problem: String,
    },
    /// A profile that does not serialize.
    #[error(transparent)]
    Json(serde_json::Error),
    /// A pool of threads could not be started (`what`: `worker threads`, `a measuring
    /// thread`).
    #[error("cannot start {what}: {error}")]
    PoolStart {
        what: &'static str,
        error: rayon::ThreadPoolBuildError,
    },
    /// A worker thread ended without a result, and no rank reported why (the world's
    /// abort reason, or that a thread could not start).
    #[error("{0}")]
    Stopped(String),
    /// A thread measuring the communicator panicked.
    #[error("link measurement panicked")]
    MeasurementPanicked,
    /// The executed program broke one of its own invariants (a runtime bug).
    #[error(transparent)]
    Invariant(Invariant),
    /// Training text that cannot be read or used.
    #[error("data: {0}")]
    Data(DataError),
    /// A checkpoint that cannot be written, found or read back.
    #[error("checkpoint: {0}")]
    Checkpoint(CheckpointError),
    /// The I/O error is part of the message and deliberately not a `source`: printing the
    /// chain (`{err:#}`) would repeat it.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error("tensor: {0}")]
    Tensor(String),
    /// A worker thread panicked (the panic's message).
    #[error("panicked: {0}")]
    Panicked(String),
    /// The test switch [`crate::Fault`] fired.
    #[error("injected failure (test switch)")]
    Injected,
    /// A worker failed (error or panic); every other rank was stopped.
    #[error("rank {rank} ({coords}) failed at step {step}, {at}: {message}")]
    RankFailed {
        rank: usize,
        coords: String,
        step: u64,
        /// The instruction (`instruction 7 (F micro-batch 1 chunk 0)`) or phase.
        at: String,
        message: String,
    },
}

fn invalid_profile(file: &str, field: Option<&str>, problem: &str) -> String {
    match field {
        Some(f) => format!("{file}: `{f}`: {problem}"),
        None => format!("{file}: {problem}"),
    }
}

/// How the runtime's own messages name a field: `` `workers` ``.
fn field_name(field: &'static str) -> String {
    format!("`{field}`")
}

fn gib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 30)
}

/// A feature of the plan the runtime does not implement.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// A parallel degree the runtime does not run (`config::RUNTIME_DEGREES` lists those it
    /// does), at a size other than 1.
    #[error("{} = {size} is not run by the runtime, which runs {}; use {} = 1", .degree.name(), plait_spec::Degree::names(.runs), .degree.name())]
    Degree {
        degree: plait_spec::Degree,
        size: u64,
        /// The degrees the runtime runs.
        runs: &'static [plait_spec::Degree],
    },
    #[error("ZeRO stage {stage} is not supported by the runtime (0 or 1)")]
    ZeroStage { stage: u8 },
    #[error("hybrid sharding (shard = {shard} of dp = {dp}) is not supported by the runtime; it shards ZeRO-1 over all of dp")]
    HybridSharding { shard: u64, dp: u64 },
    #[error("selective recompute is not implemented by the runtime; use none or full (per-stage amounts come from the stage map)")]
    SelectiveRecompute,
    #[error("sub-pipelined tensor parallelism is not combined with recompute in the runtime; use recompute none")]
    SubPipelineTpWithRecompute,
}

/// Why the runtime cannot build or split a model (the message follows the model's name).
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ModelProblem {
    #[error("the runtime builds GPT and LLaMA decoders, not {0:?} models")]
    Family(Family),
    #[error("mixture-of-experts layers are not supported by the runtime")]
    MixtureOfExperts,
    #[error("the runtime trains causal decoders only")]
    NotCausal,
    #[error("latent or sliding-window attention, blocks of different kinds (Mamba-2 \
             hybrids), squared-ReLU MLPs and multi-token prediction are not supported by the runtime (it builds full-attention \
             GPT and LLaMA blocks)")]
    BlockKinds,
    #[error("{heads} query heads do not group over {kv_heads} key/value heads")]
    HeadGroups { heads: u64, kv_heads: u64 },
    /// `what`: `attention heads`, `key/value heads` or `MLP width`.
    #[error(
        "{what} ({n}) do not split over tp = {tp}; the runtime splits heads and \
             kv heads without replicating them (choose tp dividing {n})"
    )]
    DoesNotSplit {
        what: &'static str,
        n: u64,
        tp: usize,
    },
    #[error("rotary positions need an even head size")]
    OddRotaryHeadSize,
    #[error("ALiBi attention biases are not supported by the runtime (it builds learned or rotary positions)")]
    Alibi,
    #[error("sequence {seq} exceeds the {max_positions} learned positions")]
    TooFewPositions { seq: usize, max_positions: u64 },
    #[error("vocabulary {vocab} is smaller than the byte tokenizer's 256")]
    VocabularyTooSmall { vocab: u64 },
}

/// A plan that does not match the workers, the batch or the model.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PlanMismatch {
    /// The plan's text does not parse.
    Syntax { plan: String, reason: String },
    /// The degrees do not multiply to the workers (`dp`: `None` when no dp makes them;
    /// `product`: `None` past 2⁶⁴).
    Workers {
        plan: String,
        dp: Option<u64>,
        tp: u64,
        pp: u64,
        product: Option<u64>,
        workers: usize,
    },
    /// The global batch does not split into micro-batches over dp.
    Batch { gbs: usize, mbs: u64, dp: u64 },
    /// Sequence parallelism: the sequence does not split over tp.
    Sequence { seq: usize, tp: u64 },
    /// A rank would run more blocks than its thread's stack holds.
    BlocksPerRank {
        model: String,
        blocks: u64,
        max: u64,
    },
    /// Sub-pipelined tensor parallelism needs tp ≥ 2 and an even micro-batch.
    SubPipelineTp { tp: u64, mbs: u64 },
}

impl PlanMismatch {
    /// The message, naming fields with `name` (`workers`).
    pub fn message_naming(&self, name: &dyn Fn(&'static str) -> String) -> String {
        match self {
            PlanMismatch::Syntax { plan, reason } => format!("{} {plan}: {reason}", name("plan")),
            PlanMismatch::Workers {
                plan,
                dp,
                tp,
                pp,
                product,
                workers,
            } => format!(
                "{} {plan}: dp×tp×pp = {}×{tp}×{pp} = {} but {} is {workers}",
                name("plan"),
                dp.map_or_else(|| "?".to_string(), |d| d.to_string()),
                product.map_or_else(|| "more than 2⁶⁴".to_string(), |p| p.to_string()),
                name("workers"),
            ),
            PlanMismatch::Batch { gbs, mbs, dp } => format!(
                "global batch {gbs} does not split into micro-batches of {mbs} over dp = {dp} (needs a multiple of {})",
                mbs * dp
            ),
            PlanMismatch::Sequence { seq, tp } => format!(
                "sequence {seq} does not split over tp = {tp} for sequence parallelism"
            ),
            PlanMismatch::BlocksPerRank { model, blocks, max } => format!(
                "a rank would run up to {blocks} blocks of {model}, more than the {max} its thread's stack holds; use more pipeline stages (pp)"
            ),
            PlanMismatch::SubPipelineTp { tp, mbs } => format!(
                "sub-pipelined tensor parallelism splits each micro-batch in two over tp ≥ 2: needs tp ≥ 2 and an even micro-batch (got tp = {tp}, mbs = {mbs})"
            ),
        }
    }
}

impl fmt::Display for PlanMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_naming(&field_name))
    }
}

impl std::error::Error for PlanMismatch {}

/// A run or a measurement that would not fit in 80 % (`headroom`) of this machine's
/// available memory. Sizes in bytes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DoesNotFit {
    /// The data-parallel model copies alone (`replicas` of them, one per dp rank).
    Replicas {
        model: String,
        parameters: u64,
        replicas: u64,
        need_bytes: f64,
        available_bytes: f64,
        headroom: f64,
    },
    /// One copy of the model's weights, gradients and Adam states.
    Parameters {
        model: String,
        parameters: u64,
        need_bytes: f64,
        available_bytes: f64,
    },
    /// The attention activations of `seq` with the model's state.
    Activations {
        model: String,
        seq: usize,
        activation_bytes: f64,
        need_bytes: f64,
        available_bytes: f64,
        headroom: f64,
    },
    /// A measurement of `plait profile` (`what`: the largest thing measured).
    Measurement {
        what: String,
        need_bytes: f64,
        available_bytes: f64,
        headroom: f64,
    },
}

impl DoesNotFit {
    /// The message, naming fields with `name` (`workers`, `seq`).
    pub fn message_naming(&self, name: &dyn Fn(&'static str) -> String) -> String {
        match self {
            DoesNotFit::Replicas {
                model,
                parameters,
                replicas,
                need_bytes,
                available_bytes,
                headroom,
            } => format!(
                "{replicas} model copies of {model} ({:.2} B parameters, one per data-parallel rank) need \
                 about {:.1} GiB (f32 weights, gradients and Adam states each) but this machine \
                 has {:.1} GiB available (a run may plan on {:.0} % of it); use fewer {}",
                *parameters as f64 / 1e9,
                gib(*need_bytes),
                gib(*available_bytes),
                headroom * 100.0,
                name("workers"),
            ),
            DoesNotFit::Parameters {
                model,
                parameters,
                need_bytes,
                available_bytes,
            } => format!(
                "{model} has {:.2} B parameters: training it needs about {:.1} GiB (f32 weights, \
                 gradients and Adam states) but this machine has {:.1} GiB available",
                *parameters as f64 / 1e9,
                gib(*need_bytes),
                gib(*available_bytes)
            ),
            DoesNotFit::Activations {
                model,
                seq,
                activation_bytes,
                need_bytes,
                available_bytes,
                headroom,
            } => format!(
                "{} {seq} is too long for this machine: {model}'s attention activations need \
                 about {:.1} GiB (they grow with seq²), {:.1} GiB with its weights, gradients \
                 and Adam states, but this machine has {:.1} GiB available (a run may plan on \
                 {:.0} % of it); use a shorter {} or a smaller micro-batch",
                name("seq"),
                gib(*activation_bytes),
                gib(*need_bytes),
                gib(*available_bytes),
                headroom * 100.0,
                name("seq"),
            ),
            DoesNotFit::Measurement {
                what,
                need_bytes,
                available_bytes,
                headroom,
            } => format!(
                "measuring {what} needs about {:.1} GiB but this machine has {:.1} GiB available \
                 (a measurement may use {:.0} % of it); profile a smaller {}, {} or {}",
                gib(*need_bytes),
                gib(*available_bytes),
                headroom * 100.0,
                name("model"),
                name("seq"),
                name("mbs"),
            ),
        }
    }
}

impl fmt::Display for DoesNotFit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_naming(&field_name))
    }
}

impl std::error::Error for DoesNotFit {}

/// A checkpoint directory used the wrong way.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResumeError {
    /// A fresh run in a directory that already holds checkpoints (`found`: their
    /// directories, or `` `latest` `` alone).
    DirectoryInUse { dir: PathBuf, found: Vec<String> },
    /// A resumed run without a checkpoint directory.
    NoDirectory,
    /// The checkpoint was written by `written` workers, this run has `workers` (a run that
    /// keeps the checkpoint's plan needs as many).
    Workers {
        checkpoint: PathBuf,
        written: usize,
        workers: usize,
    },
    /// The checkpoint of `step` belongs to another run: `differences` lists what differs
    /// (`model a vs b`, `seed 1 vs 2`, …).
    DifferentRun { step: u64, differences: Vec<String> },
}

impl ResumeError {
    /// The message, naming fields with `name` (`resume`, `checkpoint.dir`, `workers`).
    pub fn message_naming(&self, name: &dyn Fn(&'static str) -> String) -> String {
        match self {
            ResumeError::DirectoryInUse { dir, found } => format!(
                "{} `{}` already holds checkpoints of an earlier run ({}): continue \
                 that run with {}, or give a new run an empty directory",
                name("checkpoint.dir"),
                dir.display(),
                if found.is_empty() {
                    "`latest`".to_string()
                } else {
                    found.join(", ")
                },
                name("resume"),
            ),
            ResumeError::NoDirectory => {
                format!("{} needs {}", name("resume"), name("checkpoint.dir"))
            }
            ResumeError::Workers {
                checkpoint,
                written,
                workers,
            } => format!(
                "{}: {} was written by {written} workers, this run has {} {workers}",
                name("resume"),
                checkpoint.display(),
                name("workers"),
            ),
            ResumeError::DifferentRun { step, differences } => format!(
                "checkpoint: step {step} was written by a different run ({}); resume with the same \
                 model, plan, batch, seed and steps, or use another {}",
                differences.join("; "),
                name("checkpoint.dir"),
            ),
        }
    }
}

impl fmt::Display for ResumeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message_naming(&field_name))
    }
}

impl std::error::Error for ResumeError {}

/// A checkpoint that cannot be written, found or read back.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A file of the checkpoint (its manifest or a rank's shard) is not what the
    /// checkpoint says: `problem` says how.
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
    /// `latest` (at `pointer`) names a missing directory, and `dir` holds no other
    /// complete checkpoint.
    #[error("{} names `{name}`, which is missing (or not a checkpoint directory), and {} \
             holds no other complete checkpoint; delete `latest` to start afresh", pointer.display(), dir.display())]
    MissingLatest {
        pointer: PathBuf,
        name: String,
        dir: PathBuf,
    },
    /// The checkpoint `name` that `latest` names fails verification (`error`); `intact`:
    /// the newest older one that verifies (its directory name and step), if any.
    #[error("{}", broken(dir, name, error, intact.as_ref()))]
    Broken {
        dir: PathBuf,
        name: String,
        error: Box<RuntimeError>,
        intact: Option<(String, u64)>,
    },
    /// The saved optimizer state has `saved` buckets, this run `expected`.
    #[error("{saved} optimizer buckets saved, {expected} expected")]
    Buckets { saved: usize, expected: usize },
    /// Bucket `bucket` of the saved optimizer state has `saved` elements.
    #[error("optimizer bucket {bucket} holds {saved} elements, {expected} expected")]
    BucketSize {
        bucket: usize,
        saved: usize,
        expected: usize,
    },
    #[error("serializing rank {rank}: {error}")]
    SerializeShard {
        rank: usize,
        error: safetensors::SafeTensorError,
    },
    #[error("{0}")]
    SerializeManifest(serde_json::Error),
}

fn broken(
    dir: &std::path::Path,
    name: &str,
    error: &RuntimeError,
    intact: Option<&(String, u64)>,
) -> String {
    let hint = match intact {
        Some((n, step)) => format!(
            "; the newest intact checkpoint is {} (step {step}): resume from it with \
             `echo {n} > {}`, or move `{name}` aside",
            dir.join(n).display(),
            dir.join("latest").display()
        ),
        None => format!("; {} holds no older intact checkpoint", dir.display()),
    };
    // The inner error's own text, without its `checkpoint:` prefix (added once, outside).
    let text = match error {
        RuntimeError::Checkpoint(c) => c.to_string(),
        other => other.to_string(),
    };
    format!("{text}{hint}")
}

impl From<CheckpointError> for RuntimeError {
    fn from(e: CheckpointError) -> Self {
        RuntimeError::Checkpoint(e)
    }
}

/// Training text that cannot be read or used (`file`: the path or name it came from).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DataError {
    #[error("cannot read `{}`: {error}", path.display())]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{file}: JSON lines must be UTF-8: {error}")]
    NotUtf8 {
        file: String,
        error: std::str::Utf8Error,
    },
    /// A JSON line that does not parse (`line` counts from 1).
    #[error("{file}: line {line}: {error}")]
    BadLine {
        file: String,
        line: usize,
        error: serde_json::Error,
    },
    #[error("{file}: line {line}: no string field `text`")]
    NoTextField { file: String, line: usize },
    #[error("`{file}` holds no text")]
    NoText { file: String },
    /// Fewer than `seq + 1` tokens: not one training sequence.
    #[error("`{file}` has {tokens} tokens; a sequence of {seq} needs at least {}", seq + 1)]
    TooShort {
        file: String,
        tokens: usize,
        seq: usize,
    },
}

impl From<DataError> for RuntimeError {
    fn from(e: DataError) -> Self {
        RuntimeError::Data(e)
    }
}

/// An invariant of the executed program or the model's inputs, broken: a bug of the
/// runtime (or of a hand-made schedule), never bad input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Invariant {
    #[error("forward before its activation was received")]
    ForwardBeforeActivation,
    #[error("recompute before its forward")]
    RecomputeBeforeForward,
    #[error("backward before its forward")]
    BackwardBeforeForward,
    #[error("backward before its output gradient was received")]
    BackwardBeforeGradient,
    #[error("backward of a recomputed chunk before its Recompute")]
    BackwardBeforeRecompute,
    #[error("weight backward before its input backward")]
    WeightBeforeInputBackward,
    #[error("send of an activation that was not computed")]
    SendOfMissingActivation,
    #[error("send of a gradient that was not computed")]
    SendOfMissingGradient,
    #[error("the program ended with micro-batches still in flight")]
    InFlightAtEnd,
    /// The IR sends or receives a message (`what`: `activation sent`, …) across a link
    /// that has no other rank: the pipeline's end, or a hand-over inside this rank.
    #[error("an {what} with no other pipeline rank to exchange it with")]
    MessageWithoutPeer { what: &'static str },
    /// A received message's length (`what`: `activation`, `gradient`).
    #[error("received an {what} of {got} elements, expected {}×{}×{}", expected.0, expected.1, expected.2)]
    MessageLength {
        what: &'static str,
        got: usize,
        expected: (usize, usize, usize),
    },
    #[error("stage {stage} has no parameter `{name}`")]
    MissingParameter { stage: usize, name: String },
    #[error("embedding got {got} tokens for a micro-batch of {mbs}×{seq}")]
    TokenCount { got: usize, mbs: usize, seq: usize },
    #[error("token {token} outside the vocabulary of {vocab}")]
    TokenOutsideVocabulary { token: usize, vocab: u64 },
    #[error("head got {got} targets for {positions} positions")]
    TargetCount { got: usize, positions: usize },
}

impl From<Invariant> for RuntimeError {
    fn from(e: Invariant) -> Self {
        RuntimeError::Invariant(e)
    }
}

impl From<candle_core::Error> for RuntimeError {
    fn from(e: candle_core::Error) -> Self {
        // candle appends a backtrace to some messages; the first line is the error.
        let text = e.to_string();
        RuntimeError::Tensor(text.lines().next().unwrap_or("").to_string())
    }
}

impl RuntimeError {
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            path: path.as_ref().display().to_string(),
            error: source,
        }
    }

    /// The message with the request's fields named by `name` (`workers` → `--workers` in
    /// the CLI); the same as `to_string()` with `` |f| format!("`{f}`") ``.
    pub fn message_naming(&self, name: &dyn Fn(&'static str) -> String) -> String {
        match self {
            RuntimeError::PlanMismatch(e) => e.message_naming(name),
            RuntimeError::DoesNotFit(e) => e.message_naming(name),
            RuntimeError::Resume(e) => e.message_naming(name),
            other => other.to_string(),
        }
    }

    /// Whether the message names fields of the request ([`RuntimeError::message_naming`]
    /// then differs from `to_string()`).
    pub fn names_fields(&self) -> bool {
        matches!(
            self,
            RuntimeError::PlanMismatch(_) | RuntimeError::DoesNotFit(_) | RuntimeError::Resume(_)
        )
    }
}
