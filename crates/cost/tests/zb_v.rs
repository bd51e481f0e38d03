//! ZB-V in the estimate: its V puts the embedding and the head on rank 0, and its bubble is
//! a fraction of 1F1B's.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, ParallelConfig, TrainSpec};

fn run(config: &str) -> Estimate {
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c: ParallelConfig = config.parse().unwrap();
    let t = TrainSpec::new(64, 4096);
    c.validate(&m, &t, c.gpus()).unwrap();
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

#[test]
fn the_v_puts_both_ends_on_rank_0() {
    // Llama 3 8B over pp 4: its 128k-token vocabulary makes the embedding and the head a
    // large share of a stage. Looped 1F1B puts them on ranks 0 and 3, the V both on rank 0.
    let looped = run("dp2 pp4 mbs1 zero1 1f1b");
    let v = run("dp2 pp4 mbs1 zero1 zb-v");
    let weights = |e: &Estimate, k: usize| e.stages[k].memory.weights_bytes;
    assert!(
        weights(&v, 0) > weights(&looped, 0),
        "rank 0 also holds the head"
    );
    assert!(
        weights(&v, 3) < weights(&looped, 3),
        "rank 3 holds neither end"
    );
    // The blocks split evenly over the 8 virtual stages: ranks 1–3 hold the same weights.
    assert_eq!(weights(&v, 1), weights(&v, 3));
}

#[test]
fn zb_v_runs_in_a_fraction_of_1f1bs_bubble() {
    let one = run("dp2 pp4 mbs1 zero1 1f1b");
    let v = run("dp2 pp4 mbs1 zero1 zb-v");
    assert!(
        v.breakdown.pipeline_bubble_s < 0.5 * one.breakdown.pipeline_bubble_s,
        "zb-v bubble {} s vs 1f1b {} s",
        v.breakdown.pipeline_bubble_s,
        one.breakdown.pipeline_bubble_s
    );
    assert!(v.iteration_time_s < one.iteration_time_s);
}
