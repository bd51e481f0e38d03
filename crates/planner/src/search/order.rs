//! The order of the plans a search returns (robust to the estimates' uncertainty, ties to
//! the one needing less memory) and the notes on each.

use plait_spec::{Recompute, GIB};

use crate::Plan;

/// Plans whose central times differ by less than this share are tied: the order goes to the
/// one needing less memory (the estimates' own bands are wider than this).
pub const TIE_SHARE: f64 = 0.01;

/// Reorders plans sorted by their central time so that the order holds up under the
/// uncertain assumptions. Plans that fit only without the allocator's average
/// fragmentation go after those that fit with it; within each group, the plans tied with
/// the group's fastest (central time within [`TIE_SHARE`]) go first, in order of peak
/// memory, and between plans that are not tied a plan goes after the next one when its lead
/// exists only at the optimistic end (at the pessimistic end it loses more than it gains at
/// the centre; adjacent swaps until nothing moves, at most n passes).
pub fn robust_order<T: std::borrow::Borrow<Plan>>(plans: &mut [(usize, T)]) {
    plans.sort_by_key(|p| !p.1.borrow().estimate.fits_with_fragmentation());
    let roomy = plans
        .iter()
        .take_while(|p| p.1.borrow().estimate.fits_with_fragmentation())
        .count();
    let (a, b) = plans.split_at_mut(roomy);
    order_group(a);
    order_group(b);
}

fn order_group<T: std::borrow::Borrow<Plan>>(plans: &mut [(usize, T)]) {
    let est = |p: &(usize, T)| {
        let e = &p.1.borrow().estimate;
        (
            e.iteration_time_s,
            e.iteration_time_high_s,
            e.peak_memory_bytes,
        )
    };
    let Some(fastest) = plans.iter().map(|p| est(p).0).reduce(f64::min) else {
        return;
    };
    let tied = |a: f64, b: f64| (a - b).abs() <= TIE_SHARE * a.min(b);
    // Tied plans first (by memory), the rest by central time.
    plans.sort_by(|a, b| {
        let (ea, eb) = (est(a), est(b));
        let (ta, tb) = (tied(ea.0, fastest), tied(eb.0, fastest));
        tb.cmp(&ta)
            .then(if ta && tb {
                ea.2.total_cmp(&eb.2)
            } else {
                ea.0.total_cmp(&eb.0)
            })
            .then(a.0.cmp(&b.0))
    });
    let n = plans.len();
    for _ in 0..n {
        let mut moved = false;
        for i in 1..n {
            let (a, b) = (est(&plans[i - 1]), est(&plans[i]));
            let lead = b.0 - a.0;
            if !tied(a.0, b.0) && lead > 0.0 && a.1 - b.1 > lead {
                plans.swap(i - 1, i);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
}

/// Share of the step from which a plan's wait on kernel launches is noted.
const LAUNCH_WAIT_NOTE_SHARE: f64 = 0.05;

/// Notes on each plan: what limits it, and how the first compares with the others.
pub(super) fn annotate(plans: &mut [Plan]) {
    let best = plans.first().map(|p| {
        let e = &p.estimate;
        (
            e.iteration_time_s,
            e.iteration_time_low_s,
            e.iteration_time_high_s,
            e.peak_memory_bytes,
        )
    });
    for (i, p) in plans.iter_mut().enumerate() {
        let e = &p.estimate;
        let (name, share) = e
            .breakdown
            .components()
            .into_iter()
            .filter(|(n, _)| *n != "compute")
            .map(|(n, s)| (n, s / e.iteration_time_s))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(("", 0.0));
        let compute = e.breakdown.compute_s / e.iteration_time_s;
        // Inside the compute, the GPUs' wait on kernel launches where it is notable.
        let wait = e.breakdown.launch_wait_s / e.iteration_time_s;
        let waiting = if wait >= LAUNCH_WAIT_NOTE_SHARE {
            format!(" ({:.0} % waiting on kernel launches)", wait * 100.0)
        } else {
            String::new()
        };
        p.notes.push(format!(
            "compute {:.0} % of the step{waiting}; the largest overhead is {name} ({:.0} %)",
            compute * 100.0,
            share * 100.0
        ));
        p.notes.push(format!(
            "memory {:.1} of {:.1} GiB on stage {}{}",
            e.peak_memory_bytes / GIB,
            e.memory_capacity_bytes / GIB,
            e.worst_stage,
            if e.fits_with_fragmentation() {
                String::new()
            } else {
                format!(
                    " (tight: {:.1} GiB with the allocator's average fragmentation)",
                    e.peak_memory_high_bytes / GIB
                )
            }
        ));
        if p.stage_map.recompute_blocks.iter().any(|&x| x > 0)
            && p.config.recompute != Recompute::Full
        {
            p.notes.push(format!(
                "recomputes in full only {:?} blocks per stage, the fewest that fit",
                p.stage_map.recompute_blocks
            ));
        }
        if !p.stage_map.is_even() {
            p.notes.push(format!(
                "uneven layout {:?} balances the embedding and the LM head",
                p.stage_map.chunk_blocks
            ));
        }
        if let (Some((b, b_low, b_high, b_memory)), true) = (best, i > 0) {
            let overlap = e.iteration_time_low_s <= b_high && b_low <= e.iteration_time_high_s;
            let d = e.iteration_time_s / b - 1.0;
            p.notes.push(if d.abs() <= TIE_SHARE {
                format!(
                    "tied with plan 1 ({:+.1} %){}",
                    d * 100.0,
                    // A later simulation batch's plan may need less (`plan`'s batches).
                    if b_memory <= e.peak_memory_bytes {
                        ", which needs less memory"
                    } else {
                        ", which was simulated in an earlier batch"
                    }
                )
            } else {
                format!(
                    "{:+.1} % against plan 1{}",
                    d * 100.0,
                    if overlap {
                        " (the bands overlap: the order is not certain)"
                    } else {
                        ""
                    }
                )
            });
        }
    }
}
