//! `plait-place`: optimal placement of a chain of layers over heterogeneous devices joined
//! by arbitrary links (pipelined inference across edge devices and the cloud).
//!
//! * [`problem`] — the explicit-cost chain (`plait place --graph` JSON) and its checks;
//! * [`solve`] — the exact solver ([`place`]) for the latency and throughput objectives,
//!   with a latency SLO, and [`evaluate`] for any given placement;
//!
//! No I/O (text in, values out), no clock, no threads: same input, same answer.

pub mod problem;
pub mod solve;

pub use problem::{Device, Layer, Link, Problem};
pub use solve::{evaluate, place, Objective, Options, Placement, SearchStats, Stage};
