//! A transformer's inference as a placement problem: per layer (embedding, each block,
//! head) and per device part, the time of the prefill and of the decode steps on a roofline
//! (FLOPs over the part's achievable compute, bytes over its achievable memory bandwidth,
//! whichever is longer), and the memory each layer keeps (weights, and the KV cache of the
//! batch for the whole context).
//!
//! FLOPs are the forward GEMMs of `plait_spec::ModelSpec::block_gemms` plus causal
//! attention (QKᵀ and AV: 4·B·q_width FLOPs per query-key pair, P(P+1)/2 pairs per
//! sequence in the prefill, the context length per decode step). Bytes are the weights
//! read once per pass, the KV cache written (prefill) or read (decode), and each layer's
//! input and output activations. The prefill of a long prompt is compute-bound, a decode
//! step memory-bound: the roofline decides per layer and part. MoE blocks read every
//! expert's weights each step (an upper bound for small batches). Per-device workspaces
//! are in the part's `reserved_bytes`, not here.

use serde::{Deserialize, Serialize};

use plait_spec::{LayerKind, ModelSpec, Shard, SpecError};

use crate::devices::{DeviceSet, Part, Precision};
use crate::problem::{Device, Layer, Link, Problem};

/// Bytes of one activation or KV-cache element (fp16/bf16 caches, as inference runtimes
/// keep by default).
const ACTIVATION_BYTES: f64 = 2.0;
/// Largest batch, prompt or generation length accepted.
pub const MAX_TOKENS: u64 = 10_000_000;
/// Largest generation length whose decode steps are summed one by one.
pub const MAX_GEN_LEN: u64 = 1_000_000;

/// Which part of inference the placement is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The prompt's forward pass (time to first token).
    Prefill,
    /// One decode step, averaged over the generation (time per output token).
    Decode,
    /// The whole request: prefill then every decode step.
    Both,
}

impl Phase {
    pub fn keyword(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
            Phase::Both => "both",
        }
    }
}

impl std::str::FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "prefill" => Ok(Phase::Prefill),
            "decode" => Ok(Phase::Decode),
            "both" => Ok(Phase::Both),
            _ => Err(format!(
                "unknown phase `{s}` (allowed: prefill, decode, both)"
            )),
        }
    }
}

/// The requests: `batch` sequences of `prompt_len` tokens generating `gen_len` each.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Workload {
    pub batch: u64,
    pub prompt_len: u64,
    pub gen_len: u64,
    pub precision: Precision,
}

impl Workload {
    /// Checks the sizes; `source` names the flags in errors.
    pub fn check(&self, phase: Phase) -> Result<(), SpecError> {
        for (field, v, min, max) in [
            ("batch", self.batch, 1, MAX_TOKENS),
            ("prompt_len", self.prompt_len, 1, MAX_TOKENS),
            ("gen_len", self.gen_len, 0, MAX_GEN_LEN),
        ] {
            if v < min || v > max {
                return Err(SpecError::for_field(
                    field,
                    format!("{v} is out of range"),
                    format!("integers {min} to {max}"),
                ));
            }
        }
        if phase != Phase::Prefill && self.gen_len == 0 {
            return Err(SpecError::for_field(
                "gen_len",
                format!(
                    "the {} phase generates tokens, but gen_len is 0",
                    phase.keyword()
                ),
                "gen_len ≥ 1, or phase = prefill",
            ));
        }
        Ok(())
    }
}

/// FLOPs and bytes of one pass of one layer.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Work {
    flops: f64,
    bytes: f64,
}

/// Per-layer figures the placement rests on (for reports).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerFigures {
    pub name: String,
    pub weight_bytes: f64,
    pub kv_cache_bytes: f64,
    pub prefill_flops: f64,
    pub decode_step_flops: f64,
}

struct Costs<'a> {
    m: &'a ModelSpec,
    w: Workload,
}

impl Costs<'_> {
    fn wb(&self) -> f64 {
        self.w.precision.weight_bytes()
    }

    /// Weights a layer keeps (an untied head keeps its own matrix; a tied head on another
    /// device needs a copy, so the head always counts vocab × hidden).
    fn weight_bytes(&self, kind: LayerKind) -> f64 {
        let m = self.m;
        let params = match kind {
            LayerKind::Embedding => m.embedding_params() as f64,
            LayerKind::Block => m.block_params() as f64,
            LayerKind::Head => {
                (m.vocab * m.hidden) as f64 + m.head_params() as f64
                    - if m.tied_embeddings {
                        0.0
                    } else {
                        (m.vocab * m.hidden) as f64
                    }
            }
        };
        params * self.wb()
    }

    fn kv_bytes_per_token(&self) -> f64 {
        2.0 * self.m.kv_width() as f64 * ACTIVATION_BYTES
    }

    fn kv_cache_bytes(&self, kind: LayerKind) -> f64 {
        match kind {
            LayerKind::Block => {
                (self.w.batch * (self.w.prompt_len + self.w.gen_len)) as f64
                    * self.kv_bytes_per_token()
            }
            _ => 0.0,
        }
    }

    fn gemm_flops(&self, tokens: u64) -> f64 {
        self.m
            .block_gemms(tokens, Shard::NONE)
            .iter()
            .map(|g| g.flops())
            .sum()
    }

    fn prefill(&self, kind: LayerKind) -> Work {
        let (b, p) = (self.w.batch as f64, self.w.prompt_len as f64);
        let tokens = self.w.batch * self.w.prompt_len;
        let act = tokens as f64 * self.m.hidden as f64 * ACTIVATION_BYTES;
        match kind {
            LayerKind::Embedding => Work {
                flops: 0.0,
                bytes: tokens as f64 * self.m.hidden as f64 * self.wb() + act,
            },
            LayerKind::Block => Work {
                flops: self.gemm_flops(tokens) + 2.0 * b * self.m.q_width() as f64 * p * (p + 1.0),
                bytes: self.weight_bytes(kind)
                    + tokens as f64 * self.kv_bytes_per_token()
                    + 2.0 * act,
            },
            LayerKind::Head => self.head(),
        }
    }

    /// The logits of the last position of each sequence.
    fn head(&self) -> Work {
        let b = self.w.batch as f64;
        let (h, v) = (self.m.hidden as f64, self.m.vocab as f64);
        Work {
            flops: 2.0 * b * h * v,
            bytes: self.weight_bytes(LayerKind::Head) + b * (h + v) * ACTIVATION_BYTES,
        }
    }

    /// Decode step `t` (0-based): one new token per sequence attending to P + t + 1 keys.
    fn decode(&self, kind: LayerKind, t: u64) -> Work {
        let b = self.w.batch as f64;
        let act = b * self.m.hidden as f64 * ACTIVATION_BYTES;
        match kind {
            LayerKind::Embedding => Work {
                flops: 0.0,
                bytes: b * self.m.hidden as f64 * self.wb() + act,
            },
            LayerKind::Block => {
                let ctx = (self.w.prompt_len + t + 1) as f64;
                Work {
                    flops: self.gemm_flops(self.w.batch) + 4.0 * b * self.m.q_width() as f64 * ctx,
                    bytes: self.weight_bytes(kind)
                        + b * ctx * self.kv_bytes_per_token()
                        + 2.0 * act,
                }
            }
            LayerKind::Head => self.head(),
        }
    }

    /// Seconds of `phase` for a layer on a part (decode: the mean step); `None` if the part
    /// has no compute at the workload's precision.
    fn time_s(&self, part: &Part, kind: LayerKind, phase: Phase) -> Option<f64> {
        let prec = self.w.precision;
        let prefill = || {
            let x = self.prefill(kind);
            part.time_s(prec, x.flops, x.bytes)
        };
        let decode_sum = || -> Option<f64> {
            let mut s = 0.0;
            for t in 0..self.w.gen_len {
                let x = self.decode(kind, t);
                s += part.time_s(prec, x.flops, x.bytes)?;
            }
            Some(s)
        };
        match phase {
            Phase::Prefill => prefill(),
            Phase::Decode => Some(decode_sum()? / self.w.gen_len as f64),
            Phase::Both => Some(prefill()? + decode_sum()?),
        }
    }

    /// Bytes and messages a layer sends when it ends a stage.
    fn output(&self, kind: LayerKind, phase: Phase) -> (f64, f64) {
        if kind == LayerKind::Head {
            return (0.0, 0.0);
        }
        let h = self.m.hidden as f64 * ACTIVATION_BYTES;
        let (b, p, g) = (
            self.w.batch as f64,
            self.w.prompt_len as f64,
            self.w.gen_len as f64,
        );
        match phase {
            Phase::Prefill => (b * p * h, 1.0),
            Phase::Decode => (b * h, 1.0),
            Phase::Both => (b * p * h + g * b * h, 1.0 + g),
        }
    }
}

/// The placement problem of `model` serving `w` on `set` for `phase`, and per-layer figures.
/// Device kinds are the set's distinct parts.
pub fn problem(
    model: &ModelSpec,
    set: &DeviceSet,
    w: &Workload,
    phase: Phase,
) -> Result<(Problem, Vec<LayerFigures>), SpecError> {
    w.check(phase)?;
    // Each layer here is a transformer block with its KV cache; a hybrid's Mamba-2,
    // attention-only and MLP-only layers would be priced as such blocks.
    if model.is_hybrid() {
        return Err(SpecError::for_field(
            "model",
            format!(
                "{} has Mamba-2, attention-only or MLP-only layers, which placement does not \
                 model (its layers are transformer blocks with a KV cache)",
                model.name
            ),
            "a model of transformer blocks",
        ));
    }
    let costs = Costs { m: model, w: *w };
    // Distinct parts → kinds.
    let mut parts: Vec<&Part> = Vec::new();
    let mut kind_of = Vec::with_capacity(set.devices.len());
    for d in &set.devices {
        let k = match parts.iter().position(|p| **p == d.part) {
            Some(k) => k,
            None => {
                parts.push(&d.part);
                parts.len() - 1
            }
        };
        kind_of.push(k);
    }
    let mut kinds: Vec<String> = Vec::with_capacity(parts.len());
    for p in &parts {
        let mut name = p.name.clone();
        let mut i = 2;
        while kinds.contains(&name) {
            name = format!("{}#{i}", p.name);
            i += 1;
        }
        kinds.push(name);
    }
    let list = model.layer_list();
    // One time per (layer kind, part): blocks are alike.
    let mut cache: Vec<[Option<Option<f64>>; 3]> = vec![[None; 3]; parts.len()];
    let slot = |k: LayerKind| match k {
        LayerKind::Embedding => 0,
        LayerKind::Block => 1,
        LayerKind::Head => 2,
    };
    let mut layers = Vec::with_capacity(list.len());
    let mut figures = Vec::with_capacity(list.len());
    for l in &list {
        let time_s = (0..parts.len())
            .map(|k| {
                *cache[k][slot(l.kind)].get_or_insert_with(|| costs.time_s(parts[k], l.kind, phase))
            })
            .collect();
        let (output_bytes, output_messages) = costs.output(l.kind, phase);
        let weight = costs.weight_bytes(l.kind);
        let kv = costs.kv_cache_bytes(l.kind);
        layers.push(Layer {
            name: l.name.clone(),
            time_s,
            memory_bytes: weight + kv,
            output_bytes,
            output_messages,
        });
        figures.push(LayerFigures {
            name: l.name.clone(),
            weight_bytes: weight,
            kv_cache_bytes: kv,
            prefill_flops: costs.prefill(l.kind).flops,
            decode_step_flops: costs.decode(l.kind, 0).flops,
        });
    }
    let devices = set
        .devices
        .iter()
        .zip(&kind_of)
        .map(|(d, &k)| Device {
            name: d.name.clone(),
            kind: k,
            memory_bytes: d.part.usable_memory_bytes(),
        })
        .collect();
    let links = set
        .links
        .iter()
        .map(|l| Link {
            a: l.a,
            b: l.b,
            bytes_per_s: l.bytes_per_s,
            latency_s: l.latency_s,
        })
        .collect();
    let p = Problem::new(kinds, layers, devices, links, &set.name)?;
    Ok((p, figures))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{device_set_from_toml, part_preset};

    fn set() -> DeviceSet {
        device_set_from_toml(
            "[[device]]\nname = \"g\"\npart = \"l4\"\n[[device]]\nname = \"o\"\npart = \"orin\"\n[[link]]\na = \"g\"\nb = \"o\"\ngbit_per_s = 1\n",
            "t.toml",
        )
        .unwrap()
    }

    #[test]
    fn llama3_8b_weights_and_kv_cache() {
        let m = plait_spec::model_preset("llama3-8b").unwrap();
        let w = Workload {
            batch: 1,
            prompt_len: 1024,
            gen_len: 1024,
            precision: Precision::Bf16,
        };
        let (p, f) = problem(&m, &set(), &w, Phase::Decode).unwrap();
        assert_eq!(p.layers.len(), 34);
        let weights: f64 = f.iter().map(|x| x.weight_bytes).sum();
        // 8.03 B parameters × 2 bytes.
        assert!((weights / (m.parameter_count() as f64 * 2.0) - 1.0).abs() < 1e-12);
        // KV: 2 (k, v) × 8 heads × 128 × 2 bytes × 2048 tokens = 8 MiB per block.
        assert_eq!(f[1].kv_cache_bytes, 2.0 * 1024.0 * 2.0 * 2048.0);
    }

    #[test]
    fn prefill_is_compute_bound_and_decode_memory_bound() {
        let m = plait_spec::model_preset("llama3-8b").unwrap();
        let l4 = part_preset("l4").unwrap();
        let w = Workload {
            batch: 1,
            prompt_len: 2048,
            gen_len: 1,
            precision: Precision::Bf16,
        };
        let c = Costs { m: &m, w };
        let x = c.prefill(LayerKind::Block);
        let compute = x.flops
            / (l4.compute[&Precision::Bf16].peak_flops_per_s
                * l4.compute[&Precision::Bf16].efficiency);
        assert_eq!(l4.time_s(Precision::Bf16, x.flops, x.bytes), Some(compute));
        let y = c.decode(LayerKind::Block, 0);
        let memory = y.bytes / (l4.memory_bandwidth_bytes_per_s * l4.memory_efficiency);
        assert_eq!(l4.time_s(Precision::Bf16, y.flops, y.bytes), Some(memory));
    }

    #[test]
    fn bad_sizes_name_the_flag() {
        let m = plait_spec::model_preset("llama3-8b").unwrap();
        let w = Workload {
            batch: 1,
            prompt_len: 16,
            gen_len: 0,
            precision: Precision::Bf16,
        };
        let e = problem(&m, &set(), &w, Phase::Decode)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("`gen_len`:"), "{e}");
        let w = Workload { batch: 0, ..w };
        let e = problem(&m, &set(), &w, Phase::Prefill)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`batch`: 0 is out of range"), "{e}");
    }
}
