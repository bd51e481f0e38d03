//! The executor: one worker thread per rank, each with its own tensors, running the
//! schedule IR of its pipeline rank instruction by instruction (design invariant 1: the
//! order comes from `plait_schedule::generate`, nothing here encodes it).
//!
//! Per instruction (semantics of `plait_schedule::validate`):
//! * `Forward` — runs the chunk on the micro-batch (tokens on the first virtual stage, the
//!   received activation otherwise) and keeps what its backward needs. On a rank that
//!   recomputes, the chunk's first `x` blocks (the plan's per-stage count) run without
//!   keeping their activations: only the chunk's input is saved.
//! * `Recompute` — re-runs those blocks from the saved input, keeping the graph.
//! * `Backward` — backpropagates the received output gradient (or the loss on the last
//!   stage) through the chunk, accumulates weight gradients and keeps the input gradient
//!   for `SendGradient`. `BackwardInput`/`BackwardWeight` (zero-bubble) split it: candle
//!   computes both parts in one pass, so the input half holds the weight gradients back
//!   and the weight half accumulates them.
//! * `Send*` are buffered and never block; `Recv*` block (bounded by the timeout).
//! * `ReduceGradients` — reduces the chunk's gradient buckets over dp (blocking).
//! * `OptimizerStep` — remaining reductions, tied embeddings, clipping, AdamW.
//!
//! Failure: an error or panic on any rank aborts the world, every blocked call returns,
//! and [`train`] reports the first failing rank with the instruction it was executing.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use candle_core::{Device, Tensor, Var};
use plait_schedule::{generate, validate, Instr, Op, Schedule, Span, Stream};
use plait_spec::{ModelSpec, ParallelConfig, Recompute, Schedule as Kind, StageMap, TrainSpec};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, CheckpointConfig, Manifest};
use crate::comm::{Communicator, ReduceOp, Tag, World};
use crate::data::{Dataset, Sampler};
use crate::error::RuntimeError;
use crate::model::{check_model, ParamDef, Split, StageModel};
use crate::optim::{OptimConfig, Optimizer};
use crate::topology::{Coords, Topology};
use crate::tp::TpGroup;

type Result<T> = std::result::Result<T, RuntimeError>;

/// Default bound on any blocking communication call: far above any step of the models the
/// CPU runtime trains (seconds), far below "hangs forever".
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A test-only switch: make `rank` fail at `step` on its program's instruction `instruction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub rank: usize,
    pub step: u64,
    pub instruction: usize,
    /// Panic (instead of returning an error).
    pub panic: bool,
}

/// Everything one training run needs.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub model: ModelSpec,
    /// dp, tp, pp, vp, mbs, zero (0 or 1), sp, recompute, schedule (cp = ep = 1).
    pub parallel: ParallelConfig,
    /// Blocks per chunk and recomputed blocks per rank (`None`: the uniform map).
    pub stage_map: Option<StageMap>,
    pub seq: usize,
    /// Global batch in sequences.
    pub gbs: usize,
    /// Steps of the whole run (the learning-rate schedule's length).
    pub steps: u64,
    /// Stop after this step (a checkpoint is written there when checkpoints are on), as if
    /// interrupted; `None` runs to `steps`.
    pub stop_after: Option<u64>,
    pub seed: u64,
    pub optim: OptimConfig,
    /// Elements per data-parallel gradient bucket.
    pub bucket_params: usize,
    pub timeout: Duration,
    /// Compute threads of each worker (1: a worker is one core, as `plait profile` measures).
    pub threads_per_worker: usize,
    pub checkpoint: Option<CheckpointConfig>,
    /// Continue from the newest checkpoint in `checkpoint.dir`.
    pub resume: bool,
    /// Record the measured timeline of pipeline 0 (dp 0, tp 0) for a Perfetto trace.
    pub trace: bool,
    /// Return the final weights (full, unsplit) in the report.
    pub return_weights: bool,
    pub fault: Option<Fault>,
    /// Sub-pipelined tensor parallelism (Merak): each micro-batch runs as two halves on
    /// two threads with their own tensor-parallel communicators, so one half's collectives
    /// overlap the other half's compute.
    pub sub_pipeline_tp: bool,
}

impl TrainConfig {
    /// A run of `steps` steps of `model` under `parallel` with the runtime's defaults.
    pub fn new(
        model: ModelSpec,
        parallel: ParallelConfig,
        seq: usize,
        gbs: usize,
        steps: u64,
    ) -> Self {
        TrainConfig {
            model,
            parallel,
            stage_map: None,
            seq,
            gbs,
            steps,
            stop_after: None,
            seed: 0,
            optim: OptimConfig::for_steps(steps),
            bucket_params: plait_cost::estimate::GRAD_BUCKET_PARAMS as usize,
            timeout: DEFAULT_TIMEOUT,
            threads_per_worker: 1,
            checkpoint: None,
            resume: false,
            trace: false,
            return_weights: false,
            fault: None,
            sub_pipeline_tp: false,
        }
    }

    /// The batch as the planner sees it. Reductions are placed after the backward: the
    /// in-process communicator blocks the worker while it reduces.
    pub fn train_spec(&self) -> TrainSpec {
        TrainSpec {
            attention: plait_spec::AttentionImpl::Unfused,
            overlap_grad_reduce: false,
            engine: plait_spec::Engine::Plait,
            ..TrainSpec::new(self.gbs as u64, self.seq as u64)
        }
    }

    pub fn topology(&self) -> Topology {
        Topology {
            dp: self.parallel.dp as usize,
            tp: self.parallel.tp as usize,
            pp: self.parallel.pp as usize,
        }
    }

    pub fn stage_map(&self) -> StageMap {
        self.stage_map
            .clone()
            .unwrap_or_else(|| StageMap::uniform(self.model.layers, &self.parallel))
    }

    /// Micro-batches per pipeline per step.
    pub fn microbatches(&self) -> usize {
        self.gbs / (self.parallel.mbs as usize * self.parallel.dp as usize)
    }

    /// Checks everything that can be checked before a thread starts.
    pub fn check(&self, data: &Dataset) -> Result<()> {
        let c = &self.parallel;
        let bad = |m: String| Err(RuntimeError::Config(m));
        if self.seq == 0 || self.gbs == 0 || self.steps == 0 {
            return bad("--seq, --gbs and --steps must be at least 1".into());
        }
        if c.cp != 1 || c.ep != 1 {
            return bad(format!(
                "context parallel (cp = {}) and expert parallel (ep = {}) are not supported by the runtime; use cp = ep = 1",
                c.cp, c.ep
            ));
        }
        if c.zero > 1 {
            return bad(format!(
                "ZeRO stage {} is not supported by the runtime (0 or 1)",
                c.zero
            ));
        }
        if c.recompute == Recompute::Selective {
            return bad("selective recompute is not implemented by the runtime; use none or full (per-stage amounts come from the stage map)".into());
        }
        let train = self.train_spec();
        c.validate(&self.model, &train, c.gpus())
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let per = c.mbs as usize * c.dp as usize;
        if !self.gbs.is_multiple_of(per) {
            return bad(format!(
                "global batch {} does not split into micro-batches of {} over dp = {} (needs a multiple of {per})",
                self.gbs, c.mbs, c.dp
            ));
        }
        if c.sp && c.tp > 1 && !self.seq.is_multiple_of(c.tp as usize) {
            return bad(format!(
                "sequence {} does not split over tp = {} for sequence parallelism",
                self.seq, c.tp
            ));
        }
        self.stage_map()
            .validate(self.model.layers, c)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        check_model(&self.model, c.tp as usize, self.seq)?;
        check_memory(&self.model, self.seq, activation_bytes(self))?;
        data.check(self.seq)?;
        if self.threads_per_worker == 0 {
            return bad("threads per worker must be at least 1".into());
        }
        if self.sub_pipeline_tp {
            if c.tp < 2 || !c.mbs.is_multiple_of(2) {
                return bad(format!(
                    "sub-pipelined tensor parallelism splits each micro-batch in two over tp ≥ 2: needs tp ≥ 2 and an even micro-batch (got tp = {}, mbs = {})",
                    c.tp, c.mbs
                ));
            }
            if self.stage_map().recompute_blocks.iter().any(|&x| x > 0) {
                return bad("sub-pipelined tensor parallelism is not combined with recompute in the runtime; use recompute none".into());
            }
        }
        if self.resume && self.checkpoint.is_none() {
            return bad("--resume needs --checkpoint-dir".into());
        }
        Ok(())
    }

    /// The schedule every pipeline rank executes.
    pub fn schedule(&self) -> Result<Schedule> {
        let spec = plait_spec::schedule_spec(&self.parallel, &self.train_spec(), &self.stage_map())
            .map_err(|e| RuntimeError::Config(format!("schedule: {e}")))?;
        let s = generate(&spec).map_err(|e| RuntimeError::Config(format!("schedule: {e}")))?;
        validate(&s).map_err(|e| RuntimeError::Config(format!("schedule is invalid: {e}")))?;
        Ok(s)
    }
}

/// The share of the available memory (`MemAvailable`) a run may be estimated to need. A
/// safety margin, not a measurement: the estimates below leave out the allocator's slack
/// and fragmentation, transient tensors (gradients in flight, GEMM packing buffers),
/// thread stacks, and what the OS and other processes take while the run lasts.
const MEMORY_HEADROOM: f64 = 0.8;

/// Bytes per parameter: f32 weights, gradients and Adam's two moments (16), plus one more
/// copy for the checkpoint and the gathered full weights.
const BYTES_PER_PARAMETER: f64 = 20.0;

/// `seq × seq` f32 tensors per attention head that one block keeps for its backward
/// (`StageModel::block`): q·kᵀ, its scaled and masked versions, the scores shifted by
/// their row maximum, their exponentials and the probabilities. candle's graph holds every
/// operation's inputs until the backward has run.
const SCORE_TENSORS_PER_BLOCK: f64 = 6.0;

/// Attention activations of `blocks` blocks for one micro-batch of `mbs` sequences, all
/// heads (summed over the tensor-parallel group), in bytes:
/// `blocks · 6 · mbs · heads · seq² · 4`.
fn attention_bytes(m: &ModelSpec, seq: usize, mbs: u64, blocks: u64) -> f64 {
    let seq2 = (seq as f64).powi(2);
    blocks as f64 * SCORE_TENSORS_PER_BLOCK * mbs as f64 * m.heads as f64 * seq2 * 4.0
}

/// The activation memory `cfg` needs at least, in bytes over all workers: every worker's
/// causal masks (one `seq × seq` f32 per chunk it runs), plus the score tensors of the
/// largest chunk for one micro-batch on each of its data- and tensor-parallel ranks
/// (between a chunk's forward, or its `Recompute`, and its backward, every block of the
/// chunk holds them):
///
/// ```text
/// dp·tp·pp · vp · seq² · 4  +  dp · max chunk blocks · 6 · mbs · heads · seq² · 4
/// ```
///
/// Only the terms in seq² are counted (hidden states and MLP activations grow with seq
/// only), and only one micro-batch in flight, so a run this estimate refuses cannot fit.
pub fn activation_bytes(cfg: &TrainConfig) -> f64 {
    let c = &cfg.parallel;
    let seq2 = (cfg.seq as f64).powi(2);
    let chunks = [c.dp, c.tp, c.pp, c.vp]
        .iter()
        .map(|&x| x as f64)
        .product::<f64>();
    let masks = chunks * seq2 * 4.0;
    let blocks = cfg.stage_map().chunk_blocks.into_iter().max().unwrap_or(0);
    masks + c.dp as f64 * attention_bytes(&cfg.model, cfg.seq, c.mbs, blocks)
}

/// [`activation_bytes`] for the smallest plan (one sequence per micro-batch, one block per
/// chunk): what any run of `m` at `seq` needs at least, before a plan is chosen.
pub fn min_activation_bytes(m: &ModelSpec, seq: usize) -> f64 {
    (seq as f64).powi(2) * 4.0 + attention_bytes(m, seq, 1, 1)
}

/// Refuses a run whose weights, gradients and Adam states (16 bytes per parameter in f32,
/// plus one more copy for the checkpoint and the gathered full weights) and attention
/// activations (`activation_bytes`, from [`activation_bytes`] or [`min_activation_bytes`])
/// would not fit in 80 % of this machine's available memory (`MEMORY_HEADROOM`: a safety
/// margin, not a measurement).
pub fn check_memory(m: &ModelSpec, seq: usize, activation_bytes: f64) -> Result<()> {
    let Some(avail) = available_memory_bytes() else {
        return Ok(());
    };
    let budget = MEMORY_HEADROOM * avail;
    let params = m.parameter_count() as f64 * BYTES_PER_PARAMETER;
    let gib = |bytes: f64| bytes / f64::from(1u32 << 30);
    if params > budget {
        return Err(RuntimeError::Config(format!(
            "{} has {:.2} B parameters: training it needs about {:.1} GiB (f32 weights, \
             gradients and Adam states) but this machine has {:.1} GiB available",
            m.name,
            m.parameter_count() as f64 / 1e9,
            gib(params),
            gib(avail)
        )));
    }
    if params + activation_bytes > budget {
        return Err(RuntimeError::Config(format!(
            "--seq {seq} is too long for this machine: {}'s attention activations need \
             about {:.1} GiB (they grow with seq²), {:.1} GiB with its weights, gradients \
             and Adam states, but this machine has {:.1} GiB available (a run may plan on \
             {:.0} % of it); use a shorter --seq or a smaller micro-batch",
            m.name,
            gib(activation_bytes),
            gib(params + activation_bytes),
            gib(avail),
            MEMORY_HEADROOM * 100.0
        )));
    }
    Ok(())
}

/// `MemAvailable` of /proc/meminfo (Linux), in bytes.
pub fn available_memory_bytes() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024.0)
}

/// One step's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    pub step: u64,
    /// Mean cross-entropy over the global batch's tokens (nats per byte).
    pub loss: f64,
    pub grad_norm: f64,
    pub lr: f64,
    /// Tokens of the global batch.
    pub tokens: u64,
    pub step_time_s: f64,
    pub tokens_per_s: f64,
}

/// What a run returns.
#[derive(Debug, Clone)]
pub struct TrainReport {
    pub schedule: Schedule,
    pub logs: Vec<StepLog>,
    /// The step the run started after (0, or the checkpoint it resumed from).
    pub resumed_from: u64,
    /// Checkpoints written (their directories).
    pub checkpoints: Vec<PathBuf>,
    /// Measured spans of pipeline 0 (dp 0, tp 0), in seconds since the run started.
    pub spans: Vec<Span>,
    /// Full weights by name (when asked for).
    pub weights: BTreeMap<String, Vec<f32>>,
    /// Blocks re-run by `Recompute` instructions, summed over ranks and steps.
    pub recomputed_blocks: u64,
}

impl TrainReport {
    /// Mean measured step time, leaving out the first step (warm-up) when there are more.
    pub fn mean_step_time_s(&self) -> f64 {
        let times: Vec<f64> = self.logs.iter().map(|l| l.step_time_s).collect();
        let use_: &[f64] = if times.len() > 1 { &times[1..] } else { &times };
        use_.iter().sum::<f64>() / use_.len().max(1) as f64
    }
}

/// The communicators of one rank.
pub struct Groups {
    pub topology: Topology,
    pub rank: usize,
    pub coords: Coords,
    pub world: Arc<dyn Communicator>,
    pub dp: Arc<dyn Communicator>,
    pub tp: Option<Arc<dyn Communicator>>,
    pub pp: Arc<dyn Communicator>,
    /// First and last pipeline ranks, when they hold copies of a tied embedding.
    pub embedding: Option<Arc<dyn Communicator>>,
    pub tied_pipeline: bool,
    /// The two tensor-parallel groups of sub-pipelined tensor parallelism (one per half).
    pub tp_halves: Option<[Arc<dyn Communicator>; 2]>,
}

impl Groups {
    fn new(world: &World, t: Topology, rank: usize, tied: bool, halves: bool) -> Result<Groups> {
        let all: Vec<usize> = (0..t.world()).collect();
        let arc = |c: crate::comm::InProcessComm| -> Arc<dyn Communicator> { Arc::new(c) };
        let tied_pipeline = tied && t.pp > 1;
        let coords = t.coords(rank);
        let embedding = if tied_pipeline && (coords.pp == 0 || coords.pp + 1 == t.pp) {
            Some(arc(world.group(
                "embedding",
                &t.embedding_group(rank),
                rank,
            )?))
        } else {
            None
        };
        Ok(Groups {
            topology: t,
            rank,
            coords,
            world: arc(world.group("world", &all, rank)?),
            dp: arc(world.group("dp", &t.dp_group(rank), rank)?),
            tp: if t.tp > 1 {
                Some(arc(world.group("tp", &t.tp_group(rank), rank)?))
            } else {
                None
            },
            pp: arc(world.group("pp", &t.pp_group(rank), rank)?),
            embedding,
            tied_pipeline,
            tp_halves: if halves && t.tp > 1 {
                Some([
                    arc(world.group("tp.half0", &t.tp_group(rank), rank)?),
                    arc(world.group("tp.half1", &t.tp_group(rank), rank)?),
                ])
            } else {
                None
            },
        })
    }
}

/// Where a rank is, for failure messages.
#[derive(Debug, Clone, Default)]
struct Position {
    step: u64,
    at: String,
}

/// The input of a chunk for one micro-batch.
enum StageIn {
    Tokens,
    Hidden(Var),
}

/// What a forward keeps for its backward.
struct Live {
    input: StageIn,
    /// Input of the kept segment when the first blocks are recomputed.
    boundary: Option<Var>,
    /// Output of the kept segment (hidden states, or the scaled loss on the last stage).
    out: Tensor,
    /// The recomputed first segment's output (graph attached).
    recomputed: Option<Tensor>,
}

/// What a half micro-batch's forward keeps (sub-pipelined tensor parallelism).
struct Half {
    input: Option<Var>,
    out: Tensor,
}

/// One worker.
struct Worker<'a> {
    cfg: &'a TrainConfig,
    data: &'a Dataset,
    schedule: &'a Schedule,
    g: Groups,
    models: Vec<StageModel>,
    /// Per chunk: fully recomputed blocks (0 when the rank does not recompute).
    recompute: Vec<usize>,
    optimizer: Optimizer,
    grads: Vec<Vec<Option<Tensor>>>,
    live: HashMap<(u32, u32), Live>,
    inbox_act: HashMap<(u32, u32), Vec<f32>>,
    inbox_grad: HashMap<(u32, u32), Vec<f32>>,
    outbox_act: HashMap<(u32, u32), Vec<f32>>,
    outbox_grad: HashMap<(u32, u32), Vec<f32>>,
    stash: HashMap<(u32, u32), Vec<Option<Tensor>>>,
    /// Sub-pipelined tensor parallelism: per chunk, the model run by each half.
    halves: Vec<[StageModel; 2]>,
    /// The compute threads of the second half (sub-pipelined tensor parallelism): its own
    /// pool, so that both halves compute with `threads_per_worker` threads each.
    half_pool: Option<rayon::ThreadPool>,
    live_halves: HashMap<(u32, u32), [Half; 2]>,
    /// This step's micro-batches of this data-parallel rank: (inputs, targets) flattened.
    batch: Vec<(Vec<u32>, Vec<u32>)>,
    loss_sum: f64,
    recomputed_blocks: u64,
    spans: Vec<Span>,
    start: Instant,
    position: Arc<Mutex<Position>>,
}

/// What a worker hands back.
struct WorkerOut {
    spans: Vec<Span>,
    recomputed_blocks: u64,
    /// (definition, local values) of every parameter, when asked for.
    params: Vec<(ParamDef, Vec<f32>)>,
}

enum Event {
    Step(StepLog),
    Checkpoint(PathBuf),
}

impl<'a> Worker<'a> {
    fn new(
        cfg: &'a TrainConfig,
        data: &'a Dataset,
        schedule: &'a Schedule,
        g: Groups,
        start: Instant,
        position: Arc<Mutex<Position>>,
    ) -> Result<Worker<'a>> {
        let c = &cfg.parallel;
        let (p, v) = (c.pp as usize, c.vp as usize);
        let map = cfg.stage_map();
        let r = g.coords.pp;
        let tp = TpGroup {
            comm: g.tp.clone(),
            rank: g.coords.tp,
            size: g.topology.tp,
            sp: c.sp && c.tp > 1,
        };
        let mut models = Vec::with_capacity(v);
        let mut recompute = Vec::with_capacity(v);
        let recomputes = map.recompute_blocks[r] > 0;
        for chunk in 0..v {
            let j = plait_schedule::virtual_stage(r as u64, chunk as u64, p as u64) as usize;
            let start_block: u64 = map.chunk_blocks[..j].iter().sum();
            let blocks = start_block as usize..(start_block + map.chunk_blocks[j]) as usize;
            models.push(StageModel::new(
                &cfg.model,
                j,
                p * v,
                blocks,
                tp.clone(),
                cfg.seq,
                c.mbs as usize,
                cfg.seed,
            )?);
            recompute.push(if recomputes {
                map.chunk_recompute_blocks(r as u64, chunk as u64, p as u64) as usize
            } else {
                0
            });
        }
        let optimizer = Optimizer::new(&models, &g, cfg.optim, cfg.bucket_params, c.zero == 1);
        let grads = models.iter().map(|m| vec![None; m.params.len()]).collect();
        let halves = match &g.tp_halves {
            Some([a, b]) => models
                .iter()
                .map(|m| {
                    let group = |comm: &Arc<dyn Communicator>| TpGroup {
                        comm: Some(comm.clone()),
                        ..tp.clone()
                    };
                    let half = c.mbs as usize / 2;
                    [m.with_group(group(a), half), m.with_group(group(b), half)]
                })
                .collect(),
            None => Vec::new(),
        };
        let half_pool = if halves.is_empty() {
            None
        } else {
            Some(rayon_pool(
                cfg.threads_per_worker,
                format!("plait-rank-{}.half", g.rank),
            )?)
        };
        Ok(Worker {
            cfg,
            data,
            schedule,
            g,
            models,
            recompute,
            optimizer,
            grads,
            live: HashMap::new(),
            inbox_act: HashMap::new(),
            inbox_grad: HashMap::new(),
            outbox_act: HashMap::new(),
            outbox_grad: HashMap::new(),
            stash: HashMap::new(),
            halves,
            half_pool,
            live_halves: HashMap::new(),
            batch: Vec::new(),
            loss_sum: 0.0,
            recomputed_blocks: 0,
            spans: Vec::new(),
            start,
            position,
        })
    }

    fn set_position(&self, step: u64, at: String) {
        let mut p = self.position.lock().unwrap_or_else(|e| e.into_inner());
        p.step = step;
        p.at = at;
    }

    fn traced(&self) -> bool {
        self.cfg.trace && self.g.coords.dp == 0 && self.g.coords.tp == 0
    }

    /// Loads this step's micro-batches: global sequences `(step−1)·gbs + …`, this data-
    /// parallel rank's contiguous share, split into micro-batches.
    fn load_batch(&mut self, step: u64, sampler: &mut Sampler) {
        let cfg = self.cfg;
        let (mbs, dp) = (cfg.parallel.mbs as usize, cfg.parallel.dp as usize);
        let share = cfg.gbs / dp;
        let base = (step - 1) * cfg.gbs as u64 + (self.g.coords.dp * share) as u64;
        self.batch = (0..cfg.microbatches())
            .map(|mb| {
                let mut inputs = Vec::with_capacity(mbs * cfg.seq);
                let mut targets = Vec::with_capacity(mbs * cfg.seq);
                for i in 0..mbs {
                    let s = sampler.sample(base + (mb * mbs + i) as u64);
                    inputs.extend(s.inputs);
                    targets.extend(s.targets);
                }
                (inputs, targets)
            })
            .collect();
    }

    /// Runs blocks `from..to` (local indices) of chunk `c`, starting from the embedding of
    /// the micro-batch's tokens when `x` is `None`.
    fn blocks(
        &self,
        c: usize,
        mb: u32,
        x: Option<Tensor>,
        from: usize,
        to: usize,
    ) -> Result<Tensor> {
        let model = &self.models[c];
        let mut x = match x {
            Some(x) => x,
            None => model.embed(&self.batch[mb as usize].0)?,
        };
        for b in from..to {
            x = model.block(&x, model.blocks.start + b)?;
        }
        Ok(x)
    }

    fn input_tensor(&self, input: &StageIn) -> Option<Tensor> {
        match input {
            StageIn::Tokens => None,
            StageIn::Hidden(v) => Some(v.as_tensor().clone()),
        }
    }

    fn forward(&mut self, mb: u32, c: u32) -> Result<()> {
        if !self.halves.is_empty() {
            return self.forward_halves(mb, c);
        }
        let ci = c as usize;
        let model = &self.models[ci];
        let input = if model.is_first() {
            StageIn::Tokens
        } else {
            let data = self.inbox_act.remove(&(mb, c)).ok_or_else(|| {
                RuntimeError::Config("forward before its activation was received".into())
            })?;
            StageIn::Hidden(Var::from_vec(data, model.hidden_shape(), &Device::Cpu)?)
        };
        let n = model.blocks.len();
        let x = self.recompute[ci].min(n);
        let first = self.input_tensor(&input);
        let (boundary, hidden) = if x > 0 {
            let a = self.blocks(ci, mb, first, 0, x)?.detach();
            let bv = Var::from_tensor(&a)?;
            let rest = self.blocks(ci, mb, Some(bv.as_tensor().clone()), x, n)?;
            (Some(bv), rest)
        } else {
            (None, self.blocks(ci, mb, first, 0, n)?)
        };
        let model = &self.models[ci];
        let out = if model.is_last() {
            let loss = model.head_loss(&hidden, &self.batch[mb as usize].1)?;
            let value = f64::from(loss.to_scalar::<f32>()?);
            if !value.is_finite() {
                return Err(RuntimeError::Tensor(format!("loss is {value} (diverged)")));
            }
            self.loss_sum += value;
            let scale = 1.0 / (self.cfg.microbatches() * self.g.topology.dp) as f64;
            (loss * scale)?
        } else {
            self.outbox_act
                .insert((mb, c), hidden.flatten_all()?.to_vec1::<f32>()?);
            hidden
        };
        self.live.insert(
            (mb, c),
            Live {
                input,
                boundary,
                out,
                recomputed: None,
            },
        );
        Ok(())
    }

    fn recompute(&mut self, mb: u32, c: u32) -> Result<()> {
        let ci = c as usize;
        let x = self.recompute[ci].min(self.models[ci].blocks.len());
        let Some(live) = self.live.get(&(mb, c)) else {
            return Err(RuntimeError::Config("recompute before its forward".into()));
        };
        if live.boundary.is_none() || x == 0 {
            return Ok(());
        }
        let first = self.input_tensor(&live.input);
        let a = self.blocks(ci, mb, first, 0, x)?;
        self.recomputed_blocks += x as u64;
        if let Some(live) = self.live.get_mut(&(mb, c)) {
            live.recomputed = Some(a);
        }
        Ok(())
    }

    /// Full backward (`hold_weights == false`), or its input half (`hold_weights == true`:
    /// the weight gradients are stashed until the matching `BackwardWeight`).
    fn backward(&mut self, mb: u32, c: u32, hold_weights: bool) -> Result<()> {
        if !self.halves.is_empty() {
            return self.backward_halves(mb, c, hold_weights);
        }
        let ci = c as usize;
        let live = self
            .live
            .remove(&(mb, c))
            .ok_or_else(|| RuntimeError::Config("backward before its forward".into()))?;
        let model = &self.models[ci];
        let root = if model.is_last() {
            live.out.clone()
        } else {
            let data = self.inbox_grad.remove(&(mb, c)).ok_or_else(|| {
                RuntimeError::Config("backward before its output gradient was received".into())
            })?;
            let g = Tensor::from_vec(data, live.out.shape(), &Device::Cpu)?;
            (live.out.mul(&g))?.sum_all()?
        };
        let grads = root.backward()?;
        let mut contrib: Vec<Option<Tensor>> = model
            .params
            .iter()
            .map(|p| grads.get(p.var.as_tensor()).cloned())
            .collect();
        let input_grads = match &live.boundary {
            Some(bv) => {
                let gb = match grads.get(bv.as_tensor()) {
                    Some(g) => g.clone(),
                    None => bv.as_tensor().zeros_like()?,
                };
                let a = live.recomputed.ok_or_else(|| {
                    RuntimeError::Config(
                        "backward of a recomputed chunk before its Recompute".into(),
                    )
                })?;
                let g2 = a.mul(&gb)?.sum_all()?.backward()?;
                for (slot, p) in contrib.iter_mut().zip(&model.params) {
                    if let Some(g) = g2.get(p.var.as_tensor()) {
                        *slot = Some(match slot.take() {
                            Some(prev) => (prev + g)?,
                            None => g.clone(),
                        });
                    }
                }
                g2
            }
            None => grads,
        };
        if let StageIn::Hidden(v) = &live.input {
            let g = match input_grads.get(v.as_tensor()) {
                Some(g) => g.flatten_all()?.to_vec1::<f32>()?,
                None => vec![0.0; v.elem_count()],
            };
            self.outbox_grad.insert((mb, c), g);
        }
        if hold_weights {
            self.stash.insert((mb, c), contrib);
        } else {
            self.accumulate(ci, contrib)?;
        }
        Ok(())
    }

    /// Forward of micro-batch `mb` on chunk `c` as two halves along the batch, each on its
    /// own thread with its own tensor-parallel group: while one half waits in a collective,
    /// the other computes.
    fn forward_halves(&mut self, mb: u32, c: u32) -> Result<()> {
        let ci = c as usize;
        let [m0, m1] = &self.halves[ci];
        let half = m0.mbs;
        let (tokens, targets) = &self.batch[mb as usize];
        let n = tokens.len() / 2;
        let inputs: [Option<Var>; 2] = if m0.is_first() {
            [None, None]
        } else {
            let data = self.inbox_act.remove(&(mb, c)).ok_or_else(|| {
                RuntimeError::Config("forward before its activation was received".into())
            })?;
            let full = Tensor::from_vec(data, self.models[ci].hidden_shape(), &Device::Cpu)?;
            [
                Some(Var::from_tensor(&full.narrow(0, 0, half)?)?),
                Some(Var::from_tensor(&full.narrow(0, half, half)?)?),
            ]
        };
        let run = |m: &StageModel, k: usize, input: &Option<Var>| -> Result<(Tensor, f64)> {
            let mut x = match input {
                Some(v) => v.as_tensor().clone(),
                None => m.embed(&tokens[k * n..(k + 1) * n])?,
            };
            for b in 0..m.blocks.len() {
                x = m.block(&x, m.blocks.start + b)?;
            }
            if m.is_last() {
                let loss = m.head_loss(&x, &targets[k * n..(k + 1) * n])?;
                let value = f64::from(loss.to_scalar::<f32>()?);
                Ok((loss, value))
            } else {
                Ok((x, 0.0))
            }
        };
        let pool = self.half_pool.as_ref();
        let (r0, r1) = std::thread::scope(|s| {
            let h = s.spawn(|| in_pool(pool, || run(m1, 1, &inputs[1])));
            let a = run(m0, 0, &inputs[0]);
            let b = h.join().unwrap_or_else(|p| {
                Err(RuntimeError::Panicked(format!(
                    "half micro-batch: {}",
                    panic_text(&p)
                )))
            });
            (a, b)
        });
        let ((o0, l0), (o1, l1)) = (r0?, r1?);
        let [i0, i1] = inputs;
        let outs = if m0.is_last() {
            let value = 0.5 * (l0 + l1);
            if !value.is_finite() {
                return Err(RuntimeError::Tensor(format!("loss is {value} (diverged)")));
            }
            self.loss_sum += value;
            // Each half's loss is a mean over half the tokens: the micro-batch mean is their
            // average.
            let scale = 0.5 / (self.cfg.microbatches() * self.g.topology.dp) as f64;
            [(o0 * scale)?, (o1 * scale)?]
        } else {
            let full = Tensor::cat(&[&o0, &o1], 0)?;
            self.outbox_act
                .insert((mb, c), full.flatten_all()?.to_vec1::<f32>()?);
            [o0, o1]
        };
        let [out0, out1] = outs;
        self.live_halves.insert(
            (mb, c),
            [
                Half {
                    input: i0,
                    out: out0,
                },
                Half {
                    input: i1,
                    out: out1,
                },
            ],
        );
        Ok(())
    }

    /// Backward of both halves, each on its own thread; weight gradients are summed half 0
    /// first, input gradients joined along the batch.
    fn backward_halves(&mut self, mb: u32, c: u32, hold_weights: bool) -> Result<()> {
        let ci = c as usize;
        let [h0, h1] = self
            .live_halves
            .remove(&(mb, c))
            .ok_or_else(|| RuntimeError::Config("backward before its forward".into()))?;
        let model = &self.models[ci];
        let grads: [Option<Tensor>; 2] = if model.is_last() {
            [None, None]
        } else {
            let data = self.inbox_grad.remove(&(mb, c)).ok_or_else(|| {
                RuntimeError::Config("backward before its output gradient was received".into())
            })?;
            let g = Tensor::from_vec(data, model.hidden_shape(), &Device::Cpu)?;
            let half = model.mbs / 2;
            [Some(g.narrow(0, 0, half)?), Some(g.narrow(0, half, half)?)]
        };
        type HalfGrads = (Vec<Option<Tensor>>, Option<Tensor>);
        let run = |h: &Half, g: &Option<Tensor>| -> Result<HalfGrads> {
            let root = match g {
                Some(g) => h.out.mul(g)?.sum_all()?,
                None => h.out.clone(),
            };
            let store = root.backward()?;
            let params = model
                .params
                .iter()
                .map(|p| store.get(p.var.as_tensor()).cloned())
                .collect();
            let input = h
                .input
                .as_ref()
                .and_then(|v| store.get(v.as_tensor()).cloned());
            Ok((params, input))
        };
        let pool = self.half_pool.as_ref();
        let (r0, r1) = std::thread::scope(|s| {
            let t = s.spawn(|| in_pool(pool, || run(&h1, &grads[1])));
            let a = run(&h0, &grads[0]);
            let b = t.join().unwrap_or_else(|p| {
                Err(RuntimeError::Panicked(format!(
                    "half micro-batch: {}",
                    panic_text(&p)
                )))
            });
            (a, b)
        });
        let ((p0, g0), (p1, g1)) = (r0?, r1?);
        let mut contrib = p0;
        for (slot, g) in contrib.iter_mut().zip(p1) {
            if let Some(g) = g {
                *slot = Some(match slot.take() {
                    Some(prev) => (prev + g)?,
                    None => g,
                });
            }
        }
        if let (Some(a), Some(b)) = (&h0.input, &h1.input) {
            let ga = g0.map_or_else(|| a.as_tensor().zeros_like(), Ok)?;
            let gb = g1.map_or_else(|| b.as_tensor().zeros_like(), Ok)?;
            let full = Tensor::cat(&[&ga, &gb], 0)?;
            self.outbox_grad
                .insert((mb, c), full.flatten_all()?.to_vec1::<f32>()?);
        }
        if hold_weights {
            self.stash.insert((mb, c), contrib);
        } else {
            self.accumulate(ci, contrib)?;
        }
        Ok(())
    }

    fn accumulate(&mut self, c: usize, contrib: Vec<Option<Tensor>>) -> Result<()> {
        for (slot, g) in self.grads[c].iter_mut().zip(contrib) {
            if let Some(g) = g {
                *slot = Some(match slot.take() {
                    Some(prev) => (prev + g)?,
                    None => g,
                });
            }
        }
        Ok(())
    }

    fn neighbours(&self) -> (usize, usize) {
        let p = self.g.topology.pp;
        let r = self.g.coords.pp;
        ((r + 1) % p, (r + p - 1) % p)
    }

    fn execute(&mut self, instr: Instr) -> Result<()> {
        let (mb, c) = (instr.microbatch, instr.chunk);
        let (next, prev) = self.neighbours();
        match instr.op {
            Op::Forward => self.forward(mb, c),
            Op::Recompute => self.recompute(mb, c),
            Op::Backward => self.backward(mb, c, false),
            Op::BackwardInput => self.backward(mb, c, true),
            Op::BackwardWeight => {
                let contrib = self.stash.remove(&(mb, c)).ok_or_else(|| {
                    RuntimeError::Config("weight backward before its input backward".into())
                })?;
                self.accumulate(c as usize, contrib)
            }
            Op::SendActivation => {
                let data = self.outbox_act.remove(&(mb, c)).ok_or_else(|| {
                    RuntimeError::Config("send of an activation that was not computed".into())
                })?;
                Ok(self.g.pp.send(next, Tag::Activation, data)?)
            }
            Op::SendGradient => {
                let data = self.outbox_grad.remove(&(mb, c)).ok_or_else(|| {
                    RuntimeError::Config("send of a gradient that was not computed".into())
                })?;
                Ok(self.g.pp.send(prev, Tag::Gradient, data)?)
            }
            Op::RecvActivation => {
                let data = self.g.pp.recv(prev, Tag::Activation)?;
                self.check_len(&data, "activation")?;
                self.inbox_act.insert((mb, c), data);
                Ok(())
            }
            Op::RecvGradient => {
                let data = self.g.pp.recv(next, Tag::Gradient)?;
                self.check_len(&data, "gradient")?;
                self.inbox_grad.insert((mb, c), data);
                Ok(())
            }
            Op::ReduceGradients => {
                let ci = c as usize;
                self.optimizer
                    .finalize(ci, &self.models[ci], &mut self.grads[ci], &self.g)
            }
            Op::OptimizerStep => self
                .optimizer
                .step(&self.models, &mut self.grads, &self.g)
                .map(|_| ()),
        }
    }

    fn check_len(&self, data: &[f32], what: &str) -> Result<()> {
        let (b, s, h) = self.models[0].hidden_shape();
        if data.len() != b * s * h {
            return Err(RuntimeError::Config(format!(
                "received an {what} of {} elements, expected {b}×{s}×{h}",
                data.len()
            )));
        }
        Ok(())
    }

    fn record(&mut self, instr: Instr, t0: f64, t1: f64) {
        if !self.traced() || matches!(instr.op, Op::RecvActivation | Op::RecvGradient) {
            return;
        }
        let (next, prev) = self.neighbours();
        let stream = match instr.op {
            Op::SendActivation => Stream::Send { to: next as u32 },
            Op::SendGradient => Stream::Send { to: prev as u32 },
            Op::ReduceGradients => Stream::DataParallel,
            _ => Stream::Compute,
        };
        self.spans.push(Span {
            rank: self.g.coords.pp as u32,
            stream,
            instr,
            start_s: t0,
            end_s: t1,
            pred: None,
        });
    }

    /// One training step: the rank's program, then the loss over the world.
    fn step(&mut self, step: u64, sampler: &mut Sampler) -> Result<(f64, f64)> {
        self.load_batch(step, sampler);
        self.loss_sum = 0.0;
        self.optimizer.begin_step();
        for g in self.grads.iter_mut() {
            g.iter_mut().for_each(|x| *x = None);
        }
        let program = &self.schedule.ranks[self.g.coords.pp];
        for (index, &instr) in program.iter().enumerate() {
            self.set_position(step, format!("instruction {index} ({instr})"));
            if let Some(f) = self.cfg.fault {
                if f.rank == self.g.rank && f.step == step && f.instruction == index {
                    if f.panic {
                        panic!("injected failure (test switch)");
                    }
                    return Err(RuntimeError::Injected);
                }
            }
            let t0 = self.start.elapsed().as_secs_f64();
            self.execute(instr)?;
            let t1 = self.start.elapsed().as_secs_f64();
            self.record(instr, t0, t1);
        }
        if !(self.live.is_empty()
            && self.live_halves.is_empty()
            && self.inbox_act.is_empty()
            && self.inbox_grad.is_empty())
        {
            return Err(RuntimeError::Config(
                "the program ended with micro-batches still in flight".into(),
            ));
        }
        self.set_position(step, "loss reduction".into());
        let last = self.g.coords.pp + 1 == self.g.topology.pp && self.g.coords.tp == 0;
        let m = self.cfg.microbatches() * self.g.topology.dp;
        let mut loss = [if last {
            (self.loss_sum / m as f64) as f32
        } else {
            0.0
        }];
        self.g.world.all_reduce(&mut loss, ReduceOp::Sum)?;
        let lr = self.cfg.optim.lr_at(self.optimizer.steps);
        Ok((f64::from(loss[0]), lr))
    }

    fn local_params(&self) -> Result<Vec<(ParamDef, Vec<f32>)>> {
        let mut out = Vec::new();
        for m in &self.models {
            for p in &m.params {
                out.push((p.def.clone(), p.var.flatten_all()?.to_vec1::<f32>()?));
            }
        }
        Ok(out)
    }
}

/// Trains per `cfg` on `data`, calling `on_step` after every step (from the calling
/// thread). Returns when every rank finished, or with the first rank's failure.
pub fn train(
    cfg: &TrainConfig,
    data: &Dataset,
    mut on_step: impl FnMut(&StepLog),
) -> Result<TrainReport> {
    cfg.check(data)?;
    let schedule = cfg.schedule()?;
    let topology = cfg.topology();
    let n = topology.world();
    let (resume_step, manifest) = match (&cfg.checkpoint, cfg.resume) {
        (Some(ck), true) => match checkpoint::latest(&ck.dir)? {
            Some((path, manifest)) => {
                manifest.check_compatible(cfg)?;
                (manifest.step, Some((path, manifest)))
            }
            None => (0, None),
        },
        (Some(ck), false) => {
            checkpoint::refuse_existing(&ck.dir)?;
            (0, None)
        }
        (None, _) => (0, None),
    };
    let end = cfg.stop_after.unwrap_or(cfg.steps).min(cfg.steps);
    let world = World::new(n, cfg.timeout);
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<Event>();
    let failure: Mutex<Option<RuntimeError>> = Mutex::new(None);
    let tied = cfg.model.tied_embeddings;
    let mut logs = Vec::new();
    let mut checkpoints = Vec::new();
    // A rank's failure is recorded before the world is aborted (under the same lock, so
    // the abort's reason is the recorded failure), and any error a rank meets once the
    // world is aborted is a consequence (a bystander's), whatever its type (a collective
    // inside a tensor-parallel op comes back as a candle error): so the first failure is
    // the one reported, once, independently of timing.
    let fail = |failed: RuntimeError| {
        let text = failed.to_string();
        let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(failed);
        }
        world.abort(text);
    };
    let results: Vec<Option<WorkerOut>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (world, tx) = (world.clone(), tx.clone());
                let schedule = &schedule;
                let manifest = manifest.clone();
                let fail = &fail;
                let spawned = std::thread::Builder::new()
                    .name(format!("plait-rank-{rank}"))
                    .stack_size(64 << 20)
                    .spawn_scoped(scope, move || {
                        let position = Arc::new(Mutex::new(Position::default()));
                        let pos2 = position.clone();
                        let run = || -> Result<WorkerOut> {
                            let pool =
                                rayon_pool(cfg.threads_per_worker, format!("plait-rank-{rank}"))?;
                            pool.install(|| {
                                let g =
                                    Groups::new(&world, topology, rank, tied, cfg.sub_pipeline_tp)?;
                                let mut w = Worker::new(cfg, data, schedule, g, start, pos2)?;
                                run_worker(&mut w, resume_step, end, manifest.as_ref(), &tx)?;
                                Ok(WorkerOut {
                                    spans: std::mem::take(&mut w.spans),
                                    recomputed_blocks: w.recomputed_blocks,
                                    params: if cfg.return_weights {
                                        w.local_params()?
                                    } else {
                                        Vec::new()
                                    },
                                })
                            })
                        };
                        let outcome = catch_unwind(AssertUnwindSafe(run));
                        let err = match outcome {
                            Ok(Ok(out)) => return Some(out),
                            Ok(Err(e)) => e,
                            Err(panic) => RuntimeError::Panicked(panic_text(&panic)),
                        };
                        if world.is_aborted()
                            || matches!(err, RuntimeError::Comm(crate::comm::CommError::Aborted(_)))
                        {
                            // Stopped because another rank failed: that rank reports.
                            return None;
                        }
                        let p = position.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        fail(RuntimeError::RankFailed {
                            rank,
                            coords: topology.coords(rank).to_string(),
                            step: p.step,
                            at: if p.at.is_empty() {
                                "start-up".into()
                            } else {
                                p.at
                            },
                            message: err.to_string(),
                        });
                        None
                    });
                if let Err(e) = &spawned {
                    // The ranks already started would wait for this one until the timeout.
                    fail(RuntimeError::RankFailed {
                        rank,
                        coords: topology.coords(rank).to_string(),
                        step: resume_step,
                        at: "start-up".into(),
                        message: format!("cannot start its worker thread: {e}"),
                    });
                }
                spawned
            })
            .collect();
        drop(tx);
        for event in rx {
            match event {
                Event::Step(log) => {
                    on_step(&log);
                    logs.push(log);
                }
                Event::Checkpoint(path) => checkpoints.push(path),
            }
        }
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().ok().flatten(),
                Err(_) => None,
            })
            .collect()
    });
    if let Some(e) = failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        return Err(e);
    }
    if results.iter().any(Option::is_none) {
        return Err(RuntimeError::Config(
            world
                .abort_reason()
                .unwrap_or_else(|| "a worker thread could not start".into()),
        ));
    }
    let mut spans = Vec::new();
    let mut weights = BTreeMap::new();
    let locals: Vec<WorkerOut> = results.into_iter().flatten().collect();
    for out in &locals {
        spans.extend(out.spans.iter().copied());
    }
    spans.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    if cfg.return_weights {
        weights = gather_weights(&locals, topology);
    }
    Ok(TrainReport {
        schedule,
        logs,
        resumed_from: resume_step,
        checkpoints,
        spans,
        weights,
        recomputed_blocks: locals.iter().map(|o| o.recomputed_blocks).sum(),
    })
}

/// Makes candle compute each operation with `threads` threads (1: a worker is one core, as
/// `plait profile` measures), unless the user chose otherwise through the environment.
///
/// candle 0.11 has no per-call or per-pool setting for this; it reads two variables:
/// * `CANDLE_NUM_THREADS`, once, when it starts the process-wide pool of its element-wise
///   operations, whose calls serialise on one lock: with one worker per core, concurrent
///   workers would wait for each other (measured here: a 2-worker pipeline ran 3.5× slower);
/// * `RAYON_NUM_THREADS`, on every GEMM, as the number of parts to split it into (default:
///   the cores). Split in a worker's one-thread pool, the parts run one after the other
///   and cost a third of the throughput (measured here: 1,810 instead of 2,700 tokens/s
///   for tiny-gpt on one worker).
///
/// Both are set here, once, at the start of the program, before any thread exists:
/// changing the environment while other threads may read it is a data race (C's `getenv`),
/// and candle would not see a later change of the first anyway. The library never changes
/// the environment itself. Work that wants every core (the planner's search in
/// the CLI's `plan_auto`) runs in an explicit pool, not in rayon's global one, which
/// `RAYON_NUM_THREADS` also sizes.
///
/// Call it first thing in `main`, or in a command's entry point before it starts threads.
pub fn init_compute_threads(threads: usize) {
    for var in ["RAYON_NUM_THREADS", "CANDLE_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            std::env::set_var(var, threads.max(1).to_string());
        }
    }
}

/// A pool of `threads` compute threads named `name.i`.
fn rayon_pool(threads: usize, name: String) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(move |i| format!("{name}.{i}"))
        .build()
        .map_err(|e| RuntimeError::Config(format!("cannot start worker threads: {e}")))
}

/// Runs `f` in `pool` (or on this thread without one).
fn in_pool<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

fn run_worker(
    w: &mut Worker,
    resume_step: u64,
    end: u64,
    manifest: Option<&(PathBuf, Manifest)>,
    tx: &mpsc::Sender<Event>,
) -> Result<()> {
    if let Some((path, _)) = manifest {
        w.set_position(resume_step, "loading the checkpoint".into());
        checkpoint::load_rank(path, w.g.rank, &w.models, &mut w.optimizer, resume_step)?;
    }
    let cfg = w.cfg;
    let mut sampler = Sampler::new(w.data, cfg.seed, cfg.seq);
    let tokens = (cfg.gbs * cfg.seq) as u64;
    for step in resume_step + 1..=end {
        let t0 = Instant::now();
        let (loss, lr) = w.step(step, &mut sampler)?;
        let dt = t0.elapsed().as_secs_f64();
        if w.g.rank == 0 {
            let _ = tx.send(Event::Step(StepLog {
                step,
                loss,
                grad_norm: w.optimizer_last_norm(),
                lr,
                tokens,
                step_time_s: dt,
                tokens_per_s: tokens as f64 / dt,
            }));
        }
        if let Some(ck) = &cfg.checkpoint {
            if (ck.every > 0 && step % ck.every == 0) || step == end {
                w.set_position(step, "writing the checkpoint".into());
                let params = w.local_params()?;
                if let Some(path) = checkpoint::save(ck, cfg, step, &w.g, &params, &w.optimizer)? {
                    let _ = tx.send(Event::Checkpoint(path));
                }
            }
        }
    }
    Ok(())
}

impl Worker<'_> {
    fn optimizer_last_norm(&self) -> f64 {
        self.optimizer.last_grad_norm
    }
}

/// Assembles the full parameters from the shards of data-parallel rank 0.
fn gather_weights(locals: &[WorkerOut], t: Topology) -> BTreeMap<String, Vec<f32>> {
    type Shards = (ParamDef, Vec<Option<Vec<f32>>>);
    let mut shards: BTreeMap<String, Shards> = BTreeMap::new();
    for (rank, out) in locals.iter().enumerate() {
        let c = t.coords(rank);
        if c.dp != 0 {
            continue;
        }
        for (def, values) in &out.params {
            let e = shards
                .entry(def.name.clone())
                .or_insert_with(|| (def.clone(), vec![None; t.tp]));
            if e.1[c.tp].is_none() {
                e.1[c.tp] = Some(values.clone());
            }
        }
    }
    shards
        .into_iter()
        .map(|(name, (def, parts))| {
            let parts: Vec<Vec<f32>> = parts.into_iter().map(Option::unwrap_or_default).collect();
            let full = unshard(&def, &parts);
            (name, full)
        })
        .collect()
}

/// The full parameter from its tensor-parallel shards (inverse of `ParamDef::shard`).
pub fn unshard(def: &ParamDef, parts: &[Vec<f32>]) -> Vec<f32> {
    let n: usize = def.shape.iter().product();
    match def.split {
        Split::Replicated => parts[0].clone(),
        Split::Rows => {
            let mut v: Vec<f32> = parts.concat();
            v.truncate(n);
            v
        }
        Split::Cols => {
            let (rows, cols) = (def.shape[0], def.shape[1]);
            let local = cols / parts.len();
            let mut v = Vec::with_capacity(n);
            for r in 0..rows {
                for p in parts {
                    v.extend_from_slice(&p[r * local..(r + 1) * local]);
                }
            }
            v
        }
    }
}

/// Parses an explicit plan `dp2,tp2,pp2` (also `vp2`, `mbs2`, `zero1`, `sp`,
/// `recompute=full`, `schedule=gpipe`) against `workers`. Each item at most once.
pub fn parse_plan(text: &str, workers: usize) -> Result<ParallelConfig> {
    let mut c = ParallelConfig::default();
    let mut dp = None;
    let mut seen: Vec<&str> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            RuntimeError::Config(format!(
                "--plan: cannot read `{part}` (expected auto, or items like dp2,tp2,pp2,vp2,mbs1,zero1,sp,recompute=full,schedule=1f1b)"
            ))
        };
        let key = match part.find(|ch: char| ch.is_ascii_digit() || ch == '=') {
            Some(i) => &part[..i],
            None => part,
        };
        if seen.contains(&key) {
            return Err(RuntimeError::Config(format!(
                "--plan {text}: `{key}` is given twice"
            )));
        }
        seen.push(key);
        if part == "sp" {
            c.sp = true;
            continue;
        }
        if let Some(v) = part.strip_prefix("recompute=") {
            c.recompute = v
                .parse()
                .map_err(|e: String| RuntimeError::Config(format!("--plan: {e}")))?;
            continue;
        }
        if let Some(v) = part.strip_prefix("schedule=") {
            c.schedule = v
                .parse()
                .map_err(|e: String| RuntimeError::Config(format!("--plan: {e}")))?;
            continue;
        }
        let split = part.find(|ch: char| ch.is_ascii_digit()).ok_or_else(bad)?;
        let (key, num) = part.split_at(split);
        let value: u64 = num.parse().map_err(|_| bad())?;
        if value == 0 {
            return Err(RuntimeError::Config(format!(
                "--plan: `{part}` must be at least 1"
            )));
        }
        match key {
            "dp" => dp = Some(value),
            "tp" => c.tp = value,
            "pp" => c.pp = value,
            "vp" => c.vp = value,
            "mbs" => c.mbs = value,
            "zero" => c.zero = value.min(255) as u8,
            _ => return Err(bad()),
        }
    }
    // Degrees multiply without wrapping: `tp9223372036854775809,dp2` ((2⁶³ + 1) · 2 ≡ 2
    // in u64) must not pass for 2 workers.
    let mp = c.tp.checked_mul(c.pp);
    c.dp = match (dp, mp) {
        (Some(d), _) => d,
        (None, Some(mp)) if (workers as u64).is_multiple_of(mp) => workers as u64 / mp,
        (None, _) => 0,
    };
    if c.vp > 1 && c.schedule == Kind::OneFOneB {
        c.schedule = Kind::Interleaved;
    }
    let product = mp.and_then(|mp| mp.checked_mul(c.dp));
    if product != Some(workers as u64) {
        return Err(RuntimeError::Config(format!(
            "--plan {text}: dp×tp×pp = {}×{}×{} = {} but --workers is {workers}",
            if c.dp == 0 {
                "?".to_string()
            } else {
                c.dp.to_string()
            },
            c.tp,
            c.pp,
            product.map_or_else(|| "more than 2⁶⁴".to_string(), |p| p.to_string())
        )));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_must_match_the_workers() {
        let c = parse_plan("dp2,tp2,pp2,zero1,sp", 8).unwrap();
        assert_eq!((c.dp, c.tp, c.pp, c.zero, c.sp), (2, 2, 2, 1, true));
        let c = parse_plan("pp2,vp2", 2).unwrap();
        assert_eq!(c.schedule, Kind::Interleaved);
        assert_eq!(parse_plan("tp2", 4).unwrap().dp, 2);
        let e = parse_plan("dp2,tp2", 3).unwrap_err().to_string();
        assert!(e.contains("--workers is 3"), "{e}");
        assert!(parse_plan("xx2", 1).is_err());
        assert!(parse_plan("pp2,schedule=gpipe", 2).unwrap().schedule == Kind::Gpipe);
    }

    #[test]
    fn plans_refuse_repeated_items_and_overflowing_degrees() {
        for plan in [
            "dp1,dp2",
            "tp2,pp1,tp2",
            "sp,sp",
            "recompute=full,recompute=none",
        ] {
            let e = parse_plan(plan, 2).unwrap_err().to_string();
            assert!(e.contains("given twice"), "{plan}: {e}");
        }
        // (2⁶³ + 1) · 2 wraps to 2 in u64: it must not pass for 2 workers.
        let e = parse_plan("tp9223372036854775809,dp2", 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 2⁶⁴"), "{e}");
        let e = parse_plan("tp4294967296,pp4294967296", 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--workers is 4"), "{e}");
    }

    #[test]
    fn unshard_inverts_shard() {
        for split in [Split::Rows, Split::Cols, Split::Replicated] {
            let def = ParamDef {
                name: "x".into(),
                shape: vec![6, 4],
                split,
                init: crate::model::Init::Normal(1.0),
            };
            let full = def.full_values(3);
            let parts: Vec<Vec<f32>> = (0..2).map(|r| def.shard(&full, 2, r)).collect();
            assert_eq!(unshard(&def, &parts), full);
        }
    }
}
