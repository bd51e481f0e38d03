//! Plans for general DAG models: data parallel × pipeline stages from the optimal
//! partitioner, with training memory (16 bytes per parameter, outputs per micro-batch in
//! flight) deciding how deep the pipeline must be.

use plait_partition::{Edge, Graph, Node};
use plait_planner::dag::plan_graph;
use plait_spec::cluster_preset;

/// A chain of `n` nodes of 1 ms forward each, each owning `param_bytes` of fp32 weights.
fn chain(n: i64, param_bytes: f64) -> Graph {
    let mut g = Graph::new("chain");
    g.time_unit = "s".into();
    for id in 0..n {
        let mut node = Node::new(id, 1e-3);
        node.param_bytes = param_bytes;
        node.output_bytes = 1e6;
        node.output_cost = 1e-5;
        g.nodes.push(node);
        if id > 0 {
            g.edges.push(Edge {
                source: id - 1,
                dest: id,
                bytes: 1e6,
            });
        }
    }
    g
}

#[test]
fn small_model_prefers_data_parallel() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let out = plan_graph(&chain(8, 1e6), &cluster, 8, 64, 64, 8).unwrap();
    let best = &out.plans[0];
    assert_eq!((best.dp, best.pp), (8, 1));
    // 8 micro-batches of 8 nodes × 3 ms (forward + twice as long backward).
    assert!(
        (best.iteration_time_s - 8.0 * 24e-3).abs() < 1e-3,
        "{}",
        best.iteration_time_s
    );
    assert!(out
        .plans
        .windows(2)
        .all(|w| w[0].iteration_time_s <= w[1].iteration_time_s));
}

#[test]
fn training_state_forces_a_deeper_pipeline() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    // 8 nodes × 6 GB of fp32 weights = 12 G parameters = 192 GB of Adam state (24 GB per
    // node): two stages of 96 GB exceed the 83.7 GB usable of an 80 GiB GPU; four stages of
    // two nodes (48 GB each) fit.
    let out = plan_graph(&chain(8, 6e9), &cluster, 8, 64, 64, 8).unwrap();
    assert!(
        out.plans.iter().all(|p| p.pp >= 4),
        "{:?}",
        out.plans.iter().map(|p| p.pp).collect::<Vec<_>>()
    );
    let best = &out.plans[0];
    for s in &best.partition.stages {
        assert!(s.memory_bytes <= cluster.gpu.memory_bytes - cluster.memory_reserve_bytes);
    }
    // Nothing fits on one GPU.
    let one = plan_graph(&chain(8, 6e9), &cluster, 1, 64, 64, 8).unwrap();
    assert!(one.plans.is_empty());
    assert!(one.infeasible.unwrap().contains("GiB"));
}
