//! plait's vocabulary: what model is trained (`ModelSpec`), on what hardware
//! (`ClusterSpec`), with what batch (`TrainSpec`) and how it is split (`ParallelConfig`).
//!
//! Parsers here take text, not paths: this crate does no I/O. It knows nothing about time
//! or memory costs (that is `plait-cost`).

#[macro_use]
mod keyword;
pub mod cluster;
pub mod config;
pub mod error;
pub mod hf;
pub mod mesh;
pub mod mixed;
pub mod model;
pub mod parallel;
pub mod pipeline_layout;
pub mod presets;
pub mod stage_map;
pub mod train;

pub use cluster::{
    cluster_from_toml, cluster_preset, ClusterSpec, GpuSpec, HostCpu, HostMemorySpec, LinkSpec,
    CLUSTER_PRESETS, GIB,
};
pub use config::{
    check_pipeline_chunks, check_tp_split, parse_config_items, parse_recompute, ParallelConfig,
    MAX_DEGREE,
};
pub use error::{Result, SpecError};
pub use hf::model_from_hf_config;
pub use mesh::{DeviceMeshShape, Dim, Mesh, MeshCoords};
pub use mixed::{mixed_from_inline, mixed_from_toml, MixedCluster, NodeGroup};
pub use model::{
    Activation, BlockKind, BlockRun, Family, Gemm, KindRuns, Layer, LayerKind, MambaSpec, MlaSpec,
    ModelSpec, MoeSpec, Norm, Positions, QkNorm, RopeScaling, RouterSpec, Shard,
    DEFAULT_MAMBA_CHUNK, MAX_BLOCK_KINDS,
};
pub use parallel::{Degree, Exact, Form, Parallel, ParallelPins, Pinned, Value};
pub use plait_schedule::Placement;
pub use presets::{model_preset, model_preset_names};
pub use stage_map::{even_chunk_blocks, schedule_spec, StageMap};
pub use train::{
    parse_compile_components, parse_sample_lengths, AttentionImpl, CpComm, CudaGraphs, Dtype,
    Engine, Float8Recipe, Lora, LoraTarget, MoeDispatcher, OptimizerState, Recompute,
    RecomputeModule, RecomputeModules, SampleLength, Schedule, Sdpa, Task, TrainSpec,
    MAX_SAMPLE_LENGTHS,
};
