//! Property tests of the cost model over random well-formed configurations:
//!
//! * more tensor parallelism, more pipeline stages or a higher ZeRO stage never raises the
//!   per-GPU weight + gradient + optimizer memory (of the worst stage, and per stage where
//!   the stages are the same);
//! * recomputation never raises activation memory (full ≤ selective ≤ none, per stage);
//! * estimates are deterministic;
//! * the time breakdown, throughput and MFU are internally consistent.
//!
//! Configurations are valid by construction: degrees are powers of two that divide every
//! preset's heads, MLP width and sequence, and the global batch is a multiple of mbs × dp
//! (× pp × vp for the interleaved schedule).

use plait_cost::{device_for, estimate, Estimate, MemoryBreakdown};
use plait_spec::{
    cluster_preset, model_preset, AttentionImpl, CpComm, Dtype, ParallelConfig, Recompute,
    Schedule, TrainSpec,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const MODELS: [&str; 5] = [
    "gpt-7.5b",
    "gpt-39.1b",
    "llama2-13b",
    "llama3-70b",
    "mixtral-8x7b",
];
const CLUSTERS: [&str; 2] = ["dgx-a100-80g", "dgx-h100"];
const RECOMPUTES: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];
const SCHEDULES: [Schedule; 7] = [
    Schedule::OneFOneB,
    Schedule::Gpipe,
    Schedule::Interleaved,
    Schedule::ZbH1,
    Schedule::Scp,
    Schedule::ZbV,
    Schedule::DualPipeV,
];

/// Relative slack for comparing figures that are equal in exact arithmetic but summed in a
/// different order.
const REL: f64 = 1e-12;

/// One input of `estimate`, by preset name so that a failing case prints compactly.
#[derive(Debug, Clone)]
struct Case {
    model: &'static str,
    cluster: &'static str,
    train: TrainSpec,
    config: ParallelConfig,
}

impl Case {
    /// The estimate of `config` (another configuration of this case's model, cluster and
    /// batch), or None when `config` is not well-formed.
    fn try_estimate(&self, config: &ParallelConfig) -> Option<Estimate> {
        let m = model_preset(self.model).unwrap();
        let cluster = cluster_preset(self.cluster).unwrap();
        config.validate(&m, &self.train, config.gpus()).ok()?;
        let device = device_for(&cluster, self.train.dtype).unwrap();
        Some(
            estimate(&m, &cluster, &self.train, config, &device)
                .unwrap_or_else(|e| panic!("{config}: {e}")),
        )
    }

    /// The estimate of `config`, which must be well-formed.
    fn estimate_of(&self, config: &ParallelConfig) -> Estimate {
        self.try_estimate(config)
            .unwrap_or_else(|| panic!("{config} should be well-formed for {self:?}"))
    }

    fn estimate(&self) -> Estimate {
        self.estimate_of(&self.config)
    }
}

/// Weights + gradients + optimizer states of one stage, per GPU.
fn model_state(m: &MemoryBreakdown) -> f64 {
    m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
}

/// `W`: the largest model state of any pipeline stage.
fn worst_model_state(e: &Estimate) -> f64 {
    e.stages
        .iter()
        .map(|s| model_state(&s.memory))
        .fold(0.0, f64::max)
}

/// `a ≤ b` up to rounding.
fn at_most(a: f64, b: f64) -> bool {
    a <= b + REL * b.abs()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

prop_compose! {
    /// A well-formed case: powers of two for every degree (all presets here have heads,
    /// MLP widths and sequences divisible by 8 and at least 32 layers).
    fn case()(
        (model, cluster, seq, dtype, attention, dropout, overlap) in (
            0..MODELS.len(),
            0..CLUSTERS.len(),
            prop::sample::select(vec![2048u64, 4096]),
            prop::sample::select(vec![Dtype::Bf16, Dtype::Fp16]),
            prop::sample::select(vec![AttentionImpl::Flash, AttentionImpl::Unfused]),
            any::<bool>(),
            any::<bool>(),
        ),
        (dp_log, tp_log, pp_log, cp_log, ep_log, mbs_log, batches) in (
            0u32..=3,
            0u32..=3,
            0u32..=3,
            0u32..=1,
            0u32..=3,
            0u32..=2,
            1u64..=8,
        ),
        (zero, sp, recompute, schedule, cp_comm) in (
            0u8..=3,
            any::<bool>(),
            prop::sample::select(RECOMPUTES.to_vec()),
            prop::sample::select(SCHEDULES.to_vec()),
            prop::sample::select(vec![CpComm::P2p, CpComm::A2a, CpComm::Allgather]),
        ),
    ) -> Case {
        let model = MODELS[model];
        let (dp, tp, pp, cp, mbs): (u64, u64, u64, u64, u64) =
            (1 << dp_log, 1 << tp_log, 1 << pp_log, 1 << cp_log, 1 << mbs_log);
        // Interleaving and ZB-V need pp ≥ 2; take two chunks per rank.
        let interleaved = schedule == Schedule::Interleaved;
        let two_chunks = interleaved || schedule.fixed_chunks() == Some(2);
        let pp = if two_chunks { pp.max(2) } else { pp };
        let vp = if two_chunks { 2 } else { 1 };
        // Ulysses only where the heads split over tp × cp (its doubled-tp variant too, which
        // the properties compare), the ring otherwise.
        let m = model_preset(model).unwrap();
        let splits = |heads: u64| heads.is_multiple_of(2 * tp * cp);
        let cp_comm = if cp_comm == CpComm::A2a && !(splits(m.heads) && splits(m.kv_heads)) {
            CpComm::P2p
        } else {
            cp_comm
        };
        // Experts (8 in Mixtral) split over a divisor of dp × cp.
        let ep = if model == "mixtral-8x7b" {
            1 << ep_log.min((dp * cp).trailing_zeros()).min(3)
        } else {
            1
        };
        // A micro-batch count that stays a multiple of 2·pp·vp, so that doubling pp keeps
        // an interleaved configuration well-formed (and DualPipeV's at least 2·pp).
        let per_batch = if interleaved || schedule == Schedule::DualPipeV {
            2 * pp * vp
        } else {
            1
        };
        let train = TrainSpec {
            dtype,
            attention,
            dropout,
            overlap_grad_reduce: overlap,
            ..TrainSpec::new(mbs * dp * per_batch * batches, seq)
        };
        Case {
            model,
            cluster: CLUSTERS[cluster],
            train,
            config: ParallelConfig {
                                dp,
                tp,
                pp,
                vp,
                cp,
                cp_comm,
                ep,
                etp: None,
                mbs,
                zero,
                sp,
                recompute,
                recompute_modules: plait_spec::RecomputeModules::CORE_ATTN,
                schedule,
                ..ParallelConfig::default()
            },
        }
    }
}

/// Consistency of one estimate: positive finite time, non-negative components adding up to
/// it, throughput matching the batch, MFU strictly between 0 and 1, stage memory
/// non-negative and finite.
fn check_sane(case: &Case, e: &Estimate) -> Result<(), TestCaseError> {
    let t = e.iteration_time_s;
    prop_assert!(t.is_finite() && t > 0.0, "iteration time {t}");
    // The model folds the rounding residue of its component sums into the bubble, which
    // can leave it a few ulps below zero (e.g. −4.4e-16 s of 2.4 s with pp = 1); allow
    // that much and no more.
    for (name, v) in e.breakdown.components() {
        prop_assert!(v.is_finite() && v >= -REL * t, "{name} = {v:e} s of {t} s");
    }
    let sum: f64 = e.breakdown.components().iter().map(|(_, v)| v).sum();
    prop_assert!(close(sum, t, 1e-9), "components add to {sum}, total {t}");
    // The wait on kernel launches is part of the compute, never more than it.
    let (wait, compute) = (
        e.breakdown.launch_wait_s,
        e.breakdown.compute_s + e.breakdown.recompute_s,
    );
    prop_assert!(
        wait >= 0.0 && wait <= compute * (1.0 + 1e-12),
        "launch wait {wait} s of {compute} s of compute"
    );
    let tokens = (case.train.gbs * case.train.seq) as f64;
    prop_assert!(
        close(e.tokens_per_s * t, tokens, 1e-9),
        "{} tokens/s × {t} s ≠ {tokens} tokens",
        e.tokens_per_s
    );
    prop_assert!(e.mfu > 0.0 && e.mfu < 1.0, "mfu {}", e.mfu);
    prop_assert_eq!(e.stages.len() as u64, e.config.pp);
    for (k, s) in e.stages.iter().enumerate() {
        let m = &s.memory;
        for (name, v) in [
            ("weights", m.weights_bytes),
            ("gradients", m.gradients_bytes),
            ("optimizer", m.optimizer_bytes),
            ("activations", m.activations_bytes),
            ("transient", m.transient_bytes),
            ("reserve", m.reserve_bytes),
        ] {
            prop_assert!(v.is_finite() && v >= 0.0, "stage {k} {name} = {v}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Doubling tp (dp, pp, cp, ep unchanged) never raises any stage's weights + gradients +
    /// optimizer per GPU, hence never raises W.
    #[test]
    fn more_tp_never_raises_model_state(case in case()) {
        let base = case.estimate();
        let wider = ParallelConfig { tp: 2 * case.config.tp, ..case.config };
        // tp = 16 does not split llama2-13b's 40 heads; nothing to compare then.
        if let Some(more) = case.try_estimate(&wider) {
            let (w0, w1) = (worst_model_state(&base), worst_model_state(&more));
            prop_assert!(at_most(w1, w0), "W rose from {w0} to {w1} with {wider}");
            for (k, (a, b)) in base.stages.iter().zip(&more.stages).enumerate() {
                let (a, b) = (model_state(&a.memory), model_state(&b.memory));
                prop_assert!(at_most(b, a), "stage {k}: {a} → {b} with {wider}");
            }
        }
    }

    /// Doubling pp (dp, tp, cp, ep unchanged) never raises W, the worst stage's weights +
    /// gradients + optimizer per GPU — even though with tied embeddings pp > 1 puts a copy
    /// of the output matrix on the last stage.
    #[test]
    fn more_pp_never_raises_model_state(case in case()) {
        let base = case.estimate();
        let deeper = ParallelConfig { pp: 2 * case.config.pp, ..case.config };
        let more = case.estimate_of(&deeper);
        let (w0, w1) = (worst_model_state(&base), worst_model_state(&more));
        prop_assert!(at_most(w1, w0), "W rose from {w0} to {w1} with {deeper}");
    }

    /// Going from pp = 1 to pp = 2 specifically (the step that splits the embedding from
    /// the head, and adds the tied head copy for GPT).
    #[test]
    fn first_pipeline_split_never_raises_model_state(case in case()) {
        let flat = ParallelConfig {
            pp: 1,
            vp: 1,
            schedule: Schedule::OneFOneB,
            ..case.config
        };
        let split = ParallelConfig { pp: 2, ..flat };
        let (w0, w1) = (
            worst_model_state(&case.estimate_of(&flat)),
            worst_model_state(&case.estimate_of(&split)),
        );
        prop_assert!(at_most(w1, w0), "W rose from {w0} to {w1} with {split}");
    }

    /// Raising the ZeRO stage never raises any stage's weights + gradients + optimizer.
    #[test]
    fn higher_zero_never_raises_model_state(case in case()) {
        let states: Vec<Estimate> = (0..=3u8)
            .map(|zero| case.estimate_of(&ParallelConfig { zero, ..case.config }))
            .collect();
        for pair in states.windows(2) {
            let (lo, hi) = (&pair[0], &pair[1]);
            let (w0, w1) = (worst_model_state(lo), worst_model_state(hi));
            prop_assert!(
                at_most(w1, w0),
                "W rose from {w0} (zero {}) to {w1} (zero {})",
                lo.config.zero,
                hi.config.zero
            );
            for (k, (a, b)) in lo.stages.iter().zip(&hi.stages).enumerate() {
                let (a, b) = (model_state(&a.memory), model_state(&b.memory));
                prop_assert!(at_most(b, a), "stage {k}: {a} → {b} at zero {}", hi.config.zero);
            }
        }
    }

    /// Full recompute ≤ selective ≤ none in activation memory, stage by stage — except on
    /// scp's last stage, which never recomputes (Merak), so full = none there.
    #[test]
    fn recompute_never_raises_activation_memory(case in case()) {
        let [none, selective, full] = RECOMPUTES
            .map(|recompute| case.estimate_of(&ParallelConfig { recompute, ..case.config }));
        let p = none.stages.len();
        for k in 0..p {
            let act = |e: &Estimate| e.stages[k].memory.activations_bytes;
            let (n, s, f) = (act(&none), act(&selective), act(&full));
            if case.config.schedule == Schedule::Scp && k == p - 1 && p > 1 {
                prop_assert_eq!(f, n);
                continue;
            }
            prop_assert!(at_most(f, s), "stage {k}: full {f} > selective {s}");
            prop_assert!(at_most(f, n), "stage {k}: full {f} > none {n}");
            prop_assert!(at_most(s, n), "stage {k}: selective {s} > none {n}");
        }
    }

    /// The same inputs give the same estimate, field for field.
    #[test]
    fn estimates_are_deterministic(case in case()) {
        let (a, b) = (case.estimate(), case.estimate());
        prop_assert_eq!(a, b);
    }

    /// Time, throughput, MFU and memory figures are consistent.
    #[test]
    fn estimates_are_internally_consistent(case in case()) {
        let e = case.estimate();
        check_sane(&case, &e)?;
    }
}
