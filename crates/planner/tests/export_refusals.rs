//! Plans the engines cannot run as plait modelled them are refused with the reason, and
//! Megatron-LM's stage and recompute mappings.

mod common;

use plait_planner::export::{export, expressible, Engine};
use plait_spec::{Dtype, Float8Recipe, Recompute, Schedule, StageMap};

use common::*;

#[test]
fn megatron_maps_first_and_last_stages_and_other_maps_to_a_layout() {
    let f = |k: &Case| megatron_flags(file(&run(Engine::Megatron, k).unwrap(), "megatron_args.sh"));
    let first_last = f(&llama2_7b_pp4(vec![6, 9, 9, 8], vec![0; 4]));
    assert_eq!(first_last["--decoder-first-pipeline-num-layers"], "6");
    assert_eq!(first_last["--decoder-last-pipeline-num-layers"], "8");
    assert!(!first_last.contains_key("--pipeline-model-parallel-layout"));
    let middle = f(&llama2_7b_pp4(vec![8, 6, 10, 8], vec![0; 4]));
    assert_eq!(
        middle["--pipeline-model-parallel-layout"],
        "Et*8|t*6|t*10|t*8L"
    );
    let even = f(&llama2_7b_pp4(vec![8; 4], vec![0; 4]));
    assert!(!even.contains_key("--decoder-first-pipeline-num-layers"));
    assert!(!even.contains_key("--pipeline-model-parallel-layout"));
    let block = f(&llama2_7b_pp4(vec![8; 4], vec![3; 4]));
    assert_eq!(block["--recompute-method"], "block");
    assert_eq!(block["--recompute-num-layers"], "3");
}

#[test]
fn an_uneven_middle_stage_is_refused_where_the_engine_cannot_place_it() {
    let k = llama2_7b_pp4(vec![8, 6, 10, 8], vec![0; 4]);
    let e = export(Engine::DeepSpeed, &k.plan, &k.model, &k.train).unwrap_err();
    assert_eq!(e.engine, Engine::DeepSpeed);
    let msg = e.to_string();
    assert!(
        msg.starts_with("deepspeed cannot express this plan: "),
        "{msg}"
    );
    assert!(msg.contains("uneven stage map [8, 6, 10, 8]"), "{msg}");
    assert!(msg.contains("partition_method"), "{msg}");
    // torchtitan lists each stage's modules, so it places any map.
    let stage =
        "[\"layers.8\", \"layers.9\", \"layers.10\", \"layers.11\", \"layers.12\", \"layers.13\"]";
    let files = run(Engine::TorchtitanToml, &k).unwrap();
    assert!(file(&files, "torchtitan.toml").contains(stage));
    let files = run(Engine::Torchtitan, &k).unwrap();
    assert!(file(&files, "torchtitan_config.py").contains(stage));
}

#[test]
fn differing_per_rank_recompute_counts_are_refused() {
    let k = llama2_7b_pp4(vec![8; 4], vec![8, 6, 4, 0]);
    for engine in Engine::ALL {
        let e = export(*engine, &k.plan, &k.model, &k.train).unwrap_err();
        assert_eq!(e.engine, *engine);
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{engine} cannot express this plan: ")),
            "{msg}"
        );
        assert!(msg.contains("[8, 6, 4, 0]"), "{msg}");
        assert_eq!(expressible(*engine, &k.plan).unwrap_err(), e.reason);
    }
    let e = run(Engine::Megatron, &k).unwrap_err();
    assert!(e.contains("--recompute-num-layers"), "{e}");
    // Full on some blocks, selective on the rest: Megatron's granularity is one or the other.
    let mut mixed = llama2_7b_pp4(vec![8; 4], vec![3; 4]);
    mixed.plan.config.recompute = Recompute::Selective;
    let e = run(Engine::Megatron, &mixed).unwrap_err();
    assert!(e.contains("either full or selective"), "{e}");
}

#[test]
fn megatron_refuses_gpipe_zero_bubble_and_scp() {
    for (schedule, words) in [
        (Schedule::Gpipe, "GPipe"),
        (Schedule::ZbH1, "zero-bubble"),
        (Schedule::Scp, "Merak"),
    ] {
        let mut k = llama2_7b_pp4(vec![8; 4], vec![0; 4]);
        k.plan.config.schedule = schedule;
        let e = export(Engine::Megatron, &k.plan, &k.model, &k.train).unwrap_err();
        assert_eq!(e.engine, Engine::Megatron);
        let msg = e.to_string();
        assert!(
            msg.starts_with("megatron cannot express this plan: ") && msg.contains(words),
            "{msg}"
        );
        assert!(expressible(Engine::Megatron, &k.plan).is_err());
    }
    // Without pipelining the schedule does not matter.
    let mut k = llama2_7b();
    k.plan.config.schedule = Schedule::Gpipe;
    run(Engine::Megatron, &k).unwrap();
}

#[test]
fn engine_limits_are_refused_with_their_reason() {
    // DeepSpeed's pipeline engine: ZeRO-0/1 only.
    let mut k = llama2_7b_pp4(vec![8; 4], vec![0; 4]);
    k.plan.config.zero = 2;
    let e = run(Engine::DeepSpeed, &k).unwrap_err();
    assert!(e.contains("ZeRO-2 with pp = 4"), "{e}");
    // Megatron-FSDP (ZeRO-3) without pipelining, and with it.
    let mut z3 = llama2_7b();
    z3.plan.config.zero = 3;
    let f = megatron_flags(file(
        &run(Engine::Megatron, &z3).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--data-parallel-sharding-strategy"], "optim_grads_params");
    k.plan.config.zero = 3;
    let e = run(Engine::Megatron, &k).unwrap_err();
    assert!(e.contains("Megatron-FSDP"), "{e}");
    // torchtitan: DDP only as the sole dimension.
    let mut k = llama2_7b_pp4(vec![8; 4], vec![0; 4]);
    k.plan.config.zero = 0;
    for engine in [Engine::Torchtitan, Engine::TorchtitanToml] {
        let e = run(engine, &k).unwrap_err();
        assert!(e.contains("DDP"), "{e}");
    }
    // fp16 and fp8 where the engine has no such switch.
    let mut k = llama2_7b();
    k.train.dtype = Dtype::Fp16;
    assert!(run(Engine::Torchtitan, &k).unwrap_err().contains("fp16"));
    assert!(run(Engine::TorchtitanToml, &k)
        .unwrap_err()
        .contains("fp16"));
    k.train.dtype = Dtype::Fp8;
    assert!(run(Engine::DeepSpeed, &k).unwrap_err().contains("fp8"));
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--fp8-format"], "hybrid");
    assert_eq!(f["--fp8-recipe"], "delayed");
    // Transformer Engine's block scaling runs E4M3 throughout; torchao has no such recipe.
    k.train.float8_recipe = Some(Float8Recipe::Blockwise);
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(
        (f["--fp8-format"].as_str(), f["--fp8-recipe"].as_str()),
        ("e4m3", "blockwise")
    );
    let e = run(Engine::TorchtitanToml, &k).unwrap_err();
    assert!(
        e.contains("blockwise") && e.contains("allowed: tensorwise, rowwise"),
        "{e}"
    );
    k.train.float8_recipe = None;
    let tt = run(Engine::TorchtitanToml, &k).unwrap();
    let toml = file(&tt, "torchtitan.toml");
    assert!(toml.contains("converters = [\"quantize.linear.float8\"]"));
    assert!(
        !toml.contains("recipe_name"),
        "tensor-wise is 0.2's default: {toml}"
    );
    assert!(!toml.contains("enable_fsdp_float8_all_gather"), "{toml}");
    // FSDP's float8 all-gather, with its scales precomputed, as torchao's best settings.
    k.train.float8_all_gather = true;
    let tt = run(Engine::TorchtitanToml, &k).unwrap();
    let toml = file(&tt, "torchtitan.toml");
    assert!(
        toml.contains(
            "enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true\n"
        ),
        "{toml}"
    );
    k.train.float8_all_gather = false;
    // torchtitan 0.3's float8 converter has no tensor-wise recipe: a plan costed with it is
    // refused, a row-wise one written with its recipe (0.2 names it too).
    let e = run(Engine::Torchtitan, &k).unwrap_err();
    assert!(e.contains("tensor-wise") && e.contains("rowwise"), "{e}");
    k.train.float8_recipe = Some(Float8Recipe::Rowwise);
    let tt = run(Engine::Torchtitan, &k).unwrap();
    let py = file(&tt, "torchtitan_config.py");
    let v = torchtitan_py(py);
    assert_eq!(v.get("converter"), Some("float8"));
    assert!(py.contains("recipe_name=\"rowwise\""), "{py}");
    k.train.float8_recipe = Some(Float8Recipe::RowwiseGwHp);
    let tt = run(Engine::TorchtitanToml, &k).unwrap();
    assert!(file(&tt, "torchtitan.toml").contains("recipe_name = \"rowwise_with_gw_hp\""));
}

/// Every engine's export refuses `k`, saying `needle`.
fn refused_by_every_engine(k: &Case, needle: &str) {
    for engine in [
        Engine::Megatron,
        Engine::DeepSpeed,
        Engine::Torchtitan,
        Engine::TorchtitanToml,
    ] {
        let e = run(engine, k).unwrap_err();
        assert!(e.contains(needle), "{engine}: {e}");
    }
}

#[test]
fn models_with_windowed_or_mixed_blocks_are_refused_with_the_reason() {
    let mut k = llama2_7b();
    k.model.block_runs = vec![
        plait_spec::BlockRun {
            kind: plait_spec::BlockKind::Transformer,
            count: 16,
            window: Some(1024),
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
    ];
    refused_by_every_engine(&k, "sliding-window");
    // Chunked attention (Llama 4's RoPE layers) that bites at the sequence length: every
    // engine refuses it by name; a chunk at least as long as the sequence is full attention.
    let mut k = llama2_7b();
    k.model.attention_chunk = Some(1024);
    refused_by_every_engine(&k, "chunk");
    k.model.attention_chunk = Some(k.train.seq);
    assert!(run(Engine::Megatron, &k).is_ok());
    // Llama 4: chunked RoPE layers beside NoPE ones, refused even where no chunk bites.
    let k = case(
        "llama4-scout",
        64,
        4096,
        plait_spec::ParallelConfig {
            dp: 8,
            ep: 8,
            zero: 1,
            ..plait_spec::ParallelConfig::default()
        },
    );
    let e = run(Engine::Megatron, &k).unwrap_err();
    assert!(e.contains("NoPE"), "{e}");
    let mut k = llama2_7b();
    k.train.task = plait_spec::Task::Lora;
    refused_by_every_engine(&k, "LoRA");
    // Multi-token prediction: Megatron writes it (`--mtp-num-layers`); the others refuse.
    let mut k = llama2_7b();
    k.model.mtp_layers = 1;
    for engine in [
        Engine::DeepSpeed,
        Engine::Torchtitan,
        Engine::TorchtitanToml,
    ] {
        let e = run(engine, &k).unwrap_err();
        assert!(e.contains("multi-token prediction"), "{e}");
    }
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--mtp-num-layers"], "1");
}

#[test]
fn megatron_writes_recompute_modules_and_the_others_refuse_them() {
    use plait_spec::{RecomputeModule, RecomputeModules};
    let mut k = mixtral_ep();
    k.plan.config.recompute = Recompute::Selective;
    k.plan.config.recompute_modules =
        RecomputeModules::of(&[RecomputeModule::Moe, RecomputeModule::CoreAttn]);
    k.plan.stage_map = plait_spec::StageMap::uniform(k.model.layers, &k.plan.config);
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--recompute-granularity"], "selective");
    // The words of Megatron's nargs='*' list, in its order.
    assert_eq!(f["--recompute-modules"], "core_attn moe");
    for engine in [
        Engine::DeepSpeed,
        Engine::Torchtitan,
        Engine::TorchtitanToml,
    ] {
        let e = run(engine, &k).unwrap_err();
        assert!(
            e.contains("core_attn+moe") && e.contains("Megatron-Core"),
            "{e}"
        );
    }
    // The attention core alone is plain selective recomputation, written as before.
    k.plan.config.recompute_modules = RecomputeModules::CORE_ATTN;
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert!(!f.contains_key("--recompute-modules"));
}

#[test]
fn megatron_layouts_carry_the_mtp_layers() {
    // DeepSeek-V3's MTP layer sits in the last stage before the loss: a layout without it
    // is one Megatron-Core refuses (its `m` count must equal `--mtp-num-layers`).
    let mut k = pp4("deepseek-v3");
    let layout = "Et*14|t*17|t*15|t*15mL";
    k.plan.stage_map = StageMap::from_megatron_layout(layout, &k.model, &k.plan.config).unwrap();
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--pipeline-model-parallel-layout"], layout);
    assert_eq!(f["--mtp-num-layers"], "1");
}

#[test]
fn adam_state_in_bf16_is_refused_by_every_export() {
    let mut k = llama2_7b_pp4(vec![8; 4], vec![0; 4]);
    k.train.optimizer_state = plait_spec::OptimizerState::Bf16;
    for engine in Engine::ALL {
        let msg = export(*engine, &k.plan, &k.model, &k.train)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("Adam's state in bf16"), "{engine}: {msg}");
    }
}

/// Llama 2 7B, 64 × 4K sequences, dp 8 under ZeRO `zero` on DGX A100.
fn llama2_7b_dp8(zero: u8) -> Case {
    case(
        "llama2-7b",
        64,
        4096,
        plait_spec::ParallelConfig {
            dp: 8,
            zero,
            ..plait_spec::ParallelConfig::default()
        },
    )
}

#[test]
fn megatron_writes_activation_offloading_and_the_others_refuse_it() {
    let mut k = llama2_7b_dp8(1);
    k.train.cpu_offload_layers = 12;
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--cpu-offloading-num-layers"], "12");
    for engine in [
        Engine::DeepSpeed,
        Engine::Torchtitan,
        Engine::TorchtitanToml,
    ] {
        let e = run(engine, &k).unwrap_err();
        assert!(
            e.contains("offloads 12 blocks' activations") && e.contains("Megatron-Core"),
            "{engine}: {e}"
        );
    }
}

#[test]
fn megatron_and_deepspeed_write_optimizer_offloading_and_the_others_refuse_it() {
    let mut k = llama2_7b_dp8(3);
    k.train.optimizer_offload = 0.5;
    k.plan = plan_on("dgx-a100-80g", &k.model, &k.train, k.plan.config);
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--optimizer-cpu-offload"], "");
    assert_eq!(f["--optimizer-offload-fraction"], "0.5");
    // The HybridDeviceOptimizer's condition (Megatron-LM `training/arguments.py`).
    assert_eq!(f["--use-precision-aware-optimizer"], "");
    let files = run(Engine::DeepSpeed, &k).unwrap();
    let v: serde_json::Value = serde_json::from_str(file(&files, "ds_config.json")).unwrap();
    let section = &v["zero_optimization"]["offload_optimizer"];
    assert_eq!(section["device"], "cpu");
    assert_eq!(section["pin_memory"], true);
    assert_eq!(section["ratio"], 0.5);
    // All of it offloaded: DeepSpeed's default ratio, not written.
    k.train.optimizer_offload = 1.0;
    let files = run(Engine::DeepSpeed, &k).unwrap();
    let v: serde_json::Value = serde_json::from_str(file(&files, "ds_config.json")).unwrap();
    assert!(v["zero_optimization"]["offload_optimizer"]
        .get("ratio")
        .is_none());
    for engine in [Engine::Torchtitan, Engine::TorchtitanToml] {
        let e = run(engine, &k).unwrap_err();
        assert!(
            e.contains("optimizer state in host memory") && e.contains("offload_optimizer"),
            "{engine}: {e}"
        );
    }
}
