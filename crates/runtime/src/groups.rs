//! One rank's communicators: its tensor-, data- and pipeline-parallel groups.

use std::sync::Arc;

use crate::comm::{Communicator, World};
use crate::error::RuntimeError;
use crate::topology::{Coords, Topology};

type Result<T> = std::result::Result<T, RuntimeError>;

/// The communicators of one rank.
pub struct Groups {
    pub topology: Topology,
    pub rank: usize,
    pub coords: Coords,
    pub world: Arc<dyn Communicator>,
    pub dp: Arc<dyn Communicator>,
    pub tp: Option<Arc<dyn Communicator>>,
    pub pp: Arc<dyn Communicator>,
    /// First and last pipeline ranks, when they hold copies of a tied embedding.
    pub embedding: Option<Arc<dyn Communicator>>,
    /// The model ties its embedding and is pipelined: the first and last stages hold
    /// copies whose gradients are summed.
    pub tied_pipeline: bool,
    /// Both copies are this rank's (a V places the last stage beside the first): their
    /// gradients are summed here, without a communicator.
    pub tied_local: bool,
    /// The two tensor-parallel groups of sub-pipelined tensor parallelism (one per half).
    pub tp_halves: Option<[Arc<dyn Communicator>; 2]>,
}

impl Groups {
    pub(crate) fn new(
        world: &World,
        t: Topology,
        rank: usize,
        tied: bool,
        ends_together: bool,
        halves: bool,
    ) -> Result<Groups> {
        let all: Vec<usize> = (0..t.world()).collect();
        let arc = |c: crate::comm::InProcessComm| -> Arc<dyn Communicator> { Arc::new(c) };
        let tied_pipeline = tied && t.pp > 1;
        let coords = t.coords(rank);
        let tied_local = tied_pipeline && ends_together && coords.pp == 0;
        let embedding =
            if tied_pipeline && !ends_together && (coords.pp == 0 || coords.pp + 1 == t.pp) {
                Some(arc(world.group(
                    "embedding",
                    &t.embedding_group(rank),
                    rank,
                )?))
            } else {
                None
            };
        Ok(Groups {
            topology: t,
            rank,
            coords,
            world: arc(world.group("world", &all, rank)?),
            dp: arc(world.group("dp", &t.dp_group(rank), rank)?),
            tp: if t.tp > 1 {
                Some(arc(world.group("tp", &t.tp_group(rank), rank)?))
            } else {
                None
            },
            pp: arc(world.group("pp", &t.pp_group(rank), rank)?),
            embedding,
            tied_pipeline,
            tied_local,
            tp_halves: if halves && t.tp > 1 {
                Some([
                    arc(world.group("tp.half0", &t.tp_group(rank), rank)?),
                    arc(world.group("tp.half1", &t.tp_group(rank), rank)?),
                ])
            } else {
                None
            },
        })
    }
}
