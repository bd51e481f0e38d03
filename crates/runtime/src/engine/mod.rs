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
//! * `Send*` are buffered and never block; `Recv*` block (bounded by the timeout). Each
//!   chunk's neighbours come from the stage map's placement; where the next stage is the
//!   rank's own chunk (a V's turn) the IR has no message and the output is handed over in
//!   memory.
//! * `ReduceGradients` — reduces the chunk's gradient buckets over dp (blocking).
//! * `OptimizerStep` — remaining reductions, tied embeddings, clipping, AdamW.
//!
//! Failure: an error or panic on any rank aborts the world, every blocked call returns,
//! and [`train`] reports the first failing rank with the instruction it was executing.
//!
//! `worker` is one rank's execution; this file launches the workers, collects their
//! reports and assembles the trained weights. The run's configuration, memory check and
//! communicator groups live beside the engine (`crate::config`, `crate::memory`,
//! `crate::groups`), so that checkpoints and the optimizer need nothing of it.

mod worker;

pub(crate) use worker::*;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use plait_schedule::{Schedule, Span};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self};
use crate::comm::World;
use crate::config::TrainConfig;
use crate::data::Dataset;
use crate::error::RuntimeError;
use crate::groups::Groups;
use crate::model::{ParamDef, Split};
use crate::topology::Topology;

type Result<T> = std::result::Result<T, RuntimeError>;

/// One step's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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
#[non_exhaustive]
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
    let point = match &cfg.checkpoint {
        Some(ck) => checkpoint::resume_point(&ck.dir, cfg.resume, None)?,
        None => None,
    };
    let (resume_step, manifest) = match point {
        Some(p) => {
            p.manifest.check_compatible(cfg)?;
            (p.step, Some((p.path, p.manifest)))
        }
        None => (0, None),
    };
    let end = cfg.stop_after.unwrap_or(cfg.steps).min(cfg.steps);
    let world = World::new(n, cfg.timeout);
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<Event>();
    let failure: Mutex<Option<RuntimeError>> = Mutex::new(None);
    let tied = cfg.model.tied_embeddings;
    // A V places the pipeline's last stage beside its first, on pipeline rank 0.
    let ends_together = {
        let (map, c) = (cfg.stage_map(), &cfg.parallel);
        map.placement.locate(c.pp * c.vp - 1, c.pp).0 == 0
    };
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
                    .stack_size(RANK_STACK_BYTES)
                    .spawn_scoped(scope, move || {
                        let position = Arc::new(Mutex::new(Position::default()));
                        let pos2 = position.clone();
                        let run = || -> Result<WorkerOut> {
                            let pool =
                                rayon_pool(cfg.threads_per_worker, format!("plait-rank-{rank}"))?;
                            pool.install(|| {
                                let g = Groups::new(
                                    &world,
                                    topology,
                                    rank,
                                    tied,
                                    ends_together,
                                    cfg.sub_pipeline_tp,
                                )?;
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
        return Err(RuntimeError::Stopped(
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

/// Stack of every thread that runs a rank's model: candle's backward recurses once per
/// operation of the graph, so the depth grows with the blocks per rank (rayon's default
/// 2 MiB overflowed from ~700 blocks; rank threads always had this much).
pub(crate) const RANK_STACK_BYTES: usize = 64 << 20;

/// A pool of `threads` compute threads named `name.i`, with the rank threads' stack (the
/// model's forward and backward run on them).
pub(crate) fn rayon_pool(threads: usize, name: String) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .stack_size(RANK_STACK_BYTES)
        .thread_name(move |i| format!("{name}.{i}"))
        .build()
        .map_err(|error| RuntimeError::PoolStart {
            what: "worker threads",
            error,
        })
}

/// Runs `f` in `pool` (or on this thread without one).
pub(crate) fn in_pool<R: Send>(
    pool: Option<&rayon::ThreadPool>,
    f: impl FnOnce() -> R + Send,
) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

pub(crate) fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Assembles the full parameters from the shards of data-parallel rank 0.
pub(crate) fn gather_weights(locals: &[WorkerOut], t: Topology) -> BTreeMap<String, Vec<f32>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Init;

    #[test]
    fn unshard_inverts_shard() {
        for split in [Split::Rows, Split::Cols, Split::Replicated] {
            let def = ParamDef {
                name: "x".into(),
                shape: vec![6, 4],
                split,
                init: Init::Normal(1.0),
            };
            let full = def.full_values(3);
            let parts: Vec<Vec<f32>> = (0..2).map(|r| def.shard(&full, 2, r)).collect();
            assert_eq!(unshard(&def, &parts), full);
        }
    }
}
