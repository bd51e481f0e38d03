//! Times `partition` on generated graphs of 10³ to 10⁵ nodes — a chain and a random DAG with
//! skip connections up to 1,000 nodes back — with 8 accelerators each holding a quarter of
//! the memory, and prints the answer's quality:
//! `cargo run --release -p plait-partition --example large_graphs [SIZES…]`; with
//! `--write DIR` first, also writes each graph as placement JSON into DIR (for timing
//! `plait partition --graph DIR/chain-100000.json`).

use std::time::Instant;

use plait_partition::synthetic::{chain, placement_json, random_dag};
use plait_partition::{partition, Graph, Limits};

fn run(g: &Graph, write: Option<&str>) {
    if let Some(dir) = write {
        let path = format!("{dir}/{}.json", g.name);
        std::fs::write(&path, placement_json(g)).expect("--write: a writable directory");
        println!("wrote {path}");
    }
    let limits = Limits::of_graph(g).expect("generated graphs carry limits");
    let start = Instant::now();
    let p = partition(g, &limits).expect("partition");
    let s = start.elapsed().as_secs_f64();
    let gap = 100.0 * (p.max_load - p.lower_bound) / p.max_load;
    println!(
        "{:<18} {:>7} nodes {:>7} edges: {:>8.3} s  max load {:>10.3}  lower bound {:>10.3} (gap ≤ {gap:.2} %)  {:?}{}{}",
        g.name,
        g.nodes.len(),
        g.edges.len(),
        s,
        p.max_load,
        p.lower_bound,
        p.method,
        if p.optimal { " (optimal)" } else { "" },
        p.coarsening
            .as_ref()
            .map(|c| format!("; {}", c.note))
            .unwrap_or_default()
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let write = match args.first().map(String::as_str) {
        Some("--write") => {
            let dir = args.get(1).expect("--write DIR").clone();
            args.drain(..2);
            Some(dir)
        }
        _ => None,
    };
    let sizes: Vec<usize> = args
        .iter()
        .map(|a| a.parse().expect("sizes are node counts"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    for n in sizes {
        run(&chain(n, 1), write.as_deref());
        run(&random_dag(n, 1_000, 2), write.as_deref());
    }
}
