//! Calibration profiles: measured GEMM times by shape, memory bandwidth and (optionally)
//! whole-layer times, which the device model interpolates between.
//!
//! Two text formats are read (no I/O here; the caller passes the text):
//!
//! * **Profile JSON** (`plait-profile/1`):
//!   ```json
//!   { "format": "plait-profile/1", "gpu": "NVIDIA H200", "dtype": "bf16",
//!     "source": "how it was measured",
//!     "memory_bandwidth_bytes_per_s": 4.24e12,
//!     "gemm":   [ { "m": 4096, "n": 12288, "k": 4096, "time_s": 5.38e-4 } ],
//!     "layers": [ { "family": "gpt", "hidden": 4096, "heads": 32, "seq": 2048,
//!                   "mbs": 1, "tp": 1, "forward_s": 1.35e-3, "backward_s": 3.17e-3,
//!                   "activation_bytes": 268731392 } ] }
//!   ```
//!   `memory_bandwidth_bytes_per_s` counts read + write traffic (a copy of N bytes moves 2N).
//!   `layers` is optional; `gemm` needs at least one entry.
//! * **Measurement JSON lines** as written by `shared/data/h200_layer_measure.py`
//!   (`{"kind": "matmul", "m", "n", "k", "ms"}`, `{"kind": "copy", "gbps"}`,
//!   `{"kind": "layer", "model", "h", "heads", "s", "mb", "tp", "fwd_ms", "bwd_ms",
//!   "saved_act_bytes"}`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A profile could not be read. Names the source, the line (for JSON lines) and the field.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("{source_name}: {location}{problem}")]
pub struct ProfileError {
    pub source_name: String,
    pub location: String,
    pub problem: String,
}

/// One measured GEMM `[m×k]·[k×n]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GemmSample {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub time_s: f64,
}

/// One measured transformer layer (a tensor-parallel shard on one GPU, no communication).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerSample {
    /// `gpt` or `llama`.
    pub family: String,
    pub hidden: u64,
    pub heads: u64,
    pub seq: u64,
    pub mbs: u64,
    pub tp: u64,
    pub forward_s: f64,
    pub backward_s: f64,
    #[serde(default)]
    pub activation_bytes: Option<f64>,
}

/// Measurements of one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    #[serde(default = "default_format")]
    pub format: String,
    pub gpu: String,
    #[serde(default)]
    pub dtype: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    /// Read + write bytes per second of a large device copy.
    pub memory_bandwidth_bytes_per_s: f64,
    pub gemm: Vec<GemmSample>,
    #[serde(default)]
    pub layers: Vec<LayerSample>,
}

/// Longest time a profile may give for one kernel or layer: an hour (the largest GEMM any
/// model here runs takes well under a second).
pub const MAX_MEASURED_S: f64 = 3600.0;
/// Highest memory bandwidth a profile may give: 1 PB/s (HBM3e is 8 TB/s).
pub const MAX_BANDWIDTH_BYTES_PER_S: f64 = 1e15;
/// Lowest: 1 GB/s (a single DDR3 channel moves ~10 GB/s; the CPU profiles of `plait
/// profile` measure tens), so that no streaming time derived from it overflows.
pub const MIN_BANDWIDTH_BYTES_PER_S: f64 = 1e9;

/// `v` as a person would write it: plain between 1e-4 and 1e15, else with an exponent.
fn shown(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

fn default_format() -> String {
    "plait-profile/1".into()
}

impl Profile {
    /// Parses either format: JSON lines if the first non-blank line is a JSON object with a
    /// `kind` key, the profile JSON otherwise.
    pub fn parse(text: &str, source: &str) -> Result<Profile, ProfileError> {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let is_lines = serde_json::from_str::<serde_json::Value>(first)
            .ok()
            .is_some_and(|v| v.get("kind").is_some());
        let p = if is_lines {
            Self::from_measurement_lines(text, source)?
        } else {
            serde_json::from_str::<Profile>(text).map_err(|e| ProfileError {
                source_name: source.into(),
                location: format!("line {} column {}: ", e.line(), e.column()),
                problem: e.to_string(),
            })?
        };
        p.check(source)?;
        Ok(p)
    }

    fn check(&self, source: &str) -> Result<(), ProfileError> {
        let bad = |field: &str, problem: String| ProfileError {
            source_name: source.into(),
            location: format!("`{field}`: "),
            problem,
        };
        if self.format != "plait-profile/1" {
            return Err(bad(
                "format",
                format!(
                    "unknown format `{}` (allowed: plait-profile/1)",
                    self.format
                ),
            ));
        }
        if !(self.memory_bandwidth_bytes_per_s.is_finite()
            && self.memory_bandwidth_bytes_per_s >= MIN_BANDWIDTH_BYTES_PER_S
            && self.memory_bandwidth_bytes_per_s <= MAX_BANDWIDTH_BYTES_PER_S)
        {
            return Err(bad(
                "memory_bandwidth_bytes_per_s",
                format!(
                    "must be from {MIN_BANDWIDTH_BYTES_PER_S:e} (1 GB/s) to {MAX_BANDWIDTH_BYTES_PER_S:e} (1 PB/s), got {}",
                    shown(self.memory_bandwidth_bytes_per_s)
                ),
            ));
        }
        if self.gemm.is_empty() {
            return Err(bad("gemm", "needs at least one measured GEMM".into()));
        }
        for (i, g) in self.gemm.iter().enumerate() {
            if g.m == 0 || g.n == 0 || g.k == 0 || !(g.time_s.is_finite() && g.time_s > 0.0) {
                return Err(bad(
                    &format!("gemm[{i}]"),
                    "m, n, k and time_s must be positive".into(),
                ));
            }
            if g.time_s > MAX_MEASURED_S {
                return Err(bad(
                    &format!("gemm[{i}].time_s"),
                    format!(
                        "{} s is longer than any measured kernel (allowed: 0 < time_s ≤ {MAX_MEASURED_S} s)",
                        shown(g.time_s)
                    ),
                ));
            }
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.hidden == 0 || l.heads == 0 || l.seq == 0 || l.mbs == 0 || l.tp == 0 {
                return Err(bad(
                    &format!("layers[{i}]"),
                    "hidden, heads, seq, mbs and tp must be positive".into(),
                ));
            }
            if !(l.forward_s > 0.0 && l.backward_s > 0.0) {
                return Err(bad(
                    &format!("layers[{i}]"),
                    "forward_s and backward_s must be positive".into(),
                ));
            }
            for (what, v) in [("forward_s", l.forward_s), ("backward_s", l.backward_s)] {
                if v.is_nan() || v > MAX_MEASURED_S {
                    return Err(bad(
                        &format!("layers[{i}].{what}"),
                        format!(
                            "{} s is longer than any measured layer (allowed: 0 < {what} ≤ {MAX_MEASURED_S} s)",
                            shown(v)
                        ),
                    ));
                }
            }
            if let Some(a) = l
                .activation_bytes
                .filter(|a| !(a.is_finite() && *a >= 0.0 && *a <= 1e15))
            {
                return Err(bad(
                    &format!("layers[{i}].activation_bytes"),
                    format!("must be between 0 and 1e15 bytes, got {}", shown(a)),
                ));
            }
        }
        Ok(())
    }

    /// Reads the JSON lines written by `h200_layer_measure.py`.
    pub fn from_measurement_lines(text: &str, source: &str) -> Result<Profile, ProfileError> {
        let mut p = Profile {
            format: default_format(),
            gpu: String::new(),
            dtype: Some("bf16".into()),
            source: Some(format!("measurement lines from {source}")),
            memory_bandwidth_bytes_per_s: 0.0,
            gemm: vec![],
            layers: vec![],
        };
        for (no, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = |problem: String| ProfileError {
                source_name: source.into(),
                location: format!("line {}: ", no + 1),
                problem,
            };
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
            let num = |key: &str| {
                v.get(key)
                    .and_then(|x| x.as_f64())
                    .ok_or_else(|| at(format!("`{key}` missing or not a number")))
            };
            let int = |key: &str| num(key).map(|x| x.max(0.0) as u64);
            match v.get("kind").and_then(|k| k.as_str()) {
                Some("env") => {
                    p.gpu = v
                        .get("gpu")
                        .and_then(|g| g.as_str())
                        .unwrap_or("")
                        .to_string();
                }
                Some("matmul") => p.gemm.push(GemmSample {
                    m: int("m")?,
                    n: int("n")?,
                    k: int("k")?,
                    time_s: num("ms")? * 1e-3,
                }),
                Some("copy") => p.memory_bandwidth_bytes_per_s = num("gbps")? * 1e9,
                Some("layer") => p.layers.push(LayerSample {
                    family: v
                        .get("model")
                        .and_then(|g| g.as_str())
                        .unwrap_or("gpt")
                        .to_string(),
                    hidden: int("h")?,
                    heads: int("heads")?,
                    seq: int("s")?,
                    mbs: int("mb")?,
                    tp: int("tp")?,
                    forward_s: num("fwd_ms")? * 1e-3,
                    backward_s: num("bwd_ms")? * 1e-3,
                    activation_bytes: v.get("saved_act_bytes").and_then(|x| x.as_f64()),
                }),
                // Notes and end-to-end steps carry nothing the device model uses.
                Some(_) => {}
                None => return Err(at("`kind` missing".into())),
            }
        }
        if p.gpu.is_empty() {
            p.gpu = "unknown".into();
        }
        Ok(p)
    }

    /// The built-in H200 profile (PyTorch 2.11, bf16), measured for this project.
    pub fn builtin_h200() -> Profile {
        Self::parse(
            include_str!("../profiles/h200_pytorch_calibration.jsonl"),
            "built-in h200 profile",
        )
        .expect("the built-in profile is valid (checked by a test)")
    }

    /// The built-in profile measured on `gpu`'s model, if there is one: the H200 profile
    /// for GPUs named H200 (the presets' `H200-SXM-141GB`, or a cluster TOML's GPU of
    /// that name), with its name for reports.
    pub fn builtin_for(gpu: &plait_spec::GpuSpec) -> Option<(Profile, &'static str)> {
        gpu.name
            .to_ascii_uppercase()
            .contains("H200")
            .then(|| (Self::builtin_h200(), "built-in H200"))
    }

    /// The same profile without its whole-layer measurements (GEMMs and bandwidth only).
    pub fn without_layers(mut self) -> Profile {
        self.layers.clear();
        self
    }

    /// Largest measured GEMM rate in FLOP/s.
    pub fn max_gemm_flops_per_s(&self) -> f64 {
        self.gemm
            .iter()
            .map(|g| 2.0 * g.m as f64 * g.n as f64 * g.k as f64 / g.time_s)
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_h200_profile_reads() {
        let p = Profile::builtin_h200();
        assert_eq!(p.gpu, "NVIDIA H200");
        assert_eq!(p.gemm.len(), 25);
        assert_eq!(p.layers.len(), 30);
        assert!((p.memory_bandwidth_bytes_per_s - 4.2377e12).abs() < 1e9);
        assert!((p.max_gemm_flops_per_s() / 1e12 - 791.0).abs() < 1.0);
    }

    #[test]
    fn json_format_round_trips() {
        let p = Profile::builtin_h200();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(Profile::parse(&text, "x.json").unwrap(), p);
    }

    #[test]
    fn bad_profiles_name_the_problem() {
        let e = Profile::parse(
            "{\"gpu\": \"x\", \"memory_bandwidth_bytes_per_s\": 1e12, \"gemm\": []}",
            "p.json",
        )
        .unwrap_err();
        assert!(e.to_string().contains("`gemm`"), "{e}");
        let e = Profile::parse("{\"gpu\": \"x\"", "p.json").unwrap_err();
        assert!(e.to_string().starts_with("p.json: line 1"), "{e}");
        let e = Profile::parse("{\"kind\": \"matmul\", \"m\": 1}\n", "p.jsonl").unwrap_err();
        assert!(
            e.to_string().contains("line 1") && e.to_string().contains("`n`"),
            "{e}"
        );
        let e = Profile::parse(
            "{\"gpu\": \"x\", \"memory_bandwidth_bytes_per_s\": -1, \"gemm\": [{\"m\":1,\"n\":1,\"k\":1,\"time_s\":1}]}",
            "p.json",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("memory_bandwidth_bytes_per_s"),
            "{e}"
        );
    }
}
