//! Data movement that copies: Transpose, Concat, Split, Slice and Gather (known integer
//! contents of Concat, 1-D Slice and Gather flow on); no FLOPs, memory-bound kernels.
//!
//! Knows these operators' semantics only; not devices or partitions.

use super::super::proto::NodeProto;
use super::common::{add, attr_int, attr_ints, axis, const_ints, input, memory_kernel, opt_input};
use super::{Inferred, Tensor, R};

/// Transpose.
pub(super) fn transpose(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Concat.
pub(super) fn concat(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Split.
pub(super) fn split(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// Slice.
pub(super) fn slice(inputs: &[Option<Tensor>]) -> R<Inferred> {
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
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
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

/// Gather.
pub(super) fn gather(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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
