//! The architecture templates every family is built on — GPT, LLaMA (and its MoE), BERT,
//! Llama 4 and Nemotron-H — as functions of their sizes. The named presets (`presets`)
//! and the Hugging Face parsers (`hf`) both build on these, so neither restates a family.
//!
//! It knows shapes only; which released model has which sizes is `presets`' and `hf`'s.

use super::{
    Activation, BlockKind, BlockRun, Family, MambaSpec, ModelSpec, MoeSpec, Norm, Positions,
    DEFAULT_NORM_EPS, DEFAULT_ROPE_THETA,
};

/// GPT-style decoder with learned positions, LayerNorm, GELU 4h MLP, biases, tied head.
/// Tables of published runs build their models on it (`plait_cost::calibration`).
pub fn gpt(name: &str, hidden: u64, layers: u64, heads: u64, vocab: u64, seq: u64) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        family: Family::Gpt,
        hidden,
        layers,
        heads,
        kv_heads: heads,
        head_dim: hidden / heads,
        ffn_hidden: 4 * hidden,
        vocab,
        max_positions: seq,
        type_vocab: 0,
        norm: Norm::LayerNorm,
        activation: Activation::Gelu,
        positions: Positions::Learned,
        qkv_bias: true,
        linear_bias: true,
        tied_embeddings: true,
        causal: true,
        moe: None,
        // Learned positions: θ unused. GPT-2's `layer_norm_epsilon` (HF gpt2 config.json).
        rope_theta: DEFAULT_ROPE_THETA,
        rope_scaling: None,
        norm_eps: 1e-5,
        attention_window: None,
        attention_chunk: None,
        block_runs: Vec::new(),
        mla: None,
        qk_norm: None,
        router: None,
        mtp_layers: 0,
        mtp_pattern: None,
        mtp_shared: false,
        mtp_bf16: false,
        block: BlockKind::Transformer,
        mamba: None,
    }
}

/// LLaMA-style decoder: RMSNorm, SwiGLU, GQA, RoPE, no biases, untied head (a MoE
/// family with `moe`).
#[allow(clippy::too_many_arguments)]
pub fn llama(
    name: &str,
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    ffn: u64,
    vocab: u64,
    moe: Option<MoeSpec>,
) -> ModelSpec {
    ModelSpec {
        name: name.into(),
        family: if moe.is_some() {
            Family::Moe
        } else {
            Family::Llama
        },
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim: hidden / heads,
        ffn_hidden: ffn,
        vocab,
        max_positions: 0,
        type_vocab: 0,
        norm: Norm::RmsNorm,
        activation: Activation::SwiGlu,
        positions: Positions::Rotary,
        qkv_bias: false,
        linear_bias: false,
        tied_embeddings: false,
        causal: true,
        moe,
        rope_theta: DEFAULT_ROPE_THETA,
        rope_scaling: None,
        norm_eps: DEFAULT_NORM_EPS,
        attention_window: None,
        attention_chunk: None,
        block_runs: Vec::new(),
        mla: None,
        qk_norm: None,
        router: None,
        mtp_layers: 0,
        mtp_pattern: None,
        mtp_shared: false,
        mtp_bf16: false,
        block: BlockKind::Transformer,
        mamba: None,
    }
}

/// BERT-style encoder: a GPT block without the causal mask, with two token types.
pub(crate) fn bert(
    name: &str,
    hidden: u64,
    layers: u64,
    heads: u64,
    vocab: u64,
    seq: u64,
) -> ModelSpec {
    ModelSpec {
        family: Family::Bert,
        type_vocab: 2,
        causal: false,
        // BERT's `layer_norm_eps` (HF bert-large-uncased config.json).
        norm_eps: 1e-12,
        attention_window: None,
        attention_chunk: None,
        block_runs: Vec::new(),
        mla: None,
        qk_norm: None,
        router: None,
        mtp_layers: 0,
        mtp_pattern: None,
        mtp_shared: false,
        mtp_bf16: false,
        ..gpt(name, hidden, layers, heads, vocab, seq)
    }
}

/// Nemotron-H hybrid (Megatron-LM's `MambaModel`; NVIDIA, "Nemotron-H", arXiv 2504.03624):
/// the layers of `pattern` (`M` Mamba-2 mixer, `*` attention, `-` squared-ReLU MLP of
/// `ffn`, each behind an RMSNorm; with `experts` — the routed experts and their width, as
/// Nemotron 3 — `E` a MoE layer of squared-ReLU experts), grouped-query attention without
/// biases or positional parameters, an untied head. `None` if the pattern has a symbol
/// other than `M`, `*`, `-` (and `E` with experts).
#[allow(clippy::too_many_arguments)]
pub(crate) fn nemotron_h(
    name: &str,
    hidden: u64,
    pattern: &str,
    (heads, kv_heads, head_dim): (u64, u64, u64),
    ffn: u64,
    vocab: u64,
    mamba: MambaSpec,
    experts: Option<(MoeSpec, u64)>,
) -> Option<ModelSpec> {
    let runs: Vec<BlockRun> =
        crate::model::runs_from_pattern(pattern, experts.map(|_| ffn)).ok()?;
    let layers = runs.iter().map(|r| r.count).sum();
    // One run of one kind is a uniform model, unless it is a run of dense MLPs beside
    // experts no layer uses (`dense_ffn` set): that run keeps its own width.
    let (block, block_runs) = match runs.as_slice() {
        [only] if only.dense_ffn.is_none() => (only.kind, Vec::new()),
        _ => (BlockKind::Transformer, runs),
    };
    Some(ModelSpec {
        head_dim,
        activation: Activation::Relu2,
        positions: Positions::None,
        // Nemotron-H's `layer_norm_epsilon` (config.json).
        norm_eps: 1e-5,
        block,
        block_runs,
        mamba: Some(mamba),
        ..match experts {
            // The MoE layers' experts are the model's MLP width; the dense `-` layers carry
            // their own (`BlockRun::dense_ffn`).
            Some((moe, expert_ffn)) => llama(
                name,
                hidden,
                layers,
                heads,
                kv_heads,
                expert_ffn,
                vocab,
                Some(moe),
            ),
            None => llama(name, hidden, layers, heads, kv_heads, ffn, vocab, None),
        }
    })
}

/// Llama 4's text model around its layer layout: GQA attention of `head_dim`-wide heads,
/// `moe` routed experts (and its shared ones) of `expert_ffn`, routed by a sigmoid of the
/// top-k logits without renormalisation (transformers' `Llama4Router`); RoPE θ 500,000,
/// RMSNorm ε 1e-5, untied (`Llama4TextConfig` defaults). The caller sets the block runs.
pub(crate) fn llama4(
    name: &str,
    (hidden, layers, heads, kv_heads, head_dim): (u64, u64, u64, u64, u64),
    expert_ffn: u64,
    vocab: u64,
    moe: MoeSpec,
) -> ModelSpec {
    ModelSpec {
        head_dim,
        rope_theta: 500_000.0,
        router: Some(crate::model::RouterSpec {
            sigmoid: true,
            expert_bias: false,
            groups: None,
            group_score_top2: false,
            normalize_topk: false,
            scaling: 1.0,
        }),
        ..llama(
            name,
            hidden,
            layers,
            heads,
            kv_heads,
            expert_ffn,
            vocab,
            Some(moe),
        )
    }
}

/// Llama 4's layers as block runs: layer i has experts where `moe[i]` (otherwise a dense
/// MLP of `dense_ffn`) and attends within chunks of `chunk` tokens where `rope[i]` (its
/// RoPE layers; the NoPE ones attend over the whole sequence). Returns the model-wide chunk
/// and no runs when every layer is alike.
pub(crate) fn llama4_layout(
    moe: &[bool],
    rope: &[bool],
    dense_ffn: Option<u64>,
    chunk: Option<u64>,
) -> (Option<u64>, Vec<BlockRun>) {
    let runs = crate::model::runs_of(moe.iter().zip(rope).map(|(&is_moe, &rope)| BlockRun {
        count: 1,
        kind: BlockKind::Transformer,
        window: None,
        dense_ffn: if is_moe { None } else { dense_ffn },
        chunk: if rope { chunk } else { None },
    }));
    if runs.len() == 1 && runs[0].dense_ffn.is_none() {
        (runs[0].chunk, Vec::new())
    } else {
        (None, runs)
    }
}
