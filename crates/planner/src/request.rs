//! What a search is asked: the model, cluster, training spec and GPU budget, the pinned
//! knobs, how many plans to return and simulate, and which layouts the engine can express.
//!
//! Input only: the search (`search`), the layout DP (`layout`) and the pin checks (`pins`)
//! read it; it knows none of them.

use plait_cost::DeviceModel;
use plait_spec::{ClusterSpec, ModelSpec, TrainSpec};

use crate::export::Layout;
use crate::layout::{LayoutInputs, MapShape};

/// Dimensions the user fixed; `None` means "search it" (`recompute: None`: per-stage
/// recompute chosen by the planner, `auto`). The knobs are `ParallelConfig`'s, declared
/// once in `plait_spec::Parallel`.
pub type Pins = plait_spec::ParallelPins;

/// What to plan.
#[derive(Clone)]
pub struct Request<'a> {
    pub model: &'a ModelSpec,
    pub cluster: &'a ClusterSpec,
    pub train: &'a TrainSpec,
    pub device: &'a DeviceModel,
    pub gpus: u64,
    pub pins: Pins,
    /// Plans to return.
    pub top: usize,
    /// Candidates re-ranked by the simulator at a time: batches of this many, the best
    /// screened first, until `top` plans survive.
    pub simulate: usize,
    /// Block layouts the plans may use (an engine may not express every layout).
    pub shape: MapShape,
    /// Extra filter on plans beyond what `train.engine` runs (which the search always
    /// checks): applied to every configuration with its even layout, and again to the final
    /// layouts.
    pub allow: Option<&'a (dyn Fn(&Layout) -> bool + Sync)>,
}

impl<'a> Request<'a> {
    pub fn new(
        model: &'a ModelSpec,
        cluster: &'a ClusterSpec,
        train: &'a TrainSpec,
        device: &'a DeviceModel,
        gpus: u64,
    ) -> Self {
        Request {
            model,
            cluster,
            train,
            device,
            gpus,
            pins: Pins::default(),
            top: 5,
            simulate: 16,
            // The block layouts the engine it plans under can express.
            shape: crate::export::export_target(train.engine)
                .map_or(MapShape::Any, crate::export::map_shape),
            allow: None,
        }
    }

    /// What the layout search reads of this request.
    /// The cost model's scenario of this request (its layer-cost memo starts empty): one per
    /// search, shared by the screening, the layouts and the simulations.
    pub fn scenario(&self) -> plait_cost::Scenario<'a> {
        plait_cost::Scenario::new(self.model, self.cluster, self.train, self.device)
    }

    pub fn layout_inputs(&self) -> LayoutInputs<'a> {
        LayoutInputs {
            model: self.model,
            cluster: self.cluster,
            train: self.train,
            device: self.device,
            shape: self.shape,
        }
    }
}
