//! Pins that no configuration can satisfy, whatever the search picks for the rest: the
//! error names the flag, as `plait estimate` does for a whole configuration.

use plait_spec::{
    check_pipeline_chunks, check_tp_split, Degree, ParallelConfig, Schedule, SpecError,
};

use crate::request::Request;

/// The mesh degrees in the order their pins are checked (which error a request with
/// several bad pins gets).
const MESH_PIN_ORDER: [Degree; 4] = [Degree::Tp, Degree::Pp, Degree::Cp, Degree::Dp];

/// The first pin of `req` that no completion of the unpinned degrees makes well-formed,
/// as the field-naming error `ParallelConfig::validate` would give; Ok when every pin can
/// be completed (the search may still find nothing that fits).
pub fn check_pins(req: &Request) -> Result<(), SpecError> {
    let (m, t, p, n) = (req.model, req.train, &req.pins, req.gpus);
    let err = |field: &str, problem: String, allowed: String| {
        Err(SpecError::for_field(field, problem, allowed))
    };
    // A degree the cost model does not price yet cannot be planned (a degree declared
    // after the cost model was written).
    for &d in plait_spec::Degree::ALL {
        if let Some(v) = p.degree(d).filter(|&v| v > 1) {
            let mut probe = plait_spec::ParallelConfig::default();
            *probe.degree_mut(d) = v;
            plait_cost::check_priced(&probe)?;
        }
    }
    // Each mesh degree divides the GPUs, and so does the product of those given.
    let mut product: u64 = 1;
    for d in MESH_PIN_ORDER {
        let (field, Some(v)) = (d.name(), p.degree(d)) else {
            continue;
        };
        if !n.is_multiple_of(v) {
            return err(
                field,
                format!("{n} GPUs do not split into {field} = {v} groups"),
                format!("divisors of {n}"),
            );
        }
        product = product.saturating_mul(v);
        if !n.is_multiple_of(product) {
            return err(
                field,
                format!(
                    "{n} GPUs do not split into the given degrees (their product is {product})"
                ),
                format!("degrees whose product divides {n}"),
            );
        }
    }
    // Pinned recompute modules the engine or the model cannot run: said before the search,
    // which would otherwise only find nothing that fits.
    if let (Some(recompute), Some(recompute_modules)) = (p.recompute, p.recompute_modules) {
        ParallelConfig {
            recompute,
            recompute_modules,
            ..ParallelConfig::default()
        }
        .check_recompute_modules(m, t)?;
    }
    ParallelConfig::check_bf16_layers(m, t)?;
    // Offloading with a pinned pipeline or recompute activation offloading cannot run
    // beside, optimizer offloading under an engine without a CPU optimizer or with ZeRO
    // pinned to what cannot shard the state it offloads, or either on a cluster without
    // the host side it needs.
    ParallelConfig {
        pp: p.pp.unwrap_or(1),
        recompute: p.recompute.unwrap_or(plait_spec::Recompute::None),
        zero: p.zero.unwrap_or(3),
        ..ParallelConfig::default()
    }
    .check_offloads(m, t)?;
    plait_cost::check_offload_host(req.cluster, t)?;
    // The experts' communication pinned to what the engine or the model cannot run: the
    // configuration's own checks on a probe with the pins (and ep > 1 unless pinned; the
    // knobs that depend on the rest of the plan at their defaults).
    let probe = ParallelConfig {
        ep: p.ep.unwrap_or(2),
        moe_dispatcher: p.moe_dispatcher.unwrap_or_default(),
        moe_a2a_overlap: p.moe_a2a_overlap.unwrap_or(false),
        ..ParallelConfig::default()
    };
    probe.check_moe_dispatcher(t)?;
    probe.check_moe_a2a_overlap(m, t)?;
    if let Some(tp) = p.tp {
        check_tp_split(m, tp)?;
    }
    let vp = p.vp.unwrap_or(1);
    if let Some(pp) = p.pp {
        check_pipeline_chunks(m, pp, vp)?;
    }
    if vp > 1 {
        if p.pp == Some(1) {
            return err(
                "vp",
                format!("vp = {vp} chunks per rank need a pipeline (pp ≥ 2), but pp = 1"),
                "vp = 1 with pp = 1, or pp ≥ 2".into(),
            );
        }
        if vp.saturating_mul(2) > m.layers {
            return err(
                "vp",
                format!(
                    "vp = {vp} chunks on each of at least 2 stages but {} has only {} layers",
                    m.name, m.layers
                ),
                format!("vp ≤ {}", m.layers / 2),
            );
        }
        if let Some(s) = p.schedule.filter(|s| !s.accepts_chunks(vp)) {
            return err(
                "vp",
                format!("vp = {vp} needs schedule = interleaved (got {s})"),
                "vp = 1, or schedule = interleaved".into(),
            );
        }
    }
    if p.schedule == Some(Schedule::Interleaved) && p.pp == Some(1) {
        return err(
            "schedule",
            "interleaved needs pp ≥ 2".into(),
            Schedule::allowed(),
        );
    }
    if let Some(cp) = p.cp {
        if !t.seq.is_multiple_of(cp) {
            return err(
                "cp",
                format!("sequence {} does not split over cp = {cp}", t.seq),
                format!("divisors of {}", t.seq),
            );
        }
    }
    if let Some(ep) = p.ep {
        match m.moe {
            Some(moe) if !moe.experts.is_multiple_of(ep) => {
                return err(
                    "ep",
                    format!("{} experts do not split over ep = {ep}", moe.experts),
                    format!("divisors of {}", moe.experts),
                );
            }
            None if ep > 1 => {
                return err("ep", format!("{} has no experts", m.name), "1".into());
            }
            _ => {}
        }
    }
    if let Some(Some(etp)) = p.etp {
        if m.moe.is_none() && p.tp.is_none_or(|tp| tp != etp) {
            return err(
                "etp",
                format!("{} has no experts", m.name),
                "tp, or leave it unset".into(),
            );
        }
        if let Some(tp) = p.tp.filter(|tp| !tp.is_multiple_of(etp)) {
            return err(
                "etp",
                format!("expert tp = {etp} must divide tp = {tp}"),
                format!("divisors of {tp}"),
            );
        }
    }
    if let (Some(cp_comm), Some(1)) = (p.cp_comm, p.cp) {
        if cp_comm != plait_spec::CpComm::P2p {
            return err(
                "cp_comm",
                format!("cp-comm = {cp_comm} moves the sequence over cp, but cp = 1"),
                "cp ≥ 2, or leave cp-comm unset".into(),
            );
        }
    }
    if let Some(Some(shard)) = p.dp_shard {
        if let Some(dp) = p.dp.filter(|dp| !dp.is_multiple_of(shard)) {
            return err(
                "shard",
                format!("shard = {shard} must divide dp = {dp}"),
                format!("divisors of {dp}"),
            );
        }
        if p.zero == Some(0) && p.dp.is_none_or(|dp| dp != shard) {
            return err(
                "shard",
                format!("shard = {shard} needs ZeRO ≥ 1 (ZeRO-0 shards nothing)"),
                "zero 1–3, or leave shard unset".into(),
            );
        }
    }
    if let Some(mbs) = p.mbs {
        if !t.gbs.is_multiple_of(mbs) {
            return err(
                "mbs",
                format!(
                    "micro-batch {mbs} does not divide the global batch of {} sequences",
                    t.gbs
                ),
                format!("divisors of {}", t.gbs),
            );
        }
    }
    if let Some(dp) = p.dp {
        let mbs = p.mbs.unwrap_or(1);
        if !t.gbs.is_multiple_of(mbs.saturating_mul(dp)) {
            return err(
                "gbs",
                format!(
                    "global batch {} is not a multiple of mbs×dp = {mbs}×{dp}",
                    t.gbs
                ),
                format!("multiples of {}", mbs.saturating_mul(dp)),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mesh_degree_is_checked() {
        for &d in Degree::ALL {
            assert_eq!(d.mesh_dim().is_some(), MESH_PIN_ORDER.contains(&d), "{d}");
        }
    }
}
