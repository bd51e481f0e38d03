//! Plans for parallel training: real configurations through the event simulator
//! (`simulate`), and — built on it — the search for the best configuration and the
//! exports to training engines.
//!
//! Pure: no file I/O, no printing; the CLI reads inputs and renders outputs.

pub mod dag;
pub mod export;
pub mod layout;
pub mod mixed;
pub mod pins;
pub mod plan;
pub mod request;
pub mod search;
pub mod simulate;

use thiserror::Error;

pub use layout::MapShape;
pub use pins::check_pins;
pub use plan::Plan;
pub use search::{plan, Infeasible, Outcome, Pins, Request, SearchStats};
pub use simulate::{simulate_config, simulate_mapped, Simulated};

/// Why a plan or simulation could not be produced (bad input, not infeasibility: a plan
/// that does not fit is an answer with `fits = false`).
#[derive(Debug, Error)]
pub enum PlanError {
    #[error(transparent)]
    Spec(#[from] plait_spec::SpecError),
    #[error("schedule: {0}")]
    Generate(#[from] plait_schedule::GenerateError),
    #[error("schedule is invalid: {0}")]
    Invalid(#[from] plait_schedule::ValidationError),
    #[error("simulation: {0}")]
    Simulate(#[from] plait_schedule::SimError),
    #[error("graph: {0}")]
    Graph(String),
    #[error("{0} is too large to schedule (at most 2^32 − 1)")]
    TooLarge(String),
}
