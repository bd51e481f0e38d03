//! Every plan trains the same model as one worker: same seed, same data order, f32. The
//! losses of the first five steps agree within 1e-4 (relative) and the final weights within
//! 1e-4 (absolute).

use std::collections::BTreeMap;
use std::sync::{Once, OnceLock};

use plait_runtime::{parse_plan, train, Dataset, TrainConfig};
use plait_spec::{model_preset, ParallelConfig, StageMap};

const STEPS: u64 = 5;
const SEQ: usize = 64;
const GBS: usize = 8;

struct Run {
    recomputed_blocks: u64,
    losses: Vec<f64>,
    weights: BTreeMap<String, Vec<f32>>,
}

/// candle's thread counts, set as `plait train` sets them at its start (a test binary has
/// no `main` of its own: every test passes here before it trains).
fn data() -> &'static Dataset {
    static INIT: Once = Once::new();
    INIT.call_once(|| plait_runtime::init_compute_threads(1));
    static DATA: OnceLock<Dataset> = OnceLock::new();
    DATA.get_or_init(Dataset::builtin)
}

fn run(model: &str, parallel: ParallelConfig, map: Option<StageMap>) -> Run {
    run_with(model, parallel, map, false)
}

fn run_with(model: &str, parallel: ParallelConfig, map: Option<StageMap>, sub: bool) -> Run {
    let spec = model_preset(model).unwrap();
    let mut cfg = TrainConfig::new(spec, parallel, SEQ, GBS, STEPS);
    cfg.sub_pipeline_tp = sub;
    cfg.seed = 42;
    cfg.stage_map = map;
    cfg.return_weights = true;
    // Small buckets so that the data-parallel reduction runs over several of them.
    cfg.bucket_params = 100_000;
    let r = train(&cfg, data(), |_| {}).unwrap();
    Run {
        recomputed_blocks: r.recomputed_blocks,
        losses: r.logs.iter().map(|l| l.loss).collect(),
        weights: r.weights,
    }
}

fn reference(model: &str) -> &'static Run {
    static GPT: OnceLock<Run> = OnceLock::new();
    static LLAMA: OnceLock<Run> = OnceLock::new();
    let cell = if model == "tiny-gpt" { &GPT } else { &LLAMA };
    cell.get_or_init(|| run(model, ParallelConfig::default(), None))
}

/// Runs `plan` on `workers` and compares it with one worker; returns the worst errors.
fn check(model: &str, plan: &str, workers: usize, map: Option<StageMap>) -> (f64, f64, u64) {
    check_with(model, plan, workers, map, false)
}

fn check_with(
    model: &str,
    plan: &str,
    workers: usize,
    map: Option<StageMap>,
    sub: bool,
) -> (f64, f64, u64) {
    let parallel = parse_plan(plan, workers).unwrap();
    let got = run_with(model, parallel, map, sub);
    let want = reference(model);
    assert_eq!(got.losses.len(), STEPS as usize);
    let mut loss_err: f64 = 0.0;
    for (g, w) in got.losses.iter().zip(&want.losses) {
        loss_err = loss_err.max((g - w).abs() / w.abs());
    }
    assert_eq!(
        got.weights.keys().collect::<Vec<_>>(),
        want.weights.keys().collect::<Vec<_>>(),
        "{plan}: parameter names"
    );
    let mut weight_err: f64 = 0.0;
    for (name, w) in &want.weights {
        let g = &got.weights[name];
        assert_eq!(g.len(), w.len(), "{plan}: {name}");
        for (a, b) in g.iter().zip(w) {
            weight_err = weight_err.max(f64::from((a - b).abs()));
        }
    }
    eprintln!(
        "{model} {plan}: loss rel err {loss_err:.2e}, weight abs err {weight_err:.2e}, losses {:?}",
        got.losses
    );
    assert!(
        loss_err <= 1e-4,
        "{plan}: losses {:?} vs {:?}",
        got.losses,
        want.losses
    );
    assert!(weight_err <= 1e-4, "{plan}: weights differ by {weight_err}");
    (loss_err, weight_err, got.recomputed_blocks)
}

#[test]
fn dp2() {
    check("tiny-gpt", "dp2", 2, None);
}

#[test]
fn tp2() {
    check("tiny-gpt", "tp2", 2, None);
}

#[test]
fn tp2_sp() {
    check("tiny-gpt", "tp2,sp", 2, None);
}

#[test]
fn pp2_1f1b() {
    check("tiny-gpt", "pp2,schedule=1f1b", 2, None);
}

#[test]
fn pp4_gpipe() {
    check("tiny-gpt", "pp4,schedule=gpipe", 4, None);
}

#[test]
fn pp2_interleaved_v2() {
    check("tiny-gpt", "pp2,vp2", 2, None);
}

#[test]
fn pp2_scp_recompute_on_stage_0() {
    // Stage 0 recomputes both of its blocks, the last stage keeps its activations.
    let map = StageMap {
        chunk_blocks: vec![2, 2],
        recompute_blocks: vec![2, 0],
        placement: plait_spec::Placement::Looped,
    };
    let (.., recomputed) = check("tiny-gpt", "pp2,schedule=scp,recompute=full", 2, Some(map));
    // Both blocks of stage 0, for each of the 8 micro-batches of each of the 5 steps.
    assert_eq!(recomputed, 2 * 8 * STEPS);
}

#[test]
fn pp2_1f1b_partial_recompute_uneven_stages() {
    let map = StageMap {
        chunk_blocks: vec![3, 1],
        recompute_blocks: vec![1, 1],
        placement: plait_spec::Placement::Looped,
    };
    let (.., recomputed) = check("tiny-gpt", "pp2,recompute=full", 2, Some(map));
    assert_eq!(recomputed, 2 * 8 * STEPS);
}

#[test]
fn dp2_tp2_pp2_zero1() {
    check("tiny-gpt", "dp2,tp2,pp2,zero1", 8, None);
}

#[test]
fn zb_h1_pp2() {
    check("tiny-gpt", "pp2,schedule=zb-h1", 2, None);
}

/// A V: each rank's second chunk runs back up the ranks, and the last rank hands its first
/// chunk's output to its second without a message.
#[test]
fn zb_v_pp2() {
    check("tiny-gpt", "pp2,schedule=zb-v", 2, None);
}

#[test]
fn llama_dp2_pp2_zb_v_zero1() {
    check("tiny-llama", "dp2,pp2,schedule=zb-v,zero1", 4, None);
}

/// DualPipeV: the V of ZB-V, its steady state's forward and backward pairs, full and split
/// backwards mixed and the deferred weight passes run first in, first out.
#[test]
fn dualpipe_v_pp2() {
    check("tiny-gpt", "pp2,schedule=dualpipe-v", 2, None);
}

#[test]
fn llama_dp2_pp2_dualpipe_v_zero1() {
    check("tiny-llama", "dp2,pp2,schedule=dualpipe-v,zero1", 4, None);
}

#[test]
fn llama_tp2_sp_gqa() {
    check("tiny-llama", "tp2,sp", 2, None);
}

#[test]
fn llama_dp2_pp2_interleaved_zero1() {
    check("tiny-llama", "dp2,pp2,vp2,zero1", 4, None);
}

#[test]
fn sub_pipelined_tp2() {
    check_with("tiny-gpt", "tp2,mbs2", 2, None, true);
}

#[test]
fn sub_pipelined_llama_tp2_sp_pp2() {
    check_with("tiny-llama", "tp2,sp,pp2,mbs2", 4, None, true);
}
