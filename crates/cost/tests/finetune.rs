//! Fine-tuning tasks: LoRA trains adapters beside frozen weights, packed samples bound
//! attention to each sample.

use plait_cost::{device_for, estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, Lora, ParallelConfig, Task, TrainSpec};

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
