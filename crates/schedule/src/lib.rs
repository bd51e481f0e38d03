//! Pipeline schedules as one IR (`ir`), written by the generators (`generate`), proven by
//! the validator (`validate`), timed by the discrete-event simulator (`simulate`) and drawn
//! as a Perfetto trace or an SVG Gantt chart (`render`). The runtime executes the same IR.
//!
//! The schedule kinds and their rules (`kind`) and the closed forms of their timing and
//! memory (`closed_form`) live here and nowhere else.
//!
//! This crate knows nothing of models, GPUs or cost formulas: the simulator takes durations
//! and bytes per instruction kind as plain numbers ([`Costs`]).

pub mod closed_form;
pub mod generate;
pub mod ir;
pub mod kind;
pub mod render;
pub mod simulate;
pub mod validate;

pub use generate::{generate, GenerateError, ScheduleSpec};
pub use ir::{GradReduce, Instr, Op, Schedule};
pub use kind::{Placement, ScheduleKind};
pub use simulate::{
    simulate, ChunkCosts, Costs, RankCosts, RankReport, SimError, Simulation, Span, Stream,
};
pub use validate::{validate, ValidationError};
