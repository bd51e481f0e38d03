//! The seam between the executor and candle's devices: which device a rank's tensors live
//! on. The executor, the model and the checkpoint loader take the device from here (through
//! the `StageModel` a worker builds) instead of naming one.
//!
//! Only the CPU is built: the runtime compiles candle without its `cuda` and `metal`
//! features, so the planning crates' dependency tree stays free of GPU toolkits. A device
//! backend is a variant here, its `device` arm, and the candle feature behind it.

use candle_core::Device;
use serde::{Deserialize, Serialize};

/// Where a run's tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// Every rank on the host's CPU (candle's CPU backend, f32).
    #[default]
    Cpu,
}

impl Backend {
    /// The device of worker `rank` (ranks share the CPU; a GPU backend would pick the
    /// rank's own device).
    pub fn device(self, _rank: usize) -> Device {
        match self {
            Backend::Cpu => Device::Cpu,
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Cpu => "cpu",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_backend_puts_every_rank_on_the_cpu() {
        assert_eq!(Backend::default(), Backend::Cpu);
        assert!(matches!(Backend::Cpu.device(3), Device::Cpu));
        assert_eq!(Backend::Cpu.to_string(), "cpu");
    }
}
