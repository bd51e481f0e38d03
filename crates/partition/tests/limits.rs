//! Limits far beyond the graph: devices and CPUs past the number of units change nothing and
//! cost nothing (no table is sized by them), the exact search stops once more devices
//! cannot lower the load, and what cannot be bounded is refused with the limit named.

use plait_partition::{partition, Graph, Limits, MAX_IDEALS_LIMIT};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn load(name: &str) -> Graph {
    let text = std::fs::read_to_string(format!("{DATA}/{name}")).unwrap();
    Graph::from_placement_json(&text, name).unwrap()
}

/// (graph, devices, cpus): each answers like the same graph with the devices and CPUs
/// clamped to its units (the answer any more devices could give).
const HUGE: &[(&str, usize, usize)] = &[
    ("layer_bert24_training.json", usize::MAX, 1),
    (
        "layer_bert24_training.json",
        100_000_000_000,
        100_000_000_000,
    ),
    ("layer_bert24_training.json", 6, 100_000_000_000),
    ("layer_resnet50_training.json", i64::MAX as usize, 1),
    ("layer_resnet50_training.json", 6, usize::MAX),
];

#[test]
fn devices_and_cpus_beyond_the_units_answer_as_the_units_do() {
    for &(name, devices, cpus) in HUGE {
        let g = load(name);
        let base = Limits::of_graph(&g).unwrap();
        let limits = Limits {
            devices,
            cpus,
            ..base
        };
        let p = partition(&g, &limits).unwrap_or_else(|e| panic!("{name} {devices} {cpus}: {e}"));
        let units = p.units;
        let clamped = Limits {
            devices: devices.min(units),
            cpus: cpus.min(units),
            ..base
        };
        let q = partition(&g, &clamped).unwrap();
        assert!(p.feasible && p.optimal, "{name} {devices} {cpus}: {p:?}");
        assert_eq!(p.max_load, q.max_load, "{name} {devices} {cpus}");
        assert!(p.stages.len() <= units);
    }
}

/// The 600-node BERT graph needs 3 accelerators for its optimum; 64 give the same load, and
/// so does every count in between (the search stops once more devices cannot lower it).
#[test]
fn more_devices_than_the_optimum_needs_give_the_same_optimum() {
    let g = load("ops_bert_l-3_training.json");
    let base = Limits::of_graph(&g).unwrap();
    let at = |devices| {
        let p = partition(&g, &Limits { devices, ..base }).unwrap();
        assert!(p.optimal, "{devices}: {p:?}");
        p.max_load
    };
    let three = at(3);
    for devices in [64, usize::MAX] {
        assert_eq!(at(devices), three, "{devices} devices");
    }
}

#[test]
fn limits_that_cannot_be_bounded_are_refused_with_the_limit() {
    let g = load("ops_bert_l-3_training.json");
    let base = Limits::of_graph(&g).unwrap();
    let e = partition(
        &g,
        &Limits {
            max_ideals: usize::MAX,
            ..base
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains(&MAX_IDEALS_LIMIT.to_string()), "{e}");
    // A 300-node chain with unbounded devices and CPUs: a table of 301³ cells.
    let e = partition(
        &chain(300),
        &Limits {
            devices: usize::MAX,
            cpus: usize::MAX,
            ..base
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("16777216"), "{e}");
}

/// A chain of `n` unit-latency nodes in the placement-graph format.
fn chain(n: usize) -> Graph {
    let nodes: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"id": {i}, "name": "n{i}", "supportedOnFpga": 1, "cpuLatency": 2.0, "fpgaLatency": 1.0, "isBackwardNode": 0, "colorClass": {i}, "size": 1.0}}"#
            )
        })
        .collect();
    let edges: Vec<String> = (1..n)
        .map(|i| format!(r#"{{"sourceId": {}, "destId": {i}, "cost": 0.5}}"#, i - 1))
        .collect();
    let text = format!(
        r#"{{"maxSizePerFPGA": 1e12, "maxFPGAs": 4, "maxCPUs": 1, "nodes": [{}], "edges": [{}]}}"#,
        nodes.join(","),
        edges.join(",")
    );
    Graph::from_placement_json(&text, "chain").unwrap()
}
