//! The schedule IR: per pipeline rank, the ordered list of instructions it executes in one
//! training iteration. Generators write it, the validator proves it, the simulator times it
//! and the runtime executes it; nothing else encodes schedule order.
//!
//! Rank `r` holds chunks `0..v`; the schedule's `placement` says which of the model's `p·v`
//! consecutive pieces (virtual stages) each is: Megatron-LM's interleaving (chunk `c` of
//! rank `r` is virtual stage `c·p + r`) or a V (ZB-V).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::kind::Placement;

/// What an instruction does. Compute ops run on the rank's compute stream; sends run on the
/// link to the neighbour; `ReduceGradients` on the data-parallel stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Forward of one micro-batch through one chunk; allocates its saved activations.
    Forward,
    /// Full backward (input and weight gradients) of one micro-batch through one chunk.
    Backward,
    /// Input-gradient half of a split backward (zero-bubble schedules).
    BackwardInput,
    /// Weight-gradient half of a split backward; may run later than `BackwardInput`.
    BackwardWeight,
    /// Re-run the forward of a chunk from its saved input to rebuild dropped activations.
    Recompute,
    /// Send the forward output to the rank holding the next virtual stage (non-blocking).
    SendActivation,
    /// Wait for the forward input from the rank holding the previous virtual stage.
    RecvActivation,
    /// Send the input gradient to the rank holding the previous virtual stage (non-blocking).
    SendGradient,
    /// Wait for the output gradient from the rank holding the next virtual stage.
    RecvGradient,
    /// Launch the data-parallel reduction of one chunk's gradients (asynchronous).
    ReduceGradients,
    /// Wait for every reduction, then update the weights. Last instruction of a rank.
    OptimizerStep,
}

impl Op {
    /// Short mnemonic used in error messages, traces and the SVG.
    pub fn mnemonic(self) -> &'static str {
        match self {
            Op::Forward => "F",
            Op::Backward => "B",
            Op::BackwardInput => "Bi",
            Op::BackwardWeight => "W",
            Op::Recompute => "R",
            Op::SendActivation => "sendA",
            Op::RecvActivation => "recvA",
            Op::SendGradient => "sendG",
            Op::RecvGradient => "recvG",
            Op::ReduceGradients => "reduce",
            Op::OptimizerStep => "step",
        }
    }

    /// Runs on the compute stream and takes compute time.
    pub fn is_compute(self) -> bool {
        matches!(
            self,
            Op::Forward | Op::Backward | Op::BackwardInput | Op::BackwardWeight | Op::Recompute
        )
    }

    /// Ends the backward that frees a micro-batch's activations for the next stage's use:
    /// the full backward or its input half.
    pub fn is_input_backward(self) -> bool {
        matches!(self, Op::Backward | Op::BackwardInput)
    }

    /// Ends the backward that completes a chunk's weight gradients for one micro-batch.
    pub fn is_weight_backward(self) -> bool {
        matches!(self, Op::Backward | Op::BackwardWeight)
    }
}

/// One step of a rank's program. `microbatch` is meaningless for `ReduceGradients` (0) and
/// `OptimizerStep` (0, chunk 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Instr {
    pub op: Op,
    pub microbatch: u32,
    pub chunk: u32,
}

impl Instr {
    pub fn new(op: Op, microbatch: u32, chunk: u32) -> Self {
        Instr {
            op,
            microbatch,
            chunk,
        }
    }
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.op {
            Op::OptimizerStep => f.write_str("step"),
            Op::ReduceGradients => write!(f, "reduce chunk {}", self.chunk),
            op => write!(
                f,
                "{} micro-batch {} chunk {}",
                op.mnemonic(),
                self.microbatch,
                self.chunk
            ),
        }
    }
}

/// How the data-parallel gradient reduction is placed in the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradReduce {
    /// No data parallelism: no reduction instructions.
    #[default]
    None,
    /// Each chunk's reduction is launched right after its last weight-gradient pass, bucket
    /// by bucket as the gradients appear, so it overlaps the rest of the backward
    /// (Megatron-LM `--overlap-grad-reduce`).
    Overlapped,
    /// All reductions are launched after the last backward.
    AtEnd,
}

/// A complete pipeline schedule of one training iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The generator's keyword (`gpipe`, `1f1b`, …) or a user's label.
    pub name: String,
    /// Pipeline ranks `p`.
    pub stages: u32,
    /// Chunks per rank `v` (virtual pipeline stages).
    pub chunks: u32,
    /// Micro-batches per iteration `m`.
    pub microbatches: u32,
    /// How the `ReduceGradients` instructions behave.
    #[serde(default)]
    pub grad_reduce: GradReduce,
    /// Where each rank's chunks sit in the pipeline (looped unless given).
    #[serde(default, skip_serializing_if = "Placement::is_looped")]
    pub placement: Placement,
    /// `ranks[r]` is rank `r`'s program, in execution order.
    pub ranks: Vec<Vec<Instr>>,
}

impl Schedule {
    /// Virtual stage of chunk `chunk` on rank `rank`.
    pub fn virtual_stage(&self, rank: u32, chunk: u32) -> u32 {
        // Within u32: the generator bounds stages × chunks.
        self.placement
            .virtual_stage(rank.into(), chunk.into(), self.stages.into()) as u32
    }

    /// Number of virtual stages `p·v`.
    pub fn virtual_stages(&self) -> u32 {
        self.stages * self.chunks
    }

    /// The (rank, chunk) that holds virtual stage `j`.
    pub fn locate(&self, j: u32) -> (u32, u32) {
        let (r, c) = self.placement.locate(j.into(), self.stages.into());
        (r as u32, c as u32)
    }

    /// Total instructions over all ranks.
    pub fn len(&self) -> usize {
        self.ranks.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
