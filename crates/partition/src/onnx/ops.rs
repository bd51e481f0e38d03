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

use super::proto::{AttributeProto, NodeProto};

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

/// `a × b`, or an error naming `what` when it overflows.
fn mul(a: u64, b: u64, what: &str) -> R<u64> {
    a.checked_mul(b)
        .ok_or_else(|| format!("{what} ({a} × {b}) overflows"))
}

/// `a + b`, or an error naming `what` when it overflows.
fn add(a: u64, b: u64, what: &str) -> R<u64> {
    a.checked_add(b)
        .ok_or_else(|| format!("{what} ({a} + {b}) overflows"))
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

fn attr_int(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).and_then(|a| a.i).unwrap_or(default)
}

fn attr_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

fn attr_str(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name)
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

fn input<'a>(inputs: &'a [Option<Tensor>], i: usize, what: &str) -> R<&'a Tensor> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("input {i} ({what}) is missing"))
}

fn opt_input(inputs: &[Option<Tensor>], i: usize) -> Option<&Tensor> {
    inputs.get(i).and_then(Option::as_ref)
}

/// A constant integer input, e.g. the `shape` of Reshape.
fn const_ints(inputs: &[Option<Tensor>], i: usize, what: &str) -> R<Vec<i64>> {
    input(inputs, i, what)?.value.clone().ok_or_else(|| {
        format!("input {i} ({what}) is not a constant, so the output shape is unknown")
    })
}

/// Normalises a possibly negative axis against `rank`.
fn axis(a: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let x = if a < 0 { a + r } else { a };
    if (0..r).contains(&x) {
        Ok(x as usize)
    } else {
        Err(format!("axis {a} is outside a rank-{rank} tensor"))
    }
}

/// Numpy broadcasting of several shapes.
fn broadcast(shapes: &[&[u64]]) -> R<Vec<u64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1u64; rank];
    for s in shapes {
        for (k, &d) in s.iter().enumerate() {
            let slot = &mut out[rank - s.len() + k];
            if *slot == 1 {
                *slot = d;
            } else if d != 1 && d != *slot {
                return Err(format!(
                    "shapes {:?} do not broadcast",
                    shapes.iter().map(|s| s.to_vec()).collect::<Vec<_>>()
                ));
            }
        }
    }
    Ok(out)
}

fn memory_kernel(inputs: &[Option<Tensor>], outputs: &[Tensor]) -> Kernel {
    let read: f64 = inputs.iter().flatten().map(Tensor::bytes).sum();
    let write: f64 = outputs.iter().map(Tensor::bytes).sum();
    Kernel::Memory {
        bytes: read + write,
    }
}

fn elementwise(inputs: &[Option<Tensor>], flops_per_element: f64) -> R<Inferred> {
    let x = input(inputs, 0, "X")?;
    let shapes: Vec<&[u64]> = inputs.iter().flatten().map(|t| t.dims.as_slice()).collect();
    let dims = broadcast(&shapes)?;
    let out = Tensor::new(dims, x.elem_bytes);
    let flops = out.numel() as f64 * flops_per_element;
    let outputs = vec![out];
    Ok(Inferred {
        kernel: memory_kernel(inputs, &outputs),
        outputs,
        flops,
    })
}

/// Output size of a windowed op along one spatial axis.
fn window_out(size: u64, kernel: u64, stride: u64, dilation: u64, pads: u64, ceil: bool) -> R<u64> {
    if kernel == 0 {
        return Err("a kernel of size 0".into());
    }
    let span = add(
        mul(dilation, kernel - 1, "the dilated kernel")?,
        1,
        "the dilated kernel",
    )?;
    let padded = add(size, pads, "the padded input")?;
    if padded < span {
        return Err(format!(
            "kernel {kernel} (dilation {dilation}) is larger than the padded input {padded}"
        ));
    }
    let steps = padded - span;
    Ok(if ceil {
        steps.div_ceil(stride)
    } else {
        steps / stride
    } + 1)
}

/// Spatial output dims of Conv/pooling, honouring `auto_pad`, `pads`, `strides`,
/// `dilations` and `ceil_mode`.
fn spatial(node: &NodeProto, x: &[u64], kernel: &[u64]) -> R<Vec<u64>> {
    let n = kernel.len();
    if x.len() != n + 2 {
        return Err(format!(
            "input of rank {} does not match a {n}-D kernel",
            x.len()
        ));
    }
    let strides = attr_ints(node, "strides").unwrap_or_else(|| vec![1; n]);
    let dilations = attr_ints(node, "dilations").unwrap_or_else(|| vec![1; n]);
    let pads = attr_ints(node, "pads").unwrap_or_else(|| vec![0; 2 * n]);
    let ceil = attr_int(node, "ceil_mode", 0) != 0;
    let auto_pad = attr_str(node, "auto_pad").unwrap_or_else(|| "NOTSET".into());
    if strides.len() != n || dilations.len() != n || pads.len() != 2 * n {
        return Err("strides/dilations/pads do not match the kernel rank".into());
    }
    if strides.iter().chain(&dilations).any(|&s| s < 1) || pads.iter().any(|&p| p < 0) {
        return Err("strides and dilations must be ≥ 1 and pads ≥ 0".into());
    }
    (0..n)
        .map(|i| {
            let size = x[i + 2];
            let s = strides[i] as u64;
            match auto_pad.as_str() {
                "SAME_UPPER" | "SAME_LOWER" => Ok(size.div_ceil(s)),
                "VALID" => window_out(size, kernel[i], s, dilations[i] as u64, 0, false),
                "NOTSET" | "" => window_out(
                    size,
                    kernel[i],
                    s,
                    dilations[i] as u64,
                    pads[i].checked_add(pads[i + n]).ok_or("pads overflow")? as u64,
                    ceil,
                ),
                other => Err(format!(
                    "auto_pad `{other}` is not one of NOTSET|SAME_UPPER|SAME_LOWER|VALID"
                )),
            }
        })
        .collect()
}

fn conv(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let x = input(inputs, 0, "X")?;
    let w = input(inputs, 1, "W")?;
    if w.dims.len() < 3 || x.dims.len() != w.dims.len() {
        return Err(format!(
            "X {:?} and W {:?} are not a convolution",
            x.dims, w.dims
        ));
    }
    let group = attr_int(node, "group", 1).max(1) as u64;
    let (batch, cin, cout) = (x.dims[0], x.dims[1], w.dims[0]);
    let kernel = &w.dims[2..];
    if cin % group != 0 || cout % group != 0 || w.dims[1].checked_mul(group) != Some(cin) {
        return Err(format!(
            "{cin} input and {cout} output channels do not match W {:?} with group {group}",
            w.dims
        ));
    }
    let out_sp = spatial(node, &x.dims, kernel)?;
    let mut dims = vec![batch, cout];
    dims.extend(&out_sp);
    let out = Tensor::new(dims, x.elem_bytes);
    let pixels = mul(batch, checked_numel(&out_sp)?, "output pixels")?;
    let k = mul(cin / group, checked_numel(kernel)?, "the reduction")?;
    let mut flops = 2.0 * mul(pixels, cout, "the output")? as f64 * k as f64;
    if opt_input(inputs, 2).is_some() {
        flops += out.numel() as f64;
    }
    Ok(Inferred {
        outputs: vec![out],
        flops,
        // Implicit GEMM: output pixels × output channels of a group × reduction.
        kernel: Kernel::Gemm {
            m: pixels,
            n: cout / group,
            k,
            count: group,
        },
    })
}

fn gemm(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let a = input(inputs, 0, "A")?;
    let b = input(inputs, 1, "B")?;
    if a.dims.len() != 2 || b.dims.len() != 2 {
        return Err(format!(
            "A {:?} and B {:?} must be matrices",
            a.dims, b.dims
        ));
    }
    let (m, ka) = if attr_int(node, "transA", 0) != 0 {
        (a.dims[1], a.dims[0])
    } else {
        (a.dims[0], a.dims[1])
    };
    let (kb, n) = if attr_int(node, "transB", 0) != 0 {
        (b.dims[1], b.dims[0])
    } else {
        (b.dims[0], b.dims[1])
    };
    if ka != kb {
        return Err(format!(
            "inner dimensions differ: A {:?}, B {:?}",
            a.dims, b.dims
        ));
    }
    let out = Tensor::new(vec![m, n], a.elem_bytes);
    let mn = mul(m, n, "the output")?;
    let mut flops = 2.0 * mn as f64 * ka as f64;
    if let Some(c) = opt_input(inputs, 2) {
        broadcast(&[&c.dims, &out.dims])?;
        flops += mn as f64;
    }
    Ok(Inferred {
        outputs: vec![out],
        flops,
        kernel: Kernel::Gemm {
            m,
            n,
            k: ka,
            count: 1,
        },
    })
}

fn matmul(inputs: &[Option<Tensor>]) -> R<Inferred> {
    let a = input(inputs, 0, "A")?;
    let b = input(inputs, 1, "B")?;
    if a.dims.is_empty() || b.dims.is_empty() {
        return Err("MatMul of a scalar".into());
    }
    let a2: Vec<u64> = if a.dims.len() == 1 {
        vec![1, a.dims[0]]
    } else {
        a.dims.clone()
    };
    let b2: Vec<u64> = if b.dims.len() == 1 {
        vec![b.dims[0], 1]
    } else {
        b.dims.clone()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != kb {
        return Err(format!(
            "inner dimensions differ: A {:?}, B {:?}",
            a.dims, b.dims
        ));
    }
    let batch_dims = broadcast(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
    let batch = checked_numel(&batch_dims)?;
    let mut dims = batch_dims;
    if a.dims.len() > 1 {
        dims.push(m);
    }
    if b.dims.len() > 1 {
        dims.push(n);
    }
    let out = Tensor::new(dims, a.elem_bytes);
    let bm = mul(batch, m, "the batched rows")?;
    let flops = 2.0 * mul(bm, n, "the output")? as f64 * k as f64;
    // A weight matrix shared by every batch row runs as one tall GEMM (a linear layer).
    let kernel = if b2.len() == 2 {
        Kernel::Gemm {
            m: bm,
            n,
            k,
            count: 1,
        }
    } else {
        Kernel::Gemm {
            m,
            n,
            k,
            count: batch,
        }
    };
    Ok(Inferred {
        outputs: vec![out],
        flops,
        kernel,
    })
}

fn pool(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let x = input(inputs, 0, "X")?;
    let kernel: Vec<u64> = attr_ints(node, "kernel_shape")
        .ok_or("attribute `kernel_shape` is missing")?
        .iter()
        .map(|&k| {
            if k >= 1 {
                Ok(k as u64)
            } else {
                Err(format!("kernel size {k}"))
            }
        })
        .collect::<R<_>>()?;
    let out_sp = spatial(node, &x.dims, &kernel)?;
    let mut dims = x.dims[..2].to_vec();
    dims.extend(&out_sp);
    let out = Tensor::new(dims, x.elem_bytes);
    let flops = checked_numel(&out.dims)? as f64 * checked_numel(&kernel)? as f64;
    let outputs = vec![out];
    Ok(Inferred {
        kernel: memory_kernel(inputs, &outputs),
        outputs,
        flops,
    })
}

fn reduce_axes(node: &NodeProto, inputs: &[Option<Tensor>], rank: usize) -> R<Vec<usize>> {
    let axes = match attr_ints(node, "axes") {
        Some(a) => a,
        None if opt_input(inputs, 1).is_some() => const_ints(inputs, 1, "axes")?,
        None => (0..rank as i64).collect(),
    };
    axes.iter().map(|&a| axis(a, rank)).collect()
}

fn view(outputs: Vec<Tensor>) -> Inferred {
    Inferred {
        outputs,
        flops: 0.0,
        kernel: Kernel::None,
    }
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
        "Conv" => conv(node, inputs),
        "Gemm" => gemm(node, inputs),
        "MatMul" => matmul(inputs),
        "Relu" | "LeakyRelu" | "Sigmoid" | "Tanh" | "Gelu" | "Erf" | "Sqrt" | "Exp" | "Log"
        | "Neg" | "Abs" | "Reciprocal" | "Softplus" | "HardSigmoid" | "HardSwish" => {
            elementwise(&inputs[..1.min(inputs.len())], 1.0)
        }
        "Clip" => elementwise(&inputs[..1.min(inputs.len())], 1.0),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Where" => {
            let mut r = elementwise(inputs, 1.0)?;
            // Integer arithmetic on known values (shape computations).
            if let (Some(a), Some(b)) = (
                opt_input(inputs, 0).and_then(|t| t.value.clone()),
                opt_input(inputs, 1).and_then(|t| t.value.clone()),
            ) {
                if a.len() == b.len() || a.len() == 1 || b.len() == 1 {
                    let len = a.len().max(b.len());
                    let at = |v: &[i64], i: usize| v[if v.len() == 1 { 0 } else { i }];
                    let vals: Option<Vec<i64>> = (0..len)
                        .map(|i| {
                            let (x, y) = (at(&a, i), at(&b, i));
                            match op {
                                "Add" => x.checked_add(y),
                                "Sub" => x.checked_sub(y),
                                "Mul" => x.checked_mul(y),
                                "Div" => x.checked_div(y),
                                _ => None,
                            }
                        })
                        .collect();
                    if let Some(v) = vals {
                        r.outputs[0].value = Some(v);
                    }
                }
            }
            Ok(r)
        }
        "Softmax" | "LogSoftmax" => {
            let x = input(inputs, 0, "X")?;
            axis(attr_int(node, "axis", -1), x.dims.len().max(1))?;
            elementwise(&inputs[..1], 3.0)
        }
        "LayerNormalization" => {
            let x = input(inputs, 0, "X")?;
            let a = axis(attr_int(node, "axis", -1), x.dims.len())?;
            let mut r = elementwise(&inputs[..1], 5.0)?;
            r.kernel = memory_kernel(inputs, &r.outputs);
            // Optional Mean and InvStdDev outputs: one value per normalised row.
            let mut stat_dims = x.dims[..a].to_vec();
            stat_dims.extend(std::iter::repeat_n(1, x.dims.len() - a));
            for _ in 1..node.output.len() {
                r.outputs.push(Tensor::new(stat_dims.clone(), 4.0));
            }
            Ok(r)
        }
        "BatchNormalization" => {
            let mut r = elementwise(&inputs[..1.min(inputs.len())], 2.0)?;
            r.kernel = memory_kernel(inputs, &r.outputs);
            Ok(r)
        }
        "Dropout" => {
            // Inference: identity (and an all-true mask when asked for).
            let x = input(inputs, 0, "data")?;
            let mut outs = vec![x.clone()];
            if node.output.len() > 1 {
                outs.push(Tensor::new(x.dims.clone(), 1.0));
            }
            Ok(view(outs))
        }
        "Identity" => Ok(view(vec![input(inputs, 0, "input")?.clone()])),
        "Cast" => {
            let x = input(inputs, 0, "input")?;
            let to = attr_int(node, "to", 1) as i32;
            let bytes = super::elem_bytes(to)
                .ok_or_else(|| format!("cast to unsupported data type {to}"))?;
            let mut out = Tensor::new(x.dims.clone(), bytes);
            out.value = x.value.clone();
            let outputs = vec![out];
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "Shape" => {
            let x = input(inputs, 0, "data")?;
            let r = x.dims.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let start = clamp(attr_int(node, "start", 0));
            let end = clamp(attr_int(node, "end", r));
            let vals: Vec<i64> = x.dims[start..end.max(start)]
                .iter()
                .map(|&d| d as i64)
                .collect();
            Ok(view(vec![
                Tensor::new(vec![vals.len() as u64], 8.0).with_value(vals)
            ]))
        }
        "Constant" => {
            let a = node
                .attribute
                .first()
                .ok_or("attribute `value` is missing")?;
            let t = match a.name.as_deref() {
                Some("value") => {
                    super::tensor_of(a.t.as_ref().ok_or("attribute `value` has no tensor")?)?
                }
                Some("value_int") => Tensor::new(vec![], 8.0).with_value(vec![a.i.unwrap_or(0)]),
                Some("value_ints") => {
                    Tensor::new(vec![a.ints.len() as u64], 8.0).with_value(a.ints.clone())
                }
                Some("value_float") => Tensor::new(vec![], 4.0),
                Some("value_floats") => Tensor::new(vec![a.floats.len() as u64], 4.0),
                other => {
                    return Err(format!(
                        "attribute `{}` is not supported",
                        other.unwrap_or("")
                    ))
                }
            };
            Ok(view(vec![t]))
        }
        "Reshape" => {
            let x = input(inputs, 0, "data")?;
            let shape = const_ints(inputs, 1, "shape")?;
            let allow_zero = attr_int(node, "allowzero", 0) != 0;
            let mut dims = vec![];
            let mut infer_at = None;
            for (i, &s) in shape.iter().enumerate() {
                match s {
                    -1 if infer_at.is_none() => {
                        infer_at = Some(i);
                        dims.push(1);
                    }
                    0 if !allow_zero => {
                        dims.push(*x.dims.get(i).ok_or("shape 0 copies a missing dimension")?)
                    }
                    s if s >= 0 => dims.push(s as u64),
                    _ => return Err(format!("shape {shape:?} is not valid")),
                }
            }
            let known = checked_numel(&dims)?;
            if let Some(i) = infer_at {
                if known == 0 || x.numel() % known != 0 {
                    return Err(format!("cannot reshape {:?} to {shape:?}", x.dims));
                }
                dims[i] = x.numel() / known;
            } else if known != x.numel() {
                return Err(format!(
                    "cannot reshape {:?} ({} elements) to {shape:?}",
                    x.dims,
                    x.numel()
                ));
            }
            let mut out = Tensor::new(dims, x.elem_bytes);
            out.value = x.value.clone();
            Ok(view(vec![out]))
        }
        "Flatten" => {
            let x = input(inputs, 0, "input")?;
            let a = attr_int(node, "axis", 1);
            let a = if a == x.dims.len() as i64 {
                x.dims.len()
            } else {
                axis(a, x.dims.len())?
            };
            let rows: u64 = x.dims[..a].iter().product();
            Ok(view(vec![Tensor::new(
                vec![rows, x.numel() / rows.max(1)],
                x.elem_bytes,
            )]))
        }
        "Squeeze" | "Unsqueeze" => {
            let x = input(inputs, 0, "data")?;
            let axes = match attr_ints(node, "axes") {
                Some(a) => Some(a),
                None if opt_input(inputs, 1).is_some() => Some(const_ints(inputs, 1, "axes")?),
                None => None,
            };
            let dims = if op == "Squeeze" {
                match axes {
                    None => x.dims.iter().copied().filter(|&d| d != 1).collect(),
                    Some(a) => {
                        let drop: Vec<usize> =
                            a.iter().map(|&v| axis(v, x.dims.len())).collect::<R<_>>()?;
                        x.dims
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| !drop.contains(i))
                            .map(|(_, &d)| d)
                            .collect()
                    }
                }
            } else {
                let a = axes.ok_or("`axes` is missing")?;
                let rank = x.dims.len() + a.len();
                let add: Vec<usize> = a.iter().map(|&v| axis(v, rank)).collect::<R<_>>()?;
                let mut it = x.dims.iter();
                (0..rank)
                    .map(|i| {
                        if add.contains(&i) {
                            1
                        } else {
                            *it.next().unwrap_or(&1)
                        }
                    })
                    .collect()
            };
            let mut out = Tensor::new(dims, x.elem_bytes);
            out.value = x.value.clone();
            Ok(view(vec![out]))
        }
        "Transpose" => {
            let x = input(inputs, 0, "data")?;
            let r = x.dims.len();
            let perm = attr_ints(node, "perm").unwrap_or_else(|| (0..r as i64).rev().collect());
            let mut seen = vec![false; r];
            let mut dims = vec![];
            for &p in &perm {
                let a = axis(p, r)?;
                if std::mem::replace(&mut seen[a], true) {
                    return Err(format!("perm {perm:?} repeats axis {p}"));
                }
                dims.push(x.dims[a]);
            }
            if dims.len() != r {
                return Err(format!("perm {perm:?} does not match rank {r}"));
            }
            let outputs = vec![Tensor::new(dims, x.elem_bytes)];
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "Concat" => {
            let first = input(inputs, 0, "inputs")?;
            let a = axis(attr_int(node, "axis", 0), first.dims.len())?;
            let mut dims = first.dims.clone();
            dims[a] = 0;
            let mut values: Option<Vec<i64>> = Some(vec![]);
            for t in inputs.iter().flatten() {
                if t.dims.len() != dims.len()
                    || t.dims
                        .iter()
                        .enumerate()
                        .any(|(i, &d)| i != a && d != dims[i])
                {
                    return Err(format!(
                        "inputs {:?} and {:?} differ off axis {a}",
                        first.dims, t.dims
                    ));
                }
                dims[a] = add(dims[a], t.dims[a], "the concatenated axis")?;
                values = match (values, &t.value) {
                    (Some(mut v), Some(w)) => {
                        v.extend(w);
                        Some(v)
                    }
                    _ => None,
                };
            }
            let mut out = Tensor::new(dims, first.elem_bytes);
            out.value = values;
            let outputs = vec![out];
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "Split" => {
            let x = input(inputs, 0, "input")?;
            let a = axis(attr_int(node, "axis", 0), x.dims.len())?;
            let parts = node.output.len().max(1) as u64;
            let sizes: Vec<u64> = match attr_ints(node, "split") {
                Some(s) => s.iter().map(|&v| v.max(0) as u64).collect(),
                None if opt_input(inputs, 1).is_some() => const_ints(inputs, 1, "split")?
                    .iter()
                    .map(|&v| v.max(0) as u64)
                    .collect(),
                None => {
                    let each = x.dims[a].div_ceil(parts);
                    (0..parts)
                        .map(|i| each.min(x.dims[a].saturating_sub(i.saturating_mul(each))))
                        .collect()
                }
            };
            let total = sizes.iter().try_fold(0u64, |a, &b| a.checked_add(b));
            if total != Some(x.dims[a]) || sizes.len() != node.output.len() {
                return Err(format!(
                    "split {sizes:?} does not divide {} along axis {a}",
                    x.dims[a]
                ));
            }
            let outputs: Vec<Tensor> = sizes
                .iter()
                .map(|&s| {
                    let mut d = x.dims.clone();
                    d[a] = s;
                    Tensor::new(d, x.elem_bytes)
                })
                .collect();
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "Slice" => {
            let x = input(inputs, 0, "data")?;
            let starts = const_ints(inputs, 1, "starts")?;
            let ends = const_ints(inputs, 2, "ends")?;
            let r = x.dims.len();
            let axes = match opt_input(inputs, 3) {
                Some(_) => const_ints(inputs, 3, "axes")?,
                None => (0..starts.len() as i64).collect(),
            };
            let steps = match opt_input(inputs, 4) {
                Some(_) => const_ints(inputs, 4, "steps")?,
                None => vec![1; starts.len()],
            };
            if ends.len() != starts.len()
                || axes.len() != starts.len()
                || steps.len() != starts.len()
            {
                return Err("starts, ends, axes and steps differ in length".into());
            }
            let mut dims = x.dims.clone();
            let mut value = x.value.clone();
            for i in 0..starts.len() {
                let a = axis(axes[i], r)?;
                // In i128: starts, ends and steps are any i64 (i64::MIN negated overflows).
                let size = x.dims[a] as i128;
                let step = steps[i] as i128;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                let clamp = |v: i64, lo: i128, hi: i128| {
                    let v = v as i128;
                    (if v < 0 { v + size } else { v }).clamp(lo, hi)
                };
                let count = if step > 0 {
                    let (s, e) = (clamp(starts[i], 0, size), clamp(ends[i], 0, size));
                    if e > s {
                        (e - s + step - 1) / step
                    } else {
                        0
                    }
                } else {
                    let (s, e) = (clamp(starts[i], -1, size - 1), clamp(ends[i], -1, size - 1));
                    if s > e {
                        (s - e + (-step) - 1) / (-step)
                    } else {
                        0
                    }
                };
                dims[a] = count as u64;
                if r == 1 && step == 1 {
                    let s = clamp(starts[i], 0, size) as usize;
                    value = value.and_then(|v| v.get(s..s + count as usize).map(<[i64]>::to_vec));
                } else {
                    value = None;
                }
            }
            let mut out = Tensor::new(dims, x.elem_bytes);
            out.value = value;
            let outputs = vec![out];
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "Gather" => {
            let x = input(inputs, 0, "data")?;
            let idx = input(inputs, 1, "indices")?;
            let a = axis(attr_int(node, "axis", 0), x.dims.len())?;
            let mut dims = x.dims[..a].to_vec();
            dims.extend(&idx.dims);
            dims.extend(&x.dims[a + 1..]);
            let mut out = Tensor::new(dims, x.elem_bytes);
            if let (Some(v), Some(i), 1) = (&x.value, &idx.value, x.dims.len()) {
                let n = v.len() as i64;
                out.value = i
                    .iter()
                    .map(|&k| v.get((if k < 0 { k + n } else { k }) as usize).copied())
                    .collect();
            }
            let outputs = vec![out];
            Ok(Inferred {
                kernel: memory_kernel(&inputs[1..], &outputs),
                outputs,
                flops: 0.0,
            })
        }
        "MaxPool" | "AveragePool" => pool(node, inputs),
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = input(inputs, 0, "X")?;
            if x.dims.len() < 3 {
                return Err(format!("input {:?} has no spatial axes", x.dims));
            }
            let mut dims = x.dims[..2].to_vec();
            dims.extend(std::iter::repeat_n(1, x.dims.len() - 2));
            let outputs = vec![Tensor::new(dims, x.elem_bytes)];
            Ok(Inferred {
                kernel: memory_kernel(inputs, &outputs),
                outputs,
                flops: x.numel() as f64,
            })
        }
        "ReduceMean" | "ReduceSum" => {
            let x = input(inputs, 0, "data")?;
            let axes = reduce_axes(node, inputs, x.dims.len())?;
            let keep = attr_int(node, "keepdims", 1) != 0;
            let dims: Vec<u64> = x
                .dims
                .iter()
                .enumerate()
                .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
                    (true, true) => Some(1),
                    (true, false) => None,
                    (false, _) => Some(d),
                })
                .collect();
            let outputs = vec![Tensor::new(dims, x.elem_bytes)];
            Ok(Inferred {
                kernel: memory_kernel(&inputs[..1], &outputs),
                outputs,
                flops: x.numel() as f64,
            })
        }
        _ => Err(format!("operator `{op}` is not supported")),
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
