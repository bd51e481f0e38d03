//! The device model against kernels measured on one H200 (`scripts/h200_kernels.py`,
//! `tests/data/h200_kernels.jsonl`): FlashAttention-2 and cuDNN attention by sequence length
//! and head dim, bf16 and fp8 GEMMs on the shapes of real layers, thirty seconds of GEMMs at
//! the power cap, GEMMs slowed by a copy kernel holding NCCL's number of thread blocks, and
//! grouped expert GEMMs, and one rank's share of PyTorch's context-parallel ring attention.

use plait_cost::device::{AttentionKernel, DeviceModel};
use plait_cost::engine::{contention_per_overlap_s, CpMerge};
use plait_spec::{cluster::h200, Dtype};
use serde_json::Value;

fn rows(kind: &str) -> Vec<Value> {
    include_str!("data/h200_kernels.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == kind)
        .collect()
}

fn num(r: &Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} in {r}"))
}

fn device(dtype: Dtype) -> DeviceModel {
    DeviceModel::new(&h200(), dtype).unwrap()
}

/// Mean of ln(predicted time / measured time) and mean of its absolute value.
fn log_errors(errors: &[f64]) -> (f64, f64) {
    let n = errors.len() as f64;
    (
        errors.iter().sum::<f64>() / n,
        errors.iter().map(|e| e.abs()).sum::<f64>() / n,
    )
}

/// Forward and backward seconds the model gives one measured attention row.
fn attention(r: &Value, kernel: AttentionKernel, level: usize) -> (f64, f64) {
    device(Dtype::Bf16).attention_s(
        kernel,
        num(r, "fwd_flops"),
        num(r, "seq"),
        num(r, "head_dim"),
        r["causal"].as_bool().unwrap(),
        num(r, "batch") * num(r, "heads"),
        level,
    )
}

#[test]
fn flash_attention_follows_the_measured_rates() {
    let flash: Vec<Value> = rows("attention")
        .into_iter()
        .filter(|r| r["backend"] == "flash")
        .collect();
    assert_eq!(
        flash.len(),
        54 + 22,
        "3 head dims × 2 masks × 9 sequence lengths with at least 32 sequences × heads, and \
         the first run's rows at 16K–128K tokens with fewer"
    );
    for r in &flash {
        let (f, b) = attention(r, AttentionKernel::Flash2, 1);
        for (got, ms) in [(f, num(r, "fwd_ms")), (b, num(r, "bwd_ms"))] {
            let err = got / (ms / 1e3) - 1.0;
            assert!(err.abs() < 0.01, "{r}: {:+.1} %", 100.0 * err);
        }
    }
    // Between measured head dims the rate is interpolated, not extrapolated.
    let r = &flash[0];
    let at = |hd: f64| {
        device(Dtype::Bf16)
            .attention_s(AttentionKernel::Flash2, 1e12, 8192.0, hd, true, 32.0, 1)
            .0
    };
    let (a, b, c) = (at(64.0), at(96.0), at(128.0));
    assert!(a.min(c) <= b && b <= a.max(c), "{r}");
    // A long causal kernel over few sequences × heads is slower, and more of them never
    // slow it: between the two runs' counts the rate is interpolated.
    let forward = |heads: f64| {
        device(Dtype::Bf16)
            .attention_s(
                AttentionKernel::Flash2,
                1e12,
                32768.0,
                128.0,
                true,
                heads,
                1,
            )
            .0
    };
    let times: Vec<f64> = [1.0, 4.0, 7.0, 12.0, 32.0, 64.0].map(forward).to_vec();
    assert!(times.windows(2).all(|w| w[1] <= w[0]), "{times:?}");
    assert!(times[2] / times[4] > 1.1, "{times:?}");
}

#[test]
fn cudnn_attention_lies_inside_the_transformer_engine_band() {
    // The band runs from FA2's rate to the isolated cuDNN kernel's; training runs sit near
    // its slow end (`TE_FUSED_OVER_FA2`), the kernel measured alone near its fast end.
    let cudnn: Vec<Value> = rows("attention")
        .into_iter()
        .filter(|r| r["backend"] == "cudnn" && r["head_dim"] == 128)
        .collect();
    assert_eq!(cudnn.len(), 18 + 8);
    for r in &cudnn {
        let measured = (num(r, "fwd_ms") + num(r, "bwd_ms")) / 1e3;
        let (of, ob) = attention(r, AttentionKernel::CudnnFused, 0);
        let (pf, pb) = attention(r, AttentionKernel::CudnnFused, 2);
        assert!(
            measured > 0.9 * (of + ob) && measured < pf + pb,
            "{r}: measured {measured} s, band {}–{} s",
            of + ob,
            pf + pb
        );
    }
}

#[test]
fn gemm_model_on_the_shapes_of_real_layers() {
    // Forward, input-gradient and weight-gradient GEMMs of Llama 3 8B/70B and GPT-3 175B
    // layers at tp 1, 2, 8, each shape timed alone (7 runs) after a minute of attention
    // kernels. The model, at the sustained clock, is 10 % slower than these runs on average
    // (log error +0.100 bf16, +0.094 fp8): 1.8 % of it is the clock (this section's 8192³
    // ran at 677 TFLOP/s, the 30-second loop at 665), the rest the shapes, thin-k ones
    // running up to 30 % faster than the per-tile overhead allows. The training tables
    // hold that overhead where it is: at 300 instead of 500 units of k, which these
    // shapes prefer, SC'21 Table 1 goes from 1.9 to 4.4 % (−4.3 % signed) and every
    // Hopper table moves 2–3 points further too fast.
    let (bf16, fp8) = (device(Dtype::Bf16), device(Dtype::Fp8));
    let mut errors = [vec![], vec![]];
    let mut speedups = vec![];
    let gemms = rows("gemm");
    for r in gemms.iter().filter(|r| r["dtype"] == "bf16") {
        let (m, n, k) = (num(r, "m") as u64, num(r, "n") as u64, num(r, "k") as u64);
        let same = |dtype: &str| {
            gemms
                .iter()
                .find(|g| {
                    g["dtype"] == dtype && g["m"] == r["m"] && g["n"] == r["n"] && g["k"] == r["k"]
                })
                .unwrap()
        };
        let fp8_row = same("fp8");
        let measured = [num(r, "ms") / 1e3, num(fp8_row, "ms") / 1e3];
        let predicted = [bf16.gemm_s(m, n, k, 1), fp8.gemm_s(m, n, k, 1)];
        for i in 0..2 {
            errors[i].push((predicted[i] / measured[i]).ln());
        }
        speedups.push((predicted[0] / predicted[1]) / (measured[0] / measured[1]));
    }
    assert_eq!(speedups.len(), 169);
    let (bf16_bias, bf16_abs) = log_errors(&errors[0]);
    let (fp8_bias, fp8_abs) = log_errors(&errors[1]);
    assert!(
        bf16_abs < 0.13 && bf16_bias.abs() < 0.12,
        "bf16 {bf16_bias:+.3} / {bf16_abs:.3}"
    );
    assert!(
        fp8_abs < 0.15 && fp8_bias.abs() < 0.12,
        "fp8 {fp8_bias:+.3} / {fp8_abs:.3}"
    );
    // FP8's speed-up over bf16, shape by shape: the model's is the measured one (median).
    speedups.sort_by(f64::total_cmp);
    let median = speedups[speedups.len() / 2];
    assert!(
        (median - 1.0).abs() < 0.03,
        "predicted / measured fp8 speed-up {median:.3}"
    );
}

#[test]
fn sustained_clock_matches_thirty_seconds_of_gemms() {
    // 8192³ GEMMs back to back for 30 s (bf16) and 15 s (fp8): the SM clock settled at
    // 1,485 / 1,365 MHz of 1,980 under the 700 W cap.
    let sustained = |dtype: &str| {
        let rates: Vec<f64> = rows("sustained")
            .iter()
            .filter(|r| r["dtype"] == dtype)
            .map(|r| num(r, "tflops"))
            .collect();
        rates.iter().sum::<f64>() / rates.len() as f64
    };
    let (bf16, fp8) = (device(Dtype::Bf16), device(Dtype::Fp8));
    let s = |d: &DeviceModel| d.gemm_s(8192, 8192, 8192, 1);
    // Sustained over burst: the burst 8192³ GEMM of the built-in H200 profile ran at
    // 780.7 TFLOP/s on the same kind of GPU.
    let burst = plait_cost::Profile::builtin_h200()
        .gemm
        .iter()
        .find(|g| g.m == 8192 && g.n == 8192 && g.k == 8192)
        .map(|g| 2.0 * 8192f64.powi(3) / g.time_s / 1e12)
        .unwrap();
    let measured = sustained("bf16") / burst;
    let modelled = bf16.gemm_burst_s(8192, 8192, 8192, 1) / s(&bf16);
    assert!(
        (modelled / measured - 1.0).abs() < 0.03,
        "{modelled:.3} vs {measured:.3}"
    );
    // FP8 over bf16 at the power cap.
    let measured = sustained("fp8") / sustained("bf16");
    let modelled = s(&bf16) / s(&fp8);
    assert!(
        (modelled / measured - 1.0).abs() < 0.05,
        "{modelled:.3} vs {measured:.3}"
    );
}

#[test]
fn contention_follows_the_thread_blocks_a_collective_holds() {
    // A copy kernel of 16 or 24 thread blocks (NCCL's channels across and inside nodes)
    // streaming HBM beside a stream of GEMMs: the GEMMs slow by about the share of SMs the
    // blocks hold, which is the model's central slowdown.
    let sms = device(Dtype::Bf16).sms();
    for ctas in [16.0, 24.0] {
        let slowdowns: Vec<f64> = rows("contention")
            .iter()
            .filter(|r| r["ctas"].as_f64() == Some(ctas))
            .map(|r| num(r, "slowdown"))
            .collect();
        assert_eq!(slowdowns.len(), 2);
        let measured = slowdowns.iter().sum::<f64>() / 2.0;
        let model = contention_per_overlap_s(1, ctas, sms);
        assert!(
            (model - measured).abs() < 0.03,
            "{ctas} blocks: {model:.3} vs {measured:.3}"
        );
        // The pessimistic end covers both GEMM shapes.
        let worst = slowdowns.iter().cloned().fold(0.0, f64::max);
        assert!(contention_per_overlap_s(2, ctas, sms) > worst);
    }
}

#[test]
fn grouped_expert_gemms_with_enough_tokens() {
    // Expert GEMMs of Mixtral, DeepSeek-V3, Qwen3-MoE and GPT-OSS shapes through
    // torch._grouped_mm. With 1,024 or more tokens per expert the grouped GEMM runs like a
    // dense one, and the model is as far from it as from the dense GEMMs above (log error
    // +0.138, mean |·| 0.169). At 256 tokens of a small expert (Qwen3-30B-A3B, fc2
    // 2048×768) a call takes 55 µs for 6 GFLOP, 11 µs more than the dense GEMM of the same
    // FLOPs timed the same way: both are mostly the call's own launch, since each was timed
    // alone after a synchronisation; inside a step such kernels run at their host issue
    // time (`KERNEL_DISPATCH_S`), and these rows are left out.
    let bf16 = device(Dtype::Bf16);
    let mut errors = vec![];
    for r in rows("grouped")
        .iter()
        .filter(|r| num(r, "tokens_per_expert") >= 1024.0)
    {
        let (e, t) = (num(r, "experts") as u64, num(r, "tokens_per_expert") as u64);
        let (n, k) = (num(r, "n") as u64, num(r, "k") as u64);
        errors.push((bf16.gemm_s(t, n, k, e) / (num(r, "grouped_ms") / 1e3)).ln());
    }
    assert_eq!(errors.len(), 28);
    let (bias, abs) = log_errors(&errors);
    assert!(abs < 0.19 && bias.abs() < 0.16, "{bias:+.3} / {abs:.3}");
}

/// One rank's share of torch's `context_parallel` ring (causal, head-tail load balance) at
/// 32K local tokens, run on a fake process group so that only its kernels and merges count:
/// plait costs it as the flash kernel at the local length over all the keys the rank sees,
/// plus the fp32 merges of `CpMerge::PYTORCH_FP32`, and the sum must hold at every cp.
#[test]
fn context_parallel_ring_costs_its_kernels_and_merges() {
    let ring = rows("ring");
    assert_eq!(
        ring.len(),
        26,
        "2 head counts × (cp 1 + 3 cp × 2 rotations × 2 ranks)"
    );
    let d = device(Dtype::Bf16);
    let merge = CpMerge::PYTORCH_FP32;
    let mut errors = vec![];
    for r in &ring {
        let (cp, seq) = (num(r, "cp"), num(r, "local_seq"));
        let (f, b) = d.attention_s(
            AttentionKernel::Flash2,
            num(r, "fwd_flops"),
            seq,
            num(r, "head_dim"),
            true,
            num(r, "heads"),
            1,
        );
        let (f, b) = if cp > 1.0 {
            let out = seq * num(r, "heads") * num(r, "head_dim");
            (
                f + d.memory_s(out * (merge.forward_fixed + (cp - 1.0) * merge.forward_per_step)),
                b + d.memory_s(out * (merge.backward_fixed + cp * merge.backward_per_step)),
            )
        } else {
            (f, b)
        };
        for (got, ms) in [(f, num(r, "fwd_ms")), (f + b, num(r, "fwd_bwd_ms"))] {
            let err = (got / (ms / 1e3)).ln();
            assert!(err.abs() < 0.10, "{r}: {:+.1} %", 100.0 * err);
            errors.push(err);
        }
    }
    let (signed, mean) = log_errors(&errors);
    eprintln!("ring: mean |log error| {mean:.3}, signed {signed:+.3}");
    assert!(mean < 0.05 && signed.abs() < 0.05, "{mean} {signed}");
}

/// torchtitan's loss, `F.cross_entropy(pred.float(), labels)`, at its peak over forward and
/// backward: the bytes per logit above the 16-bit logits (their gradient included) that
/// plait's `CrossEntropy` kinds hold — eager (what it saves and its backward's working
/// set), compiled (the logits it keeps are the baseline; its working set) and under
/// `loss_parallel` on a vocabulary shard.
#[test]
fn cross_entropy_holds_the_measured_bytes_per_logit() {
    use plait_cost::engine::CrossEntropy;
    let loss = rows("loss");
    let measured = |variant: &str| {
        let peaks: Vec<f64> = loss
            .iter()
            .filter(|r| r["variant"] == variant)
            .map(|r| num(r, "peak_above_logits_bytes_per_logit"))
            .collect();
        assert!(!peaks.is_empty(), "{variant}");
        peaks.iter().cloned().fold(f64::MIN, f64::max)
    };
    let eager = CrossEntropy::TORCH;
    let parallel = CrossEntropy::TORCH_LOSS_PARALLEL;
    for (variant, model) in [
        ("eager", eager.saved_bytes + eager.transient_bytes),
        ("compiled", CrossEntropy::COMPILED.transient_bytes),
        (
            "loss_parallel",
            parallel.saved_bytes + parallel.transient_bytes,
        ),
    ] {
        let got = measured(variant);
        assert!(
            (got - model).abs() < 0.05,
            "{variant}: measured {got}, plait {model}"
        );
    }
}

/// Forward plus backward seconds plait gives one compiled torchtitan Llama 3.1 8B block of
/// `mbs` × `seq` tokens without tensor parallelism on an H200 (`burst`: at its boost clock,
/// as a block timed alone runs).
fn titan_8b_block_s(dtype: Dtype, sdpa: plait_spec::Sdpa, mbs: u64, seq: u64, burst: bool) -> f64 {
    let t = plait_spec::TrainSpec {
        dtype,
        sdpa,
        ..plait_spec::TrainSpec::new(mbs, seq)
    };
    let (forward, backward) = titan_8b_block_phases(t, 1, burst);
    forward + backward
}

/// Forward and backward compute seconds of one compiled torchtitan Llama 3.1 8B block of
/// `t`'s micro-batch on an H200, at one rank's share of tensor parallelism `tp` (its
/// GEMMs split, every token present; collectives left out, as a block timed alone on one
/// GPU runs them).
fn titan_8b_block_phases(t: plait_spec::TrainSpec, tp: u64, burst: bool) -> (f64, f64) {
    use plait_cost::estimate::layer_costs;
    use plait_cost::{comm::Groups, layer::Workload};
    use plait_spec::{cluster_preset, model_preset, Engine, ParallelConfig, TrainSpec};
    let mut cluster = cluster_preset("dgx-h200").unwrap();
    if burst {
        cluster.gpu.sustained_clock_ratio = 1.0;
    }
    let d = DeviceModel::new(&cluster.gpu, t.dtype).unwrap();
    let c: ParallelConfig = format!("dp1 tp{tp} mbs{} zero3", t.gbs).parse().unwrap();
    let t = TrainSpec {
        engine: Engine::Torchtitan,
        compile: true,
        ..t
    };
    let m = model_preset("llama3-8b").unwrap();
    let b = layer_costs(&m, &d, &Groups::new(&cluster, &c), &Workload::new(&c, &t)).block;
    (b.forward.compute_s, b.backward.compute_s)
}

/// The same block under torchao's row-wise float8 recipe (`"variant":
/// "float8_rowwise_compiled"`) against its tensor-wise one, at 2 × 8K tokens without tensor
/// parallelism and at one rank's share of tp 8 (4 × 8K tokens): the backward's extra time,
/// which `ROWWISE_BACKWARD_QUANTISE_S_PER_ELEMENT` prices per element of the linear
/// modules' inputs, weights and output gradients, within 2 % of the measured 13.2 and
/// 10.1 ms at both shapes (whose GEMM work differs 4×); the forwards agree within 3 % of the
/// block (measured −0.25 and +0.03 ms), as plait's recipes cost the forward alike.
#[test]
fn rowwise_float8_backward_follows_the_activations() {
    use plait_spec::{Float8Recipe, TrainSpec};
    for (tp, mbs) in [(1, 2), (8, 4)] {
        let measured = |variant: &str| {
            let r = rows("block")
                .into_iter()
                .find(|r| {
                    r["variant"] == variant
                        && r["tp"] == tp
                        && r["batch"] == mbs
                        && r["run"].is_null()
                })
                .unwrap();
            let (fwd, fwd_bwd) = (num(&r, "fwd_ms"), num(&r, "fwd_bwd_ms"));
            (fwd, fwd_bwd - fwd)
        };
        let (tensor_fwd, tensor_bwd) = measured("float8_compiled");
        let (row_fwd, row_bwd) = measured("float8_rowwise_compiled");
        let plait = |float8_recipe| {
            let t = TrainSpec {
                dtype: Dtype::Fp8,
                float8_recipe,
                ..TrainSpec::new(mbs, 8192)
            };
            titan_8b_block_phases(t, tp, false)
        };
        let (pt_fwd, pt_bwd) = plait(Some(Float8Recipe::Tensorwise));
        let (pr_fwd, pr_bwd) = plait(Some(Float8Recipe::Rowwise));
        let (measured_extra, predicted_extra) = (row_bwd - tensor_bwd, (pr_bwd - pt_bwd) * 1e3);
        assert!(
            (predicted_extra / measured_extra - 1.0).abs() < 0.02,
            "tp {tp}: row-wise backward +{predicted_extra:.2} ms in plait, +{measured_extra:.2} ms measured"
        );
        let block = tensor_fwd + tensor_bwd;
        assert!(((pr_fwd - pt_fwd) * 1e3 - (row_fwd - tensor_fwd)).abs() < 0.03 * block);
    }
}

/// One Llama 3.1 8B block as torchtitan writes it, compiled, forward and backward on the
/// H200 (`"kind": "block"`: torchao 0.18's float8 tensorwise recipe against bf16, 2 × 8,192
/// tokens, no tensor parallelism): plait's torchtitan block gives float8 the measured gain.
/// Not yet held: at one rank's share of tp 8 (4 × 8,192 tokens) the measured gain is 1.05×
/// (0.93× in another run) against plait's 1.23×; there the profiler's GEMM totals
/// (`"run": "kernels"`: 7.2 ms bf16, 4.0 ms float8 per block) are 25 % and 38 % below
/// plait's, and the casts' fused kernels add 1.9 ms to the bf16 block's 2.0 ms of
/// element-wise work, where plait counts 1.1 ms.
#[test]
fn float8_gain_on_a_compiled_torchtitan_block() {
    use plait_spec::Sdpa;
    let measured = |variant: &str| {
        let r = rows("block")
            .into_iter()
            .find(|r| {
                r["variant"] == variant && r["tp"] == 1 && r["seq"] == 8192 && r["run"].is_null()
            })
            .unwrap();
        num(&r, "fwd_bwd_ms")
    };
    let block = |dtype| titan_8b_block_s(dtype, Sdpa::Flash, 2, 8192, false);
    let predicted = block(Dtype::Bf16) / block(Dtype::Fp8);
    let measured = measured("bf16_compiled") / measured("float8_compiled");
    assert!(
        (predicted / measured - 1.0).abs() < 0.05,
        "float8 gain: plait {predicted:.3}, measured {measured:.3}"
    );
}

/// The same block in bf16, timed in short bursts (the GPU at its boost clock, so the model
/// without its sustained-clock factor) with PyTorch 2.11's default SDPA backend, cuDNN
/// (`Sdpa::Cudnn`): plait's whole torchtitan block, GEMMs, element-wise chains and
/// attention, within 6 % at 2 × 8K and 1 × 32K tokens (−3.5 % and −4.3 % today). Not held:
/// float8 at 1 × 32K (plait −12 %; the float8 blocks varied up to 17 % between two runs)
/// and tp 8's share (bf16 +8 %, float8 −18 %; see `float8_gain_on_a_compiled_torchtitan_block`).
#[test]
fn compiled_torchtitan_bf16_block_at_burst_with_cudnn_attention() {
    let blocks: Vec<Value> = rows("block")
        .into_iter()
        .filter(|r| r["variant"] == "bf16_compiled" && r["tp"] == 1 && r["run"].is_null())
        .collect();
    assert_eq!(blocks.len(), 2, "2 x 8K and 1 x 32K tokens");
    for r in &blocks {
        let (mbs, seq) = (num(r, "batch") as u64, num(r, "seq") as u64);
        let predicted = titan_8b_block_s(Dtype::Bf16, plait_spec::Sdpa::Cudnn, mbs, seq, true);
        let err = predicted / (num(r, "fwd_bwd_ms") / 1e3) - 1.0;
        assert!(err.abs() < 0.06, "{r}: {:+.1} %", 100.0 * err);
    }
}
