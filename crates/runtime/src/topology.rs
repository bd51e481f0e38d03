//! Where each worker sits: world rank ↔ (data, tensor, pipeline) coordinates, in the rank
//! order of `plait_spec::Mesh` (the one the cost model places its groups by).

use plait_spec::{Dim, Mesh, MeshCoords};
use serde::{Deserialize, Serialize};

/// The parallel degrees of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub dp: usize,
    pub tp: usize,
    pub pp: usize,
}

/// One rank's coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coords {
    pub dp: usize,
    pub tp: usize,
    pub pp: usize,
}

impl Topology {
    pub fn world(&self) -> usize {
        self.mesh().world() as usize
    }

    /// The mesh of this run (no context parallelism in the runtime).
    pub fn mesh(&self) -> Mesh {
        Mesh {
            tp: self.tp as u64,
            cp: 1,
            dp: self.dp as u64,
            pp: self.pp as u64,
        }
    }

    pub fn coords(&self, rank: usize) -> Coords {
        let c = self.mesh().coords(rank as u64);
        Coords {
            tp: c.tp as usize,
            dp: c.dp as usize,
            pp: c.pp as usize,
        }
    }

    pub fn rank(&self, c: Coords) -> usize {
        self.mesh().rank(MeshCoords {
            tp: c.tp as u64,
            cp: 0,
            dp: c.dp as u64,
            pp: c.pp as u64,
        }) as usize
    }

    fn group(&self, d: Dim, rank: usize) -> Vec<usize> {
        self.mesh()
            .group(d, rank as u64)
            .into_iter()
            .map(|r| r as usize)
            .collect()
    }

    /// World ranks of `rank`'s tensor-parallel group, in group-rank order.
    pub fn tp_group(&self, rank: usize) -> Vec<usize> {
        self.group(Dim::Tp, rank)
    }

    /// World ranks of `rank`'s data-parallel group.
    pub fn dp_group(&self, rank: usize) -> Vec<usize> {
        self.group(Dim::Dp, rank)
    }

    /// World ranks of `rank`'s pipeline: group rank r holds pipeline rank r.
    pub fn pp_group(&self, rank: usize) -> Vec<usize> {
        self.group(Dim::Pp, rank)
    }

    /// The first and last pipeline ranks of `rank`'s pipeline (the tied-embedding group).
    pub fn embedding_group(&self, rank: usize) -> Vec<usize> {
        let c = self.coords(rank);
        vec![
            self.rank(Coords { pp: 0, ..c }),
            self.rank(Coords {
                pp: self.pp - 1,
                ..c
            }),
        ]
    }
}

impl std::fmt::Display for Coords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dp {}, tp {}, pp {}", self.dp, self.tp, self.pp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatron_order_round_trips() {
        let t = Topology {
            dp: 2,
            tp: 2,
            pp: 2,
        };
        assert_eq!(
            t.coords(5),
            Coords {
                tp: 1,
                dp: 0,
                pp: 1
            }
        );
        for r in 0..t.world() {
            assert_eq!(t.rank(t.coords(r)), r);
        }
        assert_eq!(t.tp_group(5), vec![4, 5]);
        assert_eq!(t.dp_group(5), vec![5, 7]);
        assert_eq!(t.pp_group(5), vec![1, 5]);
        assert_eq!(t.embedding_group(3), vec![3, 7]);
    }
}
