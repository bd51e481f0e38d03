//! `train --plan auto` and the prediction beside a run: the runtime's measured profile
//! turned into a cluster, then the planner and the simulator. The runtime itself knows
//! nothing of the planner; this glue is the CLI's.

use anyhow::{anyhow, Result};

use plait_planner::{Request, Simulated};
use plait_runtime::profile::{cores, runtime_supports, CpuProfile};
use plait_runtime::TrainConfig;
use plait_spec::{ParallelConfig, StageMap};

/// The simulator's prediction of `cfg` on this machine's workers (`plait simulate` for
/// the runtime's own run).
pub fn predict(cfg: &TrainConfig, profile: &CpuProfile) -> Result<Simulated> {
    let (cluster, device) = profile.cluster(cfg.topology().world())?;
    plait_planner::simulate_mapped(
        &cfg.model,
        &cluster,
        &cfg.train_spec(),
        &cfg.parallel,
        &device,
        &cfg.stage_map(),
    )
    .map_err(|e| anyhow!("simulation: {e}"))
}

/// The planner's best plan for `cfg`'s model and batch on `workers` CPU workers, among the
/// configurations the runtime executes.
pub fn plan_auto(
    cfg: &TrainConfig,
    workers: usize,
    profile: &CpuProfile,
) -> Result<(ParallelConfig, StageMap, plait_planner::Plan)> {
    let (cluster, device) = profile.cluster(workers)?;
    let train = cfg.train_spec();
    let model = cfg.model.clone();
    let seq = cfg.seq as u64;
    let allow = move |l: &plait_planner::export::Layout| runtime_supports(&model, l.config, seq);
    let mut req = Request::new(&cfg.model, &cluster, &train, &device, workers as u64);
    req.pins.cp = Some(1);
    req.pins.ep = Some(1);
    req.top = 1;
    req.allow = Some(&allow);
    // The search runs on every core in its own pool: rayon's global pool follows
    // `RAYON_NUM_THREADS`, which `init_compute_threads` sets for candle's GEMMs.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(cores())
        .thread_name(|i| format!("plait-plan.{i}"))
        .build()
        .map_err(|e| anyhow!("cannot start the planner's threads: {e}"))?;
    let outcome = pool
        .install(|| plait_planner::plan(&req, &|_, _| {}))
        .map_err(|e| anyhow!("planner: {e}"))?;
    match outcome.plans.into_iter().next() {
        Some(p) => Ok((p.config, p.stage_map.clone(), p)),
        None => Err(anyhow!(
            "the planner found no plan for {} on {workers} CPU workers: {}",
            cfg.model.name,
            outcome
                .infeasible
                .map(|i| i.reason)
                .unwrap_or_else(|| "no configuration the runtime can execute".into())
        )),
    }
}
