//! Expert layers: where the expert groups sit and what the experts' own tensor parallelism
//! (expert tp) changes.

use plait_cost::{device_for, estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, ParallelConfig, TrainSpec};

#[test]
fn unsplit_experts_keep_the_expert_group_in_a_node_and_hold_more_weights() {
    // Mixtral 8x7B on two DGX H100 nodes, tp 2, ep 8. With the experts split as the dense
    // layers (expert tp = tp), an expert group is every other rank: 8 of them span both
    // nodes and the all-to-all crosses the NICs. With expert tp 1 the group is 8
    // consecutive ranks, one node, NVLink; no tp gather of the routed tokens either.
    let m = model_preset("mixtral-8x7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec::new(64, 4096);
    let split = ParallelConfig {
        dp: 8,
        tp: 2,
        ep: 8,
        zero: 1,
        sp: true,
        ..ParallelConfig::default()
    };
    let unsplit = ParallelConfig {
        etp: Some(1),
        ..split
    };
    let a = estimate(&m, &cluster, &t, &split, &d).unwrap();
    let b = estimate(&m, &cluster, &t, &unsplit, &d).unwrap();
    assert!(
        b.breakdown.ep_comm_s < 0.5 * a.breakdown.ep_comm_s,
        "ep comm {} (etp 1) vs {} (etp = tp)",
        b.breakdown.ep_comm_s,
        a.breakdown.ep_comm_s
    );
    // Each GPU holds one whole expert instead of half of each of two: twice the expert
    // weights, and the same FLOPs.
    let (wa, wb) = (
        a.stages[0].memory.weights_bytes,
        b.stages[0].memory.weights_bytes,
    );
    assert!(wb > 1.5 * wa, "weights {wb} (etp 1) vs {wa} (etp = tp)");
    assert_eq!(a.model_flops_per_iteration, b.model_flops_per_iteration);
}
