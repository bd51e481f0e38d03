//! ONNX import: decodes a `ModelProto` (bytes, never a path), infers every tensor's shape,
//! and turns each node into a [`Node`] with FLOPs, parameter bytes, output bytes, memory and
//! latency on one GPU from plait's cost model, and each data dependency into an [`Edge`]
//! carrying the tensor's bytes.
//!
//! Costing rules:
//! * latency: GEMM-like ops by [`DeviceModel::gemm_s`] (Conv as an implicit GEMM),
//!   bandwidth-bound ops by [`DeviceModel::memory_s`] of the bytes read and written, views
//!   (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Shape, Constant) free; every
//!   kernel costs at least [`DeviceModel::kernel_issue_s`], the host's issue time of one
//!   kernel.
//! * parameters: floating-point initializers, each owned by its first consumer in graph
//!   order (integer initializers are shapes and indices, not weights).
//! * memory of a node: its parameters plus its outputs (held until consumers run).
//! * output cost: time to send all of a node's outputs to the next pipeline stage over the
//!   cluster's point-to-point link ([`plait_cost::comm::Group::p2p_s`] between two GPUs of
//!   one node).
//! * symbolic dimensions (e.g. a dynamic batch) count as 1.
//!
//! Knows the ONNX format and plait's cost model; not how graphs are partitioned.

mod ops;
pub mod proto;

use std::collections::HashMap;

use prost::Message;

use plait_cost::comm::Group;
use plait_cost::DeviceModel;
use plait_spec::ClusterSpec;

use crate::error::{PartitionError, Result};
use crate::graph::{Edge, Graph, Node};
use ops::{Kernel, Tensor};
use proto::tensor_proto::DataType;

/// CPU time of a node relative to its GPU time. plait's cost model has no CPU; the layer
/// graphs of the placement artifact (shared/data/placement, ResNet-50 and BERT-24 training)
/// price every node's CPU latency at exactly 10 × its accelerator latency, used here so that
/// a CPU stage is well defined (ONNX graphs default to no CPU).
pub const CPU_SLOWDOWN: f64 = 10.0;

/// The device and link an ONNX graph is costed on.
#[derive(Debug, Clone, Copy)]
pub struct Costs<'a> {
    pub device: &'a DeviceModel,
    /// Link between neighbouring pipeline stages.
    pub link: Group,
}

impl<'a> Costs<'a> {
    /// GPU `device` of `cluster`, neighbouring stages on two GPUs of one node.
    pub fn new(device: &'a DeviceModel, cluster: &ClusterSpec) -> Costs<'a> {
        Costs {
            device,
            link: Group::place(cluster, 2, 1),
        }
    }
}

/// Bytes of one element of an ONNX data type; `None` for strings, complex and sub-byte types.
pub(crate) fn elem_bytes(data_type: i32) -> Option<f64> {
    use DataType::*;
    Some(match DataType::try_from(data_type).ok()? {
        Float | Int32 | Uint32 => 4.0,
        Double | Int64 | Uint64 => 8.0,
        Float16 | Bfloat16 | Int16 | Uint16 => 2.0,
        Uint8 | Int8 | Bool | Float8e4m3fn | Float8e4m3fnuz | Float8e5m2 | Float8e5m2fnuz
        | Float8e8m0 => 1.0,
        Undefined | String | Complex64 | Complex128 | Uint4 | Int4 | Float4e2m1 | Uint2 | Int2 => {
            return None
        }
    })
}

fn is_float(data_type: i32) -> bool {
    use DataType::*;
    matches!(
        DataType::try_from(data_type),
        Ok(Float
            | Double
            | Float16
            | Bfloat16
            | Float8e4m3fn
            | Float8e4m3fnuz
            | Float8e5m2
            | Float8e5m2fnuz)
    )
}

/// Integer contents worth keeping (shapes, axes, indices): at most this many elements.
const MAX_CONST_VALUES: u64 = 64;

/// The shape (and small integer contents) of an initializer or a `Constant` tensor.
pub(crate) fn tensor_of(t: &proto::TensorProto) -> std::result::Result<Tensor, String> {
    let dt = t.data_type.unwrap_or(0);
    let bytes = elem_bytes(dt).ok_or_else(|| format!("data type {dt} is not supported"))?;
    if t.dims.iter().any(|&d| d < 0) {
        return Err(format!("negative dimension in {:?}", t.dims));
    }
    let mut out = Tensor::new(t.dims.iter().map(|&d| d as u64).collect(), bytes);
    let n = ops::checked_numel(&out.dims)?;
    if n <= MAX_CONST_VALUES {
        let dtype = DataType::try_from(dt).ok();
        let vals: Option<Vec<i64>> = match dtype {
            Some(DataType::Int64) if t.int64_data.len() as u64 == n => Some(t.int64_data.clone()),
            Some(DataType::Int64) => {
                t.raw_data
                    .as_ref()
                    .filter(|r| r.len() as u64 == 8 * n)
                    .map(|r| {
                        r.chunks_exact(8)
                            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                            .collect()
                    })
            }
            Some(DataType::Int32) if t.int32_data.len() as u64 == n => {
                Some(t.int32_data.iter().map(|&v| v as i64).collect())
            }
            Some(DataType::Int32) => {
                t.raw_data
                    .as_ref()
                    .filter(|r| r.len() as u64 == 4 * n)
                    .map(|r| {
                        r.chunks_exact(4)
                            .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                            .collect()
                    })
            }
            _ => None,
        };
        out.value = vals;
    }
    Ok(out)
}

fn shape_of(v: &proto::ValueInfoProto) -> Option<Tensor> {
    let proto::type_proto::Value::TensorType(t) = v.r#type.as_ref()?.value.as_ref()?;
    let bytes = elem_bytes(t.elem_type?)?;
    let dims = t
        .shape
        .as_ref()?
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(proto::tensor_shape_proto::dimension::Value::DimValue(v)) if *v >= 0 => *v as u64,
            // Symbolic or unknown: count as 1 (per-sample costs).
            _ => 1,
        })
        .collect();
    Some(Tensor::new(dims, bytes))
}

/// Imports an ONNX model; `source` names it in errors.
pub fn import(bytes: &[u8], source: &str, costs: &Costs) -> Result<Graph> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| {
        PartitionError::new(
            source,
            "ModelProto",
            format!("not a valid ONNX model ({} bytes): {e}", bytes.len()),
            "an ONNX protobuf file (.onnx)",
        )
    })?;
    let graph = model.graph.as_ref().ok_or_else(|| {
        PartitionError::new(
            source,
            "ModelProto.graph",
            "the model has no graph",
            "an ONNX model with a graph",
        )
    })?;
    if graph.node.is_empty() {
        return Err(PartitionError::new(
            source,
            "graph.node",
            "the graph has no nodes",
            "at least one node",
        ));
    }
    // Known tensors: initializers, then graph inputs.
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut param_of: HashMap<String, f64> = HashMap::new();
    for (k, t) in graph.initializer.iter().enumerate() {
        let name = t.name.clone().unwrap_or_default();
        let tensor = tensor_of(t).map_err(|p| {
            PartitionError::new(
                source,
                format!("graph.initializer[{k}] `{name}`"),
                p,
                "numeric tensors",
            )
        })?;
        if is_float(t.data_type.unwrap_or(0)) {
            param_of.insert(name.clone(), tensor.bytes());
        }
        tensors.insert(name, tensor);
    }
    for v in &graph.input {
        let name = v.name.clone().unwrap_or_default();
        if tensors.contains_key(&name) {
            continue;
        }
        let t = shape_of(v).ok_or_else(|| {
            PartitionError::new(
                source,
                format!("graph.input `{name}`"),
                "has no tensor type with a shape",
                "tensor inputs with element type and shape",
            )
        })?;
        // A [2^62, 4] input wrapped to 0 elements and "fit" anywhere.
        ops::checked_numel(&t.dims).map_err(|p| {
            PartitionError::new(
                source,
                format!("graph.input `{name}`"),
                p,
                "tensors of at most 2^50 elements",
            )
        })?;
        tensors.insert(name, t);
    }
    let mut g = Graph::new(source);
    g.time_unit = "s".into();
    let mut producer: HashMap<String, usize> = HashMap::new();
    let mut edge_bytes: HashMap<(usize, usize), f64> = HashMap::new();
    let mut edge_order: Vec<(usize, usize)> = vec![];
    for (idx, n) in graph.node.iter().enumerate() {
        let op = n.op_type.clone().unwrap_or_default();
        let name = n
            .name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("{op}_{idx}"));
        let field = format!("node `{name}` ({op})");
        let domain = n.domain.as_deref().unwrap_or("");
        if !(domain.is_empty() || domain == "ai.onnx") || !ops::SUPPORTED.contains(&op.as_str()) {
            let shown = if domain.is_empty() {
                op.clone()
            } else {
                format!("{domain}.{op}")
            };
            return Err(PartitionError::new(
                source,
                field,
                format!("operator `{shown}` is not supported"),
                ops::SUPPORTED.join("|"),
            ));
        }
        let mut inputs = vec![];
        for input in &n.input {
            if input.is_empty() {
                inputs.push(None);
                continue;
            }
            let t = tensors.get(input).ok_or_else(|| {
                PartitionError::new(
                    source,
                    field.clone(),
                    format!("input `{input}` is produced by no earlier node, initializer or graph input"),
                    "nodes in topological order",
                )
            })?;
            inputs.push(Some(t.clone()));
        }
        let inferred = ops::infer(&op, n, &inputs)
            .map_err(|p| PartitionError::new(source, field.clone(), p, ""))?;
        if inferred.outputs.len() < n.output.len() {
            return Err(PartitionError::new(
                source,
                field,
                format!(
                    "{} outputs named, {} produced",
                    n.output.len(),
                    inferred.outputs.len()
                ),
                "",
            ));
        }
        let mut params = 0.0;
        for input in &n.input {
            if let Some(b) = param_of.remove(input) {
                params += b;
            }
            if let Some(&p) = producer.get(input) {
                let bytes = tensors.get(input).map_or(0.0, Tensor::bytes);
                let key = (p, idx);
                if !edge_bytes.contains_key(&key) {
                    edge_order.push(key);
                }
                *edge_bytes.entry(key).or_insert(0.0) += bytes;
            }
        }
        let output_bytes: f64 = inferred
            .outputs
            .iter()
            .take(n.output.len())
            .map(Tensor::bytes)
            .sum();
        let d = costs.device;
        let latency = match inferred.kernel {
            Kernel::None => 0.0,
            Kernel::Gemm { m, n, k, count } => d.gemm_s(m, n, k, count).max(d.kernel_issue_s),
            Kernel::Memory { bytes } => d.memory_s(bytes).max(d.kernel_issue_s),
        };
        for (out_name, t) in n.output.iter().zip(inferred.outputs) {
            if !out_name.is_empty() {
                producer.insert(out_name.clone(), idx);
                tensors.insert(out_name.clone(), t);
            }
        }
        g.nodes.push(Node {
            id: idx as i64,
            name,
            op,
            supported_on_accelerator: true,
            accelerator_latency: latency,
            cpu_latency: latency * CPU_SLOWDOWN,
            memory_bytes: params + output_bytes,
            backward: false,
            color_class: None,
            output_cost: costs.link.p2p_s(output_bytes),
            output_bytes,
            flops: inferred.flops,
            param_bytes: params,
        });
    }
    g.edges = edge_order
        .into_iter()
        .map(|(s, d)| Edge {
            source: s as i64,
            dest: d as i64,
            bytes: edge_bytes[&(s, d)],
        })
        .collect();
    g.index()?;
    Ok(g)
}
