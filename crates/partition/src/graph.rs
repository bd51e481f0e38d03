//! The computation graph the partitioner works on: nodes with their costs on an accelerator
//! and on a CPU, memory, training colour classes, and data edges; plus the structural checks
//! (unique ids, no dangling edge, no self-loop, acyclic) that every importer relies on.
//!
//! Knows nothing about file formats (see [`crate::placement`] and [`crate::onnx`]) nor about
//! how a partition is searched.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::error::{PartitionError, Result};

/// One operator (or layer) of the graph.
///
/// Latencies and `output_cost` are in the graph's time unit ([`Graph::time_unit`]): seconds
/// for ONNX imports, the file's own unit for placement graphs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub id: i64,
    pub name: String,
    /// Operator type (`Conv`, `MatMul`, …); empty for placement graphs.
    pub op: String,
    /// False for nodes only a CPU can run.
    pub supported_on_accelerator: bool,
    pub accelerator_latency: f64,
    pub cpu_latency: f64,
    /// Bytes the node holds on an accelerator (weights, saved outputs).
    pub memory_bytes: f64,
    /// A backward (gradient) node of a training graph.
    pub backward: bool,
    /// Nodes sharing a class must run on the same device (a backward node with its forward
    /// node). `None`: a class of its own.
    pub color_class: Option<i64>,
    /// Time to move this node's output between devices; paid once per node whose output
    /// crosses a stage boundary, by the stage on each side (accelerators only).
    pub output_cost: f64,
    /// Bytes of the node's outputs (0 when unknown).
    pub output_bytes: f64,
    /// Floating-point operations of one execution (0 when unknown).
    pub flops: f64,
    /// Bytes of the parameters (initializers) this node owns (0 when unknown).
    pub param_bytes: f64,
}

impl Node {
    /// A node with the given id and latencies and nothing else.
    pub fn new(id: i64, accelerator_latency: f64) -> Node {
        Node {
            id,
            name: format!("node{id}"),
            op: String::new(),
            supported_on_accelerator: true,
            accelerator_latency,
            cpu_latency: accelerator_latency,
            memory_bytes: 0.0,
            backward: false,
            color_class: None,
            output_cost: 0.0,
            output_bytes: 0.0,
            flops: 0.0,
            param_bytes: 0.0,
        }
    }
}

/// A data dependency: `dest` reads an output of `source`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edge {
    pub source: i64,
    pub dest: i64,
    /// Bytes of the tensor carried (0 when unknown).
    pub bytes: f64,
}

/// A computation DAG with the defaults its source carried.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graph {
    /// Where the graph came from (a file name), used in error messages.
    pub name: String,
    /// Unit of latencies and loads: `s` for ONNX imports, `unit` for placement graphs.
    pub time_unit: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    /// Accelerators the source asks for (placement `maxFPGAs`).
    pub devices: Option<usize>,
    /// CPU cores the source allows (placement `maxCPUs`).
    pub cpus: Option<usize>,
    /// Memory of one accelerator (placement `maxSizePerFPGA`).
    pub memory_per_device_bytes: Option<f64>,
}

/// A checked graph: node indices, adjacency and a topological order.
#[derive(Debug, Clone)]
pub(crate) struct Indexed {
    /// Distinct successors of each node (by index).
    pub succ: Vec<Vec<usize>>,
    /// Nodes in a deterministic topological order.
    pub topo: Vec<usize>,
}

impl Graph {
    /// An empty graph named `name` (time unit `unit`, no defaults).
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            time_unit: "unit".into(),
            nodes: vec![],
            edges: vec![],
            devices: None,
            cpus: None,
            memory_per_device_bytes: None,
        }
    }

    fn err(&self, field: impl Into<String>, problem: impl Into<String>) -> PartitionError {
        PartitionError::new(&self.name, field, problem, "")
    }

    /// Checks the structure: at least one node, unique ids, finite non-negative numbers,
    /// edges between existing distinct nodes, no edge from a backward to a forward node,
    /// and no cycle (the error names one).
    pub(crate) fn index(&self) -> Result<Indexed> {
        if self.nodes.is_empty() {
            return Err(PartitionError::new(
                &self.name,
                "nodes",
                "the graph has no nodes",
                "at least one node",
            ));
        }
        let mut index_of = HashMap::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            if index_of.insert(n.id, i).is_some() {
                return Err(self.err(
                    format!("nodes[{i}].id"),
                    format!("id {} is used twice", n.id),
                ));
            }
            for (field, v) in [
                ("accelerator latency", n.accelerator_latency),
                ("cpu latency", n.cpu_latency),
                ("memory bytes", n.memory_bytes),
                ("output cost", n.output_cost),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(PartitionError::new(
                        &self.name,
                        format!("node {}", n.id),
                        format!("{field} is {v}"),
                        "finite numbers ≥ 0",
                    ));
                }
            }
        }
        let mut succ = vec![Vec::new(); self.nodes.len()];
        for (k, e) in self.edges.iter().enumerate() {
            let endpoint = |id: i64, which: &str| {
                index_of.get(&id).copied().ok_or_else(|| {
                    PartitionError::new(
                        &self.name,
                        format!("edges[{k}].{which}"),
                        format!("no node has id {id}"),
                        "ids of the nodes in the file",
                    )
                })
            };
            let s = endpoint(e.source, "sourceId")?;
            let d = endpoint(e.dest, "destId")?;
            if s == d {
                return Err(self.err(
                    format!("edges[{k}]"),
                    format!("self-loop on node {}", e.source),
                ));
            }
            if self.nodes[s].backward && !self.nodes[d].backward {
                return Err(self.err(
                    format!("edges[{k}]"),
                    format!(
                        "edge {} → {} goes from a backward node to a forward node",
                        e.source, e.dest
                    ),
                ));
            }
            succ[s].push(d);
        }
        for s in &mut succ {
            s.sort_unstable();
            s.dedup();
        }
        let topo = topological_order(&succ, |i| self.nodes[i].id).map_err(|cycle| {
            let ids: Vec<String> = cycle
                .iter()
                .map(|&i| self.nodes[i].id.to_string())
                .collect();
            self.err(
                "edges",
                format!("the graph has a cycle: {} → {}", ids.join(" → "), ids[0]),
            )
        })?;
        Ok(Indexed { succ, topo })
    }
}

/// Kahn's algorithm, always taking the ready node with the smallest `key` (deterministic).
/// On a cycle, returns the nodes of one cycle in order.
pub(crate) fn topological_order(
    succ: &[Vec<usize>],
    key: impl Fn(usize) -> i64,
) -> std::result::Result<Vec<usize>, Vec<usize>> {
    let n = succ.len();
    let mut indeg = vec![0usize; n];
    for s in succ {
        for &d in s {
            indeg[d] += 1;
        }
    }
    let mut ready: BTreeMap<(i64, usize), ()> = BTreeMap::new();
    for (i, &d) in indeg.iter().enumerate() {
        if d == 0 {
            ready.insert((key(i), i), ());
        }
    }
    let mut order = Vec::with_capacity(n);
    while let Some(((_, v), ())) = ready.pop_first() {
        order.push(v);
        for &d in &succ[v] {
            indeg[d] -= 1;
            if indeg[d] == 0 {
                ready.insert((key(d), d), ());
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Every node left has a predecessor that is also left: walk predecessors until a node
    // repeats, then read the loop forwards.
    let left: Vec<bool> = indeg.iter().map(|&d| d > 0).collect();
    let mut pred_left = vec![usize::MAX; n];
    for (s, ds) in succ.iter().enumerate() {
        if left[s] {
            for &d in ds {
                if left[d] && pred_left[d] == usize::MAX {
                    pred_left[d] = s;
                }
            }
        }
    }
    let start = (0..n).find(|&i| left[i]).expect("a node is left");
    let mut seen = vec![usize::MAX; n];
    let mut path = vec![];
    let mut v = start;
    while seen[v] == usize::MAX {
        seen[v] = path.len();
        path.push(v);
        v = pred_left[v];
    }
    let mut cycle = path[seen[v]..].to_vec();
    cycle.reverse();
    let first = (0..cycle.len()).min_by_key(|&i| key(cycle[i])).unwrap_or(0);
    cycle.rotate_left(first);
    Err(cycle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_is_named() {
        let succ = vec![vec![1], vec![2], vec![1, 3], vec![]];
        let c = topological_order(&succ, |i| i as i64).unwrap_err();
        assert_eq!(c, vec![1, 2]);
    }

    #[test]
    fn order_is_smallest_key_first() {
        let succ = vec![vec![2], vec![2], vec![]];
        assert_eq!(
            topological_order(&succ, |i| -(i as i64)).unwrap(),
            vec![1, 0, 2]
        );
    }
}
