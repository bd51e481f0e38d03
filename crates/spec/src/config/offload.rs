//! What a plan must be to move training state to host memory: activation offloading
//! (`TrainSpec::cpu_offload_layers`) and optimizer offloading
//! (`TrainSpec::optimizer_offload`), each under the engines that run it and the conditions
//! those engines set. Knows the rules, not the costs (`plait-cost` prices both).

use super::ParallelConfig;
use crate::error::{Result, SpecError};
use crate::model::ModelSpec;
use crate::train::{Float8Recipe, OptimizerState, Recompute, TrainSpec};
use crate::Engine;

impl ParallelConfig {
    /// Activation offloading (`TrainSpec::cpu_offload_layers`) as Megatron-Core runs it:
    /// under engine megatron, for fewer blocks than the model has (`transformer_config.py:
    /// 1884-1889`, Megatron-LM d98e8a6). The plan's own conditions are
    /// [`ParallelConfig::check_cpu_offload`]'s.
    pub fn check_cpu_offload_train(model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        let n = train.cpu_offload_layers;
        if n == 0 {
            return Ok(());
        }
        let field = "cpu_offload_layers";
        if train.engine != Engine::Megatron {
            return Err(SpecError::for_field(
                field,
                format!(
                    "engine {} has no activation offloading plait models (Megatron-Core's \
                     cpu_offloading does)",
                    train.engine.keyword()
                ),
                "with engine megatron",
            ));
        }
        if n >= model.layers {
            return Err(SpecError::for_field(
                field,
                format!(
                    "{n} offloaded blocks of {}'s {} (Megatron-Core offloads fewer than all)",
                    model.name, model.layers
                ),
                format!("0 to {}", model.layers - 1),
            ));
        }
        Ok(())
    }

    /// A plan that offloads activations runs without a pipeline and without recomputation,
    /// as Megatron-Core requires (`transformer_config.py:1891-1899`, Megatron-LM d98e8a6).
    pub fn check_cpu_offload(&self, model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        Self::check_cpu_offload_train(model, train)?;
        if train.cpu_offload_layers == 0 {
            return Ok(());
        }
        let err = |field: &str, problem: String, allowed: &str| {
            Err(SpecError::for_field(field, problem, allowed.to_string()))
        };
        if self.pp > 1 {
            return err(
                "pp",
                format!("pp = {} with activation offloading", self.pp),
                "pp = 1 (Megatron-Core offloads without a pipeline)",
            );
        }
        if self.recompute != Recompute::None {
            return err(
                "recompute",
                format!("recompute = {} with activation offloading", self.recompute),
                "none (Megatron-Core offloads without recomputation)",
            );
        }
        Ok(())
    }

    /// Optimizer offloading (`TrainSpec::optimizer_offload`) on its own: a share from 0 to
    /// 1, under an engine that steps an optimizer on the CPU — Megatron-Core's
    /// `HybridDeviceOptimizer` or DeepSpeed's ZeRO-Offload. The plan's own conditions are
    /// [`ParallelConfig::check_offloads`]'.
    pub fn check_optimizer_offload_train(train: &TrainSpec) -> Result<()> {
        let f = train.optimizer_offload;
        if f == 0.0 {
            return Ok(());
        }
        let field = "optimizer_offload";
        if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
            return Err(SpecError::for_field(
                field,
                format!("{f} of the optimizer state offloaded"),
                "a share from 0 to 1",
            ));
        }
        if !train.engine.offloads_optimizer() {
            return Err(SpecError::for_field(
                field,
                format!(
                    "engine {} has no CPU optimizer plait models (Megatron-Core's \
                     HybridDeviceOptimizer and DeepSpeed's ZeRO-Offload do)",
                    train.engine.keyword()
                ),
                "with engine megatron or deepspeed",
            ));
        }
        // Both CPU optimizers keep fp32 state (torch's AdamW under Megatron-Core, with
        // `param_update_in_fp32`; DeepSpeedCPUAdam), whatever the GPU's optimizer would.
        if train.optimizer_state != OptimizerState::Fp32 {
            return Err(SpecError::for_field(
                "optimizer_state",
                format!(
                    "Adam's state in {} with optimizer offloading",
                    train.optimizer_state
                ),
                "fp32 (the CPU optimizers keep fp32 state)",
            ));
        }
        Ok(())
    }

    /// Both offloads against the plan: activation offloading's conditions
    /// ([`ParallelConfig::check_cpu_offload`]) and optimizer offloading's. Megatron-Core
    /// offloads the distributed optimizer's shard (its precision-aware optimizer, which
    /// `--optimizer-cpu-offload` requires, runs only with the distributed optimizer:
    /// Megatron-LM d98e8a6 `training/arguments.py:1884-1888`,
    /// `core/optimizer/__init__.py:1057-1060`), so ZeRO-1 at least, and in fp8 only with
    /// delayed scaling (its fp8 parameter gathers, `arguments.py:1889-1892`); DeepSpeed offloads under
    /// ZeRO 1 to 3 and a share below all only under ZeRO-3 (`offload_config.py:56,99-100`,
    /// deepspeedai/DeepSpeed edaa722).
    pub fn check_offloads(&self, model: &ModelSpec, train: &TrainSpec) -> Result<()> {
        self.check_cpu_offload(model, train)?;
        Self::check_optimizer_offload_train(train)?;
        let f = train.optimizer_offload;
        if f == 0.0 {
            return Ok(());
        }
        if self.zero == 0 {
            return Err(SpecError::for_field(
                "zero",
                format!(
                    "zero = 0 with optimizer offloading under engine {}",
                    train.engine.keyword()
                ),
                "1, 2 or 3 (the offloaded optimizer state is each rank's ZeRO shard)",
            ));
        }
        // Megatron-Core gathers the fp8 weights of a low-precision run over the distributed
        // optimizer (`EngineProfile::fp8_param_gather`, the export's `--fp8-param-gather`),
        // which its offloading takes only with delayed scaling (`arguments.py:1889-1892`); a
        // run that keeps 16-bit weights gathers none (`TrainSpec::sixteen_bit_weights`).
        if train.keeps_quantised_weights() && train.fp8_recipe() != Some(Float8Recipe::Delayed) {
            return Err(SpecError::for_field(
                "optimizer_offload",
                format!(
                    "optimizer offloading in {} {} under engine megatron",
                    train.dtype,
                    train
                        .fp8_recipe()
                        .map_or("block scaling".to_string(), |r| format!("{r} scaling"))
                ),
                "delayed scaling (Megatron-Core's offloading with fp8 parameter gathers), 16-bit \
                 weights kept beside the fp8 copies, or bf16",
            ));
        }
        if train.engine == Engine::Deepspeed && f < 1.0 && self.zero < 3 {
            return Err(SpecError::for_field(
                "optimizer_offload",
                format!(
                    "{f} of the optimizer state offloaded under ZeRO-{}",
                    self.zero
                ),
                "1 (DeepSpeed offloads a share below all only under ZeRO-3)",
            ));
        }
        Ok(())
    }
}
