//! The transformer the planner describes (`plait_spec::ModelSpec`, GPT and LLaMA families)
//! as candle tensors: parameter definitions with their tensor-parallel split, deterministic
//! initialisation, and the forward pass of one pipeline stage on one tensor-parallel rank.
//!
//! Layout follows Megatron-LM: q/k/v, MLP up (and gate) are column-parallel (output rows
//! split, heads and kv heads split), attention output and MLP down are row-parallel (input
//! columns split), the token embedding and the output head are split along the vocabulary
//! (padded to a multiple of tp; padded logits are masked out), norms and the biases after a
//! row-parallel layer are replicated. Weights are `[out, in]` as in PyTorch's `Linear`.

use std::ops::Range;

use candle_core::{DType, Device, Tensor, Var, D};
use plait_spec::{Activation, Family, ModelSpec, Norm, Positions};

use crate::error::{Invariant, ModelProblem, RuntimeError};
use crate::rng::{derive_seed, SplitMix64};
use crate::tp::TpGroup;

type Result<T> = std::result::Result<T, RuntimeError>;

/// Standard deviation of the weight initialisation: `initializer_range = 0.02` of the
/// Hugging Face GPT-2 and LLaMA configurations (Radford et al. 2019 use N(0, 0.02)).
pub const INIT_STD: f64 = 0.02;
/// Epsilon of LayerNorm (GPT-2 `layer_norm_epsilon`) and RMSNorm (LLaMA `rms_norm_eps`):
/// 1e-5 in both released configurations.
pub const NORM_EPS: f64 = 1e-5;
/// Rotary base θ of LLaMA 1/2 (`rope_theta = 10000`, Su et al. 2021; Touvron et al. 2023).
/// `ModelSpec` does not carry it; LLaMA 3's 500 000 would only change the frequencies.
pub const ROPE_THETA: f64 = 10_000.0;
/// Added to masked attention scores and padded logits: exp of it underflows to 0 in f32
/// while staying finite (no inf − inf in the backward).
const MASKED: f32 = -1e30;

/// How a parameter is split over the tensor-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds all of it.
    Replicated,
    /// Rows (dim 0) split: column-parallel outputs and the vocabulary. Padded with zero
    /// rows to a multiple of tp.
    Rows,
    /// Columns (dim 1) split: row-parallel inputs.
    Cols,
}

/// How a parameter starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Normal(f64),
    Zeros,
    Ones,
}

/// One parameter of the full model.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDef {
    /// Unique in the model (`block.3.attn.q.weight`).
    pub name: String,
    /// Shape of the full (unsplit) parameter.
    pub shape: Vec<usize>,
    pub split: Split,
    pub init: Init,
}

impl ParamDef {
    fn new(name: String, shape: Vec<usize>, split: Split, init: Init) -> Self {
        ParamDef {
            name,
            shape,
            split,
            init,
        }
    }

    /// Shape of one tensor-parallel rank's shard.
    pub fn local_shape(&self, tp: usize) -> Vec<usize> {
        let mut s = self.shape.clone();
        match self.split {
            Split::Replicated => {}
            Split::Rows => s[0] = s[0].div_ceil(tp),
            Split::Cols => s[1] /= tp,
        }
        s
    }

    /// Weight decay applies to matrices, not to biases, norms (nanoGPT's and Megatron-LM's
    /// rule: decay parameters of two or more dimensions).
    pub fn decays(&self) -> bool {
        self.shape.len() >= 2
    }

    pub fn is_sharded(&self) -> bool {
        self.split != Split::Replicated
    }

    /// The full parameter's values under `seed`: drawn from a stream named after the
    /// parameter, so every plan starts from the same model.
    pub fn full_values(&self, seed: u64) -> Vec<f32> {
        let n: usize = self.shape.iter().product();
        match self.init {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => SplitMix64::new(derive_seed(seed, &self.name)).normals(n, std),
        }
    }

    /// Tensor-parallel rank `rank`'s shard of `full` (row-major, full shape).
    pub fn shard(&self, full: &[f32], tp: usize, rank: usize) -> Vec<f32> {
        match self.split {
            Split::Replicated => full.to_vec(),
            Split::Rows => {
                let rows = self.shape[0];
                let width: usize = self.shape[1..].iter().product();
                let local = rows.div_ceil(tp);
                let start = (rank * local).min(rows);
                let end = ((rank + 1) * local).min(rows);
                let mut out = full[start * width..end * width].to_vec();
                out.resize(local * width, 0.0);
                out
            }
            Split::Cols => {
                let (rows, cols) = (self.shape[0], self.shape[1]);
                let local = cols / tp;
                let mut out = Vec::with_capacity(rows * local);
                for r in 0..rows {
                    let row = &full[r * cols..(r + 1) * cols];
                    out.extend_from_slice(&row[rank * local..(rank + 1) * local]);
                }
                out
            }
        }
    }
}

/// Checks that `spec` is a model the runtime can build and split over `tp`.
pub fn check_model(spec: &ModelSpec, tp: usize, seq: usize) -> Result<()> {
    let bad = |problem: ModelProblem| {
        Err(RuntimeError::Model {
            model: spec.name.clone(),
            problem,
        })
    };
    if !matches!(spec.family, Family::Gpt | Family::Llama) {
        return bad(ModelProblem::Family(spec.family));
    }
    if spec.moe.is_some() {
        return bad(ModelProblem::MixtureOfExperts);
    }
    if !spec.causal {
        return bad(ModelProblem::NotCausal);
    }
    if spec.mla.is_some()
        || spec.attention_window.is_some()
        || !spec.block_runs.is_empty()
        || spec.is_hybrid()
        || spec.activation == Activation::Relu2
        || spec.mtp_layers > 0
    {
        return bad(ModelProblem::BlockKinds);
    }
    if spec.heads == 0 || spec.kv_heads == 0 || !spec.heads.is_multiple_of(spec.kv_heads) {
        return bad(ModelProblem::HeadGroups {
            heads: spec.heads,
            kv_heads: spec.kv_heads,
        });
    }
    let tp64 = tp as u64;
    for (what, n) in [
        ("attention heads", spec.heads),
        ("key/value heads", spec.kv_heads),
        ("MLP width", spec.ffn_hidden),
    ] {
        if n % tp64 != 0 {
            return bad(ModelProblem::DoesNotSplit { what, n, tp });
        }
    }
    if spec.positions == Positions::Rotary && !spec.head_dim.is_multiple_of(2) {
        return bad(ModelProblem::OddRotaryHeadSize);
    }
    if spec.positions == Positions::Alibi {
        return bad(ModelProblem::Alibi);
    }
    if spec.positions == Positions::Learned && (spec.max_positions as usize) < seq {
        return bad(ModelProblem::TooFewPositions {
            seq,
            max_positions: spec.max_positions,
        });
    }
    if spec.vocab < 256 {
        return bad(ModelProblem::VocabularyTooSmall { vocab: spec.vocab });
    }
    Ok(())
}

/// The parameters of virtual stage `stage` of `stages`, holding `blocks`: the embedding on
/// the first stage, the head on the last (the tied head reuses the embedding's name).
pub fn stage_params(
    spec: &ModelSpec,
    stage: usize,
    stages: usize,
    blocks: Range<usize>,
) -> Vec<ParamDef> {
    let h = spec.hidden as usize;
    let v = spec.vocab as usize;
    let q = (spec.heads * spec.head_dim) as usize;
    let kv = (spec.kv_heads * spec.head_dim) as usize;
    let f = spec.ffn_hidden as usize;
    let normal = Init::Normal(INIT_STD);
    // GPT-2 (Radford et al. 2019, §2.3): residual projections scaled by 1/√N, N = 2 per block.
    let residual = match spec.family {
        Family::Gpt => Init::Normal(INIT_STD / (2.0 * spec.layers as f64).sqrt()),
        _ => normal,
    };
    let mut out = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, split, init| {
        out.push(ParamDef::new(name, shape, split, init));
    };
    let norm = |add: &mut dyn FnMut(String, Vec<usize>, Split, Init), prefix: &str| {
        add(
            format!("{prefix}.weight"),
            vec![h],
            Split::Replicated,
            Init::Ones,
        );
        if spec.norm == Norm::LayerNorm {
            add(
                format!("{prefix}.bias"),
                vec![h],
                Split::Replicated,
                Init::Zeros,
            );
        }
    };
    if stage == 0 {
        add(
            "embedding.tokens.weight".into(),
            vec![v, h],
            Split::Rows,
            normal,
        );
        if spec.positions == Positions::Learned {
            add(
                "embedding.positions.weight".into(),
                vec![spec.max_positions as usize, h],
                Split::Replicated,
                normal,
            );
        }
    }
    for b in blocks {
        let p = format!("block.{b}");
        norm(&mut add, &format!("{p}.norm1"));
        for (name, width) in [("q", q), ("k", kv), ("v", kv)] {
            add(
                format!("{p}.attn.{name}.weight"),
                vec![width, h],
                Split::Rows,
                normal,
            );
            if spec.qkv_bias {
                add(
                    format!("{p}.attn.{name}.bias"),
                    vec![width],
                    Split::Rows,
                    Init::Zeros,
                );
            }
        }
        add(
            format!("{p}.attn.o.weight"),
            vec![h, q],
            Split::Cols,
            residual,
        );
        if spec.linear_bias {
            add(
                format!("{p}.attn.o.bias"),
                vec![h],
                Split::Replicated,
                Init::Zeros,
            );
        }
        norm(&mut add, &format!("{p}.norm2"));
        if spec.activation == Activation::SwiGlu {
            add(
                format!("{p}.mlp.gate.weight"),
                vec![f, h],
                Split::Rows,
                normal,
            );
        }
        add(
            format!("{p}.mlp.up.weight"),
            vec![f, h],
            Split::Rows,
            normal,
        );
        if spec.linear_bias {
            add(
                format!("{p}.mlp.up.bias"),
                vec![f],
                Split::Rows,
                Init::Zeros,
            );
        }
        add(
            format!("{p}.mlp.down.weight"),
            vec![h, f],
            Split::Cols,
            residual,
        );
        if spec.linear_bias {
            add(
                format!("{p}.mlp.down.bias"),
                vec![h],
                Split::Replicated,
                Init::Zeros,
            );
        }
    }
    if stage + 1 == stages {
        norm(&mut add, "head.norm");
        if spec.tied_embeddings {
            if stage != 0 {
                add(
                    "embedding.tokens.weight".into(),
                    vec![v, h],
                    Split::Rows,
                    normal,
                );
            }
        } else {
            add("head.weight".into(), vec![v, h], Split::Rows, normal);
        }
    }
    out
}

/// A parameter of this rank: its definition and its (local shard) variable.
#[derive(Debug, Clone)]
pub struct Param {
    pub def: ParamDef,
    pub var: Var,
}

/// One pipeline stage of the model on one tensor-parallel rank. Clones share the
/// parameters (candle variables are reference-counted).
#[derive(Clone)]
pub struct StageModel {
    pub spec: ModelSpec,
    /// Virtual stage index and count.
    pub stage: usize,
    pub stages: usize,
    /// Global block indices held.
    pub blocks: Range<usize>,
    pub params: Vec<Param>,
    pub tp: TpGroup,
    /// Full sequence length.
    pub seq: usize,
    /// Sequences per micro-batch.
    pub mbs: usize,
    /// Causal mask `[seq, seq]` (0 or MASKED).
    mask: Tensor,
    /// The device every tensor of the stage lives on (`crate::backend`).
    device: Device,
    /// Rotary cos/sin tables `[seq, head_dim]`.
    rope: Option<(Tensor, Tensor)>,
    /// Masked-out padded vocabulary columns of this rank `[1, V_local]`, if any.
    vocab_pad_mask: Option<Tensor>,
}

impl StageModel {
    /// Builds the stage on `device` with every parameter initialised from `seed`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: &ModelSpec,
        stage: usize,
        stages: usize,
        blocks: Range<usize>,
        tp: TpGroup,
        seq: usize,
        mbs: usize,
        seed: u64,
        device: &Device,
    ) -> Result<StageModel> {
        let defs = stage_params(spec, stage, stages, blocks.clone());
        let params = defs
            .into_iter()
            .map(|def| {
                let full = def.full_values(seed);
                let local = def.shard(&full, tp.size, tp.rank);
                let var = Var::from_vec(local, def.local_shape(tp.size), device)?;
                Ok(Param { def, var })
            })
            .collect::<Result<Vec<_>>>()?;
        let mask: Vec<f32> = (0..seq * seq)
            .map(|i| if i % seq > i / seq { MASKED } else { 0.0 })
            .collect();
        let mask = Tensor::from_vec(mask, (seq, seq), device)?;
        let rope = if spec.positions == Positions::Rotary {
            let d = spec.head_dim as usize;
            let half = d / 2;
            let mut cos = Vec::with_capacity(seq * d);
            let mut sin = Vec::with_capacity(seq * d);
            for pos in 0..seq {
                let angles: Vec<f64> = (0..half)
                    .map(|i| pos as f64 / ROPE_THETA.powf(2.0 * i as f64 / d as f64))
                    .collect();
                // The rotate-half layout: both halves of a head use the same angles.
                let both_halves = angles.iter().chain(&angles);
                cos.extend(both_halves.clone().map(|a| a.cos() as f32));
                sin.extend(both_halves.map(|a| a.sin() as f32));
            }
            Some((
                Tensor::from_vec(cos, (seq, d), device)?,
                Tensor::from_vec(sin, (seq, d), device)?,
            ))
        } else {
            None
        };
        let v = spec.vocab as usize;
        let local_v = v.div_ceil(tp.size);
        let valid = v.saturating_sub(tp.rank * local_v).min(local_v);
        let vocab_pad_mask = if valid < local_v && stage + 1 == stages {
            let m: Vec<f32> = (0..local_v)
                .map(|i| if i < valid { 0.0 } else { MASKED })
                .collect();
            Some(Tensor::from_vec(m, (1, local_v), device)?)
        } else {
            None
        };
        Ok(StageModel {
            spec: spec.clone(),
            stage,
            stages,
            blocks,
            params,
            tp,
            seq,
            mbs,
            mask,
            device: device.clone(),
            rope,
            vocab_pad_mask,
        })
    }

    /// The device the stage's tensors live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The same parameters, run with another tensor-parallel group on micro-batches of
    /// `mbs` sequences (the halves of sub-pipelined tensor parallelism).
    pub fn with_group(&self, tp: TpGroup, mbs: usize) -> StageModel {
        StageModel {
            tp,
            mbs,
            ..self.clone()
        }
    }

    pub fn is_first(&self) -> bool {
        self.stage == 0
    }

    pub fn is_last(&self) -> bool {
        self.stage + 1 == self.stages
    }

    /// Sequence positions held by this rank between tensor-parallel regions.
    pub fn local_seq(&self) -> usize {
        if self.tp.sp {
            self.seq / self.tp.size
        } else {
            self.seq
        }
    }

    /// Shape of the hidden states this stage receives or sends.
    pub fn hidden_shape(&self) -> (usize, usize, usize) {
        (self.mbs, self.local_seq(), self.spec.hidden as usize)
    }

    fn get(&self, name: &str) -> Result<&Tensor> {
        self.params
            .iter()
            .find(|p| p.def.name == name)
            .map(|p| p.var.as_tensor())
            .ok_or_else(|| {
                Invariant::MissingParameter {
                    stage: self.stage,
                    name: name.to_string(),
                }
                .into()
            })
    }

    fn opt(&self, name: &str) -> Option<&Tensor> {
        self.params
            .iter()
            .find(|p| p.def.name == name)
            .map(|p| p.var.as_tensor())
    }

    /// `x · Wᵀ (+ b)` over the last dimension of `x` `[b, s, in]`.
    fn linear(&self, x: &Tensor, w: &str, b: Option<&str>) -> Result<Tensor> {
        let w = self.get(w)?;
        let (bs, s, i) = x.dims3()?;
        let y = x.reshape((bs * s, i))?.matmul(&w.t()?)?;
        let y = match b.and_then(|b| self.opt(b)) {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        };
        Ok(y.reshape((bs, s, w.dim(0)?))?)
    }

    fn norm(&self, x: &Tensor, prefix: &str) -> Result<Tensor> {
        let w = self.get(&format!("{prefix}.weight"))?;
        let y = match self.spec.norm {
            Norm::LayerNorm => {
                let mean = x.mean_keepdim(D::Minus1)?;
                let xc = x.broadcast_sub(&mean)?;
                let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
                let y = xc.broadcast_div(&(var + NORM_EPS)?.sqrt()?)?;
                let y = y.broadcast_mul(w)?;
                match self.opt(&format!("{prefix}.bias")) {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                }
            }
            Norm::RmsNorm => {
                let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
                x.broadcast_div(&(ms + NORM_EPS)?.sqrt()?)?
                    .broadcast_mul(w)?
            }
        };
        Ok(y)
    }

    /// Rotary embedding (the rotate-half convention of the Hugging Face LLaMA) of
    /// `x` `[b, heads, s, d]`.
    fn rotary(&self, x: &Tensor) -> Result<Tensor> {
        let Some((cos, sin)) = &self.rope else {
            return Ok(x.clone());
        };
        let d = x.dim(D::Minus1)?;
        let half = d / 2;
        let x1 = x.narrow(D::Minus1, 0, half)?;
        let x2 = x.narrow(D::Minus1, half, half)?;
        let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
        Ok(x.broadcast_mul(cos)?.add(&rotated.broadcast_mul(sin)?)?)
    }

    /// One transformer block (pre-norm) on `x` `[b, s_local, h]`.
    pub fn block(&self, x: &Tensor, index: usize) -> Result<Tensor> {
        let p = format!("block.{index}");
        let d = self.spec.head_dim as usize;
        let t = self.tp.size;
        let heads = self.spec.heads as usize / t;
        let kv_heads = self.spec.kv_heads as usize / t;
        let group = heads / kv_heads;
        let s = self.seq;
        let b = x.dim(0)?;

        let h1 = self.tp.enter(&self.norm(x, &format!("{p}.norm1"))?)?;
        let split = |name: &str, n: usize| -> Result<Tensor> {
            let y = self.linear(
                &h1,
                &format!("{p}.attn.{name}.weight"),
                Some(&format!("{p}.attn.{name}.bias")),
            )?;
            Ok(y.reshape((b, s, n, d))?.transpose(1, 2)?.contiguous()?)
        };
        let q = self.rotary(&split("q", heads)?)?;
        let k = self.rotary(&split("k", kv_heads)?)?;
        let v = split("v", kv_heads)?;
        let (k, v) = if group > 1 {
            let repeat = |x: Tensor| -> Result<Tensor> {
                Ok(x.unsqueeze(2)?
                    .broadcast_as((b, kv_heads, group, s, d))?
                    .contiguous()?
                    .reshape((b, heads, s, d))?)
            };
            (repeat(k)?, repeat(v)?)
        } else {
            (k, v)
        };
        let scores = (q.matmul(&k.t()?.contiguous()?)? * (1.0 / (d as f64).sqrt()))?;
        let scores = scores.broadcast_add(&self.mask)?;
        let max = scores.max_keepdim(D::Minus1)?.detach();
        let e = scores.broadcast_sub(&max)?.exp()?;
        let probs = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        let att = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, s, heads * d))?;
        let o = self.linear(&att, &format!("{p}.attn.o.weight"), None)?;
        let mut o = self.tp.leave(&o)?;
        if let Some(bias) = self.opt(&format!("{p}.attn.o.bias")) {
            o = o.broadcast_add(bias)?;
        }
        let x = (x + o)?;

        let h2 = self.tp.enter(&self.norm(&x, &format!("{p}.norm2"))?)?;
        let up = self.linear(
            &h2,
            &format!("{p}.mlp.up.weight"),
            Some(&format!("{p}.mlp.up.bias")),
        )?;
        let act = match self.spec.activation {
            // GPT-2's "gelu_new": the tanh approximation (Hendrycks and Gimpel 2016).
            Activation::Gelu => up.gelu()?,
            // Squared ReLU (refused before a model is built, kept for completeness).
            Activation::Relu2 => up.relu()?.sqr()?,
            Activation::SwiGlu => {
                let gate = self.linear(&h2, &format!("{p}.mlp.gate.weight"), None)?;
                (gate.silu()? * up)?
            }
        };
        let down = self.linear(&act, &format!("{p}.mlp.down.weight"), None)?;
        let mut down = self.tp.leave(&down)?;
        if let Some(bias) = self.opt(&format!("{p}.mlp.down.bias")) {
            down = down.broadcast_add(bias)?;
        }
        Ok((x + down)?)
    }

    /// Token (and learned position) embedding of `tokens` (`mbs × seq`, row-major):
    /// vocab-parallel lookup, then all-reduce (or reduce-scatter with sp).
    pub fn embed(&self, tokens: &[u32]) -> Result<Tensor> {
        let table = self.get("embedding.tokens.weight")?;
        let (b, s, h) = (self.mbs, self.seq, self.spec.hidden as usize);
        if tokens.len() != b * s {
            return Err(Invariant::TokenCount {
                got: tokens.len(),
                mbs: b,
                seq: s,
            }
            .into());
        }
        let local_v = table.dim(0)?;
        let start = self.tp.rank * local_v;
        let mut ids = Vec::with_capacity(tokens.len());
        let mut keep = Vec::with_capacity(tokens.len());
        for &t in tokens {
            let t = t as usize;
            if t >= self.spec.vocab as usize {
                return Err(Invariant::TokenOutsideVocabulary {
                    token: t,
                    vocab: self.spec.vocab,
                }
                .into());
            }
            let inside = t >= start && t < start + local_v;
            ids.push(if inside { (t - start) as u32 } else { 0 });
            keep.push(if inside { 1.0f32 } else { 0.0 });
        }
        let ids = Tensor::from_vec(ids, b * s, &self.device)?;
        let mut x = table.index_select(&ids, 0)?;
        if self.tp.size > 1 {
            let keep = Tensor::from_vec(keep, (b * s, 1), &self.device)?;
            x = x.broadcast_mul(&keep)?;
        }
        let x = x.reshape((b, s, h))?;
        let x = if self.tp.sp {
            self.tp.leave(&x)?
        } else {
            self.tp.reduce(&x)?
        };
        match self.opt("embedding.positions.weight") {
            Some(pos) => {
                let s_local = self.local_seq();
                let offset = if self.tp.sp {
                    self.tp.rank * s_local
                } else {
                    0
                };
                Ok(x.broadcast_add(&pos.narrow(0, offset, s_local)?)?)
            }
            None => Ok(x),
        }
    }

    /// Final norm, output head and vocab-parallel cross-entropy: the mean loss over the
    /// micro-batch's tokens (a scalar, identical on every tensor-parallel rank).
    pub fn head_loss(&self, x: &Tensor, targets: &[u32]) -> Result<Tensor> {
        let w = if self.spec.tied_embeddings {
            self.get("embedding.tokens.weight")?
        } else {
            self.get("head.weight")?
        };
        let y = self.tp.enter(&self.norm(x, "head.norm")?)?;
        let (b, s, h) = y.dims3()?;
        let n = b * s;
        if targets.len() != n {
            return Err(Invariant::TargetCount {
                got: targets.len(),
                positions: n,
            }
            .into());
        }
        let mut logits = y.reshape((n, h))?.matmul(&w.t()?)?;
        if let Some(mask) = &self.vocab_pad_mask {
            logits = logits.broadcast_add(mask)?;
        }
        let local_v = logits.dim(1)?;
        let start = self.tp.rank * local_v;
        let max = self.tp.max(&logits.max_keepdim(1)?.detach())?;
        let z = logits.broadcast_sub(&max)?;
        let sum = self.tp.reduce(&z.exp()?.sum_keepdim(1)?)?;
        let mut ids = Vec::with_capacity(n);
        let mut keep = Vec::with_capacity(n);
        for &t in targets {
            let t = t as usize;
            let inside = t >= start && t < start + local_v;
            ids.push(if inside { (t - start) as u32 } else { 0 });
            keep.push(if inside { 1.0f32 } else { 0.0 });
        }
        let ids = Tensor::from_vec(ids, (n, 1), &self.device)?;
        let mut picked = z.gather(&ids, 1)?;
        if self.tp.size > 1 {
            picked = (picked * Tensor::from_vec(keep, (n, 1), &self.device)?)?;
        }
        let picked = self.tp.reduce(&picked)?;
        let loss = (sum.log()? - picked)?.mean_all()?;
        Ok(loss)
    }

    /// The variables of this stage, in parameter order.
    pub fn vars(&self) -> Vec<&Var> {
        self.params.iter().map(|p| &p.var).collect()
    }

    /// Element type of the stage's tensors (the runtime computes in f32).
    pub fn dtype(&self) -> DType {
        DType::F32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_match_the_spec_count() {
        for name in ["tiny-gpt", "tiny-llama"] {
            let spec = plait_spec::model_preset(name).unwrap();
            let defs = stage_params(&spec, 0, 1, 0..spec.layers as usize);
            let count: usize = defs.iter().map(|d| d.shape.iter().product::<usize>()).sum();
            assert_eq!(count as u64, spec.parameter_count(), "{name}");
        }
    }

    #[test]
    fn models_the_runtime_cannot_build_are_refused() {
        let llama = plait_spec::model_preset("tiny-llama").unwrap();
        assert!(check_model(&llama, 1, 64).is_ok());
        let windowed = ModelSpec {
            attention_window: Some(16),
            attention_chunk: None,
            ..llama.clone()
        };
        let mtp = ModelSpec {
            mtp_layers: 1,
            mtp_pattern: None,
            mtp_shared: false,
            mtp_bf16: false,
            ..llama
        };
        for m in [windowed, mtp] {
            let e = check_model(&m, 1, 64).unwrap_err().to_string();
            assert!(e.contains("not supported by the runtime"), "{e}");
        }
    }

    #[test]
    fn shards_tile_the_full_parameter() {
        let def = ParamDef::new("w".into(), vec![5, 4], Split::Rows, Init::Normal(1.0));
        let full = def.full_values(7);
        let a = def.shard(&full, 2, 0);
        let b = def.shard(&full, 2, 1);
        assert_eq!(a.len(), 12);
        assert_eq!(&a[..], &full[..12]);
        assert_eq!(&b[..8], &full[12..]);
        assert_eq!(&b[8..], &[0.0; 4]);
        let def = ParamDef::new("c".into(), vec![2, 4], Split::Cols, Init::Normal(1.0));
        let full = def.full_values(7);
        assert_eq!(
            def.shard(&full, 2, 1),
            vec![full[2], full[3], full[6], full[7]]
        );
    }
}
