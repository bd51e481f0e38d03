//! The plans the export tests share, and readers for the exported files.
#![allow(dead_code)]

use std::collections::BTreeMap;

use plait_planner::export::{export, Engine, ExportFile};
use plait_planner::Plan;
use plait_spec::{
    cluster_preset, model_preset, CpComm, ModelSpec, ParallelConfig, Recompute, Schedule, StageMap,
    TrainSpec,
};

pub struct Case {
    pub plan: Plan,
    pub model: ModelSpec,
    pub train: TrainSpec,
}

pub fn case(model: &str, gbs: u64, seq: u64, c: ParallelConfig) -> Case {
    let m = model_preset(model).unwrap();
    let t = TrainSpec::new(gbs, seq);
    Case {
        plan: plan_on("dgx-a100-80g", &m, &t, c),
        model: m,
        train: t,
    }
}

/// `c` for `m` and `t` on cluster preset `cluster`, checked, estimated, under the even layout.
pub fn plan_on(cluster: &str, m: &ModelSpec, t: &TrainSpec, c: ParallelConfig) -> Plan {
    let cluster = cluster_preset(cluster).unwrap();
    c.validate(m, t, c.gpus()).unwrap();
    let d = plait_cost::device_for(&cluster, t.dtype).unwrap();
    let est = plait_cost::estimate(m, &cluster, t, &c, &d).unwrap();
    Plan::new(
        c,
        StageMap::uniform(m.layers, &c),
        c.microbatches(t),
        est.clone(),
        est.iteration_time_s,
    )
}

/// GPT-3 175B on 1024 A100s (Narayanan et al. 2021, Table 1 style): dp16 tp8 pp8.
pub fn gpt3() -> Case {
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
pub fn llama3_70b_zero(zero: u8) -> Case {
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

pub fn llama3_70b() -> Case {
    llama3_70b_zero(0)
}

/// Llama 2 7B on one 8-GPU node, data parallel with ZeRO-1.
pub fn llama2_7b() -> Case {
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
pub fn llama2_7b_pp4(chunk_blocks: Vec<u64>, recompute_blocks: Vec<u64>) -> Case {
    let mut k = pp4("llama2-7b");
    k.plan.stage_map = StageMap {
        chunk_blocks,
        recompute_blocks,
        placement: k.plan.config.schedule.placement(),
    };
    k.plan.stage_map.validate(32, &k.plan.config).unwrap();
    k
}

/// `model` on 8 GPUs as dp2 × pp4 with ZeRO-1, its blocks split evenly, batch 64 × 4096.
pub fn pp4(model: &str) -> Case {
    case(
        model,
        64,
        4096,
        ParallelConfig {
            dp: 2,
            pp: 4,
            mbs: 1,
            zero: 1,
            ..ParallelConfig::default()
        },
    )
}

/// Llama 2 7B on 8 GPUs as dp2 × pp4 under ZB-V: two chunks per rank in a V.
pub fn llama2_7b_zb_v() -> Case {
    llama2_7b_in_a_v(Schedule::ZbV)
}

/// Llama 2 7B on 8 GPUs as dp2 × pp4 under `schedule`, one of those that place two chunks
/// per rank in a V (ZB-V, DualPipeV).
pub fn llama2_7b_in_a_v(schedule: Schedule) -> Case {
    let mut k = pp4("llama2-7b");
    k.plan.config.vp = 2;
    k.plan.config.schedule = schedule;
    k.plan.stage_map = StageMap::uniform(32, &k.plan.config);
    k.plan.stage_map.validate(32, &k.plan.config).unwrap();
    k
}

/// Llama 2 7B on 8 GPUs as dp4 × tp2 with ZeRO-1: DeepSpeed runs it with AutoTP.
pub fn llama2_7b_autotp() -> Case {
    case(
        "llama2-7b",
        512,
        4096,
        ParallelConfig {
            dp: 4,
            tp: 2,
            mbs: 2,
            zero: 1,
            ..ParallelConfig::default()
        },
    )
}

/// Mixtral 8x7B on 8 GPUs, dp4 tp2 with expert parallel `ep` and expert tp `etp`.
fn mixtral(ep: u64, etp: Option<u64>) -> Case {
    case(
        "mixtral-8x7b",
        256,
        4096,
        ParallelConfig {
            dp: 4,
            tp: 2,
            ep,
            etp,
            mbs: 1,
            zero: 1,
            sp: true,
            recompute: Recompute::Full,
            ..ParallelConfig::default()
        },
    )
}

/// Mixtral 8x7B with expert parallelism: dp4 tp2 ep4 on 8 GPUs.
pub fn mixtral_ep() -> Case {
    mixtral(4, None)
}

/// Mixtral 8x7B with its experts unsplit beside tp 2 (expert tp 1, as NeMo runs Mixtral
/// 8x22B): ep 8 takes the tp ranks too, dp4 tp2 ep8 etp1 on 8 GPUs.
pub fn mixtral_etp1() -> Case {
    mixtral(8, Some(1))
}

/// Mixtral 8x7B dp4 tp2 ep4 dropping tokens at capacity factor 1.25 (padded to capacity).
pub fn mixtral_capacity() -> Case {
    let mut k = mixtral(4, None);
    k.train.moe_capacity = Some(1.25);
    k
}

/// Llama 3 8B on 32 GPUs (four nodes), data parallel under ZeRO `zero` sharded over each
/// node's 8 GPUs and replicated across the four nodes (hybrid sharding).
pub fn llama3_8b_hybrid(zero: u8) -> Case {
    case(
        "llama3-8b",
        256,
        4096,
        ParallelConfig {
            dp: 32,
            mbs: 1,
            zero,
            dp_shard: Some(8),
            ..ParallelConfig::default()
        },
    )
}

/// Llama 3 8B with context parallelism: dp2 cp2 tp2 on 8 GPUs.
pub fn llama3_8b_cp() -> Case {
    llama3_8b_cp_comm(CpComm::P2p)
}

/// Llama 3 8B at tp 2 × cp 2 with context parallelism's communication `cp_comm`.
pub fn llama3_8b_cp_comm(cp_comm: CpComm) -> Case {
    case(
        "llama3-8b",
        64,
        8192,
        ParallelConfig {
            dp: 2,
            tp: 2,
            cp: 2,
            cp_comm,
            mbs: 1,
            zero: 1,
            sp: true,
            ..ParallelConfig::default()
        },
    )
}

pub fn run(engine: Engine, k: &Case) -> Result<Vec<ExportFile>, String> {
    export(engine, &k.plan, &k.model, &k.train).map_err(|e| e.to_string())
}

/// An export as one text: each file under a `=== name ===` line, or the error.
pub fn rendered(engine: Engine, k: &Case) -> String {
    match run(engine, k) {
        Ok(files) => files
            .iter()
            .map(|f| format!("=== {} ===\n{}", f.name, f.contents))
            .collect(),
        Err(e) => format!("error: {e}\n"),
    }
}

pub fn file<'a>(files: &'a [ExportFile], name: &str) -> &'a str {
    &files
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .contents
}

/// The `MEGATRON_ARGS=( … )` array as flag → value ("" for switches), in order of first use.
pub fn megatron_flags(text: &str) -> BTreeMap<String, String> {
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

pub fn num(flags: &BTreeMap<String, String>, flag: &str, default: u64) -> u64 {
    flags
        .get(flag)
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} {v}")))
        .unwrap_or(default)
}

/// What `torchtitan_config.py` (torchtitan 0.3) sets, read from its `plait()` function.
pub struct TitanPy {
    /// `recipe` (the torchtitan recipe it starts from), `flavor`, `converter` (when
    /// float8), `training.<key>`, `parallelism.<key>` and `activation_checkpoint`, each
    /// to the Python value as written.
    pub settings: BTreeMap<String, String>,
    /// `parallelism.module_fqns_per_model_part`.
    pub parts: Vec<Vec<String>>,
}

impl TitanPy {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    pub fn num(&self, key: &str) -> u64 {
        let v = self.get(key).unwrap_or_else(|| panic!("no {key}"));
        v.parse().unwrap_or_else(|_| panic!("{key} = {v}"))
    }
}

fn put(settings: &mut BTreeMap<String, String>, k: String, v: &str) {
    assert!(
        settings.insert(k.clone(), v.trim().to_string()).is_none(),
        "{k} set twice"
    );
}

/// The strings between double quotes on `line`.
fn quoted(line: &str) -> Vec<String> {
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

pub fn torchtitan_py(text: &str) -> TitanPy {
    let mut settings = BTreeMap::new();
    let mut parts = Vec::new();
    let (mut in_parallelism, mut in_parts, mut in_model) = (false, false, false);
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if in_parts {
            if line == "]," {
                in_parts = false;
            } else {
                parts.push(quoted(line));
            }
        } else if in_parallelism {
            if line == ")" {
                in_parallelism = false;
            } else if line == "module_fqns_per_model_part=[" {
                in_parts = true;
            } else {
                let (k, v) = line
                    .trim_end_matches(',')
                    .split_once('=')
                    .unwrap_or_else(|| panic!("not key=value: {line}"));
                put(&mut settings, format!("parallelism.{k}"), v);
            }
        } else if in_model {
            if line.contains("Float8LinearConverter.Config(") {
                put(&mut settings, "converter".into(), "float8");
            }
            if line.starts_with('"') && !settings.contains_key("flavor") {
                put(&mut settings, "flavor".into(), &quoted(line)[0]);
            }
            if line == ")" {
                in_model = false;
            }
        } else if let Some(rest) = line.strip_prefix("config.model_spec = model_registry(") {
            if rest.is_empty() {
                in_model = true;
            } else {
                put(&mut settings, "flavor".into(), &quoted(rest)[0]);
            }
        } else if line == "config.parallelism = ParallelismConfig(" {
            in_parallelism = true;
        } else if let Some(rest) = line.strip_prefix("config.training.") {
            let (k, v) = rest.split_once(" = ").unwrap();
            put(&mut settings, format!("training.{k}"), v);
        } else if let Some(v) = line.strip_prefix("config.activation_checkpoint = ") {
            put(&mut settings, "activation_checkpoint".into(), v);
        } else if let Some(v) = line.strip_prefix("config = ") {
            put(&mut settings, "recipe".into(), v.trim_end_matches("()"));
        }
    }
    TitanPy { settings, parts }
}
