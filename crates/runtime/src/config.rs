//! What a run is: `TrainConfig` (model, plan, batch, data order, checkpoints, faults to
//! inject), its checks, the schedule it executes, and the plan syntax `dp2,tp2,pp2,…`.

use std::path::PathBuf;
use std::time::Duration;

use plait_schedule::{generate, validate, Schedule};
use plait_spec::{Degree, ModelSpec, ParallelConfig, Recompute, StageMap, TrainSpec};
use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::data::Dataset;
use crate::error::{PlanMismatch, ResumeError, RuntimeError, Unsupported};
use crate::model::check_model;
use crate::optim::OptimConfig;
use crate::topology::Topology;

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

/// Where and how often to checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    /// Every this many steps (and always at the run's last step); 0: only at the end.
    pub every: u64,
    /// Complete checkpoints kept: the one just written and the newest older ones (older
    /// steps beyond are deleted); at least 1.
    pub keep: usize,
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
    /// The device the ranks compute on (`crate::backend`; the CPU).
    pub backend: Backend,
}

impl TrainConfig {
    /// The activation memory this run needs at least, in bytes over all workers: every worker's
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
    pub fn activation_bytes(&self) -> f64 {
        let c = &self.parallel;
        let seq2 = (self.seq as f64).powi(2);
        let chunks = [c.dp, c.tp, c.pp, c.vp]
            .iter()
            .map(|&x| x as f64)
            .product::<f64>();
        let masks = chunks * seq2 * 4.0;
        let blocks = self.stage_map().chunk_blocks.into_iter().max().unwrap_or(0);
        masks + c.dp as f64 * crate::memory::attention_bytes(&self.model, self.seq, c.mbs, blocks)
    }

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
            backend: Backend::Cpu,
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

    /// Checks everything that can be checked before a thread starts (blocks per rank at
    /// most [`MAX_BLOCKS_PER_RANK`]).
    pub fn check(&self, data: &Dataset) -> Result<()> {
        let c = &self.parallel;
        let unsupported = |u: Unsupported| Err(RuntimeError::Unsupported(u));
        let mismatch = |m: PlanMismatch| Err(RuntimeError::PlanMismatch(m));
        if self.seq == 0 || self.gbs == 0 || self.steps == 0 {
            return Err(RuntimeError::NotPositive {
                what: "`seq`, `gbs` and `steps`",
            });
        }
        if let Some(u) = unsupported_knob(c) {
            return unsupported(u);
        }
        let train = self.train_spec();
        c.validate(&self.model, &train, c.gpus())
            .map_err(RuntimeError::Spec)?;
        let per = c.mbs as usize * c.dp as usize;
        if !self.gbs.is_multiple_of(per) {
            return mismatch(PlanMismatch::Batch {
                gbs: self.gbs,
                mbs: c.mbs,
                dp: c.dp,
            });
        }
        if c.sp && c.tp > 1 && !self.seq.is_multiple_of(c.tp as usize) {
            return mismatch(PlanMismatch::Sequence {
                seq: self.seq,
                tp: c.tp,
            });
        }
        let map = self.stage_map();
        map.validate(self.model.layers, c)
            .map_err(RuntimeError::Spec)?;
        // candle's backward recurses through the rank's whole graph: a bound on the blocks
        // one rank runs keeps it within the rank threads' stack.
        let per_rank = map.chunk_blocks.iter().max().copied().unwrap_or(0) * c.vp;
        if per_rank > MAX_BLOCKS_PER_RANK {
            return mismatch(PlanMismatch::BlocksPerRank {
                model: self.model.name.clone(),
                blocks: per_rank,
                max: MAX_BLOCKS_PER_RANK,
            });
        }
        check_model(&self.model, c.tp as usize, self.seq)?;
        crate::memory::check_memory(&self.model, self.seq, self.activation_bytes(), c.dp)?;
        data.check(self.seq)?;
        if self.threads_per_worker == 0 {
            return Err(RuntimeError::NotPositive {
                what: "threads per worker",
            });
        }
        if self.sub_pipeline_tp {
            if c.tp < 2 || !c.mbs.is_multiple_of(2) {
                return mismatch(PlanMismatch::SubPipelineTp {
                    tp: c.tp,
                    mbs: c.mbs,
                });
            }
            if self.stage_map().recompute_blocks.iter().any(|&x| x > 0) {
                return unsupported(Unsupported::SubPipelineTpWithRecompute);
            }
        }
        if self.resume && self.checkpoint.is_none() {
            return Err(RuntimeError::Resume(ResumeError::NoDirectory));
        }
        Ok(())
    }

    /// The schedule every pipeline rank executes.
    pub fn schedule(&self) -> Result<Schedule> {
        let spec = plait_spec::schedule_spec(&self.parallel, &self.train_spec(), &self.stage_map())
            .map_err(RuntimeError::ScheduleSpec)?;
        let s = generate(&spec).map_err(RuntimeError::Generate)?;
        validate(&s).map_err(RuntimeError::InvalidSchedule)?;
        Ok(s)
    }
}

/// Parses an explicit plan `dp2,tp2,pp2` (also `vp2`, `mbs2`, `zero1`, `sp`,
/// `recompute=full`, `schedule=gpipe`) against `workers`. Each item at most once.
pub fn parse_plan(text: &str, workers: usize) -> Result<ParallelConfig> {
    let (mut c, dp) = plait_spec::parse_config_items(text).map_err(|reason| {
        RuntimeError::PlanMismatch(PlanMismatch::Syntax {
            plan: text.to_string(),
            reason,
        })
    })?;
    // Degrees multiply without wrapping: `tp9223372036854775809,dp2` ((2⁶³ + 1) · 2 ≡ 2
    // in u64) must not pass for 2 workers.
    let mp = c.tp.checked_mul(c.pp);
    c.dp = match (dp, mp) {
        (Some(d), _) => d,
        (None, Some(mp)) if (workers as u64).is_multiple_of(mp) => workers as u64 / mp,
        (None, _) => 0,
    };
    let product = mp.and_then(|mp| mp.checked_mul(c.dp));
    if product != Some(workers as u64) {
        return Err(RuntimeError::PlanMismatch(PlanMismatch::Workers {
            plan: text.to_string(),
            dp: (c.dp != 0).then_some(c.dp),
            tp: c.tp,
            pp: c.pp,
            product,
            workers,
        }));
    }
    Ok(c.normalised())
}

/// Most transformer blocks one rank may run: 8,000 blocks of a tiny model train on the
/// 64 MiB stack of a rank's threads (a debug build; 2 MiB overflowed at 800).
pub const MAX_BLOCKS_PER_RANK: u64 = 8192;

/// The parallel degrees the runtime runs; any other degree (`plait_spec::Degree::ALL`,
/// including one declared after this list was written) is refused above 1.
pub const RUNTIME_DEGREES: [Degree; 4] = [Degree::Dp, Degree::Tp, Degree::Pp, Degree::Vp];

/// The first knob of `c` the runtime does not implement, or `None`: the one place its
/// capabilities are listed (`RunConfig::check` refuses with it, the planner's auto plan
/// keeps to configurations without one).
pub fn unsupported_knob(c: &ParallelConfig) -> Option<Unsupported> {
    if let Some(degree) = c.degrees_outside(&RUNTIME_DEGREES).next() {
        Some(Unsupported::Degree {
            degree,
            size: c.degree(degree),
            runs: &RUNTIME_DEGREES,
        })
    } else if c.zero > 1 {
        Some(Unsupported::ZeroStage { stage: c.zero })
    } else if c.dp_shard() != c.dp {
        Some(Unsupported::HybridSharding {
            shard: c.dp_shard(),
            dp: c.dp,
        })
    } else if c.recompute == Recompute::Selective {
        Some(Unsupported::SelectiveRecompute)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plait_spec::Schedule as Kind;

    #[test]
    fn degrees_the_runtime_does_not_run_are_refused_by_name() {
        // Every degree outside RUNTIME_DEGREES, whenever it was declared, is refused above 1
        // with its own name and the degrees the runtime runs.
        for &d in plait_spec::Degree::ALL {
            let mut c = ParallelConfig::default();
            *c.degree_mut(d) = 2;
            match unsupported_knob(&c) {
                Some(u) if !RUNTIME_DEGREES.contains(&d) => {
                    assert_eq!(
                        u.to_string(),
                        format!(
                            "{0} = 2 is not run by the runtime, which runs dp, tp, pp, vp; use {0} = 1",
                            d.name()
                        )
                    );
                }
                None if RUNTIME_DEGREES.contains(&d) => {}
                other => panic!("{d:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn plans_parse_and_must_match_the_workers() {
        let c = parse_plan("dp2,tp2,pp2,zero1,sp", 8).unwrap();
        assert_eq!((c.dp, c.tp, c.pp, c.zero, c.sp), (2, 2, 2, 1, true));
        let c = parse_plan("pp2,vp2", 2).unwrap();
        assert_eq!(c.schedule, Kind::Interleaved);
        assert_eq!(parse_plan("tp2", 4).unwrap().dp, 2);
        let e = parse_plan("dp2,tp2", 3).unwrap_err();
        assert!(
            matches!(
                &e,
                RuntimeError::PlanMismatch(PlanMismatch::Workers {
                    dp: Some(2),
                    tp: 2,
                    pp: 1,
                    product: Some(4),
                    workers: 3,
                    ..
                })
            ),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("`workers` is 3"), "{e}");
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
        assert!(e.contains("`workers` is 4"), "{e}");
    }
}
