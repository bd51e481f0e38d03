//! `ClusterSpec`: GPUs, their nodes and the links between them; built-in presets (each
//! number with its public source) and a TOML format for anything else.
//!
//! Only hardware facts live here. How well software uses the hardware (GEMM shape
//! efficiency, collective algorithms) belongs to the cost model.

use serde::{Deserialize, Serialize};

use crate::error::{Result, SpecError};
use crate::train::Dtype;

mod toml_format;
pub use self::toml_format::{cluster_from_toml, shown};

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    pub name: String,
    /// Dense (no sparsity) tensor-core peak for bf16.
    pub peak_bf16_flops_per_s: f64,
    /// Dense tensor-core peak for fp16 (same as bf16 on A100 and later).
    pub peak_fp16_flops_per_s: f64,
    /// Dense fp8 tensor-core peak; `None` where the GPU has no fp8 tensor cores.
    pub peak_fp8_flops_per_s: Option<f64>,
    /// Dense FP4 (NVFP4) tensor-core peak; `None` before Blackwell. The block-scaled MX
    /// formats came with the same tensor-core generation: a GPU with an FP4 peak runs MXFP8
    /// at its fp8 rate (NVIDIA Blackwell architecture technical brief: fifth-generation
    /// tensor cores with micro-tensor scaling for FP8/FP6/FP4).
    #[serde(default)]
    pub peak_fp4_flops_per_s: Option<f64>,
    /// Largest measured fraction of the peak that a well-shaped GEMM reaches (the
    /// "maximum achievable matmul FLOP/s", MAMF, over the peak).
    pub matmul_efficiency: f64,
    /// The same fraction for GEMMs with 8-bit (and narrower) inputs, where it was measured
    /// apart: fp8 GEMMs reach less of their (twice as high) peak than 16-bit ones. `None`:
    /// no separate measurement, the 16-bit fraction holds.
    #[serde(default)]
    pub fp8_matmul_efficiency: Option<f64>,
    /// Tensor-core clock held under sustained full load (power cap) over the boost clock
    /// that peaks and short GEMM benchmarks run at. Training steps run seconds of
    /// back-to-back GEMMs, so they see the sustained clock.
    pub sustained_clock_ratio: f64,
    /// Usable device memory.
    pub memory_bytes: f64,
    /// Peak HBM bandwidth.
    pub memory_bandwidth_bytes_per_s: f64,
    /// Streaming multiprocessors (for GEMM wave quantisation).
    pub sms: u64,
}

impl GpuSpec {
    /// Dense tensor-core peak for `dtype`, or `None` if the GPU cannot run it.
    pub fn peak_flops_per_s(&self, dtype: Dtype) -> Option<f64> {
        match dtype {
            Dtype::Bf16 => Some(self.peak_bf16_flops_per_s),
            Dtype::Fp16 => Some(self.peak_fp16_flops_per_s),
            Dtype::Fp8 => self.peak_fp8_flops_per_s,
            Dtype::Mxfp8 => self.peak_fp4_flops_per_s.and(self.peak_fp8_flops_per_s),
            Dtype::Nvfp4 => self.peak_fp4_flops_per_s,
        }
    }

    /// The MAMF fraction of the peak for GEMMs in `dtype`: the fp8 measurement for 8-bit and
    /// narrower formats where there is one (no FP4 measurement exists: fp8's stands in).
    pub fn matmul_efficiency_for(&self, dtype: Dtype) -> f64 {
        if dtype.gemm_element_bytes() < 2.0 {
            self.fp8_matmul_efficiency.unwrap_or(self.matmul_efficiency)
        } else {
            self.matmul_efficiency
        }
    }
}

/// A link level: bandwidth per GPU per direction, and the latency of one transfer step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Unidirectional bandwidth available to one GPU on this link level.
    pub bandwidth_bytes_per_s: f64,
    /// Latency of one step of a collective (one hop) on this level.
    pub latency_s: f64,
    /// Fraction of `bandwidth_bytes_per_s` that NCCL collectives reach as bus bandwidth.
    pub collective_efficiency: f64,
}

impl LinkSpec {
    /// Bandwidth that collectives achieve.
    pub fn achieved_bytes_per_s(&self) -> f64 {
        self.bandwidth_bytes_per_s * self.collective_efficiency
    }
}

/// A GPU cluster: identical nodes of `gpus_per_node` GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    pub name: String,
    pub gpu: GpuSpec,
    pub gpus_per_node: u64,
    /// Node-local GPU interconnect (NVLink/NVSwitch), per GPU.
    pub intra_node: LinkSpec,
    /// Network between nodes, per GPU: (NICs per node × NIC bandwidth) / GPUs per node.
    pub inter_node: LinkSpec,
    /// NICs per node (for the description; `inter_node` already holds the per-GPU share).
    pub nics_per_node: u64,
    /// Memory per GPU that the framework cannot use for the model: CUDA context,
    /// cuBLAS/NCCL workspaces, allocator fragmentation.
    pub memory_reserve_bytes: f64,
    /// Bandwidth per direction between one GPU and host memory (its PCIe link, or
    /// NVLink-C2C to a Grace CPU), which activation offloading copies over; `None` where
    /// the system does not publish it (offloading is then refused).
    #[serde(default)]
    pub host_link_bytes_per_s: Option<f64>,
    /// The node's host memory (its DRAM and the CPUs' bandwidth to it), which optimizer
    /// offloading keeps its state in and steps on; `None` where the system does not publish
    /// it (optimizer offloading is then refused).
    #[serde(default)]
    pub host_memory: Option<HostMemorySpec>,
    /// The CPU that hosts the GPUs' processes (x86 unless the system says otherwise).
    #[serde(default)]
    pub host_cpu: HostCpu,
}

/// One node's host memory, shared by its GPUs' processes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostMemorySpec {
    /// DRAM per node.
    pub bytes: f64,
    /// Peak DRAM bandwidth per node: memory channels × transfer rate × 8 bytes, summed over
    /// the sockets (a datasheet figure; sustained streams reach less).
    pub bandwidth_bytes_per_s: f64,
}

keyword_enum!(
    /// The CPU that runs the GPUs' training processes and issues their eager kernels (its
    /// per-kernel cost is the cost model's: `plait_cost::device::kernel_issue_s`).
    HostCpu {
        /// An x86-64 server CPU: the DGX/HGX systems' Intel Xeon or AMD EPYC hosts.
        X86 => "x86",
        /// NVIDIA Grace (Arm Neoverse V2) on NVLink-C2C to its GPUs: GH200, GB200 and GB300
        /// superchips.
        Grace => "grace",
    }
);

impl Default for HostCpu {
    /// x86, the host of every system that does not say otherwise.
    fn default() -> HostCpu {
        HostCpu::X86
    }
}

impl HostCpu {
    /// The CPU's name as a sentence writes it.
    pub fn label(self) -> &'static str {
        match self {
            HostCpu::X86 => "x86",
            HostCpu::Grace => "Grace",
        }
    }
}

impl ClusterSpec {
    /// One GPU's share of its node's host memory: (bytes, bandwidth), the node's figures
    /// over its GPUs (each GPU's process holds and steps its own shard).
    pub fn host_memory_per_gpu(&self) -> Option<(f64, f64)> {
        let gpus = self.gpus_per_node.max(1) as f64;
        self.host_memory
            .map(|h| (h.bytes / gpus, h.bandwidth_bytes_per_s / gpus))
    }
}

const GB: f64 = 1e9;
/// Bytes in a gibibyte: every `GiB` figure plait prints.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const TERA: f64 = 1e12;

/// Reserve for CUDA context, library workspaces and NCCL buffers. Assumption, not a
/// measurement: PyTorch's CUDA context takes ≈0.5 GiB and NCCL ≈0.5–1 GiB per process with a
/// few communicators; override with `memory_reserve_gib` in a cluster TOML.
const DEFAULT_RESERVE_BYTES: f64 = 2.0 * GIB;

/// NVLink/NVSwitch: NCCL all-reduce bus bandwidth on a DGX reaches ≈ 77–80 % of the
/// unidirectional NVLink bandwidth (nccl-tests all_reduce_perf: ≈ 230 GB/s of 300 on DGX
/// A100, ≈ 360 GB/s of 450 on DGX H100 without NVLS).
const NVLINK_COLLECTIVE_EFFICIENCY: f64 = 0.78;
/// InfiniBand: nccl-tests inter-node bus bandwidth reaches ≈ 90 % of NIC line rate.
const IB_COLLECTIVE_EFFICIENCY: f64 = 0.9;
/// Latency of one NCCL ring step inside a node with the Simple protocol (NCCL's tuner
/// constant `hwLatencies[NVLINK][RING][SIMPLE]` = 3.4 µs, NCCL 5067397 `src/graph/tuning.cc`;
/// the cost model derives the LL/LL128 protocols' latencies from it).
const NVLINK_STEP_LATENCY_S: f64 = 3.4e-6;
/// Latency of one ring step across the network with the Simple protocol
/// (`hwLatencies[NET][RING][SIMPLE]` = 14 µs, same file).
const IB_STEP_LATENCY_S: f64 = 14.0e-6;

fn nvlink(bidirectional_gb_per_s: f64) -> LinkSpec {
    LinkSpec {
        bandwidth_bytes_per_s: bidirectional_gb_per_s / 2.0 * GB,
        latency_s: NVLINK_STEP_LATENCY_S,
        collective_efficiency: NVLINK_COLLECTIVE_EFFICIENCY,
    }
}

fn infiniband(nics: u64, gbit_per_s: f64, gpus_per_node: u64) -> LinkSpec {
    LinkSpec {
        bandwidth_bytes_per_s: nics as f64 * gbit_per_s / 8.0 * GB / gpus_per_node as f64,
        latency_s: IB_STEP_LATENCY_S,
        collective_efficiency: IB_COLLECTIVE_EFFICIENCY,
    }
}

/// PCIe Gen4 ×16 (L40S datasheet: 64 GB/s bidirectional): 32 GB/s per direction. Without
/// NVLink, GPUs of a node talk over PCIe. Collectives reach ≈ 89 % of the link: measured
/// peer-to-peer write bandwidth on PCIe Gen5 ×16 GPUs, ≈ 56 of 63 GB/s (voipmonitor/rtx6kpro,
/// hardware/pcie-bandwidth.md, same NUMA node; across sockets 39–51 GB/s, so this is the
/// optimistic end for rings that cross the CPU interconnect).
fn pcie_gen4_x16() -> LinkSpec {
    LinkSpec {
        bandwidth_bytes_per_s: 32.0 * GB,
        latency_s: PCIE_STEP_LATENCY_S,
        collective_efficiency: PCIE_COLLECTIVE_EFFICIENCY,
    }
}
const PCIE_COLLECTIVE_EFFICIENCY: f64 = 56.0 / 63.0;
/// NCCL's ring step latency over PCIe with the Simple protocol
/// (`hwLatencies[PCI][RING][SIMPLE]` = 5.7 µs, NCCL 5067397 `src/graph/tuning.cc`).
const PCIE_STEP_LATENCY_S: f64 = 5.7e-6;

/// AMD Infinity Fabric (xGMI) on an 8 × MI300X platform: each GPU has seven links, one to each
/// peer (a full mesh, no switch), 64 GB/s per direction each (AMD MI300X platform datasheet:
/// 896 GB/s aggregate bidirectional peer-to-peer), so 448 GB/s per direction per GPU.
/// Usable: ≈ 48 of 64 GB/s per link (75 %) after CRC and protocol overhead (AMD ROCm blog
/// "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X", Mar 2025).
/// Step latency: RCCL's own tuner constants were not checked; assumes NCCL's NVLink one.
fn xgmi_mi300x() -> LinkSpec {
    LinkSpec {
        bandwidth_bytes_per_s: 7.0 * 64.0 * GB,
        latency_s: NVLINK_STEP_LATENCY_S,
        collective_efficiency: 48.0 / 64.0,
    }
}

/// A100 SXM4 80 GB. Peaks: NVIDIA A100 datasheet (312 TFLOP/s dense fp16/bf16, 2,039 GB/s,
/// 80 GB); 108 SMs (A100 whitepaper). MAMF 267.9 TFLOP/s = 85.9 % (S. Bekman,
/// ml-engineering, "Maximum Achievable Matmul FLOPS comparison table", CUDA 12.1).
pub fn a100_80g() -> GpuSpec {
    GpuSpec {
        name: "A100-SXM4-80GB".into(),
        peak_bf16_flops_per_s: 312.0 * TERA,
        peak_fp16_flops_per_s: 312.0 * TERA,
        peak_fp8_flops_per_s: None,
        peak_fp4_flops_per_s: None,
        matmul_efficiency: 0.859,
        fp8_matmul_efficiency: None,
        // NVIDIA rates A100 HPL runs at 1,305 MHz, the clock sustainable at the power limit,
        // against the 1,410 MHz boost of the 312 TFLOP/s peak (G. Lockwood, "Peak FLOPS").
        sustained_clock_ratio: 1305.0 / 1410.0,
        memory_bytes: 80.0 * GIB,
        memory_bandwidth_bytes_per_s: 2039.0 * GB,
        sms: 108,
    }
}

/// A100 SXM4 40 GB: the A100's compute (A100 datasheet: 312 TFLOP/s dense fp16/bf16, the
/// same 108 SMs and 1,410 MHz boost clock) with 40 GB of HBM2 at 1,555 GB/s (A100
/// datasheet). MAMF and sustained clock: the 80 GB part's (same SMs and clocks; no
/// separate measurement).
pub fn a100_40g() -> GpuSpec {
    GpuSpec {
        name: "A100-SXM4-40GB".into(),
        memory_bytes: 40.0 * GIB,
        memory_bandwidth_bytes_per_s: 1555.0 * GB,
        ..a100_80g()
    }
}

/// H100 SXM5 80 GB. Peaks: NVIDIA H100 datasheet (989.4 TFLOP/s dense bf16, 1,978.9 fp8,
/// 3.35 TB/s, 80 GB), 132 SMs. MAMF 792.1 TFLOP/s = 80.1 % (Bekman, ml-engineering).
pub fn h100() -> GpuSpec {
    GpuSpec {
        name: "H100-SXM5-80GB".into(),
        peak_bf16_flops_per_s: 989.4 * TERA,
        peak_fp16_flops_per_s: 989.4 * TERA,
        peak_fp8_flops_per_s: Some(1978.9 * TERA),
        peak_fp4_flops_per_s: None,
        matmul_efficiency: 0.801,
        // FP8 (e4m3) MAMF 1,402.6 TFLOP/s = 70.9 % against bf16's 80.3 % in the same run (Bekman,
        // ml-engineering, MAMF table v2, torch 2.7.0+cu126): fp8 GEMMs reach less of their peak.
        fp8_matmul_efficiency: Some(1402.6 / 1978.9),
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 80.0 * GIB,
        memory_bandwidth_bytes_per_s: 3350.0 * GB,
        sms: 132,
    }
}

/// H800 SXM5 80 GB, the export variant of the H100 SXM5: the same tensor-core peaks,
/// memory and SMs (NVIDIA H800 datasheet: 1,979 / 3,958 TFLOP/s bf16 / fp8 with sparsity,
/// 80 GB at 3.35 TB/s), its NVLink cut to 400 GB/s (the cluster's, `hgx-h800`).
pub fn h800() -> GpuSpec {
    GpuSpec {
        name: "H800-SXM5-80GB".into(),
        ..h100()
    }
}

/// H100 of Meta's Grand Teton hosts, as torchtitan's benchmarks ran them
/// (pytorch/torchtitan `benchmarks/llama3_h100_202412_torchtitan.md` and
/// `asyncTP_llama3_h100_2025-06_torchtitan.md`, "Hardware"): an SXM H100 with 96 GB of
/// HBM2e at 2.4 TB/s, run at its default 500 W power limit. Its peak is not published:
/// the same documents place it "between SXM and NVL", so the peaks are the midpoint of the
/// H100 SXM's (989.4 / 1,978.9 TFLOP/s dense bf16 / fp8, H100 datasheet) and the H100
/// NVL's (1,671 / 3,341 TFLOP/s with sparsity, so 835.5 / 1,670.5 dense; H100 NVL
/// datasheet, 350–400 W). Kernel fractions, SMs and the sustained clock are the H100's.
pub fn h100_grand_teton() -> GpuSpec {
    GpuSpec {
        name: "H100-SXM5-96GB-HBM2e-500W".into(),
        peak_bf16_flops_per_s: (989.4 + 835.5) / 2.0 * TERA,
        peak_fp16_flops_per_s: (989.4 + 835.5) / 2.0 * TERA,
        peak_fp8_flops_per_s: Some((1978.9 + 1670.5) / 2.0 * TERA),
        memory_bytes: 96.0 * GIB,
        memory_bandwidth_bytes_per_s: 2400.0 * GB,
        ..h100()
    }
}

/// Sustained over burst tensor throughput on Hopper, measured on one H200 with the same
/// GEMM (bf16 8192³, random data): 665.3 TFLOP/s over 30 s of back-to-back GEMMs, the SM
/// clock settled at 1,485 of 1,980 MHz under the 700 W cap
/// (`crates/cost/tests/data/h200_kernels.jsonl`, rows `"kind": "sustained"`), against
/// 780.7 TFLOP/s for the same GEMM timed alone (shared/data/h200_pytorch_calibration.jsonl).
/// The fp8 GEMM of the same run settled at 1,222.6 TFLOP/s, 0.841 of its MAMF burst rate.
const HOPPER_SUSTAINED_CLOCK_RATIO: f64 = 665.3 / 780.7;

/// H200 SXM 141 GB: H100 compute with HBM3e (NVIDIA H200 datasheet: 141 GB, 4.8 TB/s).
/// MAMF measured for this project: bf16 8192³ GEMM 780.7 TFLOP/s = 78.9 %
/// (shared/data/h200_pytorch_calibration.jsonl).
pub fn h200() -> GpuSpec {
    GpuSpec {
        name: "H200-SXM-141GB".into(),
        matmul_efficiency: 0.789,
        // FP8 (e4m3) MAMF 1,453.4 TFLOP/s = 73.4 % (Bekman, ml-engineering 744d01e, torch
        // 2.7.1+cu128).
        fp8_matmul_efficiency: Some(1453.4 / 1978.9),
        memory_bytes: 141.0 * GB,
        memory_bandwidth_bytes_per_s: 4800.0 * GB,
        ..h100()
    }
}

/// MAMF of the Blackwell parts (S. Bekman, ml-engineering, "Maximum Achievable Matmul FLOPS
/// comparison table", read at 744d01e; `mamf-finder.py` with torch's `matmul` and
/// `torch._scaled_mm`, whose default is precise, not fast, fp8 accumulation): B200 bf16
/// 1,745.0 TFLOP/s = 77.6 % and fp8 3,432.5 = 76.3 % (torch 2.7.1+cu128); GB200 bf16 1,822.0
/// of 2,500 = 72.9 % and fp8 3,615.6 of 5,000 = 72.3 % (torch 2.10 dev, cu130); B300 bf16
/// 1,769.0 = 78.6 % and fp8 3,353.3 = 74.5 % (torch 2.9.1+cu130). OpenXLA's B200 table
/// (1088d5ab, `matmul_interpolator_data.h`) tops out at 1,690.7 bf16 over its 375 shapes.
const B200_MATMUL_EFFICIENCY: f64 = 1745.0 / 2250.0;
const B200_FP8_MATMUL_EFFICIENCY: f64 = 3432.5 / 4500.0;

/// B200 (DGX B200). Peaks: NVIDIA DGX B200 datasheet, per GPU, dense (half the quoted
/// sparse figures): 2.25 PFLOP/s bf16, 4.5 PFLOP/s fp8; 180 GB HBM3e; 148 SMs. Its memory
/// bandwidth is not the datasheet's 8 TB/s but what the driver reports: a 7,680-bit bus at
/// 3,996 MHz, double data rate, 7.672 TB/s (pytorch/ao#4002, March 2026, from
/// `cudaGetDeviceProperties` and nvidia-smi on a B200). MAMF measured by Bekman
/// (`B200_MATMUL_EFFICIENCY`, `B200_FP8_MATMUL_EFFICIENCY`).
pub fn b200() -> GpuSpec {
    GpuSpec {
        name: "B200-180GB".into(),
        peak_bf16_flops_per_s: 2250.0 * TERA,
        peak_fp16_flops_per_s: 2250.0 * TERA,
        peak_fp8_flops_per_s: Some(4500.0 * TERA),
        // DGX B200 datasheet: FP4 tensor core 144 PFLOP/s for 8 GPUs with sparsity.
        peak_fp4_flops_per_s: Some(9000.0 * TERA),
        matmul_efficiency: B200_MATMUL_EFFICIENCY,
        fp8_matmul_efficiency: Some(B200_FP8_MATMUL_EFFICIENCY),
        // Hopper's, which the one public B200 measurement matches: kernels run back to
        // back (FlashAttention-4, bf16) fell from 1,450 to 1,237 TFLOP/s, 0.853, the SM
        // clock from 1,965 to about 1,580 MHz at about 1,000 W (flashinfer-ai/flashinfer#2899,
        // March 2026).
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 180.0 * GB,
        memory_bandwidth_bytes_per_s: 7680.0 / 8.0 * 3996e6 * 2.0,
        sms: 148,
    }
}

/// B200 in a GB200 superchip (GB200 NVL72 datasheet, per GPU = rack figures / 72: dense
/// bf16 2.5 PFLOP/s and fp8 5 PFLOP/s (half the sparse 360 / 720 PFLOP/s per rack ÷ 72),
/// HBM3e 13.4 TB / 72 = 186 GB at 576 TB/s / 72 = 8 TB/s); 148 SMs as B200. MAMF measured
/// by Bekman (see `B200_MATMUL_EFFICIENCY`): 72.9 % bf16, 72.3 % fp8 of these peaks; the
/// sustained clock as [`b200`]'s. The memory bandwidth stays the datasheet's: the driver's
/// narrower bus was read on a B200, not on a GB200.
pub fn gb200() -> GpuSpec {
    GpuSpec {
        name: "B200-GB200-186GB".into(),
        peak_bf16_flops_per_s: 2500.0 * TERA,
        peak_fp16_flops_per_s: 2500.0 * TERA,
        peak_fp8_flops_per_s: Some(5000.0 * TERA),
        // GB200 NVL72: FP4 tensor core 1,440 PFLOP/s per rack with sparsity.
        peak_fp4_flops_per_s: Some(10000.0 * TERA),
        matmul_efficiency: 1822.0 / 2500.0,
        fp8_matmul_efficiency: Some(3615.6 / 5000.0),
        memory_bytes: 186.0 * GB,
        memory_bandwidth_bytes_per_s: 8000.0 * GB,
        ..b200()
    }
}

/// B300 (Blackwell Ultra) in a DGX/HGX B300. Peaks: NVIDIA HGX B300 specifications, for 8
/// GPUs with sparsity (dense is half): FP16/BF16 36 PFLOP/s, FP8 72 PFLOP/s, so 2.25 and
/// 4.5 PFLOP/s dense per GPU. 288 GB HBM3e at 8 TB/s and 160 SMs: NVIDIA technical blog
/// "Inside NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era" (Aug 2025; 160 SMs
/// is its full implementation, the one its 15 PFLOP/s dense NVFP4 figure is quoted for).
/// MAMF measured by Bekman (see `B200_MATMUL_EFFICIENCY`): 78.6 % bf16, 74.5 % fp8; the
/// sustained clock assumed Hopper's.
pub fn b300() -> GpuSpec {
    GpuSpec {
        name: "B300-288GB".into(),
        peak_bf16_flops_per_s: 2250.0 * TERA,
        peak_fp16_flops_per_s: 2250.0 * TERA,
        peak_fp8_flops_per_s: Some(4500.0 * TERA),
        // HGX B300 specifications: FP4 tensor core 108 PFLOP/s dense for 8 GPUs (144 with
        // sparsity).
        peak_fp4_flops_per_s: Some(13500.0 * TERA),
        matmul_efficiency: 1769.0 / 2250.0,
        fp8_matmul_efficiency: Some(3353.3 / 4500.0),
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 288.0 * GB,
        memory_bandwidth_bytes_per_s: 8000.0 * GB,
        sms: 160,
    }
}

/// B300 in a GB300 superchip (NVIDIA GB300 NVL72 specifications, rack figures with sparsity
/// ÷ 72 ÷ 2 for dense: FP16/BF16 360 PFLOP/s → 2.5 PFLOP/s, FP8 720 PFLOP/s → 5 PFLOP/s per
/// GPU; HBM3e 576 TB/s ÷ 72 = 8 TB/s); 288 GB and 160 SMs as [`b300`] (Blackwell Ultra blog).
pub fn gb300() -> GpuSpec {
    GpuSpec {
        name: "B300-GB300-288GB".into(),
        peak_bf16_flops_per_s: 2500.0 * TERA,
        peak_fp16_flops_per_s: 2500.0 * TERA,
        peak_fp8_flops_per_s: Some(5000.0 * TERA),
        // GB300 NVL72 specifications: FP4 1,080 PFLOP/s dense per rack (1,440 with
        // sparsity); the Blackwell Ultra blog's 15 PFLOP/s dense NVFP4 per GPU.
        peak_fp4_flops_per_s: Some(15000.0 * TERA),
        ..b300()
    }
}

/// L40S (PCIe, Ada). NVIDIA L40S datasheet: BF16/FP16 tensor 362.05 TFLOP/s dense (733 with
/// sparsity), FP8 733 TFLOP/s dense (1,466 with sparsity), 48 GB GDDR6 at 864 GB/s; 142 SMs
/// (18,176 CUDA cores at Ada's 128 per SM, NVIDIA Ada GPU architecture whitepaper). No public
/// MAMF measurement: assumes H100's 80.1 %, and Hopper's sustained clock.
pub fn l40s() -> GpuSpec {
    GpuSpec {
        name: "L40S-48GB".into(),
        peak_bf16_flops_per_s: 362.05 * TERA,
        peak_fp16_flops_per_s: 362.05 * TERA,
        peak_fp8_flops_per_s: Some(733.0 * TERA),
        peak_fp4_flops_per_s: None,
        matmul_efficiency: 0.801,
        fp8_matmul_efficiency: None,
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 48.0 * GIB,
        memory_bandwidth_bytes_per_s: 864.0 * GB,
        sms: 142,
    }
}

/// AMD Instinct MI300X (OAM). AMD Instinct MI300X datasheet: FP16/BF16 1,307.4 TFLOP/s dense
/// (2,614.9 with sparsity), FP8 2,614.9 TFLOP/s dense, 192 GB HBM3 at 5.3 TB/s, 304 compute
/// units (the counterpart of SMs for wave quantisation). MAMF 781.9 TFLOP/s (Bekman,
/// ml-engineering, MAMF table v1, ROCm 6.2; its v2 table, with cache resets, has 668.4) over
/// 1,307.4 = 59.8 %. No public sustained-clock measurement: assumes Hopper's.
pub fn mi300x() -> GpuSpec {
    GpuSpec {
        name: "MI300X-192GB".into(),
        peak_bf16_flops_per_s: 1307.4 * TERA,
        peak_fp16_flops_per_s: 1307.4 * TERA,
        peak_fp8_flops_per_s: Some(2614.9 * TERA),
        // MI300X has no FP4 tensor cores (CDNA 3); MX formats came with CDNA 4.
        peak_fp4_flops_per_s: None,
        matmul_efficiency: 781.9 / 1307.4,
        fp8_matmul_efficiency: None,
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 192.0 * GIB,
        memory_bandwidth_bytes_per_s: 5300.0 * GB,
        sms: 304,
    }
}

/// V100 SXM2 32 GB. NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor, 900 GB/s, 32 GB; no
/// bf16 (bf16 requests run at the fp16 rate, as the planner's stand-in), 80 SMs. No public
/// MAMF measurement was available: assumes H100's measured 80.1 %.
pub fn v100_32g() -> GpuSpec {
    GpuSpec {
        name: "V100-SXM2-32GB".into(),
        peak_bf16_flops_per_s: 125.0 * TERA,
        peak_fp16_flops_per_s: 125.0 * TERA,
        peak_fp8_flops_per_s: None,
        peak_fp4_flops_per_s: None,
        matmul_efficiency: 0.801,
        fp8_matmul_efficiency: None,
        // No public measurement: assumes Hopper's.
        sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
        memory_bytes: 32.0 * GIB,
        memory_bandwidth_bytes_per_s: 900.0 * GB,
        sms: 80,
    }
}

fn dgx(
    name: &str,
    gpu: GpuSpec,
    nvlink_bidir_gb_per_s: f64,
    nics: u64,
    nic_gbit: f64,
    host_link_gb_per_s: f64,
    host_memory: Option<HostMemorySpec>,
) -> ClusterSpec {
    ClusterSpec {
        name: name.into(),
        gpu,
        gpus_per_node: 8,
        intra_node: nvlink(nvlink_bidir_gb_per_s),
        inter_node: infiniband(nics, nic_gbit, 8),
        nics_per_node: nics,
        memory_reserve_bytes: DEFAULT_RESERVE_BYTES,
        host_link_bytes_per_s: Some(host_link_gb_per_s * GB),
        host_memory,
        host_cpu: HostCpu::X86,
    }
}

/// An NVL72 rack as one NVLink domain: 72 GPUs on one NVLink5 switch fabric at 1.8 TB/s
/// bidirectional each, one NIC of `nic_gbit` per GPU, each GPU on NVLink-C2C to its Grace
/// (36 Grace CPUs host the rack's processes).
fn nvl72(
    name: &str,
    gpu: GpuSpec,
    nic_gbit: f64,
    host_memory: Option<HostMemorySpec>,
) -> ClusterSpec {
    ClusterSpec {
        name: name.into(),
        gpu,
        gpus_per_node: 72,
        intra_node: nvlink(1800.0),
        inter_node: infiniband(72, nic_gbit, 72),
        nics_per_node: 72,
        memory_reserve_bytes: DEFAULT_RESERVE_BYTES,
        host_link_bytes_per_s: Some(NVLINK_C2C_PER_GPU_GB_PER_S * GB),
        host_memory,
        host_cpu: HostCpu::Grace,
    }
}

/// PCIe per direction of an x16 link (PCI-SIG: 16 GT/s per lane for Gen4, 32 GT/s for Gen5,
/// 128b/130b encoding): the GPU datasheets' "PCIe Gen4 64 GB/s" (A100) and "PCIe Gen5
/// 128 GB/s" (H100, H200) bidirectional, halved.
const PCIE_GEN4_X16_GB_PER_S: f64 = 32.0;
const PCIE_GEN5_X16_GB_PER_S: f64 = 64.0;
/// NVLink-C2C between a Grace CPU and its Blackwell GPUs: 900 GB/s bidirectional per
/// superchip (NVIDIA GB200 NVL72 and GB300 NVL72 specifications), a Grace serving two GPUs,
/// so 900 / 2 / 2 per GPU per direction.
const NVLINK_C2C_PER_GPU_GB_PER_S: f64 = 900.0 / 2.0 / 2.0;

/// DRAM bandwidth of `sockets` CPUs with `channels` memory channels each at `mega_transfers`
/// MT/s, 8 bytes per transfer (a 64-bit channel).
fn dram_bandwidth(sockets: f64, channels: f64, mega_transfers: f64) -> f64 {
    sockets * channels * mega_transfers * 1e6 * 8.0
}

/// DGX A100's host: 2 × AMD EPYC 7742 (DGX A100 datasheet), each 8 channels of DDR4-3200
/// (AMD EPYC 7742 specifications), 409.6 GB/s; `tb` of DRAM (the datasheet: 1 TB with
/// 40 GB GPUs, 2 TB with 80 GB GPUs).
fn dgx_a100_host(tb: f64) -> Option<HostMemorySpec> {
    Some(HostMemorySpec {
        bytes: tb * 1e12,
        bandwidth_bytes_per_s: dram_bandwidth(2.0, 8.0, 3200.0),
    })
}

/// DGX H100 and DGX H200's host: 2 TB of DDR5 (DGX H100 and H200 datasheets) on 2 × Xeon
/// Platinum 8480C, 8 channels each (Intel Xeon Platinum 8480+ specifications), populated two
/// DIMMs per channel (32 × 64 GB, DGX H100 user guide), where Sapphire Rapids runs DDR5 at
/// 4,400 MT/s instead of 4,800: 563.2 GB/s.
fn dgx_h100_host() -> Option<HostMemorySpec> {
    Some(HostMemorySpec {
        bytes: 2e12,
        bandwidth_bytes_per_s: dram_bandwidth(2.0, 8.0, 4400.0),
    })
}

/// GB200 NVL72's hosts, the rack's 36 Grace CPUs: up to 17 TB of LPDDR5X at up to 18.4 TB/s
/// in all (NVIDIA GB200 NVL72 specifications, "CPU Memory | Bandwidth").
fn gb200_nvl72_host() -> Option<HostMemorySpec> {
    Some(HostMemorySpec {
        bytes: 17e12,
        bandwidth_bytes_per_s: 18.4e12,
    })
}

/// Names of the built-in cluster presets.
pub const CLUSTER_PRESETS: [&str; 13] = [
    "dgx-a100-80g",
    "dgx-a100-40g",
    "dgx-h100",
    "grand-teton-h100",
    "hgx-h800",
    "dgx-h200",
    "dgx-b200",
    "dgx-b300",
    "gb200-nvl72",
    "gb300-nvl72",
    "dgx-v100",
    "l40s-8",
    "mi300x-8",
];

/// A built-in cluster by name (case-insensitive; `h200`, `a100` … accepted as aliases).
pub fn cluster_preset(name: &str) -> Result<ClusterSpec> {
    let key = name.to_ascii_lowercase();
    let spec = match key.as_str() {
        // Selene / DGX A100: NVLink3 600 GB/s bidirectional via NVSwitch; 8 × 200 Gb/s HDR
        // InfiniBand compute NICs (DGX A100 user guide; SC'21 paper §5).
        "dgx-a100-80g" | "dgx-a100" | "a100" | "selene" => dgx(
            "dgx-a100-80g",
            a100_80g(),
            600.0,
            8,
            200.0,
            PCIE_GEN4_X16_GB_PER_S,
            dgx_a100_host(2.0),
        ),
        // DGX A100 with 40 GB GPUs (the original DGX A100 320 GB): the same NVLink3 and 8 ×
        // 200 Gb/s HDR compute NICs (DGX A100 datasheet).
        "dgx-a100-40g" | "a100-40g" => dgx(
            "dgx-a100-40g",
            a100_40g(),
            600.0,
            8,
            200.0,
            PCIE_GEN4_X16_GB_PER_S,
            dgx_a100_host(1.0),
        ),
        // DGX H100: NVLink4 900 GB/s bidirectional; 8 × 400 Gb/s ConnectX-7 (DGX H100 datasheet).
        "dgx-h100" | "h100" => dgx(
            "dgx-h100",
            h100(),
            900.0,
            8,
            400.0,
            PCIE_GEN5_X16_GB_PER_S,
            dgx_h100_host(),
        ),
        // Meta's Grand Teton (OCP 2022): 8 H100 fully connected by NVLink (H100 SXM:
        // NVLink4, 900 GB/s bidirectional), a backend RDMA network of 400 Gb/s per GPU
        // (torchtitan's benchmark documents, "Hardware"), the GPUs at 500 W
        // (`h100_grand_teton`).
        "grand-teton-h100" | "grand-teton" => dgx(
            "grand-teton-h100",
            h100_grand_teton(),
            900.0,
            8,
            400.0,
            PCIE_GEN5_X16_GB_PER_S,
            None,
        ),
        // HGX H800, as DeepSeek-V3 trained on it (DeepSeek-V3 technical report, arXiv
        // 2412.19437, §3.1 and §3.2.2): 8 GPUs on NVLink/NVSwitch at 400 GB/s bidirectional
        // (H800 datasheet; the report measures 160 GB/s per direction, which the NVLink
        // collective efficiency reproduces), one 400 Gb/s InfiniBand NIC per GPU ("IB
        // (50 GB/s)").
        "hgx-h800" | "h800" | "dgx-h800" => dgx(
            "hgx-h800",
            h800(),
            400.0,
            8,
            400.0,
            PCIE_GEN5_X16_GB_PER_S,
            None,
        ),
        // DGX H200: same NVLink4 and 8 × 400 Gb/s network as DGX H100 (DGX H200 datasheet).
        "dgx-h200" | "h200" => dgx(
            "dgx-h200",
            h200(),
            900.0,
            8,
            400.0,
            PCIE_GEN5_X16_GB_PER_S,
            dgx_h100_host(),
        ),
        // DGX B200: NVLink5 1.8 TB/s bidirectional; 8 × 400 Gb/s ConnectX-7 (DGX B200 datasheet).
        "dgx-b200" | "b200" => {
            // The host's PCIe 5.0 (DGX B200 datasheet: 2 × Xeon Platinum 8570, a
            // PCIe 5.0 part) bounds the link.
            // Its DRAM's population (2 TB, configurable to 4 TB) and so its speed are not
            // published: no host memory figures.
            dgx(
                "dgx-b200",
                b200(),
                1800.0,
                8,
                400.0,
                PCIE_GEN5_X16_GB_PER_S,
                None,
            )
        }
        // GB200 NVL72: 72 GPUs in 18 trays on one NVLink5 switch fabric at 1.8 TB/s
        // bidirectional per GPU (130 TB/s per rack), one 400 Gb/s ConnectX-7 per GPU (GB200
        // NVL72 datasheet). The rack is one NVLink domain, so it is the "node" here: groups
        // inside it run at NVLink rates, across racks at the per-GPU NIC share.
        "gb200-nvl72" | "gb200" | "nvl72" | "dgx-gb200" => {
            nvl72("gb200-nvl72", gb200(), 400.0, gb200_nvl72_host())
        }
        // GB300 NVL72: the same rack as GB200 NVL72 — 72 GPUs in 18 trays of 4 on one NVLink5
        // switch fabric (9 NVSwitch trays, 130 TB/s, 1.8 TB/s bidirectional per GPU) — with
        // B300 GPUs and one 800 Gb/s ConnectX-8 per GPU (NVIDIA GB300 NVL72 specifications;
        // NVIDIA Enterprise Reference Architecture "NVL72 AI factory", components: 4 ConnectX-8
        // per 4-GPU compute tray). The rack is one NVLink domain, the "node" here.
        "gb300-nvl72" | "gb300" | "dgx-gb300" => {
            // Its Grace memory's figures are not read from a specification here: none.
            nvl72("gb300-nvl72", gb300(), 800.0, None)
        }
        // DGX B300: 8 B300 on NVLink5 at 1.8 TB/s bidirectional per GPU (14.4 TB/s total);
        // 8 single-port ConnectX-8 VPI at up to 800 Gb/s (DGX B300 datasheet; HGX B300
        // specifications: 1.6 TB/s networking for 8 GPUs).
        "dgx-b300" | "b300" | "hgx-b300" => {
            // The host's PCIe 5.0 (DGX B300 datasheet: 2 × Xeon 6776P, a PCIe 5.0 part).
            dgx(
                "dgx-b300",
                b300(),
                1800.0,
                8,
                800.0,
                PCIE_GEN5_X16_GB_PER_S,
                None,
            )
        }
        // 8 × L40S on PCIe Gen4, no NVLink (L40S datasheet). Network: AWS EC2 g6e.48xlarge
        // (8 × L40S, 400 Gb/s network bandwidth with EFA; EC2 accelerated-computing instance
        // specifications), taken as the published 8 × L40S node.
        "l40s-8" | "l40s" | "g6e" => ClusterSpec {
            name: "l40s-8".into(),
            gpu: l40s(),
            gpus_per_node: 8,
            intra_node: pcie_gen4_x16(),
            inter_node: infiniband(1, 400.0, 8),
            nics_per_node: 1,
            memory_reserve_bytes: DEFAULT_RESERVE_BYTES,
            // L40S datasheet: PCIe Gen4 x16, 64 GB/s bidirectional.
            host_link_bytes_per_s: Some(PCIE_GEN4_X16_GB_PER_S * GB),
            host_memory: None,
            // EC2 g6e instances: AMD EPYC (3rd generation) hosts.
            host_cpu: HostCpu::X86,
        },
        // 8 × MI300X on Infinity Fabric (a full xGMI mesh, see `xgmi_mi300x`). Network: Azure
        // ND MI300X v5 (8 × MI300X, one 400 Gb/s Quantum-2 ConnectX-7 InfiniBand per GPU,
        // 3.2 Tb/s per VM; Azure ND MI300X v5 size series documentation).
        "mi300x-8" | "mi300x" | "nd-mi300x-v5" => ClusterSpec {
            name: "mi300x-8".into(),
            gpu: mi300x(),
            gpus_per_node: 8,
            intra_node: xgmi_mi300x(),
            inter_node: infiniband(8, 400.0, 8),
            nics_per_node: 8,
            memory_reserve_bytes: DEFAULT_RESERVE_BYTES,
            // AMD Instinct MI300X datasheet: PCIe Gen5 x16, 128 GB/s bidirectional.
            host_link_bytes_per_s: Some(PCIE_GEN5_X16_GB_PER_S * GB),
            host_memory: None,
            // Azure ND MI300X v5: Intel Xeon (Sapphire Rapids) hosts.
            host_cpu: HostCpu::X86,
        },
        // No 8 × RTX 4090 preset: the GPU and PCIe numbers are public (Ada whitepaper: 165.2
        // TFLOP/s dense bf16 with FP32 accumulation, 330.3 fp8, 24 GB at 1,008 GB/s, 128 SMs;
        // no peer-to-peer over PCIe), but no published reference system fixes such a server's
        // network; write a cluster TOML with `nic_gbit_per_s` for yours.
        // DGX-1 (V100): NVLink2, 6 links × 50 GB/s bidirectional = 300 GB/s per GPU; 4 × 100 Gb/s
        // EDR InfiniBand per node (DGX-1 datasheet).
        "dgx-v100" | "dgx-1" | "v100" => {
            // V100 SXM2 datasheet: PCIe Gen3, 32 GB/s bidirectional.
            dgx("dgx-v100", v100_32g(), 300.0, 4, 100.0, 16.0, None)
        }
        _ => {
            return Err(SpecError::for_field(
                "cluster",
                format!("unknown cluster preset `{name}`"),
                format!(
                    "{}, or a path to a cluster TOML file",
                    CLUSTER_PRESETS.join(", ")
                ),
            ))
        }
    };
    Ok(spec)
}

#[cfg(test)]
mod tests;
