//! plait's runtime: executes a plan on real tensors. Workers are threads, one per rank,
//! each with its own candle tensors (CPU, f32); they run the schedule IR that the planner
//! simulates, instruction by instruction, with tensor, pipeline and data parallelism,
//! recomputation, ZeRO-1, checkpoints and failure handling.
//!
//! * [`backend`] — the device a rank's tensors live on (the CPU).
//! * [`comm`] — the `Communicator` trait and its in-process implementation.
//! * [`topology`] — ranks ↔ (dp, tp, pp) coordinates.
//! * [`model`] — GPT and LLaMA stages from a `ModelSpec`, tensor-parallel layers.
//! * [`data`] — byte-level tokenizer, corpora, seeded data order.
//! * [`optim`] — bucketed reductions, ZeRO-1, clipping, AdamW, learning-rate schedule.
//! * [`config`] — the run ([`TrainConfig`]), its checks and the plan syntax.
//! * [`memory`] — does a run fit this machine, checked before allocating.
//! * [`groups`] — a rank's communicators.
//! * [`engine`] — the executor and [`train`].
//! * [`checkpoint`] — sharded safetensors checkpoints with an atomic manifest.
//! * [`trace`] — the measured timeline as the simulator's Perfetto trace.
//! * [`profile`] — measures this machine for the planner (`plait profile`, `--plan auto`).
//!
//! Kept out of the planning crates' dependency tree: they never depend on candle.

pub mod backend;
pub mod checkpoint;
pub mod comm;
pub mod config;
pub mod data;
pub mod engine;
pub mod error;
pub mod files;
pub mod groups;
pub mod memory;
pub mod model;
pub mod optim;
pub mod profile;
pub mod rng;
pub mod topology;
pub mod tp;
pub mod trace;

pub use backend::Backend;
pub use comm::{CommError, Communicator, InProcessComm, ReduceOp, Tag, World};
pub use config::{parse_plan, CheckpointConfig, Fault, TrainConfig};
pub use data::Dataset;
pub use engine::{init_compute_threads, train, StepLog, TrainReport};
pub use error::RuntimeError;
pub use memory::check_memory;
pub use optim::OptimConfig;
