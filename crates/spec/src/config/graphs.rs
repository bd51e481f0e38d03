//! What a plan must be to replay whole layers as CUDA graphs (`TrainSpec::cuda_graphs`):
//! the engine that captures them and what its capture refuses. Knows the rules, not the
//! costs (`plait-cost` prices the launches the graphs spare).

use super::ParallelConfig;
use crate::error::{Result, SpecError};
use crate::train::{Recompute, TrainSpec};
use crate::{CudaGraphs, Engine};

impl ParallelConfig {
    /// Whole layers replayed as CUDA graphs (`TrainSpec::cuda_graphs`) on their own: only
    /// Megatron-Core's layers replay as graphs in training.
    pub fn check_cuda_graphs_train(train: &TrainSpec) -> Result<()> {
        if train.cuda_graphs == CudaGraphs::None || train.engine == Engine::Megatron {
            return Ok(());
        }
        Err(SpecError::for_field(
            "cuda_graphs",
            format!(
                "engine {} replays no CUDA graphs in training",
                train.engine.keyword()
            ),
            "none; layers with engine megatron".to_string(),
        ))
    }

    /// Whole layers as CUDA graphs against the plan: Megatron-Core's per-layer graphs refuse
    /// full recomputation ("full recompute is only supported with full iteration CUDA
    /// graph") and activation offloading ("CUDA graphs not supported with CPU offloading";
    /// Megatron-LM d98e8a6 `transformer_config.py:2800-2858`).
    pub fn check_cuda_graphs(&self, train: &TrainSpec) -> Result<()> {
        Self::check_cuda_graphs_train(train)?;
        if train.cuda_graphs == CudaGraphs::None {
            return Ok(());
        }
        let refuse = |field: &str, problem: &str, allowed: &str| {
            Err(SpecError::for_field(
                field,
                problem.to_string(),
                allowed.to_string(),
            ))
        };
        if self.recompute == Recompute::Full {
            return refuse(
                "recompute",
                "recompute = full with whole layers as CUDA graphs",
                "none or selective (Megatron-Core's layer graphs refuse full recompute)",
            );
        }
        if train.cpu_offload_layers > 0 {
            return refuse(
                "cpu_offload_layers",
                "activation offloading with whole layers as CUDA graphs",
                "0 (Megatron-Core's layer graphs refuse CPU offloading)",
            );
        }
        Ok(())
    }
}
