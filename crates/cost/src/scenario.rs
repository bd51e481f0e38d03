//! One training scenario (model, cluster, train spec, device model) costed for many
//! configurations: the cost model's entry point for callers that ask about more than one,
//! the planner's search and its simulation bridge. Layer costs are memoised by the knobs
//! they depend on ([`ShapeKey`]) and the assumption level, so each shape is costed once
//! however many configurations, layouts or callers ask for it.
//!
//! Knows what a layer's cost depends on; knows nothing of search order or schedules.

use std::collections::HashMap;

use foldhash::fast::FixedState;
use std::sync::{OnceLock, RwLock};

use plait_spec::{
    ClusterSpec, ModelSpec, ParallelConfig, Recompute, SpecError, StageMap, TrainSpec,
};

use crate::comm::Groups;
use crate::estimate::{
    estimate_banded, estimate_from_costs, layer_costs, policy_recompute, LayerCosts,
};
use crate::layer::Workload;
use crate::{DeviceModel, Estimate};

/// The central assumption level of [`Workload::at_level`] (0 optimistic, 2 pessimistic).
const CENTRAL: usize = 1;

/// Key of the layer-cost memo: the configuration with the knobs a layer's cost does not
/// depend on (dp, pp, vp, ZeRO and its shard group, schedule, the all-to-all overlap) reset and the recompute policy costed; every
/// other knob (tp, cp, ep, mbs, sp — and any knob added to `plait_spec::Parallel`) tells
/// shapes apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeKey(ParallelConfig);

impl ShapeKey {
    pub fn of(c: &ParallelConfig, recompute: Recompute) -> Self {
        let d = ParallelConfig::default();
        ShapeKey(ParallelConfig {
            dp: d.dp,
            pp: d.pp,
            vp: d.vp,
            zero: d.zero,
            dp_shard: d.dp_shard,
            schedule: d.schedule,
            // The overlap hides all-to-alls at the stage level; the layers cost the same.
            moe_a2a_overlap: d.moe_a2a_overlap,
            recompute,
            ..*c
        })
    }
}

/// A model trained on a cluster under a train spec, with the device model of its dtype.
pub struct Scenario<'a> {
    pub model: &'a ModelSpec,
    pub cluster: &'a ClusterSpec,
    pub train: &'a TrainSpec,
    pub device: &'a DeviceModel,
    memo: RwLock<HashMap<(ShapeKey, usize), LayerCosts, FixedState>>,
    /// The central costs memoised when [`Scenario::freeze`] was called, read without a
    /// lock: a search screens every candidate against these.
    frozen: OnceLock<HashMap<ShapeKey, LayerCosts, FixedState>>,
}

impl<'a> Scenario<'a> {
    pub fn new(
        model: &'a ModelSpec,
        cluster: &'a ClusterSpec,
        train: &'a TrainSpec,
        device: &'a DeviceModel,
    ) -> Self {
        Scenario {
            model,
            cluster,
            train,
            device,
            memo: RwLock::new(HashMap::default()),
            frozen: OnceLock::new(),
        }
    }

    /// Layer costs of `c` with `recompute`, at assumption `level`; memoised.
    pub fn layer_costs_at(
        &self,
        c: &ParallelConfig,
        recompute: Recompute,
        level: usize,
    ) -> LayerCosts {
        let shape = ShapeKey::of(c, recompute);
        if level == CENTRAL {
            if let Some(known) = self.frozen.get().and_then(|f| f.get(&shape)) {
                return *known;
            }
        }
        let key = (shape, level);
        if let Some(known) = self.memo.read().ok().and_then(|m| m.get(&key).copied()) {
            return known;
        }
        let cfg = ParallelConfig { recompute, ..*c };
        let g = Groups::new(self.cluster, &cfg);
        let w = Workload::new(&cfg, self.train).at_level(level);
        let costs = layer_costs(self.model, self.device, &g, &w);
        if let Ok(mut m) = self.memo.write() {
            m.insert(key, costs);
        }
        costs
    }

    /// Makes the central costs memoised so far readable without a lock (once; later calls
    /// do nothing). Costs asked for afterwards are still computed and memoised as before.
    /// A search calls it after costing its shapes in parallel, before it screens.
    pub fn freeze(&self) {
        let central = self.memo.read().map_or_else(
            |_| HashMap::default(),
            |m| {
                m.iter()
                    .filter(|((_, level), _)| *level == CENTRAL)
                    .map(|((shape, _), costs)| (*shape, *costs))
                    .collect()
            },
        );
        self.frozen.set(central).ok();
    }

    /// Layer costs of `c` with `recompute` at the central assumptions; memoised.
    pub fn layer_costs(&self, c: &ParallelConfig, recompute: Recompute) -> LayerCosts {
        self.layer_costs_at(c, recompute, CENTRAL)
    }

    /// `c`'s layer costs under its recompute policy ([`policy_recompute`]) and under full
    /// recompute, at the central assumptions.
    pub fn policy_and_full(&self, c: &ParallelConfig) -> (LayerCosts, LayerCosts) {
        (
            self.layer_costs(c, policy_recompute(c.recompute)),
            self.layer_costs(c, Recompute::Full),
        )
    }

    /// The central estimate of `c` laid out by `map`, without its band: what a search
    /// screens with. The caller has validated `c` and `map`.
    pub fn screen(&self, c: &ParallelConfig, map: &StageMap) -> Estimate {
        let (policy, full) = self.policy_and_full(c);
        estimate_from_costs(
            self.model,
            self.cluster,
            self.train,
            c,
            self.device,
            &policy,
            &full,
            map,
        )
    }

    /// The estimate of `c` laid out by `map`, with its band (as
    /// [`crate::estimate_mapped`]); an error for a malformed configuration or map.
    pub fn estimate(&self, c: &ParallelConfig, map: &StageMap) -> Result<Estimate, SpecError> {
        c.validate(self.model, self.train, c.gpus())?;
        check_priced(c)?;
        map.validate(self.model.layers, c)?;
        check_offload_host(self.cluster, self.train)?;
        if self.train.cpu_offload_layers > 0 && map.recompute_blocks.iter().any(|&b| b > 0) {
            return Err(SpecError::for_field(
                "recompute",
                "recomputed blocks with activation offloading".to_string(),
                "none (Megatron-Core offloads without recomputation)",
            ));
        }
        Ok(estimate_banded(
            self.model,
            self.cluster,
            self.train,
            c,
            self.device,
            map,
            &|recompute, level| self.layer_costs_at(c, recompute, level),
        ))
    }

    /// Shapes costed so far (all levels).
    pub fn memoised(&self) -> usize {
        self.memo.read().map_or(0, |m| m.len())
    }
}

/// Offloading needs the host side it runs on: activation offloading the GPUs' link to host
/// memory, optimizer offloading that link and the node's host memory (its size and the
/// CPUs' bandwidth to it, where the CPU steps the state).
pub fn check_offload_host(cluster: &ClusterSpec, train: &TrainSpec) -> Result<(), SpecError> {
    let offloads = [
        (
            "cpu_offload_layers",
            train.cpu_offload_layers > 0,
            "the offloaded activations",
        ),
        (
            "optimizer_offload",
            train.optimizer_offload > 0.0,
            "the offloaded optimizer state",
        ),
    ];
    for (field, on, what) in offloads {
        if on && cluster.host_link_bytes_per_s.is_none() {
            return Err(SpecError::for_field(
                field,
                format!(
                    "cluster {} gives no GPU-to-host bandwidth for {what}",
                    cluster.name
                ),
                "a cluster with host_link_gb_per_s (every preset has it; add it to a cluster TOML)",
            ));
        }
    }
    if train.optimizer_offload > 0.0 && cluster.host_memory.is_none() {
        return Err(SpecError::for_field(
            "optimizer_offload",
            format!(
                "cluster {} gives no host memory (its size and bandwidth) for the CPU's \
                 optimizer step",
                cluster.name
            ),
            "a cluster with host_memory_gb and host_memory_bandwidth_gb_per_s (presets \
             dgx-a100-80g, dgx-a100-40g, dgx-h100, dgx-h200 and gb200-nvl72 have them; add \
             them to a cluster TOML)",
        ));
    }
    Ok(())
}

/// The parallel degrees this crate prices: each has its group in `comm::Groups` and what it
/// splits and communicates in `layer` and `estimate`. A degree declared in
/// `plait_spec::Degree` after this list was written is refused by name
/// ([`check_priced`]) until its mechanism is written here.
pub const PRICED_DEGREES: [plait_spec::Degree; 6] = {
    use plait_spec::Degree::{Cp, Dp, Ep, Pp, Tp, Vp};
    [Dp, Tp, Pp, Vp, Cp, Ep]
};

/// `c` sets no degree above 1 that this crate does not price ([`PRICED_DEGREES`]).
pub fn check_priced(c: &ParallelConfig) -> Result<(), SpecError> {
    match c.degrees_outside(&PRICED_DEGREES).next() {
        None => Ok(()),
        Some(d) => Err(SpecError::for_field(
            d.name(),
            format!(
                "{} = {} has no cost mechanism yet (the cost model prices {})",
                d.name(),
                c.degree(d),
                plait_spec::Degree::names(&PRICED_DEGREES)
            ),
            format!("{} = 1", d.name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degrees_without_a_mechanism_are_refused_by_name() {
        // Every degree outside PRICED_DEGREES, whenever it was declared, is refused above 1
        // by its name; the priced ones pass.
        for &d in plait_spec::Degree::ALL {
            let mut c = ParallelConfig::default();
            *c.degree_mut(d) = 2;
            match check_priced(&c) {
                Err(e) if !PRICED_DEGREES.contains(&d) => {
                    assert_eq!(e.field, d.name(), "{e}");
                    assert!(e.to_string().contains("no cost mechanism"), "{e}");
                }
                Ok(()) if PRICED_DEGREES.contains(&d) => {}
                other => panic!("{d:?}: {other:?}"),
            }
        }
    }
}
