//! Device sets: parts (compute per precision, memory, memory bandwidth), the devices made
//! of them and the links between devices (any graph), with presets for common parts, each
//! number next to its public source, and a TOML format for anything else.
//!
//! ```toml
//! name = "edge-cloud"
//!
//! [[device]]
//! name = "orin"                   # with count = 4: orin-0 … orin-3
//! part = "jetson-agx-orin-64gb"   # a preset part; any number below overrides it
//! count = 4
//!
//! [[device]]
//! name = "l4"
//! part = "l4"
//! reserved_gb = 2
//!
//! [[device]]                      # a part described in full
//! name = "my-npu"
//! memory_gb = 16
//! memory_bandwidth_gb_per_s = 100
//! [device.compute.int8]
//! peak_tflops = 50
//! efficiency = 0.5
//!
//! [[lan]]                         # every pair of the members is linked alike
//! members = ["orin"]              # devices or device groups
//! gbit_per_s = 1
//! latency_ms = 0.3
//!
//! [[link]]                        # every member of `a` to every member of `b`
//! a = "orin"
//! b = "l4"
//! gbit_per_s = 0.1                # or gb_per_s (bytes)
//! latency_ms = 25
//! ```
//!
//! Units are in the key names: GB = 10⁹ bytes, `gbit_per_s` = 10⁹ bits per second.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use plait_spec::SpecError;

const TERA: f64 = 1e12;
const GB: f64 = 1e9;

/// Most devices a set may expand to.
pub const MAX_SET_DEVICES: usize = crate::problem::MAX_DEVICES;

/// Numeric format of weights and GEMM inputs for inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
    Fp8,
    Int8,
    /// Weight-only 4-bit: weights stored in 4 bits, GEMMs run at the fp16 rate.
    Int4,
}

/// Every precision keyword.
pub const PRECISIONS: &str = "fp32, fp16, bf16, fp8, int8, int4";

impl Precision {
    pub fn keyword(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
            Precision::Int4 => "int4",
        }
    }

    /// Bytes of one stored weight.
    pub fn weight_bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Fp16 | Precision::Bf16 => 2.0,
            Precision::Fp8 | Precision::Int8 => 1.0,
            Precision::Int4 => 0.5,
        }
    }

    /// The compute rate the GEMMs run at (weight-only int4 dequantises to fp16).
    pub fn compute(self) -> Precision {
        match self {
            Precision::Int4 => Precision::Fp16,
            p => p,
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "fp32" => Precision::Fp32,
            "fp16" => Precision::Fp16,
            "bf16" => Precision::Bf16,
            "fp8" => Precision::Fp8,
            "int8" => Precision::Int8,
            "int4" => Precision::Int4,
            _ => return Err(format!("unknown precision `{s}` (allowed: {PRECISIONS})")),
        })
    }
}

/// Compute of one precision: a roofline's flat part.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compute {
    /// Dense (no sparsity) peak.
    pub peak_flops_per_s: f64,
    /// Fraction of the peak a well-shaped GEMM reaches.
    pub efficiency: f64,
}

/// A part: what one device is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub name: String,
    pub memory_bytes: f64,
    /// Memory the model cannot use (operating system, runtime context, workspaces).
    pub reserved_bytes: f64,
    pub memory_bandwidth_bytes_per_s: f64,
    /// Fraction of the memory bandwidth streaming kernels reach.
    pub memory_efficiency: f64,
    pub compute: BTreeMap<Precision, Compute>,
}

impl Part {
    /// Memory the layers may use.
    pub fn usable_memory_bytes(&self) -> f64 {
        (self.memory_bytes - self.reserved_bytes).max(0.0)
    }

    /// Roofline time of `flops` and `bytes` at `precision`; `None` if the part cannot run it.
    pub fn time_s(&self, precision: Precision, flops: f64, bytes: f64) -> Option<f64> {
        let c = self.compute.get(&precision.compute())?;
        let compute = flops / (c.peak_flops_per_s * c.efficiency);
        let memory = bytes / (self.memory_bandwidth_bytes_per_s * self.memory_efficiency);
        Some(compute.max(memory))
    }
}

/// One device of a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetDevice {
    pub name: String,
    pub part: Part,
}

/// A link of a set (bidirectional).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SetLink {
    pub a: usize,
    pub b: usize,
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

/// Devices and links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSet {
    pub name: String,
    pub devices: Vec<SetDevice>,
    pub links: Vec<SetLink>,
}

/// Names of the preset parts.
pub const PART_PRESETS: &[&str] = &[
    "jetson-agx-orin-64gb",
    "jetson-orin-nano-8gb",
    "rtx-4090",
    "l4",
    "a10",
    "a100-80gb",
    "h100-sxm",
    "xeon-8480",
    "apple-a17-pro",
];

/// Fraction of the peak HBM bandwidth streaming kernels reach: the H200 device copy
/// measured 4.24 TB/s of 4.8 TB/s = 88.3 % (shared/data/h200_pytorch_calibration.jsonl, as
/// plait-cost's `HBM_EFFICIENCY`). Assumed for every part: no per-part measurement is
/// carried.
const MEMORY_EFFICIENCY: f64 = 4.2377 / 4.8;

/// H100's measured MAMF fraction, 80.1 % (S. Bekman, ml-engineering, "Maximum Achievable
/// Matmul FLOPS comparison table"; `plait_spec::cluster::h100`). Assumed for parts with no
/// public MAMF measurement.
fn assumed_matmul_efficiency() -> f64 {
    plait_spec::cluster::h100().matmul_efficiency
}

/// GPU memory the model cannot use: CUDA context ≈ 0.5 GB and library workspaces
/// (assumption, as plait's cluster reserve; not a measurement).
const GPU_RESERVE_BYTES: f64 = 1.0 * GB;

fn part(
    name: &str,
    memory_bytes: f64,
    reserved_bytes: f64,
    bandwidth: f64,
    efficiency: f64,
    rates: &[(Precision, f64)],
) -> Part {
    Part {
        name: name.into(),
        memory_bytes,
        reserved_bytes,
        memory_bandwidth_bytes_per_s: bandwidth,
        memory_efficiency: MEMORY_EFFICIENCY,
        compute: rates
            .iter()
            .map(|&(p, r)| {
                (
                    p,
                    Compute {
                        peak_flops_per_s: r,
                        efficiency,
                    },
                )
            })
            .collect(),
    }
}

/// A preset part by name (case-insensitive).
pub fn part_preset(name: &str) -> Result<Part, SpecError> {
    use Precision::*;
    let e = assumed_matmul_efficiency();
    Ok(match name.to_ascii_lowercase().as_str() {
        // NVIDIA Jetson AGX Orin Series Technical Brief v1.2: the 64 GB module's GPU gives
        // 170 sparse INT8 TOPS (the DLAs' 105 are not used by a transformer runtime) →
        // 85 dense; Ampere tensor cores run fp16/bf16 at half the int8 rate (A100
        // whitepaper: 312 vs 624 TFLOP/s) → 42.5 TFLOP/s. 64 GB LPDDR5 at 204.8 GB/s
        // (Jetson AGX Orin Series datasheet). Memory is shared with the OS: 4 GB kept for
        // it and the CUDA runtime (assumption, not a measurement).
        "jetson-agx-orin-64gb" | "orin" => part(
            "jetson-agx-orin-64gb",
            64.0 * GB,
            4.0 * GB,
            204.8 * GB,
            e,
            &[
                (Fp16, 42.5 * TERA),
                (Bf16, 42.5 * TERA),
                (Int8, 85.0 * TERA),
            ],
        ),
        // NVIDIA Jetson Orin Nano Series datasheet: 8 GB module 40 sparse / 20 dense INT8
        // TOPS → 10 TFLOP/s fp16/bf16 (Ampere ratio as above); 8 GB 128-bit LPDDR5 at
        // 68 GB/s. 1.5 GB kept for the OS and CUDA runtime (assumption).
        "jetson-orin-nano-8gb" | "orin-nano" => part(
            "jetson-orin-nano-8gb",
            8.0 * GB,
            1.5 * GB,
            68.0 * GB,
            e,
            &[
                (Fp16, 10.0 * TERA),
                (Bf16, 10.0 * TERA),
                (Int8, 20.0 * TERA),
            ],
        ),
        // NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, Appendix A (GeForce RTX
        // 4090): dense tensor fp16/bf16 with fp32 accumulate 165.2 TFLOP/s, fp8 with fp32
        // accumulate 330.3, int8 660.6 TOPS; 24 GB GDDR6X at 1,008 GB/s.
        "rtx-4090" | "4090" => part(
            "rtx-4090",
            24.0 * GB,
            GPU_RESERVE_BYTES,
            1008.0 * GB,
            e,
            &[
                (Fp16, 165.2 * TERA),
                (Bf16, 165.2 * TERA),
                (Fp8, 330.3 * TERA),
                (Int8, 660.6 * TERA),
            ],
        ),
        // NVIDIA L4 datasheet: 242 sparse fp16/bf16 TFLOP/s → 121 dense, fp8 and int8 485
        // sparse → 242.5 dense; 24 GB GDDR6 at 300 GB/s.
        "l4" => part(
            "l4",
            24.0 * GB,
            GPU_RESERVE_BYTES,
            300.0 * GB,
            e,
            &[
                (Fp16, 121.0 * TERA),
                (Bf16, 121.0 * TERA),
                (Fp8, 242.5 * TERA),
                (Int8, 242.5 * TERA),
            ],
        ),
        // NVIDIA A10 datasheet: fp16/bf16 125 TFLOP/s dense (250 sparse), int8 250 TOPS
        // dense; 24 GB GDDR6 at 600 GB/s.
        "a10" => part(
            "a10",
            24.0 * GB,
            GPU_RESERVE_BYTES,
            600.0 * GB,
            e,
            &[
                (Fp16, 125.0 * TERA),
                (Bf16, 125.0 * TERA),
                (Int8, 250.0 * TERA),
            ],
        ),
        // plait-spec's A100 SXM4 80 GB (NVIDIA A100 datasheet: 312 TFLOP/s fp16/bf16, 2,039
        // GB/s; measured MAMF 85.9 %, Bekman); int8 624 TOPS dense (same datasheet).
        "a100-80gb" | "a100" => {
            let g = plait_spec::cluster::a100_80g();
            part(
                "a100-80gb",
                g.memory_bytes,
                GPU_RESERVE_BYTES,
                g.memory_bandwidth_bytes_per_s,
                g.matmul_efficiency,
                &[
                    (Fp16, g.peak_fp16_flops_per_s),
                    (Bf16, g.peak_bf16_flops_per_s),
                    (Int8, 624.0 * TERA),
                ],
            )
        }
        // plait-spec's H100 SXM5 80 GB (NVIDIA H100 datasheet: 989.4 TFLOP/s bf16, 1,978.9
        // fp8, 3.35 TB/s; measured MAMF 80.1 %, Bekman); int8 1,979 TOPS dense (3,958
        // sparse, same datasheet).
        "h100-sxm" | "h100" => {
            let g = plait_spec::cluster::h100();
            part(
                "h100-sxm",
                g.memory_bytes,
                GPU_RESERVE_BYTES,
                g.memory_bandwidth_bytes_per_s,
                g.matmul_efficiency,
                &[
                    (Fp16, g.peak_fp16_flops_per_s),
                    (Bf16, g.peak_bf16_flops_per_s),
                    (Fp8, g.peak_fp8_flops_per_s.unwrap_or(1978.9 * TERA)),
                    (Int8, 1979.0 * TERA),
                ],
            )
        }
        // Intel Xeon Platinum 8480+ (ark.intel.com: 56 cores, 2.0 GHz base, 8 channels of
        // DDR5-4800 → 8 × 4.8 GT/s × 8 B = 307.2 GB/s). AMX: 1,024 bf16 and 2,048 int8
        // operations per cycle per core (Intel, "Intel Advanced Matrix Extensions
        // Overview") → 56 × 2.0 GHz × 1,024 = 114.7 TFLOP/s bf16, 229.4 TOPS int8 at the
        // base clock; fp32 AVX-512: 2 FMA units × 16 lanes × 2 = 64 FLOP/cycle/core →
        // 7.2 TFLOP/s. 512 GB is a configuration (16 × 32 GB DIMMs), 16 GB kept for the OS
        // (assumptions: set memory_gb / reserved_gb for yours).
        "xeon-8480" | "cpu" => part(
            "xeon-8480",
            512.0 * GB,
            16.0 * GB,
            307.2 * GB,
            e,
            &[
                (Fp32, 56.0 * 2.0e9 * 64.0),
                (Bf16, 56.0 * 2.0e9 * 1024.0),
                (Int8, 56.0 * 2.0e9 * 2048.0),
            ],
        ),
        // Apple A17 Pro (iPhone 15 Pro), a phone NPU: Apple newsroom, 12 Sep 2023: the
        // Neural Engine runs "up to 35 trillion operations per second" (precision not
        // stated; taken as int8), fp16 at half that (assumption: Apple publishes no fp16
        // figure). 8 GB LPDDR5 and 51.2 GB/s (LPDDR5-6400 on a 64-bit bus) are teardown
        // reports, not Apple figures; iOS keeps about 3 GB from an app (assumption).
        "apple-a17-pro" | "phone-npu" => part(
            "apple-a17-pro",
            8.0 * GB,
            3.0 * GB,
            51.2 * GB,
            e,
            &[(Fp16, 17.5 * TERA), (Int8, 35.0 * TERA)],
        ),
        _ => {
            return Err(SpecError::new(
                "part",
                "part",
                format!("unknown part `{name}`"),
                PART_PRESETS.join(", "),
            ))
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetToml {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    device: Vec<DeviceToml>,
    #[serde(default)]
    lan: Vec<LanToml>,
    #[serde(default)]
    link: Vec<LinkToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceToml {
    name: String,
    #[serde(default)]
    part: Option<String>,
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    memory_gb: Option<f64>,
    #[serde(default)]
    reserved_gb: Option<f64>,
    #[serde(default)]
    memory_bandwidth_gb_per_s: Option<f64>,
    #[serde(default)]
    memory_efficiency: Option<f64>,
    #[serde(default)]
    compute: BTreeMap<String, ComputeToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComputeToml {
    peak_tflops: f64,
    #[serde(default)]
    efficiency: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LanToml {
    members: Vec<String>,
    #[serde(default)]
    gbit_per_s: Option<f64>,
    #[serde(default)]
    gb_per_s: Option<f64>,
    #[serde(default)]
    latency_ms: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkToml {
    a: String,
    b: String,
    #[serde(default)]
    gbit_per_s: Option<f64>,
    #[serde(default)]
    gb_per_s: Option<f64>,
    #[serde(default)]
    latency_ms: Option<f64>,
}

const SET_KEYS: &str = "name, [[device]] (name, part, count, memory_gb, reserved_gb, memory_bandwidth_gb_per_s, memory_efficiency, [device.compute.PRECISION] peak_tflops, efficiency), [[lan]] (members, gbit_per_s | gb_per_s, latency_ms), [[link]] (a, b, gbit_per_s | gb_per_s, latency_ms)";

fn bad(
    source: &str,
    field: impl Into<String>,
    problem: impl Into<String>,
    allowed: &str,
) -> SpecError {
    SpecError::new(source, field, problem, allowed)
}

fn check(
    source: &str,
    field: &str,
    v: f64,
    lo: f64,
    hi: f64,
    lo_open: bool,
) -> Result<f64, SpecError> {
    let ok = v.is_finite() && (if lo_open { v > lo } else { v >= lo }) && v <= hi;
    if ok {
        Ok(v)
    } else {
        let range = format!("{}{lo}, {hi}]", if lo_open { "(" } else { "[" });
        Err(bad(
            source,
            field,
            format!("{v} is out of range"),
            &format!("numbers in {range}"),
        ))
    }
}

fn bandwidth(
    source: &str,
    field: &str,
    gbit: Option<f64>,
    gb: Option<f64>,
) -> Result<f64, SpecError> {
    match (gbit, gb) {
        (Some(x), None) => {
            Ok(check(source, &format!("{field}.gbit_per_s"), x, 0.0, 1e9, true)? * 1e9 / 8.0)
        }
        (None, Some(x)) => Ok(check(source, &format!("{field}.gb_per_s"), x, 0.0, 1e9, true)? * GB),
        (None, None) => Err(bad(
            source,
            field,
            "needs a bandwidth",
            "gbit_per_s or gb_per_s",
        )),
        (Some(_), Some(_)) => Err(bad(
            source,
            field,
            "gives both gbit_per_s and gb_per_s",
            "one of gbit_per_s, gb_per_s",
        )),
    }
}

/// Parses a device-set TOML document; `source` names it in errors.
pub fn device_set_from_toml(text: &str, source: &str) -> Result<DeviceSet, SpecError> {
    let doc: SetToml = toml::from_str(text).map_err(|e| {
        let msg = e.message().replace('\n', " ");
        let field = msg.split('`').nth(1).unwrap_or("(document)").to_string();
        bad(source, field, msg, SET_KEYS)
    })?;
    if doc.device.is_empty() {
        return Err(bad(
            source,
            "device",
            "no [[device]] is given",
            "one or more [[device]] tables",
        ));
    }
    let mut devices: Vec<SetDevice> = Vec::new();
    // Group name → member indices (a device of count 1 is its own group).
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, d) in doc.device.iter().enumerate() {
        let f = |k: &str| format!("device[{i}].{k}");
        let mut p = match &d.part {
            Some(name) => part_preset(name).map_err(|e| e.in_source(source))?,
            None => {
                let missing = |k: &str| {
                    bad(
                        source,
                        f(k),
                        "is required when no `part` preset is given",
                        &format!("a number, or part = one of {}", PART_PRESETS.join(", ")),
                    )
                };
                let mem = d.memory_gb.ok_or_else(|| missing("memory_gb"))?;
                let bw = d
                    .memory_bandwidth_gb_per_s
                    .ok_or_else(|| missing("memory_bandwidth_gb_per_s"))?;
                if d.compute.is_empty() {
                    return Err(missing("compute"));
                }
                Part {
                    name: d.name.clone(),
                    memory_bytes: mem * GB,
                    reserved_bytes: 0.0,
                    memory_bandwidth_bytes_per_s: bw * GB,
                    memory_efficiency: MEMORY_EFFICIENCY,
                    compute: BTreeMap::new(),
                }
            }
        };
        if let Some(v) = d.memory_gb {
            p.memory_bytes = check(source, &f("memory_gb"), v, 0.0, 1e9, true)? * GB;
        }
        if let Some(v) = d.reserved_gb {
            p.reserved_bytes = check(source, &f("reserved_gb"), v, 0.0, 1e9, false)? * GB;
        }
        if let Some(v) = d.memory_bandwidth_gb_per_s {
            p.memory_bandwidth_bytes_per_s =
                check(source, &f("memory_bandwidth_gb_per_s"), v, 0.0, 1e9, true)? * GB;
        }
        if let Some(v) = d.memory_efficiency {
            p.memory_efficiency = check(source, &f("memory_efficiency"), v, 0.0, 1.0, true)?;
        }
        for (k, c) in &d.compute {
            let field = f(&format!("compute.{k}"));
            let prec: Precision = k.parse().map_err(|_| {
                bad(
                    source,
                    &field,
                    format!("unknown precision `{k}`"),
                    PRECISIONS,
                )
            })?;
            let peak = check(
                source,
                &format!("{field}.peak_tflops"),
                c.peak_tflops,
                0.0,
                1e9,
                true,
            )?;
            let eff = match c.efficiency {
                Some(x) => check(source, &format!("{field}.efficiency"), x, 0.0, 1.0, true)?,
                None => p
                    .compute
                    .get(&prec)
                    .map_or_else(assumed_matmul_efficiency, |c| c.efficiency),
            };
            p.compute.insert(
                prec,
                Compute {
                    peak_flops_per_s: peak * TERA,
                    efficiency: eff,
                },
            );
        }
        let count = match d.count {
            None => 1,
            Some(c) if (1..=MAX_SET_DEVICES as i64).contains(&c) => c as usize,
            Some(c) => {
                return Err(bad(
                    source,
                    f("count"),
                    format!("{c} devices"),
                    &format!("1 to {MAX_SET_DEVICES}"),
                ))
            }
        };
        if devices.len() + count > MAX_SET_DEVICES {
            return Err(bad(
                source,
                f("count"),
                format!("the set would have more than {MAX_SET_DEVICES} devices"),
                &format!("at most {MAX_SET_DEVICES} devices in all"),
            ));
        }
        if groups.contains_key(&d.name) {
            return Err(bad(
                source,
                f("name"),
                format!("`{}` is used twice", d.name),
                "distinct names",
            ));
        }
        let mut members = Vec::with_capacity(count);
        for k in 0..count {
            let name = if d.count.is_none() {
                d.name.clone()
            } else {
                format!("{}-{k}", d.name)
            };
            if groups.contains_key(&name) || devices.iter().any(|x| x.name == name) {
                return Err(bad(
                    source,
                    f("name"),
                    format!("`{name}` is used twice"),
                    "distinct names",
                ));
            }
            members.push(devices.len());
            devices.push(SetDevice {
                name,
                part: p.clone(),
            });
        }
        if d.count.is_some() {
            for (k, &m) in members.iter().enumerate() {
                groups.insert(format!("{}-{k}", d.name), vec![m]);
            }
        }
        groups.insert(d.name.clone(), members);
    }
    let names = || {
        let mut v: Vec<&str> = groups.keys().map(String::as_str).collect();
        v.truncate(30);
        v.join(", ")
    };
    let resolve = |field: &str, name: &str| -> Result<Vec<usize>, SpecError> {
        groups.get(name).cloned().ok_or_else(|| {
            bad(
                source,
                field,
                format!("no device or group is named `{name}`"),
                &names(),
            )
        })
    };
    let mut links = Vec::new();
    let mut push = |a: usize,
                    b: usize,
                    bytes_per_s: f64,
                    latency_s: f64,
                    field: &str|
     -> Result<(), SpecError> {
        if a == b {
            return Ok(());
        }
        if links.len() >= crate::problem::MAX_LINKS {
            return Err(bad(
                source,
                field,
                "too many links",
                &format!("at most {}", crate::problem::MAX_LINKS),
            ));
        }
        links.push(SetLink {
            a,
            b,
            bytes_per_s,
            latency_s,
        });
        Ok(())
    };
    for (i, l) in doc.lan.iter().enumerate() {
        let field = format!("lan[{i}]");
        let bw = bandwidth(source, &field, l.gbit_per_s, l.gb_per_s)?;
        let lat = check(
            source,
            &format!("{field}.latency_ms"),
            l.latency_ms.unwrap_or(0.0),
            0.0,
            1e9,
            false,
        )? * 1e-3;
        let mut members = Vec::new();
        for m in &l.members {
            members.extend(resolve(&format!("{field}.members"), m)?);
        }
        members.sort_unstable();
        members.dedup();
        for (x, &a) in members.iter().enumerate() {
            for &b in &members[x + 1..] {
                push(a, b, bw, lat, &field)?;
            }
        }
    }
    for (i, l) in doc.link.iter().enumerate() {
        let field = format!("link[{i}]");
        let bw = bandwidth(source, &field, l.gbit_per_s, l.gb_per_s)?;
        let lat = check(
            source,
            &format!("{field}.latency_ms"),
            l.latency_ms.unwrap_or(0.0),
            0.0,
            1e9,
            false,
        )? * 1e-3;
        let a = resolve(&format!("{field}.a"), &l.a)?;
        let b = resolve(&format!("{field}.b"), &l.b)?;
        for &x in &a {
            for &y in &b {
                push(x, y, bw, lat, &field)?;
            }
        }
    }
    Ok(DeviceSet {
        name: doc.name.unwrap_or_else(|| source.to_string()),
        devices,
        links,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_resolves_with_positive_numbers() {
        for name in PART_PRESETS {
            let p = part_preset(name).unwrap();
            assert!(p.memory_bytes > p.reserved_bytes && p.memory_bandwidth_bytes_per_s > 0.0);
            assert!(!p.compute.is_empty());
            for c in p.compute.values() {
                assert!(c.peak_flops_per_s > 0.0 && c.efficiency > 0.0 && c.efficiency <= 1.0);
            }
        }
        let e = part_preset("tpu-v9").unwrap_err().to_string();
        assert!(
            e.contains("unknown part `tpu-v9`") && e.contains("jetson-agx-orin-64gb"),
            "{e}"
        );
    }

    #[test]
    fn roofline_is_the_larger_of_compute_and_memory() {
        let p = part_preset("l4").unwrap();
        let c = p.compute[&Precision::Bf16];
        let flops = 1e12;
        let t = p.time_s(Precision::Bf16, flops, 0.0).unwrap();
        assert!((t - flops / (c.peak_flops_per_s * c.efficiency)).abs() < 1e-15);
        let t = p.time_s(Precision::Bf16, 0.0, 1e9).unwrap();
        assert!((t - 1e9 / (300e9 * MEMORY_EFFICIENCY)).abs() < 1e-15);
        assert!(p.time_s(Precision::Fp32, 1.0, 1.0).is_none());
    }

    const SET: &str = r#"
name = "t"
[[device]]
name = "orin"
part = "orin"
count = 3
[[device]]
name = "gpu"
part = "l4"
[[device]]
name = "npu"
memory_gb = 16
memory_bandwidth_gb_per_s = 100
[device.compute.int8]
peak_tflops = 50
efficiency = 0.5
[[lan]]
members = ["orin", "npu"]
gbit_per_s = 1
latency_ms = 0.5
[[link]]
a = "orin"
b = "gpu"
gb_per_s = 0.0125
latency_ms = 20
"#;

    #[test]
    fn groups_expand_lans_and_links() {
        let s = device_set_from_toml(SET, "t.toml").unwrap();
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["orin-0", "orin-1", "orin-2", "gpu", "npu"]);
        // LAN: 4 members → 6 pairs; link: 3 × 1.
        assert_eq!(s.links.len(), 9);
        assert_eq!(s.links[0].bytes_per_s, 1.25e8);
        assert_eq!(s.links[0].latency_s, 0.5e-3);
        assert_eq!(s.links[8].bytes_per_s, 1.25e7);
        assert_eq!(s.devices[4].part.compute[&Precision::Int8].efficiency, 0.5);
    }

    #[test]
    fn errors_name_file_field_and_allowed_values() {
        let cases = [
            (
                SET.replace("part = \"l4\"", "part = \"l5\""),
                "t.toml: `part`: unknown part `l5`",
            ),
            (SET.replace("count = 3", "count = 0"), "`device[0].count`"),
            (
                SET.replace("b = \"gpu\"", "b = \"gpux\""),
                "`link[0].b`: no device or group is named `gpux`",
            ),
            (
                SET.replace("gb_per_s = 0.0125", "gbps = 1"),
                "unknown field `gbps`",
            ),
            (
                SET.replace("memory_gb = 16\n", ""),
                "`device[2].memory_gb`: is required",
            ),
            (
                SET.replace("[device.compute.int8]", "[device.compute.int3]"),
                "`device[2].compute.int3`",
            ),
            (
                SET.replace("efficiency = 0.5", "efficiency = 1.5"),
                "`device[2].compute.int8.efficiency`: 1.5 is out of range",
            ),
            (
                SET.replace("gbit_per_s = 1\n", ""),
                "`lan[0]`: needs a bandwidth",
            ),
        ];
        for (text, want) in cases {
            let e = device_set_from_toml(&text, "t.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e} (wanted {want})");
            assert!(e.starts_with("t.toml: "), "{e}");
        }
    }
}
