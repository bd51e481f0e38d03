//! A plan: one parallel configuration with its block layout, its simulated estimate and the
//! reasons it was chosen. What `plait plan` prints and what the exporters translate.

use serde::Serialize;

use std::sync::Arc;

use plait_cost::Estimate;
use plait_spec::{ParallelConfig, StageMap};

use crate::Simulated;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Plan {
    pub config: ParallelConfig,
    /// Blocks per pipeline chunk and full-recompute blocks per rank.
    pub stage_map: StageMap,
    /// Micro-batches per pipeline per iteration.
    pub microbatches: u64,
    /// The estimate with the pipeline simulated event by event.
    pub estimate: Estimate,
    /// The analytic (closed-form) iteration time the search screened with.
    pub closed_form_iteration_time_s: f64,
    /// Why this plan wins, or what limits it (one short sentence each).
    pub notes: Vec<String>,
    /// The simulation behind `estimate` (schedule, costs, timeline): what pictures and
    /// traces of the plan draw, without simulating again. Not part of the JSON.
    #[serde(skip)]
    pub simulated: Option<Arc<Simulated>>,
}

impl Plan {
    /// A plan of `config` laid out by `stage_map`, without notes or the simulation behind
    /// its estimate (a plan built by hand, for an export).
    pub fn new(
        config: ParallelConfig,
        stage_map: StageMap,
        microbatches: u64,
        estimate: Estimate,
        closed_form_iteration_time_s: f64,
    ) -> Self {
        Plan {
            config,
            stage_map,
            microbatches,
            estimate,
            closed_form_iteration_time_s,
            notes: Vec::new(),
            simulated: None,
        }
    }
}
