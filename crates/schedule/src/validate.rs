//! The validator: proves a schedule complete, dependency-correct and deadlock-free, or names
//! the first offending instruction.
//!
//! Semantics it checks against (the simulator and the runtime share them): sends are
//! non-blocking and buffered; a receive blocks its rank until the matching send was issued;
//! each (sender, receiver, activation|gradient) link delivers in order, so the k-th send on a
//! link is received by the k-th receive, and the two must name the same micro-batch and the
//! adjacent virtual stages.

use std::collections::VecDeque;
use std::fmt;

use crate::ir::{Instr, Op, Schedule};

/// Why a schedule is not valid. `rank`/`index`/`instr` locate the offending instruction
/// when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub rank: Option<u32>,
    pub index: Option<usize>,
    pub instr: Option<Instr>,
    pub problem: String,
}

impl ValidationError {
    fn at(rank: u32, index: usize, instr: Instr, problem: impl Into<String>) -> Self {
        ValidationError {
            rank: Some(rank),
            index: Some(index),
            instr: Some(instr),
            problem: problem.into(),
        }
    }

    fn whole(problem: impl Into<String>) -> Self {
        ValidationError {
            rank: None,
            index: None,
            instr: None,
            problem: problem.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rank, self.index, self.instr) {
            (Some(r), Some(i), Some(instr)) => {
                write!(f, "rank {r}, instruction {i} ({instr}): {}", self.problem)
            }
            (Some(r), _, _) => write!(f, "rank {r}: {}", self.problem),
            _ => f.write_str(&self.problem),
        }
    }
}

impl std::error::Error for ValidationError {}

/// Progress of one (micro-batch, chunk) on its rank.
#[derive(Clone, Copy, Default)]
struct Unit {
    recv_act: bool,
    forward: bool,
    send_act: bool,
    recompute: bool,
    recv_grad: bool,
    input_backward: bool,
    split: bool,
    weight_backward: bool,
    send_grad: bool,
}

/// Checks `s`; `Ok(())` means every generator invariant holds.
pub fn validate(s: &Schedule) -> Result<(), ValidationError> {
    let (p, v, m) = (s.stages, s.chunks, s.microbatches);
    if p == 0 || v == 0 || m == 0 {
        return Err(ValidationError::whole(format!(
            "stages, chunks and microbatches must be at least 1 (got {p}, {v}, {m})"
        )));
    }
    if s.ranks.len() != p as usize {
        return Err(ValidationError::whole(format!(
            "the schedule declares {p} stages but has {} rank programs",
            s.ranks.len()
        )));
    }
    if u64::from(p) * u64::from(v) > u64::from(u32::MAX) {
        return Err(ValidationError::whole(format!(
            "{p} stages × {v} chunks do not fit the IR's 32-bit virtual stage numbers"
        )));
    }
    let mut reductions = 0;
    for (r, prog) in s.ranks.iter().enumerate() {
        reductions += check_rank(s, r as u32, prog)?;
    }
    // Data parallelism is all or nothing: every rank reduces every chunk, or none does.
    let all = p as usize * v as usize;
    if reductions != 0 && reductions != all {
        return Err(ValidationError::whole(format!(
            "{reductions} of the {all} (rank, chunk) gradient reductions are present: every rank must reduce every chunk, or none"
        )));
    }
    check_links(s)
}

/// Local order and completeness of one rank's program; returns its number of gradient
/// reductions.
fn check_rank(s: &Schedule, r: u32, prog: &[Instr]) -> Result<usize, ValidationError> {
    let (v, m) = (s.chunks, s.microbatches);
    let last_stage = s.virtual_stages() - 1;
    let unit = |mb: u32, c: u32| mb as usize * v as usize + c as usize;
    let mut units = vec![Unit::default(); unit(m, 0)];
    let mut reduced = vec![false; v as usize];
    let mut weights_done = vec![0u32; v as usize];
    let mut stepped = false;
    for (i, &instr) in prog.iter().enumerate() {
        let err = |problem: &str| Err(ValidationError::at(r, i, instr, problem));
        if stepped {
            return err("comes after the optimizer step, which must be the last instruction");
        }
        if instr.chunk >= v {
            return err(&format!("chunk out of range (the schedule has {v} chunks)"));
        }
        let j = s.virtual_stage(r, instr.chunk);
        match instr.op {
            Op::OptimizerStep | Op::ReduceGradients if instr.microbatch != 0 => {
                return err("names a micro-batch, but it acts on the whole iteration (use 0)");
            }
            Op::OptimizerStep if instr.chunk != 0 => {
                return err("names a chunk, but the step updates every chunk (use 0)");
            }
            Op::OptimizerStep => {
                stepped = true;
                continue;
            }
            Op::ReduceGradients => {
                let c = instr.chunk as usize;
                if reduced[c] {
                    return err("reduces this chunk's gradients a second time");
                }
                if weights_done[c] < m {
                    return err(&format!(
                        "reduces gradients before all weight gradients exist ({} of {m} micro-batches done)",
                        weights_done[c]
                    ));
                }
                reduced[c] = true;
                continue;
            }
            _ => {}
        }
        if instr.microbatch >= m {
            return err(&format!(
                "micro-batch out of range (the schedule has {m} micro-batches)"
            ));
        }
        // A neighbouring virtual stage on this same rank (a V's turn) hands over in memory:
        // no send or receive, the neighbour's pass must simply have run first.
        let local = |stage: u32| {
            let (rank, chunk) = s.locate(stage);
            (rank == r).then(|| units[unit(instr.microbatch, chunk)])
        };
        let upstream_here = if j > 0 { local(j - 1) } else { None };
        let downstream_here = if j < last_stage { local(j + 1) } else { None };
        let u = &mut units[unit(instr.microbatch, instr.chunk)];
        match instr.op {
            Op::RecvActivation => {
                if j == 0 {
                    return err("the first virtual stage has no upstream to receive from");
                }
                if upstream_here.is_some() {
                    return err(
                        "receives from its own rank, which holds the previous virtual stage",
                    );
                }
                if u.recv_act {
                    return err("receives this activation twice");
                }
                u.recv_act = true;
            }
            Op::Forward => {
                if u.forward {
                    return err("forwards this micro-batch a second time");
                }
                match upstream_here {
                    Some(prev) if !prev.forward => {
                        return err("forward before this rank's previous virtual stage ran it");
                    }
                    None if j > 0 && !u.recv_act => {
                        return err("forward before its input activation was received");
                    }
                    _ => {}
                }
                u.forward = true;
            }
            Op::SendActivation => {
                if j == last_stage {
                    return err("the last virtual stage has no downstream to send to");
                }
                if downstream_here.is_some() {
                    return err("sends to its own rank, which holds the next virtual stage");
                }
                if !u.forward {
                    return err("sends an activation before computing it");
                }
                if u.send_act {
                    return err("sends this activation twice");
                }
                u.send_act = true;
            }
            Op::Recompute => {
                if !u.forward {
                    return err("recompute before the forward it repeats");
                }
                if u.input_backward {
                    return err("recompute after the backward that needed it");
                }
                if u.recompute {
                    return err("recomputes this micro-batch a second time");
                }
                u.recompute = true;
            }
            Op::RecvGradient => {
                if j == last_stage {
                    return err("the last virtual stage has no downstream gradient to receive");
                }
                if downstream_here.is_some() {
                    return err("receives from its own rank, which holds the next virtual stage");
                }
                if u.recv_grad {
                    return err("receives this gradient twice");
                }
                u.recv_grad = true;
            }
            Op::Backward | Op::BackwardInput => {
                if !u.forward {
                    return err("backward before its forward");
                }
                if u.input_backward {
                    return err("backward of this micro-batch a second time");
                }
                match downstream_here {
                    Some(next) if !next.input_backward => {
                        return err(
                            "backward before this rank's next virtual stage ran its backward",
                        );
                    }
                    None if j < last_stage && !u.recv_grad => {
                        return err("backward before its output gradient was received");
                    }
                    _ => {}
                }
                u.input_backward = true;
                u.split = instr.op == Op::BackwardInput;
                if !u.split {
                    u.weight_backward = true;
                    weights_done[instr.chunk as usize] += 1;
                }
            }
            Op::BackwardWeight => {
                if !u.input_backward || !u.split {
                    return err("weight gradient before its input-gradient pass (Bi)");
                }
                if u.weight_backward {
                    return err("weight gradient of this micro-batch a second time");
                }
                u.weight_backward = true;
                weights_done[instr.chunk as usize] += 1;
            }
            Op::SendGradient => {
                if j == 0 {
                    return err("the first virtual stage has no upstream to send a gradient to");
                }
                if upstream_here.is_some() {
                    return err("sends to its own rank, which holds the previous virtual stage");
                }
                if !u.input_backward {
                    return err("sends a gradient before computing it");
                }
                if u.send_grad {
                    return err("sends this gradient twice");
                }
                u.send_grad = true;
            }
            Op::OptimizerStep | Op::ReduceGradients => unreachable!("handled above"),
        }
    }
    for (k, u) in units.iter().enumerate() {
        let (mb, c) = ((k / v as usize) as u32, (k % v as usize) as u32);
        let j = s.virtual_stage(r, c);
        let missing = if !u.forward {
            Some("forward")
        } else if !u.input_backward {
            Some("backward")
        } else if !u.weight_backward {
            Some("weight gradient (W)")
        } else if j + 1 < s.virtual_stages() && s.locate(j + 1).0 != r && !u.send_act {
            Some("activation send")
        } else if j > 0 && s.locate(j - 1).0 != r && !u.send_grad {
            Some("gradient send")
        } else {
            None
        };
        if let Some(what) = missing {
            return Err(ValidationError {
                rank: Some(r),
                index: None,
                instr: None,
                problem: format!("micro-batch {mb} chunk {c} never gets its {what}"),
            });
        }
    }
    if !stepped {
        return Err(ValidationError {
            rank: Some(r),
            index: None,
            instr: None,
            problem: "has no optimizer step".into(),
        });
    }
    Ok(reduced.iter().filter(|&&r| r).count())
}

/// Where the send of `instr` on rank `r` goes, and what the receiver must name.
pub(crate) fn destination(s: &Schedule, r: u32, instr: Instr) -> (u32, Instr) {
    let j = s.virtual_stage(r, instr.chunk);
    let (to, op) = match instr.op {
        Op::SendActivation => (j + 1, Op::RecvActivation),
        Op::SendGradient => (j - 1, Op::RecvGradient),
        _ => unreachable!("not a send: {instr}"),
    };
    let (rank, chunk) = s.locate(to);
    (rank, Instr::new(op, instr.microbatch, chunk))
}

/// The wire from rank `from` to rank `to`, one of its two neighbours among `ranks`: `up`
/// (`from + 1`, wrapping) or down. Under looped placement activations go up and gradients
/// down; a V sends its chunk-1 activations down and their gradients up. With two ranks
/// both neighbours are the same rank and so the same wire.
pub(crate) fn wire(from: u32, to: u32, ranks: u32) -> usize {
    let up = to == (from + 1) % ranks;
    from as usize * 2 + usize::from(!up)
}

/// Index of the in-order message queue of (sender, receiver, activation|gradient): 4 per
/// rank (see [`wire`]).
pub(crate) fn queue(from: u32, to: u32, gradient: bool, ranks: u32) -> usize {
    wire(from, to, ranks) * 2 + usize::from(gradient)
}

/// Runs the programs abstractly (buffered sends, blocking receives, in-order links) to
/// prove that sends and receives match and that no rank waits forever.
fn check_links(s: &Schedule) -> Result<(), ValidationError> {
    let p = s.stages;
    // One in-order queue per (sender, receiver, kind): 4p queues (see `queue`).
    let mut links: Vec<VecDeque<(u32, usize, Instr)>> = vec![VecDeque::new(); 4 * p as usize];
    let mut pc = vec![0usize; p as usize];
    // Each rank runs until it blocks on an empty link; the send that fills that link wakes it.
    // Linear in the instructions (a sweep over all ranks until nothing moves is quadratic in
    // the stages: a pipeline's fill is a chain of p wake-ups). Kahn process networks are
    // determinate, so the order in which ranks run changes nothing but the speed.
    let mut waiting: Vec<Option<u32>> = vec![None; 4 * p as usize];
    let mut ready: VecDeque<u32> = (0..p).collect();
    while let Some(r) = ready.pop_front() {
        let prog = &s.ranks[r as usize];
        while let Some(&instr) = prog.get(pc[r as usize]) {
            let i = pc[r as usize];
            match instr.op {
                Op::SendActivation | Op::SendGradient => {
                    let gradient = instr.op == Op::SendGradient;
                    let (to, _) = destination(s, r, instr);
                    let q = queue(r, to, gradient, p);
                    links[q].push_back((r, i, instr));
                    if let Some(w) = waiting[q].take() {
                        ready.push_back(w);
                    }
                }
                Op::RecvActivation | Op::RecvGradient => {
                    let j = s.virtual_stage(r, instr.chunk);
                    let gradient = instr.op == Op::RecvGradient;
                    let from = if gradient { j + 1 } else { j - 1 };
                    let (from_rank, _) = s.locate(from);
                    let q = queue(from_rank, r, gradient, p);
                    let Some((sr, si, sent)) = links[q].pop_front() else {
                        waiting[q] = Some(r);
                        break;
                    };
                    let (_, expected) = destination(s, sr, sent);
                    if expected != instr {
                        return Err(ValidationError::at(
                            r,
                            i,
                            instr,
                            format!(
                                "the link from rank {sr} delivers its next message in order, \
                                 which is instruction {si} ({sent}); receives must match \
                                 sends in order"
                            ),
                        ));
                    }
                }
                _ => {}
            }
            pc[r as usize] += 1;
        }
    }
    let blocked: Vec<String> = (0..p)
        .filter_map(|r| {
            let i = pc[r as usize];
            s.ranks[r as usize]
                .get(i)
                .map(|instr| format!("rank {r} at instruction {i} ({instr})"))
        })
        .collect();
    if !blocked.is_empty() {
        return Err(ValidationError::whole(format!(
            "deadlock: {} wait for messages that are never sent",
            blocked.join(", ")
        )));
    }
    for q in &links {
        if let Some(&(r, i, instr)) = q.front() {
            return Err(ValidationError::at(r, i, instr, "is never received"));
        }
    }
    Ok(())
}
