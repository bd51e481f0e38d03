//! On random DAGs of at most 12 nodes, `partition` equals a brute force over every
//! contiguous split, written here from the problem statement alone (FORMAT.md of the
//! placement graphs): each colour class gets one of `k + c` ordered stage slots, forward
//! edges never go to an earlier slot (backward nodes of a class without forward nodes are
//! ordered by their mirrored backward edges), accelerator slots respect memory and support,
//! and a slot's load is its latency plus (accelerators only) the cost of every node whose
//! output crosses its boundary, counted once per node.
//!
//! The heuristic path (a lattice cap of 1) is checked to bracket the same optimum between
//! its lower bound and its load.

use std::collections::BTreeMap;

use proptest::prelude::*;

use plait_partition::{partition, Edge, Graph, Limits, Node};

#[derive(Debug, Clone)]
struct Case {
    graph: Graph,
    devices: usize,
    cpus: usize,
    memory: f64,
}

fn case() -> impl Strategy<Value = Case> {
    (2usize..=12, 1usize..=3, 0usize..=1, 0.1f64..0.7)
        .prop_flat_map(|(n, k, c, density)| {
            let (k, c) = if k + c > 3 { (k - 1, c) } else { (k, c) };
            let node = (
                0u32..8,                    // accelerator latency
                1u32..30,                   // cpu latency
                0u32..4,                    // memory
                0u32..3,                    // output cost
                prop::bool::weighted(0.9),  // supported
                prop::bool::weighted(0.25), // backward
                prop::option::weighted(0.6, 0i64..5),
            );
            let nodes = prop::collection::vec(node, n);
            let edges = prop::collection::vec(prop::bool::weighted(density), n * (n - 1) / 2);
            (nodes, edges, Just(k), Just(c), 3u32..12)
        })
        .prop_map(|(nodes, edges, k, c, memory)| {
            let mut g = Graph::new("random");
            for (id, (acc, cpu, mem, cost, sup, bwd, cc)) in nodes.into_iter().enumerate() {
                let mut node = Node::new(id as i64, acc as f64);
                node.cpu_latency = cpu as f64;
                node.memory_bytes = mem as f64;
                node.output_cost = cost as f64 * 0.5;
                node.supported_on_accelerator = sup;
                node.backward = bwd;
                node.color_class = cc;
                g.nodes.push(node);
            }
            let n = g.nodes.len();
            let mut e = edges.into_iter();
            for s in 0..n {
                for d in s + 1..n {
                    let on = e.next().unwrap_or(false);
                    // No edge from a backward node to a forward node (invalid input).
                    if on && (!g.nodes[s].backward || g.nodes[d].backward) {
                        g.edges.push(Edge {
                            source: s as i64,
                            dest: d as i64,
                            bytes: 0.0,
                        });
                    }
                }
            }
            Case {
                graph: g,
                devices: k,
                cpus: c,
                memory: memory as f64,
            }
        })
}

/// Least max-load over all contiguous splits, or `None` if none fits.
fn brute_force(c: &Case) -> Option<f64> {
    let g = &c.graph;
    let n = g.nodes.len();
    // Classes: given ones, or one per node.
    let mut class_of = vec![0usize; n];
    let mut keys: BTreeMap<i64, usize> = BTreeMap::new();
    let mut classes = 0;
    for (i, node) in g.nodes.iter().enumerate() {
        class_of[i] = match node.color_class {
            Some(k) => *keys.entry(k).or_insert_with(|| {
                classes += 1;
                classes - 1
            }),
            None => {
                classes += 1;
                classes - 1
            }
        };
    }
    let has_forward: Vec<bool> = (0..classes)
        .map(|cl| (0..n).any(|i| class_of[i] == cl && !g.nodes[i].backward))
        .collect();
    // (a, b): slot of class a ≤ slot of class b.
    let mut order = vec![];
    for e in &g.edges {
        let (s, d) = (e.source as usize, e.dest as usize);
        let (cs, cd) = (class_of[s], class_of[d]);
        if !g.nodes[s].backward && !g.nodes[d].backward {
            order.push((cs, cd));
        } else if g.nodes[s].backward
            && g.nodes[d].backward
            && (!has_forward[cs] || !has_forward[cd])
        {
            order.push((cd, cs));
        }
    }
    let slots = c.devices + c.cpus;
    let mut best: Option<f64> = None;
    // Every kind pattern of the slots (true = CPU) with exactly `cpus` CPU slots.
    for pattern in 0u32..(1 << slots) {
        if pattern.count_ones() as usize != c.cpus {
            continue;
        }
        let cpu_slot = |s: usize| pattern >> s & 1 == 1;
        let mut slot_of_class = vec![0usize; classes];
        loop {
            if order
                .iter()
                .all(|&(a, b)| slot_of_class[a] <= slot_of_class[b])
            {
                if let Some(load) = max_load(c, &class_of, &slot_of_class, cpu_slot) {
                    if best.is_none_or(|b| load < b) {
                        best = Some(load);
                    }
                }
            }
            // Next assignment (odometer).
            let mut i = 0;
            while i < classes {
                slot_of_class[i] += 1;
                if slot_of_class[i] < slots {
                    break;
                }
                slot_of_class[i] = 0;
                i += 1;
            }
            if i == classes {
                break;
            }
        }
    }
    best
}

fn max_load(
    c: &Case,
    class_of: &[usize],
    slot_of_class: &[usize],
    cpu_slot: impl Fn(usize) -> bool,
) -> Option<f64> {
    let g = &c.graph;
    let slots = c.devices + c.cpus;
    let slot = |i: usize| slot_of_class[class_of[i]];
    let mut load = vec![0.0; slots];
    let mut mem = vec![0.0; slots];
    for (i, node) in g.nodes.iter().enumerate() {
        let s = slot(i);
        if cpu_slot(s) {
            load[s] += node.cpu_latency;
        } else {
            if !node.supported_on_accelerator {
                return None;
            }
            load[s] += node.accelerator_latency;
            mem[s] += node.memory_bytes;
        }
    }
    if (0..slots).any(|s| !cpu_slot(s) && mem[s] > c.memory) {
        return None;
    }
    for (i, node) in g.nodes.iter().enumerate() {
        let mut touched: Vec<usize> = g
            .edges
            .iter()
            .filter(|e| e.source == i as i64)
            .map(|e| slot(e.dest as usize))
            .filter(|&s| s != slot(i))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        if !touched.is_empty() {
            touched.push(slot(i));
            for s in touched {
                if !cpu_slot(s) {
                    load[s] += node.output_cost;
                }
            }
        }
    }
    Some(load.into_iter().fold(0.0, f64::max))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn exact_equals_brute_force(c in case()) {
        let want = brute_force(&c);
        let limits = Limits::new(c.devices, c.cpus, c.memory);
        let got = partition(&c.graph, &limits).unwrap();
        match want {
            None => prop_assert!(!got.feasible, "brute force: infeasible; got {got:?}"),
            Some(w) => {
                prop_assert!(got.feasible, "brute force {w}; got {got:?}");
                prop_assert!(got.optimal);
                prop_assert!((got.max_load - w).abs() <= 1e-9 * w.max(1.0), "brute force {w}, got {}", got.max_load);
            }
        }
        // The heuristic brackets the optimum.
        let mut capped = limits;
        capped.max_ideals = 1;
        let h = partition(&c.graph, &capped).unwrap();
        if let (Some(w), true) = (want, h.feasible) {
            prop_assert!(h.max_load >= w - 1e-9 * w.max(1.0), "heuristic {} below optimum {w}", h.max_load);
            prop_assert!(h.lower_bound <= w + 1e-9 * w.max(1.0), "lower bound {} above optimum {w}", h.lower_bound);
        }
        if want.is_none() {
            prop_assert!(!h.feasible);
        }
    }
}
