//! How an expert layer's tokens reach their experts and come back: the all-to-all that
//! sends every routed copy to its expert's rank, or a dispatcher that sends a token once to
//! each NVLink domain holding one of its experts (`plait_spec::MoeDispatcher`), and how
//! many domains that is under the model's routing.
//!
//! Knows routing statistics and groups; nothing of kernels, stages or schedules.

use plait_spec::{ModelSpec, MoeDispatcher};

use crate::comm::Group;

/// The dispatchers of `engine` that move an expert group's tokens differently, for a group
/// `spanning` NVLink domains or not: inside one domain every dispatcher is the same
/// all-to-all, and DeepEP and HybridEP move tokens alike (once per remote domain), so the
/// first the engine lists of each. What a search needs to price, no more.
pub fn distinct_dispatchers(engine: plait_spec::Engine, spanning: bool) -> Vec<MoeDispatcher> {
    let mut out: Vec<MoeDispatcher> = Vec::new();
    for &d in engine.moe_dispatchers() {
        let deduplicates = |d: MoeDispatcher| d != MoeDispatcher::AllToAll && spanning;
        if !out.iter().any(|&o| deduplicates(o) == deduplicates(d)) {
            out.push(d);
        }
    }
    out
}

/// One dispatch (or its mirror image, the combine) over the expert group `ep`:
/// `copies_bytes` of routed copies of tokens that hold `token_bytes` (one copy of each
/// token, with the same imbalance).
pub(super) fn dispatch_s(
    m: &ModelSpec,
    dispatcher: MoeDispatcher,
    ep: &Group,
    copies_bytes: f64,
    token_bytes: f64,
) -> f64 {
    match dispatcher {
        MoeDispatcher::AllToAll => ep.all_to_all_s(copies_bytes),
        MoeDispatcher::DeepEp | MoeDispatcher::HybridEp => ep.domain_deduplicated_all_to_all_s(
            copies_bytes,
            token_bytes,
            remote_domains(m, ep.size, ep.nodes),
        ),
    }
}

/// Expected number of NVLink domains other than its own that hold at least one of a
/// token's experts, when `model`'s routed experts lie in equal shares on `ranks` ranks over
/// `domains` domains and tokens route uniformly among the experts their router may pick
/// (balanced routing, as the published runs force it): the top-k experts drawn without
/// replacement, within the kept groups where routing is group-limited (DeepSeek-V3:
/// `n_group` 8, `topk_group` 4, groups of consecutive experts, which with whole groups per
/// domain is its node-limited routing, arXiv 2412.19437 §2.1.2).
pub fn remote_domains(model: &ModelSpec, ranks: u64, domains: u64) -> f64 {
    let Some(moe) = model.moe else {
        return 0.0;
    };
    if domains <= 1 || ranks == 0 || moe.experts == 0 {
        return 0.0;
    }
    let experts = moe.experts as f64;
    let k = moe.top_k.min(moe.experts);
    let per_domain = experts / domains as f64;
    let groups = model
        .router
        .and_then(|r| r.groups)
        .filter(|&(g, kept)| g > 1 && kept < g && moe.experts.is_multiple_of(g));
    let hit = match groups {
        // Whole groups inside each domain: the domain holds j of the kept groups
        // (hypergeometric), and the token's experts are drawn from the kept groups' experts.
        Some((g, kept)) if g.is_multiple_of(domains) => {
            let per_group = experts / g as f64;
            let pool = kept as f64 * per_group;
            let in_domain = g / domains;
            (1..=in_domain.min(kept))
                .map(|j| {
                    hypergeometric(g, in_domain, kept, j)
                        * (1.0 - choose_ratio(pool - j as f64 * per_group, pool, k))
                })
                .sum::<f64>()
        }
        // Each group spread over whole domains: the domain's group is kept with
        // probability kept / g, and then holds per_domain of the pool.
        Some((g, kept)) if domains.is_multiple_of(g) => {
            let pool = kept as f64 * experts / g as f64;
            kept as f64 / g as f64 * (1.0 - choose_ratio(pool - per_domain, pool, k))
        }
        _ => 1.0 - choose_ratio(experts - per_domain, experts, k),
    };
    (domains - 1) as f64 * hit
}

/// C(a, k) / C(b, k) for real a ≤ b (zero once a < k): the chance that k draws without
/// replacement from b items all miss the b − a marked ones.
fn choose_ratio(a: f64, b: f64, k: u64) -> f64 {
    (0..k)
        .map(|i| {
            let i = i as f64;
            if a - i <= 0.0 {
                0.0
            } else {
                (a - i) / (b - i)
            }
        })
        .product()
}

/// P(j of `draws` draws without replacement from `population` items hit one of `marked`).
fn hypergeometric(population: u64, marked: u64, draws: u64, j: u64) -> f64 {
    let ln_choose = |n: u64, r: u64| -> f64 {
        if r > n {
            return f64::NEG_INFINITY;
        }
        (1..=r)
            .map(|i| ((n - r + i) as f64).ln() - (i as f64).ln())
            .sum()
    };
    if j > marked || j > draws || draws - j > population - marked {
        return 0.0;
    }
    (ln_choose(marked, j) + ln_choose(population - marked, draws - j)
        - ln_choose(population, draws))
    .exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_without_replacement() {
        // 8 of 128 experts, 32 in the domain: the chance all 8 miss it.
        let miss = choose_ratio(96.0, 128.0, 8);
        assert!((miss - 0.0930).abs() < 1e-3, "{miss}");
        assert_eq!(choose_ratio(3.0, 10.0, 4), 0.0);
        let total: f64 = (0..=4).map(|j| hypergeometric(8, 4, 4, j)).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!((hypergeometric(8, 1, 4, 1) - 0.5).abs() < 1e-12);
    }
}
