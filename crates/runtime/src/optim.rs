//! The optimizer side of a step: gradient reduction in buckets over the data-parallel group
//! (all-reduce, or reduce-scatter under ZeRO-1), the tied-embedding and sequence-parallel
//! reductions, global-norm clipping, AdamW and the learning-rate schedule.
//!
//! Gradients and optimizer states live in flat `f32` buckets per pipeline chunk. Under
//! ZeRO-1 (Rajbhandari et al. 2020) each data-parallel rank owns `1/dp` of every bucket:
//! it receives the reduced gradients of its part (reduce-scatter), keeps Adam's moments for
//! it only, updates it and all-gathers the updated weights.

use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::comm::ReduceOp;
use crate::error::{CheckpointError, RuntimeError};
use crate::groups::Groups;
use crate::model::StageModel;

type Result<T> = std::result::Result<T, RuntimeError>;

/// AdamW and schedule settings. Defaults follow nanoGPT's small character-level recipe
/// (Karpathy, `config/train_shakespeare_char.py`): peak 1e-3, floor 1e-4, β₂ = 0.99,
/// weight decay 0.1, clipping at 1.0; β₁ = 0.9 and ε = 1e-8 are PyTorch's AdamW defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    pub lr: f64,
    pub min_lr: f64,
    /// Linear warm-up steps from 0 to `lr`.
    pub warmup_steps: u64,
    /// Step at which the cosine decay reaches `min_lr` (the run's length).
    pub decay_steps: u64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Global gradient-norm clipping threshold (0 disables).
    pub clip: f64,
}

impl OptimConfig {
    /// The defaults for a run of `steps` steps: warm-up over the first 10 % (at most 100,
    /// nanoGPT's warm-up), cosine decay over the run.
    pub fn for_steps(steps: u64) -> OptimConfig {
        OptimConfig {
            lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: (steps / 10).min(100),
            decay_steps: steps.max(1),
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
            clip: 1.0,
        }
    }

    /// Learning rate of step `step` (1-based): linear warm-up, then cosine to `min_lr`.
    pub fn lr_at(&self, step: u64) -> f64 {
        if step <= self.warmup_steps && self.warmup_steps > 0 {
            return self.lr * step as f64 / self.warmup_steps as f64;
        }
        if step >= self.decay_steps {
            return self.min_lr;
        }
        let span = (self.decay_steps - self.warmup_steps).max(1) as f64;
        let progress = (step - self.warmup_steps) as f64 / span;
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + (self.lr - self.min_lr) * cosine
    }
}

/// One parameter's place in a bucket.
#[derive(Debug, Clone)]
struct Entry {
    /// Index into the chunk's parameters.
    param: usize,
    offset: usize,
    len: usize,
    decays: bool,
    /// Counted in the global gradient norm on this rank (each parameter element is
    /// counted once over the world).
    in_norm: bool,
}

/// A flat group of one chunk's parameters, reduced and updated together.
#[derive(Debug, Clone)]
pub struct Bucket {
    chunk: usize,
    entries: Vec<Entry>,
    /// Length rounded up to a multiple of dp under ZeRO-1.
    padded: usize,
    /// The part this rank updates (all of it without ZeRO).
    owned: Range<usize>,
    /// Holds only the tied embedding, reduced over the embedding group too.
    tied: bool,
    /// Reduced gradient of the owned part (after `finalize`).
    grad: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

/// Per-rank optimizer: buckets, moments and the step count.
pub struct Optimizer {
    pub config: OptimConfig,
    pub buckets: Vec<Bucket>,
    /// Completed optimizer steps (Adam's t).
    pub steps: u64,
    /// Global gradient norm of the last step (before clipping).
    pub last_grad_norm: f64,
    zero: bool,
    finalized: Vec<bool>,
}

/// Statistics of one optimizer step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    pub grad_norm: f64,
    pub lr: f64,
}

impl Optimizer {
    /// Buckets of at most `bucket_params` elements over each chunk's parameters in order;
    /// the tied embedding (pp > 1) gets a bucket of its own so that the first and last
    /// pipeline ranks own the same slice of it.
    pub fn new(
        models: &[StageModel],
        g: &Groups,
        config: OptimConfig,
        bucket_params: usize,
        zero: bool,
    ) -> Optimizer {
        let dp = g.dp.size();
        let dp_rank = g.coords.dp;
        let zero = zero && dp > 1;
        let mut buckets = Vec::new();
        for (c, model) in models.iter().enumerate() {
            let mut open: Vec<Entry> = Vec::new();
            let mut open_len = 0;
            let close = |entries: Vec<Entry>, len: usize, tied: bool, buckets: &mut Vec<Bucket>| {
                if entries.is_empty() {
                    return;
                }
                let padded = if zero { len.div_ceil(dp) * dp } else { len };
                let owned = if zero {
                    let part = padded / dp;
                    dp_rank * part..(dp_rank + 1) * part
                } else {
                    0..len
                };
                let n = owned.len();
                buckets.push(Bucket {
                    chunk: c,
                    entries,

                    padded,
                    owned,
                    tied,
                    grad: vec![0.0; n],
                    m: vec![0.0; n],
                    v: vec![0.0; n],
                });
            };
            for (i, p) in model.params.iter().enumerate() {
                let len = p.var.elem_count();
                let tied = g.tied_pipeline && p.def.name == "embedding.tokens.weight";
                let in_norm =
                    (p.def.is_sharded() || g.coords.tp == 0) && !(tied && model.stage != 0);
                let entry = Entry {
                    param: i,
                    offset: 0,
                    len,
                    decays: p.def.decays(),
                    in_norm,
                };
                if tied {
                    close(vec![entry], len, true, &mut buckets);
                    continue;
                }
                if open_len > 0 && open_len + len > bucket_params {
                    close(std::mem::take(&mut open), open_len, false, &mut buckets);
                    open_len = 0;
                }
                open.push(Entry {
                    offset: open_len,
                    ..entry
                });
                open_len += len;
            }
            close(open, open_len, false, &mut buckets);
        }
        Optimizer {
            config,
            buckets,
            steps: 0,
            last_grad_norm: 0.0,
            zero,
            finalized: vec![false; models.len()],
        }
    }

    /// Starts a new step: every chunk's gradients are to be reduced again.
    pub fn begin_step(&mut self) {
        self.finalized.iter_mut().for_each(|f| *f = false);
    }

    /// Reduces chunk `c`'s accumulated gradients `grads[param]`: the sequence-parallel
    /// partial sums of replicated parameters over tp, then each bucket over dp.
    pub fn finalize(
        &mut self,
        c: usize,
        model: &StageModel,
        grads: &mut [Option<Tensor>],
        g: &Groups,
    ) -> Result<()> {
        if self.finalized[c] {
            return Ok(());
        }
        self.finalized[c] = true;
        if let (true, Some(tp)) = (model.tp.sp, &g.tp) {
            // Norm weights, biases after row-parallel layers and positions see only this
            // rank's part of the sequence: sum their gradients over the group (Megatron-LM
            // all-reduces "sequence_parallel" parameters the same way).
            let replicated: Vec<usize> = (0..model.params.len())
                .filter(|&i| !model.params[i].def.is_sharded())
                .collect();
            let mut flat = Vec::new();
            for &i in &replicated {
                flat.extend(grad_values(&grads[i], model.params[i].var.elem_count())?);
            }
            tp.all_reduce(&mut flat, ReduceOp::Sum)?;
            let mut at = 0;
            for &i in &replicated {
                let var = &model.params[i].var;
                let n = var.elem_count();
                grads[i] = Some(Tensor::from_slice(
                    &flat[at..at + n],
                    var.shape(),
                    var.device(),
                )?);
                at += n;
            }
        }
        let dp = g.dp.size();
        for b in self.buckets.iter_mut().filter(|b| b.chunk == c) {
            let mut flat = vec![0.0f32; b.padded];
            for e in &b.entries {
                let values = grad_values(&grads[e.param], e.len)?;
                flat[e.offset..e.offset + e.len].copy_from_slice(&values);
            }
            b.grad = if dp == 1 {
                flat
            } else if self.zero {
                g.dp.reduce_scatter(&flat)?
            } else {
                g.dp.all_reduce(&mut flat, ReduceOp::Sum)?;
                flat
            };
            b.grad.truncate(b.owned.len());
        }
        Ok(())
    }

    /// Clips and applies AdamW to every parameter of `models` (one per chunk) with the
    /// gradients accumulated in `grads[chunk][param]`.
    pub fn step(
        &mut self,
        models: &[StageModel],
        grads: &mut [Vec<Option<Tensor>>],
        g: &Groups,
    ) -> Result<StepStats> {
        for c in 0..models.len() {
            self.finalize(c, &models[c], &mut grads[c], g)?;
        }
        if let Some(emb) = &g.embedding {
            for b in self.buckets.iter_mut().filter(|b| b.tied) {
                emb.all_reduce(&mut b.grad, ReduceOp::Sum)?;
            }
        } else if g.tied_local {
            // The first and last chunks' copies, both here: each gets the sum.
            let mut tied = self.buckets.iter_mut().filter(|b| b.tied);
            if let (Some(a), Some(b)) = (tied.next(), tied.next()) {
                for (x, y) in a.grad.iter_mut().zip(b.grad.iter_mut()) {
                    let sum = *x + *y;
                    (*x, *y) = (sum, sum);
                }
            }
        }
        // Global norm: every element once over the world (owned part under ZeRO, data-
        // parallel rank 0 otherwise; tensor-parallel rank 0 for replicated parameters).
        let counts = self.zero || g.coords.dp == 0;
        let mut sq = 0.0f64;
        if counts {
            for b in &self.buckets {
                for e in b.entries.iter().filter(|e| e.in_norm) {
                    let r = intersect(e.offset..e.offset + e.len, &b.owned);
                    for i in r {
                        let x = f64::from(b.grad[i - b.owned.start]);
                        sq += x * x;
                    }
                }
            }
        }
        let mut total = [sq as f32];
        g.world.all_reduce(&mut total, ReduceOp::Sum)?;
        let grad_norm = f64::from(total[0]).sqrt();
        self.last_grad_norm = grad_norm;
        let cfg = self.config;
        // Megatron-LM's clip_grad_norm: scale by max_norm / (norm + 1e-6) when above it.
        let scale = if cfg.clip > 0.0 && grad_norm > cfg.clip {
            cfg.clip / (grad_norm + 1e-6)
        } else {
            1.0
        };
        self.steps += 1;
        let t = self.steps;
        let lr = cfg.lr_at(t);
        let bc1 = 1.0 - cfg.beta1.powi(t as i32);
        let bc2 = 1.0 - cfg.beta2.powi(t as i32);
        for b in &mut self.buckets {
            let model = &models[b.chunk];
            let mut flat = vec![0.0f32; b.padded];
            for e in &b.entries {
                let values = model.params[e.param].var.flatten_all()?.to_vec1::<f32>()?;
                flat[e.offset..e.offset + e.len].copy_from_slice(&values);
            }
            for e in &b.entries {
                for i in intersect(e.offset..e.offset + e.len, &b.owned) {
                    let k = i - b.owned.start;
                    let grad = f64::from(b.grad[k]) * scale;
                    let mut p = f64::from(flat[i]);
                    // torch.optim.AdamW: decoupled decay, then the bias-corrected update.
                    if e.decays {
                        p *= 1.0 - lr * cfg.weight_decay;
                    }
                    let m = cfg.beta1 * f64::from(b.m[k]) + (1.0 - cfg.beta1) * grad;
                    let v = cfg.beta2 * f64::from(b.v[k]) + (1.0 - cfg.beta2) * grad * grad;
                    b.m[k] = m as f32;
                    b.v[k] = v as f32;
                    let denom = (v / bc2).sqrt() + cfg.eps;
                    p -= lr / bc1 * m / denom;
                    flat[i] = p as f32;
                }
            }
            let full = if self.zero {
                g.dp.all_gather(&flat[b.owned.clone()])?
            } else {
                flat
            };
            for e in &b.entries {
                let var = &model.params[e.param].var;
                let t = Tensor::from_slice(
                    &full[e.offset..e.offset + e.len],
                    var.shape(),
                    var.device(),
                )?;
                var.set(&t)?;
            }
        }
        Ok(StepStats { grad_norm, lr })
    }

    /// Adam moments by bucket, for checkpoints: `(m, v)` of the owned parts.
    pub fn moments(&self) -> Vec<(&[f32], &[f32])> {
        self.buckets.iter().map(|b| (&b.m[..], &b.v[..])).collect()
    }

    /// Restores moments saved by [`Optimizer::moments`] and the step count.
    pub fn restore(&mut self, moments: Vec<(Vec<f32>, Vec<f32>)>, steps: u64) -> Result<()> {
        if moments.len() != self.buckets.len() {
            return Err(CheckpointError::Buckets {
                saved: moments.len(),
                expected: self.buckets.len(),
            }
            .into());
        }
        for (i, (b, (m, v))) in self.buckets.iter_mut().zip(moments).enumerate() {
            if m.len() != b.m.len() || v.len() != b.v.len() {
                return Err(CheckpointError::BucketSize {
                    bucket: i,
                    saved: m.len(),
                    expected: b.m.len(),
                }
                .into());
            }
            b.m = m;
            b.v = v;
        }
        self.steps = steps;
        Ok(())
    }
}

fn intersect(a: Range<usize>, b: &Range<usize>) -> Range<usize> {
    a.start.max(b.start)..a.end.min(b.end).max(a.start.max(b.start))
}

/// A gradient's values, or zeros for a parameter that received none.
fn grad_values(g: &Option<Tensor>, len: usize) -> Result<Vec<f32>> {
    match g {
        Some(t) => Ok(t.flatten_all()?.to_vec1::<f32>()?),
        None => Ok(vec![0.0; len]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_the_floor() {
        let c = OptimConfig::for_steps(300);
        assert_eq!(c.warmup_steps, 30);
        assert!((c.lr_at(15) - 5e-4).abs() < 1e-12);
        assert!((c.lr_at(30) - 1e-3).abs() < 1e-12);
        assert!(c.lr_at(100) < 1e-3 && c.lr_at(100) > c.lr_at(200));
        assert!((c.lr_at(300) - 1e-4).abs() < 1e-12);
    }

    #[test]
    fn intersection_is_empty_when_disjoint() {
        assert_eq!(intersect(0..5, &(3..8)), 3..5);
        assert!(intersect(0..2, &(3..8)).is_empty());
    }
}
