//! The cluster TOML format: a `base` preset and the keys that override it, each number
//! checked against its physical range in the key's own unit before any conversion.
//!
//! Knows the format and its limits; the hardware facts and presets are the parent's.

use serde::Deserialize;

use super::*;
/// The cluster TOML format: an optional `base` preset, then any field to override.
/// Units are in the key names (GB = 1e9 bytes, GiB = 2^30 bytes).
///
/// ```toml
/// name = "my-h100-roce"
/// base = "dgx-h100"          # optional: start from a preset
/// gpus_per_node = 8
/// nics_per_node = 8
/// nic_gbit_per_s = 200        # per NIC
/// inter_node_latency_us = 8
/// [gpu]
/// name = "H100"
/// peak_bf16_tflops = 989.4
/// memory_gib = 80
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterToml {
    name: Option<String>,
    base: Option<String>,
    gpus_per_node: Option<i64>,
    nvlink_bidirectional_gb_per_s: Option<f64>,
    nvlink_latency_us: Option<f64>,
    nics_per_node: Option<i64>,
    nic_gbit_per_s: Option<f64>,
    inter_node_latency_us: Option<f64>,
    memory_reserve_gib: Option<f64>,
    host_link_gb_per_s: Option<f64>,
    host_memory_gb: Option<f64>,
    host_memory_bandwidth_gb_per_s: Option<f64>,
    host_cpu: Option<String>,
    gpu: Option<GpuToml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuToml {
    name: Option<String>,
    peak_bf16_tflops: Option<f64>,
    peak_fp16_tflops: Option<f64>,
    peak_fp8_tflops: Option<f64>,
    peak_fp4_tflops: Option<f64>,
    matmul_efficiency: Option<f64>,
    fp8_matmul_efficiency: Option<f64>,
    sustained_clock_ratio: Option<f64>,
    memory_gib: Option<f64>,
    memory_gb: Option<f64>,
    memory_bandwidth_gb_per_s: Option<f64>,
    sms: Option<i64>,
}

const CLUSTER_TOML_KEYS: &str = "name, base, gpus_per_node, nvlink_bidirectional_gb_per_s, \
nvlink_latency_us, nics_per_node, nic_gbit_per_s, inter_node_latency_us, memory_reserve_gib, \
host_link_gb_per_s, host_memory_gb, host_memory_bandwidth_gb_per_s, host_cpu, [gpu] name, peak_bf16_tflops, peak_fp16_tflops, peak_fp8_tflops, peak_fp4_tflops, matmul_efficiency, \
fp8_matmul_efficiency, sustained_clock_ratio, memory_gib, memory_gb, memory_bandwidth_gb_per_s, sms";

/// The largest value of each positive cluster TOML number, in the key's own unit: far
/// beyond any machine (NVLink 5 is 1.8 TB/s per GPU, a 2025 NIC 800 Gb/s, B300 15 PFLOP/s
/// of FP4, 288 GB of HBM at 8 TB/s), so that nothing sized by them overflows.
fn max_of(field: &str) -> f64 {
    match field {
        // Microseconds: one second.
        "nvlink_latency_us" | "inter_node_latency_us" => 1e6,
        // GB/s, Gb/s.
        "nvlink_bidirectional_gb_per_s"
        | "gpu.memory_bandwidth_gb_per_s"
        | "host_memory_bandwidth_gb_per_s"
        | "host_link_gb_per_s" => 1e6,
        "nic_gbit_per_s" => 1e7,
        // TFLOP/s: 100 PFLOP/s per GPU.
        f if f.starts_with("gpu.peak_") => 1e5,
        // GiB / GB: 100 TB per GPU.
        "gpu.memory_gib" | "gpu.memory_gb" => 1e5,
        // GB of host memory per node: a petabyte.
        "host_memory_gb" => 1e6,
        _ => f64::MAX,
    }
}

/// The smallest value of each positive cluster TOML number, in the key's own unit: far
/// below any machine (a 2010 PCIe 2 x1 lane moves 0.5 GB/s, a Jetson Nano's GPU does 0.5
/// TFLOP/s, DRAM answers within microseconds), so that no time derived from them overflows
/// to infinity.
fn min_of(field: &str) -> f64 {
    match field {
        // Microseconds: one nanosecond.
        "nvlink_latency_us" | "inter_node_latency_us" => 1e-3,
        // GB/s, Gb/s: one MB/s (Mb/s).
        "nvlink_bidirectional_gb_per_s"
        | "gpu.memory_bandwidth_gb_per_s"
        | "nic_gbit_per_s"
        | "host_memory_bandwidth_gb_per_s"
        | "host_link_gb_per_s" => 1e-3,
        // TFLOP/s: one GFLOP/s.
        f if f.starts_with("gpu.peak_") => 1e-3,
        // GiB / GB: one MiB (MB).
        "gpu.memory_gib" | "gpu.memory_gb" | "host_memory_gb" => 1e-3,
        _ => f64::MIN_POSITIVE,
    }
}

/// `v` of `field`, which must lie between [`min_of`] and [`max_of`] the field, checked in
/// the key's unit before any conversion.
fn positive_f(source: &str, field: &str, v: f64) -> Result<f64> {
    let (min, max) = (min_of(field), max_of(field));
    if v.is_finite() && v >= min && v <= max {
        Ok(v)
    } else {
        let (problem, allowed) = match (min > f64::MIN_POSITIVE, max < f64::MAX) {
            (true, true) => (
                format!("must be a number from {min:e} to {max:e}"),
                format!("numbers ≥ {min:e} and ≤ {max:e}"),
            ),
            (false, true) => (
                format!("must be a positive number at most {max:e}"),
                format!("numbers > 0 and ≤ {max:e}"),
            ),
            (true, false) => (
                format!("must be a number of at least {min:e}"),
                format!("numbers ≥ {min:e}"),
            ),
            (false, false) => ("must be a positive number".into(), "numbers > 0".into()),
        };
        Err(SpecError::new(
            source,
            field,
            format!("{problem}, got {}", shown(v)),
            allowed,
        ))
    }
}

/// `v` as a person would write it: plain between 1e-4 and 1e15, else with an exponent
/// (1e308, not 309 digits).
pub fn shown(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// `v` of `field` in [`lo`, 1]: a ratio with a physical floor.
fn ratio_f(source: &str, field: &str, v: f64, lo: f64, why: &str) -> Result<f64> {
    if (lo..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(SpecError::new(
            source,
            field,
            format!("must be in [{lo}, 1] ({why}), got {}", shown(v)),
            format!("{lo} ≤ x ≤ 1"),
        ))
    }
}

/// A TOML error as a spec error: the key it is about (an unknown key as written, else the
/// `table.key` on the line the error points at) and, in the problem, that line and column.
fn toml_error(text: &str, source: &str, e: &toml::de::Error) -> SpecError {
    let msg = e.message().trim().replace('\n', " ");
    let at = e.span().map(|s| s.start.min(text.len()));
    let located = at.map(|at| {
        let before = &text[..at];
        let line = before.matches('\n').count() + 1;
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[start..].chars().count() + 1;
        let table = before[..start]
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('['))
            .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
        let this = text[start..].lines().next().unwrap_or_default();
        let key = this
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty() && !k.starts_with('[') && !k.starts_with('#'))
            .map(|k| match &table {
                Some(t) => format!("{t}.{k}"),
                None => k,
            });
        (line, column, key)
    });
    let unknown = msg
        .starts_with("unknown field")
        .then(|| msg.split('`').nth(1).map(str::to_string))
        .flatten();
    let field = unknown
        .or_else(|| located.as_ref().and_then(|l| l.2.clone()))
        .unwrap_or_else(|| "(document)".into());
    let problem = match located {
        Some((line, column, _)) => format!("line {line}, column {column}: {msg}"),
        None => msg,
    };
    SpecError::new(source, field, problem, CLUSTER_TOML_KEYS)
}

/// Parses a cluster TOML document; `source` names it in errors.
pub fn cluster_from_toml(text: &str, source: &str) -> Result<ClusterSpec> {
    let doc: ClusterToml = toml::from_str(text).map_err(|e| toml_error(text, source, &e))?;
    let mut c = match &doc.base {
        Some(b) => cluster_preset(b).map_err(|e| SpecError {
            source: source.into(),
            field: "base".into(),
            ..e
        })?,
        None => {
            let g = doc.gpu.as_ref();
            let missing = |what: &str| {
                SpecError::new(
                    source,
                    what,
                    "is required when no `base` preset is given",
                    format!(
                        "a number, or `base = \"{}\"`",
                        CLUSTER_PRESETS.join("\" | \"")
                    ),
                )
            };
            let bf16 = g
                .and_then(|g| g.peak_bf16_tflops)
                .ok_or_else(|| missing("gpu.peak_bf16_tflops"))?;
            let mem = match g.map(|g| (g.memory_gib, g.memory_gb)) {
                Some((Some(v), _)) => positive_f(source, "gpu.memory_gib", v)? * GIB,
                Some((None, Some(v))) => positive_f(source, "gpu.memory_gb", v)? * GB,
                _ => return Err(missing("gpu.memory_gib")),
            };
            let bw = g
                .and_then(|g| g.memory_bandwidth_gb_per_s)
                .ok_or_else(|| missing("gpu.memory_bandwidth_gb_per_s"))?;
            let gpn = doc.gpus_per_node.ok_or_else(|| missing("gpus_per_node"))?;
            let nvl = doc
                .nvlink_bidirectional_gb_per_s
                .ok_or_else(|| missing("nvlink_bidirectional_gb_per_s"))?;
            let nics = doc.nics_per_node.ok_or_else(|| missing("nics_per_node"))?;
            let nic = doc
                .nic_gbit_per_s
                .ok_or_else(|| missing("nic_gbit_per_s"))?;
            let gpn = crate::error::positive(source, "gpus_per_node", gpn)?;
            let nics = crate::error::positive(source, "nics_per_node", nics)?;
            ClusterSpec {
                name: "custom".into(),
                gpu: GpuSpec {
                    name: "custom".into(),
                    peak_bf16_flops_per_s: positive_f(source, "gpu.peak_bf16_tflops", bf16)? * TERA,
                    peak_fp16_flops_per_s: bf16 * TERA,
                    peak_fp8_flops_per_s: None,
                    peak_fp4_flops_per_s: None,
                    // H100's measured MAMF fraction (see `h100`) unless given.
                    matmul_efficiency: 0.801,
                    fp8_matmul_efficiency: None,
                    sustained_clock_ratio: HOPPER_SUSTAINED_CLOCK_RATIO,
                    memory_bytes: mem,
                    memory_bandwidth_bytes_per_s: positive_f(
                        source,
                        "gpu.memory_bandwidth_gb_per_s",
                        bw,
                    )? * GB,
                    sms: 132,
                },
                gpus_per_node: gpn,
                intra_node: nvlink(positive_f(source, "nvlink_bidirectional_gb_per_s", nvl)?),
                inter_node: infiniband(nics, positive_f(source, "nic_gbit_per_s", nic)?, gpn),
                nics_per_node: nics,
                memory_reserve_bytes: DEFAULT_RESERVE_BYTES,
                host_link_bytes_per_s: None,
                host_memory: None,
                host_cpu: HostCpu::X86,
            }
        }
    };
    // Overrides on top of the base (or the fields just read, which is harmless).
    if let Some(n) = doc.name {
        c.name = n;
    }
    let base_gpus = c.gpus_per_node;
    if let Some(v) = doc.gpus_per_node {
        c.gpus_per_node = crate::error::positive(source, "gpus_per_node", v)?;
    }
    if let Some(v) = doc.nvlink_bidirectional_gb_per_s {
        c.intra_node.bandwidth_bytes_per_s =
            positive_f(source, "nvlink_bidirectional_gb_per_s", v)? / 2.0 * GB;
    }
    if let Some(v) = doc.nvlink_latency_us {
        c.intra_node.latency_s = positive_f(source, "nvlink_latency_us", v)? * 1e-6;
    }
    if let Some(v) = doc.nics_per_node {
        c.nics_per_node = crate::error::positive(source, "nics_per_node", v)?;
    }
    let per_nic = match doc.nic_gbit_per_s {
        Some(v) => positive_f(source, "nic_gbit_per_s", v)? / 8.0 * GB,
        None => {
            c.inter_node.bandwidth_bytes_per_s * c.gpus_per_node as f64 / c.nics_per_node as f64
        }
    };
    c.inter_node.bandwidth_bytes_per_s = per_nic * c.nics_per_node as f64 / c.gpus_per_node as f64;
    if let Some(v) = doc.inter_node_latency_us {
        c.inter_node.latency_s = positive_f(source, "inter_node_latency_us", v)? * 1e-6;
    }
    if let Some(v) = doc.memory_reserve_gib {
        // Checked in GiB, before the conversion (1e308 GiB is inf bytes); against the GPU's
        // memory once that is known, below.
        if !(v.is_finite() && (0.0..=1e5).contains(&v)) {
            return Err(SpecError::new(
                source,
                "memory_reserve_gib",
                format!(
                    "must be ≥ 0 and less than the GPU's memory, got {}",
                    shown(v)
                ),
                "0 ≤ x < the GPU's memory in GiB",
            ));
        }
        c.memory_reserve_bytes = v * GIB;
    }
    if let Some(v) = doc.host_cpu {
        c.host_cpu = v.parse::<HostCpu>().map_err(|_| {
            SpecError::new(
                source,
                "host_cpu",
                format!("`{v}` is not a host CPU plait knows"),
                HostCpu::allowed(),
            )
        })?;
    }
    if let Some(v) = doc.host_link_gb_per_s {
        // GPU↔host bandwidth per direction (activation offloading's copies).
        c.host_link_bytes_per_s = Some(positive_f(source, "host_link_gb_per_s", v)? * GB);
    }
    // The node's host memory (optimizer offloading's state and CPU step): both figures, or
    // one over the base's other.
    let host_bytes = doc
        .host_memory_gb
        .map(|v| positive_f(source, "host_memory_gb", v).map(|v| v * GB))
        .transpose()?;
    let host_bw = doc
        .host_memory_bandwidth_gb_per_s
        .map(|v| positive_f(source, "host_memory_bandwidth_gb_per_s", v).map(|v| v * GB))
        .transpose()?;
    // A node of another size than the base's does not have the base's host memory.
    if c.gpus_per_node != base_gpus {
        c.host_memory = None;
    }
    if host_bytes.is_some() || host_bw.is_some() {
        let base = c.host_memory;
        let (Some(bytes), Some(bandwidth_bytes_per_s)) = (
            host_bytes.or(base.map(|h| h.bytes)),
            host_bw.or(base.map(|h| h.bandwidth_bytes_per_s)),
        ) else {
            let missing = if host_bytes.is_none() {
                "host_memory_gb"
            } else {
                "host_memory_bandwidth_gb_per_s"
            };
            return Err(SpecError::new(
                source,
                missing,
                "missing: host memory needs both its size and its bandwidth, and the base \
                 gives none"
                    .to_string(),
                "host_memory_gb and host_memory_bandwidth_gb_per_s, per node",
            ));
        };
        c.host_memory = Some(crate::cluster::HostMemorySpec {
            bytes,
            bandwidth_bytes_per_s,
        });
    }
    if let Some(g) = doc.gpu {
        if let Some(v) = g.name {
            c.gpu.name = v;
        }
        if let Some(v) = g.peak_bf16_tflops {
            c.gpu.peak_bf16_flops_per_s = positive_f(source, "gpu.peak_bf16_tflops", v)? * TERA;
        }
        if let Some(v) = g.peak_fp16_tflops {
            c.gpu.peak_fp16_flops_per_s = positive_f(source, "gpu.peak_fp16_tflops", v)? * TERA;
        }
        if let Some(v) = g.peak_fp8_tflops {
            c.gpu.peak_fp8_flops_per_s = Some(positive_f(source, "gpu.peak_fp8_tflops", v)? * TERA);
        }
        if let Some(v) = g.peak_fp4_tflops {
            c.gpu.peak_fp4_flops_per_s = Some(positive_f(source, "gpu.peak_fp4_tflops", v)? * TERA);
        }
        if let Some(v) = g.matmul_efficiency {
            c.gpu.matmul_efficiency = ratio_f(
                source,
                "gpu.matmul_efficiency",
                v,
                0.01,
                "a large GEMM reaches at least 1 % of the tensor peak",
            )?;
        }
        if let Some(v) = g.fp8_matmul_efficiency {
            c.gpu.fp8_matmul_efficiency = Some(ratio_f(
                source,
                "gpu.fp8_matmul_efficiency",
                v,
                0.01,
                "a large fp8 GEMM reaches at least 1 % of the fp8 tensor peak",
            )?);
        }
        if let Some(v) = g.sustained_clock_ratio {
            c.gpu.sustained_clock_ratio = ratio_f(
                source,
                "gpu.sustained_clock_ratio",
                v,
                0.1,
                "a power-capped GPU keeps at least a tenth of its boost clock",
            )?;
        }
        if let Some(v) = g.memory_gib {
            c.gpu.memory_bytes = positive_f(source, "gpu.memory_gib", v)? * GIB;
        }
        if let Some(v) = g.memory_gb {
            c.gpu.memory_bytes = positive_f(source, "gpu.memory_gb", v)? * GB;
        }
        if let Some(v) = g.memory_bandwidth_gb_per_s {
            c.gpu.memory_bandwidth_bytes_per_s =
                positive_f(source, "gpu.memory_bandwidth_gb_per_s", v)? * GB;
        }
        if let Some(v) = g.sms {
            c.gpu.sms = crate::error::positive(source, "gpu.sms", v)?;
            if c.gpu.sms > 1 << 20 {
                return Err(SpecError::new(
                    source,
                    "gpu.sms",
                    format!("{v} streaming multiprocessors are more than any GPU has"),
                    "1 to 1048576",
                ));
            }
        }
    }
    if c.memory_reserve_bytes >= c.gpu.memory_bytes {
        let (field, allowed) = match doc.memory_reserve_gib {
            Some(_) => (
                "memory_reserve_gib",
                format!("0 ≤ x < {}", c.gpu.memory_bytes / GIB),
            ),
            None => (
                "gpu.memory_gib",
                format!(
                    "more than the {} GiB reserved",
                    c.memory_reserve_bytes / GIB
                ),
            ),
        };
        return Err(SpecError::new(
            source,
            field,
            format!(
                "a reserve of {} GiB leaves nothing of the GPU's {} GiB",
                c.memory_reserve_bytes / GIB,
                c.gpu.memory_bytes / GIB
            ),
            allowed,
        ));
    }
    Ok(c)
}
