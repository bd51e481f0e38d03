//! `place` against an in-test brute force on random chains of up to 10 layers and 5
//! devices: every sequence of distinct devices, every split of the chain into contiguous
//! runs, both objectives, with and without a latency SLO, and the least memory growth of
//! infeasible instances.

use plait_place::{place, Device, Layer, Link, Objective, Options, Problem};
use proptest::prelude::*;

/// SplitMix64: a small deterministic generator for instance shapes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A value from a small set of dyadic numbers (ties happen) or a continuous one.
    fn value(&mut self, scale: f64) -> f64 {
        if self.below(2) == 0 {
            (1 + self.below(8)) as f64 * scale / 4.0
        } else {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64 * scale * 2.0
        }
    }
}

fn instance(seed: u64) -> Problem {
    let mut r = Rng(seed);
    let n = 1 + r.below(10) as usize;
    let nd = 1 + r.below(5) as usize;
    let nk = 1 + r.below(3) as usize;
    let kinds: Vec<String> = (0..nk).map(|k| format!("k{k}")).collect();
    let layers: Vec<Layer> = (0..n)
        .map(|i| Layer {
            name: format!("l{i}"),
            time_s: (0..nk)
                .map(|_| {
                    if r.below(12) == 0 {
                        None
                    } else {
                        Some(r.value(1.0))
                    }
                })
                .collect(),
            memory_bytes: r.value(1.0),
            output_bytes: r.value(1.0),
            output_messages: (1 + r.below(2)) as f64,
        })
        .collect();
    let total: f64 = layers.iter().map(|l| l.memory_bytes).sum();
    // Symmetric device sets (same kind and memory, one link for all pairs) half the time.
    let symmetric = r.below(2) == 0;
    let mem0 = total * (0.3 + r.value(0.6));
    let devices: Vec<Device> = (0..nd)
        .map(|i| Device {
            name: format!("d{i}"),
            kind: if symmetric {
                0
            } else {
                r.below(nk as u64) as usize
            },
            memory_bytes: if symmetric {
                mem0
            } else {
                total * (0.2 + r.value(0.7))
            },
        })
        .collect();
    let mut links = Vec::new();
    let (bw0, lat0) = (0.5 + r.value(2.0), r.value(0.5));
    for a in 0..nd {
        for b in a + 1..nd {
            if symmetric {
                links.push(Link {
                    a,
                    b,
                    bytes_per_s: bw0,
                    latency_s: lat0,
                });
                continue;
            }
            let copies = match r.below(6) {
                0 | 1 => 0,
                2 => 2,
                _ => 1,
            };
            for _ in 0..copies {
                let (a, b) = if r.below(2) == 0 { (a, b) } else { (b, a) };
                links.push(Link {
                    a,
                    b,
                    bytes_per_s: 0.25 + r.value(2.0),
                    latency_s: r.value(0.5),
                });
            }
        }
    }
    Problem::new(kinds, layers, devices, links, "random").expect("valid instance")
}

/// Every valid placement as (latency, bottleneck, memory scale ignoring memory, fits).
fn all_placements(p: &Problem, mut visit: impl FnMut(f64, f64, f64, bool)) {
    let n = p.layers.len();
    let nd = p.devices.len();
    let link = |a: usize, b: usize, k: usize| -> Option<f64> {
        let l = &p.layers[k];
        p.links
            .iter()
            .filter(|x| (x.a == a && x.b == b) || (x.a == b && x.b == a))
            .map(|x| l.output_messages * x.latency_s + l.output_bytes / x.bytes_per_s)
            .reduce(f64::min)
    };
    // Depth-first over (next layer, used devices, last device).
    #[allow(clippy::too_many_arguments)]
    fn rec(
        p: &Problem,
        n: usize,
        nd: usize,
        link: &dyn Fn(usize, usize, usize) -> Option<f64>,
        j: usize,
        last: Option<usize>,
        used: &mut Vec<bool>,
        acc: (f64, f64, f64, bool),
        visit: &mut dyn FnMut(f64, f64, f64, bool),
    ) {
        if j == n {
            visit(acc.0, acc.1, acc.2, acc.3);
            return;
        }
        for d in 0..nd {
            if used[d] {
                continue;
            }
            let tr = match last {
                None => 0.0,
                Some(c) => match link(c, d, j - 1) {
                    Some(t) => t,
                    None => continue,
                },
            };
            let dev = &p.devices[d];
            let mut time = 0.0;
            let mut mem = 0.0;
            used[d] = true;
            for k in j..n {
                let Some(t) = p.layers[k].time_s[dev.kind] else {
                    break;
                };
                time += t;
                mem += p.layers[k].memory_bytes;
                let scale = if mem == 0.0 {
                    0.0
                } else {
                    mem / dev.memory_bytes
                };
                let fits = acc.3 && mem <= dev.memory_bytes;
                rec(
                    p,
                    n,
                    nd,
                    link,
                    k + 1,
                    Some(d),
                    used,
                    (
                        acc.0 + tr + time,
                        acc.1.max(tr).max(time),
                        acc.2.max(scale),
                        fits,
                    ),
                    visit,
                );
            }
            used[d] = false;
        }
    }
    let mut used = vec![false; nd];
    rec(
        p,
        n,
        nd,
        &link,
        0,
        None,
        &mut used,
        (0.0, 0.0, 0.0, true),
        &mut visit,
    );
}

struct Brute {
    /// Least latency among the placements with the least bottleneck.
    tie_latency: Option<f64>,
    min_latency: Option<f64>,
    min_bottleneck: Option<f64>,
    min_bottleneck_slo: Option<f64>,
    min_scale: Option<f64>,
}

fn brute(p: &Problem, slo: f64) -> Brute {
    let mut b = Brute {
        tie_latency: None,
        min_latency: None,
        min_bottleneck: None,
        min_bottleneck_slo: None,
        min_scale: None,
    };
    let min = |x: &mut Option<f64>, v: f64| *x = Some(x.map_or(v, |y: f64| y.min(v)));
    all_placements(p, |lat, bot, scale, fits| {
        min(&mut b.min_scale, scale);
        if fits {
            min(&mut b.min_latency, lat);
            min(&mut b.min_bottleneck, bot);
            if lat <= slo {
                min(&mut b.min_bottleneck_slo, bot);
            }
        }
    });
    if let Some(best) = b.min_bottleneck {
        all_placements(p, |lat, bot, _, fits| {
            if fits && bot <= best * (1.0 + 1e-9) {
                min(&mut b.tie_latency, lat);
            }
        });
    }
    b
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12)
}

/// Checks one instance; returns (feasible latency, feasible throughput, feasible SLO).
fn check(seed: u64) -> Result<(bool, bool, bool), String> {
    let p = instance(seed);
    let slo = {
        let mut r = Rng(seed ^ 0xABCD);
        r.value(6.0)
    };
    let b = brute(&p, slo);
    let mut flags = [false; 3];
    let cases = [
        (Objective::Latency, None, b.min_latency),
        (Objective::Throughput, None, b.min_bottleneck),
        (Objective::Throughput, Some(slo), b.min_bottleneck_slo),
    ];
    for (i, (objective, slo_s, expect)) in cases.into_iter().enumerate() {
        let a = place(
            &p,
            &Options {
                objective,
                slo_s,
                ..Options::default()
            },
        );
        if !a.optimal {
            return Err(format!("seed {seed}: {objective:?} not proven optimal"));
        }
        match expect {
            None => {
                if a.feasible {
                    return Err(format!("seed {seed} {objective:?} slo {slo_s:?}: brute force finds no placement, place gives {:?}", a.value_s));
                }
                if slo_s.is_none() && b.min_latency.is_none() {
                    // Infeasible by memory or links: the least memory growth agrees.
                    let ok = match (a.min_memory_scale, b.min_scale) {
                        (Some(x), Some(y)) => close(x, y),
                        (None, None) => true,
                        _ => false,
                    };
                    if !ok {
                        return Err(format!(
                            "seed {seed}: memory scale {:?} vs brute force {:?} ({:?})",
                            a.min_memory_scale, b.min_scale, a.reason
                        ));
                    }
                }
            }
            Some(v) => {
                let got = a.value_s.ok_or_else(|| {
                    format!(
                        "seed {seed} {objective:?}: infeasible ({:?}) but brute force {v}",
                        a.reason
                    )
                })?;
                if !close(got, v) {
                    return Err(format!(
                        "seed {seed} {objective:?} slo {slo_s:?}: place {got} vs brute force {v}"
                    ));
                }
                // The reported stages reproduce the value.
                let (lat, bot) = (a.latency_s.unwrap(), a.bottleneck_s.unwrap());
                let own = if objective == Objective::Latency {
                    lat
                } else {
                    bot
                };
                if !close(own, got) {
                    return Err(format!("seed {seed}: stages give {own}, value {got}"));
                }
                if objective == Objective::Throughput && slo_s.is_none() {
                    let want = b.tie_latency.unwrap_or(f64::NAN);
                    if !close(lat, want) {
                        return Err(format!(
                            "seed {seed}: throughput tie-break latency {lat} vs brute force {want}"
                        ));
                    }
                }
                if let Some(s) = slo_s {
                    if lat > s {
                        return Err(format!("seed {seed}: latency {lat} breaks the SLO {s}"));
                    }
                }
                flags[i] = true;
            }
        }
    }
    Ok((flags[0], flags[1], flags[2]))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn place_equals_brute_force(seed in any::<u64>()) {
        check(seed).map_err(TestCaseError::fail)?;
    }
}

/// A fixed sweep that reports how many instances of each kind it compared.
#[test]
fn sweep_counts() {
    let (mut lat, mut thr, mut slo) = (0, 0, 0);
    let total = 3000;
    for seed in 0..total {
        let (a, b, c) = check(seed).unwrap();
        lat += a as usize;
        thr += b as usize;
        slo += c as usize;
    }
    println!(
        "brute force agrees on {total} instances: latency {lat} feasible + {} infeasible, throughput {thr} + {}, throughput with SLO {slo} + {}",
        total as usize - lat,
        total as usize - thr,
        total as usize - slo
    );
    // The generator must exercise both answers.
    assert!(lat > total as usize / 4 && lat < total as usize);
    assert!(slo > 0 && slo < thr);
}
