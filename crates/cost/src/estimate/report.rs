//! What an estimate answers: the iteration's breakdown, per-stage figures, memory and the
//! band, with the questions a reader asks of them (does it fit, why not).
//!
//! Data and its accessors only; how the numbers are computed is the parent's.

use serde::Serialize;

use plait_spec::{ParallelConfig, GIB};

/// Seconds per iteration, by component, on the pipeline's slowest stage. They add up to
/// `iteration_time_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Breakdown {
    pub compute_s: f64,
    pub recompute_s: f64,
    /// Of `compute_s` and `recompute_s`, the time the GPUs wait on their host to launch
    /// kernels (`Phase::launch_wait_s` over the slowest stage's passes): small kernels
    /// issued one by one from eager PyTorch. Not a component of its own (it is inside the
    /// compute); CUDA graphs or larger micro-batches remove it.
    pub launch_wait_s: f64,
    pub tp_comm_s: f64,
    pub cp_comm_s: f64,
    pub ep_comm_s: f64,
    pub pp_comm_s: f64,
    pub pipeline_bubble_s: f64,
    pub dp_comm_exposed_s: f64,
    pub optimizer_s: f64,
    /// Activation offloading's copies to and from host memory that the compute beside them
    /// does not hide (`TrainSpec::cpu_offload_layers`); absent from the JSON when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub offload_copies_s: f64,
}

fn is_zero(s: &f64) -> bool {
    *s == 0.0
}

impl Breakdown {
    pub fn total_s(&self) -> f64 {
        self.compute_s
            + self.recompute_s
            + self.tp_comm_s
            + self.cp_comm_s
            + self.ep_comm_s
            + self.pp_comm_s
            + self.pipeline_bubble_s
            + self.dp_comm_exposed_s
            + self.optimizer_s
            + self.offload_copies_s
    }

    /// Components with their names, in display order.
    pub fn components(&self) -> [(&'static str, f64); 10] {
        [
            ("compute", self.compute_s),
            ("recompute", self.recompute_s),
            ("tp comm", self.tp_comm_s),
            ("cp comm", self.cp_comm_s),
            ("ep comm", self.ep_comm_s),
            ("pp p2p", self.pp_comm_s),
            ("pipeline bubble", self.pipeline_bubble_s),
            ("dp comm (exposed)", self.dp_comm_exposed_s),
            ("optimizer", self.optimizer_s),
            ("offload copies (exposed)", self.offload_copies_s),
        ]
    }
}

/// Bytes per GPU on one pipeline stage at its peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    pub weights_bytes: f64,
    pub gradients_bytes: f64,
    pub optimizer_bytes: f64,
    /// Saved activations of all in-flight micro-batches.
    pub activations_bytes: f64,
    pub inflight_microbatches: f64,
    /// Live only during a layer's backward (rematerialised activations, gradients, logits,
    /// ZeRO-3 gathered weights).
    pub transient_bytes: f64,
    /// CUDA context, workspaces, communicator buffers.
    pub reserve_bytes: f64,
}

impl MemoryBreakdown {
    pub fn total_bytes(&self) -> f64 {
        self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
            + self.reserve_bytes
    }
}

/// One pipeline rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageEstimate {
    /// Transformer blocks on this rank (over all its chunks).
    pub blocks: u64,
    /// Of them, those recomputed in full (all with `recompute=full` unless the layout or
    /// `--recompute-layers` recomputes fewer; 0 otherwise).
    pub recomputed_blocks: u64,
    pub forward_s: f64,
    pub backward_s: f64,
    pub p2p_s: f64,
    /// Parameters held by this rank (dense + expert, before ZeRO sharding).
    pub params: f64,
    /// Data-parallel gradient reduction of this rank's parameters, unhidden (0 with ZeRO-3,
    /// whose traffic is per micro-batch), including `dp_param_gather_s`.
    pub dp_reduce_s: f64,
    /// Of `dp_reduce_s`, the ZeRO-1/2 all-gather of updated parameters after the step.
    pub dp_param_gather_s: f64,
    /// ZeRO-3 gather/reduce time per micro-batch that compute cannot hide, plus the compute
    /// slowed by the part it hides (the collectives' SMs).
    pub zero3_exposed_per_mb_s: f64,
    /// Per micro-batch, what Megatron-Core's all-to-all overlap changes of the backward
    /// (already in `backward_s`): the compute slowed by the collectives it hides, less the
    /// expert all-to-all time hidden; 0 without the overlap.
    #[serde(default)]
    pub moe_a2a_overlap_s: f64,
    /// Once per iteration: compute slowed by the data-parallel reduction it hides, and the
    /// last ZeRO-3 reduce-scatter, which nothing follows.
    pub dp_contention_s: f64,
    pub optimizer_s: f64,
    /// Per micro-batch, activation offloading's saved bytes in host memory (already out of
    /// `memory.activations_bytes`) and its copies the compute does not hide, forward and
    /// backward (already in `forward_s`, `backward_s`); 0 without offloading.
    #[serde(skip_serializing_if = "is_zero")]
    pub offload_host_bytes: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub offload_exposed_forward_s: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub offload_exposed_backward_s: f64,
    /// Host bytes of the optimizer state this GPU offloads (`TrainSpec::optimizer_offload`;
    /// already out of `memory.optimizer_bytes`); 0 without offloading.
    #[serde(skip_serializing_if = "is_zero")]
    pub optimizer_host_bytes: f64,
    pub memory: MemoryBreakdown,
    pub peak_memory_bytes: f64,
}

impl StageEstimate {
    /// Host memory this stage's GPU holds: its in-flight micro-batches' offloaded
    /// activations and its offloaded optimizer state.
    pub fn host_bytes(&self) -> f64 {
        self.offload_host_bytes * self.memory.inflight_microbatches + self.optimizer_host_bytes
    }
}

/// The answer for one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Estimate {
    pub config: ParallelConfig,
    /// The engine whose behaviour the estimate follows.
    pub engine: plait_spec::Engine,
    pub microbatches: u64,
    /// Central estimate of one iteration.
    pub iteration_time_s: f64,
    /// Optimistic end of the band: the uncertain assumptions (overlap efficiency, kernel
    /// efficiency, imbalance) at their favourable end.
    pub iteration_time_low_s: f64,
    /// Pessimistic end of the band.
    pub iteration_time_high_s: f64,
    pub tokens_per_s: f64,
    /// Model FLOP/s per GPU in TFLOP/s (no recompute counted).
    pub tflops_per_gpu: f64,
    pub mfu: f64,
    pub model_flops_per_iteration: f64,
    /// Peak memory of the worst stage.
    pub peak_memory_bytes: f64,
    /// The peak with the caching allocator's fragmentation on the memory that comes and
    /// goes (activations, transients): what the engine may really need.
    pub peak_memory_high_bytes: f64,
    pub memory_capacity_bytes: f64,
    /// Host memory per GPU of the stage that needs most (`StageEstimate::host_bytes`); 0
    /// without offloading.
    #[serde(skip_serializing_if = "is_zero")]
    pub host_memory_bytes: f64,
    /// The GPU's share of its node's host memory, where the cluster gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_memory_capacity_bytes: Option<f64>,
    /// The worst stage fits in GPU memory and every stage's offloaded state in its share of
    /// host memory.
    pub fits: bool,
    pub worst_stage: usize,
    pub breakdown: Breakdown,
    /// Memory of the worst stage.
    pub memory: MemoryBreakdown,
    pub stages: Vec<StageEstimate>,
}

/// Per-layer figures of the first pipeline stage, per micro-batch and per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerReport {
    pub name: String,
    pub forward_compute_s: f64,
    pub backward_compute_s: f64,
    pub recompute_s: f64,
    pub activation_bytes: f64,
}

impl Estimate {
    /// Whether the plan fits even with the allocator's average fragmentation.
    pub fn fits_with_fragmentation(&self) -> bool {
        self.peak_memory_high_bytes <= self.memory_capacity_bytes && self.host_fits()
    }

    /// Whether the offloaded state fits in the GPU's share of host memory (true where the
    /// cluster does not give it, or nothing is offloaded).
    pub fn host_fits(&self) -> bool {
        self.host_memory_capacity_bytes
            .is_none_or(|cap| self.host_memory_bytes <= cap)
    }

    /// The estimate with its band set from the optimistic and pessimistic iteration times
    /// (ordered around the central value whatever the mechanisms did).
    pub fn with_band(mut self, low_s: f64, high_s: f64) -> Estimate {
        let c = self.iteration_time_s;
        self.iteration_time_low_s = low_s.min(c);
        self.iteration_time_high_s = high_s.max(c);
        self
    }

    /// Why the configuration does not fit, or `None` when it fits. Built on demand: the
    /// planner evaluates millions of estimates and reads the reason of a few.
    pub fn reason(&self) -> Option<String> {
        if self.fits {
            return None;
        }
        if self.peak_memory_bytes <= self.memory_capacity_bytes && !self.host_fits() {
            return Some(format!(
                "the offloaded state needs {:.1} GiB of host memory per GPU but each GPU's \
                 share of its node's is {:.1} GiB",
                self.host_memory_bytes / GIB,
                self.host_memory_capacity_bytes.unwrap_or(0.0) / GIB,
            ));
        }
        let m = &self.memory;
        Some(format!(
            "stage {} needs {:.1} GiB per GPU but the GPU has {:.1} GiB \
             (activations {:.1} GiB for {:.1} micro-batches in flight, weights+gradients+optimizer {:.1} GiB)",
            self.worst_stage,
            self.peak_memory_bytes / GIB,
            self.memory_capacity_bytes / GIB,
            m.activations_bytes / GIB,
            m.inflight_microbatches,
            (m.weights_bytes + m.gradients_bytes + m.optimizer_bytes) / GIB,
        ))
    }
}
