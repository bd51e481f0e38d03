//! plait's cost model: how long one training iteration takes and how much memory each GPU
//! needs, for a model, a cluster, a batch and one parallel configuration.
//!
//! Pure and deterministic: no I/O, no global state, no randomness. Profiles arrive as text
//! and are parsed here; reading files is the caller's job.
//!
//! * [`device`] — one GPU: GEMM, memory-bound and attention kernel times.
//! * [`comm`] — group placement and alpha–beta collective times.
//! * [`engine`] — engine profiles: what each engine fuses, overlaps and keeps.
//! * [`layer`] — one layer, one micro-batch: time by kernel, memory by saved tensor.
//! * [`pipeline`] — closed-form pipeline bubble and in-flight micro-batches per schedule.
//! * [`estimate`](mod@estimate) — the whole iteration: breakdown, throughput, worst-stage memory.
//! * [`calibration`] — published runs (shared/data tables) as estimates and their errors.
//! * [`profile`] — calibration profiles (measured GEMMs, bandwidth, layers).

pub mod calibration;
pub mod comm;
pub mod device;
pub mod engine;
pub mod estimate;
pub mod layer;
pub mod pipeline;
pub mod profile;
pub mod scenario;

pub use device::DeviceModel;
pub use estimate::{
    device_for, estimate, estimate_from_costs, estimate_mapped, first_stage_layers, model_flops,
    Breakdown, Estimate, LayerReport, MemoryBreakdown, StageEstimate,
};
pub use profile::{Profile, ProfileError};
pub use scenario::{check_offload_host, check_priced, Scenario, ShapeKey, PRICED_DEGREES};
