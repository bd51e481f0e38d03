//! `ParallelConfig`'s checks, parsing and display.
use super::*;
use crate::presets::model_preset;

fn check_err(cfg: ParallelConfig, train: TrainSpec, gpus: u64, field: &str) {
    let m = model_preset("gpt3-175b").unwrap();
    let e = cfg.validate(&m, &train, gpus).unwrap_err();
    assert_eq!(e.field, field, "{e}");
    assert!(!e.allowed.is_empty(), "{e}");
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn malformed_configurations_name_their_field() {
    let ok = ParallelConfig {
        dp: 8,
        tp: 8,
        pp: 8,
        mbs: 1,
        ..Default::default()
    };
    let t = TrainSpec::new(512, 2048);
    ok.validate(&model_preset("gpt3-175b").unwrap(), &t, 512)
        .unwrap();
    check_err(
        ParallelConfig {
            tp: 7,
            dp: 1,
            pp: 1,
            ..ok
        },
        t.clone(),
        7,
        "tp",
    );
    check_err(
        ParallelConfig {
            pp: 128,
            dp: 1,
            tp: 1,
            ..ok
        },
        t.clone(),
        128,
        "pp",
    );
    check_err(ok, t.clone(), 64, "dp");
    check_err(ParallelConfig { mbs: 0, ..ok }, t.clone(), 512, "mbs");
    check_err(ParallelConfig { zero: 4, ..ok }, t.clone(), 512, "zero");
    check_err(ParallelConfig { vp: 2, ..ok }, t.clone(), 512, "vp");
    // A micro-batch that does not divide the batch is the micro-batch's fault; one that
    // does, but not with dp, is the batch's.
    check_err(ParallelConfig { mbs: 3, ..ok }, t.clone(), 512, "mbs");
    check_err(
        ParallelConfig {
            mbs: 1_000_000,
            ..ok
        },
        t.clone(),
        512,
        "mbs",
    );
    check_err(ok, TrainSpec::new(12, 2048), 512, "gbs");
    check_err(
        ParallelConfig {
            pp: 1,
            vp: 3,
            dp: 64,
            schedule: Schedule::Interleaved,
            ..ok
        },
        t.clone(),
        512,
        "vp",
    );
    check_err(ParallelConfig { ep: 2, ..ok }, t.clone(), 512, "ep");
    check_err(
        ParallelConfig {
            vp: 2,
            schedule: Schedule::Interleaved,
            ..ok
        },
        TrainSpec::new(8 * 12, 2048),
        512,
        "schedule",
    );
    check_err(
        ParallelConfig {
            cp: 3,
            dp: 1,
            tp: 1,
            pp: 1,
            ..ok
        },
        TrainSpec::new(8, 2048),
        3,
        "cp",
    );
}

#[test]
fn expert_tensor_parallelism_is_checked_against_tp_and_the_experts() {
    let m = model_preset("mixtral-8x7b").unwrap();
    let t = TrainSpec::new(64, 4096);
    let c = ParallelConfig {
        dp: 4,
        tp: 2,
        ep: 8,
        etp: Some(1),
        sp: true,
        ..Default::default()
    };
    // ep 8 takes the tp ranks too: 8 divides (tp / etp)·dp = 8, not dp = 4.
    c.validate(&m, &t, 8).unwrap();
    assert_eq!(c.validate(&m, &t, 8).ok(), Some(()));
    // Expert tp 1 is the default with sequence parallelism; tp without it.
    assert_eq!(ParallelConfig { etp: None, ..c }.expert_tp(), 1);
    assert_eq!(
        ParallelConfig {
            etp: None,
            sp: false,
            ..c
        }
        .expert_tp(),
        2
    );
    let field = |c: ParallelConfig, m: &ModelSpec| c.validate(m, &t, c.gpus()).unwrap_err().field;
    assert_eq!(field(ParallelConfig { etp: Some(2), ..c }, &m), "ep");
    assert_eq!(
        field(
            ParallelConfig {
                etp: None,
                sp: false,
                ..c
            },
            &m
        ),
        "ep"
    );
    assert_eq!(field(ParallelConfig { etp: Some(3), ..c }, &m), "etp");
    assert_eq!(field(ParallelConfig { sp: false, ..c }, &m), "etp");
    // A dense model takes no expert tp but the default or tp.
    let dense = model_preset("llama2-7b").unwrap();
    assert_eq!(
        ParallelConfig { ep: 1, ..c }.validate(&dense, &t, 8).ok(),
        Some(())
    );
    assert_eq!(
        field(
            ParallelConfig {
                ep: 1,
                sp: false,
                ..c
            },
            &dense
        ),
        "etp"
    );
}

#[test]
fn hybrid_sharding_is_checked_written_and_meshed() {
    let m = model_preset("llama3-8b").unwrap();
    let t = TrainSpec::new(512, 4096);
    let c: ParallelConfig = "dp64 tp2 mbs1 zero3 shard8".parse().unwrap();
    assert_eq!((c.dp_shard(), c.dp_replicas()), (8, 8));
    c.validate(&m, &t, 128).unwrap();
    assert!(c.to_string().contains("zero3 shard8"), "{c}");
    assert_eq!(c.to_string().parse::<ParallelConfig>().unwrap(), c);
    // ZeRO shards each state over the shard group (times cp), not all of dp.
    assert_eq!(c.state_shards().0, 8);
    // Sharding over all of dp is the default, written or not.
    let all: ParallelConfig = "dp64 tp2 mbs1 zero3 shard64".parse().unwrap();
    assert_eq!(all.dp_shard, None);
    assert!(!all.to_string().contains("shard"));
    // torch's mesh splits dp into replicate (outer) × shard (inner).
    let mesh = c.device_mesh();
    assert_eq!(mesh.dims, ["pp", "dp_replicate", "dp_shard", "cp", "tp"]);
    assert_eq!(mesh.shape, [1, 8, 8, 1, 2]);
    assert_eq!(all.device_mesh().dims, ["pp", "dp", "cp", "tp"]);
    let field = |c: ParallelConfig| c.validate(&m, &t, c.gpus()).unwrap_err().field;
    assert_eq!(
        field(ParallelConfig {
            dp_shard: Some(3),
            ..c
        }),
        "shard"
    );
    assert_eq!(field(ParallelConfig { zero: 0, ..c }), "shard");
    // The expert replicas split evenly over the hybrid copies.
    let moe = model_preset("mixtral-8x7b").unwrap();
    let e: ParallelConfig = "dp16 ep8 mbs1 zero1 shard8".parse().unwrap();
    e.validate(&moe, &t, 16).unwrap();
    assert_eq!(e.state_shards(), (8, 1));
    let e4 = ParallelConfig {
        dp_shard: Some(4),
        ..e
    };
    assert_eq!(e4.validate(&moe, &t, 16).unwrap_err().field, "shard");
}

#[test]
fn configurations_parse_from_their_display() {
    let c = ParallelConfig {
        dp_shard: None,
        dp: 32,
        tp: 8,
        pp: 4,
        vp: 8,
        cp: 2,
        cp_comm: CpComm::A2a,
        ep: 2,
        etp: Some(2),
        mbs: 4,
        zero: 1,
        sp: true,
        recompute: Recompute::Selective,
        recompute_modules: RecomputeModules::CORE_ATTN,
        schedule: Schedule::Interleaved,
        moe_dispatcher: crate::MoeDispatcher::HybridEp,
        moe_a2a_overlap: true,
    };
    assert_eq!(c.to_string().parse::<ParallelConfig>(), Ok(c));
    assert!(
        c.to_string().contains("cp2 cp-comm=a2a ep2 etp2 mbs4"),
        "{c}"
    );
    assert!(
        c.to_string()
            .ends_with("recompute=selective dispatcher=hybridep a2a-overlap interleaved"),
        "{c}"
    );
    // Without expert parallelism what the experts' communication was asked to be stays, for
    // validation to judge (an overlap with nothing to overlap is refused).
    assert!(
        "ep1 a2a-overlap"
            .parse::<ParallelConfig>()
            .unwrap()
            .moe_a2a_overlap
    );
    assert_eq!(
        "ep2 a2a-overlap a2a-overlap".parse::<ParallelConfig>(),
        Err("`a2a-overlap` is given twice".into())
    );
    // Serialised, the defaults are left out: configurations written before these knobs
    // existed read back equal, and write out byte for byte.
    let json = serde_json::to_string(&ParallelConfig::default()).unwrap();
    assert!(!json.contains("moe_"), "{json}");
    let back: ParallelConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ParallelConfig::default());
    let json = serde_json::to_string(&c).unwrap();
    assert!(
        json.contains(r#""moe_dispatcher":"hybridep","moe_a2a_overlap":true"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<ParallelConfig>(&json).unwrap(), c);
    let d = ParallelConfig::default();
    assert_eq!(d.to_string().parse::<ParallelConfig>(), Ok(d));
    // An expert tp equal to the default is the default: neither written nor kept. The
    // default is 1 with sequence parallelism, tp without.
    let same = ParallelConfig { etp: None, ..c };
    assert!(!same.to_string().contains("etp"));
    assert_eq!("tp8 etp8".parse::<ParallelConfig>().unwrap().etp, None);
    assert_eq!("tp8 sp etp1".parse::<ParallelConfig>().unwrap().etp, None);
    let split: ParallelConfig = "tp8 sp etp8".parse().unwrap();
    assert_eq!(
        (split.etp, split.to_string().contains("etp8")),
        (Some(8), true)
    );
    let (c, dp) = parse_config_items("tp2,pp2,schedule=gpipe").unwrap();
    assert_eq!((c.tp, c.pp, c.schedule, dp), (2, 2, Schedule::Gpipe, None));
    assert!("tp2 tp4"
        .parse::<ParallelConfig>()
        .unwrap_err()
        .contains("twice"));
    assert!("zero5"
        .parse::<ParallelConfig>()
        .unwrap_err()
        .contains("0|1|2|3"));
    assert!("xx2"
        .parse::<ParallelConfig>()
        .unwrap_err()
        .contains("cannot read"));
}

#[test]
fn recompute_modules_read_and_write_as_megatron_names_them() {
    use RecomputeModule::*;
    let c: ParallelConfig = "tp2 recompute=mla_up_proj+moe+core_attn".parse().unwrap();
    assert_eq!(c.recompute, Recompute::Selective);
    assert_eq!(
        c.recompute_modules,
        RecomputeModules::of(&[CoreAttn, MlaUpProj, Moe])
    );
    // Written in Megatron's order, and read back.
    assert!(
        c.to_string()
            .contains("recompute=core_attn+mla_up_proj+moe"),
        "{c}"
    );
    assert_eq!(c.to_string().parse::<ParallelConfig>(), Ok(c));
    // The attention core alone is plain selective.
    let core: ParallelConfig = "recompute=core_attn".parse().unwrap();
    assert_eq!(core, "recompute=selective".parse().unwrap());
    assert!(core.to_string().contains("recompute=selective"), "{core}");
    // Unknown or repeated modules, and unknown keywords, are refused by name.
    let bad = "recompute=core_attn+attn"
        .parse::<ParallelConfig>()
        .unwrap_err();
    assert!(bad.contains("`attn`") && bad.contains("moe_act"), "{bad}");
    let twice = "recompute=moe+moe".parse::<ParallelConfig>().unwrap_err();
    assert!(twice.contains("twice"), "{twice}");
    let word = "recompute=some".parse::<ParallelConfig>().unwrap_err();
    assert!(
        word.contains("none|selective|full") && word.contains("mla_up_proj"),
        "{word}"
    );
}

#[test]
fn recompute_modules_need_megatron_and_the_parts_they_name() {
    let dense = model_preset("llama3-8b").unwrap();
    let moe = model_preset("mixtral-8x7b").unwrap();
    let mla = model_preset("deepseek-v3").unwrap();
    let t = TrainSpec::new(64, 4096);
    let c = |text: &str| -> ParallelConfig { format!("dp8 {text}").parse().unwrap() };
    c("recompute=core_attn+mlp")
        .validate(&dense, &t, 8)
        .unwrap();
    c("ep8 recompute=moe_act+layernorm")
        .validate(&moe, &t, 8)
        .unwrap();
    c("ep8 recompute=mla_up_proj+moe")
        .validate(&mla, &t, 8)
        .unwrap();
    for (model, text) in [
        (&dense, "recompute=moe_act"),
        (&moe, "ep8 recompute=mla_up_proj"),
    ] {
        let e = c(text).validate(model, &t, 8).unwrap_err();
        assert_eq!(e.field, "recompute", "{e}");
    }
    let titan = TrainSpec {
        engine: crate::train::Engine::Torchtitan,
        ..t
    };
    let e = c("recompute=core_attn+mlp")
        .validate(&dense, &titan, 8)
        .unwrap_err();
    assert!(e.to_string().contains("Megatron-Core"), "{e}");
    // The default module set is plain selective recomputation under every engine.
    c("recompute=selective")
        .validate(&dense, &titan, 8)
        .unwrap();
}
