//! Training on mixed clusters: 64 H100 + 64 A100 as one pipeline, against each group alone;
//! the layout gives faster GPUs more layers; infeasible requests answer with their reason.

use plait_cost::{device_for, DeviceModel};
use plait_planner::mixed::{
    estimate_mixed, layout_mixed, plan_mixed, simulate_mixed, MixedConfig, MixedRequest,
};
use plait_spec::{
    cluster_preset, mixed_from_inline, model_preset, MixedCluster, ModelSpec, ParallelConfig,
    Recompute, Schedule, TrainSpec,
};

fn devices(m: &MixedCluster, t: &TrainSpec) -> Vec<DeviceModel> {
    m.groups
        .iter()
        .map(|g| device_for(&g.cluster, t.dtype).unwrap())
        .collect()
}

fn setup() -> (ModelSpec, MixedCluster, TrainSpec) {
    let m = model_preset("llama3-70b").unwrap();
    let mixed = mixed_from_inline("dgx-h100:8,dgx-a100-80g:8", "test").unwrap();
    (m, mixed, TrainSpec::new(256, 4096))
}

#[test]
fn h100_plus_a100_is_planned_simulated_and_compared() {
    let (m, mixed, t) = setup();
    let d = devices(&mixed, &t);
    let req = MixedRequest::new(&m, &mixed, &d, &t);
    let out = plan_mixed(&req).unwrap();
    assert!(out.infeasible.is_none(), "{:?}", out.infeasible);
    let best = &out.plans[0];
    let e = &best.estimate;
    assert!(e.simulated && e.estimate.fits, "{:?}", e.reason);
    for line in &out.explanation {
        println!("{line}");
    }
    println!("{}", best.description);
    for s in &e.stages {
        println!(
            "stage {} {} blocks {} recompute {} {:.1} ms {:.1} GiB",
            s.stage,
            s.group,
            s.blocks,
            s.recompute_blocks,
            s.time_per_microbatch_s * 1e3,
            s.peak_memory_bytes / plait_spec::GIB
        );
    }
    // Every stage of a group runs on that group's GPU; data parallelism within a kind:
    // each group holds gpus / (dp × tp) stages.
    let c = &best.mixed_config.config;
    for (&g, &s) in best
        .mixed_config
        .order
        .iter()
        .zip(&best.mixed_config.stages)
    {
        assert_eq!(s * c.dp * c.tp, mixed.groups[g].gpus());
    }
    assert_eq!(best.stage_map.chunk_blocks.iter().sum::<u64>(), m.layers);
    // Compared with each group alone (the homogeneous planner).
    assert_eq!(out.homogeneous.len(), 2);
    let h100 = out.homogeneous[0]
        .plan
        .as_ref()
        .expect("H100 alone has a plan");
    let a100 = out.homogeneous[1]
        .plan
        .as_ref()
        .expect("A100 alone has a plan");
    println!(
        "mixed {:.3} s, h100 alone {:.3} s ({}), a100 alone {:.3} s ({})",
        e.estimate.iteration_time_s,
        h100.estimate.iteration_time_s,
        h100.config,
        a100.estimate.iteration_time_s,
        a100.config
    );
    // 128 GPUs beat 64 A100s; the explanation names both alternatives.
    assert!(e.estimate.iteration_time_s < a100.estimate.iteration_time_s);
    assert!(out.explanation.iter().any(|l| l.contains("dgx-h100 alone")));
    assert!(out
        .explanation
        .iter()
        .any(|l| l.contains("dgx-a100-80g alone")));
    // The balanced layout is no slower than the even one.
    if let Some(even) = best.even_layout_iteration_time_s {
        assert!(e.estimate.iteration_time_s <= even * 1.001, "{even}");
    }
}

#[test]
fn faster_gpus_get_more_layers() {
    let (m, mixed, t) = setup();
    let d = devices(&mixed, &t);
    let req = MixedRequest::new(&m, &mixed, &d, &t);
    let c = ParallelConfig {
        dp: 2,
        tp: 8,
        mbs: 1,
        zero: 1,
        sp: true,
        recompute: Recompute::Selective,
        schedule: Schedule::OneFOneB,
        ..ParallelConfig::default()
    };
    for order in [[0, 1], [1, 0]] {
        let mc = MixedConfig::new(&mixed, &c, &order).unwrap();
        assert_eq!(mc.config.pp, 8);
        let map = layout_mixed(&req, &mc).unwrap().expect("a layout fits");
        let groups = mc.stage_groups();
        let blocks = |g: usize| -> u64 {
            (0..8)
                .filter(|&k| groups[k] == g)
                .map(|k| map.chunk_blocks[k])
                .sum()
        };
        // H100 (group 0) has ~3× the A100's dense bf16 peak: its stages hold more blocks.
        assert!(blocks(0) > blocks(1), "{order:?}: {:?}", map.chunk_blocks);
        for k in 0..8 {
            for j in 0..8 {
                // Middle stages (no embedding or head) of H100 hold at least as many as
                // those of A100.
                let middle = |s: usize| s != 0 && s != 7;
                if middle(k) && middle(j) && groups[k] == 0 && groups[j] == 1 {
                    assert!(
                        map.chunk_blocks[k] >= map.chunk_blocks[j],
                        "{:?}",
                        map.chunk_blocks
                    );
                }
            }
        }
        // The estimate and the simulation of the layout agree on feasibility and roughly on
        // time; the balanced layout beats the even one.
        let closed = estimate_mixed(&req, &mc, &map).unwrap();
        let sim = simulate_mixed(&req, &mc, &map).unwrap();
        assert!(closed.estimate.fits && sim.estimate.estimate.fits);
        let ratio = sim.estimate.estimate.iteration_time_s / closed.estimate.iteration_time_s;
        assert!((0.8..1.25).contains(&ratio), "{ratio}");
        let even = plait_spec::StageMap::uniform(m.layers, &mc.config);
        let even_sim = simulate_mixed(&req, &mc, &even).unwrap();
        assert!(
            sim.estimate.estimate.iteration_time_s < even_sim.estimate.estimate.iteration_time_s
        );
    }
}

#[test]
fn infeasible_requests_answer_with_their_reason() {
    let t = TrainSpec::new(256, 4096);
    // llama3-405b does not fit one DGX H100 + one DGX A100 node.
    let m = model_preset("llama3-405b").unwrap();
    let mixed = mixed_from_inline("dgx-h100:1,dgx-a100-80g:1", "test").unwrap();
    let d = devices(&mixed, &t);
    let mut req = MixedRequest::new(&m, &mixed, &d, &t);
    req.homogeneous = false;
    let out = plan_mixed(&req).unwrap();
    assert!(out.plans.is_empty());
    let why = out.infeasible.expect("infeasible");
    assert!(why.reason.contains("fits memory"), "{}", why.reason);
    assert!(why.min_memory_ratio.unwrap() > 1.0);
    // Groups that no dp × tp splits into whole stages: 8 GPUs and 3 × 8 GPUs of 4-GPU…
    let mut odd = mixed_from_inline("dgx-h100:1,dgx-a100-80g:1", "test").unwrap();
    odd.groups[1].cluster.gpus_per_node = 3;
    let m = model_preset("llama3-8b").unwrap();
    let d = devices(&odd, &t);
    let mut req = MixedRequest::new(&m, &odd, &d, &t);
    req.homogeneous = false;
    req.pins.tp = Some(2);
    let out = plan_mixed(&req).unwrap();
    let why = out.infeasible.expect("infeasible");
    assert!(
        why.reason.contains("whole pipeline stages"),
        "{}",
        why.reason
    );
    // A given shape that does not split is an error naming the degree.
    let c = ParallelConfig {
        dp: 2,
        tp: 2,
        ..ParallelConfig::default()
    };
    let err = MixedConfig::new(&odd, &c, &[0, 1]).unwrap_err();
    assert_eq!(err.field, "dp");
    let _ = cluster_preset("dgx-h100").unwrap();
}

#[test]
fn offloading_over_mixed_groups_is_refused_by_name() {
    let (m, mixed, t) = setup();
    for (t, field) in [
        (
            TrainSpec {
                optimizer_offload: 1.0,
                ..t.clone()
            },
            "optimizer_offload",
        ),
        (
            TrainSpec {
                cpu_offload_layers: 8,
                ..t.clone()
            },
            "cpu_offload_layers",
        ),
    ] {
        let d = devices(&mixed, &t);
        let req = MixedRequest::new(&m, &mixed, &d, &t);
        match plan_mixed(&req) {
            Err(plait_planner::PlanError::Spec(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: {:?}", other.map(|o| o.plans.len())),
        }
    }
}
