//! Real configurations through the simulator: the memory timeline against the cost model's
//! per-stage memory, and the simulated iteration against the closed forms where both apply.

use plait_cost::device_for;
use plait_planner::simulate_config;
use plait_spec::{cluster_preset, model_preset, ParallelConfig, Recompute, Schedule, TrainSpec};

/// Simulates `config` of `model` on `cluster` and returns (simulated, closed-form) estimates.
fn sim(
    model: &str,
    cluster: &str,
    gbs: u64,
    seq: u64,
    config: ParallelConfig,
) -> plait_planner::Simulated {
    let m = model_preset(model).unwrap();
    let c = cluster_preset(cluster).unwrap();
    let t = TrainSpec::new(gbs, seq);
    let d = device_for(&c, t.dtype).unwrap();
    simulate_config(&m, &c, &t, &config, &d).unwrap()
}

fn config(
    dp: u64,
    tp: u64,
    pp: u64,
    vp: u64,
    mbs: u64,
    recompute: Recompute,
    schedule: Schedule,
) -> ParallelConfig {
    ParallelConfig {
        dp,
        tp,
        pp,
        vp,
        mbs,
        sp: true,
        recompute,
        schedule,
        ..ParallelConfig::default()
    }
}

/// Each rank's simulated memory peak equals the cost model's stage memory within 1 %.
fn check_memory(model: &str, cluster: &str, gbs: u64, c: ParallelConfig) {
    let s = sim(model, cluster, gbs, 2048, c);
    for (k, (stage, rank)) in s
        .closed_form
        .stages
        .iter()
        .zip(&s.simulation.ranks)
        .enumerate()
    {
        let (modelled, simulated) = (stage.peak_memory_bytes, rank.peak_memory_bytes);
        let err = (simulated - modelled).abs() / modelled;
        eprintln!(
            "{model} {c}: stage {k} memory simulated/modelled {:+.3} %",
            (simulated / modelled - 1.0) * 100.0
        );
        assert!(err < 0.01, "{model} {c}: stage {k} simulated {simulated:.4e} B vs cost model {modelled:.4e} B ({:.2} %)", err * 100.0);
    }
}

#[test]
fn memory_peaks_match_the_cost_model_for_1f1b() {
    check_memory(
        "gpt3-175b",
        "dgx-a100-80g",
        512,
        config(4, 8, 8, 1, 1, Recompute::Selective, Schedule::OneFOneB),
    );
    check_memory(
        "llama3-70b",
        "dgx-h100",
        256,
        config(4, 4, 4, 1, 2, Recompute::None, Schedule::OneFOneB),
    );
    check_memory(
        "gpt-39.1b",
        "dgx-a100-80g",
        1536,
        config(32, 8, 2, 1, 2, Recompute::Full, Schedule::OneFOneB),
    );
}

#[test]
fn memory_peaks_match_the_cost_model_for_interleaved() {
    check_memory(
        "gpt3-175b",
        "dgx-a100-80g",
        512,
        config(4, 8, 8, 2, 1, Recompute::Selective, Schedule::Interleaved),
    );
    check_memory(
        "llama3-70b",
        "dgx-h100",
        256,
        config(4, 4, 4, 5, 1, Recompute::None, Schedule::Interleaved),
    );
}

/// With equal stages the simulation agrees with the closed form up to what the closed form
/// leaves out (uneven embedding/head stages, p2p latency on the critical path).
#[test]
fn simulated_time_is_close_to_the_closed_form() {
    for c in [
        config(4, 8, 8, 1, 1, Recompute::Selective, Schedule::OneFOneB),
        config(4, 8, 8, 2, 1, Recompute::Selective, Schedule::Interleaved),
        config(4, 8, 8, 1, 1, Recompute::Full, Schedule::Scp),
    ] {
        let s = sim("gpt3-175b", "dgx-a100-80g", 512, 2048, c);
        let (a, b) = (s.estimate.iteration_time_s, s.closed_form.iteration_time_s);
        eprintln!(
            "{c}: simulated {a:.4} s, closed form {b:.4} s ({:+.2} %)",
            (a / b - 1.0) * 100.0
        );
        assert!(
            (a - b).abs() / b < 0.05,
            "{c}: simulated {a} s vs closed form {b} s"
        );
        assert_eq!(
            s.estimate.iteration_time_s,
            s.simulation.makespan_s.max(s.estimate.breakdown.total_s())
        );
    }
}

/// scp beats 1F1B with full recompute on a real model, as on synthetic stages.
#[test]
fn scp_beats_1f1b_with_full_recompute() {
    let one = sim(
        "gpt3-175b",
        "dgx-a100-80g",
        512,
        2048,
        config(4, 8, 8, 1, 1, Recompute::Full, Schedule::OneFOneB),
    );
    let scp = sim(
        "gpt3-175b",
        "dgx-a100-80g",
        512,
        2048,
        config(4, 8, 8, 1, 1, Recompute::Full, Schedule::Scp),
    );
    let (a, b) = (scp.simulation.makespan_s, one.simulation.makespan_s);
    eprintln!(
        "gpt3-175b full recompute: scp {a:.4} s vs 1f1b {b:.4} s ({:+.2} %)",
        (a / b - 1.0) * 100.0
    );
    assert!(a < b);
}

/// A model whose blocks differ (a 512-token window on the first half, full attention on
/// the second) is simulated stage by stage: the windowed stage is busy for less time, and
/// the simulator's memory peaks still match the cost model's per-stage memory.
#[test]
fn blocks_of_different_kinds_are_simulated_stage_by_stage() {
    let m = plait_spec::ModelSpec {
        block_runs: vec![
            plait_spec::BlockRun {
                kind: plait_spec::BlockKind::Transformer,
                count: 16,
                window: Some(512),
                dense_ffn: None,
                chunk: None,
            },
            plait_spec::BlockRun {
                kind: plait_spec::BlockKind::Transformer,
                count: 16,
                window: None,
                dense_ffn: None,
                chunk: None,
            },
        ],
        ..model_preset("llama3-8b").unwrap()
    };
    let c = cluster_preset("dgx-h100").unwrap();
    let t = TrainSpec::new(256, 8192);
    let d = device_for(&c, t.dtype).unwrap();
    let s = simulate_config(
        &m,
        &c,
        &t,
        &config(16, 1, 2, 1, 1, Recompute::None, Schedule::OneFOneB),
        &d,
    )
    .unwrap();
    let (f0, f1) = (
        s.costs.ranks[0].chunks[0].forward_s,
        s.costs.ranks[1].chunks[0].forward_s,
    );
    assert!(
        f0 < 0.9 * f1,
        "windowed stage forward {f0} s vs full {f1} s"
    );
    for (stage, rank) in s.closed_form.stages.iter().zip(&s.simulation.ranks) {
        let err = (rank.peak_memory_bytes / stage.peak_memory_bytes - 1.0).abs();
        assert!(err < 0.01, "{err}");
    }
    let gap = s.estimate.iteration_time_s / s.closed_form.iteration_time_s - 1.0;
    assert!(gap.abs() < 0.1, "simulated vs closed form {gap}");
}

#[test]
fn offloaded_activations_and_exposed_copies_are_simulated_as_estimated() {
    // Llama 3 70B under Megatron-FSDP on 64 GB300 with 20 of its blocks offloaded, over
    // NVLink-C2C (copies hidden) and over a 1 GB/s link (copies exposed).
    let m = model_preset("llama3-70b").unwrap();
    let t = TrainSpec {
        cpu_offload_layers: 20,
        ..TrainSpec::new(256, 8192)
    };
    let c = ParallelConfig {
        dp: 64,
        mbs: 2,
        zero: 3,
        ..ParallelConfig::default()
    };
    let slow = plait_spec::cluster_from_toml(
        "base = \"gb300-nvl72\"\nhost_link_gb_per_s = 1\n",
        "slow.toml",
    )
    .unwrap();
    for cluster in [cluster_preset("gb300-nvl72").unwrap(), slow] {
        let d = device_for(&cluster, t.dtype).unwrap();
        let s = simulate_config(&m, &cluster, &t, &c, &d).unwrap();
        let (stage, rank) = (&s.closed_form.stages[0], &s.simulation.ranks[0]);
        let memory = rank.peak_memory_bytes / stage.peak_memory_bytes - 1.0;
        assert!(memory.abs() < 0.01, "{}: memory {memory:+.4}", cluster.name);
        let time = s.estimate.iteration_time_s / s.closed_form.iteration_time_s - 1.0;
        assert!(time.abs() < 0.01, "{}: time {time:+.4}", cluster.name);
    }
}
