//! Reader of the placement-graph JSON of Tarnawski et al. (NeurIPS 2020 artifact; format in
//! shared/data/placement/FORMAT.md): `maxSizePerFPGA`, `maxFPGAs`, `maxCPUs`, `nodes[]`,
//! `edges[]`. Takes text, never a path; every error names the file and the JSON path.
//!
//! Knows the file format only, not how graphs are partitioned.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{PartitionError, Result};
use crate::graph::{Edge, Graph, Node};

/// Two out-edges of one node whose `cost` differs by more than this (relative) are an error:
/// the format defines the cost per source node, and the artifact's own reader rejects
/// differences above 1e-6 (throughput-dp/dp.cpp, `from_json(Edge)`).
const COST_TOLERANCE: f64 = 1e-6;

impl Graph {
    /// Parses a placement-graph JSON document; `source` names it in errors.
    pub fn from_placement_json(text: &str, source: &str) -> Result<Graph> {
        let root: Value = serde_json::from_str(text).map_err(|e| {
            PartitionError::new(
                source,
                "JSON",
                format!("not valid JSON: {e}"),
                "a placement graph (see FORMAT.md)",
            )
        })?;
        let obj = root.as_object().ok_or_else(|| {
            PartitionError::new(
                source,
                "JSON",
                "the document is not an object",
                "{\"maxSizePerFPGA\", \"maxFPGAs\", \"maxCPUs\", \"nodes\", \"edges\"}",
            )
        })?;
        let r = Reader { source };
        let memory = r.number(obj, "maxSizePerFPGA", "maxSizePerFPGA")?;
        if memory <= 0.0 {
            return Err(r.bad(
                "maxSizePerFPGA",
                format!("must be positive, got {memory}"),
                "bytes > 0",
            ));
        }
        let devices = r.count(obj, "maxFPGAs", "maxFPGAs")?;
        if devices == 0 {
            return Err(r.bad("maxFPGAs", "must be at least 1, got 0", "integers ≥ 1"));
        }
        let cpus = r.count(obj, "maxCPUs", "maxCPUs")?;

        let mut g = Graph::new(source);
        g.devices = Some(devices);
        g.cpus = Some(cpus);
        g.memory_per_device_bytes = Some(memory);
        for (i, v) in r.array(obj, "nodes")?.iter().enumerate() {
            let path = format!("nodes[{i}]");
            let o = v
                .as_object()
                .ok_or_else(|| r.bad(&path, "is not an object", "{\"id\", \"fpgaLatency\", …}"))?;
            let id = r.integer(o, "id", &path)?;
            let fpga = r.number(o, "fpgaLatency", &path)?;
            let cpu = r.number(o, "cpuLatency", &path)?;
            let size = if o.contains_key("size") {
                r.number(o, "size", &path)?
            } else {
                0.0
            };
            let color_class = match o.get("colorClass") {
                None | Some(Value::Null) => None,
                Some(_) => Some(r.integer(o, "colorClass", &path)?),
            };
            let name = match o.get("name") {
                Some(Value::String(s)) => s.clone(),
                _ => format!("node{id}"),
            };
            g.nodes.push(Node {
                id,
                name,
                op: String::new(),
                supported_on_accelerator: r.flag(o, "supportedOnFpga", &path)?,
                accelerator_latency: fpga,
                cpu_latency: cpu,
                memory_bytes: size,
                backward: r.flag(o, "isBackwardNode", &path)?,
                color_class,
                output_cost: 0.0,
                output_bytes: 0.0,
                flops: 0.0,
                param_bytes: 0.0,
            });
        }
        let mut cost_of: HashMap<i64, (f64, usize)> = HashMap::new();
        for (k, v) in r.array(obj, "edges")?.iter().enumerate() {
            let path = format!("edges[{k}]");
            let o = v.as_object().ok_or_else(|| {
                r.bad(
                    &path,
                    "is not an object",
                    "{\"sourceId\", \"destId\", \"cost\"}",
                )
            })?;
            let source_id = r.integer(o, "sourceId", &path)?;
            let dest = r.integer(o, "destId", &path)?;
            let cost = r.number(o, "cost", &path)?;
            let bytes = if o.contains_key("size") {
                r.number(o, "size", &path)?
            } else {
                0.0
            };
            match cost_of.get(&source_id) {
                Some(&(c, first)) if (c - cost).abs() > COST_TOLERANCE * c.abs().max(1.0) => {
                    return Err(r.bad(
                        format!("{path}.cost"),
                        format!(
                            "node {source_id} has out-edges of different cost ({c} in edges[{first}], {cost} here)"
                        ),
                        "one cost per source node",
                    ));
                }
                Some(_) => {}
                None => {
                    cost_of.insert(source_id, (cost, k));
                }
            }
            g.edges.push(Edge {
                source: source_id,
                dest,
                bytes,
            });
        }
        for n in &mut g.nodes {
            if let Some(&(c, _)) = cost_of.get(&n.id) {
                n.output_cost = c;
            }
        }
        let bytes_of: HashMap<i64, f64> = g.edges.iter().fold(HashMap::new(), |mut m, e| {
            let b = m.entry(e.source).or_insert(0.0);
            *b = f64::max(*b, e.bytes);
            m
        });
        for n in &mut g.nodes {
            n.output_bytes = bytes_of.get(&n.id).copied().unwrap_or(0.0);
        }
        g.index()?;
        Ok(g)
    }
}

struct Reader<'a> {
    source: &'a str,
}

impl Reader<'_> {
    fn bad(
        &self,
        field: impl Into<String>,
        problem: impl Into<String>,
        allowed: &str,
    ) -> PartitionError {
        PartitionError::new(self.source, field, problem, allowed)
    }

    fn get<'v>(&self, o: &'v Map<String, Value>, key: &str, path: &str) -> Result<&'v Value> {
        o.get(key).ok_or_else(|| {
            self.bad(
                Self::field(path, key),
                "missing",
                "see FORMAT.md of the placement graphs",
            )
        })
    }

    fn field(path: &str, key: &str) -> String {
        if path == key {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    }

    fn number(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<f64> {
        let v = self.get(o, key, path)?;
        match v.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => Err(self.bad(
                Self::field(path, key),
                format!("`{v}` is not a non-negative number"),
                "finite numbers ≥ 0",
            )),
        }
    }

    fn integer(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<i64> {
        let v = self.get(o, key, path)?;
        match v {
            Value::Number(n) if n.as_i64().is_some() => Ok(n.as_i64().unwrap_or_default()),
            Value::Number(n)
                if n.as_f64()
                    .is_some_and(|x| x.fract() == 0.0 && x.abs() < 9e15) =>
            {
                Ok(n.as_f64().unwrap_or_default() as i64)
            }
            _ => Err(self.bad(
                Self::field(path, key),
                format!("`{v}` is not an integer"),
                "integers",
            )),
        }
    }

    fn count(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<usize> {
        let x = self.integer(o, key, path)?;
        usize::try_from(x).map_err(|_| {
            self.bad(
                Self::field(path, key),
                format!("must not be negative, got {x}"),
                "integers ≥ 0",
            )
        })
    }

    fn flag(&self, o: &Map<String, Value>, key: &str, path: &str) -> Result<bool> {
        let v = self.get(o, key, path)?;
        match v {
            Value::Bool(b) => Ok(*b),
            Value::Number(n) if n.as_f64() == Some(0.0) => Ok(false),
            Value::Number(n) if n.as_f64() == Some(1.0) => Ok(true),
            _ => Err(self.bad(
                Self::field(path, key),
                format!("`{v}` is not a flag"),
                "0|1|true|false",
            )),
        }
    }

    fn array<'v>(&self, o: &'v Map<String, Value>, key: &str) -> Result<&'v Vec<Value>> {
        self.get(o, key, key)?
            .as_array()
            .ok_or_else(|| self.bad(key, "is not an array", "a JSON array"))
    }
}
