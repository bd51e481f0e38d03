//! Nemotron-H's layers: Mamba-2 mixers by their own mechanism, attention-only and MLP-only
//! blocks as that half of a transformer block.

use plait_cost::comm::Groups;
use plait_cost::layer::{block_cost, ssd_scan_flops_per_token, Workload};
use plait_cost::{device_for, estimate, model_flops};
use plait_spec::{cluster_preset, model_preset, BlockKind, MambaSpec, ParallelConfig, TrainSpec};

fn mixer(heads: u64, head_dim: u64, state: u64, groups: u64, chunk: u64) -> MambaSpec {
    MambaSpec {
        heads,
        head_dim,
        state,
        groups,
        conv_kernel: 4,
        chunk,
        conv_bias: true,
        proj_bias: false,
    }
}

/// Forward SSD FLOPs per token (Dao & Gu 2024, §6) against the hand formula
/// 2·Q·(N·G + P·H) + 4·N·P·H, Q the chunk (at most the sequence).
fn check((m, seq): (MambaSpec, f64), expected: f64) {
    let got = ssd_scan_flops_per_token(&m, seq);
    assert_eq!(got, expected, "{m:?} at seq {seq}");
}

#[test]
fn ssd_scan_flops_match_the_hand_formula() {
    // Nemotron-H-8B: Q 128, N 128, P 64, G 8, H 128: 2·128·(128·8 + 64·128) + 4·128·64·128
    // = 2,359,296 + 4,194,304.
    check((mixer(128, 64, 128, 8, 128), 8192.0), 6_553_600.0);
    // One group per head (the brief's per-head form): 2·Q·(N + P)·H + 4·N·P·H with Q 64,
    // N 16, P 32, H 4: 2·64·48·4 + 4·16·32·4 = 24,576 + 8,192.
    check((mixer(4, 32, 16, 4, 64), 1024.0), 32_768.0);
    // A sequence shorter than the chunk is one chunk of its own length: Q = 32.
    check(
        (mixer(4, 32, 16, 4, 64), 32.0),
        2.0 * 32.0 * 48.0 * 4.0 + 8_192.0,
    );
}

#[test]
fn a_mamba_layer_costs_its_projections_scan_and_saved_tensors() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let m = model_preset("nemotron-h-8b").unwrap();
    let kinds = m.block_kinds();
    let mamba_block = &kinds[0];
    assert_eq!(mamba_block.block, BlockKind::Mamba);
    let t = TrainSpec::new(64, 8192);
    let cost_at = |tp: u64, sp: bool| {
        let c = ParallelConfig {
            tp,
            sp,
            dp: 8 / tp,
            ..ParallelConfig::default()
        };
        let w = Workload::new(&c, &t);
        block_cost(mamba_block, &d, &Groups::new(&cluster, &c), &w)
    };
    let one = cost_at(1, false);
    // Every mixer weight is split over tp; the pre-norm (4096) is replicated.
    assert_eq!(one.params, 109_640_064.0);
    let two = cost_at(2, true);
    assert_eq!(two.params, (109_640_064.0 - 4096.0) / 2.0 + 4096.0);
    for c in [one, two] {
        assert!(c.forward.compute_s > 0.0 && c.forward.compute_s.is_finite());
        assert!(c.backward.compute_s > 1.5 * c.forward.compute_s, "{c:?}");
    }
    // tp > 1 communicates as an attention half does; tp = 1 not at all.
    assert_eq!(one.forward.tp_comm_s, 0.0);
    assert!(two.forward.tp_comm_s > 0.0);
    // Saved for the backward, mbs 1 × 8192 tokens in bf16, no tp: the pre-norm and in_proj
    // inputs (2 × 4096), the in_proj output (18560), the scan output, norm input and
    // out_proj input (3 × 8192), and the norm's fp32 1/rms per group (8 × 4 bytes).
    let tokens = 8192.0;
    let expected = tokens * (2.0 * (2.0 * 4096.0 + 18560.0 + 3.0 * 8192.0) + 8.0 * 4.0);
    assert_eq!(one.activation_bytes, expected);
}

#[test]
fn attention_and_mlp_blocks_are_the_halves_of_a_transformer_block() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let m = model_preset("nemotron-h-8b").unwrap();
    let kinds = m.block_kinds();
    let (mlp, attn) = (&kinds[1], &kinds[2]);
    assert_eq!(
        (mlp.block, attn.block),
        (BlockKind::Mlp, BlockKind::Attention)
    );
    let whole = plait_spec::ModelSpec {
        block: BlockKind::Transformer,
        ..attn.clone()
    };
    let t = TrainSpec::new(64, 8192);
    let c = ParallelConfig {
        tp: 4,
        sp: true,
        dp: 2,
        ..ParallelConfig::default()
    };
    let w = Workload::new(&c, &t);
    let g = Groups::new(&cluster, &c);
    let (a, f, b) = (
        block_cost(attn, &d, &g, &w),
        block_cost(mlp, &d, &g, &w),
        block_cost(&whole, &d, &g, &w),
    );
    assert_eq!(a.params + f.params, b.params);
    assert_eq!(a.activation_bytes + f.activation_bytes, b.activation_bytes);
    let rel = |x: f64, y: f64| (x - y).abs() / y;
    assert!(
        rel(
            a.forward.compute_s + f.forward.compute_s,
            b.forward.compute_s
        ) < 1e-9
    );
    assert!(
        rel(
            a.forward.tp_comm_s + f.forward.tp_comm_s,
            b.forward.tp_comm_s
        ) < 1e-9
    );
    assert!(
        rel(
            a.backward.total_s() + f.backward.total_s(),
            b.backward.total_s()
        ) < 1e-9
    );
}

#[test]
fn model_flops_count_the_mixer_projections_and_scan() {
    // One Mamba-2 layer alone: forward + backward = 3 × (2 · tokens · (in_proj + out_proj
    // weights) + scan FLOPs), plus the head.
    let base = model_preset("nemotron-h-8b").unwrap();
    let m = plait_spec::ModelSpec {
        layers: 1,
        block: BlockKind::Mamba,
        block_runs: Vec::new(),
        ..base
    };
    let t = TrainSpec::new(8, 4096);
    let tokens = 8.0 * 4096.0;
    let weights = (18560.0 + 8192.0) * 4096.0;
    let scan = ssd_scan_flops_per_token(&m.mamba.unwrap(), 4096.0);
    let head = 2.0 * tokens * 4096.0 * 131072.0;
    let expected = 3.0 * (2.0 * tokens * weights + tokens * scan) + 3.0 * head;
    let got = model_flops(&m, &t);
    assert!(
        (got - expected).abs() / expected < 1e-12,
        "{got} vs {expected}"
    );
}

#[test]
fn nemotron_h_8b_estimates_to_finite_sane_numbers() {
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, plait_spec::Dtype::Bf16).unwrap();
    let m = model_preset("nemotron-h-8b").unwrap();
    let t = TrainSpec::new(256, 8192);
    let c = ParallelConfig {
        dp: 16,
        tp: 2,
        pp: 2,
        sp: true,
        ..ParallelConfig::default()
    };
    let e = estimate(&m, &cluster, &t, &c, &d).unwrap();
    assert!(e.iteration_time_s.is_finite() && e.iteration_time_s > 0.0);
    assert!(e.mfu > 0.1 && e.mfu < 0.7, "MFU {}", e.mfu);
    // Mamba-2 layers do not split over cp (not modelled): refused.
    let cp = ParallelConfig { dp: 8, cp: 2, ..c };
    assert!(estimate(&m, &cluster, &t, &cp, &d).is_err());
    // Nor over a tp that does not divide the 8 groups.
    let tp16 = ParallelConfig {
        dp: 1,
        tp: 16,
        pp: 4,
        ..c
    };
    assert!(estimate(&m, &cluster, &t, &tp16, &d).is_err());
}
