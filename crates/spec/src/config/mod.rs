//! One parallel configuration ([`ParallelConfig`]): its checks against a model, a batch
//! and a GPU count, its derived quantities (GPUs, mesh, shard groups) and its text form
//! (`dp32 tp8 pp4 vp8 mbs4 zero1 sp recompute=selective interleaved`, as `plait plan`
//! prints it and `--config` reads it).
//!
//! Well-formed is not the same as feasible: a configuration that does not fit in memory is
//! well-formed here and rejected with a reason by the cost model.

use std::fmt;
use std::str::FromStr;

use crate::error::{Result, SpecError};
use crate::model::ModelSpec;
use crate::parallel::{Degree, Exact, Parallel};
use crate::train::{
    CpComm, MoeDispatcher, Recompute, RecomputeModule, RecomputeModules, Schedule, TrainSpec,
};

/// `model` splits over tensor-parallel degree `tp`: its attention heads, its key/value
/// heads (split, or replicated onto the ranks) and its MLP width. Whole configurations
/// ([`ParallelConfig::validate`]) and the planner's pins ask this one rule.
pub fn check_tp_split(model: &ModelSpec, tp: u64) -> Result<()> {
    let err = |problem: String, allowed: String| Err(SpecError::for_field("tp", problem, allowed));
    if !model.heads.is_multiple_of(tp) {
        return err(
            format!(
                "{} attention heads of {} do not split over tp = {tp}",
                model.heads, model.name
            ),
            format!("divisors of {}", model.heads),
        );
    }
    if !model.kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(model.kv_heads) {
        return err(
            format!(
                "{} key/value heads do not split over (or replicate onto) tp = {tp}",
                model.kv_heads
            ),
            format!("divisors or multiples of {}", model.kv_heads),
        );
    }
    if !model.ffn_hidden.is_multiple_of(tp) {
        return err(
            format!(
                "MLP width {} does not split over tp = {tp}",
                model.ffn_hidden
            ),
            format!("divisors of {}", model.ffn_hidden),
        );
    }
    // Megatron-LM's `MambaMixer` splits heads and B/C groups over tp
    // (`megatron/core/ssm/mamba_mixer.py`: `nheads % tp_size`, `ngroups % tp_size`).
    if let Some(mamba) = model.mamba.filter(|_| model.has_mamba()) {
        let split = mamba.heads.is_multiple_of(tp) && mamba.groups.is_multiple_of(tp);
        if !split {
            return err(
                format!(
                    "Mamba-2 layers of {} ({} heads, {} groups) do not split over tp = {tp}",
                    model.name, mamba.heads, mamba.groups
                ),
                format!("common divisors of {} and {}", mamba.heads, mamba.groups),
            );
        }
    }
    Ok(())
}

/// `pp` stages of `vp` chunks each hold at least one of `model`'s layers, or the embedding
/// or the loss alone: at most two chunks more than layers, as Megatron-Core lays them out
/// when it counts the embedding and the loss as layers (`even_chunk_blocks`).
pub fn check_pipeline_chunks(model: &ModelSpec, pp: u64, vp: u64) -> Result<()> {
    let chunks = pp.saturating_mul(vp);
    let most = model.layers.saturating_add(2);
    if chunks > most {
        return Err(SpecError::for_field(
            "pp",
            format!(
                "pp×vp = {chunks} pipeline chunks but {} has only {} layers, with the \
                 embedding and the loss {most}",
                model.name, model.layers
            ),
            format!("pp×vp ≤ {most}"),
        ));
    }
    Ok(())
}

/// Greatest common divisor (the largest cp both head counts split over).
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One parallel configuration: degrees, micro-batch, ZeRO, sequence parallel, recompute and
/// schedule (the knobs are declared once, in [`Parallel`]).
pub type ParallelConfig = Parallel<Exact>;

/// Largest degree (dp, tp, pp, vp, cp, ep) or micro-batch a configuration may have: 2^20,
/// far beyond the largest published runs (tens of thousands of GPUs).
pub const MAX_DEGREE: u64 = 1 << 20;

impl ParallelConfig {
    /// GPUs this configuration occupies.
    pub fn gpus(&self) -> u64 {
        self.mesh().world()
    }

    /// The device mesh of this configuration (degrees and rank order).
    pub fn mesh(&self) -> crate::mesh::Mesh {
        crate::mesh::Mesh {
            tp: self.tp,
            cp: self.cp,
            dp: self.dp,
            pp: self.pp,
        }
    }

    /// The same configuration with the knobs that equal their default written as the
    /// default (`dp_shard` = dp as `None`, `etp` = its default as `None`), so that equal
    /// configurations compare and display equal.
    pub fn normalised(mut self) -> Self {
        if self.etp == Some(self.default_expert_tp()) {
            self.etp = None;
        }
        if self.dp_shard == Some(self.dp) {
            self.dp_shard = None;
        }
        if self.cp == 1 {
            self.cp_comm = CpComm::P2p;
        }
        if self.recompute != Recompute::Selective {
            self.recompute_modules = RecomputeModules::CORE_ATTN;
        }
        self
    }

    /// Whether each tp rank's query and key/value heads split over cp, as Ulysses
    /// (`cp_comm = a2a`) needs (TE d0067d0 `flash_attn_a2a_communicate` views the head
    /// dimension as cp × heads / cp).
    pub fn heads_split_over_cp(&self, model: &ModelSpec) -> bool {
        let (heads, kv) = self.heads_per_tp_rank(model);
        heads.is_multiple_of(self.cp) && kv.is_multiple_of(self.cp)
    }

    /// Query and key/value heads on each tp rank (key/value heads fewer than tp are
    /// replicated, one per rank).
    fn heads_per_tp_rank(&self, model: &ModelSpec) -> (u64, u64) {
        (model.heads / self.tp, model.kv_heads.div_ceil(self.tp))
    }

    /// The torch device mesh of this configuration ([`Mesh::device_mesh`](crate::Mesh)),
    /// with the data-parallel dimension split into `dp_replicate` (outer) × `dp_shard`
    /// (inner) under hybrid sharding, as torchtitan's `ParallelDims` names them and FSDP2
    /// takes a 2-D mesh for HSDP.
    pub fn device_mesh(&self) -> crate::mesh::DeviceMeshShape {
        let mut m = self.mesh().device_mesh();
        if self.dp_replicas() > 1 {
            if let Some(i) = m.dims.iter().position(|&d| d == "dp") {
                m.dims.splice(i..=i, ["dp_replicate", "dp_shard"]);
                m.shape.splice(i..=i, [self.dp_replicas(), self.dp_shard()]);
            }
        }
        m
    }

    /// Megatron-Core's selective modules apply under its engine only, and `mla_up_proj` and
    /// `moe_act` to models with latent attention or experts (Megatron-LM d98e8a6
    /// `transformer_config.py` refuses them otherwise).
    pub fn check_recompute_modules(&self, model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        let modules = self.recompute_modules;
        if self.recompute != Recompute::Selective || modules.is_default() {
            return Ok(());
        }
        let err = |problem: String, allowed: String| {
            Err(SpecError::for_field("recompute", problem, allowed))
        };
        if !train.engine.recomputes_modules() {
            return err(
                format!(
                    "recompute modules ({modules}) are Megatron-Core's, not {}'s",
                    train.engine
                ),
                format!("none, selective or full under {}", train.engine),
            );
        }
        if modules.contains(RecomputeModule::MlaUpProj) && model.mla.is_none() {
            return err(
                format!(
                    "mla_up_proj needs latent attention, which {} has not",
                    model.name
                ),
                "modules without mla_up_proj".into(),
            );
        }
        if modules.contains(RecomputeModule::MoeAct) && model.moe.is_none() {
            return err(
                format!("moe_act needs experts, which {} has not", model.name),
                "modules without moe_act".into(),
            );
        }
        Ok(())
    }

    /// The expert dispatcher is one the engine runs.
    pub fn check_moe_dispatcher(&self, train: &TrainSpec) -> Result<()> {
        match train.engine.moe_dispatcher_refused(self.moe_dispatcher) {
            Some(why) => Err(SpecError::for_field(
                "moe_dispatcher",
                why,
                train.engine.moe_dispatcher_names(),
            )),
            None => Ok(()),
        }
    }

    /// Megatron-Core's overlap of the expert all-to-alls with another micro-batch's compute
    /// (`moe_a2a_overlap`) runs under its engine only, with expert parallelism,
    /// with interleaving wherever there is a pipeline, and without full recompute or the
    /// `moe` recompute module, with at most one MTP layer (Megatron-LM d98e8a6
    /// `transformer_config.py:3002-3045`).
    pub fn check_moe_a2a_overlap(&self, model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        if !self.moe_a2a_overlap {
            return Ok(());
        }
        let err = |problem: String, allowed: &str| {
            Err(SpecError::for_field(
                "moe_a2a_overlap",
                problem,
                allowed.to_string(),
            ))
        };
        if let Some(why) = train.engine.moe_a2a_overlap_refused() {
            return err(why, "under engine megatron");
        }
        if model.moe.is_none() || self.ep < 2 {
            return err(
                format!("{} at ep {} has no expert all-to-alls", model.name, self.ep),
                "with experts and ep > 1",
            );
        }
        if self.pp > 1 && self.vp < 2 {
            return err(
                format!("pp {} without interleaving", self.pp),
                "pp 1, or vp > 1 with the interleaved schedule",
            );
        }
        if model.mtp_layers > 1 {
            return err(
                format!("{} MTP layers", model.mtp_layers),
                "at most one MTP layer (transformer_config.py:3041-3045)",
            );
        }
        if self.recompute == Recompute::Full
            || (self.recompute == Recompute::Selective
                && self.recompute_modules.contains(RecomputeModule::Moe))
        {
            return err(
                "the MoE layer recomputed".into(),
                "recompute none, or selective without the moe module",
            );
        }
        Ok(())
    }

    /// Blocks kept in bf16 (`TrainSpec::bf16_first_layers`, `bf16_last_layers`) exist in
    /// the model, together at most all of its blocks, and only in a run whose linears are
    /// low-precision, under Megatron-Core (whose `first_last_layers_bf16` does it; it asks
    /// for fp8 or fp4 with them, `transformer_config.py`).
    pub fn check_bf16_layers(model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        let (first, last) = (train.bf16_first_layers, train.bf16_last_layers);
        if first == 0 && last == 0 {
            return Ok(());
        }
        let field = if first > 0 {
            "bf16_first_layers"
        } else {
            "bf16_last_layers"
        };
        if !train.dtype.low_precision_linears() {
            return Err(SpecError::for_field(
                field,
                format!(
                    "a {} run has no low-precision layers to keep in bf16",
                    train.dtype
                ),
                "with dtype fp8, mxfp8 or nvfp4",
            ));
        }
        if train.engine != crate::Engine::Megatron {
            return Err(SpecError::for_field(
                field,
                format!(
                    "engine {} has no switch that keeps blocks in bf16 (Megatron-Core's \
                     first_last_layers_bf16 does)",
                    train.engine.keyword()
                ),
                "with engine megatron",
            ));
        }
        if first.saturating_add(last) > model.layers {
            return Err(SpecError::for_field(
                field,
                format!(
                    "{first} first and {last} last blocks are more than {}'s {}",
                    model.name, model.layers
                ),
                format!("together at most {}", model.layers),
            ));
        }
        Ok(())
    }

    /// Micro-batches per pipeline per iteration.
    pub fn microbatches(&self, train: &TrainSpec) -> u64 {
        train.gbs / (self.mbs * self.dp)
    }

    /// Checks that the configuration is well-formed for `model`, `train` and `gpus` GPUs.
    /// Errors name the field and the values that would be accepted.
    pub fn validate(&self, model: &ModelSpec, train: &TrainSpec, gpus: u64) -> Result<()> {
        let err = |field: &str, problem: String, allowed: String| {
            Err(SpecError::for_field(field, problem, allowed))
        };
        let degrees = Degree::ALL.iter().map(|&d| (d.name(), self.degree(d)));
        for (field, v) in
            degrees
                .into_iter()
                .chain([("mbs", self.mbs), ("gbs", train.gbs), ("seq", train.seq)])
        {
            if v == 0 {
                return err(field, "must be ≥ 1, got 0".into(), "integers ≥ 1".into());
            }
            // Degrees beyond any machine are refused before anything is sized by them.
            if field != "gbs" && field != "seq" && v > MAX_DEGREE {
                return err(
                    field,
                    format!("{v} is larger than any machine runs"),
                    format!("integers from 1 to {MAX_DEGREE}"),
                );
            }
        }
        if self.zero > 3 {
            return err(
                "zero",
                format!("ZeRO stage {} does not exist", self.zero),
                "0|1|2|3".into(),
            );
        }
        if self.gpus() != gpus {
            return err(
                "dp",
                format!(
                    "dp×tp×pp×cp = {}×{}×{}×{} = {} but gpus = {gpus}",
                    self.dp,
                    self.tp,
                    self.pp,
                    self.cp,
                    self.gpus()
                ),
                format!("degrees whose product is {gpus}"),
            );
        }
        check_tp_split(model, self.tp)?;
        check_pipeline_chunks(model, self.pp, self.vp)?;
        if !self.schedule.accepts_chunks(self.vp) {
            return match self.schedule.fixed_chunks() {
                Some(n) => err(
                    "vp",
                    format!(
                        "{} runs exactly {n} chunks per rank, but vp = {}",
                        self.schedule, self.vp
                    ),
                    format!("vp = {n} with schedule = {}", self.schedule),
                ),
                None => err(
                    "vp",
                    format!(
                        "vp = {} needs schedule = interleaved (got {})",
                        self.vp, self.schedule
                    ),
                    "vp = 1, or schedule = interleaved".into(),
                ),
            };
        }
        if self.schedule.fixed_chunks().is_some() && self.pp == 1 {
            return err(
                "schedule",
                format!("{} needs a pipeline (pp ≥ 2), but pp = 1", self.schedule),
                Schedule::allowed(),
            );
        }
        if self.schedule == Schedule::Interleaved && self.pp == 1 {
            // With chunks asked for, the chunks are what a single stage cannot hold.
            if self.vp > 1 {
                return err(
                    "vp",
                    format!(
                        "vp = {} chunks per rank need a pipeline (pp ≥ 2), but pp = 1",
                        self.vp
                    ),
                    "vp = 1 with pp = 1, or pp ≥ 2".into(),
                );
            }
            return err(
                "schedule",
                "interleaved needs pp ≥ 2".into(),
                Schedule::allowed(),
            );
        }
        if self.cp > 1 && model.has_mamba() {
            return err(
                "cp",
                format!(
                    "context parallelism of Mamba-2 layers ({}) is not modelled",
                    model.name
                ),
                "cp = 1 for models with Mamba-2 layers".into(),
            );
        }
        if !train.seq.is_multiple_of(self.cp) {
            return err(
                "cp",
                format!(
                    "sequence {} does not split over cp = {}",
                    train.seq, self.cp
                ),
                format!("divisors of {}", train.seq),
            );
        }
        if self.cp > 1 && self.cp_comm == CpComm::A2a && !self.heads_split_over_cp(model) {
            let (heads, kv) = self.heads_per_tp_rank(model);
            return err(
                "cp_comm",
                format!(
                    "a2a splits attention heads over cp, but {} ({heads} query and {kv} \
                     key/value heads per tp rank) do not split over cp = {}",
                    model.name, self.cp
                ),
                format!("p2p or allgather, or a cp dividing {}", gcd(heads, kv)),
            );
        }
        if self.tp > 1 && self.sp && !train.seq.is_multiple_of(self.tp * self.cp) {
            return err(
                "sp",
                format!(
                    "sequence {} does not split over tp×cp = {}",
                    train.seq,
                    self.tp * self.cp
                ),
                "sequence lengths divisible by tp×cp".into(),
            );
        }
        match model.moe {
            Some(moe) => {
                if moe.experts % self.ep != 0 {
                    return err(
                        "ep",
                        format!("{} experts do not split over ep = {}", moe.experts, self.ep),
                        format!("divisors of {}", moe.experts),
                    );
                }
                let etp = self.expert_tp();
                if etp != self.tp && !(self.sp && self.tp > 1) {
                    return err(
                        "etp",
                        format!(
                            "expert tp = {etp} differs from tp = {} without sequence \
                             parallelism (the dispatcher hands each tp rank its own \
                             sequence slice)",
                            self.tp
                        ),
                        format!("{} (= tp), or add sp", self.tp),
                    );
                }
                if etp == 0 || !self.tp.is_multiple_of(etp) {
                    return err(
                        "etp",
                        format!("expert tp = {etp} must divide tp = {}", self.tp),
                        format!("divisors of {}", self.tp),
                    );
                }
                // The expert layers' ranks (expert-tp, ep, expert-dp) are the dense layers'
                // tp × cp × dp ranks in another order: ep takes what expert-tp leaves, and an
                // expert tp below tp lends ep the rest of the tp ranks.
                let room = self.expert_ranks();
                let more = if etp > 1 {
                    ", or more with a smaller etp"
                } else {
                    ""
                };
                if !room.is_multiple_of(self.ep) {
                    let problem = format!(
                        "ep = {} must divide (tp / expert tp)×dp×cp = {room}",
                        self.ep
                    );
                    return err("ep", problem, format!("divisors of {room}{more}"));
                }
            }
            None if self.ep > 1 => {
                return err("ep", format!("{} has no experts", model.name), "1".into());
            }
            None if self
                .etp
                .is_some_and(|e| e != self.tp && e != self.default_expert_tp()) =>
            {
                return err(
                    "etp",
                    format!("{} has no experts", model.name),
                    format!("{} (= tp) or unset", self.tp),
                );
            }
            None => {}
        }
        self.check_recompute_modules(model, train)?;
        self.check_moe_a2a_overlap(model, train)?;
        self.check_moe_dispatcher(train)?;
        Self::check_bf16_layers(model, train)?;
        self.check_offloads(model, train)?;
        self.check_cuda_graphs(train)?;
        if let Some(shard) = self.dp_shard {
            if shard == 0 || !self.dp.is_multiple_of(shard) {
                return err(
                    "shard",
                    format!("shard = {shard} must divide dp = {}", self.dp),
                    format!("divisors of {}", self.dp),
                );
            }
            if shard < self.dp && self.zero == 0 {
                return err(
                    "shard",
                    format!(
                        "shard = {shard} below dp = {} needs ZeRO ≥ 1 (ZeRO-0 shards nothing)",
                        self.dp
                    ),
                    "zero 1–3, or shard = dp".into(),
                );
            }
            let replicas = self.dp_replicas();
            if model.moe.is_some() && !self.expert_replicas().is_multiple_of(replicas) {
                return err(
                    "shard",
                    format!(
                        "dp / shard = {replicas} copies do not split the {} replicas of \
                         each expert",
                        self.expert_replicas()
                    ),
                    format!("shard with dp / shard dividing {}", self.expert_replicas()),
                );
            }
        }
        if !train.gbs.is_multiple_of(self.mbs) {
            return err(
                "mbs",
                format!(
                    "micro-batch {} does not divide the global batch of {} sequences",
                    self.mbs, train.gbs
                ),
                format!("divisors of {}", train.gbs),
            );
        }
        if !train.gbs.is_multiple_of(self.mbs * self.dp) {
            return err(
                "gbs",
                format!(
                    "global batch {} is not a multiple of mbs×dp = {}×{}",
                    train.gbs, self.mbs, self.dp
                ),
                format!("multiples of {}", self.mbs * self.dp),
            );
        }
        let (m, kind, pp) = (self.microbatches(train), self.schedule, self.pp);
        if let Some(allowed) = kind.microbatches_refused(m, pp) {
            return err(
                "schedule",
                format!("{kind} needs the micro-batch count (gbs/(mbs·dp) = {m}) to be {allowed} (pp = {pp})"),
                format!("a batch of {allowed} micro-batches, or schedule = 1f1b"),
            );
        }
        Ok(())
    }
}

/// A recompute policy as configurations write it: `none`, `selective`, `full`, or
/// Megatron-Core's selective modules joined by `+` (`core_attn+mla_up_proj+moe`), which
/// mean `selective` with those modules.
pub fn parse_recompute(text: &str) -> std::result::Result<(Recompute, RecomputeModules), String> {
    match text.parse::<Recompute>() {
        Ok(r) => Ok((r, RecomputeModules::CORE_ATTN)),
        Err(keyword) => {
            let modules = text.parse().map_err(|modules: String| {
                if text.contains('+') || text.contains('_') {
                    modules
                } else {
                    format!(
                        "{keyword}, or recompute modules ({}) joined by +",
                        RecomputeModule::allowed()
                    )
                }
            })?;
            Ok((Recompute::Selective, modules))
        }
    }
}

/// A configuration read from its own display string (`dp32 tp8 pp4 vp8 mbs4 zero1 sp
/// recompute=selective interleaved`, as `plait plan` prints it), items separated by spaces
/// or commas, each at most once; `schedule=1f1b` works as well as the bare keyword. Degrees
/// not given are 1; `dp` may be left out (`None`) for the caller to derive from a GPU count.
pub fn parse_config_items(
    text: &str,
) -> std::result::Result<(ParallelConfig, Option<u64>), String> {
    let mut c = ParallelConfig::default();
    let mut dp = None;
    let mut seen: Vec<String> = Vec::new();
    let degrees: Vec<String> = Degree::ALL.iter().map(|d| format!("{d}2")).collect();
    let expected = format!(
        "items like {} cp-comm=a2a etp1 mbs1 zero1 shard8 sp recompute=full \
         dispatcher=hybridep a2a-overlap 1f1b",
        degrees.join(" ")
    );
    for part in text
        .split(|ch: char| ch == ',' || ch.is_whitespace())
        .filter(|p| !p.is_empty())
    {
        let bad = || format!("cannot read `{part}` (expected {expected})");
        let key = match part.find(|ch: char| ch.is_ascii_digit() || ch == '=') {
            _ if part == "a2a-overlap" => part,
            Some(i) if !part.starts_with(|ch: char| ch.is_ascii_digit()) => &part[..i],
            _ if part.parse::<Schedule>().is_ok() => "schedule",
            _ => part,
        };
        if seen.iter().any(|k| k == key) {
            return Err(format!("`{key}` is given twice"));
        }
        seen.push(key.to_string());
        if part == "sp" {
            c.sp = true;
            continue;
        }
        if part == "a2a-overlap" {
            c.moe_a2a_overlap = true;
            continue;
        }
        if let Some(v) = part.strip_prefix("dispatcher=") {
            c.moe_dispatcher = v.parse()?;
            continue;
        }
        if let Some(v) = part.strip_prefix("recompute=") {
            (c.recompute, c.recompute_modules) = parse_recompute(v)?;
            continue;
        }
        if let Some(v) = part.strip_prefix("cp-comm=") {
            c.cp_comm = v.parse()?;
            continue;
        }
        if let Ok(kind) = part
            .strip_prefix("schedule=")
            .unwrap_or(part)
            .parse::<Schedule>()
        {
            c.schedule = kind;
            continue;
        }
        let split = part.find(|ch: char| ch.is_ascii_digit()).ok_or_else(bad)?;
        let (key, num) = part.split_at(split);
        let value: u64 = num.parse().map_err(|_| bad())?;
        if value == 0 {
            return Err(format!("`{part}` must be at least 1"));
        }
        match (key, Degree::named(key)) {
            (_, Some(Degree::Dp)) => dp = Some(value),
            (_, Some(d)) => *c.degree_mut(d) = value,
            ("etp", _) => c.etp = Some(value),
            ("shard", _) => c.dp_shard = Some(value),
            ("mbs", _) => c.mbs = value,
            ("zero", _) if value <= 3 => c.zero = value as u8,
            ("zero", _) => {
                return Err(format!(
                    "ZeRO stage {value} does not exist (allowed: 0|1|2|3)"
                ))
            }
            _ => return Err(bad()),
        }
    }
    if c.vp > 1 && c.schedule == Schedule::OneFOneB {
        c.schedule = Schedule::Interleaved;
    }
    // A schedule of a fixed chunk count (ZB-V: two) sets vp when it is not written.
    c.vp = c
        .schedule
        .chunks_per_rank(seen.iter().any(|k| k == "vp").then_some(c.vp));
    c.dp = dp.unwrap_or(1);
    // Knobs equal to their default are the default, written or not; with dp left to the
    // caller the shard group is kept for the caller to normalise once dp is known.
    let shard = c.dp_shard;
    c = c.normalised();
    if dp.is_none() {
        c.dp_shard = shard;
    }
    Ok((c, dp))
}

impl FromStr for ParallelConfig {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        parse_config_items(s).map(|(c, _)| c)
    }
}

impl fmt::Display for ParallelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for &d in Degree::ALL {
            let v = self.degree(d);
            if v > 1 || d.shown_at_one() {
                write!(f, "{sep}{d}{v}")?;
                sep = " ";
            }
            if d == Degree::Cp && self.cp > 1 && self.cp_comm != CpComm::P2p {
                write!(f, " cp-comm={}", self.cp_comm)?;
            }
        }
        if let Some(etp) = self.etp.filter(|&e| e != self.default_expert_tp()) {
            write!(f, "{sep}etp{etp}")?;
            sep = " ";
        }
        write!(f, "{sep}mbs{}", self.mbs)?;
        if self.zero > 0 {
            write!(f, " zero{}", self.zero)?;
        }
        if let Some(shard) = self.dp_shard.filter(|&s| s != self.dp) {
            write!(f, " shard{shard}")?;
        }
        if self.sp {
            write!(f, " sp")?;
        }
        if self.recompute == Recompute::Selective && !self.recompute_modules.is_default() {
            write!(f, " recompute={}", self.recompute_modules)?;
        } else if self.recompute != Recompute::None {
            write!(f, " recompute={}", self.recompute)?;
        }
        if self.moe_dispatcher != MoeDispatcher::AllToAll {
            write!(f, " dispatcher={}", self.moe_dispatcher)?;
        }
        if self.moe_a2a_overlap {
            write!(f, " a2a-overlap")?;
        }
        write!(f, " {}", self.schedule)
    }
}

mod graphs;
mod offload;

#[cfg(test)]
mod tests;
