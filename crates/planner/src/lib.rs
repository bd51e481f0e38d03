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
pub use search::{plan, Cause, Infeasible, Outcome, Pins, Request, SearchStats};
pub use simulate::{simulate_config, simulate_mapped, Simulated};

/// The parallel degrees this crate's search steps and exports were written for. A degree
/// declared in `plait_spec::Degree` since is pinned-only in the search (`search::SEARCHED`)
/// and refused by the exports (`export::taught_degrees`) until they learn it.
const TAUGHT_DEGREES: [plait_spec::Degree; 6] = {
    use plait_spec::Degree::{Cp, Dp, Ep, Pp, Tp, Vp};
    [Dp, Tp, Pp, Vp, Cp, Ep]
};

/// Why a plan or simulation could not be produced (bad input, not infeasibility: a plan
/// that does not fit is an answer with `fits = false`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PlanError {
    #[error(transparent)]
    Spec(#[from] plait_spec::SpecError),
    // The schedule errors are written into the message and not made `source`s, so that a
    // report of the whole cause chain (anyhow's alternate form) states each once.
    #[error("schedule: {0}")]
    Generate(plait_schedule::GenerateError),
    #[error("schedule is invalid: {0}")]
    Invalid(plait_schedule::ValidationError),
    #[error("simulation: {0}")]
    Simulate(plait_schedule::SimError),
    #[error("graph: {0}")]
    Graph(String),
    #[error("{0} is too large to schedule (at most 2^32 − 1)")]
    TooLarge(String),
}

impl From<plait_schedule::GenerateError> for PlanError {
    fn from(e: plait_schedule::GenerateError) -> Self {
        PlanError::Generate(e)
    }
}

impl From<plait_schedule::ValidationError> for PlanError {
    fn from(e: plait_schedule::ValidationError) -> Self {
        PlanError::Invalid(e)
    }
}

impl From<plait_schedule::SimError> for PlanError {
    fn from(e: plait_schedule::SimError) -> Self {
        PlanError::Simulate(e)
    }
}
