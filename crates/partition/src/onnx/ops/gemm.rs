//! The GEMM-like operators: Conv (as an implicit GEMM, per group), Gemm and MatMul (with
//! batch broadcasting; a weight shared by every batch row runs as one tall GEMM), with 2
//! FLOPs per multiply-accumulate plus 1 per output element for a bias.
//!
//! Knows these operators' semantics only; not devices or partitions.

use super::super::proto::NodeProto;
use super::common::{attr_int, broadcast, input, mul, opt_input};
use super::pool::spatial;
use super::{checked_numel, Inferred, Kernel, Tensor, R};

pub(super) fn conv(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

pub(super) fn gemm(node: &NodeProto, inputs: &[Option<Tensor>]) -> R<Inferred> {
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

pub(super) fn matmul(inputs: &[Option<Tensor>]) -> R<Inferred> {
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
