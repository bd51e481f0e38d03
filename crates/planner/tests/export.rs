//! Exports to Megatron-LM, DeepSpeed and torchtitan: snapshots of three published-style
//! plans, every export read back and checked against the plan, every emitted name checked
//! against the engines' own (lists copied from the upstream files the exporters cite), and
//! the refusals.

use std::collections::{BTreeMap, BTreeSet};

use plait_planner::export::{export, expressible, Engine, ExportFile};
use plait_planner::Plan;
use plait_spec::{
    cluster_preset, model_preset, Dtype, ModelSpec, ParallelConfig, Recompute, Schedule, StageMap,
    TrainSpec,
};

struct Case {
    plan: Plan,
    model: ModelSpec,
    train: TrainSpec,
}

fn case(model: &str, gbs: u64, seq: u64, c: ParallelConfig) -> Case {
    let m = model_preset(model).unwrap();
    let t = TrainSpec::new(gbs, seq);
    let cluster = cluster_preset("dgx-a100-80g").unwrap();
    c.validate(&m, &t, c.gpus()).unwrap();
    let d = plait_cost::device_for(&cluster, t.dtype).unwrap();
    let est = plait_cost::estimate(&m, &cluster, &t, &c, &d).unwrap();
    let plan = Plan {
        config: c,
        stage_map: StageMap::uniform(m.layers, &c),
        microbatches: c.microbatches(&t),
        closed_form_iteration_time_s: est.iteration_time_s,
        estimate: est,
        notes: vec![],
        simulated: None,
    };
    Case {
        plan,
        model: m,
        train: t,
    }
}

/// GPT-3 175B on 1024 A100s (Narayanan et al. 2021, Table 1 style): dp16 tp8 pp8.
fn gpt3() -> Case {
    case(
        "gpt3-175b",
        1536,
        2048,
        ParallelConfig {
            dp: 16,
            tp: 8,
            pp: 8,
            mbs: 1,
            sp: true,
            recompute: Recompute::Selective,
            schedule: Schedule::OneFOneB,
            ..ParallelConfig::default()
        },
    )
}

/// Llama 3 70B on 128 GPUs, interleaved with five chunks per rank, full recompute.
fn llama3_70b_zero(zero: u8) -> Case {
    case(
        "llama3-70b",
        256,
        8192,
        ParallelConfig {
            dp: 4,
            tp: 8,
            pp: 4,
            vp: 5,
            mbs: 1,
            zero,
            sp: true,
            recompute: Recompute::Full,
            schedule: Schedule::Interleaved,
            ..ParallelConfig::default()
        },
    )
}

fn llama3_70b() -> Case {
    llama3_70b_zero(0)
}

/// Llama 2 7B on one 8-GPU node, data parallel with ZeRO-1.
fn llama2_7b() -> Case {
    case(
        "llama2-7b",
        512,
        4096,
        ParallelConfig {
            dp: 8,
            mbs: 4,
            zero: 1,
            ..ParallelConfig::default()
        },
    )
}

/// Llama 2 7B on 8 GPUs as dp2 × pp4 with ZeRO-1 and the given stage map and recompute.
fn llama2_7b_pp4(chunk_blocks: Vec<u64>, recompute_blocks: Vec<u64>) -> Case {
    let mut k = case(
        "llama2-7b",
        64,
        4096,
        ParallelConfig {
            dp: 2,
            pp: 4,
            mbs: 1,
            zero: 1,
            ..ParallelConfig::default()
        },
    );
    k.plan.stage_map = StageMap {
        chunk_blocks,
        recompute_blocks,
    };
    k.plan.stage_map.validate(32, &k.plan.config).unwrap();
    k
}

/// Mixtral 8x7B on 8 GPUs with experts spread over the data-parallel ranks.
fn mixtral_ep() -> Case {
    case(
        "mixtral-8x7b",
        256,
        4096,
        ParallelConfig {
            dp: 4,
            tp: 2,
            ep: 4,
            mbs: 1,
            zero: 1,
            sp: true,
            recompute: Recompute::Full,
            ..ParallelConfig::default()
        },
    )
}

/// Llama 3 8B with context parallelism: dp2 cp2 tp2 on 8 GPUs.
fn llama3_8b_cp() -> Case {
    case(
        "llama3-8b",
        64,
        8192,
        ParallelConfig {
            dp: 2,
            tp: 2,
            cp: 2,
            mbs: 1,
            zero: 1,
            sp: true,
            ..ParallelConfig::default()
        },
    )
}

fn run(engine: Engine, k: &Case) -> Result<Vec<ExportFile>, String> {
    export(engine, &k.plan, &k.model, &k.train).map_err(|e| e.to_string())
}

/// An export as one text: each file under a `=== name ===` line, or the error.
fn rendered(engine: Engine, k: &Case) -> String {
    match run(engine, k) {
        Ok(files) => files
            .iter()
            .map(|f| format!("=== {} ===\n{}", f.name, f.contents))
            .collect(),
        Err(e) => format!("error: {e}\n"),
    }
}

fn file<'a>(files: &'a [ExportFile], name: &str) -> &'a str {
    &files
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .contents
}

/// The `MEGATRON_ARGS=( … )` array as flag → value ("" for switches), in order of first use.
fn megatron_flags(text: &str) -> BTreeMap<String, String> {
    let body = text
        .split_once("MEGATRON_ARGS=(\n")
        .expect("an argument array")
        .1
        .split_once("\n)")
        .expect("a closed array")
        .0;
    let mut out = BTreeMap::new();
    for line in body.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (flag, value) = line.split_once(' ').unwrap_or((line, ""));
        assert!(flag.starts_with("--"), "not a flag: {line}");
        let value = value.trim().trim_matches('"').to_string();
        assert!(
            out.insert(flag.to_string(), value).is_none(),
            "{flag} given twice"
        );
    }
    out
}

fn num(flags: &BTreeMap<String, String>, flag: &str, default: u64) -> u64 {
    flags
        .get(flag)
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} {v}")))
        .unwrap_or(default)
}

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
        "torchtitan_llama3_70b_zero1",
        rendered(Engine::Torchtitan, &llama3_70b_zero(1))
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
    let e = run(Engine::DeepSpeed, &llama3_70b()).unwrap_err();
    assert!(e.starts_with("deepspeed cannot express this plan: "), "{e}");
    assert!(e.contains("interleaved"), "{e}");
    assert!(e.contains("Megatron-DeepSpeed"), "{e}");
    let e = run(Engine::Torchtitan, &gpt3()).unwrap_err();
    assert!(e.contains("GPT"), "{e}");
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
    assert_eq!((gbs, mbs, gas), (k.train.gbs, c.mbs, k.plan.microbatches));
    // DeepSpeed's own batch assertion, with the data-parallel world size.
    assert_eq!(gbs, mbs * gas * c.dp);
    assert_eq!(n(&["zero_optimization", "stage"]), Some(u64::from(c.zero)));
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
        Engine::Torchtitan => check_torchtitan(k, &files),
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
        llama3_8b_cp(),
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
    assert!(checked >= 17, "only {checked} exports read back");
}

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
    let files = run(Engine::Torchtitan, &k).unwrap();
    assert!(file(&files, "torchtitan.toml").contains(
        "[\"layers.8\", \"layers.9\", \"layers.10\", \"layers.11\", \"layers.12\", \"layers.13\"]"
    ));
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
    let e = run(Engine::Torchtitan, &k).unwrap_err();
    assert!(e.contains("DDP"), "{e}");
    // fp16 and fp8 where the engine has no such switch.
    let mut k = llama2_7b();
    k.train.dtype = Dtype::Fp16;
    assert!(run(Engine::Torchtitan, &k).unwrap_err().contains("fp16"));
    k.train.dtype = Dtype::Fp8;
    assert!(run(Engine::DeepSpeed, &k).unwrap_err().contains("fp8"));
    let f = megatron_flags(file(
        &run(Engine::Megatron, &k).unwrap(),
        "megatron_args.sh",
    ));
    assert_eq!(f["--fp8-format"], "hybrid");
    let tt = run(Engine::Torchtitan, &k).unwrap();
    assert!(file(&tt, "torchtitan.toml").contains("converters = [\"quantize.linear.float8\"]"));
}

// The engines' own names, copied from the files the exporters cite.

/// Megatron-LM d98e8a6: `megatron/training/arguments.py` and the dataclasses it turns into
/// flags (`TransformerConfig`, `ModelParallelConfig`, `TrainingConfig`,
/// `DistributedInitConfig`, `CheckpointConfig`).
const MEGATRON_FLAGS: &[&str] = &[
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--kv-channels",
    "--ffn-hidden-size",
    "--seq-length",
    "--max-position-embeddings",
    "--position-embedding-type",
    "--swiglu",
    "--normalization",
    "--rotary-base",
    "--norm-epsilon",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--untie-embeddings-and-output-weights",
    "--num-experts",
    "--moe-router-topk",
    "--hidden-dropout",
    "--attention-dropout",
    "--attention-backend",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--pipeline-model-parallel-layout",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--ckpt-format",
    "--overlap-grad-reduce",
    "--micro-batch-size",
    "--global-batch-size",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--bf16",
    "--fp16",
    "--fp8-format",
];

/// DeepSpeed 38327e0: constants.py, zero/config.py, config.py `get_pipeline_config`,
/// activation_checkpointing/config.py, tensor_parallel/config.py.
const DEEPSPEED_KEYS: &[&str] = &[
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "bf16.enabled",
    "fp16.enabled",
    "fp16.loss_scale",
    "zero_optimization.stage",
    "zero_optimization.overlap_comm",
    "pipeline.stages",
    "pipeline.partition",
    "pipeline.activation_checkpoint_interval",
    "activation_checkpointing.partition_activations",
    "activation_checkpointing.contiguous_memory_optimization",
    "activation_checkpointing.cpu_checkpointing",
    "tensor_parallel.autotp_size",
];

/// torchtitan v0.2.2: `torchtitan/config/job_config.py` (only the fields plait may write).
const TORCHTITAN_KEYS: &[&str] = &[
    "job.description",
    "model.name",
    "model.flavor",
    "model.converters",
    "training.local_batch_size",
    "training.global_batch_size",
    "training.seq_len",
    "training.max_norm",
    "training.mixed_precision_param",
    "training.mixed_precision_reduce",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.fsdp_reshard_after_forward",
    "parallelism.tensor_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.module_fqns_per_model_part",
    "activation_checkpoint.mode",
    "activation_checkpoint.selective_ac_option",
    "quantize.linear.float8.filter_fqns",
];

fn json_keys(prefix: &str, v: &serde_json::Value, out: &mut BTreeSet<String>) {
    if let Some(map) = v.as_object() {
        for (k, x) in map {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if x.is_object() {
                json_keys(&key, x, out);
            } else {
                out.insert(key);
            }
        }
    }
}

fn toml_keys(prefix: &str, v: &toml::Value, out: &mut BTreeSet<String>) {
    if let Some(map) = v.as_table() {
        for (k, x) in map {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if x.is_table() {
                toml_keys(&key, x, out);
            } else {
                out.insert(key);
            }
        }
    }
}

#[test]
fn every_emitted_name_is_the_engines_own() {
    let mut cases = vec![
        gpt3(),
        llama3_70b(),
        llama3_70b_zero(1),
        llama2_7b(),
        llama2_7b_pp4(vec![8, 6, 10, 8], vec![0; 4]),
        llama2_7b_pp4(vec![6, 9, 9, 8], vec![0; 4]),
        llama2_7b_pp4(vec![8; 4], vec![8; 4]),
        llama2_7b_pp4(vec![8; 4], vec![3; 4]),
        mixtral_ep(),
        llama3_8b_cp(),
    ];
    let mut z3 = llama2_7b();
    z3.plan.config.zero = 3;
    cases.push(z3);
    let mut fp8 = llama2_7b();
    fp8.train.dtype = Dtype::Fp8;
    cases.push(fp8);
    let mut fp16 = llama2_7b();
    fp16.train.dtype = Dtype::Fp16;
    cases.push(fp16);
    let mut selective = llama2_7b();
    selective.plan.config.recompute = Recompute::Selective;
    cases.push(selective);
    let mut seen = [0usize; 3];
    for k in &cases {
        if let Ok(files) = run(Engine::Megatron, k) {
            for flag in megatron_flags(file(&files, "megatron_args.sh")).keys() {
                assert!(MEGATRON_FLAGS.contains(&flag.as_str()), "{flag}");
            }
            seen[0] += 1;
        }
        if let Ok(files) = run(Engine::DeepSpeed, k) {
            let v = serde_json::from_str(file(&files, "ds_config.json")).unwrap();
            let mut keys = BTreeSet::new();
            json_keys("", &v, &mut keys);
            for key in keys {
                assert!(DEEPSPEED_KEYS.contains(&key.as_str()), "{key}");
            }
            seen[1] += 1;
        }
        if let Ok(files) = run(Engine::Torchtitan, k) {
            let v = toml::from_str(file(&files, "torchtitan.toml")).unwrap();
            let mut keys = BTreeSet::new();
            toml_keys("", &v, &mut keys);
            for key in keys {
                assert!(TORCHTITAN_KEYS.contains(&key.as_str()), "{key}");
            }
            seen[2] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n >= 4), "{seen:?}");
}

/// The model flags of a Megatron export carry the config's RoPE θ and norm ε.
fn exported_theta_eps(model: ModelSpec) -> (BTreeMap<String, String>, ModelSpec) {
    let c = ParallelConfig {
        dp: 8,
        mbs: 1,
        zero: 1,
        ..ParallelConfig::default()
    };
    let t = TrainSpec::new(64, 4096);
    let cluster = cluster_preset("dgx-h100").unwrap();
    c.validate(&model, &t, c.gpus()).unwrap();
    let d = plait_cost::device_for(&cluster, t.dtype).unwrap();
    let est = plait_cost::estimate(&model, &cluster, &t, &c, &d).unwrap();
    let plan = Plan {
        config: c,
        stage_map: StageMap::uniform(model.layers, &c),
        microbatches: c.microbatches(&t),
        closed_form_iteration_time_s: est.iteration_time_s,
        estimate: est,
        notes: vec![],
        simulated: None,
    };
    let files = export(Engine::Megatron, &plan, &model, &t).unwrap();
    (megatron_flags(file(&files, "megatron_args.sh")), model)
}

#[test]
fn megatron_exports_carry_rope_theta_and_norm_epsilon() {
    // Llama 3: θ = 500,000 (Dubey et al. 2024), RMSNorm ε = 1e-5.
    let (flags, _) = exported_theta_eps(model_preset("llama3-8b").unwrap());
    assert_eq!(flags["--rotary-base"].parse::<u64>().unwrap(), 500_000);
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-5);
    // Qwen2.5-7B's config.json: θ = 10^6, ε = 1e-6.
    let qwen25 = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 131072, "use_sliding_window": false, "tie_word_embeddings": false,
        "hidden_act": "silu", "torch_dtype": "bfloat16"
    });
    let m =
        plait_spec::model_from_hf_config(&qwen25.to_string(), "Qwen2.5-7B/config.json").unwrap();
    let (flags, _) = exported_theta_eps(m);
    assert_eq!(flags["--rotary-base"].parse::<u64>().unwrap(), 1_000_000);
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-6);
    // Learned positions write no θ; a fractional θ has no Megatron flag.
    let (flags, _) = exported_theta_eps(model_preset("gpt-1.7b").unwrap());
    assert!(!flags.contains_key("--rotary-base"));
    assert_eq!(flags["--norm-epsilon"].parse::<f64>().unwrap(), 1e-5);
    let odd = ModelSpec {
        rope_theta: 10_000.5,
        ..model_preset("llama2-7b").unwrap()
    };
    let k = Case {
        model: odd,
        ..llama2_7b()
    };
    let err = run(Engine::Megatron, &k).unwrap_err();
    assert!(err.contains("--rotary-base"), "{err}");
}

#[test]
fn models_with_windowed_or_mixed_blocks_are_refused_with_the_reason() {
    let mut k = llama2_7b();
    k.model.block_runs = vec![
        plait_spec::BlockRun {
            count: 16,
            window: Some(4096),
            dense_ffn: None,
        },
        plait_spec::BlockRun {
            count: 16,
            window: None,
            dense_ffn: None,
        },
    ];
    for engine in [Engine::Megatron, Engine::DeepSpeed, Engine::Torchtitan] {
        let e = run(engine, &k).unwrap_err();
        assert!(e.contains("sliding-window"), "{e}");
    }
    let mut k = llama2_7b();
    k.train.task = plait_spec::Task::Lora;
    for engine in [Engine::Megatron, Engine::DeepSpeed, Engine::Torchtitan] {
        let e = run(engine, &k).unwrap_err();
        assert!(e.contains("LoRA"), "{e}");
    }
    let mut k = llama2_7b();
    k.model.mtp_layers = 1;
    for engine in [Engine::Megatron, Engine::DeepSpeed, Engine::Torchtitan] {
        let e = run(engine, &k).unwrap_err();
        assert!(e.contains("multi-token prediction"), "{e}");
    }
}
