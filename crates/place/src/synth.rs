//! Deterministic synthetic instances for tests and benchmarks (no modelling: shapes only).
//!
//! * [`fleet`] — 64 devices in 4 sites of 16 (two part kinds per site), a LAN inside each
//!   site and WAN paths between sites: many interchangeable devices.
//! * [`random`] — `devices` devices that all differ (random kind, memory and a random
//!   sparse link graph): no symmetry for the search to use.

use crate::problem::{Device, Layer, Link, Problem};

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A chain of `n` layers over `speeds.len()` kinds: layer i has work w_i ∈ [0.5, 1.5) and
/// takes w_i / speed_k · (1 ± 10 %) × 10 ms on kind k; memory m_i ∈ [0.5, 1.5) × `gb` GB;
/// output 4–12 MB.
fn chain(r: &mut Rng, n: usize, speeds: &[f64], gb: f64) -> Vec<Layer> {
    (0..n)
        .map(|i| {
            let w = 0.5 + r.unit();
            Layer {
                name: format!("layer{i}"),
                time_s: speeds
                    .iter()
                    .map(|s| Some(w / s * (0.9 + 0.2 * r.unit()) * 1e-2))
                    .collect(),
                memory_bytes: (0.5 + r.unit()) * gb * 1e9,
                output_bytes: (4.0 + 8.0 * r.unit()) * 1e6,
                output_messages: 1.0,
            }
        })
        .collect()
}

/// 64 devices, 4 sites × 16, `layers` layers of about `gb` GB each.
pub fn fleet(layers: usize, gb: f64, seed: u64) -> Problem {
    let mut r = Rng(seed);
    // Eight part kinds: relative speed and memory (GB).
    let parts = [
        ("edge-big", 1.0, 32.0),
        ("edge-small", 0.25, 8.0),
        ("desk-gpu", 4.0, 24.0),
        ("server-cpu", 0.5, 256.0),
        ("cloud-small", 2.0, 24.0),
        ("cloud-mid", 3.0, 24.0),
        ("cloud-big", 8.0, 80.0),
        ("cloud-huge", 20.0, 80.0),
    ];
    let kinds: Vec<String> = parts.iter().map(|p| p.0.to_string()).collect();
    let speeds: Vec<f64> = parts.iter().map(|p| p.1).collect();
    let chain = chain(&mut r, layers, &speeds, gb);
    let mut devices = Vec::new();
    let mut site = Vec::new();
    for s in 0..4 {
        for i in 0..16 {
            let k = 2 * s + usize::from(i >= 8);
            devices.push(Device {
                name: format!("site{s}-{}-{}", parts[k].0, i % 8),
                kind: k,
                memory_bytes: parts[k].2 * 1e9,
            });
            site.push(s);
        }
    }
    let mut links = Vec::new();
    for a in 0..devices.len() {
        for b in a + 1..devices.len() {
            let (bytes_per_s, latency_s) = if site[a] == site[b] {
                (1.25e9, 100e-6) // 10 GbE LAN
            } else {
                (125e6, 20e-3) // 1 Gb/s WAN path
            };
            links.push(Link {
                a,
                b,
                bytes_per_s,
                latency_s,
            });
        }
    }
    Problem::new(kinds, chain, devices, links, "synth::fleet").expect("valid synthetic instance")
}

/// `devices` all-different devices over 8 kinds with a random link graph (each pair linked
/// with probability `density`), `layers` layers of about `gb` GB each.
pub fn random(devices: usize, layers: usize, gb: f64, density: f64, seed: u64) -> Problem {
    let mut r = Rng(seed);
    let speeds: Vec<f64> = (0..8).map(|k| 0.25 * (1 << k) as f64).collect();
    let kinds: Vec<String> = (0..8).map(|k| format!("kind{k}")).collect();
    let chain = chain(&mut r, layers, &speeds, gb);
    let devs: Vec<Device> = (0..devices)
        .map(|i| Device {
            name: format!("dev{i}"),
            kind: (r.next() % 8) as usize,
            memory_bytes: (4.0 + 60.0 * r.unit()) * 1e9,
        })
        .collect();
    let mut links = Vec::new();
    for a in 0..devices {
        for b in a + 1..devices {
            if r.unit() < density {
                links.push(Link {
                    a,
                    b,
                    bytes_per_s: 1e8 * (1.0 + 99.0 * r.unit()),
                    latency_s: 1e-3 * r.unit() * 20.0,
                });
            }
        }
    }
    Problem::new(kinds, chain, devs, links, "synth::random").expect("valid synthetic instance")
}
