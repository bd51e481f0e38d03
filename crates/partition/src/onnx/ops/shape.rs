//! Views, metadata and constants: Dropout (inference identity), Identity, Cast, Shape,
//! Constant, Reshape, Flatten, Squeeze and Unsqueeze. Their known integer contents flow on,
//! so that `Shape → Gather → Concat → Reshape` chains resolve; no FLOPs, and no kernel
//! except Cast's copy.
//!
//! Knows these operators' semantics only; not devices or partitions.

use super::super::proto::NodeProto;
use super::common::{attr_int, attr_ints, axis, const_ints, input, memory_kernel, opt_input, view};
use super::{checked_numel, Inferred, Tensor, R};

/// Dropout at inference.
pub(super) fn dropout(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    // Inference: identity (and an all-true mask when asked for).
    let x = input(inputs, 0, "data")?;
    let mut outs = vec![x.clone()];
    if node.output.len() > 1 {
        outs.push(Tensor::new(x.dims.clone(), 1.0));
    }
    Ok(view(outs))
}

/// Identity.
pub(super) fn identity(inputs: &[Option<Tensor>]) -> R<Inferred> {
    Ok(view(vec![input(inputs, 0, "input")?.clone()]))
}

/// Cast.
pub(super) fn cast(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
    let x = input(inputs, 0, "input")?;
    let to = attr_int(node, "to", 1) as i32;
    let bytes =
        crate::onnx::elem_bytes(to).ok_or_else(|| format!("cast to unsupported data type {to}"))?;
    let mut out = Tensor::new(x.dims.clone(), bytes);
    out.value = x.value.clone();
    let outputs = vec![out];
    Ok(Inferred {
        kernel: memory_kernel(inputs, &outputs),
        outputs,
        flops: 0.0,
    })
}

/// Shape (with `start`/`end`).
pub(super) fn shape(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Constant.
pub(super) fn constant(node: &NodeProto) -> R<Inferred> {
    let a = node
        .attribute
        .first()
        .ok_or("attribute `value` is missing")?;
    let t = match a.name.as_deref() {
        Some("value") => {
            crate::onnx::tensor_of(a.t.as_ref().ok_or("attribute `value` has no tensor")?)?
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

/// Reshape.
pub(super) fn reshape(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Flatten.
pub(super) fn flatten(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Squeeze and Unsqueeze.
pub(super) fn squeeze_unsqueeze(
    op: &str,
    node: &NodeProto,
    inputs: &[Option<Tensor>],
) -> R<Inferred> {
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
