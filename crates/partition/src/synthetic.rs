//! Generated graphs of any size for tests, benches and examples: a chain and a random DAG,
//! deterministic in their seed (a SplitMix64 stream, no dependency), with the limits a
//! placement file would carry (8 accelerators, each holding a quarter of the memory).

use crate::graph::{Edge, Graph, Node};

/// SplitMix64 (Steele, Lea and Flood 2014): a tiny deterministic generator.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) (`n ≥ 1`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

fn node(id: usize, r: &mut SplitMix) -> Node {
    let mut n = Node::new(id as i64, 0.5 + r.unit());
    n.cpu_latency = n.accelerator_latency * (4.0 + 4.0 * r.unit());
    n.memory_bytes = (1.0 + r.unit()) * 1e6;
    n.output_cost = 0.05 * r.unit();
    n
}

fn with_limits(mut g: Graph) -> Graph {
    let memory: f64 = g.nodes.iter().map(|n| n.memory_bytes).sum();
    g.devices = Some(8);
    g.cpus = Some(0);
    g.memory_per_device_bytes = Some(memory / 4.0);
    g
}

/// `n` nodes in a line, `i → i + 1`, latencies in [0.5, 1.5), outputs costing up to 0.05.
pub fn chain(n: usize, seed: u64) -> Graph {
    let mut r = SplitMix::new(seed);
    let mut g = Graph::new(format!("chain-{n}"));
    g.nodes = (0..n).map(|i| node(i, &mut r)).collect();
    g.edges = (1..n)
        .map(|i| Edge {
            source: i as i64 - 1,
            dest: i as i64,
            bytes: 0.0,
        })
        .collect();
    with_limits(g)
}

/// `n` nodes in id order, each reading one node and, with probability ½ each, two more,
/// drawn among the `window` nodes before it (so the graph has many topological orders and
/// a huge ideal lattice).
pub fn random_dag(n: usize, window: usize, seed: u64) -> Graph {
    let mut r = SplitMix::new(seed);
    let mut g = Graph::new(format!("random-dag-{n}"));
    g.nodes = (0..n).map(|i| node(i, &mut r)).collect();
    for i in 1..n {
        let w = window.clamp(1, i);
        let mut sources = vec![i - 1 - r.below(w)];
        for _ in 0..2 {
            if r.unit() < 0.5 {
                sources.push(i - 1 - r.below(w));
            }
        }
        sources.sort_unstable();
        sources.dedup();
        g.edges.extend(sources.into_iter().map(|s| Edge {
            source: s as i64,
            dest: i as i64,
            bytes: 0.0,
        }));
    }
    with_limits(g)
}

/// `g` as a placement-graph JSON document (the format [`Graph::from_placement_json`]
/// reads), with its limits; each edge carries its source's output cost.
pub fn placement_json(g: &Graph) -> String {
    use serde_json::json;
    let by_id: std::collections::HashMap<i64, &Node> = g.nodes.iter().map(|n| (n.id, n)).collect();
    let nodes: Vec<serde_json::Value> = g
        .nodes
        .iter()
        .map(|n| {
            let mut o = json!({
                "id": n.id,
                "name": n.name,
                "fpgaLatency": n.accelerator_latency,
                "cpuLatency": n.cpu_latency,
                "size": n.memory_bytes,
                "supportedOnFpga": u8::from(n.supported_on_accelerator),
                "isBackwardNode": u8::from(n.backward),
            });
            if let Some(c) = n.color_class {
                o["colorClass"] = json!(c);
            }
            o
        })
        .collect();
    let edges: Vec<serde_json::Value> = g
        .edges
        .iter()
        .map(|e| {
            json!({
                "sourceId": e.source,
                "destId": e.dest,
                "cost": by_id.get(&e.source).map_or(0.0, |n| n.output_cost),
            })
        })
        .collect();
    json!({
        "maxSizePerFPGA": g.memory_per_device_bytes.unwrap_or(1.0),
        "maxFPGAs": g.devices.unwrap_or(1),
        "maxCPUs": g.cpus.unwrap_or(0),
        "nodes": nodes,
        "edges": edges,
    })
    .to_string()
}
