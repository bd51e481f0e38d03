//! Fine-tuning tasks: LoRA trains adapters beside frozen weights, packed samples bound
//! attention to each sample.

use plait_cost::{device_for, estimate};
use plait_spec::{
    cluster_preset, model_preset, Dtype, Engine, Lora, ParallelConfig, Task, TrainSpec,
};

fn run(task: Task, lora: Lora, pack_len: Option<u64>) -> plait_cost::Estimate {
    let m = model_preset("llama2-7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec {
        task,
        lora,
        pack_len,
        ..TrainSpec::new(32, 4096)
    };
    let c = ParallelConfig {
        dp: 8,
        zero: 1,
        ..ParallelConfig::default()
    };
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

#[test]
fn lora_skips_weight_gradients_and_optimizer_states() {
    let full = run(Task::Pretrain, Lora::default(), None);
    let lora = run(Task::Lora, Lora::default(), None);
    // Frozen linears compute input gradients only: the backward loses about half its GEMM
    // work, so the GEMMs take two thirds of full training's time (1 + 1 of 1 + 2 passes).
    // Attention, the elementwise kernels and the adapters' own GEMMs and output adds stay,
    // which puts the step above two thirds but well below a full one.
    let ratio = lora.iteration_time_s / full.iteration_time_s;
    assert!((0.6..0.85).contains(&ratio), "LoRA/full step {ratio}");
    // No gradients or Adam states for the 6.7 B frozen weights: only their 16-bit copy.
    let saved = full.peak_memory_bytes - lora.peak_memory_bytes;
    assert!(
        saved > 6.7e9 * (2.0 + 12.0 / 8.0) * 0.9,
        "saved {saved} bytes"
    );
    // The adapters' gradients are tiny next to the model's.
    assert!(lora.breakdown.dp_comm_exposed_s < 0.1 * full.breakdown.dp_comm_exposed_s.max(1e-3));
}

#[test]
fn frozen_quantised_weights_need_no_cast_each_step() {
    // Megatron-Core keeps a LoRA run's frozen base in Transformer Engine's fp8 storage
    // (`fp8_param_gather`): nothing updates it, so no step readies it again; an engine that
    // keeps 16-bit weights casts them at each step's first micro-batch.
    let m = model_preset("llama2-7b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let optimizer_s = |dtype, engine| {
        let d = device_for(&cluster, dtype).unwrap();
        let t = TrainSpec {
            task: Task::Lora,
            dtype,
            engine,
            ..TrainSpec::new(32, 4096)
        };
        let c = ParallelConfig {
            dp: 8,
            zero: 1,
            ..ParallelConfig::default()
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap().stages[0].optimizer_s
    };
    let megatron = optimizer_s(Dtype::Fp8, Engine::Megatron);
    assert!((megatron - optimizer_s(Dtype::Bf16, Engine::Megatron)).abs() < 1e-12);
    assert!(optimizer_s(Dtype::Fp8, Engine::Fsdp) > optimizer_s(Dtype::Bf16, Engine::Fsdp));
}

#[test]
fn fewer_adapter_targets_cost_less() {
    let all = run(Task::Lora, Lora::default(), None);
    let qkv = run(
        Task::Lora,
        Lora {
            rank: 32,
            targets: [true, false, false, false],
        },
        None,
    );
    assert!(qkv.iteration_time_s < all.iteration_time_s);
    let big = run(
        Task::Lora,
        Lora {
            rank: 1024,
            targets: [true; 4],
        },
        None,
    );
    assert!(big.iteration_time_s > all.iteration_time_s);
}

#[test]
fn packed_samples_bound_attention_to_each_sample() {
    let whole = run(Task::Sft, Lora::default(), None);
    let packed = run(Task::Sft, Lora::default(), Some(512));
    assert!(packed.iteration_time_s < whole.iteration_time_s);
    // Same GEMMs: packing only shortens attention, a part of the step.
    assert!(packed.iteration_time_s > 0.7 * whole.iteration_time_s);
    // Packing to the full sequence changes nothing.
    let same = run(Task::Sft, Lora::default(), Some(4096));
    assert_eq!(same.iteration_time_s, whole.iteration_time_s);
}

#[test]
fn samples_of_several_lengths_cost_as_their_token_weighted_mean_length() {
    // Half the samples of 512 tokens, half of 3,584: a token's attention runs over its own
    // sample, so the long samples' tokens (7 in 8 of them) dominate; the run costs as one of
    // samples of Σ s·L² / Σ s·L = 3,200 tokens, between the two lengths.
    let with = |lengths: &str| {
        let m = model_preset("llama2-7b").unwrap();
        let cluster = cluster_preset("dgx-h100").unwrap();
        let d = device_for(&cluster, Dtype::Bf16).unwrap();
        let t = TrainSpec {
            task: Task::Sft,
            sample_lengths: plait_spec::parse_sample_lengths(lengths, 4096).unwrap(),
            ..TrainSpec::new(32, 4096)
        };
        assert_eq!(t.attention_span(), 3200, "{lengths}");
        let c = ParallelConfig {
            dp: 8,
            zero: 1,
            ..ParallelConfig::default()
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap().iteration_time_s
    };
    let mixed = with("512:1,3584:1");
    // Shares are relative: the same mix written as fractions costs the same.
    assert_eq!(with("512:0.5, 3584:0.5"), mixed);
    let packed = |n| run(Task::Sft, Lora::default(), Some(n)).iteration_time_s;
    assert_eq!(mixed, packed(3200));
    assert!(packed(512) < mixed && mixed < packed(3584));
    // Malformed lists are refused with what is wrong.
    for (bad, says) in [
        ("", "no LENGTH:SHARE"),
        ("512", "not LENGTH:SHARE"),
        ("512:0", "positive"),
        ("512:nan", "positive"),
        ("0:1", "does not fit"),
        ("8192:1", "does not fit"),
    ] {
        let e = plait_spec::parse_sample_lengths(bad, 4096).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn adam_state_in_bf16_holds_half_the_optimizer_bytes_and_steps_faster() {
    let m = model_preset("llama2-70b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Fp8).unwrap();
    // NeMo 24.07's SFT of Llama 2 70B on 16 H100 (tp 4, pp 4): nothing to shard the
    // optimizer over at dp 1, so the fp32 state alone is 12 bytes of each stage's 4.3 B
    // parameters and the run does not fit in 80 GB; NVIDIA ran it with Adam's state in bf16.
    let c = ParallelConfig {
        tp: 4,
        pp: 4,
        sp: true,
        zero: 1,
        ..ParallelConfig::default()
    };
    let at = |optimizer_state| {
        let t = TrainSpec {
            dtype: Dtype::Fp8,
            task: Task::Sft,
            pack_len: Some(112),
            optimizer_state,
            ..TrainSpec::new(32, 4096)
        };
        estimate(&m, &cluster, &t, &c, &d).unwrap()
    };
    let fp32 = at(plait_spec::OptimizerState::Fp32);
    let bf16 = at(plait_spec::OptimizerState::Bf16);
    let (o32, o16) = (
        fp32.stages[0].memory.optimizer_bytes,
        bf16.stages[0].memory.optimizer_bytes,
    );
    assert!((o16 / o32 - 0.5).abs() < 1e-9, "{o16} against {o32}");
    assert!(
        !fp32.fits && bf16.fits,
        "fits: fp32 {}, bf16 {}",
        fp32.fits,
        bf16.fits
    );
    // The step reads and writes 6 bytes of state per parameter instead of 12 (22 bytes of
    // traffic per parameter against 34).
    let ratio = bf16.breakdown.optimizer_s / fp32.breakdown.optimizer_s;
    assert!(
        (0.55..0.75).contains(&ratio),
        "optimizer step ratio {ratio}"
    );
}
