//! The cost model per engine, against the published tables it carries and against the
//! mechanisms each engine profile names (what overlaps, what runs in fp8, what a collective
//! costs at scale).

use plait_cost::calibration::{builtin_tables, evaluate, TableResult};
use plait_cost::comm::Group;
use plait_cost::layer::{block_cost, Workload};
use plait_cost::{device_for, estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, Engine, ParallelConfig, TrainSpec};

fn results() -> Vec<TableResult> {
    builtin_tables()
        .unwrap()
        .iter()
        .map(|t| evaluate(t).unwrap())
        .collect()
}

/// `check(table, mean |error| bound, mean signed error bound)`: the bounds each table holds
/// today (README's Accuracy section prints the same numbers with `plait validate`).
fn check(results: &[TableResult], name_part: &str, mean_abs: f64, mean_signed: f64) {
    let t = results
        .iter()
        .find(|t| t.name.contains(name_part))
        .unwrap_or_else(|| panic!("no table {name_part}"));
    let report: String = t
        .rows
        .iter()
        .map(|r| format!("{}: {:+.1} %\n", r.label, 100.0 * r.error()))
        .collect();
    assert!(
        t.mean_abs_error() <= mean_abs,
        "{}: mean |error| {:.2} % > {:.1} %\n{report}",
        t.name,
        100.0 * t.mean_abs_error(),
        100.0 * mean_abs
    );
    assert!(
        t.mean_signed_error().abs() <= mean_signed,
        "{}: mean signed error {:+.2} %\n{report}",
        t.name,
        100.0 * t.mean_signed_error()
    );
}

#[test]
fn published_tables_within_their_bounds() {
    let r = results();
    check(&r, "SC'21", 0.03, 0.02);
    check(&r, "PyTorch FSDP, A100)", 0.065, 0.05);
    // The A100 40GB section, never used to set a constant: 5.0 %, signed −3.5 %, 78 runs; the
    // 13B runs on one node with 16 micro-batches −10 … −12 %, the 125M runs at 2K −7 … −15 %.
    check(&r, "PyTorch FSDP, A100 40GB", 0.055, 0.04);
    // llm-foundry's H100 sections: 5.7 % today, signed −5.2 %: the runs at 128–512 GPUs
    // without recomputation 7–18 % too fast (a shortfall that grows with the GPU count),
    // the runs at 16K–64K tokens, where attention is most of the step, −4 … +2 %.
    check(&r, "PyTorch FSDP, H100", 0.07, 0.06);
    // NeMo: 6.3 %, signed −4.0 %. The dense pre-training rows are −4.5 … +5.5 %; the
    // fine-tuning rows cost attention within SQuAD's packed samples
    // (`SQUAD_PACKED_SAMPLE_TOKENS`) and SFT keeps Adam's state in bf16 as the launcher's
    // config does: 13B SFT +1.7 %, LoRA −0.6 … −6.1 %, 7B SFT −15.6 % (its measured
    // throughput equals pre-training's despite a sixth less work); Mixtral on Blackwell
    // −11 … −27 %. A regression guard, not yet the target of 5 %.
    check(&r, "NeMo (", 0.07, 0.06);
    // Every run NVIDIA published ran, so each must fit (70B SFT on 16 H100 at dp 1 fits
    // only with the optimizer's bf16 state: 85.0 GiB of 80 with fp32 state).
    let nemo = r.iter().find(|t| t.name.contains("NeMo (")).unwrap();
    let refused: Vec<&str> = nemo
        .rows
        .iter()
        .filter(|row| !row.fits)
        .map(|row| row.label.as_str())
        .collect();
    assert!(
        refused.is_empty(),
        "published NeMo runs that do not fit: {refused:?}"
    );
    // NeMo's dense FP8 pre-training on Blackwell: 11.5 %, signed −9.9 %, over 17 runs:
    // 25.02 on B200 (delayed scaling) −3.0 … −23.3 % (mean −13.5 %), 25.04 on GB200 (current
    // scaling) −17.3 … +6.8 %, 25.07 on both −26.4 … +4.6 % (Llama 3 8B +2.4 / +4.6 %; the
    // same plan ran 17 % more tokens per second on B200 in 25.07 than in 25.02). Too fast; a
    // regression guard.
    check(&r, "NeMo dense on Blackwell", 0.13, 0.12);
    // NeMo's long-context runs (4K–1,024K tokens): 1.3 %, signed +0.9 %; the 1,024K row is
    // where Transformer Engine's attention rate was measured (`TE_FUSED_OVER_FA2`, against
    // the H200's FlashAttention-2), the other eight check it.
    check(&r, "NeMo long context", 0.02, 0.02);
    // torchtitan's benchmarks: 7.5 %, signed −5.7 %, over 32 runs. On the H200 (compiled,
    // float8 with FSDP's fp8 all-gather, op-level selective recompute) −3.4 % and −5.0 %. On Grand Teton's 500 W H100s
    // (peak taken midway between the SXM's and the NVL's, as torchtitan's documents place
    // it): 70B and 405B without context parallelism −6.4 … +5.9 %, 8B −3.4 … −14.4 %,
    // 405B with context parallelism over nodes −3.9 … −12.5 %, 8B with it on one node
    // −5.1 … −32.1 %, the shortfall growing with cp; float8 row-wise (8B and 70B at tp 8)
    // +2.4 … +6.6 %. A regression guard, not yet the target of 5 %.
    check(&r, "torchtitan", 0.085, 0.07);
    // Megatron-Bridge's performance summaries (NeMo 25.09–26.08, 277 runs, nothing fitted):
    // 17.1 %, signed −12.1 %. Dense 9.8 % (−0.2 %, 89 runs; CUDA graphs at plait's defaults,
    // the Megatron-FSDP runs offloading the blocks their recipes name). MoE 20.5 % (−17.8 %,
    // 188 runs), 177 of them with the dispatcher, all-to-all overlap and selective recompute
    // their recipe set at the release's tag, DeepSeek-V3's and Kimi K2's pipeline layouts,
    // and Nemotron 3 Super's two bf16 MTP passes and NVFP4 bf16 blocks
    // (`megatron_bridge_recipes.csv`; DeepSeek-V3 at ep 32 over four B200 nodes +171 % before
    // its DeepEP and overlap, +11 % with them and its layout). B300's faster attention
    // (`BLACKWELL_ULTRA_ATTENTION`) took GB300's dense runs +8.1 → +5.5 % and the signed mean
    // −11.3 → −12.1 %. By model: DeepSeek-V3 −26 … +20 % (mean +0.1 %), Kimi K2 −10 … −5 %,
    // Qwen3 −67 … +10 %, GPT-OSS 120B −54 … −15 %, Nemotron 3 Nano −30 … −4 % and Super
    // −46 … −7 %: the fine-grained experts run eager far slower than their kernels (Qwen3
    // 30B-A3B on 8 B200, MXFP8: 8.8 ms per layer and micro-batch of 4K tokens in 26.02,
    // 12.7 ms of 16K in 26.04: host-bound) and plait has no host cost of Megatron's eager MoE
    // layer to charge. A regression guard.
    check(&r, "Megatron-Bridge (NeMo", 0.175, 0.125);
    // Their fine-tuning runs (NeMo 26.06, Llama 3 70B, 10 runs; the recipes' settings traced
    // at v0.5.0 in `megatron_bridge_finetuning.csv`): 9.7 %, signed −9.6 %. SFT FP8-CS
    // −3.9 … −7.3 %, MXFP8 −13.4 / −13.5 % (measured 7–12 % slower than FP8-CS on the same
    // plans, plait 2–3 % slower: MXFP8's 16-bit weight gather and its cast inside the
    // forward, `estimate::weights`); LoRA on GB300 and H100 +0.1 … −5.9 %, on GB200 −20 %
    // (measured 1.2× GB300's time, plait the same time: GB300's gain over GB200 at equal
    // FP8 peaks is not modelled). Every run fits. A regression guard.
    check(&r, "Megatron-Bridge fine-tuning", 0.10, 0.10);
    let finetuning = r
        .iter()
        .find(|t| t.name.contains("Megatron-Bridge fine-tuning"))
        .unwrap();
    assert!(finetuning.rows.iter().all(|row| row.fits));
    // Its one pair 10 % apart or more (SFT on 32 GB300, MXFP8 against FP8-CS) in the
    // measured order.
    assert_eq!(finetuning.pairs_ordered(), (1, 1));
    // Their peak memory (the allocator's peak reserved bytes, 20 runs): 8.4 % today; 8B
    // −13 … +4 %, 70B −19 / −14 % (torchtitan's loss-parallel loss in fp32 ops), 405B
    // pipelined −18 … +2 % (7.2 % and −13 … +2 % while plait gave the first stage one of the
    // extra blocks torchtitan gives the middle ones: the first stage's in-flight activations
    // are underestimated).
    let titan = r.iter().find(|t| t.name.contains("torchtitan")).unwrap();
    let memory = titan.memory_mean_abs_error().unwrap();
    assert!(memory < 0.09, "torchtitan memory |error| {memory}");
}

#[test]
fn pipelined_fsdp2_keeps_the_stage_gathered_and_its_gradients_unsharded() {
    // Llama 3.1 405B on 512 GPUs, FSDP 8 × TP 8 × PP 8 (torchtitan's 3D benchmark): under
    // pipelining torchtitan keeps each stage's weights gathered (`reshard_after_forward = not
    // pp_enabled`) and torch's pipeline stage defers the gradient reduce-scatter to the last
    // backward, the unsharded gradients in fp32 meanwhile. Megatron's distributed optimizer
    // under ZeRO-3 keeps only the shards.
    let m = model_preset("llama3-405b").unwrap();
    let cluster = cluster_preset("grand-teton-h100").unwrap();
    let c: ParallelConfig = "dp8 tp8 pp8 mbs4 zero3 sp recompute=full".parse().unwrap();
    let run = |engine| {
        let t = TrainSpec {
            engine,
            ..TrainSpec::new(256, 8192)
        };
        let d = device_for(&cluster, t.dtype).unwrap();
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let (titan, megatron) = (run(Engine::Torchtitan), run(Engine::Megatron));
    let stage = &titan.stages[0];
    // The stage's parameters on this GPU (its tp share): 16-bit weights, fp32 gradients.
    let params = stage.params;
    assert!(
        stage.memory.weights_bytes > 2.0 * params,
        "{}",
        stage.memory.weights_bytes
    );
    assert!(
        stage.memory.gradients_bytes > 4.0 * params,
        "{}",
        stage.memory.gradients_bytes
    );
    let sharded = &megatron.stages[0].memory;
    assert!(sharded.weights_bytes < 2.0 * params / 4.0);
    assert!(sharded.gradients_bytes < 4.0 * params / 4.0);
}

/// Llama 3.1 8B under torchtitan with FSDP over `gpus` GPUs of `cluster`, local batch
/// `mbs`, seq 8192, op-level selective recompute: the step time. `compile_loss`: whether
/// the compile covers the loss too (`TrainSpec::compile_loss`).
fn torchtitan_8b(
    cluster: &str,
    gpus: u64,
    mbs: u64,
    dtype: Dtype,
    compile: bool,
    compile_loss: bool,
) -> f64 {
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset(cluster).unwrap();
    let c = ParallelConfig {
        dp: gpus,
        mbs,
        zero: 3,
        recompute: plait_spec::Recompute::Selective,
        ..ParallelConfig::default()
    };
    let t = TrainSpec {
        engine: Engine::Torchtitan,
        dtype,
        compile,
        compile_loss,
        ..TrainSpec::new(mbs * gpus, 8192)
    };
    let d = device_for(&cluster, dtype).unwrap();
    estimate(&m, &cluster, &t, &c, &d).unwrap().iteration_time_s
}

/// torchtitan's eager and compiled Llama 3.1 8B runs of its H100 benchmark
/// (`benchmarks/llama3_h100_202412_torchtitan.md`, Tables 1 and 3: FSDP, local batch 2,
/// seq 8192, op-level selective recompute), costed on DGX H100s: only the ratios between
/// rows are compared here (`plait validate` costs the absolute times on their hosts, the
/// `grand-teton-h100` preset). torchtitan 9dec370 compiled the blocks alone; its loss
/// stayed eager.
fn torchtitan_h100_8b(gpus: u64, dtype: Dtype, compile: bool) -> f64 {
    torchtitan_8b("dgx-h100", gpus, 2, dtype, compile, false)
}

#[test]
fn torchtitan_compile_and_float8_speed_ups_match_its_benchmark() {
    // Measured tokens/s per GPU: eager 5,762 and 5,605, compiled 6,667 and 6,514, compiled
    // with float8 8,532 and 8,380 (8 and 128 GPUs).
    for (gpus, eager, compiled, float8) in
        [(8, 5762.0, 6667.0, 8532.0), (128, 5605.0, 6514.0, 8380.0)]
    {
        let bf16 = torchtitan_h100_8b(gpus, Dtype::Bf16, true);
        let compile = torchtitan_h100_8b(gpus, Dtype::Bf16, false) / bf16;
        let fp8 = bf16 / torchtitan_h100_8b(gpus, Dtype::Fp8, true);
        let (compile_measured, fp8_measured) = (compiled / eager, float8 / compiled);
        println!(
            "{gpus} GPUs: compile {compile:.3}× (measured {compile_measured:.3}×), float8 {fp8:.3}× (measured {fp8_measured:.3}×)"
        );
        // Eager norms, RoPE and SwiGLU fused by inductor, the loss left eager as 9dec370
        // left it: 1.139× and 1.140× today.
        assert!(
            (compile / compile_measured - 1.0).abs() < 0.03,
            "compile {compile}"
        );
        // 1.246× and 1.248× today.
        assert!((fp8 / fp8_measured - 1.0).abs() < 0.05, "float8 {fp8}");
    }
}

#[test]
fn torchtitan_async_tp_speed_ups_match_its_benchmark() {
    // torchtitan's async-TP benchmark (`benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`,
    // Grand Teton H100s, compiled): tokens/s per GPU with vanilla and async TP, bf16 and
    // float8 tensorwise. Llama 3 70B: FSDP 32 × TP 8, full recompute, local batch 16;
    // Llama 3 8B: FSDP 8 × TP 8, op-level selective recompute, local batch 12.
    let run = |model: &str, dp: u64, mbs: u64, recompute, dtype, async_tp| {
        let m = model_preset(model).unwrap();
        let cluster = cluster_preset("dgx-h100").unwrap();
        let c = ParallelConfig {
            dp,
            tp: 8,
            sp: true,
            mbs,
            zero: 3,
            recompute,
            ..ParallelConfig::default()
        };
        let t = TrainSpec {
            engine: Engine::Torchtitan,
            dtype,
            compile: true,
            async_tp,
            ..TrainSpec::new(dp * mbs, 8192)
        };
        let d = device_for(&cluster, dtype).unwrap();
        estimate(&m, &cluster, &t, &c, &d).unwrap().iteration_time_s
    };
    use plait_spec::Recompute::{Full, Selective};
    for (model, dp, mbs, recompute, dtype, vanilla, asynchronous) in [
        ("llama3-70b", 32, 16, Full, Dtype::Bf16, 597.3, 652.4),
        ("llama3-70b", 32, 16, Full, Dtype::Fp8, 809.8, 942.4),
        ("llama3-8b", 8, 12, Selective, Dtype::Bf16, 4378.0, 4809.4),
        ("llama3-8b", 8, 12, Selective, Dtype::Fp8, 5078.1, 5570.1),
    ] {
        let speedup = run(model, dp, mbs, recompute, dtype, false)
            / run(model, dp, mbs, recompute, dtype, true);
        let measured = asynchronous / vanilla;
        println!("{model} {dtype:?}: async TP {speedup:.3}× (measured {measured:.3}×)");
        // Only the forward's collectives are pipelined: 1.113 / 1.107 / 1.090 / 1.058×
        // today against 1.092 / 1.164 / 1.099 / 1.097× measured.
        assert!(
            (speedup / measured - 1.0).abs() < 0.06,
            "{model} {dtype:?}: {speedup}"
        );
        assert!(speedup > 1.03, "{model} {dtype:?}: {speedup}");
    }
}

#[test]
fn torchtitan_selective_recompute_reruns_every_other_matmul() {
    // Megatron's selective recompute reruns the attention core; torchtitan's op-level
    // policy keeps the attention output and reruns half the matmuls and the elementwise
    // ops: more recompute, less memory than keeping everything, more than full recompute.
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let run = |engine, recompute| {
        let c = ParallelConfig {
            dp: 8,
            mbs: 2,
            zero: 3,
            recompute,
            ..ParallelConfig::default()
        };
        let t = TrainSpec {
            engine,
            ..TrainSpec::new(16, 8192)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    use plait_spec::Recompute::{Full, None, Selective};
    let (keep, op, full) = (
        run(Engine::Torchtitan, None),
        run(Engine::Torchtitan, Selective),
        run(Engine::Torchtitan, Full),
    );
    let megatron = run(Engine::Megatron, Selective);
    let act = |e: &plait_cost::Estimate| e.memory.activations_bytes;
    assert!(act(&full) < act(&op) && act(&op) < act(&keep));
    let (op_s, full_s) = (op.breakdown.recompute_s, full.breakdown.recompute_s);
    // wk, wo and w3 of 7 matmuls: about 37 % of the forward's GEMM work, plus the norms,
    // RoPE and SwiGLU; the attention kernel is not rerun.
    assert!(
        op_s > 0.25 * full_s && op_s < 0.8 * full_s,
        "{op_s} vs {full_s}"
    );
    assert!(op_s > megatron.breakdown.recompute_s, "{op_s}");
}

#[test]
fn every_band_holds_its_centre_and_is_not_degenerate() {
    for t in results() {
        for r in &t.rows {
            assert!(
                r.predicted_low_s <= r.predicted_step_s && r.predicted_step_s <= r.predicted_high_s,
                "{}: {} ≤ {} ≤ {}",
                r.label,
                r.predicted_low_s,
                r.predicted_step_s,
                r.predicted_high_s
            );
            assert!(r.predicted_high_s > r.predicted_low_s, "{}", r.label);
        }
        // Skipped rows say why.
        assert!(t.skipped.iter().all(|s| !s.reason.is_empty()));
    }
}

#[test]
fn sc21_table2_zero3_against_ptd_p() {
    // SC'21 Table 2: GPT-3 175B at batch 1536, ZeRO-3 (DeepSpeed of 2021) against PTD-P
    // (Megatron-LM tp 8 × pp 12) on the same GPUs.
    let table =
        plait_cost::calibration::sc21_table2(include_str!("../data/megatron_sc21_table2.csv"))
            .unwrap();
    let result = plait_cost::calibration::evaluate(&table).unwrap();
    let time = |scheme: &str, gpus: u64| {
        let r = result
            .rows
            .iter()
            .find(|r| r.label.starts_with(scheme) && r.label.ends_with(&format!(" on {gpus}")))
            .unwrap();
        (r.predicted_step_s, r.measured_step_s)
    };
    let mut zero3 = vec![];
    for gpus in [384, 768, 1536] {
        let ((z, zm), (p, pm)) = (time("zero3", gpus), time("ptdp", gpus));
        println!(
            "{gpus:5} GPUs: ZeRO-3 {z:.1} s (measured {zm:.1}, {:+.1} %), PTD-P {p:.1} s (measured {pm:.1}, {:+.1} %)",
            100.0 * (z / zm - 1.0),
            100.0 * (p / pm - 1.0),
        );
        // Each within 15 % of its measurement (the ZeRO-3 model was 25–65 % too fast
        // before the per-rank host work of 2021's list collectives was modelled).
        assert!(
            (z / zm - 1.0).abs() < 0.15,
            "{gpus} GPUs: ZeRO-3 {z} s vs {zm} s"
        );
        assert!(
            (p / pm - 1.0).abs() < 0.08,
            "{gpus} GPUs: PTD-P {p} s vs {pm} s"
        );
        // Wherever the measured times differ by ≥ 10 %, the order is the measured one.
        if zm > 1.1 * pm {
            assert!(
                z > 1.1 * p,
                "{gpus} GPUs: ZeRO-3 {z} s should lose to PTD-P {p} s"
            );
        }
        zero3.push(z);
    }
    // The table's own count of pairs measured ≥ 10 % apart agrees: every one in order.
    let (ordered, pairs) = result.pairs_ordered();
    assert!(pairs >= 2 && ordered == pairs, "{ordered} of {pairs}");
    // Doubling the GPUs at a fixed batch halves the compute but not the gathers, whose host
    // work grows with the ranks: the ZeRO-3 step no longer shrinks from 768 to 1536 GPUs.
    assert!(zero3[2] > 0.9 * zero3[1], "{zero3:?}");
}

#[test]
fn deepspeed_zero1_reduces_after_the_backward_megatron_overlaps() {
    let m = model_preset("llama2-7b").unwrap();
    let cluster = cluster_preset("dgx-a100-80g").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c = ParallelConfig {
        dp: 64,
        mbs: 2,
        zero: 1,
        ..ParallelConfig::default()
    };
    let at = |engine| {
        let t = TrainSpec {
            engine,
            ..TrainSpec::new(512, 4096)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let (mega, ds) = (at(Engine::Megatron), at(Engine::Deepspeed));
    assert!(
        ds.breakdown.dp_comm_exposed_s > 2.0 * mega.breakdown.dp_comm_exposed_s,
        "{} vs {}",
        ds.breakdown.dp_comm_exposed_s,
        mega.breakdown.dp_comm_exposed_s
    );
}

#[test]
fn fp8_speeds_up_the_block_linears_only() {
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let c = ParallelConfig {
        dp: 8,
        mbs: 1,
        zero: 1,
        ..ParallelConfig::default()
    };
    let time = |dtype| {
        let t = TrainSpec {
            dtype,
            ..TrainSpec::new(64, 8192)
        };
        let e = estimate(&m, &cluster, &t, &c, &device_for(&cluster, dtype).unwrap()).unwrap();
        e.iteration_time_s
    };
    let speedup = time(Dtype::Bf16) / time(Dtype::Fp8);
    // Attention, the LM head, norms and casts keep fp8 well short of the 2× tensor peak.
    assert!((1.1..1.6).contains(&speedup), "fp8 speed-up {speedup}");
}

#[test]
fn nccl_rings_pay_latency_per_step_across_nodes() {
    let c = cluster_preset("dgx-a100-80g").unwrap();
    // 1536 ranks, 8 per node: 1344 steps inside nodes, 191 across.
    let big = Group::place(&c, 1536, 1);
    let small = Group::place(&c, 8, 1);
    assert_eq!(big.nodes, 192);
    // A tiny all-gather: latency only, thousands of µs at 1536 ranks, tens inside a node.
    assert!(big.all_gather_s(1e3) > 1e-3, "{}", big.all_gather_s(1e3));
    assert!(
        small.all_gather_s(1e3) < 5e-5,
        "{}",
        small.all_gather_s(1e3)
    );
}

#[test]
fn torchtitan_mxfp8_casts_read_their_input_twice() {
    // torchao's MX training benchmark (pytorch/ao `torchao/prototype/mx_formats/README.md`,
    // copied into torchtitan b5bcd76 `components/quantization/mxfp8.md`): Llama 3 8B on 8
    // power-limited B200, local batch 1, seq 8192, compiled, FSDP2, per-op SAC — bf16
    // 8,307.5 tokens/s, mxfp8 (cuBLAS) 9,969.0 (1.200×), float8 tensorwise 10,417.0
    // (1.254×). The power limit is not published, so only the ratios are compared.
    // torchao casts each MXFP8 operand twice (dim0 and dim1 kernels over the 16-bit
    // tensor), so its MXFP8 is no faster than tensorwise float8, as measured; plait
    // predicts 1.304× and 1.306× (the limit, which squeezes low precision most, is not in
    // the model).
    let run = |dtype| torchtitan_8b("dgx-b200", 8, 1, dtype, true, true);
    let bf16 = run(Dtype::Bf16);
    let (fp8, mx) = (bf16 / run(Dtype::Fp8), bf16 / run(Dtype::Mxfp8));
    assert!(mx <= fp8, "mxfp8 {mx:.3}× against tensorwise {fp8:.3}×");
    assert!((fp8 / 1.254 - 1.0).abs() < 0.06, "tensorwise {fp8:.3}×");
    assert!((mx / 1.200 - 1.0).abs() < 0.10, "mxfp8 {mx:.3}×");
}

#[test]
fn torchtitan_blocks_only_compile_keeps_the_eager_loss() {
    // torchtitan 9dec370 compiled each block and left the loss eager (`train.py`: "TODO:
    // compiling loss function causes CUDA errors"): `F.cross_entropy(pred.float(), …)` keeps
    // the fp32 log-softmax for the backward and holds fp32 gradients beside it. Llama 3.1 8B
    // at 32K tokens, full recompute, float8 on 8 GPUs (its CP table's first row, which
    // measured 83.9 GiB reserved of 96 GB): 32,768 × 128,256 logits per GPU.
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("grand-teton-h100").unwrap();
    let c = ParallelConfig {
        dp: 8,
        zero: 3,
        recompute: plait_spec::Recompute::Full,
        ..ParallelConfig::default()
    };
    let run = |compile_loss| {
        let t = TrainSpec {
            engine: Engine::Torchtitan,
            dtype: Dtype::Fp8,
            compile: true,
            compile_loss,
            ..TrainSpec::new(8, 32768)
        };
        let d = device_for(&cluster, Dtype::Fp8).unwrap();
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let (blocks, both) = (run(false), run(true));
    let logits = 32768.0 * 128256.0;
    let gib = f64::from(1u32 << 30);
    println!(
        "blocks only: {:.1} GiB, {:.3} s; model and loss: {:.1} GiB, {:.3} s",
        blocks.peak_memory_bytes / gib,
        blocks.iteration_time_s,
        both.peak_memory_bytes / gib,
        both.iteration_time_s
    );
    // The eager loss keeps 4 bytes per logit and works in 8 more; the compiled one 2 and 2:
    // at least 4 bytes per logit more at the peak.
    assert!(blocks.peak_memory_bytes > both.peak_memory_bytes + 4.0 * logits);
    assert!(blocks.iteration_time_s > both.iteration_time_s);
    // And nearer what the run reserved than the 42 GiB the compiled loss would give.
    assert!(
        blocks.peak_memory_bytes / gib > 65.0,
        "{}",
        blocks.peak_memory_bytes / gib
    );
}

/// One block of Llama 3.1 70B under torchtitan at FSDP 32 × TP 8 with sequence parallelism,
/// float8, compiled, full recompute, local batch 16 × 8192 tokens on Grand Teton's H100s:
/// the async-TP benchmark's 2D shape, for the block-level checks below.
struct TitanBlock {
    m: plait_spec::ModelSpec,
    c: ParallelConfig,
    t: TrainSpec,
    d: plait_cost::DeviceModel,
    g: plait_cost::comm::Groups,
}

fn titan_70b_tp8() -> TitanBlock {
    let cluster = cluster_preset("grand-teton-h100").unwrap();
    let c: ParallelConfig = "dp32 tp8 mbs16 zero3 sp recompute=full".parse().unwrap();
    let t = TrainSpec {
        engine: Engine::Torchtitan,
        dtype: Dtype::Fp8,
        compile: true,
        ..TrainSpec::new(512, 8192)
    };
    TitanBlock {
        m: model_preset("llama3-70b").unwrap(),
        d: device_for(&cluster, t.dtype).unwrap(),
        g: plait_cost::comm::Groups::new(&cluster, &c),
        c,
        t,
    }
}

#[test]
fn torchtitan_runs_its_projections_as_separate_linears() {
    // torchtitan's Llama has `wq`, `wk`, `wv` and `w1`, `w3` as linears of their own
    // (9dec370 `models/llama/model.py`), where Megatron-Core fuses `linear_qkv` and
    // `linear_fc1`. Llama 3.1 70B at tp 8 (the async-TP benchmark's shape: 16 × 8192 tokens
    // per rank after the sequence-parallel gather): the key and value projections are 128
    // columns wide per rank, so their GEMMs, and the input-gradient GEMMs whose reduction
    // is those 128 columns, run far below the fused GEMM's rate; autograd then sums the
    // three input gradients.
    let TitanBlock { m, c, t, d, g } = titan_70b_tp8();
    let separate = Workload::new(&c, &t);
    assert!(separate.engine.separate_projections);
    let mut fused = separate;
    fused.engine.separate_projections = false;
    let (s, f) = (
        block_cost(&m, &d, &g, &separate),
        block_cost(&m, &d, &g, &fused),
    );
    // The sum of the input gradients alone: q, k, v (one compiled kernel reading three and
    // writing one) and gate, up (reading two): 7 passes over 16 × 8192 × 8192 bf16.
    let sums = d.memory_s(7.0 * 16.0 * 8192.0 * 8192.0 * 2.0);
    println!(
        "backward: separate {:.2} ms, fused {:.2} ms, sums {:.2} ms; forward {:.2} / {:.2} ms",
        1e3 * s.backward.compute_s,
        1e3 * f.backward.compute_s,
        1e3 * sums,
        1e3 * s.forward.compute_s,
        1e3 * f.forward.compute_s
    );
    assert!(
        s.backward.compute_s > f.backward.compute_s + sums,
        "separate {:.2} ms, fused {:.2} ms, sums {:.2} ms",
        1e3 * s.backward.compute_s,
        1e3 * f.backward.compute_s,
        1e3 * sums
    );
    // The forward pays for the narrow GEMMs only: a few per cent, not the backward's sums.
    let fwd = s.forward.compute_s / f.forward.compute_s;
    assert!(fwd > 1.0 && fwd < 1.05, "forward {fwd:.3}×");
    // Megatron's profile keeps them fused.
    let megatron = Workload::new(
        &c,
        &TrainSpec {
            engine: Engine::Megatron,
            ..t
        },
    );
    assert!(!megatron.engine.separate_projections);
}

#[test]
fn torchtitan_float8_tp_casts_on_the_sequence_shard() {
    // torchao's float8 tensor parallelism (eab345c `float8_tensor_parallel.py`) casts the
    // column-parallel linears' input on this rank's sequence shard and gathers the fp8 copy
    // (`PrepareFloat8ModuleInput`, `Float8ColwiseParallel`); in the backward it casts the
    // row-parallel outputs' gradient on its shard before the all-gather
    // (`Float8RowwiseParallel`, `NoopFwToFloat8BwDynamic`). Llama 3.1 70B at tp 8 with
    // sequence parallelism: against the same linears casting after a 16-bit gather, the
    // forward saves 7/8 of two full-sequence casts, and both passes gather half the bytes.
    let TitanBlock { m, c, t, d, g } = titan_70b_tp8();
    let float8_tp = Workload::new(&c, &t);
    let mut plain_tp = float8_tp;
    plain_tp.engine.fp8_tp_all_gather = false;
    let (f, p) = (
        block_cost(&m, &d, &g, &float8_tp),
        block_cost(&m, &d, &g, &plain_tp),
    );
    let cast = float8_tp.cast_bytes_per_element(d.generation);
    let saved = d.memory_s(2.0 * (7.0 / 8.0) * cast * 16.0 * 8192.0 * 8192.0);
    assert!(
        (p.forward.compute_s - f.forward.compute_s - saved).abs() < 1e-3 * saved,
        "forward {:.2} ms against {:.2} ms, casts {:.2} ms",
        1e3 * f.forward.compute_s,
        1e3 * p.forward.compute_s,
        1e3 * saved
    );
    assert!(f.forward.tp_comm_s < p.forward.tp_comm_s);
    assert!(f.backward.tp_comm_s < p.backward.tp_comm_s);
    // Row-wise scaling or bf16 has no float8 tp: the same either way.
    let bf16 = TrainSpec {
        dtype: Dtype::Bf16,
        ..t
    };
    let mut w = Workload::new(&c, &bf16);
    let on = block_cost(&m, &d, &g, &w);
    w.engine.fp8_tp_all_gather = false;
    assert_eq!(on, block_cost(&m, &d, &g, &w));
}

#[test]
fn torchtitan_loss_parallel_holds_its_fp32_decomposition() {
    // With tp > 1 torchtitan shards the LM head's output over the vocabulary and computes
    // the loss under `loss_parallel()`, where DTensor runs log-softmax and its backward op
    // by op in fp32 (torch `distributed/tensor/parallel/loss.py`): 16 bytes per logit at the
    // backward's peak against the fused kernels' 12. Llama 3.1 70B at tp 8, the loss left
    // eager as torchtitan 9dec370 left it: 16 × 8192 tokens × 129,024 / 8 logits per GPU
    // (the vocabulary padded to a multiple of 128 × tp, as `layer::padded_vocab` pads it).
    use plait_cost::engine::CrossEntropy;
    use plait_cost::layer::head_cost;
    let TitanBlock { m, c, t, d, g } = titan_70b_tp8();
    let eager_loss = TrainSpec {
        compile_loss: false,
        ..t
    };
    let w = Workload::new(&c, &eager_loss);
    assert_eq!(
        w.engine.cross_entropy_loss_parallel,
        Some(CrossEntropy::TORCH_LOSS_PARALLEL)
    );
    let mut fused = w;
    fused.engine.cross_entropy_loss_parallel = None;
    let (parallel, plain) = (head_cost(&m, &d, &g, &w), head_cost(&m, &d, &g, &fused));
    let logits = 16.0 * 8192.0 * (129024.0 / 8.0);
    let peak = |h: &plait_cost::layer::LayerCost| h.activation_bytes + h.transient_bytes;
    assert!(
        (peak(&parallel) - peak(&plain) - 4.0 * logits).abs() < 1e-6 * logits,
        "{} against {}",
        peak(&parallel),
        peak(&plain)
    );
    assert!(parallel.forward.compute_s > plain.forward.compute_s);
    // Without tp the logits are whole and the fused kernels' loss runs: 8 bytes per logit
    // beside the 4 it keeps.
    let c1: ParallelConfig = "dp256 mbs16 zero3 recompute=full".parse().unwrap();
    let whole = head_cost(&m, &d, &g, &Workload::new(&c1, &eager_loss));
    let logits = 16.0 * 8192.0 * 128256.0;
    assert!((whole.transient_bytes - 8.0 * logits).abs() < 1e-6 * logits);
}
