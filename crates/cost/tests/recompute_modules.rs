//! Megatron-Core's selective recomputation by module (`recompute_modules`): each module
//! frees the tensors it discards and adds its rerun, and only Megatron-Core offers them.

use plait_cost::{device_for, estimate, Estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, Engine, ParallelConfig, TrainSpec};

/// `model` on one DGX H100 under `config` (a plan string), bf16, 4K tokens.
fn check(model: &str, config: &str) -> Estimate {
    let m = model_preset(model).unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec::new(64, 4096);
    let c: ParallelConfig = config.parse().unwrap();
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

fn activations(e: &Estimate) -> f64 {
    e.stages[0].memory.activations_bytes
}

#[test]
fn the_attention_core_alone_is_plain_selective_recomputation() {
    // `core_attn` is what `selective` has always meant: the same configuration...
    let plain: ParallelConfig = "dp8 mbs1 recompute=selective".parse().unwrap();
    let core: ParallelConfig = "dp8 mbs1 recompute=core_attn".parse().unwrap();
    assert_eq!(plain, core);
    // ...and it drops the attention core's saved softmax: 2·a·s²·b bytes per layer in
    // 16-bit without dropout (Korthikanti et al. 2022, §4.2), here with the unfused
    // attention chain whose softmax is materialised: Llama 3 8B, 32 layers × 32 heads ×
    // 4,096² scores.
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let t = TrainSpec {
        attention: plait_spec::AttentionImpl::Unfused,
        ..TrainSpec::new(64, 4096)
    };
    let none: ParallelConfig = "dp8 mbs1 recompute=none".parse().unwrap();
    let (kept, dropped) = (
        estimate(&m, &cluster, &t, &none, &d).unwrap(),
        estimate(&m, &cluster, &t, &core, &d).unwrap(),
    );
    let freed = activations(&kept) - activations(&dropped);
    let expected = 32.0 * 32.0 * 4096.0 * 4096.0 * 2.0;
    assert!(
        (freed / expected - 1.0).abs() < 1e-9,
        "{freed} vs {expected}"
    );
    assert!(dropped.breakdown.recompute_s > 0.0);
}

#[test]
fn moe_act_frees_the_experts_activation_outputs() {
    // Mixtral 8x7B, ep 8 on 8 GPUs: 4,096 tokens × top 2 routed to experts of width 14,336;
    // the SwiGLU product (fc2's 16-bit input) of each of the 32 layers is discarded and
    // recomputed.
    let base = check("mixtral-8x7b", "dp8 ep8 mbs1 zero1 recompute=selective");
    let act = check(
        "mixtral-8x7b",
        "dp8 ep8 mbs1 zero1 recompute=core_attn+moe_act",
    );
    let freed = activations(&base) - activations(&act);
    let expected = 32.0 * 4096.0 * 2.0 * 14336.0 * 2.0;
    assert!(
        (freed / expected - 1.0).abs() < 1e-9,
        "{freed} vs {expected}"
    );
    assert!(act.breakdown.recompute_s > base.breakdown.recompute_s);
    // The whole MoE layer reruns its dispatch and combine too.
    let moe = check("mixtral-8x7b", "dp8 ep8 mbs1 zero1 recompute=core_attn+moe");
    assert!(activations(&moe) < activations(&act));
    assert!(moe.breakdown.recompute_s > act.breakdown.recompute_s);
    assert!(moe.breakdown.ep_comm_s > base.breakdown.ep_comm_s * 1.4);
}

#[test]
fn each_module_added_frees_more_and_reruns_more() {
    // DeepSeek-V3's layers (MLA, shared and routed experts) as NeMo recomputes them on
    // H100 (`model_configs_h100.csv`: mla_up_proj/mlp/moe), reached step by step.
    let steps = [
        "recompute=selective",
        "recompute=core_attn+mla_up_proj",
        "recompute=core_attn+layernorm+mla_up_proj",
        "recompute=core_attn+layernorm+mla_up_proj+moe_act+shared_experts",
        "recompute=core_attn+layernorm+mla_up_proj+mlp+moe",
    ];
    let runs: Vec<Estimate> = steps
        .iter()
        .map(|r| check("deepseek-v3", &format!("dp8 tp8 pp1 ep8 mbs1 zero1 sp {r}")))
        .collect();
    for (w, (a, b)) in runs.iter().zip(&runs[1..]).enumerate() {
        assert!(activations(b) < activations(a), "{}", steps[w + 1]);
        assert!(
            b.breakdown.recompute_s > a.breakdown.recompute_s,
            "{}",
            steps[w + 1]
        );
    }
    // Never below full recomputation's memory, nor above its time.
    let full = check(
        "deepseek-v3",
        "dp8 tp8 pp1 ep8 mbs1 zero1 sp recompute=full",
    );
    let last = runs.last().unwrap();
    assert!(activations(last) > activations(&full));
    assert!(last.iteration_time_s < full.iteration_time_s);
}

#[test]
fn a_dense_mlp_reruns_with_its_tensor_parallel_collectives() {
    let base = check("llama3-70b", "dp1 tp8 mbs1 zero1 sp recompute=selective");
    let mlp = check(
        "llama3-70b",
        "dp1 tp8 mbs1 zero1 sp recompute=core_attn+mlp",
    );
    assert!(activations(&mlp) < 0.75 * activations(&base));
    assert!(mlp.breakdown.tp_comm_s > base.breakdown.tp_comm_s);
    // Modules of parts a model lacks do nothing (Megatron applies `moe` to MoE layers).
    let moe = check(
        "llama3-70b",
        "dp1 tp8 mbs1 zero1 sp recompute=core_attn+moe",
    );
    assert_eq!(activations(&moe), activations(&base));
}

#[test]
fn only_megatron_core_takes_a_module_list() {
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c: ParallelConfig = "dp8 recompute=core_attn+mlp".parse().unwrap();
    for engine in [Engine::Deepspeed, Engine::Fsdp, Engine::Torchtitan] {
        let t = TrainSpec {
            engine,
            ..TrainSpec::new(64, 4096)
        };
        let e = estimate(&m, &cluster, &t, &c, &d).unwrap_err();
        assert_eq!(e.field, "recompute", "{e}");
    }
}
