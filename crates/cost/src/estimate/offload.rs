//! Training state in host memory, as each engine moves it: activation offloading's copies
//! (`TrainSpec::cpu_offload_layers`) and optimizer offloading's state, CPU step and copies
//! (`TrainSpec::optimizer_offload`). Knows the host side (the GPU's link to host memory, the
//! node's DRAM); the estimate adds what it returns to its stages. Which plans may offload is
//! `plait_spec::ParallelConfig::check_offloads`'s.

use plait_spec::{ClusterSpec, Engine, OptimizerState, TrainSpec};

use crate::layer::LayerCost;

/// What activation offloading (`TrainSpec::cpu_offload_layers`) does to one micro-batch
/// of a stage: the saved bytes that live in host memory instead, and the copy time the
/// compute does not hide.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct ActivationOffload {
    pub(super) host_bytes: f64,
    pub(super) exposed_forward_s: f64,
    pub(super) exposed_backward_s: f64,
}

/// Activation offloading of `offloaded` of the stage's blocks (`blocks`: each block's cost
/// and count): Transformer Engine keeps `(blocks − offloaded)` blocks' activations on the
/// GPU (TE d0067d0 `pytorch/cpu_offload.py:748-751`), moving the others to host memory on
/// its own stream in the forward and back before their backward. The copies, the offloaded
/// blocks' mean activation bytes each, run over the GPU's host link one after another beside
/// the pass's compute; they can start only once the first offloaded block has run, so the
/// compute they hide behind is the pass's blocks less one, and what remains is exposed.
pub(super) fn activation_offload(
    t: &TrainSpec,
    cluster: &ClusterSpec,
    blocks: &[(LayerCost, f64)],
) -> ActivationOffload {
    let count: f64 = blocks.iter().map(|(_, n)| n).sum();
    let offloaded = (t.cpu_offload_layers as f64).min(count);
    let Some(link) = cluster.host_link_bytes_per_s.filter(|_| offloaded > 0.0) else {
        return ActivationOffload::default();
    };
    let total =
        |f: &dyn Fn(&LayerCost) -> f64| -> f64 { blocks.iter().map(|(l, n)| f(l) * n).sum() };
    let saved = total(&|l| l.activation_bytes);
    let host_bytes = saved * offloaded / count;
    let copy_s = host_bytes / link;
    let beside = (count - 1.0).max(0.0) / count;
    let forward = total(&|l| l.forward.total_s()) * beside;
    let backward = total(&|l| l.backward.total_s()) * beside;
    ActivationOffload {
        host_bytes,
        exposed_forward_s: (copy_s - forward).max(0.0),
        exposed_backward_s: (copy_s - backward).max(0.0),
    }
}

/// Where Adam's state lives: its format, the share of it in host memory and the engine that
/// holds it there. The one rule for the optimizer's GPU and host bytes, which the estimate,
/// the planner's bounds and its layouts share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerHome {
    pub state: OptimizerState,
    /// Share of each rank's state in host memory, 0 to 1 (`TrainSpec::optimizer_offload`).
    pub offloaded: f64,
    pub engine: Engine,
}

impl OptimizerHome {
    pub fn of(t: &TrainSpec) -> Self {
        OptimizerHome {
            state: t.optimizer_state,
            offloaded: t.optimizer_offload.clamp(0.0, 1.0),
            engine: t.engine,
        }
    }

    /// Bytes per trainable parameter of optimizer state left in GPU memory.
    pub fn gpu_bytes_per_param(&self) -> f64 {
        self.state.bytes_per_param() * (1.0 - self.offloaded)
    }

    /// Host bytes per offloaded parameter with `microbatches` micro-batches a step.
    /// Megatron-Core's `HybridDeviceOptimizer` keeps an fp32 copy of each offloaded
    /// parameter (`param_update_in_fp32=True`), torch's `AdamW` moments in fp32 beside it
    /// and a pinned fp32 gradient buffer (Megatron-LM d98e8a6
    /// `core/optimizer/cpu_offloading/hybrid_optimizer.py:97-114,272-281`): 16 bytes.
    /// DeepSpeed's ZeRO-Offload keeps the fp32 partition, its fp32 gradient, the moments and
    /// a pinned 16-bit copy the updated partition goes back through (deepspeedai/DeepSpeed
    /// edaa722 `runtime/zero/stage_1_and_2.py:495-507,2338-2341`): 18 bytes; with more than
    /// one micro-batch also a 16-bit buffer it accumulates the gradients in
    /// (`accumulated_grads_in_cpu`, `stage_1_and_2.py:1516-1560`): 20.
    pub fn host_bytes_per_param(&self, microbatches: u64) -> f64 {
        match self.engine {
            Engine::Deepspeed if microbatches > 1 => 20.0,
            Engine::Deepspeed => 18.0,
            _ => 16.0,
        }
    }
}

/// DRAM traffic of the CPU's Adam step per parameter: read the fp32 parameter, gradient and
/// both moments, write the parameter and the moments (7 × 4 bytes; torch's fused CPU
/// `AdamW` under Megatron-Core, `DeepSpeedCPUAdam` under DeepSpeed). DeepSpeed then casts
/// the partition into its 16-bit pinned buffer (read 4, write 2).
fn cpu_step_bytes_per_param(engine: Engine) -> f64 {
    28.0 + if engine == Engine::Deepspeed {
        6.0
    } else {
        0.0
    }
}

/// Bytes per offloaded parameter over the GPU's host link at the step, [gradient down,
/// parameter up]. Megatron-Core copies the distributed optimizer's fp32 gradient shard down
/// and the updated fp32 parameter into the 16-bit GPU parameter, which PyTorch converts on
/// the host before the transfer (`copy_` across devices and dtypes, aten
/// `native/cuda/Copy.cu` `copy_requires_temporaries`): 4 and 2. DeepSpeed casts the gradient
/// to fp32 on the GPU and copies it down, and sends the 16-bit partition up
/// (`stage_1_and_2.py:1590-1605,2339-2341`): 4 and 2.
const LINK_BYTES_PER_PARAM: [f64; 2] = [4.0, 2.0];
/// DeepSpeed's gradient accumulation through host memory, per offloaded parameter and
/// micro-batch: the 16-bit gradient down, and from the second micro-batch on the running sum
/// up first to add to (`async_accumulate_grad_in_cpu_via_gpu`, `stage_1_and_2.py:1516-1560`,
/// called for every backward but the lone one of a step, :1650-1661); the last micro-batch
/// then sends its fp32 copy down as well.
const DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM: f64 = 2.0;

/// What optimizer offloading adds to one pipeline rank.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct OptimizerOffload {
    /// Host bytes of this GPU's offloaded state.
    pub(super) host_bytes: f64,
    /// The step, GPU share and host share together, replacing the GPU step.
    pub(super) step_s: f64,
}

/// The optimizer step of a rank stepping `params` parameters (its ZeRO shard), of which the
/// share `home.offloaded` is on the host, given the GPU's time for the whole step
/// (`gpu_step_s`), one micro-batch's backward (`backward_s`) and the step's `microbatches`.
///
/// Megatron-Core, as it runs by default (`overlap_cpu_optimizer_d2h_h2d` off, so its copies
/// run on the compute stream, `hybrid_optimizer.py:216-221`): the gradients go down, then the
/// GPU steps its share while the CPU steps the rest (the CPU waits only for the copies), then
/// the parameters come up. DeepSpeed copies the gradients down as they are reduced in each
/// backward (its reduction stream, `overlap_comm`), so of each micro-batch's copies only what
/// outlasts its backward waits (charged here, with the step); its step is then the CPU's and
/// the copy up.
///
/// The CPU's step runs at the GPU's share of its node's DRAM bandwidth: every GPU's process
/// steps at once. At that datasheet peak it is a lower bound on the CPU's time.
pub(super) fn optimizer_offload(
    home: &OptimizerHome,
    cluster: &ClusterSpec,
    params: f64,
    gpu_step_s: f64,
    backward_s: f64,
    microbatches: u64,
) -> OptimizerOffload {
    let on_gpu = OptimizerOffload {
        host_bytes: 0.0,
        step_s: gpu_step_s,
    };
    let (Some(link), Some((_, dram))) =
        (cluster.host_link_bytes_per_s, cluster.host_memory_per_gpu())
    else {
        return on_gpu;
    };
    let f = home.offloaded;
    if f == 0.0 {
        return on_gpu;
    }
    let offloaded = params * f;
    let link_s = |bytes: f64| offloaded * bytes / link;
    let gpu_s = gpu_step_s * (1.0 - f);
    let cpu_s = offloaded * cpu_step_bytes_per_param(home.engine) / dram;
    let [down, up] = LINK_BYTES_PER_PARAM;
    let copies_s = if home.engine == Engine::Deepspeed {
        let hidden = |bytes: f64| (link_s(bytes) - backward_s).max(0.0);
        let acc = DEEPSPEED_ACCUMULATE_BYTES_PER_PARAM;
        let mb = microbatches.max(1) as f64;
        if mb > 1.0 {
            // The first micro-batch sends its gradient down, the others bring the sum up and
            // send it down again, the last then its fp32 copy too.
            hidden(acc) + (mb - 2.0) * hidden(2.0 * acc) + hidden(2.0 * acc + down)
        } else {
            hidden(down)
        }
    } else {
        link_s(down)
    };
    OptimizerOffload {
        host_bytes: offloaded * home.host_bytes_per_param(microbatches),
        step_s: copies_s + gpu_s.max(cpu_s) + link_s(up),
    }
}
