//! Shape inference and work of each supported ONNX operator: output shapes (and constant
//! values of small integer tensors, so that `Shape → Gather → Concat → Reshape` chains
//! resolve), FLOPs, and the kernel that runs it (a GEMM shape, a memory-bound byte count,
//! or nothing for views).
//!
//! FLOP conventions (stated once, used by the tests' hand computations):
//! * GEMM-like ops (Conv, Gemm, MatMul): 2 per multiply-accumulate, plus 1 per output
//!   element for a bias add.
//! * Elementwise ops: 1 per output element. Softmax/LogSoftmax: 3 per element (exp, sum,
//!   divide). LayerNormalization: 5 per element (mean, subtract, variance, scale, shift).
//!   BatchNormalization: 2 per element (scale, shift). Reductions and global pooling:
//!   1 per input element. Windowed pooling: kernel size per output element.
//! * Data movement (Reshape, Transpose, Concat, Split, Slice, Gather, …): 0.
//!
//! Knows ONNX operator semantics only; not devices or partitions.
//!
//! This file holds the value and kernel types, the supported list, the element limit and
//! the dispatch from operator name to its family: `gemm` (Conv, Gemm, MatMul), `elementwise`
//! (activations, arithmetic, normalisation), `pool` (windowed and global pooling, window
//! geometry, reductions), `shape` (views, metadata and constants: Reshape, Flatten,
//! Squeeze, Unsqueeze, Shape, Constant, Cast, Identity, Dropout) and `movement` (copies:
//! Transpose, Concat, Split, Slice, Gather); `common` has the attribute, input, axis,
//! broadcasting and overflow helpers they share.

use super::proto::NodeProto;

mod common;
mod elementwise;
mod gemm;
mod movement;
mod pool;
mod shape;

/// A value of the graph as far as costing needs it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tensor {
    pub dims: Vec<u64>,
    pub elem_bytes: f64,
    /// Known integer contents (shape tensors, indices, axes), when small and constant.
    pub value: Option<Vec<i64>>,
}

impl Tensor {
    pub fn new(dims: Vec<u64>, elem_bytes: f64) -> Tensor {
        Tensor {
            dims,
            elem_bytes,
            value: None,
        }
    }
    /// Elements, saturating at u64::MAX (every tensor the importer keeps has at most
    /// [`MAX_ELEMENTS`], checked by [`checked_numel`]).
    pub fn numel(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .unwrap_or(u64::MAX)
    }
    pub fn bytes(&self) -> f64 {
        self.numel() as f64 * self.elem_bytes
    }
    fn with_value(mut self, v: Vec<i64>) -> Tensor {
        self.value = Some(v);
        self
    }
}

/// What runs on the device for one node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kernel {
    /// A view or metadata: no kernel.
    None,
    /// `count` GEMMs `[m×k]·[k×n]`.
    Gemm { m: u64, n: u64, k: u64, count: u64 },
    /// A bandwidth-bound kernel moving `bytes` (read + write).
    Memory { bytes: f64 },
}

#[derive(Debug, Clone)]
pub(crate) struct Inferred {
    pub outputs: Vec<Tensor>,
    pub flops: f64,
    pub kernel: Kernel,
}

/// Operators the importer understands.
pub(crate) const SUPPORTED: &[&str] = &[
    "Abs",
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "Conv",
    "Div",
    "Dropout",
    "Erf",
    "Exp",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LayerNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "MaxPool",
    "Min",
    "Mul",
    "Neg",
    "Pow",
    "Reciprocal",
    "ReduceMean",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Softplus",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

type R<T> = std::result::Result<T, String>;

/// Most elements one tensor may have: 2^50 (4 PiB of fp32), beyond any device's memory,
/// so that byte counts and the products of two dimensions stay exact.
pub(crate) const MAX_ELEMENTS: u64 = 1 << 50;

/// The elements of `dims`, or why they are too many (multiplied with overflow checks).
pub(crate) fn checked_numel(dims: &[u64]) -> R<u64> {
    dims.iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| {
            format!(
                "a tensor of shape {dims:?} has more than 2^50 elements (allowed: at most 2^50)"
            )
        })
}

/// Shapes, FLOPs and kernel of one node; `Err` holds the problem (the caller names the node).
/// Every output has at most [`MAX_ELEMENTS`] elements, and known contents only when they
/// hold exactly its elements (a [3] and a [3, 1] broadcast to [3, 3] but their three
/// values do not).
pub(crate) fn infer(op: &str, node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let mut r = infer_shapes(op, node, inputs)?;
    for t in &mut r.outputs {
        let n = checked_numel(&t.dims)?;
        if t.value.as_ref().is_some_and(|v| v.len() as u64 != n) {
            t.value = None;
        }
    }
    Ok(r)
}

fn infer_shapes(op: &str, node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    match op {
        "Conv" => gemm::conv(node, inputs),
        "Gemm" => gemm::gemm(node, inputs),
        "MatMul" => gemm::matmul(inputs),
        "Relu" | "LeakyRelu" | "Sigmoid" | "Tanh" | "Gelu" | "Erf" | "Sqrt" | "Exp" | "Log"
        | "Neg" | "Abs" | "Reciprocal" | "Softplus" | "HardSigmoid" | "HardSwish" => {
            elementwise::elementwise(&inputs[..1.min(inputs.len())], 1.0)
        }
        "Clip" => elementwise::elementwise(&inputs[..1.min(inputs.len())], 1.0),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Where" => {
            elementwise::binary(op, inputs)
        }
        "Softmax" | "LogSoftmax" => elementwise::softmax(node, inputs),
        "LayerNormalization" => elementwise::layer_norm(node, inputs),
        "BatchNormalization" => elementwise::batch_norm(inputs),
        "Dropout" => shape::dropout(node, inputs),
        "Identity" => shape::identity(inputs),
        "Cast" => shape::cast(node, inputs),
        "Shape" => shape::shape(node, inputs),
        "Constant" => shape::constant(node),
        "Reshape" => shape::reshape(node, inputs),
        "Flatten" => shape::flatten(node, inputs),
        "Squeeze" | "Unsqueeze" => shape::squeeze_unsqueeze(op, node, inputs),
        "Transpose" => movement::transpose(node, inputs),
        "Concat" => movement::concat(node, inputs),
        "Split" => movement::split(node, inputs),
        "Slice" => movement::slice(inputs),
        "Gather" => movement::gather(node, inputs),
        "MaxPool" | "AveragePool" => pool::pool(node, inputs),
        "GlobalAveragePool" | "GlobalMaxPool" => pool::global_pool(inputs),
        "ReduceMean" | "ReduceSum" => pool::reduce(node, inputs),
        _ => Err(format!("operator `{op}` is not supported")),
    }
}
