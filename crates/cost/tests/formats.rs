//! Number formats: per-tensor fp8 on Hopper and later, Blackwell's block-scaled MXFP8 and
//! NVFP4, each costed with its GEMM rate, operand bytes, scales and casts.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, Engine, ParallelConfig, TrainSpec};

fn run(cluster: &str, dtype: Dtype, engine: Engine) -> Estimate {
    run_train(
        cluster,
        TrainSpec {
            dtype,
            engine,
            ..TrainSpec::new(512, 8192)
        },
    )
}

/// Llama 3 70B trained as `t` says at dp 8 × tp 8 × pp 4 (interleaved, ZeRO-1) on `cluster`.
fn run_train(cluster: &str, t: TrainSpec) -> Estimate {
    let m = model_preset("llama3-70b").unwrap();
    let cluster = cluster_preset(cluster).unwrap();
    let d = device_for(&cluster, t.dtype).unwrap();
    let c = ParallelConfig {
        dp: 8,
        tp: 8,
        pp: 4,
        vp: 5,
        sp: true,
        zero: 1,
        schedule: plait_spec::Schedule::Interleaved,
        ..ParallelConfig::default()
    };
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

#[test]
fn block_scaled_formats_need_blackwell() {
    let h100 = cluster_preset("dgx-h100").unwrap();
    for dtype in [Dtype::Mxfp8, Dtype::Nvfp4] {
        let err = device_for(&h100, dtype).unwrap_err().to_string();
        assert!(err.contains(dtype.keyword()), "{err}");
        // The allowed values are what this GPU runs.
        assert!(err.contains("bf16|fp16|fp8 on this GPU"), "{err}");
    }
    assert!(device_for(&h100, Dtype::Fp8).is_ok());
    let b200 = cluster_preset("dgx-b200").unwrap();
    for dtype in Dtype::ALL {
        assert!(device_for(&b200, *dtype).is_ok(), "{dtype}");
    }
}

#[test]
fn fewer_bits_run_faster_but_not_in_proportion() {
    let bf16 = run("dgx-b200", Dtype::Bf16, Engine::Megatron).iteration_time_s;
    let fp8 = run("dgx-b200", Dtype::Fp8, Engine::Megatron).iteration_time_s;
    let mx = run("dgx-b200", Dtype::Mxfp8, Engine::Megatron).iteration_time_s;
    let fp4 = run("dgx-b200", Dtype::Nvfp4, Engine::Megatron).iteration_time_s;
    println!(
        "B200 llama3-70b step: bf16 {bf16:.3} s, fp8 {fp8:.3} s, mxfp8 {mx:.3} s, nvfp4 {fp4:.3} s"
    );
    assert!(
        fp4 < mx && mx < bf16 && fp8 < bf16,
        "{bf16} {fp8} {mx} {fp4}"
    );
    // MXFP8 runs at the fp8 rate and moves its block scales besides: within a few per cent
    // of per-tensor fp8, never faster than it by more than fp8's own cast difference.
    assert!((mx / fp8 - 1.0).abs() < 0.05, "{mx} vs {fp8}");
    // Attention, norms, the 16-bit LM head and communication do not speed up: halving the
    // GEMM bits gains far less than 2×.
    assert!(fp8 / fp4 < 1.6, "{fp8} / {fp4}");
    assert!(bf16 / fp8 < 2.0, "{bf16} / {fp8}");
}

#[test]
fn fp4_weight_copies_take_less_memory_than_fp8_ones() {
    // FSDP with Transformer Engine linears keeps quantised copies beside the 16-bit weight.
    let fp8 = run("dgx-b200", Dtype::Mxfp8, Engine::Fsdp);
    let fp4 = run("dgx-b200", Dtype::Nvfp4, Engine::Fsdp);
    let w = |e: &Estimate| e.stages[0].memory.weights_bytes;
    assert!(w(&fp4) < w(&fp8), "{} vs {}", w(&fp4), w(&fp8));
}

#[test]
fn fp8_gemms_reach_the_measured_fp8_fraction_of_their_peak() {
    // H100: fp8 MAMF 70.9 % of 1,979 TFLOP/s against bf16's 80 % of 989 — a large fp8 GEMM
    // is about 1.7× the bf16 one, not the 2× of the peaks.
    let h100 = cluster_preset("dgx-h100").unwrap();
    let bf16 = device_for(&h100, Dtype::Bf16).unwrap();
    let fp8 = device_for(&h100, Dtype::Fp8).unwrap();
    let n = 8192;
    let speedup = bf16.gemm_burst_s(n, n, n, 1) / fp8.gemm_burst_s(n, n, n, 1);
    assert!((1.6..1.77).contains(&speedup), "{speedup}");
    // A GPU with no separate fp8 measurement keeps its 16-bit fraction (L40S).
    let l40s = cluster_preset("l40s-8").unwrap();
    assert_eq!(
        l40s.gpu.matmul_efficiency_for(Dtype::Fp8),
        l40s.gpu.matmul_efficiency
    );
}

#[test]
fn megatron_gathers_fp8_weights_in_fp8_and_torchtitan_in_bf16() {
    // NeMo's fp8 recipe gathers the block weights in fp8 (`fp8_param_gather`): the ZeRO-1
    // parameter all-gather moves about half the bytes of the bf16 run's. torchtitan's
    // default gathers the 16-bit weights whatever the GEMMs run in.
    let gather = |dtype, engine| run("dgx-h100", dtype, engine).stages[0].dp_param_gather_s;
    let megatron = gather(Dtype::Fp8, Engine::Megatron) / gather(Dtype::Bf16, Engine::Megatron);
    assert!(
        (0.45..0.6).contains(&megatron),
        "megatron fp8/bf16 gather: {megatron}"
    );
    let titan = gather(Dtype::Fp8, Engine::Torchtitan) / gather(Dtype::Bf16, Engine::Torchtitan);
    assert!(
        (titan - 1.0).abs() < 1e-9,
        "torchtitan fp8/bf16 gather: {titan}"
    );
}

#[test]
fn megatron_readies_its_quantised_weights_as_each_format_needs() {
    // Megatron-Core keeps Transformer Engine's quantised weights (`fp8_param_gather`): its
    // distributed optimizer writes them, so no step casts the 16-bit weights.
    let stage = |cluster, dtype| run(cluster, dtype, Engine::Megatron).stages[0].clone();
    let opt = |cluster, dtype| stage(cluster, dtype).optimizer_s;
    // Blackwell's fp8 GEMMs read the one fp8 copy in every layout: nothing left to do.
    let blackwell = opt("dgx-b200", Dtype::Fp8) - opt("dgx-b200", Dtype::Bf16);
    assert!(blackwell.abs() < 1e-12, "{blackwell}");
    // Hopper's take only the TN layout: each weight's transpose, read 1 byte, write 1.
    let transpose = opt("dgx-h100", Dtype::Fp8) - opt("dgx-h100", Dtype::Bf16);
    assert!(transpose > 0.0);
    // MXFP8 gathers the 16-bit weights through the gradient buffer, then writes both
    // MXFP8 copies (1 byte and a 1/32 scale each) and zeroes the buffer: 2 + 2 × 33/32 + 2.
    let gather = |dtype| stage("dgx-b200", dtype).dp_param_gather_s;
    let sixteen_bit = gather(Dtype::Mxfp8) / gather(Dtype::Bf16);
    assert!((sixteen_bit - 1.0).abs() < 1e-9, "{sixteen_bit}");
    let hbm = |cluster| {
        device_for(&cluster_preset(cluster).unwrap(), Dtype::Fp8)
            .unwrap()
            .memory_s(1.0)
    };
    let per_byte = transpose / 2.0 / hbm("dgx-h100");
    let expected = per_byte * hbm("dgx-b200") * (2.0 + 2.0 * 33.0 / 32.0 + 2.0);
    let mxfp8 = opt("dgx-b200", Dtype::Mxfp8) - opt("dgx-b200", Dtype::Bf16);
    assert!(
        (mxfp8 / expected - 1.0).abs() < 1e-9,
        "{mxfp8} vs {expected}"
    );
    // An engine that keeps 16-bit weights casts them each step, whatever the GPU.
    let fsdp = |cluster, dtype| run(cluster, dtype, Engine::Fsdp).stages[0].optimizer_s;
    assert!(fsdp("dgx-b200", Dtype::Fp8) > fsdp("dgx-b200", Dtype::Bf16));
}

#[test]
fn transformer_engine_writes_no_fp8_transpose_where_gemms_take_every_layout() {
    use plait_cost::device::Generation;
    use plait_cost::layer::Workload;
    let workload = |dtype, engine| {
        let t = TrainSpec {
            dtype,
            engine,
            ..TrainSpec::new(256, 8192)
        };
        Workload::new(&ParallelConfig::default(), &t)
    };
    // Delayed scaling: read 2, write the fp8 copy (1) and on Hopper its transpose (1).
    let te = workload(Dtype::Fp8, Engine::Megatron);
    assert_eq!(te.cast_bytes_per_element(Generation::Hopper), 4.0);
    assert_eq!(te.cast_bytes_per_element(Generation::Blackwell), 3.0);
    // MXFP8's column-wise copy has scales of its own along the other dimension: both stay.
    let mx = workload(Dtype::Mxfp8, Engine::Megatron);
    assert_eq!(
        mx.cast_bytes_per_element(Generation::Blackwell),
        2.0 + 2.0 * 33.0 / 32.0
    );
    // torchao's casts are its own.
    let titan = workload(Dtype::Fp8, Engine::Torchtitan);
    assert_eq!(
        titan.cast_bytes_per_element(Generation::Blackwell),
        titan.cast_bytes_per_element(Generation::Hopper)
    );
}

#[test]
fn transformer_engine_keeps_quantised_linear_inputs() {
    // Llama 3 70B: Transformer Engine keeps the fp8 copy of each linear's input (qkv, fc1,
    // fc2 at 1 byte instead of 2; the projection's copy beside the attention output), so an
    // fp8 run holds less activation memory; torchao (torchtitan) keeps the 16-bit inputs.
    let act = |dtype, engine| run("dgx-h100", dtype, engine).memory.activations_bytes;
    let (bf16, fp8) = (
        act(Dtype::Bf16, Engine::Megatron),
        act(Dtype::Fp8, Engine::Megatron),
    );
    // Per token and block: the qkv and fc1 inputs and fc2's (the 3.5h-wide SwiGLU output)
    // a byte less per element, the projection's copy a byte more: 13 % less here.
    assert!(fp8 < 0.9 * bf16 && fp8 > 0.83 * bf16, "{fp8} vs {bf16}");
    assert_eq!(
        act(Dtype::Fp8, Engine::Torchtitan),
        act(Dtype::Bf16, Engine::Torchtitan)
    );
    // NVIDIA's GB200 recipe for Llama 3 70B on 64 GPUs (Megatron FSDP, tp 1, mbs 1, 8k
    // tokens; NeMo 8cfedd7 `model_configs_gb200.csv`) recomputes no layer in fp8 and 20 in
    // bf16: the fp8 run fits without recomputation, the bf16 one does not.
    let m = model_preset("llama3-70b").unwrap();
    let gb200 = cluster_preset("gb200-nvl72").unwrap();
    let c = ParallelConfig {
        dp: 64,
        zero: 3,
        ..ParallelConfig::default()
    };
    let fits = |dtype| {
        let t = TrainSpec {
            dtype,
            ..TrainSpec::new(128, 8192)
        };
        let d = device_for(&gb200, dtype).unwrap();
        estimate(&m, &gb200, &t, &c, &d).unwrap().fits
    };
    assert!(fits(Dtype::Fp8));
    assert!(!fits(Dtype::Bf16));
}

/// llama3-70b on 8 DGX-H100 nodes at tp `tp` (sequence parallel above 1) under Transformer
/// Engine's fp8 `recipe`.
fn te_fp8(recipe: plait_spec::Float8Recipe, tp: u64) -> Estimate {
    let m = model_preset("llama3-70b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Fp8).unwrap();
    let t = TrainSpec {
        dtype: Dtype::Fp8,
        engine: Engine::Megatron,
        float8_recipe: Some(recipe),
        ..TrainSpec::new(256, 8192)
    };
    let c = ParallelConfig {
        dp: 64 / tp / 4,
        tp,
        pp: 4,
        vp: 5,
        sp: tp > 1,
        zero: 1,
        schedule: plait_spec::Schedule::Interleaved,
        ..ParallelConfig::default()
    };
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

#[test]
fn transformer_engine_fp8_recipes_pay_for_their_scales() {
    use plait_spec::Float8Recipe::{Blockwise, Delayed, Tensorwise};
    let compute = |e: &Estimate| e.breakdown.compute_s;
    let tp_comm = |e: &Estimate| e.breakdown.tp_comm_s;
    let delayed = te_fp8(Delayed, 8);
    let current = te_fp8(Tensorwise, 8);
    let block = te_fp8(Blockwise, 8);
    println!(
        "H100 llama3-70b tp8 step: delayed {:.3} s, current {:.3} s, blockwise {:.3} s",
        delayed.iteration_time_s, current.iteration_time_s, block.iteration_time_s
    );
    // Current scaling reads each tensor once more for its amax and block scaling cannot
    // cast inside the norm: both cost more than delayed scaling's casts, by memory passes
    // (a few per cent of a step), not by GEMMs.
    for other in [&current, &block] {
        assert!(compute(other) > compute(&delayed));
        assert!(other.iteration_time_s / delayed.iteration_time_s < 1.05);
    }
    // Current scaling's amax all-reduces over the tp group sit in line; without sequence
    // parallelism there are none.
    assert!(tp_comm(&current) > tp_comm(&delayed));
    assert_eq!(tp_comm(&block), tp_comm(&delayed));
    assert_eq!(tp_comm(&te_fp8(Tensorwise, 1)), 0.0);
    // Block scaling keeps a fp32 scale per 128 elements beside each saved fp8 input.
    let saved = |e: &Estimate| e.stages[0].memory.activations_bytes;
    let extra = saved(&block) / saved(&delayed) - 1.0;
    assert!(extra > 0.0 && extra < 0.05, "{extra}");
}

#[test]
fn fp8_recipes_follow_the_engine() {
    use plait_spec::Float8Recipe::{Delayed, Rowwise, Tensorwise};
    let mut t = TrainSpec {
        dtype: Dtype::Fp8,
        ..TrainSpec::new(256, 8192)
    };
    // Each engine's default: Megatron-Core's `delayed`, torchao's `tensorwise`.
    assert_eq!(t.fp8_recipe(), Some(Delayed));
    t.engine = Engine::Torchtitan;
    assert_eq!(t.fp8_recipe(), Some(Tensorwise));
    // A recipe another quantiser runs is refused with the allowed ones.
    t.float8_recipe = Some(Delayed);
    let why = t.float8_recipe_refused().unwrap();
    assert!(why.contains("tensorwise, rowwise, rowwise-gw-hp"), "{why}");
    t.engine = Engine::Megatron;
    assert_eq!(t.float8_recipe_refused(), None);
    t.float8_recipe = Some(Rowwise);
    assert!(t
        .float8_recipe_refused()
        .unwrap()
        .contains("delayed, tensorwise, blockwise"));
    // Without fp8 there is no recipe to name.
    t.dtype = Dtype::Bf16;
    assert_eq!(t.fp8_recipe(), None);
    assert!(t.float8_recipe_refused().unwrap().contains("bf16"));
}

#[test]
fn blocks_kept_in_bf16_cost_their_16_bit_gemms_on_their_own_stage() {
    // Megatron-Core's first_last_layers_bf16: NVIDIA's NVFP4 recipe for Nemotron 3 Super
    // keeps its last 14 blocks in bf16. In a pipeline, only the stages holding those blocks
    // slow down; a bf16 count asks nothing of a bf16 run (validation refuses it there).
    let m = model_preset("llama3-70b").unwrap();
    let cluster = cluster_preset("dgx-b200").unwrap();
    let d = device_for(&cluster, Dtype::Nvfp4).unwrap();
    let c = ParallelConfig {
        dp: 8,
        tp: 8,
        pp: 4,
        sp: true,
        zero: 1,
        ..ParallelConfig::default()
    };
    let with = |first: u64, last: u64| {
        let t = TrainSpec {
            dtype: Dtype::Nvfp4,
            bf16_first_layers: first,
            bf16_last_layers: last,
            ..TrainSpec::new(512, 8192)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let (none, last) = (with(0, 0), with(0, 14));
    let stage = |e: &Estimate, k: usize| e.stages[k].forward_s;
    // 20 blocks per stage: the last 14 all on stage 3.
    assert_eq!(stage(&none, 0), stage(&last, 0));
    assert_eq!(stage(&none, 2), stage(&last, 2));
    assert!(
        stage(&last, 3) > 1.3 * stage(&none, 3),
        "{} vs {}",
        stage(&last, 3),
        stage(&none, 3)
    );
    assert!(last.iteration_time_s > none.iteration_time_s);
    // Split across the two ends: the first stage's blocks slow down too, less than with all
    // of them at one end.
    let both = with(7, 7);
    assert!(stage(&both, 0) > stage(&none, 0) && stage(&both, 3) < stage(&last, 3));
    // Every block in bf16 costs what a bf16 run's linears do (same micro-batch shape).
    let all = with(40, 40);
    let d16 = device_for(&cluster, Dtype::Bf16).unwrap();
    let bf16 = estimate(&m, &cluster, &TrainSpec::new(512, 8192), &c, &d16).unwrap();
    let ratio = stage(&all, 1) / stage(&bf16, 1);
    assert!((0.97..1.03).contains(&ratio), "{ratio}");
    let t = TrainSpec {
        bf16_last_layers: 4,
        ..TrainSpec::new(512, 8192)
    };
    let err = c.validate(&m, &t, 256).unwrap_err();
    assert_eq!(err.field, "bf16_last_layers");
    let t = TrainSpec {
        dtype: Dtype::Nvfp4,
        bf16_first_layers: 41,
        bf16_last_layers: 40,
        ..TrainSpec::new(512, 8192)
    };
    let err = c.validate(&m, &t, 256).unwrap_err();
    assert!(err.problem.contains("more than"), "{err}");
}

#[test]
fn megatron_left_at_sixteen_bit_weights_gathers_and_casts_them() {
    // Megatron-LM without --fp8-param-gather (NeMo 1's pre-training launcher): the
    // distributed optimizer gathers the 16-bit weights and every step casts them to fp8,
    // as an engine without quantised weights does.
    let stage = |sixteen_bit_weights| {
        let t = TrainSpec {
            dtype: Dtype::Fp8,
            sixteen_bit_weights,
            ..TrainSpec::new(512, 8192)
        };
        run_train("dgx-h100", t).stages[0].clone()
    };
    let (quantised, sixteen) = (stage(false), stage(true));
    let gather = sixteen.dp_param_gather_s / quantised.dp_param_gather_s;
    assert!(
        (1.7..2.1).contains(&gather),
        "16-bit / fp8 weight gather: {gather}"
    );
    // The fp8 weights' step writes a transpose (read 1, write 1 byte); the 16-bit ones'
    // a cast into both copies (read 2, write 1 + 1): twice the bytes.
    let bf16 = run("dgx-h100", Dtype::Bf16, Engine::Megatron).stages[0].optimizer_s;
    let cast = (sixteen.optimizer_s - bf16) / (quantised.optimizer_s - bf16);
    assert!(
        (cast - 2.0).abs() < 1e-6,
        "16-bit / fp8 step preparation: {cast}"
    );
    // And Transformer Engine caches two fp8 copies (1 byte each) beside each 16-bit block
    // weight across the step's micro-batches, where the quantised weights need none.
    let extra = sixteen.peak_memory_bytes - quantised.peak_memory_bytes;
    assert!(
        extra > 1.5 * quantised.params && extra < 2.5 * quantised.params,
        "fp8 copies: {extra} bytes for {} parameters",
        quantised.params
    );
}
