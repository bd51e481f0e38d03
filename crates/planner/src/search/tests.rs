//! The search on batches and GPU counts near 2^63: divisors come from one factorisation, so
//! the plan answers (here: that nothing fits, and why) instead of running for minutes.

use plait_cost::device_for;
use plait_spec::{cluster_preset, model_preset, TrainSpec};

use super::{plan, Request};

/// 2^63 − 1 = 7² · 73 · 127 · 337 · 92737 · 649657.
const BIG: u64 = i64::MAX as u64;

#[test]
fn a_batch_and_gpu_count_of_2_pow_63_minus_1_get_an_answer() {
    let m = model_preset("gpt3-175b").unwrap();
    let cluster = cluster_preset("dgx-a100-80g").unwrap();
    let t = TrainSpec::new(BIG, 2048);
    let d = device_for(&cluster, t.dtype).unwrap();
    for gpus in [BIG, BIG - 24, 1024, 8] {
        // Either nothing fits (and the answer says why), or the batch is refused with the
        // field named: 1024 GPUs run 2^63 − 1 sequences in more micro-batches than a
        // schedule holds.
        match plan(&Request::new(&m, &cluster, &t, &d, gpus), &|_, _| {}) {
            Ok(out) => {
                assert!(out.plans.is_empty(), "{gpus} GPUs: {:?}", out.plans);
                let why = out.infeasible.expect("an infeasible answer says why");
                assert!(!why.reason.is_empty(), "{gpus} GPUs");
                assert!(why.min_memory_bytes.is_finite(), "{gpus} GPUs: {why:?}");
            }
            Err(e) => assert!(e.to_string().contains("micro-batches"), "{gpus} GPUs: {e}"),
        }
    }
}

#[test]
fn the_configurations_of_a_huge_prime_count_are_those_of_one_gpu_per_replica() {
    // A prime GPU count: only tp = pp = cp = 1, dp = the count (refused by the spec's
    // bound on dp), so nothing is enumerated, and quickly.
    let m = model_preset("gpt3-175b").unwrap();
    let cluster = cluster_preset("dgx-a100-80g").unwrap();
    let t = TrainSpec::new(BIG, 2048);
    let d = device_for(&cluster, t.dtype).unwrap();
    let p = 18_446_744_073_709_551_557u64;
    let req = Request::new(&m, &cluster, &t, &d, p);
    assert!(super::enumerate(&req).is_empty());
}
