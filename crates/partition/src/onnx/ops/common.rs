//! What every operator family shares: overflow-checked arithmetic that names what
//! overflowed, attribute and input access, constant integer inputs, axis normalisation,
//! numpy broadcasting, the memory-bound kernel of a node and the no-kernel view.
//!
//! Knows no operator: which attributes an operator reads belongs to its family module.

use super::super::proto::{AttributeProto, NodeProto};
use super::{Inferred, Kernel, Tensor, R};

/// `a × b`, or an error naming `what` when it overflows.
pub(super) fn mul(a: u64, b: u64, what: &str) -> R<u64> {
    a.checked_mul(b)
        .ok_or_else(|| format!("{what} ({a} × {b}) overflows"))
}

/// `a + b`, or an error naming `what` when it overflows.
pub(super) fn add(a: u64, b: u64, what: &str) -> R<u64> {
    a.checked_add(b)
        .ok_or_else(|| format!("{what} ({a} + {b}) overflows"))
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

pub(super) fn attr_int(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).and_then(|a| a.i).unwrap_or(default)
}

pub(super) fn attr_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

pub(super) fn attr_str(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name)
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).into_owned())
}

pub(super) fn input<'a>(inputs: &'a [Option<Tensor>], i: usize, what: &str) -> R<&'a Tensor> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("input {i} ({what}) is missing"))
}

pub(super) fn opt_input(inputs: &[Option<Tensor>], i: usize) -> Option<&Tensor> {
    inputs.get(i).and_then(Option::as_ref)
}

/// A constant integer input, e.g. the `shape` of Reshape.
pub(super) fn const_ints(inputs: &[Option<Tensor>], i: usize, what: &str) -> R<Vec<i64>> {
    input(inputs, i, what)?.value.clone().ok_or_else(|| {
        format!("input {i} ({what}) is not a constant, so the output shape is unknown")
    })
}

/// Normalises a possibly negative axis against `rank`.
pub(super) fn axis(a: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let x = if a < 0 { a + r } else { a };
    if (0..r).contains(&x) {
        Ok(x as usize)
    } else {
        Err(format!("axis {a} is outside a rank-{rank} tensor"))
    }
}

/// Numpy broadcasting of several shapes.
pub(super) fn broadcast(shapes: &[&[u64]]) -> R<Vec<u64>> {
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

pub(super) fn memory_kernel(inputs: &[Option<Tensor>], outputs: &[Tensor]) -> Kernel {
    let read: f64 = inputs.iter().flatten().map(Tensor::bytes).sum();
    let write: f64 = outputs.iter().map(Tensor::bytes).sum();
    Kernel::Memory {
        bytes: read + write,
    }
}

pub(super) fn view(outputs: Vec<Tensor>) -> Inferred {
    Inferred {
        outputs,
        flops: 0.0,
        kernel: Kernel::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&[&[8, 1, 6], &[7, 1]]).unwrap(), vec![8, 7, 6]);
        assert!(broadcast(&[&[3], &[4]]).is_err());
    }
}
