//! Plans for models that are general DAGs (ONNX): data parallel × pipeline stages cut by the
//! optimal contiguous partitioner (`plait-partition`), ranked by predicted step time.
//!
//! A forward graph becomes a training graph here: each node's time is its forward plus a
//! backward of twice its forward (input- and weight-gradient GEMMs/convolutions each repeat
//! the forward's FLOPs: Kaplan et al. 2020, §2.1, C ≈ 6N per token = 2N forward + 4N
//! backward), each boundary tensor crosses once forward and once backward, and each node
//! holds 16 bytes per parameter (mixed-precision Adam, Rajbhandari et al. 2020) plus its
//! outputs for every micro-batch in flight (p on the first stage of 1F1B).

use rayon::prelude::*;
use serde::Serialize;

use plait_cost::comm::Group;
use plait_partition::{partition, Graph, Limits, Partition};
use plait_spec::ClusterSpec;

use crate::PlanError;
use plait_spec::GIB;

/// Backward time per unit of forward time (see the module docs).
const BACKWARD_PER_FORWARD: f64 = 2.0;
/// Bytes of mixed-precision Adam state per parameter (2 + 2 + 12).
const STATE_BYTES_PER_PARAM: f64 = 16.0;
/// Bytes per parameter of the graph's initializers as the importer counts them (fp32).
const FILE_BYTES_PER_PARAM: f64 = 4.0;
/// Bytes per parameter of the data-parallel gradient all-reduce (fp32 gradients, as
/// Megatron-LM reduces them under bf16).
const GRAD_REDUCE_BYTES_PER_PARAM: f64 = 4.0;

/// One plan for a DAG model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DagPlan {
    pub dp: u64,
    pub pp: u64,
    /// Micro-batches per pipeline per iteration (each one execution of the graph).
    pub microbatches: u64,
    pub iteration_time_s: f64,
    /// Executions of the graph per second over all GPUs.
    pub samples_per_s: f64,
    /// Slowest stage's forward + backward + boundary time per micro-batch.
    pub bottleneck_s: f64,
    pub pipeline_bubble_s: f64,
    pub dp_comm_s: f64,
    /// The stages (training loads and memory).
    pub partition: Partition,
}

/// Ranked plans, or why none fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DagOutcome {
    pub plans: Vec<DagPlan>,
    /// (dp, pp) pairs tried.
    pub candidates: usize,
    pub infeasible: Option<String>,
}

/// The training version of forward graph `g` for `inflight` micro-batches in flight.
fn training_graph(g: &Graph, inflight: f64) -> Graph {
    let mut t = g.clone();
    for n in &mut t.nodes {
        n.accelerator_latency *= 1.0 + BACKWARD_PER_FORWARD;
        n.cpu_latency *= 1.0 + BACKWARD_PER_FORWARD;
        n.output_cost *= 2.0;
        n.memory_bytes = n.param_bytes / FILE_BYTES_PER_PARAM * STATE_BYTES_PER_PARAM
            + n.output_bytes * inflight;
    }
    t
}

/// Plans `g` (one execution = one micro-batch) for `batches` executions per iteration on
/// `gpus` GPUs of `cluster`: every dp × pp = gpus with pp ≤ `max_pp`, 1F1B.
pub fn plan_graph(
    g: &Graph,
    cluster: &ClusterSpec,
    gpus: u64,
    batches: u64,
    max_pp: u64,
    top: usize,
) -> Result<DagOutcome, PlanError> {
    let capacity = cluster.gpu.memory_bytes - cluster.memory_reserve_bytes;
    let pairs: Vec<(u64, u64)> = (1..=gpus.min(max_pp).min(g.nodes.len() as u64))
        .filter(|pp| gpus.is_multiple_of(*pp))
        .map(|pp| (gpus / pp, pp))
        .filter(|(dp, _)| batches.is_multiple_of(*dp))
        .collect();
    let params_of: std::collections::HashMap<i64, f64> = g
        .nodes
        .iter()
        .map(|n| (n.id, n.param_bytes / FILE_BYTES_PER_PARAM))
        .collect();
    let results: Vec<Result<Option<DagPlan>, PlanError>> = pairs
        .par_iter()
        .map(|&(dp, pp)| {
            let t = training_graph(g, pp as f64);
            let part = partition(&t, &Limits::new(pp as usize, 0, capacity))
                .map_err(|e| PlanError::Graph(e.to_string()))?;
            if !part.feasible {
                return Ok(None);
            }
            let m = batches / dp;
            let bottleneck = part.max_load;
            let pipe = (m + pp - 1) as f64 * bottleneck;
            // The gradient all-reduce of the stage with the most parameters, overlapped
            // with the last micro-batch's backward.
            let params = part
                .stages
                .iter()
                .map(|s| s.ids.iter().filter_map(|id| params_of.get(id)).sum::<f64>())
                .fold(0.0, f64::max);
            // Megatron-LM rank order with tp = 1: data-parallel ranks are adjacent and
            // pipeline stages outermost, so a dp group has stride 1.
            let group = Group::place(cluster, dp, 1);
            let reduce = group.all_reduce_s(params * GRAD_REDUCE_BYTES_PER_PARAM);
            let hidden = bottleneck * BACKWARD_PER_FORWARD / (1.0 + BACKWARD_PER_FORWARD);
            let dp_comm = (reduce - hidden).max(0.0);
            let time = pipe + dp_comm;
            Ok(Some(DagPlan {
                dp,
                pp,
                microbatches: m,
                iteration_time_s: time,
                samples_per_s: batches as f64 / time,
                bottleneck_s: bottleneck,
                pipeline_bubble_s: (pp - 1) as f64 * bottleneck,
                dp_comm_s: dp_comm,
                partition: part,
            }))
        })
        .collect();
    let mut plans = Vec::new();
    for r in results {
        if let Some(p) = r? {
            plans.push(p);
        }
    }
    plans.sort_by(|a, b| {
        a.iteration_time_s
            .total_cmp(&b.iteration_time_s)
            .then(a.pp.cmp(&b.pp))
    });
    plans.truncate(top);
    let infeasible =
        plans.is_empty().then(|| {
            if pairs.is_empty() {
                format!(
                    "no dp × pp = {gpus} with dp dividing the {batches} micro-batches of the batch"
                )
            } else {
                format!(
                "no pipeline of up to {} stages of {gpus} GPUs holds the graph's training state \
                 ({:.1} GiB of {:.1} GiB per GPU usable)",
                gpus.min(max_pp),
                training_graph(g, 1.0).nodes.iter().map(|n| n.memory_bytes).sum::<f64>()
                    / gpus.min(max_pp) as f64
                    / GIB,
                capacity / GIB
            )
            }
        });
    Ok(DagOutcome {
        plans,
        candidates: pairs.len(),
        infeasible,
    })
}
