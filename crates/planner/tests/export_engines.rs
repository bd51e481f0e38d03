//! Exports to Megatron-LM, DeepSpeed and torchtitan (0.3 and 0.2): snapshots of three
//! published-style plans, and every export read back and checked against the plan.

mod common;

use plait_planner::export::{expressible, Engine, ExportFile};
use plait_spec::{Dtype, Recompute, Schedule, TrainSpec};

use common::*;

#[test]
fn snapshots() {
    let cases = [
        ("gpt3_175b", gpt3()),
        ("llama3_70b", llama3_70b()),
        ("llama2_7b", llama2_7b()),
    ];
    for (name, k) in &cases {
        for engine in Engine::ALL {
            insta::assert_snapshot!(format!("{engine}_{name}"), rendered(*engine, k));
        }
    }
    // torchtitan runs the 70B plan with sharded data parallelism.
    insta::assert_snapshot!(
        "torchtitan-0.2_llama3_70b_zero1",
        rendered(Engine::TorchtitanToml, &llama3_70b_zero(1))
    );
    insta::assert_snapshot!(
        "torchtitan_llama3_70b_zero1",
        rendered(Engine::Torchtitan, &llama3_70b_zero(1))
    );
    // AutoTP: train_batch_size counts the tensor-parallel ranks (DeepSpeed divides by all).
    insta::assert_snapshot!(
        "deepspeed_llama2_7b_autotp",
        rendered(Engine::DeepSpeed, &llama2_7b_autotp())
    );
}

#[test]
fn the_three_plans_export_where_the_engines_can_run_them() {
    for engine in Engine::ALL {
        run(*engine, &llama2_7b()).unwrap();
    }
    run(Engine::Megatron, &gpt3()).unwrap();
    run(Engine::Megatron, &llama3_70b()).unwrap();
    run(Engine::Torchtitan, &llama3_70b_zero(1)).unwrap();
    run(Engine::TorchtitanToml, &llama3_70b_zero(1)).unwrap();
    let e = run(Engine::DeepSpeed, &llama3_70b()).unwrap_err();
    assert!(e.starts_with("deepspeed cannot express this plan: "), "{e}");
    assert!(e.contains("interleaved"), "{e}");
    assert!(e.contains("Megatron-DeepSpeed"), "{e}");
    for engine in [Engine::Torchtitan, Engine::TorchtitanToml] {
        let e = run(engine, &gpt3()).unwrap_err();
        assert!(e.contains("GPT"), "{e}");
    }
}

/// Reads every export back and checks it against the plan.
fn check_megatron(k: &Case, files: &[ExportFile]) {
    let c = &k.plan.config;
    let text = file(files, "megatron_args.sh");
    let f = megatron_flags(text);
    assert_eq!(num(&f, "--tensor-model-parallel-size", 1), c.tp);
    assert_eq!(num(&f, "--pipeline-model-parallel-size", 1), c.pp);
    assert_eq!(num(&f, "--context-parallel-size", 1), c.cp);
    assert_eq!(num(&f, "--expert-model-parallel-size", 1), c.ep);
    // The experts' tp, written where it is not Megatron-Core's default (tp); a dense model
    // has none.
    let etp = if k.model.moe.is_some() {
        c.expert_tp()
    } else {
        c.tp
    };
    assert_eq!(num(&f, "--expert-tensor-parallel-size", c.tp), etp);
    // Megatron derives dp from the world size the header states.
    assert!(text.contains(&format!(
        "world size = dp×tp×pp×cp = {}×{}×{}×{} = {}",
        c.dp,
        c.tp,
        c.pp,
        c.cp,
        c.gpus()
    )));
    let vp = match f.get("--pipeline-model-parallel-layout") {
        Some(layout) => {
            let stages = layout.split('|').count() as u64;
            assert_eq!(stages % c.pp, 0, "{layout}");
            stages / c.pp
        }
        None => num(&f, "--num-virtual-stages-per-pipeline-rank", 1),
    };
    let interleaved = c.pp > 1 && c.schedule == Schedule::Interleaved;
    assert_eq!(vp, if interleaved { c.vp } else { 1 });
    assert_eq!(num(&f, "--micro-batch-size", 0), c.mbs);
    assert_eq!(num(&f, "--global-batch-size", 0), k.train.gbs);
    // MoE runs the all-to-all dispatcher the cost model prices, and a capacity factor
    // with padding where the run drops tokens.
    let moe = k.model.moe.is_some();
    assert_eq!(
        f.get("--moe-token-dispatcher-type").map(String::as_str),
        moe.then_some("alltoall")
    );
    let capacity = k.train.moe_capacity.filter(|_| moe);
    assert_eq!(
        f.get("--moe-expert-capacity-factor")
            .map(|v| v.parse::<f64>().unwrap()),
        capacity
    );
    assert_eq!(
        f.contains_key("--moe-pad-expert-input-to-capacity"),
        capacity.is_some()
    );
    assert_eq!(
        k.train.gbs / (c.mbs * (c.gpus() / (c.tp * c.pp * c.cp))),
        k.plan.microbatches
    );
    assert_eq!(f.contains_key("--sequence-parallel"), c.sp && c.tp > 1);
    assert_eq!(
        f.contains_key("--use-distributed-optimizer"),
        matches!(c.zero, 1 | 2)
    );
    assert_eq!(f.contains_key("--use-megatron-fsdp"), c.zero == 3);
    // Hybrid sharding: dp / shard copies of the distributed optimizer (1 by default).
    assert_eq!(
        num(&f, "--num-distributed-optimizer-instances", 1),
        c.dp_replicas()
    );
    assert_eq!(num(&f, "--num-layers", 0), k.model.layers);
    let all_full = (0..c.pp).all(|r| {
        k.plan.stage_map.recompute_blocks[r as usize] == k.plan.stage_map.rank_blocks(r, c.pp)
    });
    let none_full = k.plan.stage_map.recompute_blocks.iter().all(|&n| n == 0);
    let granularity = f.get("--recompute-granularity").map(String::as_str);
    if all_full {
        assert_eq!(granularity, Some("full"));
        assert_eq!(f["--recompute-method"], "uniform");
        assert_eq!(f["--recompute-num-layers"], "1");
    } else if none_full {
        let expect = (c.recompute == Recompute::Selective).then_some("selective");
        assert_eq!(granularity, expect);
    } else {
        assert_eq!(granularity, Some("full"));
        assert_eq!(f["--recompute-method"], "block");
        assert_eq!(
            num(&f, "--recompute-num-layers", 0),
            k.plan.stage_map.recompute_blocks[0]
        );
    }
    // Blocks per rank from the layout or the first/last flags.
    let p = c.pp as usize;
    let totals: Vec<u64> = (0..c.pp)
        .map(|r| k.plan.stage_map.rank_blocks(r, c.pp))
        .collect();
    if let Some(layout) = f.get("--pipeline-model-parallel-layout") {
        let stages: Vec<u64> = layout
            .split('|')
            .map(|s| {
                let s = s.trim_start_matches('E').trim_end_matches('L');
                match s {
                    "" => 0,
                    "t" => 1,
                    s => s.strip_prefix("t*").unwrap().parse().unwrap(),
                }
            })
            .collect();
        assert_eq!(stages, k.plan.stage_map.chunk_blocks);
    } else if p > 1 {
        let first = num(&f, "--decoder-first-pipeline-num-layers", 0);
        let last = num(&f, "--decoder-last-pipeline-num-layers", 0);
        let middle = k.model.layers - first - last;
        let middle_ranks = (c.pp - u64::from(first > 0) - u64::from(last > 0)).max(1);
        for (r, &total) in totals.iter().enumerate() {
            let expect = if r == 0 && first > 0 {
                first
            } else if r == p - 1 && last > 0 {
                last
            } else {
                middle / middle_ranks
            };
            assert_eq!(total, expect, "rank {r}");
        }
    }
}

fn check_deepspeed(k: &Case, files: &[ExportFile]) {
    let c = &k.plan.config;
    let v: serde_json::Value = serde_json::from_str(file(files, "ds_config.json")).unwrap();
    let n = |path: &[&str]| -> Option<u64> {
        let mut x = &v;
        for p in path {
            x = x.get(p)?;
        }
        Some(x.as_u64().unwrap())
    };
    let (gbs, mbs, gas) = (
        n(&["train_batch_size"]).unwrap(),
        n(&["train_micro_batch_size_per_gpu"]).unwrap(),
        n(&["gradient_accumulation_steps"]).unwrap(),
    );
    assert_eq!(
        (gbs, mbs, gas),
        (k.train.gbs * c.tp, c.mbs, k.plan.microbatches)
    );
    // DeepSpeed's own batch assertion: the world it divides by is the pipeline grid's
    // data-parallel size, or every rank (dp × tp) for AutoTP, initialised without an mpu.
    assert_eq!(gbs, mbs * gas * c.dp * c.tp);
    assert_eq!(n(&["zero_optimization", "stage"]), Some(u64::from(c.zero)));
    assert_eq!(
        n(&["zero_optimization", "mics_shard_size"]),
        (c.dp_replicas() > 1).then_some(c.dp_shard())
    );
    assert_eq!(
        n(&["pipeline", "stages"]),
        (c.pp > 1).then_some(c.pp),
        "{v}"
    );
    assert_eq!(
        n(&["tensor_parallel", "autotp_size"]),
        (c.tp > 1).then_some(c.tp)
    );
    assert_eq!(c.vp, 1);
    assert_eq!(c.cp, 1);
    let full = k.plan.stage_map.recompute_blocks.iter().any(|&n| n > 0);
    assert_eq!(v.get("activation_checkpointing").is_some(), full);
    if c.pp > 1 {
        assert_eq!(
            n(&["pipeline", "activation_checkpoint_interval"]),
            Some(u64::from(full))
        );
    }
    assert_eq!(
        v.get("bf16").and_then(|b| b.get("enabled")),
        Some(&serde_json::Value::Bool(k.train.dtype == Dtype::Bf16))
    );
}

fn check_torchtitan(k: &Case, files: &[ExportFile]) {
    let c = &k.plan.config;
    let v: toml::Value = toml::from_str(file(files, "torchtitan.toml")).unwrap();
    let n = |section: &str, key: &str| -> i64 {
        v[section][key]
            .as_integer()
            .unwrap_or_else(|| panic!("{section}.{key}"))
    };
    let s = |section: &str, key: &str| -> Option<String> {
        v[section].get(key).map(|x| x.as_str().unwrap().to_string())
    };
    let (replicate, shard) = (
        n("parallelism", "data_parallel_replicate_degree") as u64,
        n("parallelism", "data_parallel_shard_degree") as u64,
    );
    assert_eq!(replicate * shard, c.dp);
    if c.dp > 1 {
        assert_eq!(shard > 1, c.zero >= 1, "FSDP for ZeRO ≥ 1, DDP for ZeRO-0");
    }
    if c.zero >= 1 {
        assert_eq!((replicate, shard), (c.dp_replicas(), c.dp_shard()));
    }
    assert_eq!(n("parallelism", "tensor_parallel_degree") as u64, c.tp);
    assert_eq!(n("parallelism", "context_parallel_degree") as u64, c.cp);
    assert_eq!(n("parallelism", "expert_parallel_degree") as u64, c.ep);
    assert_eq!(n("parallelism", "pipeline_parallel_degree") as u64, c.pp);
    let local = n("training", "local_batch_size") as u64;
    let global = n("training", "global_batch_size") as u64;
    assert_eq!(global, k.train.gbs);
    assert_eq!(n("training", "seq_len") as u64, k.train.seq);
    // torchtitan's accumulation steps: global / (local × dp).
    let accumulation = global / (local * c.dp);
    if c.pp > 1 {
        let micro = n("parallelism", "pipeline_parallel_microbatch_size") as u64;
        assert_eq!(micro, c.mbs);
        assert_eq!(accumulation, 1);
        assert_eq!(local / micro, k.plan.microbatches);
        let parts = v["parallelism"]["module_fqns_per_model_part"]
            .as_array()
            .unwrap();
        assert_eq!(parts.len() as u64, c.pp * c.vp);
        let blocks: Vec<u64> = parts
            .iter()
            .map(|p| {
                p.as_array()
                    .unwrap()
                    .iter()
                    .filter(|x| x.as_str().unwrap().starts_with("layers."))
                    .count() as u64
            })
            .collect();
        assert_eq!(blocks, k.plan.stage_map.chunk_blocks);
        let schedule = s("parallelism", "pipeline_parallel_schedule").unwrap();
        let expect = match c.schedule {
            Schedule::Interleaved if c.vp > 1 => "Interleaved1F1B",
            Schedule::Gpipe => "GPipe",
            Schedule::ZbH1 => "InterleavedZeroBubble",
            Schedule::ZbV => "ZBVZeroBubble",
            Schedule::DualPipeV => "DualPipeV",
            _ => "1F1B",
        };
        assert_eq!(schedule, expect);
    } else {
        assert_eq!(local, c.mbs);
        assert_eq!(accumulation, k.plan.microbatches);
    }
    let full = k.plan.stage_map.recompute_blocks.iter().any(|&n| n > 0);
    let mode = s("activation_checkpoint", "mode").unwrap();
    let expect = if full {
        "full"
    } else if c.recompute == Recompute::Selective {
        "selective"
    } else {
        "none"
    };
    assert_eq!(mode, expect);
}

/// Reads `torchtitan_config.py` back: the same settings as the TOML, under torchtitan 0.3's
/// names.
fn check_torchtitan_py(k: &Case, files: &[ExportFile]) {
    let c = &k.plan.config;
    let text = file(files, "torchtitan_config.py");
    assert!(
        text.starts_with("# torchtitan 0.3.0 config module"),
        "{text}"
    );
    assert!(
        text.contains("\ndef plait() -> Trainer.Config:\n"),
        "{text}"
    );
    let v = torchtitan_py(text);
    let (replicate, shard) = (
        v.num("parallelism.data_parallel_replicate_degree"),
        v.num("parallelism.data_parallel_shard_degree"),
    );
    assert_eq!(replicate * shard, c.dp);
    if c.dp > 1 {
        assert_eq!(
            shard > 1,
            c.zero >= 1,
            "FSDP for ZeRO ≥ 1, replicas for ZeRO-0"
        );
    }
    if c.zero >= 1 {
        assert_eq!((replicate, shard), (c.dp_replicas(), c.dp_shard()));
    }
    assert_eq!(v.num("parallelism.tensor_parallel_degree"), c.tp);
    assert_eq!(v.num("parallelism.context_parallel_degree"), c.cp);
    assert_eq!(v.num("parallelism.expert_parallel_degree"), c.ep);
    assert_eq!(v.num("parallelism.pipeline_parallel_degree"), c.pp);
    let (local, global) = (
        v.num("training.local_batch_size"),
        v.num("training.global_batch_size"),
    );
    assert_eq!(global, k.train.gbs);
    assert_eq!(v.num("training.seq_len"), k.train.seq);
    let accumulation = global / (local * c.dp);
    if c.pp > 1 {
        let micro = v.num("parallelism.pipeline_parallel_microbatch_size");
        assert_eq!(micro, c.mbs);
        assert_eq!(accumulation, 1);
        assert_eq!(local / micro, k.plan.microbatches);
        assert_eq!(v.get("training.disable_cuda_graphs"), Some("True"));
        assert_eq!(v.parts.len() as u64, c.pp * c.vp);
        let blocks: Vec<u64> = v
            .parts
            .iter()
            .map(|p| p.iter().filter(|x| x.starts_with("layers.")).count() as u64)
            .collect();
        assert_eq!(blocks, k.plan.stage_map.chunk_blocks);
        assert_eq!(v.parts[0][0], "tok_embeddings");
        assert_eq!(v.parts.last().unwrap().last().unwrap(), "lm_head");
        let expect = match c.schedule {
            Schedule::Interleaved if c.vp > 1 => "\"Interleaved1F1B\"",
            Schedule::Gpipe => "\"GPipe\"",
            Schedule::ZbH1 => "\"InterleavedZeroBubble\"",
            Schedule::ZbV => "\"ZBVZeroBubble\"",
            Schedule::DualPipeV => "\"DualPipeV\"",
            _ => "\"1F1B\"",
        };
        assert_eq!(
            v.get("parallelism.pipeline_parallel_schedule"),
            Some(expect)
        );
    } else {
        assert_eq!(local, c.mbs);
        assert_eq!(accumulation, k.plan.microbatches);
        assert!(v.parts.is_empty());
    }
    let full = k.plan.stage_map.recompute_blocks.iter().any(|&n| n > 0);
    let expect = if full {
        "FullAC.Config()"
    } else if c.recompute == Recompute::Selective {
        "SelectiveAC.Config()"
    } else {
        "None"
    };
    assert_eq!(v.get("activation_checkpoint"), Some(expect));
    assert_eq!(
        v.get("converter").is_some(),
        k.train.dtype == Dtype::Fp8,
        "float8 converter for fp8 only"
    );
}

fn check(engine: Engine, k: &Case) {
    let files = run(engine, k).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        files,
        run(engine, k).unwrap(),
        "deterministic output for {engine}"
    );
    match engine {
        Engine::Megatron => check_megatron(k, &files),
        Engine::DeepSpeed => check_deepspeed(k, &files),
        Engine::Torchtitan => check_torchtitan_py(k, &files),
        Engine::TorchtitanToml => check_torchtitan(k, &files),
    }
    assert!(expressible(engine, &k.plan).is_ok());
}

#[test]
fn every_export_reads_back_as_its_plan() {
    let mut checked = 0;
    let cases = [
        gpt3(),
        llama3_70b(),
        llama3_70b_zero(1),
        llama2_7b(),
        llama2_7b_pp4(vec![8, 8, 8, 8], vec![0; 4]),
        llama2_7b_pp4(vec![8, 8, 8, 8], vec![8; 4]),
        llama2_7b_pp4(vec![6, 9, 9, 8], vec![0; 4]),
        llama2_7b_pp4(vec![8, 6, 10, 8], vec![0; 4]),
        llama2_7b_pp4(vec![8, 8, 8, 8], vec![3; 4]),
        mixtral_ep(),
        mixtral_etp1(),
        llama3_8b_cp(),
        llama2_7b_autotp(),
        llama3_8b_hybrid(1),
        llama3_8b_hybrid(3),
        mixtral_capacity(),
        llama2_7b_zb_v(),
        llama2_7b_in_a_v(Schedule::DualPipeV),
    ];
    for k in &cases {
        for engine in Engine::ALL {
            match expressible(*engine, &k.plan) {
                Ok(()) => {
                    if run(*engine, k).is_ok() {
                        check(*engine, k);
                        checked += 1;
                    }
                }
                Err(reason) => {
                    let e = run(*engine, k).unwrap_err();
                    assert!(e.contains(&reason), "{e} lacks {reason}");
                }
            }
        }
    }
    assert!(checked >= 33, "only {checked} exports read back");
}

#[test]
fn megatron_export_keeps_the_weights_the_estimate_costed() {
    // Llama 2 7B with the distributed optimizer in `dtype` on `cluster`: the weight flags.
    let weight_flags_at = |zero: u8, cluster: &str, dtype, sixteen_bit_weights| {
        let mut k = llama2_7b();
        k.train = TrainSpec {
            dtype,
            sixteen_bit_weights,
            ..k.train
        };
        let config = plait_spec::ParallelConfig {
            zero,
            ..k.plan.config
        };
        k.plan = plan_on(cluster, &k.model, &k.train, config);
        let files = run(Engine::Megatron, &k).unwrap();
        let f = megatron_flags(file(&files, "megatron_args.sh"));
        ["--fp8-param-gather", "--reuse-grad-buf-for-mxfp8-param-ag"]
            .map(|flag| f.contains_key(flag))
    };
    let weight_flags = |cluster: &str, dtype, sixteen| weight_flags_at(1, cluster, dtype, sixteen);
    assert_eq!(weight_flags("dgx-h100", Dtype::Fp8, false), [true, false]);
    // Kept at 16 bits, as the estimate costed them: gathered in 16 bits, cast each step.
    assert_eq!(weight_flags("dgx-h100", Dtype::Fp8, true), [false, false]);
    // MXFP8 weights are gathered through the gradient buffer, as the estimate costs them
    // (Megatron-Core's recommended setting for MXFP8, optimizer_config.py:416-424).
    assert_eq!(weight_flags("dgx-b200", Dtype::Mxfp8, false), [true, true]);
    assert_eq!(weight_flags("dgx-b200", Dtype::Bf16, false), [false, false]);
    // Megatron-FSDP (ZeRO-3) gathers its own MXFP8 weights: no gradient-buffer reuse
    // (Megatron-LM turns it off there, arguments.py:1137).
    assert_eq!(
        weight_flags_at(3, "dgx-b200", Dtype::Mxfp8, false),
        [true, false]
    );
    assert_eq!(
        weight_flags_at(1, "dgx-b200", Dtype::Mxfp8, true),
        [false, false]
    );
}

#[test]
fn megatron_export_replays_whole_layers_as_graphs_where_the_estimate_did() {
    // The estimate costs `CudaGraphs::Layers` as whole layers replayed with no host launch
    // wait; Megatron-Core captures that with its own graphs over the whole layer
    // (`--cuda-graph-impl local`, whose modules default to the whole layer).
    let impl_of = |cuda_graphs| {
        let mut k = llama2_7b();
        k.train = TrainSpec {
            cuda_graphs,
            ..k.train
        };
        let files = run(Engine::Megatron, &k).unwrap();
        megatron_flags(file(&files, "megatron_args.sh"))
            .get("--cuda-graph-impl")
            .cloned()
    };
    assert_eq!(
        impl_of(plait_spec::CudaGraphs::Layers).as_deref(),
        Some("local")
    );
    assert_eq!(impl_of(plait_spec::CudaGraphs::None), None);
}
