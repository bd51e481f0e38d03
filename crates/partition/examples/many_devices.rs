//! Times the 600-node BERT placement graph with more and more accelerators (the answer is
//! the same from 3 on): `cargo run --release -p plait-partition --example many_devices`.

use std::time::Instant;

use plait_partition::{partition, Graph, Limits};

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/ops_bert_l-3_training.json"
    );
    let text = std::fs::read_to_string(path).expect("the test graph");
    let g = Graph::from_placement_json(&text, path).expect("a placement graph");
    let base = Limits::of_graph(&g).expect("limits in the file");
    for devices in [3, 6, 16, 64, 1024, usize::MAX] {
        let start = Instant::now();
        let p = partition(&g, &Limits { devices, ..base }).expect("partition");
        println!(
            "{devices:>20} devices: max load {:.6} (optimal: {}) in {:.3} s",
            p.max_load,
            p.optimal,
            start.elapsed().as_secs_f64()
        );
    }
}
