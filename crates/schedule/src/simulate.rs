//! The discrete-event simulator: times a schedule's instructions on per-rank streams and
//! tracks each rank's memory.
//!
//! Streams per rank: one compute stream (forward, backward, recompute, optimizer) that runs
//! the program in order; one outbound stream per link to another rank, where sends queue in
//! issue order (buffered: the sender does not wait); one data-parallel stream, where each
//! chunk's gradient reduction runs bucket by bucket as soon as a bucket's gradients exist.
//! A receive holds the compute stream until its message has arrived. The simulator knows
//! durations and bytes only through [`Costs`]; it does not know models or GPUs.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::ir::GradReduce;
use crate::ir::{Instr, Op, Schedule};
use crate::validate::{destination, queue, wire};

/// One micro-batch through one chunk of one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkCosts {
    pub forward_s: f64,
    /// Input-gradient part of the backward (the whole backward is input + weight).
    pub backward_input_s: f64,
    pub backward_weight_s: f64,
    pub recompute_s: f64,
    /// Transfer of this chunk's output to the next virtual stage.
    pub send_activation_s: f64,
    /// Transfer of this chunk's input gradient to the previous virtual stage.
    pub send_gradient_s: f64,
    /// Saved for the backward: allocated when the forward starts, freed when the backward
    /// (its input part) ends.
    pub activation_bytes: f64,
    /// Of `activation_bytes`, what a split backward keeps until its weight part ends.
    pub weight_grad_bytes: f64,
    /// Rebuilt by a recompute; live until the backward (input part) ends.
    pub recompute_bytes: f64,
    /// Working memory of the backward (gradients, workspaces) while it runs.
    pub backward_bytes: f64,
    /// Data-parallel reduction of this chunk's gradients (all buckets).
    pub reduce_s: f64,
    /// Buckets the reduction is split into; each starts once its gradients exist.
    pub reduce_buckets: u32,
}

impl ChunkCosts {
    pub fn backward_s(&self) -> f64 {
        self.backward_input_s + self.backward_weight_s
    }
}

/// One pipeline rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankCosts {
    /// Per chunk, indexed by chunk.
    pub chunks: Vec<ChunkCosts>,
    /// Weights, gradients, optimizer states and reserve: held for the whole iteration.
    pub static_bytes: f64,
    pub optimizer_s: f64,
}

/// Durations and bytes of every instruction kind, per rank and chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub ranks: Vec<RankCosts>,
}

impl Costs {
    /// Identical ranks: `forward_s`, `backward_s` (full backward) and `weight_s` (its weight
    /// part) are one micro-batch's times on one rank over all its `v` chunks; one unit of
    /// activation memory per micro-batch; free communication.
    pub fn uniform(p: u32, v: u32, forward_s: f64, backward_s: f64, weight_s: f64) -> Costs {
        let vf = f64::from(v);
        let chunk = ChunkCosts {
            forward_s: forward_s / vf,
            backward_input_s: (backward_s - weight_s) / vf,
            backward_weight_s: weight_s / vf,
            activation_bytes: 1.0 / vf,
            reduce_buckets: 1,
            ..ChunkCosts::default()
        };
        Costs {
            ranks: vec![
                RankCosts {
                    chunks: vec![chunk; v as usize],
                    ..RankCosts::default()
                };
                p as usize
            ],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("costs describe {costs} ranks with {chunks:?} chunks but the schedule has {stages} ranks of {expected} chunks")]
    Shape {
        costs: usize,
        chunks: Vec<usize>,
        stages: u32,
        expected: u32,
    },
    #[error("the schedule deadlocks: {0} (run the validator for details)")]
    Deadlock(String),
    #[error("the schedule is malformed: {0} (run the validator for details)")]
    Malformed(String),
}

/// Where a span ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Compute,
    /// The link to rank `to`.
    Send {
        to: u32,
    },
    DataParallel,
}

/// One instruction's execution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Span {
    pub rank: u32,
    pub stream: Stream,
    pub instr: Instr,
    pub start_s: f64,
    pub end_s: f64,
    /// The span whose end decided this span's start (for the critical path).
    #[serde(skip)]
    pub pred: Option<u32>,
}

/// Per-rank results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankReport {
    /// Time the compute stream was busy (forward, backward, recompute, optimizer).
    pub busy_s: f64,
    pub idle_s: f64,
    pub peak_memory_bytes: f64,
    /// Largest number of micro-batches forwarded but not yet backwarded (input part), in
    /// units of whole micro-batches: chunk-micro-batches divided by `v`.
    pub peak_inflight_microbatches: f64,
    /// `(time, bytes)` after each change, in time order.
    pub memory_timeline: Vec<(f64, f64)>,
}

/// What a simulation returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulation {
    pub makespan_s: f64,
    /// Mean over ranks of the share of the makespan their compute stream was idle.
    pub bubble_fraction: f64,
    /// Makespan minus the busiest rank's compute time.
    pub bubble_s: f64,
    pub ranks: Vec<RankReport>,
    pub spans: Vec<Span>,
    /// Indices into `spans`, from the first span of the critical path to the last.
    pub critical_path: Vec<u32>,
}

/// Mutable state of one rank during the simulation.
struct RankState {
    pc: usize,
    compute_free: f64,
    /// The span that set `compute_free`.
    gate: Option<u32>,
    dp_free: f64,
    dp_gate: Option<u32>,
    memory: f64,
    peak: f64,
    inflight: u32,
    peak_inflight: u32,
    busy: f64,
    timeline: Vec<(f64, f64)>,
    /// Last compute span and, per chunk, its last weight-gradient span.
    last_compute: Option<u32>,
    last_weight: Vec<Option<u32>>,
    /// Bytes a recompute rebuilt, per (micro-batch, chunk), until its backward frees them.
    rebuilt: Vec<f64>,
    done: bool,
}

/// The checks the simulator needs to index safely (the validator does the full job).
fn check_shape(s: &Schedule) -> Result<(), SimError> {
    let (p, v, m) = (s.stages, s.chunks, s.microbatches);
    if p == 0 || v == 0 || m == 0 || s.ranks.len() != p as usize {
        return Err(SimError::Malformed(format!(
            "{} rank programs for {p} stages of {v} chunks and {m} micro-batches",
            s.ranks.len()
        )));
    }
    let last = u64::from(p) * u64::from(v) - 1;
    for (r, prog) in s.ranks.iter().enumerate() {
        for (i, instr) in prog.iter().enumerate() {
            let j = s
                .placement
                .virtual_stage(r as u64, instr.chunk.into(), p.into());
            let bad = instr.chunk >= v
                || instr.microbatch >= m
                || match instr.op {
                    Op::RecvActivation | Op::SendGradient => j == 0,
                    Op::RecvGradient | Op::SendActivation => j == last,
                    _ => false,
                };
            if bad {
                return Err(SimError::Malformed(format!(
                    "rank {r}, instruction {i} ({instr}) is out of range"
                )));
            }
        }
    }
    Ok(())
}

/// Simulates `s` with `costs`. The schedule should have passed [`crate::validate()`]; a
/// deadlock is reported as an error rather than looping.
pub fn simulate(s: &Schedule, costs: &Costs) -> Result<Simulation, SimError> {
    let p = s.stages;
    if costs.ranks.len() != p as usize
        || costs
            .ranks
            .iter()
            .any(|r| r.chunks.len() != s.chunks as usize)
    {
        return Err(SimError::Shape {
            costs: costs.ranks.len(),
            chunks: costs.ranks.iter().map(|r| r.chunks.len()).collect(),
            stages: p,
            expected: s.chunks,
        });
    }
    check_shape(s)?;
    let mut spans: Vec<Span> = Vec::with_capacity(s.len());
    // In-order message queues per (sender, receiver, kind): arrival time and transfer span.
    let mut queues: Vec<VecDeque<(f64, u32)>> = vec![VecDeque::new(); p as usize * 4];
    // Physical link out of each sender to each of its neighbours (one link when p ≤ 2,
    // where the next and the previous rank are the same): when it is free and the span
    // that occupies it.
    let mut link_free: Vec<(f64, Option<u32>)> = vec![(0.0, None); p as usize * 2];
    let mut waiting: Vec<Option<u32>> = vec![None; queues.len()];
    let mut states: Vec<RankState> = (0..p)
        .map(|r| {
            let static_bytes = costs.ranks[r as usize].static_bytes;
            RankState {
                pc: 0,
                compute_free: 0.0,
                gate: None,
                dp_free: 0.0,
                dp_gate: None,
                memory: static_bytes,
                peak: static_bytes,
                inflight: 0,
                peak_inflight: 0,
                busy: 0.0,
                timeline: vec![(0.0, static_bytes)],
                rebuilt: vec![0.0; s.microbatches as usize * s.chunks as usize],
                last_compute: None,
                last_weight: vec![None; s.chunks as usize],
                done: false,
            }
        })
        .collect();
    let mut runnable: Vec<u32> = (0..p).rev().collect();

    while let Some(r) = runnable.pop() {
        let prog = &s.ranks[r as usize];
        let rc = &costs.ranks[r as usize];
        let st = &mut states[r as usize];
        while let Some(&instr) = prog.get(st.pc) {
            let cc = rc
                .chunks
                .get(instr.chunk as usize)
                .copied()
                .unwrap_or_default();
            match instr.op {
                Op::RecvActivation | Op::RecvGradient => {
                    let gradient = instr.op == Op::RecvGradient;
                    let j = s.virtual_stage(r, instr.chunk);
                    let from = s.locate(if gradient { j + 1 } else { j - 1 }).0;
                    let q = queue(from, r, gradient, p);
                    let Some((arrival, span)) = queues[q].pop_front() else {
                        waiting[q] = Some(r);
                        break;
                    };
                    if arrival > st.compute_free {
                        st.compute_free = arrival;
                        st.gate = Some(span);
                    }
                }
                Op::SendActivation | Op::SendGradient => {
                    let gradient = instr.op == Op::SendGradient;
                    let (to, _) = destination(s, r, instr);
                    let dur = if gradient {
                        cc.send_gradient_s
                    } else {
                        cc.send_activation_s
                    };
                    let (free, link_gate) = link_free[wire(r, to, p)];
                    let (start, pred) = if free > st.compute_free {
                        (free, link_gate)
                    } else {
                        (st.compute_free, st.gate)
                    };
                    let id = spans.len() as u32;
                    spans.push(Span {
                        rank: r,
                        stream: Stream::Send { to },
                        instr,
                        start_s: start,
                        end_s: start + dur,
                        pred,
                    });
                    link_free[wire(r, to, p)] = (start + dur, Some(id));
                    let q = queue(r, to, gradient, p);
                    queues[q].push_back((start + dur, id));
                    if let Some(w) = waiting[q].take() {
                        runnable.push(w);
                    }
                }
                Op::ReduceGradients => {
                    let c = instr.chunk as usize;
                    let issue = st.compute_free;
                    // Launched right after the chunk's last weight-gradient pass, a bucket
                    // reduces as soon as that pass has produced its share of the gradients.
                    let overlapped = s.grad_reduce == GradReduce::Overlapped
                        && st.last_weight[c].is_some()
                        && st.last_weight[c] == st.last_compute;
                    let buckets = cc.reduce_buckets.max(1);
                    let (ws, wd) = match st.last_weight[c] {
                        Some(w) if overlapped => {
                            let sp = &spans[w as usize];
                            (sp.start_s, sp.end_s - sp.start_s)
                        }
                        _ => (issue, 0.0),
                    };
                    let per_bucket = cc.reduce_s / f64::from(buckets);
                    let mut t = st.dp_free;
                    let mut start = f64::INFINITY;
                    let mut pred = st.dp_gate;
                    for k in 0..buckets {
                        let ready = ws + wd * f64::from(k + 1) / f64::from(buckets);
                        if ready >= t {
                            t = ready;
                            pred = if overlapped {
                                st.last_weight[c]
                            } else {
                                st.gate
                            };
                        }
                        start = start.min(t);
                        t += per_bucket;
                    }
                    let id = spans.len() as u32;
                    spans.push(Span {
                        rank: r,
                        stream: Stream::DataParallel,
                        instr,
                        start_s: start,
                        end_s: t,
                        pred,
                    });
                    st.dp_free = t;
                    st.dp_gate = Some(id);
                }
                op => {
                    let dur = match op {
                        Op::Forward => cc.forward_s,
                        Op::Backward => cc.backward_s(),
                        Op::BackwardInput => cc.backward_input_s,
                        Op::BackwardWeight => cc.backward_weight_s,
                        Op::Recompute => cc.recompute_s,
                        Op::OptimizerStep => rc.optimizer_s,
                        _ => unreachable!("communication handled above"),
                    };
                    let (start, pred) = if op == Op::OptimizerStep && st.dp_free > st.compute_free {
                        (st.dp_free, st.dp_gate)
                    } else {
                        (st.compute_free, st.gate)
                    };
                    let end = start + dur;
                    // Memory: allocations at the start, releases at the end; a backward frees
                    // the rebuilt activations only if a recompute built them.
                    let unit = instr.microbatch as usize * s.chunks as usize + instr.chunk as usize;
                    let rebuilt = match op {
                        Op::Recompute => {
                            st.rebuilt[unit] = cc.recompute_bytes;
                            0.0
                        }
                        Op::Backward | Op::BackwardInput => std::mem::take(&mut st.rebuilt[unit]),
                        _ => 0.0,
                    };
                    let (alloc, release) = match op {
                        Op::Forward => (cc.activation_bytes, 0.0),
                        Op::Recompute => (cc.recompute_bytes, 0.0),
                        Op::Backward => (
                            cc.backward_bytes,
                            cc.backward_bytes + cc.activation_bytes + rebuilt,
                        ),
                        Op::BackwardInput => (
                            cc.backward_bytes,
                            cc.backward_bytes + cc.activation_bytes + rebuilt
                                - cc.weight_grad_bytes,
                        ),
                        Op::BackwardWeight => (0.0, cc.weight_grad_bytes),
                        _ => (0.0, 0.0),
                    };
                    if op == Op::Forward {
                        st.inflight += 1;
                        st.peak_inflight = st.peak_inflight.max(st.inflight);
                    }
                    if alloc != 0.0 {
                        st.memory += alloc;
                        st.peak = st.peak.max(st.memory);
                        st.timeline.push((start, st.memory));
                    }
                    if release != 0.0 {
                        st.memory -= release;
                        st.timeline.push((end, st.memory));
                    }
                    if op.is_input_backward() {
                        st.inflight -= 1;
                    }
                    let id = spans.len() as u32;
                    spans.push(Span {
                        rank: r,
                        stream: Stream::Compute,
                        instr,
                        start_s: start,
                        end_s: end,
                        pred,
                    });
                    st.busy += dur;
                    st.compute_free = end;
                    st.gate = Some(id);
                    st.last_compute = Some(id);
                    if op.is_weight_backward() {
                        st.last_weight[instr.chunk as usize] = Some(id);
                    }
                }
            }
            st.pc += 1;
        }
        if st.pc == prog.len() {
            st.done = true;
        }
    }

    if let Some(r) = states.iter().position(|st| !st.done) {
        let pc = states[r].pc;
        return Err(SimError::Deadlock(format!(
            "rank {r} waits forever at instruction {pc} ({})",
            s.ranks[r][pc]
        )));
    }

    let (last, makespan_s) = spans
        .iter()
        .enumerate()
        .fold((None, 0.0f64), |(best, t), (i, sp)| {
            if sp.end_s > t {
                (Some(i as u32), sp.end_s)
            } else {
                (best, t)
            }
        });
    let mut critical_path = Vec::new();
    let mut at = last;
    while let Some(i) = at {
        critical_path.push(i);
        at = spans[i as usize].pred;
    }
    critical_path.reverse();

    let v = f64::from(s.chunks);
    let ranks: Vec<RankReport> = states
        .into_iter()
        .map(|st| RankReport {
            busy_s: st.busy,
            idle_s: makespan_s - st.busy,
            peak_memory_bytes: st.peak,
            peak_inflight_microbatches: f64::from(st.peak_inflight) / v,
            memory_timeline: st.timeline,
        })
        .collect();
    let busiest = ranks.iter().map(|r| r.busy_s).fold(0.0, f64::max);
    let bubble_fraction = if makespan_s > 0.0 {
        ranks.iter().map(|r| r.idle_s / makespan_s).sum::<f64>() / ranks.len() as f64
    } else {
        0.0
    };
    Ok(Simulation {
        makespan_s,
        bubble_fraction,
        bubble_s: makespan_s - busiest,
        ranks,
        spans,
        critical_path,
    })
}
