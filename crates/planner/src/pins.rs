//! Pins that no configuration can satisfy, whatever the search picks for the rest: the
//! error names the flag, as `plait estimate` does for a whole configuration.

use plait_spec::{Schedule, SpecError};

use crate::search::Request;

/// The first pin of `req` that no completion of the unpinned degrees makes well-formed,
/// as the flag-naming error `ParallelConfig::validate` would give; Ok when every pin can
/// be completed (the search may still find nothing that fits).
pub fn check_pins(req: &Request) -> Result<(), SpecError> {
    let (m, t, p, n) = (req.model, req.train, &req.pins, req.gpus);
    let err = |field: &str, problem: String, allowed: String| {
        Err(SpecError::new(
            format!("--{field}"),
            field,
            problem,
            allowed,
        ))
    };
    // Each mesh degree divides the GPUs, and so does the product of those given.
    let mut product: u64 = 1;
    for (field, v) in [("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("dp", p.dp)] {
        let Some(v) = v else { continue };
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
    if let Some(tp) = p.tp {
        if !m.heads.is_multiple_of(tp) {
            return err(
                "tp",
                format!(
                    "{} attention heads of {} do not split over tp = {tp}",
                    m.heads, m.name
                ),
                format!("divisors of {}", m.heads),
            );
        }
        if !m.kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(m.kv_heads) {
            return err(
                "tp",
                format!(
                    "{} key/value heads do not split over (or replicate onto) tp = {tp}",
                    m.kv_heads
                ),
                format!("divisors or multiples of {}", m.kv_heads),
            );
        }
        if !m.ffn_hidden.is_multiple_of(tp) {
            return err(
                "tp",
                format!("MLP width {} does not split over tp = {tp}", m.ffn_hidden),
                format!("divisors of {}", m.ffn_hidden),
            );
        }
    }
    let vp = p.vp.unwrap_or(1);
    if let Some(pp) = p.pp {
        if pp.saturating_mul(vp) > m.layers {
            return err(
                "pp",
                format!(
                    "pp×vp = {} pipeline chunks but {} has only {} layers",
                    pp.saturating_mul(vp),
                    m.name,
                    m.layers
                ),
                format!("pp×vp ≤ {}", m.layers),
            );
        }
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
                format!("vp = {vp} needs --schedule interleaved (got {s})"),
                "vp = 1, or --schedule interleaved".into(),
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
