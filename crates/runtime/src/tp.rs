//! Tensor-parallel communication as differentiable operations (Megatron-LM's f/g operators,
//! Shoeybi et al. 2019, §3, and the sequence-parallel pair of Korthikanti et al. 2022, §4.2):
//!
//! | op               | forward                 | backward                |
//! |------------------|-------------------------|-------------------------|
//! | `copy`   (f)     | identity                | all-reduce              |
//! | `reduce` (g)     | all-reduce              | identity                |
//! | `gather_seq`     | all-gather along seq    | reduce-scatter along seq|
//! | `scatter_seq`    | reduce-scatter along seq| all-gather along seq    |
//!
//! They are candle custom operations, so candle's autograd runs the backward collectives in
//! its own (deterministic) order; every tensor-parallel rank builds the same graph and so
//! calls the same collectives in the same order. Tensors are `[batch, seq, rest…]`.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use crate::comm::{Communicator, ReduceOp};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Copy,
    Reduce,
    GatherSeq,
    ScatterSeq,
}

/// One tensor-parallel operation on one rank.
struct TpOp {
    comm: Arc<dyn Communicator>,
    kind: Kind,
}

fn msg(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// `[b, s, r]` (sizes of dims 0, 1 and the product of the rest) of a shape.
fn bsr(shape: &Shape) -> candle_core::Result<(usize, usize, usize)> {
    let d = shape.dims();
    if d.len() < 2 {
        return Err(msg(format!(
            "sequence-parallel op needs [batch, seq, ...], got {d:?}"
        )));
    }
    Ok((d[0], d[1], d[2..].iter().product()))
}

/// Rank-ordered pieces `[t][b][s][r]` → `[b][t·s][r]`.
fn interleave(pieces: &[f32], t: usize, b: usize, s: usize, r: usize) -> Vec<f32> {
    let mut out = vec![0.0; pieces.len()];
    for k in 0..t {
        for bi in 0..b {
            let src = ((k * b + bi) * s) * r;
            let dst = (bi * t * s + k * s) * r;
            out[dst..dst + s * r].copy_from_slice(&pieces[src..src + s * r]);
        }
    }
    out
}

/// `[b][t·s][r]` → rank-ordered pieces `[t][b][s][r]`.
fn deinterleave(full: &[f32], t: usize, b: usize, s: usize, r: usize) -> Vec<f32> {
    let mut out = vec![0.0; full.len()];
    for k in 0..t {
        for bi in 0..b {
            let dst = ((k * b + bi) * s) * r;
            let src = (bi * t * s + k * s) * r;
            out[dst..dst + s * r].copy_from_slice(&full[src..src + s * r]);
        }
    }
    out
}

impl TpOp {
    fn run(&self, data: &[f32], shape: &Shape) -> candle_core::Result<(Vec<f32>, Shape)> {
        let t = self.comm.size();
        match self.kind {
            Kind::Copy => Ok((data.to_vec(), shape.clone())),
            Kind::Reduce => {
                let mut buf = data.to_vec();
                self.comm.all_reduce(&mut buf, ReduceOp::Sum).map_err(msg)?;
                Ok((buf, shape.clone()))
            }
            Kind::GatherSeq => {
                let (b, s, r) = bsr(shape)?;
                let all = self.comm.all_gather(data).map_err(msg)?;
                let mut dims = shape.dims().to_vec();
                dims[1] = s * t;
                Ok((interleave(&all, t, b, s, r), Shape::from(dims)))
            }
            Kind::ScatterSeq => {
                let (b, s, r) = bsr(shape)?;
                if s % t != 0 {
                    return Err(msg(format!(
                        "sequence of {s} does not split over {t} tensor-parallel ranks"
                    )));
                }
                let pieces = deinterleave(data, t, b, s / t, r);
                let mine = self.comm.reduce_scatter(&pieces).map_err(msg)?;
                let mut dims = shape.dims().to_vec();
                dims[1] = s / t;
                Ok((mine, Shape::from(dims)))
            }
        }
    }
}

impl CustomOp1 for TpOp {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Copy => "tp-copy",
            Kind::Reduce => "tp-reduce",
            Kind::GatherSeq => "tp-gather-seq",
            Kind::ScatterSeq => "tp-scatter-seq",
        }
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let data = storage.as_slice::<f32>()?;
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| msg(format!("{} needs a contiguous tensor", self.name())))?;
        let (out, shape) = self.run(&data[start..end], layout.shape())?;
        Ok((CpuStorage::F32(out), shape))
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let adjoint = match self.kind {
            Kind::Copy => Kind::Reduce,
            Kind::Reduce => return Ok(Some(grad.clone())),
            Kind::GatherSeq => Kind::ScatterSeq,
            Kind::ScatterSeq => Kind::GatherSeq,
        };
        let op = TpOp {
            comm: self.comm.clone(),
            kind: adjoint,
        };
        grad.contiguous()?.apply_op1_no_bwd(&op).map(Some)
    }
}

/// The tensor-parallel group of one rank (absent when tp = 1) and whether sequence
/// parallelism is on.
#[derive(Clone)]
pub struct TpGroup {
    pub comm: Option<Arc<dyn Communicator>>,
    pub rank: usize,
    pub size: usize,
    pub sp: bool,
}

impl TpGroup {
    pub fn single() -> TpGroup {
        TpGroup {
            comm: None,
            rank: 0,
            size: 1,
            sp: false,
        }
    }

    fn apply(&self, x: &Tensor, kind: Kind) -> candle_core::Result<Tensor> {
        match &self.comm {
            Some(comm) if self.size > 1 => x.contiguous()?.apply_op1(TpOp {
                comm: comm.clone(),
                kind,
            }),
            _ => Ok(x.clone()),
        }
    }

    /// Entering a tensor-parallel region: `f` (or the sequence all-gather with sp).
    pub fn enter(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.apply(x, if self.sp { Kind::GatherSeq } else { Kind::Copy })
    }

    /// Leaving a tensor-parallel region: `g` (or the sequence reduce-scatter with sp).
    pub fn leave(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.apply(
            x,
            if self.sp {
                Kind::ScatterSeq
            } else {
                Kind::Reduce
            },
        )
    }

    /// All-reduce in the forward, identity in the backward (whatever sp says).
    pub fn reduce(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.apply(x, Kind::Reduce)
    }

    /// Element-wise maximum over the group, outside autograd.
    pub fn max(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match &self.comm {
            Some(comm) if self.size > 1 => {
                let mut buf = x.flatten_all()?.to_vec1::<f32>()?;
                comm.all_reduce(&mut buf, ReduceOp::Max).map_err(msg)?;
                Tensor::from_vec(buf, x.shape(), x.device())
            }
            _ => Ok(x.detach()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_inverts_deinterleave() {
        let (t, b, s, r) = (2, 3, 2, 4);
        let full: Vec<f32> = (0..t * b * s * r).map(|x| x as f32).collect();
        let pieces = deinterleave(&full, t, b, s, r);
        // Piece 0 holds the first half of each sequence: batch 0, positions 0..2.
        assert_eq!(&pieces[..8], &full[..8]);
        assert_eq!(interleave(&pieces, t, b, s, r), full);
    }
}
