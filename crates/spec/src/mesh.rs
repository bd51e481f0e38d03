//! The device mesh: parallel degrees and the rank order, in one place (as Megatron-Core's
//! `RankGenerator` and torchtitan's `ParallelDims` are). Ranks run tensor parallel fastest,
//! then context parallel, then data parallel, then pipeline stages (Megatron-LM's order,
//! `order="tp-cp-ep-dp-pp"`); the expert layers order the same tp × cp × dp ranks as
//! expert-tp (tp unless `ParallelConfig::etp` sets it), ep, expert-dp. The cost model places its groups by [`Mesh::stride`]; the runtime maps ranks to
//! coordinates by [`Mesh::coords`].

use serde::{Deserialize, Serialize};

/// A mesh dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dim {
    Tp,
    Cp,
    Dp,
    Pp,
}

impl Dim {
    /// Fastest-varying first.
    pub const ORDER: [Dim; 4] = [Dim::Tp, Dim::Cp, Dim::Dp, Dim::Pp];

    /// The dimension's short name, as flags, plan strings and torch mesh names spell it.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Tp => "tp",
            Dim::Cp => "cp",
            Dim::Dp => "dp",
            Dim::Pp => "pp",
        }
    }
}

/// The mesh as `torch.distributed.device_mesh.init_device_mesh` takes it: dimension names
/// and sizes outermost first, so that (row-major) the last varies fastest and the ranks come
/// out in [`Dim::ORDER`]. `plait.torch` builds its mesh from this, not from an order of its
/// own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceMeshShape {
    pub dims: Vec<&'static str>,
    pub shape: Vec<u64>,
}

/// Degrees of the four mesh dimensions (expert parallelism is carved out of dp × cp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mesh {
    pub tp: u64,
    pub cp: u64,
    pub dp: u64,
    pub pp: u64,
}

/// One rank's coordinates on the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MeshCoords {
    pub tp: u64,
    pub cp: u64,
    pub dp: u64,
    pub pp: u64,
}

impl Mesh {
    pub fn degree(&self, d: Dim) -> u64 {
        match d {
            Dim::Tp => self.tp,
            Dim::Cp => self.cp,
            Dim::Dp => self.dp,
            Dim::Pp => self.pp,
        }
    }

    /// Ranks in the mesh.
    /// Saturates rather than wraps: a mesh beyond 2^64 ranks is refused by the checks.
    pub fn world(&self) -> u64 {
        Dim::ORDER
            .iter()
            .fold(1, |n: u64, &d| n.saturating_mul(self.degree(d)))
    }

    /// Distance in world ranks between neighbours along `d`: the product of the degrees of
    /// the faster dimensions.
    pub fn stride(&self, d: Dim) -> u64 {
        Dim::ORDER
            .iter()
            .take_while(|&&x| x != d)
            .map(|&x| self.degree(x))
            .product()
    }

    /// Names and sizes outermost first, for torch's `init_device_mesh`.
    pub fn device_mesh(&self) -> DeviceMeshShape {
        let outermost_first = Dim::ORDER.iter().rev();
        DeviceMeshShape {
            dims: outermost_first.clone().map(|d| d.name()).collect(),
            shape: outermost_first.map(|&d| self.degree(d)).collect(),
        }
    }

    /// The coordinates of world rank `rank`.
    pub fn coords(&self, rank: u64) -> MeshCoords {
        let at = |d: Dim| (rank / self.stride(d)) % self.degree(d).max(1);
        MeshCoords {
            tp: at(Dim::Tp),
            cp: at(Dim::Cp),
            dp: at(Dim::Dp),
            pp: at(Dim::Pp),
        }
    }

    /// The world rank at `c`.
    pub fn rank(&self, c: MeshCoords) -> u64 {
        Dim::ORDER.iter().map(|&d| c.get(d) * self.stride(d)).sum()
    }

    /// World ranks of the group along `d` through `rank`, in group-rank order.
    pub fn group(&self, d: Dim, rank: u64) -> Vec<u64> {
        let base = rank - self.coords(rank).get(d) * self.stride(d);
        (0..self.degree(d))
            .map(|i| base + i * self.stride(d))
            .collect()
    }
}

impl MeshCoords {
    pub fn get(&self, d: Dim) -> u64 {
        match d {
            Dim::Tp => self.tp,
            Dim::Cp => self.cp,
            Dim::Dp => self.dp,
            Dim::Pp => self.pp,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_round_trip_in_megatron_order() {
        let m = Mesh {
            tp: 2,
            cp: 2,
            dp: 3,
            pp: 2,
        };
        assert_eq!(m.world(), 24);
        assert_eq!(
            (
                m.stride(Dim::Tp),
                m.stride(Dim::Cp),
                m.stride(Dim::Dp),
                m.stride(Dim::Pp)
            ),
            (1, 2, 4, 12)
        );
        for r in 0..m.world() {
            assert_eq!(m.rank(m.coords(r)), r);
        }
        // torch's row-major mesh of this shape numbers ranks the same way.
        let d = m.device_mesh();
        assert_eq!(
            (d.dims, d.shape),
            (vec!["pp", "dp", "cp", "tp"], vec![2, 3, 2, 2])
        );
        // Rank 13 = pp 1, dp 0, cp 0, tp 1.
        assert_eq!(
            m.coords(13),
            MeshCoords {
                tp: 1,
                cp: 0,
                dp: 0,
                pp: 1
            }
        );
        assert_eq!(m.group(Dim::Dp, 13), vec![13, 17, 21]);
        assert_eq!(m.group(Dim::Tp, 13), vec![12, 13]);
        assert_eq!(m.group(Dim::Pp, 1), vec![1, 13]);
    }
}
