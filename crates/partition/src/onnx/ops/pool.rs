//! Windows and reductions: the output geometry of a windowed op (shared with Conv), MaxPool
//! and AveragePool (kernel size per output element), global pooling and ReduceMean/ReduceSum
//! (1 per input element); all memory-bound kernels.
//!
//! Knows these operators' semantics only; not devices or partitions.

use super::super::proto::NodeProto;
use super::common::{
    add, attr_int, attr_ints, attr_str, axis, const_ints, input, memory_kernel, mul, opt_input,
};
use super::{checked_numel, Inferred, Tensor, R};

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
pub(super) fn spatial(node: &NodeProto, x: &[u64], kernel: &[u64]) -> R<Vec<u64>> {
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

pub(super) fn pool(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// GlobalAveragePool and GlobalMaxPool.
pub(super) fn global_pool(inputs: &[Option<Tensor>]) -> R<Inferred> {
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

/// ReduceMean and ReduceSum.
pub(super) fn reduce(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_sizes() {
        // 32 wide, kernel 3, stride 1, padding 1+1: 32; kernel 2, stride 2: 16.
        assert_eq!(window_out(32, 3, 1, 1, 2, false).unwrap(), 32);
        assert_eq!(window_out(32, 2, 2, 1, 0, false).unwrap(), 16);
        // ceil mode: (5 - 2) / 2 + 1 = 2 floor, 3 ceil.
        assert_eq!(window_out(5, 2, 2, 1, 0, true).unwrap(), 3);
    }
}
