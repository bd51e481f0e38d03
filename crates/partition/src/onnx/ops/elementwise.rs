//! Elementwise operators: unary activations and Clip (1 FLOP per element), binary
//! arithmetic with numpy broadcasting (and integer arithmetic on known values, for shape
//! computations), Softmax/LogSoftmax (3 per element), LayerNormalization (5, with its
//! optional statistics outputs) and BatchNormalization (2); all memory-bound kernels.
//!
//! Knows these operators' semantics only; not devices or partitions.

use super::super::proto::NodeProto;
use super::common::{attr_int, axis, broadcast, input, memory_kernel, opt_input};
use super::{Inferred, Tensor, R};

pub(super) fn elementwise(inputs: &[Option<Tensor>], flops_per_element: f64) -> R<Inferred> {
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

/// Add, Sub, Mul, Div, Pow, Max, Min, Where.
pub(super) fn binary(op: &str, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Softmax and LogSoftmax.
pub(super) fn softmax(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let x = input(inputs, 0, "X")?;
    axis(attr_int(node, "axis", -1), x.dims.len().max(1))?;
    elementwise(&inputs[..1], 3.0)
}

/// LayerNormalization.
pub(super) fn layer_norm(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// BatchNormalization (inference: scale and shift).
pub(super) fn batch_norm(inputs: &[Option<Tensor>]) -> R<Inferred> {
    let mut r = elementwise(&inputs[..1.min(inputs.len())], 2.0)?;
    r.kernel = memory_kernel(inputs, &r.outputs);
    Ok(r)
}
