//! Schedule generators: GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V, DualPipeV and Merak's
//! shifted critical path. Each writes, per rank, the order of compute and the sends/receives around
//! it; the order alone defines the schedule — durations are the simulator's business.

use crate::kind::{Placement, ScheduleKind as Kind};
use thiserror::Error;

use crate::ir::{GradReduce, Instr, Op, Schedule};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleSpec {
    pub kind: Kind,
    /// Pipeline ranks `p`.
    pub stages: u32,
    /// Micro-batches `m`.
    pub microbatches: u32,
    /// Chunks per rank `v` (1 unless interleaved).
    pub chunks: u32,
    /// Per rank: whether it drops activations in the forward and recomputes them before the
    /// backward (how many layers is the plan's business; it sets the duration). Empty means
    /// no rank recomputes. `scp` never recomputes on the last rank.
    pub recompute: Vec<bool>,
    pub grad_reduce: GradReduce,
}

impl ScheduleSpec {
    /// A spec without recomputation or data-parallel reduction.
    pub fn new(kind: Kind, stages: u32, microbatches: u32, chunks: u32) -> Self {
        ScheduleSpec {
            kind,
            stages,
            microbatches,
            chunks,
            recompute: Vec::new(),
            grad_reduce: GradReduce::None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GenerateError {
    #[error("{field} must be at least 1 (got 0)")]
    Zero { field: &'static str },
    #[error("{kind} runs one chunk per rank (got {chunks} chunks); use interleaved for more")]
    ChunksNeedInterleaved { kind: Kind, chunks: u32 },
    #[error("{kind} runs exactly {needs} chunks per rank (got {chunks})")]
    FixedChunks { kind: Kind, needs: u64, chunks: u32 },
    #[error("interleaved needs the micro-batches ({microbatches}) to be a multiple of the stages ({stages}), as Megatron-LM's schedule does")]
    InterleavedMicrobatches { microbatches: u32, stages: u32 },
    #[error("dualpipe-v needs at least two micro-batches per stage (got {microbatches} for {stages} stages; allowed: {} or more), as DeepSeek's DualPipeV does", 2 * u64::from(*stages))]
    DualPipeMicrobatches { microbatches: u32, stages: u32 },
    #[error("{what} = {value} is larger than the {max} a schedule supports")]
    TooLarge {
        what: &'static str,
        value: u64,
        max: u64,
    },
    #[error("recompute lists {got} ranks but the schedule has {stages}")]
    RecomputeLength { got: usize, stages: u32 },
}

/// Largest pipeline (ranks, or ranks × chunks) a schedule may have: far beyond any published
/// run (Megatron-LM's largest pipelines have 64–128 virtual stages) and small enough that
/// every index fits in u32.
pub const MAX_STAGES: u64 = 1 << 16;
/// Largest number of (micro-batch, chunk) steps per rank.
pub const MAX_STEPS: u64 = 1 << 24;
/// Largest number of instructions of a whole schedule, checked before any is generated: at
/// most [`INSTRUCTIONS_PER_STEP`] per (rank, micro-batch, chunk), plus a reduction per chunk
/// and the optimizer step per rank. About 200 MB of IR (12 bytes an instruction), and what
/// the validator and simulator then walk; 10,000 stages × 10,000 micro-batches would be
/// 800 million.
pub const MAX_INSTRUCTIONS: u64 = 1 << 24;
/// Most instructions one (rank, micro-batch, chunk) step generates: two receives, two
/// sends, forward, recompute, and the backward whole or as its input and weight halves.
pub const INSTRUCTIONS_PER_STEP: u64 = 8;

/// Where a rank re-runs a chunk's forward relative to waiting for its output gradient.
#[derive(Clone, Copy, PartialEq)]
enum RecomputeAt {
    Never,
    /// After the gradient arrived, immediately before the backward (Megatron-LM).
    AfterRecv,
    /// Before waiting for the gradient, so the recompute fills the wait (Merak's shift).
    BeforeRecv,
}

/// Builds one rank's program, inserting the receives before and the sends after compute
/// where the neighbouring virtual stage is on another rank (a V's turn stays on its rank).
struct Program<'a> {
    rank: u32,
    stages: u32,
    virtual_stages: u32,
    placement: Placement,
    out: &'a mut Vec<Instr>,
}

impl Program<'_> {
    fn stage_of(&self, chunk: u32) -> u32 {
        self.placement
            .virtual_stage(self.rank.into(), chunk.into(), self.stages.into()) as u32
    }

    /// Whether virtual stage `j` is held by another rank.
    fn elsewhere(&self, j: u32) -> bool {
        self.placement.locate(j.into(), self.stages.into()).0 != u64::from(self.rank)
    }

    fn forward(&mut self, mb: u32, chunk: u32) {
        let j = self.stage_of(chunk);
        if j > 0 && self.elsewhere(j - 1) {
            self.out.push(Instr::new(Op::RecvActivation, mb, chunk));
        }
        self.out.push(Instr::new(Op::Forward, mb, chunk));
        if j + 1 < self.virtual_stages && self.elsewhere(j + 1) {
            self.out.push(Instr::new(Op::SendActivation, mb, chunk));
        }
    }

    /// The full backward (`split == false`) or its input half.
    fn backward(&mut self, mb: u32, chunk: u32, recompute: RecomputeAt, split: bool) {
        let j = self.stage_of(chunk);
        if recompute == RecomputeAt::BeforeRecv {
            self.out.push(Instr::new(Op::Recompute, mb, chunk));
        }
        if j + 1 < self.virtual_stages && self.elsewhere(j + 1) {
            self.out.push(Instr::new(Op::RecvGradient, mb, chunk));
        }
        if recompute == RecomputeAt::AfterRecv {
            self.out.push(Instr::new(Op::Recompute, mb, chunk));
        }
        let op = if split {
            Op::BackwardInput
        } else {
            Op::Backward
        };
        self.out.push(Instr::new(op, mb, chunk));
        if j > 0 && self.elsewhere(j - 1) {
            self.out.push(Instr::new(Op::SendGradient, mb, chunk));
        }
    }

    fn weight(&mut self, mb: u32, chunk: u32) {
        self.out.push(Instr::new(Op::BackwardWeight, mb, chunk));
    }
}

/// Generates the schedule `spec` describes.
pub fn generate(spec: &ScheduleSpec) -> Result<Schedule, GenerateError> {
    let ScheduleSpec {
        kind,
        stages: p,
        microbatches: m,
        chunks: v,
        ..
    } = *spec;
    for (field, value) in [("stages", p), ("microbatches", m), ("chunks", v)] {
        if value == 0 {
            return Err(GenerateError::Zero { field });
        }
    }
    for (what, value, max) in [
        ("stages", u64::from(p), MAX_STAGES),
        (
            "micro-batches × chunks",
            u64::from(m) * u64::from(v),
            MAX_STEPS,
        ),
        ("stages × chunks", u64::from(p) * u64::from(v), MAX_STAGES),
        (
            "instructions (8 per stage, micro-batch and chunk, plus reductions and steps)",
            u64::from(p) * (u64::from(m) * u64::from(v) * INSTRUCTIONS_PER_STEP + u64::from(v) + 1),
            MAX_INSTRUCTIONS,
        ),
    ] {
        if value > max {
            return Err(GenerateError::TooLarge { what, value, max });
        }
    }
    if !kind.accepts_chunks(v as u64) {
        return Err(match kind.fixed_chunks() {
            Some(needs) => GenerateError::FixedChunks {
                kind,
                needs,
                chunks: v,
            },
            None => GenerateError::ChunksNeedInterleaved { kind, chunks: v },
        });
    }
    if kind == Kind::Interleaved && v > 1 && m % p != 0 {
        return Err(GenerateError::InterleavedMicrobatches {
            microbatches: m,
            stages: p,
        });
    }
    if kind == Kind::DualPipeV && !kind.accepts_microbatches(m.into(), p.into()) {
        return Err(GenerateError::DualPipeMicrobatches {
            microbatches: m,
            stages: p,
        });
    }
    if !spec.recompute.is_empty() && spec.recompute.len() != p as usize {
        return Err(GenerateError::RecomputeLength {
            got: spec.recompute.len(),
            stages: p,
        });
    }

    let ranks = (0..p)
        .map(|rank| {
            let mut out = Vec::new();
            let mut prog = Program {
                rank,
                stages: p,
                virtual_stages: p * v,
                placement: kind.placement(),
                out: &mut out,
            };
            let recomputes = spec.recompute.get(rank as usize).copied().unwrap_or(false);
            let plain = if recomputes {
                RecomputeAt::AfterRecv
            } else {
                RecomputeAt::Never
            };
            match kind {
                Kind::Gpipe => gpipe(&mut prog, m, plain),
                Kind::OneFOneB => one_f_one_b(&mut prog, m, |_| plain),
                Kind::Interleaved => interleaved(&mut prog, m, v, plain),
                Kind::ZbH1 => zb_h1(&mut prog, m, plain),
                Kind::ZbV => zb_v(&mut prog, m, plain),
                Kind::DualPipeV => dualpipe_v(&mut prog, m, plain),
                Kind::Scp => {
                    // Merak: the last rank keeps its activations (its backward follows its
                    // forward at once); rank r issues the recompute of its last p − r − 1
                    // micro-batches — the cool-down, where it would otherwise wait for the
                    // downstream gradient — before that wait.
                    let spared = kind.spares_rank(rank as u64, p as u64);
                    let cooldown_from = m.saturating_sub(p - rank - 1);
                    one_f_one_b(&mut prog, m, |mb| match (recomputes && !spared, mb) {
                        (false, _) => RecomputeAt::Never,
                        (true, mb) if mb >= cooldown_from => RecomputeAt::BeforeRecv,
                        (true, _) => RecomputeAt::AfterRecv,
                    })
                }
            }
            place_reductions(&mut out, v, spec.grad_reduce);
            out.push(Instr::new(Op::OptimizerStep, 0, 0));
            out
        })
        .collect();
    Ok(Schedule {
        name: kind.to_string(),
        stages: p,
        chunks: v,
        microbatches: m,
        grad_reduce: spec.grad_reduce,
        placement: kind.placement(),
        ranks,
    })
}

/// All forwards, then all backwards (Huang et al. 2019).
fn gpipe(prog: &mut Program, m: u32, recompute: RecomputeAt) {
    for mb in 0..m {
        prog.forward(mb, 0);
    }
    for mb in 0..m {
        prog.backward(mb, 0, recompute, false);
    }
}

/// PipeDream-flush as in Megatron-LM: rank r runs p − r − 1 warm-up forwards, then
/// alternates one forward and one backward, then drains the remaining backwards.
/// Warm-up forwards of 1F1B rank `rank` of `p` (see [`one_f_one_b`]).
pub(crate) fn one_f_one_b_warmup(rank: u64, p: u64, m: u64) -> u64 {
    (p - rank - 1).min(m)
}

fn one_f_one_b(prog: &mut Program, m: u32, recompute: impl Fn(u32) -> RecomputeAt) {
    // Within u32: at most m.
    let warmup = one_f_one_b_warmup(prog.rank.into(), prog.stages.into(), m.into()) as u32;
    for mb in 0..warmup {
        prog.forward(mb, 0);
    }
    for i in 0..m - warmup {
        prog.forward(warmup + i, 0);
        prog.backward(i, 0, recompute(i), false);
    }
    for mb in m - warmup..m {
        prog.backward(mb, 0, recompute(mb), false);
    }
}

/// Interleaved 1F1B (Narayanan et al. 2021) in Megatron-LM's order: forward step k runs
/// chunk (k mod pv)/p of micro-batch ⌊k/pv⌋·p + k mod p; backward steps visit the chunks in
/// reverse. Warm-up is 2(p − r − 1) + (v − 1)p steps, at most every forward.
/// The `k`-th forward (or backward) of an interleaved rank of `p` with `v` chunks: its
/// micro-batch and chunk. Micro-batches go in groups of p, chunk after chunk (backwards
/// from the last chunk).
pub(crate) fn interleaved_step(k: u64, p: u64, v: u64, forward: bool) -> (u64, u64) {
    let group = p * v;
    let chunk = (k % group) / p;
    let chunk = if forward { chunk } else { v - 1 - chunk };
    ((k / group) * p + k % p, chunk)
}

/// Warm-up forwards of interleaved rank `rank` of `p` (see [`interleaved`]).
pub(crate) fn interleaved_warmup(rank: u64, p: u64, m: u64, v: u64) -> u64 {
    (2 * (p - rank - 1) + (v - 1) * p).min(m * v)
}

fn interleaved(prog: &mut Program, m: u32, v: u32, recompute: RecomputeAt) {
    let p = prog.stages;
    let total = m * v;
    let step = |k: u32, forward: bool| {
        let (mb, chunk) = interleaved_step(k.into(), p.into(), v.into(), forward);
        // Within u32: below m and v.
        (mb as u32, chunk as u32)
    };
    // Warm-up forwards: 2(p − r − 1) + (v − 1)p, at most every forward (Megatron-Core
    // 00611e6 `pipeline_parallel/schedules.py` `get_pp_rank_microbatches`; torch's
    // `ScheduleInterleaved1F1B`, `_get_warmup_ops`). Older Megatron-LM, as SC'21 ran it,
    // ran every forward first when m = p ("Run all forward passes and then all backward
    // passes if number of microbatches is just the number of pipeline stages"); neither
    // does now, and no run plait validates has m = p under that version.
    // Within u32: at most m·v.
    let warmup = interleaved_warmup(prog.rank.into(), p.into(), m.into(), v.into()) as u32;
    for k in 0..warmup {
        let (mb, c) = step(k, true);
        prog.forward(mb, c);
    }
    for k in 0..total - warmup {
        let (mb, c) = step(k + warmup, true);
        prog.forward(mb, c);
        let (mb, c) = step(k, false);
        prog.backward(mb, c, recompute, false);
    }
    for k in total - warmup..total {
        let (mb, c) = step(k, false);
        prog.backward(mb, c, recompute, false);
    }
}

/// ZB-H1 (Qi et al. 2024, §2.1): 1F1B with the backward split into its input part B and
/// weight part W; rank r delays its W passes by r micro-batches, so every rank holds p
/// micro-batches until their W (the 1F1B peak of rank 0) while the B passes — the only part
/// the upstream rank waits for — start earlier. The delayed W passes fill the drain.
fn zb_h1(prog: &mut Program, m: u32, recompute: RecomputeAt) {
    let delay = prog.rank;
    // 1F1B's warm-up; within u32: at most m.
    let warmup = one_f_one_b_warmup(prog.rank.into(), prog.stages.into(), m.into()) as u32;
    let mut next_w = 0;
    let mut backward = |prog: &mut Program, mb: u32| {
        prog.backward(mb, 0, recompute, true);
        if mb >= delay {
            prog.weight(next_w, 0);
            next_w += 1;
        }
    };
    for mb in 0..warmup {
        prog.forward(mb, 0);
    }
    for i in 0..m - warmup {
        prog.forward(warmup + i, 0);
        backward(prog, i);
    }
    for mb in m - warmup..m {
        backward(prog, mb);
    }
    for mb in next_w..m {
        prog.weight(mb, 0);
    }
}

/// ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"), in the order of
/// torch.distributed.pipelining's `ScheduleZBVZeroBubble`: rank r holds virtual stages r
/// (chunk 0) and 2p − 1 − r (chunk 1). It first runs 2(p − r) − 1 chunk-0 forwards, then r
/// pairs (chunk-1 forward, chunk-0 forward), then p − r rounds of a chunk-1 forward with
/// its input and weight passes; in the steady state each round is a chunk-0 forward (while
/// any remain), the chunk-0 input and weight passes, a chunk-1 forward and the chunk-1
/// input and weight passes; the drain runs r pairs of input passes (chunk 0, chunk 1), then
/// p − r chunk-0 input passes each followed by a deferred weight pass, and the remaining
/// weight passes, chunk 1's first. The order is written for at least 2p − 1 micro-batches
/// and the steps of micro-batches beyond `m` are left out, as torch does.
fn zb_v(prog: &mut Program, m: u32, recompute: RecomputeAt) {
    let (p, r) = (prog.stages, prog.rank);
    let n = m.max(2 * p - 1);
    let mut passes = VPasses {
        next: [[0; 2]; 3],
        m,
        recompute,
    };
    let (fwd, input, weight) = (VPasses::FORWARD, VPasses::INPUT, VPasses::WEIGHT);
    for _ in 0..2 * (p - r) - 1 {
        passes.run(prog, fwd, 0);
    }
    for _ in 0..r {
        passes.run(prog, fwd, 1);
        passes.run(prog, fwd, 0);
    }
    for _ in 0..p - r {
        for pass in [fwd, input, weight] {
            passes.run(prog, pass, 1);
        }
    }
    while passes.done(fwd, 1) < passes.done(fwd, 0) || passes.done(fwd, 0) < n {
        if passes.done(fwd, 0) < n {
            passes.run(prog, fwd, 0);
        }
        passes.run(prog, input, 0);
        passes.run(prog, weight, 0);
        for pass in [fwd, input, weight] {
            passes.run(prog, pass, 1);
        }
    }
    for _ in 0..r {
        passes.run(prog, input, 0);
        passes.run(prog, input, 1);
    }
    for _ in 0..p - r {
        passes.run(prog, input, 0);
        passes.run(prog, weight, 0);
    }
    for c in [1, 0] {
        while passes.done(weight, c) < passes.done(input, c) {
            passes.run(prog, weight, c);
        }
    }
}

/// ZB-V's pass counters: per pass (forward, input, weight) and chunk, the next micro-batch.
struct VPasses {
    next: [[u32; 2]; 3],
    m: u32,
    recompute: RecomputeAt,
}

impl VPasses {
    const FORWARD: usize = 0;
    const INPUT: usize = 1;
    const WEIGHT: usize = 2;

    /// Writes `pass` of chunk `c` for its next micro-batch (nothing past the last one) and
    /// counts it.
    fn run(&mut self, prog: &mut Program, pass: usize, c: usize) {
        let mb = self.next[pass][c];
        if mb < self.m {
            match pass {
                Self::FORWARD => prog.forward(mb, c as u32),
                Self::INPUT => prog.backward(mb, c as u32, self.recompute, true),
                _ => prog.weight(mb, c as u32),
            }
        }
        self.next[pass][c] += 1;
    }

    /// Passes of kind `pass` counted for chunk `c`.
    fn done(&self, pass: usize, c: usize) -> u32 {
        self.next[pass][c]
    }
}

/// DualPipeV in the order of deepseek-ai/DualPipe 3da1bbe `dualpipe/dualpipev.py` (`step`),
/// which torch.distributed.pipelining's `ScheduleDualPipeV` follows
/// (`_calculate_single_rank_operations`, torch 2.15): rank r holds virtual
/// stages r (chunk 0) and 2p − 1 − r (chunk 1). It runs 2(p − r − 1) chunk-0 forwards; r + 1
/// pairs of forwards (chunk 0, chunk 1); p − r − 1 rounds of a chunk-1 input pass, the
/// deferred weight pass and a chunk-1 forward; then m − 2p + r + 1 rounds of the steady
/// state, a chunk-0 forward beside a chunk-1 backward and a chunk-1 forward beside a chunk-0
/// backward (full backwards); p − r − 1 rounds of a chunk-1 backward and a chunk-1 forward
/// beside a chunk-0 backward; r + 1 pairs of backwards (chunk 1, chunk 0) that split off
/// their weight passes from the middle pair on (for odd r from its chunk-1 backward, for
/// even r from its chunk-0 one); p − r − 1 rounds of a deferred weight pass and a chunk-0
/// input pass; and the r + 1 weight passes still deferred. Deferred weight passes run
/// first in, first out. Needs m ≥ 2p.
fn dualpipe_v(prog: &mut Program, m: u32, recompute: RecomputeAt) {
    let (p, r) = (prog.stages, prog.rank);
    let mut passes = DualPasses {
        forwards: [0; 2],
        backwards: [0; 2],
        deferred: std::collections::VecDeque::new(),
        recompute,
    };
    for _ in 0..2 * (p - r - 1) {
        passes.forward(prog, 0);
    }
    for _ in 0..=r {
        passes.forward(prog, 0);
        passes.forward(prog, 1);
    }
    for _ in 0..p - r - 1 {
        passes.backward(prog, 1, true);
        passes.weight(prog);
        passes.forward(prog, 1);
    }
    for _ in 0..m + r + 1 - 2 * p {
        passes.forward(prog, 0);
        passes.backward(prog, 1, false);
        passes.forward(prog, 1);
        passes.backward(prog, 0, false);
    }
    for _ in 0..p - r - 1 {
        passes.backward(prog, 1, false);
        passes.forward(prog, 1);
        passes.backward(prog, 0, false);
    }
    let mut split = false;
    for i in 0..=r {
        // The middle pair, ⌊(r + 1)/2⌋ of r + 1.
        let middle = i == r.div_ceil(2);
        split |= middle && r % 2 == 1;
        passes.backward(prog, 1, split);
        split |= middle && r % 2 == 0;
        passes.backward(prog, 0, split);
    }
    for _ in 0..p - r - 1 {
        passes.weight(prog);
        passes.backward(prog, 0, true);
    }
    while !passes.deferred.is_empty() {
        passes.weight(prog);
    }
}

/// DualPipeV's pass counters: the next forward and backward micro-batch of each chunk, and
/// the weight passes split off and not yet run, oldest first.
struct DualPasses {
    forwards: [u32; 2],
    backwards: [u32; 2],
    deferred: std::collections::VecDeque<(u32, u32)>,
    recompute: RecomputeAt,
}

impl DualPasses {
    fn forward(&mut self, prog: &mut Program, c: usize) {
        prog.forward(self.forwards[c], c as u32);
        self.forwards[c] += 1;
    }

    /// The backward of chunk `c`'s next micro-batch: whole, or its input pass with the
    /// weight pass deferred.
    fn backward(&mut self, prog: &mut Program, c: usize, split: bool) {
        let mb = self.backwards[c];
        prog.backward(mb, c as u32, self.recompute, split);
        if split {
            self.deferred.push_back((mb, c as u32));
        }
        self.backwards[c] += 1;
    }

    fn weight(&mut self, prog: &mut Program) {
        if let Some((mb, c)) = self.deferred.pop_front() {
            prog.weight(mb, c);
        }
    }
}

/// Inserts the data-parallel reductions: after each chunk's last weight-gradient pass (and
/// the gradient send that follows it) when overlapped, or all at the end.
fn place_reductions(out: &mut Vec<Instr>, chunks: u32, how: GradReduce) {
    match how {
        GradReduce::None => {}
        GradReduce::AtEnd => {
            out.extend(
                (0..chunks)
                    .rev()
                    .map(|c| Instr::new(Op::ReduceGradients, 0, c)),
            );
        }
        GradReduce::Overlapped => {
            // Walk backwards so that insertions do not shift positions still to visit.
            let mut seen = vec![false; chunks as usize];
            let mut i = out.len();
            while i > 0 {
                i -= 1;
                let instr = out[i];
                let c = instr.chunk as usize;
                if instr.op.is_weight_backward() && !seen[c] {
                    seen[c] = true;
                    let after_send = matches!(out.get(i + 1), Some(n) if n.op == Op::SendGradient
                        && n.microbatch == instr.microbatch && n.chunk == instr.chunk);
                    let at = i + 1 + usize::from(after_send);
                    out.insert(at, Instr::new(Op::ReduceGradients, 0, instr.chunk));
                }
            }
        }
    }
}
