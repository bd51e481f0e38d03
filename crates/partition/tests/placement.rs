//! The placement graphs of Tarnawski et al. (NeurIPS'20 artifact, copied into tests/data):
//! plait's max-load equals the optimum of their DP (reference.csv) within 1e-6, and the
//! returned stages respect every constraint of the problem.

use std::collections::{HashMap, HashSet};

use plait_partition::{partition, DeviceKind, Graph, Limits};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn reference() -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(format!("{DATA}/reference.csv")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("graph,"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[1].parse().unwrap())
        })
        .collect()
}

fn load(name: &str) -> Graph {
    let text = std::fs::read_to_string(format!("{DATA}/{name}")).unwrap();
    Graph::from_placement_json(&text, name).unwrap()
}

#[test]
fn max_load_equals_the_reference_optimum() {
    let refs = reference();
    assert_eq!(refs.len(), 3);
    for (name, optimum) in refs {
        let g = load(&name);
        let limits = Limits::of_graph(&g).unwrap();
        let p = partition(&g, &limits).unwrap();
        assert!(p.feasible, "{name}");
        assert!(p.optimal, "{name}");
        assert_eq!(p.lower_bound, p.max_load);
        let rel = (p.max_load - optimum).abs() / optimum;
        assert!(rel < 1e-6, "{name}: {} vs reference {optimum}", p.max_load);
        check_constraints(&g, &limits, &p);
    }
}

/// Every node in one stage; at most k accelerator and c CPU stages; memory within the limit;
/// colour classes together; no accelerator stage holds an unsupported node.
fn check_constraints(g: &Graph, limits: &Limits, p: &plait_partition::Partition) {
    let mut stage_of = HashMap::new();
    for (s, st) in p.stages.iter().enumerate() {
        for &id in &st.ids {
            assert!(stage_of.insert(id, s).is_none(), "node {id} twice");
        }
        if st.device == DeviceKind::Accelerator {
            assert!(st.memory_bytes <= limits.memory_per_device_bytes);
        }
        assert!(st.load <= p.max_load);
    }
    assert_eq!(stage_of.len(), g.nodes.len());
    let acc = p
        .stages
        .iter()
        .filter(|s| s.device == DeviceKind::Accelerator)
        .count();
    assert!(acc <= limits.devices);
    assert!(p.stages.len() - acc <= limits.cpus);
    let mut class_stage: HashMap<i64, usize> = HashMap::new();
    for n in &g.nodes {
        if let Some(c) = n.color_class {
            let s = stage_of[&n.id];
            assert_eq!(*class_stage.entry(c).or_insert(s), s, "class {c} split");
        }
        if !n.supported_on_accelerator {
            assert_eq!(p.stages[stage_of[&n.id]].device, DeviceKind::Cpu);
        }
    }
    // Forward edges never go from a later stage to an earlier one.
    let backward: HashSet<i64> = g
        .nodes
        .iter()
        .filter(|n| n.backward)
        .map(|n| n.id)
        .collect();
    for e in &g.edges {
        if !backward.contains(&e.source) && !backward.contains(&e.dest) {
            assert!(
                stage_of[&e.source] <= stage_of[&e.dest],
                "edge {} → {}",
                e.source,
                e.dest
            );
        }
    }
}
