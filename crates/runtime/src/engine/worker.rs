//! One rank's worker: its stage models, optimizer and communicators, and the execution of
//! its pipeline rank's instructions one by one.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::{Tensor, Var};
use plait_schedule::{Instr, Op, Schedule, Span, Stream};

use crate::checkpoint::{self, Manifest};
use crate::comm::{Communicator, ReduceOp, Tag};
use crate::config::TrainConfig;
use crate::data::{Dataset, Sampler};
use crate::error::{Invariant, RuntimeError};
use crate::groups::Groups;
use crate::model::{ParamDef, StageModel};
use crate::optim::Optimizer;
use crate::tp::TpGroup;

type Result<T> = std::result::Result<T, RuntimeError>;

use super::*;

/// Where a rank is, for failure messages.
#[derive(Debug, Clone, Default)]
pub(crate) struct Position {
    pub(crate) step: u64,
    pub(crate) at: String,
}

/// The input of a chunk for one micro-batch.
pub(crate) enum StageIn {
    Tokens,
    Hidden(Var),
}

/// What a forward keeps for its backward.
pub(crate) struct Live {
    pub(crate) input: StageIn,
    /// Input of the kept segment when the first blocks are recomputed.
    pub(crate) boundary: Option<Var>,
    /// Output of the kept segment (hidden states, or the scaled loss on the last stage).
    pub(crate) out: Tensor,
    /// The recomputed first segment's output (graph attached).
    pub(crate) recomputed: Option<Tensor>,
}

/// What a half micro-batch's forward keeps (sub-pipelined tensor parallelism).
pub(crate) struct Half {
    pub(crate) input: Option<Var>,
    pub(crate) out: Tensor,
}

/// The neighbour of a chunk along the pipeline: the virtual stage after it (or before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// The chunk is the pipeline's last (or first) stage.
    End,
    /// The neighbouring stage is this rank's chunk: handed over without a message (a V's
    /// turn on its last rank; the IR has no send or receive for it).
    Local(u32),
    /// The neighbouring stage is on another pipeline rank (its place in the pp group).
    Remote(usize),
}

/// A chunk's two neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLinks {
    pub(crate) next: Link,
    pub(crate) prev: Link,
}

/// The neighbours of each of rank `r`'s `v` chunks among `p` ranks, from the placement.
fn chunk_links(placement: plait_schedule::Placement, r: u64, v: u64, p: u64) -> Vec<ChunkLinks> {
    let stages = p * v;
    let link = |stage: Option<u64>| match stage.filter(|&s| s < stages) {
        None => Link::End,
        Some(s) => match placement.locate(s, p) {
            (rank, chunk) if rank == r => Link::Local(chunk as u32),
            (rank, _) => Link::Remote(rank as usize),
        },
    };
    (0..v)
        .map(|c| {
            let j = placement.virtual_stage(r, c, p);
            ChunkLinks {
                next: link(Some(j + 1)),
                prev: link(j.checked_sub(1)),
            }
        })
        .collect()
}

/// One worker.
pub(crate) struct Worker<'a> {
    pub(crate) cfg: &'a TrainConfig,
    pub(crate) data: &'a Dataset,
    pub(crate) schedule: &'a Schedule,
    pub(crate) g: Groups,
    pub(crate) models: Vec<StageModel>,
    /// Per chunk: fully recomputed blocks (0 when the rank does not recompute).
    pub(crate) recompute: Vec<usize>,
    pub(crate) optimizer: Optimizer,
    pub(crate) grads: Vec<Vec<Option<Tensor>>>,
    pub(crate) live: HashMap<(u32, u32), Live>,
    pub(crate) inbox_act: HashMap<(u32, u32), Vec<f32>>,
    pub(crate) inbox_grad: HashMap<(u32, u32), Vec<f32>>,
    pub(crate) outbox_act: HashMap<(u32, u32), Vec<f32>>,
    pub(crate) outbox_grad: HashMap<(u32, u32), Vec<f32>>,
    pub(crate) stash: HashMap<(u32, u32), Vec<Option<Tensor>>>,
    /// Per chunk: where its activations go and its gradients come from (`next`), and
    /// where its input comes from and its input gradient goes (`prev`).
    pub(crate) links: Vec<ChunkLinks>,
    /// Sub-pipelined tensor parallelism: per chunk, the model run by each half.
    pub(crate) halves: Vec<[StageModel; 2]>,
    /// The compute threads of the second half (sub-pipelined tensor parallelism): its own
    /// pool, so that both halves compute with `threads_per_worker` threads each.
    pub(crate) half_pool: Option<rayon::ThreadPool>,
    pub(crate) live_halves: HashMap<(u32, u32), [Half; 2]>,
    /// This step's micro-batches of this data-parallel rank: (inputs, targets) flattened.
    pub(crate) batch: Vec<(Vec<u32>, Vec<u32>)>,
    pub(crate) loss_sum: f64,
    pub(crate) recomputed_blocks: u64,
    pub(crate) spans: Vec<Span>,
    pub(crate) start: Instant,
    pub(crate) position: Arc<Mutex<Position>>,
}

/// What a worker hands back.
pub(crate) struct WorkerOut {
    pub(crate) spans: Vec<Span>,
    pub(crate) recomputed_blocks: u64,
    /// (definition, local values) of every parameter, when asked for.
    pub(crate) params: Vec<(ParamDef, Vec<f32>)>,
}

pub(crate) enum Event {
    Step(StepLog),
    Checkpoint(PathBuf),
}

impl<'a> Worker<'a> {
    pub(crate) fn new(
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
        let device = cfg.backend.device(g.rank);
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
            let j = map
                .placement
                .virtual_stage(r as u64, chunk as u64, p as u64) as usize;
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
                &device,
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
            links: chunk_links(map.placement, r as u64, v as u64, p as u64),
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

    pub(crate) fn set_position(&self, step: u64, at: String) {
        let mut p = self.position.lock().unwrap_or_else(|e| e.into_inner());
        p.step = step;
        p.at = at;
    }

    pub(crate) fn traced(&self) -> bool {
        self.cfg.trace && self.g.coords.dp == 0 && self.g.coords.tp == 0
    }

    /// Loads this step's micro-batches: global sequences `(step−1)·gbs + …`, this data-
    /// parallel rank's contiguous share, split into micro-batches.
    pub(crate) fn load_batch(&mut self, step: u64, sampler: &mut Sampler) {
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
    pub(crate) fn blocks(
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

    pub(crate) fn input_tensor(&self, input: &StageIn) -> Option<Tensor> {
        match input {
            StageIn::Tokens => None,
            StageIn::Hidden(v) => Some(v.as_tensor().clone()),
        }
    }

    pub(crate) fn forward(&mut self, mb: u32, c: u32) -> Result<()> {
        if !self.halves.is_empty() {
            return self.forward_halves(mb, c);
        }
        let ci = c as usize;
        let model = &self.models[ci];
        let input = if model.is_first() {
            StageIn::Tokens
        } else {
            let data = self
                .inbox_act
                .remove(&(mb, c))
                .ok_or(RuntimeError::Invariant(Invariant::ForwardBeforeActivation))?;
            StageIn::Hidden(Var::from_vec(data, model.hidden_shape(), model.device())?)
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
            self.emit_activation(mb, c, hidden.flatten_all()?.to_vec1::<f32>()?);
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

    pub(crate) fn recompute(&mut self, mb: u32, c: u32) -> Result<()> {
        let ci = c as usize;
        let x = self.recompute[ci].min(self.models[ci].blocks.len());
        let Some(live) = self.live.get(&(mb, c)) else {
            return Err(RuntimeError::Invariant(Invariant::RecomputeBeforeForward));
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
    pub(crate) fn backward(&mut self, mb: u32, c: u32, hold_weights: bool) -> Result<()> {
        if !self.halves.is_empty() {
            return self.backward_halves(mb, c, hold_weights);
        }
        let ci = c as usize;
        let live = self
            .live
            .remove(&(mb, c))
            .ok_or(RuntimeError::Invariant(Invariant::BackwardBeforeForward))?;
        let model = &self.models[ci];
        let root = if model.is_last() {
            live.out.clone()
        } else {
            let data = self
                .inbox_grad
                .remove(&(mb, c))
                .ok_or(RuntimeError::Invariant(Invariant::BackwardBeforeGradient))?;
            let g = Tensor::from_vec(data, live.out.shape(), live.out.device())?;
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
                let a = live
                    .recomputed
                    .ok_or(RuntimeError::Invariant(Invariant::BackwardBeforeRecompute))?;
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
            self.emit_gradient(mb, c, g);
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
    pub(crate) fn forward_halves(&mut self, mb: u32, c: u32) -> Result<()> {
        let ci = c as usize;
        let [m0, m1] = &self.halves[ci];
        let half = m0.mbs;
        let (tokens, targets) = &self.batch[mb as usize];
        let n = tokens.len() / 2;
        let inputs: [Option<Var>; 2] = if m0.is_first() {
            [None, None]
        } else {
            let data = self
                .inbox_act
                .remove(&(mb, c))
                .ok_or(RuntimeError::Invariant(Invariant::ForwardBeforeActivation))?;
            let full = Tensor::from_vec(
                data,
                self.models[ci].hidden_shape(),
                self.models[ci].device(),
            )?;
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
            self.emit_activation(mb, c, full.flatten_all()?.to_vec1::<f32>()?);
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
    pub(crate) fn backward_halves(&mut self, mb: u32, c: u32, hold_weights: bool) -> Result<()> {
        let ci = c as usize;
        let [h0, h1] = self
            .live_halves
            .remove(&(mb, c))
            .ok_or(RuntimeError::Invariant(Invariant::BackwardBeforeForward))?;
        let model = &self.models[ci];
        let grads: [Option<Tensor>; 2] = if model.is_last() {
            [None, None]
        } else {
            let data = self
                .inbox_grad
                .remove(&(mb, c))
                .ok_or(RuntimeError::Invariant(Invariant::BackwardBeforeGradient))?;
            let g = Tensor::from_vec(data, model.hidden_shape(), model.device())?;
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
            self.emit_gradient(mb, c, full.flatten_all()?.to_vec1::<f32>()?);
        }
        if hold_weights {
            self.stash.insert((mb, c), contrib);
        } else {
            self.accumulate(ci, contrib)?;
        }
        Ok(())
    }

    pub(crate) fn accumulate(&mut self, c: usize, contrib: Vec<Option<Tensor>>) -> Result<()> {
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

    /// Chunk `c`'s output activation: for the next stage's rank (sent by the IR's
    /// `SendActivation`), or straight into this rank's next chunk when it holds that stage.
    fn emit_activation(&mut self, mb: u32, c: u32, data: Vec<f32>) {
        match self.links[c as usize].next {
            Link::Local(next) => self.inbox_act.insert((mb, next), data),
            _ => self.outbox_act.insert((mb, c), data),
        };
    }

    /// Chunk `c`'s input gradient, the same way towards the previous stage.
    fn emit_gradient(&mut self, mb: u32, c: u32, data: Vec<f32>) {
        match self.links[c as usize].prev {
            Link::Local(prev) => self.inbox_grad.insert((mb, prev), data),
            _ => self.outbox_grad.insert((mb, c), data),
        };
    }

    /// The pipeline rank on `link` of a message the IR sends or receives.
    fn peer(&self, link: Link, what: &'static str) -> Result<usize> {
        match link {
            Link::Remote(rank) => Ok(rank),
            _ => Err(Invariant::MessageWithoutPeer { what }.into()),
        }
    }

    pub(crate) fn execute(&mut self, instr: Instr) -> Result<()> {
        let (mb, c) = (instr.microbatch, instr.chunk);
        let links = self.links[c as usize];
        match instr.op {
            Op::Forward => self.forward(mb, c),
            Op::Recompute => self.recompute(mb, c),
            Op::Backward => self.backward(mb, c, false),
            Op::BackwardInput => self.backward(mb, c, true),
            Op::BackwardWeight => {
                let contrib = self.stash.remove(&(mb, c)).ok_or(RuntimeError::Invariant(
                    Invariant::WeightBeforeInputBackward,
                ))?;
                self.accumulate(c as usize, contrib)
            }
            Op::SendActivation => {
                let data = self
                    .outbox_act
                    .remove(&(mb, c))
                    .ok_or(RuntimeError::Invariant(Invariant::SendOfMissingActivation))?;
                let to = self.peer(links.next, "activation sent")?;
                Ok(self.g.pp.send(to, Tag::Activation, data)?)
            }
            Op::SendGradient => {
                let data = self
                    .outbox_grad
                    .remove(&(mb, c))
                    .ok_or(RuntimeError::Invariant(Invariant::SendOfMissingGradient))?;
                let to = self.peer(links.prev, "gradient sent")?;
                Ok(self.g.pp.send(to, Tag::Gradient, data)?)
            }
            Op::RecvActivation => {
                let from = self.peer(links.prev, "activation received")?;
                let data = self.g.pp.recv(from, Tag::Activation)?;
                self.check_len(&data, "activation")?;
                self.inbox_act.insert((mb, c), data);
                Ok(())
            }
            Op::RecvGradient => {
                let from = self.peer(links.next, "gradient received")?;
                let data = self.g.pp.recv(from, Tag::Gradient)?;
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

    pub(crate) fn check_len(&self, data: &[f32], what: &'static str) -> Result<()> {
        let (b, s, h) = self.models[0].hidden_shape();
        if data.len() != b * s * h {
            return Err(Invariant::MessageLength {
                what,
                got: data.len(),
                expected: (b, s, h),
            }
            .into());
        }
        Ok(())
    }

    pub(crate) fn record(&mut self, instr: Instr, t0: f64, t1: f64) {
        if !self.traced() || matches!(instr.op, Op::RecvActivation | Op::RecvGradient) {
            return;
        }
        let links = self.links[instr.chunk as usize];
        let to = |link: Link| match link {
            Link::Remote(rank) => rank as u32,
            _ => self.g.coords.pp as u32,
        };
        let stream = match instr.op {
            Op::SendActivation => Stream::Send { to: to(links.next) },
            Op::SendGradient => Stream::Send { to: to(links.prev) },
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
    pub(crate) fn step(&mut self, step: u64, sampler: &mut Sampler) -> Result<(f64, f64)> {
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
            return Err(RuntimeError::Invariant(Invariant::InFlightAtEnd));
        }
        self.set_position(step, "loss reduction".into());
        // The rank holding the pipeline's last stage (the last rank; rank 0 in a V).
        let last = self.models.iter().any(StageModel::is_last) && self.g.coords.tp == 0;
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

    pub(crate) fn local_params(&self) -> Result<Vec<(ParamDef, Vec<f32>)>> {
        let mut out = Vec::new();
        for m in &self.models {
            for p in &m.params {
                out.push((p.def.clone(), p.var.flatten_all()?.to_vec1::<f32>()?));
            }
        }
        Ok(out)
    }
}

pub(crate) fn run_worker(
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
    pub(crate) fn optimizer_last_norm(&self) -> f64 {
        self.optimizer.last_grad_norm
    }
}
