//! Training on mixed clusters: several groups of identical nodes (`plait_spec::MixedCluster`,
//! e.g. 64 H100 + 64 A100) as one pipeline whose stages run on different GPU kinds.
//!
//! A mixed plan is one [`ParallelConfig`] for the whole pipeline (one tp, as Megatron-LM,
//! DeepSpeed and torchtitan require), an order of the groups along the pipeline, and an
//! uneven block layout. Each pipeline replica spans the groups in the same way, so data
//! parallelism stays inside a GPU kind: group g holds `gpus_g / (dp × tp)` stages of every
//! replica, and each stage reduces its gradients over the dp ranks of its own group.
//!
//! Nothing here re-derives a cost: stage k on group g is stage k of the whole pipeline
//! estimated by `plait_cost` on g's cluster and GPU (`estimate_from_costs`: compute, tp
//! communication, activation and state memory for stage k's position, its dp reduction
//! within g); the simulator bridge (`crate::simulate::costs`) gives each rank's instruction
//! costs the same way. What this module adds:
//! * the transfers between groups, priced by `plait_cost::comm::Group::p2p_s` on the link
//!   between groups;
//! * the layout: a bottleneck search over contiguous block ranges where each stage's time
//!   and memory are those of its own GPU kind (linear in its blocks and fully recomputed
//!   blocks, as `layout.rs` models them, anchored on four estimates) and each stage must fit
//!   its own GPU's memory, choosing the fewest fully recomputed blocks that do;
//! * the search over (dp, tp, mbs, ZeRO, sp, schedule, recompute policy, group order),
//!   screened by the closed form and re-ranked by the event simulator;
//! * the comparison with the best plan of each group alone (the homogeneous planner) and
//!   an explanation of the difference.
//!
//! The module is split by responsibility: `lines` (each group's layer costs and each
//! stage's time and memory as lines in its blocks), `evaluate` (one mixed plan: closed form
//! and simulator), `layout` (the bottleneck layout and recompute counts), `search` (the
//! enumeration, screening and ranking, `plan_mixed`) and `explain` (the sentences). This
//! file holds the request and answer types; none of it prices a kernel, a collective or a
//! memory tensor (that is `plait_cost`'s) or orders a pipeline (that is `plait_schedule`'s).

use serde::Serialize;

use plait_cost::{DeviceModel, Estimate};
use plait_schedule::{Costs, Schedule, Simulation};
use plait_spec::{
    MixedCluster, ModelSpec, ParallelConfig, Schedule as Kind, SpecError, StageMap, TrainSpec,
};

use crate::layout::MapShape;
use crate::search::Pins;

mod evaluate;
mod explain;
mod layout;
mod lines;
mod search;

pub use evaluate::{estimate_mixed, simulate_mixed};
pub use layout::layout_mixed;
pub use search::plan_mixed;

/// A mixed plan's shape: the configuration every stage runs and which group holds which
/// stages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MixedConfig {
    /// pp is the whole pipeline (all groups); vp = cp = ep = 1.
    pub config: ParallelConfig,
    /// Groups along the pipeline (indices into the cluster's groups), first holds the
    /// embedding.
    pub order: Vec<usize>,
    /// Stages of each entry of `order`: its GPUs / (dp × tp).
    pub stages: Vec<u64>,
}

impl MixedConfig {
    /// The shape of `c` (its dp, tp, …; its pp is recomputed) over `mixed` with the groups
    /// in `order`; an error naming the degree when a group does not split into whole stages.
    pub fn new(
        mixed: &MixedCluster,
        c: &ParallelConfig,
        order: &[usize],
    ) -> Result<MixedConfig, SpecError> {
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        if sorted != (0..mixed.groups.len()).collect::<Vec<_>>() {
            return Err(SpecError::for_field(
                "order",
                "must name every group once",
                mixed
                    .groups
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ));
        }
        if c.vp != 1
            || c.cp != 1
            || c.ep != 1
            || !c.schedule.accepts_chunks(1)
            || c.schedule == Kind::Interleaved
        {
            return Err(SpecError::for_field(
                "vp",
                format!(
                    "{c}: mixed plans run one chunk per rank, no context or expert parallelism"
                ),
                "vp1 cp1 ep1 with gpipe|1f1b|zb-h1|scp",
            ));
        }
        let per = c.dp * c.tp;
        let mut stages = Vec::with_capacity(order.len());
        for &g in order {
            let grp = &mixed.groups[g];
            if per == 0 || !grp.gpus().is_multiple_of(per) {
                return Err(SpecError::for_field(
                    "dp",
                    format!(
                        "group {} has {} GPUs, which dp×tp = {}×{} does not split into whole pipeline stages",
                        grp.name,
                        grp.gpus(),
                        c.dp,
                        c.tp
                    ),
                    format!("dp×tp dividing every group's GPUs ({})", gpu_counts(mixed)),
                ));
            }
            stages.push(grp.gpus() / per);
        }
        let pp: u64 = stages.iter().sum();
        Ok(MixedConfig {
            config: ParallelConfig { pp, ..*c },
            order: order.to_vec(),
            stages,
        })
    }

    /// The group of every stage.
    pub fn stage_groups(&self) -> Vec<usize> {
        self.order
            .iter()
            .zip(&self.stages)
            .flat_map(|(&g, &s)| std::iter::repeat_n(g, s as usize))
            .collect()
    }

    /// `h100 ×4 → a100 ×4 | dp2 tp8 pp8 mbs1 …`.
    pub fn describe(&self, mixed: &MixedCluster) -> String {
        let parts: Vec<String> = self
            .order
            .iter()
            .zip(&self.stages)
            .map(|(&g, s)| format!("{}×{s}", mixed.groups[g].name))
            .collect();
        format!("{} | {}", parts.join(" → "), self.config)
    }
}

fn gpu_counts(mixed: &MixedCluster) -> String {
    mixed
        .groups
        .iter()
        .map(|g| format!("{} {}", g.name, g.gpus()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to plan on a mixed cluster.
#[derive(Clone)]
pub struct MixedRequest<'a> {
    pub model: &'a ModelSpec,
    pub mixed: &'a MixedCluster,
    /// The device model of each group's GPU, in group order.
    pub devices: &'a [DeviceModel],
    pub train: &'a TrainSpec,
    /// Fixed dimensions (pp, vp, cp and ep follow from the shape and are not searched).
    pub pins: Pins,
    pub top: usize,
    /// Candidates re-ranked by the simulator.
    pub simulate: usize,
    /// Also plan each group alone (the homogeneous alternatives).
    pub homogeneous: bool,
}

impl<'a> MixedRequest<'a> {
    pub fn new(
        model: &'a ModelSpec,
        mixed: &'a MixedCluster,
        devices: &'a [DeviceModel],
        train: &'a TrainSpec,
    ) -> Self {
        MixedRequest {
            model,
            mixed,
            devices,
            train,
            pins: Pins::default(),
            top: 3,
            simulate: 8,
            homogeneous: true,
        }
    }

    fn shape(&self) -> MapShape {
        crate::export::export_target(self.train.engine)
            .map_or(MapShape::Any, crate::export::map_shape)
    }
}

/// One stage of a mixed estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedStage {
    pub stage: usize,
    pub group: String,
    pub gpu: String,
    pub blocks: u64,
    pub recompute_blocks: u64,
    /// Forward + backward + sends of one micro-batch.
    pub time_per_microbatch_s: f64,
    /// Sends that cross to another group, per micro-batch (0 inside a group).
    pub cross_group_p2p_s: f64,
    pub peak_memory_bytes: f64,
    pub memory_capacity_bytes: f64,
    pub fits: bool,
}

/// A mixed plan's estimate: the whole pipeline as one `Estimate` (its stages each from its
/// own group; `memory_capacity_bytes` and `fits` those of the tightest stage; MFU over the
/// peaks of all GPUs) and the per-stage view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedEstimate {
    pub estimate: Estimate,
    pub stages: Vec<MixedStage>,
    /// The stage with the longest time per micro-batch.
    pub bottleneck_stage: usize,
    /// Whether `estimate` comes from the event simulator (else the closed forms).
    pub simulated: bool,
    pub reason: Option<String>,
}

/// A mixed plan: its shape, layout and estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedPlan {
    pub mixed_config: MixedConfig,
    pub description: String,
    pub stage_map: StageMap,
    pub estimate: MixedEstimate,
    /// The same configuration with Megatron-LM's even layout, simulated (None when it does
    /// not fit): what balancing the layers by GPU kind buys.
    pub even_layout_iteration_time_s: Option<f64>,
    #[serde(skip)]
    pub simulated: Option<std::sync::Arc<MixedSimulated>>,
}

/// A simulated mixed plan (for pictures).
#[derive(Debug, Clone, PartialEq)]
pub struct MixedSimulated {
    pub schedule: Schedule,
    pub costs: Costs,
    pub simulation: Simulation,
    pub estimate: MixedEstimate,
}

/// The best plan of one group alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Homogeneous {
    pub group: String,
    pub gpus: u64,
    pub plan: Option<crate::Plan>,
    pub infeasible: Option<String>,
}

/// Why no mixed plan exists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedInfeasible {
    pub reason: String,
    /// The least ratio of a stage's memory to its GPU's any candidate reaches (every block
    /// recomputed, memory-balanced layout); None when no candidate shape exists at all.
    pub min_memory_ratio: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MixedStats {
    /// Configurations (dp, tp, mbs, ZeRO, sp, schedule, recompute) × group orders tried.
    pub candidates: usize,
    /// With a layout that fits every stage.
    pub feasible: usize,
    pub simulated: usize,
}

/// The answer of a mixed search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixedOutcome {
    pub plans: Vec<MixedPlan>,
    pub homogeneous: Vec<Homogeneous>,
    /// Sentences explaining the best mixed plan and how it compares.
    pub explanation: Vec<String>,
    pub search: MixedStats,
    pub infeasible: Option<MixedInfeasible>,
}
