//! `plait-place`: optimal placement of a chain of layers over heterogeneous devices joined
//! by arbitrary links (pipelined inference across edge devices and the cloud).
//!
//! * [`problem`] — the explicit-cost chain (`plait place --graph` JSON) and its checks;
//! * [`solve`] — the exact solver ([`place`]) for the latency and throughput objectives,
//!   with a latency SLO, and [`evaluate`] for any given placement;
//! * [`devices`] — device sets: parts with their public sources, the TOML format, links;
//! * [`model`] — a transformer's prefill and decode on a roofline as a [`Problem`];
//! * [`render`] — the SVG of a placement's pipelined timeline;
//! * [`synth`] — deterministic synthetic instances for tests and benchmarks.
//!
//! No I/O (text in, values out), no clock, no threads: same input, same answer.

pub mod devices;
pub mod model;
pub mod problem;
pub mod render;
pub mod solve;
pub mod synth;

pub use devices::{device_set_from_toml, part_preset, DeviceSet, Part, Precision, PART_PRESETS};
pub use model::{Phase, Workload};
pub use problem::{Device, Layer, Link, Problem};
pub use solve::{evaluate, place, Objective, Options, Placement, SearchStats, Stage};
