//! Optimal contiguous partition of computation DAGs into pipeline stages.
//!
//! A [`Graph`] (from a placement-graph JSON of Tarnawski et al., or imported from an ONNX
//! model with latencies from plait's cost model) is split into at most `k` accelerator
//! stages and `c` CPU stages, each a contiguous set of nodes (a difference of two
//! down-closed sets), under a memory limit per accelerator and with colour classes kept
//! together, minimising the largest stage load (compute plus boundary communication).
//!
//! * [`graph`] — nodes, edges, structural checks.
//! * [`placement`] — the placement-graph JSON reader.
//! * [`onnx`] — ONNX protobuf import: shapes, FLOPs, bytes, parameters, latencies.
//! * `units` — contraction into units (colour classes, fused cycles) in topological order.
//! * `lattice` — the ideal lattice, capped at [`MAX_IDEALS`].
//! * `exact` — the dynamic program over ideals with bound pruning (optimal).
//! * `linear` — the heuristic for large lattices and the lower bound reported with it.
//! * `coarse` — graphs above [`COARSEN_ABOVE`] units: merged into about
//!   [`TARGET_SUPER_UNITS`] super-units, split, then refined on the units (the answer's
//!   [`Coarsening`] says what is known of it).
//! * [`synthetic`] — generated chains and random DAGs of any size (tests, benches, examples).
//! * [`solve`] — [`partition`]: picks the method, evaluates stages, reports infeasibility.
//!
//! Pure and deterministic: no I/O (files arrive as text or bytes), no clock, no randomness;
//! the same graph and limits give the same partition whatever the thread count.

mod coarse;
pub mod error;
mod exact;
pub mod graph;
mod lattice;
mod linear;
pub mod onnx;
pub mod placement;
mod segment;
pub mod solve;
pub mod synthetic;
mod units;

pub use coarse::{COARSEN_ABOVE, COARSE_MAX_IDEALS, TARGET_SUPER_UNITS};
pub use error::{PartitionError, Result};
pub use graph::{Edge, Graph, Node};
pub use solve::{
    partition, Coarsening, DeviceKind, Limits, Method, Partition, Stage, MAX_IDEALS,
    MAX_IDEALS_LIMIT, MAX_TABLE_CELLS,
};
