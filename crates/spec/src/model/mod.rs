//! `ModelSpec`: a transformer described by its architecture hyper-parameters, with the
//! derived layer list, parameter counts and per-layer GEMM shapes that the cost model reads.
//!
//! This module knows shapes and counts only; it knows nothing of time, memory or hardware.

use serde::{Deserialize, Serialize};

pub mod arch;
mod blocks;

pub use blocks::{
    runs_from_pattern, runs_of, BlockKind, BlockRun, KindRuns, MambaSpec, DEFAULT_MAMBA_CHUNK,
    MAX_BLOCK_KINDS,
};

/// Model family: decides the block structure (norm, MLP kind, positions, head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// GPT-2/3 style decoder: learned positions, LayerNorm, GELU 4h MLP, biases.
    Gpt,
    /// LLaMA style decoder: RMSNorm, SwiGLU, grouped-query attention, RoPE, untied head.
    Llama,
    /// Mixtral style mixture-of-experts decoder (LLaMA block with routed SwiGLU experts).
    Moe,
    /// BERT style bidirectional encoder (post-norm, learned positions, token types).
    Bert,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    LayerNorm,
    RmsNorm,
}

/// The MLP non-linearity; `SwiGlu` means a gated MLP with three weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    Gelu,
    SwiGlu,
    /// Squared ReLU, not gated: two weight matrices (So et al. 2021, "Primer"; Nemotron-H's
    /// `mlp_hidden_act = "relu2"`, Megatron-LM `--squared-relu`).
    Relu2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Positions {
    /// A learned table of `max_positions × hidden` (GPT, BERT).
    Learned,
    /// Rotary embeddings: no parameters.
    Rotary,
    /// No position encoding: the sequence mixers carry the order (Nemotron-H: transformers
    /// 5.24 `NemotronHAttention` applies no rotary embedding; Megatron-LM d98e8a6 trains it
    /// with `--position-embedding-type none`, `examples/mamba/train.sh`).
    None,
    /// ALiBi (Press et al. 2022): a fixed per-head linear bias on the attention scores,
    /// added inside the fused attention kernel (flash-attn's `alibi_slopes`, MPT's
    /// `attn_config.alibi`); no parameters and no kernel of its own.
    Alibi,
}

/// A RoPE frequency rescaling (transformers `modeling_rope_utils.py`, by `rope_type`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RopeScaling {
    /// Llama 3.1's: wavelengths above `original_max_positions / low_freq_factor` divided by
    /// `factor`, those below `original_max_positions / high_freq_factor` kept, smoothly in
    /// between (`_compute_llama3_parameters`).
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_positions: u64,
    },
    /// YaRN (Peng et al. 2023), as DeepSeek-V3 and GPT-OSS use it: `beta_fast`/`beta_slow`
    /// bound the interpolated band (transformers' defaults 32 and 1); DeepSeek's `mscale`
    /// and `mscale_all_dim` set the attention temperature, `attention_factor` replaces it,
    /// `truncate` (default true) rounds the band's ends to integers (GPT-OSS: false); each
    /// `None` where not given.
    Yarn {
        factor: f64,
        original_max_positions: u64,
        #[serde(default = "default_yarn_beta_fast")]
        beta_fast: f64,
        #[serde(default = "default_yarn_beta_slow")]
        beta_slow: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mscale: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mscale_all_dim: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attention_factor: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        truncate: Option<bool>,
    },
    /// Position interpolation: every frequency divided by `factor`.
    Linear { factor: f64 },
    /// Another method, by its `rope_type` (kept so that an export can refuse it by name).
    Other { name: String },
}

impl RopeScaling {
    /// YaRN by `factor` over an original context, with transformers' defaults for the rest.
    pub fn yarn(factor: f64, original_max_positions: u64) -> RopeScaling {
        RopeScaling::Yarn {
            factor,
            original_max_positions,
            beta_fast: DEFAULT_YARN_BETA_FAST,
            beta_slow: DEFAULT_YARN_BETA_SLOW,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: None,
        }
    }
}

/// transformers' `_compute_yarn_parameters` defaults (`modeling_rope_utils.py`).
pub const DEFAULT_YARN_BETA_FAST: f64 = 32.0;
pub const DEFAULT_YARN_BETA_SLOW: f64 = 1.0;

fn default_yarn_beta_fast() -> f64 {
    DEFAULT_YARN_BETA_FAST
}

fn default_yarn_beta_slow() -> f64 {
    DEFAULT_YARN_BETA_SLOW
}

/// How a MoE router scores and picks experts where it departs from softmax top-k with
/// the top-k probabilities renormalised (Mixtral's, Megatron's default). It costs nothing
/// the model counts; exports need it to build the same router.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RouterSpec {
    /// `sigmoid` (DeepSeek-V3) or `softmax`.
    pub sigmoid: bool,
    /// A per-expert bias added for routing only (DeepSeek-V3's auxiliary-loss-free
    /// balancing, `topk_method = "noaux_tc"`).
    pub expert_bias: bool,
    /// Group-limited routing: (groups, groups kept), and whether a group scores by the sum
    /// of its top two experts (DeepSeek-V3) rather than its best one (DeepSeek-V2).
    pub groups: Option<(u64, u64)>,
    pub group_score_top2: bool,
    /// The routed experts' weights are renormalised over the top k (`norm_topk_prob`).
    pub normalize_topk: bool,
    /// Factor on the routed experts' output (`routed_scaling_factor`).
    pub scaling: f64,
}

/// Where a q/k norm normalises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    /// Over each head's `head_dim` (Qwen3's `q_norm`/`k_norm`; Megatron's `--qk-layernorm`).
    PerHead,
    /// Over all heads' width at once (OLMo 2).
    FullWidth,
}

/// Routed experts of a mixture-of-experts MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoeSpec {
    /// Experts per MoE layer.
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Shared experts every token passes through besides the routed ones (DeepSeek's
    /// `n_shared_experts`), each as wide as a routed one; a dense MLP split by tp, not ep.
    #[serde(default)]
    pub shared_experts: u64,
    /// LatentMoE (Nemotron 3 Super; Megatron-Core's `moe_latent_size`): the routed experts
    /// work at this width instead of the hidden size. A linear replicated over tp projects
    /// each token down before the dispatch and one projects the combined output back up, so
    /// tokens are dispatched at this width too (Megatron-LM d98e8a6 `moe/moe_layer.py`
    /// 266-303, 489-492 and 588-593, `moe/experts.py` 219 and 241, `token_dispatcher.py`
    /// 1535). `None`: the experts work on the hidden state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent: Option<u64>,
}

impl MoeSpec {
    /// Width of the routed experts' input and output: the latent width, else `hidden`.
    pub fn expert_width(&self, hidden: u64) -> u64 {
        self.latent.unwrap_or(hidden)
    }
}

/// Multi-head latent attention (DeepSeek-V2/V3): q and kv pass through low-rank latents,
/// and each head's query/key has a RoPE part beside the part without positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MlaSpec {
    /// Rank of the query latent (0: queries projected from the hidden state directly).
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

impl MlaSpec {
    /// Query/key width of one head.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// A transformer model: everything the planner, cost model and runtime need about its shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub name: String,
    pub family: Family,
    /// Hidden size h.
    pub hidden: u64,
    /// Number of transformer blocks l.
    pub layers: u64,
    /// Query heads a.
    pub heads: u64,
    /// Key/value heads (= heads without grouped-query attention).
    pub kv_heads: u64,
    /// Size of one head (usually hidden / heads).
    pub head_dim: u64,
    /// MLP inner size (4h for GPT; per expert for MoE).
    pub ffn_hidden: u64,
    /// Vocabulary size V (unpadded).
    pub vocab: u64,
    /// Rows of the learned position table (0 with rotary positions).
    pub max_positions: u64,
    /// Token-type vocabulary (BERT segment embeddings; 0 otherwise).
    pub type_vocab: u64,
    pub norm: Norm,
    pub activation: Activation,
    pub positions: Positions,
    /// Bias on the q/k/v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output and MLP projections.
    pub linear_bias: bool,
    /// Output head shares the input embedding matrix.
    pub tied_embeddings: bool,
    /// Causal (decoder) or bidirectional (encoder) attention.
    pub causal: bool,
    pub moe: Option<MoeSpec>,
    /// RoPE base θ (Hugging Face `rope_theta`, Megatron `--rotary-base`); no parameters or
    /// FLOPs depend on it. Meaningless with learned positions. Defaults to 10,000 (the value
    /// of the RoFormer paper, transformers' and Megatron's default).
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// How the RoPE frequencies are rescaled past the pre-training context (transformers'
    /// `rope_scaling`). No time or memory depends on it; the exports must carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    /// ε of every LayerNorm/RMSNorm (`rms_norm_eps` / `layer_norm_eps`, Megatron
    /// `--norm-epsilon`). Defaults to 1e-5 (Megatron's `layernorm_epsilon` default).
    #[serde(default = "default_norm_eps")]
    pub norm_eps: f64,
    /// Sliding-window attention span of every block (Mistral 7B v0.1's 4096); `None`: each
    /// query attends over all earlier keys.
    #[serde(default)]
    pub attention_window: Option<u64>,
    /// Chunked local attention of every block (Llama 4's `attention_chunk_size`): each query
    /// attends to the earlier keys of its own chunk of this many tokens; `None`: no chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk: Option<u64>,
    /// The blocks in order as runs of kinds, when they are not all alike (empty: `layers`
    /// identical blocks). The counts add up to `layers`.
    #[serde(default)]
    pub block_runs: Vec<BlockRun>,
    /// Multi-head latent attention in place of q/k/v/o over `heads × head_dim`.
    #[serde(default)]
    pub mla: Option<MlaSpec>,
    /// RMSNorm on the queries and keys before RoPE (Qwen3 per head, OLMo 2 over their full
    /// width); its few weights are left out of the count and the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_norm: Option<QkNorm>,
    /// The MoE router where it is not Mixtral's (`None`: softmax top-k, renormalised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSpec>,
    /// Multi-token-prediction modules trained beside the model (DeepSeek-V3's
    /// `num_nextn_predict_layers`, Megatron's `mtp_num_layers`): each one more block of the
    /// last block's kind, a projection of [embedding; hidden] (2h → h) and a pass through
    /// the shared output head. Not in [`ModelSpec::parameter_count`] (published sizes count
    /// the main model), but in memory and time.
    #[serde(default)]
    pub mtp_layers: u64,
    /// The blocks of a multi-token-prediction module as `hybrid_override_pattern` symbols
    /// (Nemotron 3's `mtp_hybrid_override_pattern`, `*E`: an attention block, then a MoE
    /// block); `None`: one block of the last block's kind (DeepSeek-V3's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp_pattern: Option<String>,
    /// The `mtp_layers` passes run one module, its weights held once (Megatron-Core's
    /// `mtp_use_repeated_layer`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mtp_shared: bool,
    /// The multi-token-prediction modules' linears run in 16-bit whatever the run's format
    /// (Megatron Bridge's `keep_mtp_spec_in_bf16`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mtp_bf16: bool,
    /// What each block holds when the blocks are alike (with `block_runs`, each run says
    /// its own). Left out of the serialised form when it is the transformer block.
    #[serde(default, skip_serializing_if = "BlockKind::is_transformer")]
    pub block: BlockKind,
    /// The Mamba-2 mixer of the model's Mamba blocks (`None`: the model has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba: Option<MambaSpec>,
}

/// RoPE base of RoFormer (Su et al. 2021) and the default of transformers and Megatron-LM.
pub const DEFAULT_ROPE_THETA: f64 = 10_000.0;
/// Megatron-LM's `layernorm_epsilon` default (`transformer_config.py`).
pub const DEFAULT_NORM_EPS: f64 = 1e-5;

fn default_rope_theta() -> f64 {
    DEFAULT_ROPE_THETA
}

fn default_norm_eps() -> f64 {
    DEFAULT_NORM_EPS
}

/// What a layer of the model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerKind {
    /// Token (+ position, + type) embedding lookup.
    Embedding,
    /// One transformer block (attention + MLP, with their norms).
    Block,
    /// The final norm and the output head with its loss (or BERT's pooler).
    Head,
}

/// One entry of the model's layer list, in execution order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layer {
    pub name: String,
    pub kind: LayerKind,
}

/// A matrix multiplication `[m × k] · [k × n]`, repeated `count` times (same shape).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Gemm {
    pub name: &'static str,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub count: u64,
}

impl Gemm {
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.count as f64
    }
}

/// How a block's weights are split across GPUs: tensor parallel `tp`, expert parallel `ep`,
/// and the experts' own tensor parallelism `etp` (a divisor of tp; = tp by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub tp: u64,
    pub ep: u64,
    pub etp: u64,
}

impl Shard {
    pub const NONE: Shard = Shard {
        tp: 1,
        ep: 1,
        etp: 1,
    };

    /// Experts split as the dense layers are (expert tp = tp).
    pub fn new(tp: u64, ep: u64) -> Shard {
        Shard { tp, ep, etp: tp }
    }
}

impl ModelSpec {
    /// Sum of `f` over the blocks: per kind, times its block count.
    fn over_blocks(&self, f: impl Fn(&ModelSpec) -> u64) -> u64 {
        let counts = self.kind_counts(0, self.layers);
        self.block_kinds()
            .iter()
            .zip(counts)
            .map(|(k, n)| n * f(k))
            .sum()
    }

    /// Parameters of all blocks.
    pub fn blocks_params(&self) -> u64 {
        self.over_blocks(ModelSpec::block_params)
    }

    /// Expert parameters of all blocks.
    pub fn blocks_expert_params(&self) -> u64 {
        self.over_blocks(ModelSpec::expert_params)
    }

    /// The layers in execution order: embedding, `layers` blocks, head.
    pub fn layer_list(&self) -> Vec<Layer> {
        let mut out = Vec::with_capacity(self.layers as usize + 2);
        out.push(Layer {
            name: "embedding".into(),
            kind: LayerKind::Embedding,
        });
        for i in 0..self.layers {
            out.push(Layer {
                name: format!("block.{i}"),
                kind: LayerKind::Block,
            });
        }
        out.push(Layer {
            name: "head".into(),
            kind: LayerKind::Head,
        });
        out
    }

    /// Width of the query projection output (heads × head_dim).
    pub fn q_width(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// Width of one of the key or value projections (kv_heads × head_dim).
    pub fn kv_width(&self) -> u64 {
        self.kv_heads * self.head_dim
    }

    fn norm_params(&self) -> u64 {
        match self.norm {
            Norm::LayerNorm => 2 * self.hidden,
            Norm::RmsNorm => self.hidden,
        }
    }

    /// Weight matrices of one expert's (or the dense) MLP, in units of h × ffn.
    fn mlp_matrices(&self) -> u64 {
        match self.activation {
            Activation::Gelu | Activation::Relu2 => 2,
            Activation::SwiGlu => 3,
        }
    }

    fn one_mlp_params(&self) -> u64 {
        self.mlp_params_at(self.hidden)
    }

    /// Parameters of one MLP of `ffn_hidden` whose input and output have width `h`.
    fn mlp_params_at(&self, h: u64) -> u64 {
        let f = self.ffn_hidden;
        let bias = if self.linear_bias {
            (self.mlp_matrices() - 1) * f + h
        } else {
            0
        };
        self.mlp_matrices() * h * f + bias
    }

    /// Attention parameters of one block (q, k, v, output projection and biases).
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden;
        if !self.block.has_attention() {
            return 0;
        }
        if let Some(mla) = self.mla {
            // q: down to the latent (with its RMSNorm) and up to the heads, or straight up;
            // kv: down to the latent plus the shared RoPE key (with the latent's RMSNorm),
            // up to each head's key (no RoPE part) and value; output from the values.
            let q_out = self.heads * mla.qk_head_dim();
            let q = if mla.q_lora_rank > 0 {
                h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * q_out
            } else {
                h * q_out
            };
            let kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
                + mla.kv_lora_rank
                + mla.kv_lora_rank * self.heads * (mla.qk_nope_head_dim + mla.v_head_dim);
            return q + kv + self.heads * mla.v_head_dim * h;
        }
        let qkv = h * (self.q_width() + 2 * self.kv_width());
        let qkv_bias = if self.qkv_bias {
            self.q_width() + 2 * self.kv_width()
        } else {
            0
        };
        let out = self.q_width() * h + if self.linear_bias { h } else { 0 };
        qkv + qkv_bias + out
    }

    /// MLP parameters of one block: dense MLP, or all experts plus the router.
    pub fn mlp_params(&self) -> u64 {
        if !self.block.has_mlp() {
            return 0;
        }
        match self.moe {
            None => self.one_mlp_params(),
            Some(moe) => {
                moe.experts * self.mlp_params_at(moe.expert_width(self.hidden))
                    + moe.shared_experts * self.one_mlp_params()
                    + self.hidden * moe.experts
                    + self.latent_projection_params()
            }
        }
    }

    /// Parameters of a LatentMoE block's two projections to and from the experts' width
    /// (weights, and biases where the linears have them); 0 without a latent width.
    pub fn latent_projection_params(&self) -> u64 {
        match self.moe.and_then(|m| m.latent) {
            Some(latent) if self.block.has_mlp() => {
                let bias = if self.linear_bias {
                    latent + self.hidden
                } else {
                    0
                };
                2 * self.hidden * latent + bias
            }
            _ => 0,
        }
    }

    /// Parameters of the expert weights of one block (0 for dense models).
    pub fn expert_params(&self) -> u64 {
        if !self.block.has_mlp() {
            return 0;
        }
        match self.moe {
            None => 0,
            Some(moe) => moe.experts * self.mlp_params_at(moe.expert_width(self.hidden)),
        }
    }

    /// Parameter tensors of one transformer block as Megatron-LM lays it out: the fused
    /// qkv, output, fc1 (gate and up fused) and fc2 weights, two norm weights, and the
    /// biases the architecture has (linear biases, LayerNorm biases), plus the router and
    /// two weights per expert in place of the dense MLP's for MoE blocks.
    pub fn block_param_tensors(&self) -> u64 {
        let norm_tensors = match self.norm {
            Norm::LayerNorm => 2,
            Norm::RmsNorm => 1,
        };
        match self.block {
            BlockKind::Transformer => {}
            // in_proj, conv1d weight (and bias), A_log, D, dt_bias, the gated norm's weight,
            // out_proj (and the projections' biases), and the pre-norm.
            BlockKind::Mamba => {
                let (conv_bias, proj_bias) = self
                    .mamba
                    .map_or((false, false), |m| (m.conv_bias, m.proj_bias));
                return 7 + u64::from(conv_bias) + 2 * u64::from(proj_bias) + norm_tensors;
            }
            // qkv and output (with their biases) and the pre-norm.
            BlockKind::Attention => {
                return 2 + u64::from(self.qkv_bias) + u64::from(self.linear_bias) + norm_tensors;
            }
            BlockKind::Mlp => {}
        }
        let attention = if self.block.has_attention() { 2 } else { 0 };
        let mlp_linears = match self.moe {
            None => 2,
            Some(moe) => 2 * moe.experts + 1 + 2 * u64::from(moe.latent.is_some()),
        };
        let linears = attention + mlp_linears;
        let mut biases = 0;
        if self.qkv_bias && self.block.has_attention() {
            biases += 1;
        }
        if self.linear_bias {
            // output projection and the MLP's (or each expert's) linears
            biases += attention / 2 + mlp_linears - u64::from(self.moe.is_some());
        }
        linears + biases + self.block.norms() * norm_tensors
    }

    /// Parameters of the Mamba-2 mixer of one block (0 for blocks without one).
    pub fn mixer_params(&self) -> u64 {
        match (self.block, self.mamba) {
            (BlockKind::Mamba, Some(mamba)) => mamba.params(self.hidden),
            _ => 0,
        }
    }

    /// Parameters of one block: its attention, MLP or Mamba-2 mixer, and a pre-norm for each.
    pub fn block_params(&self) -> u64 {
        self.attention_params()
            + self.mlp_params()
            + self.mixer_params()
            + self.block.norms() * self.norm_params()
    }

    /// Parameters of the embedding layer (token, position, token-type, BERT's embedding norm).
    pub fn embedding_params(&self) -> u64 {
        let h = self.hidden;
        let pos = match self.positions {
            Positions::Learned => self.max_positions * h,
            Positions::Rotary | Positions::None | Positions::Alibi => 0,
        };
        let emb_norm = if self.family == Family::Bert {
            self.norm_params()
        } else {
            0
        };
        self.vocab * h + pos + self.type_vocab * h + emb_norm
    }

    /// Parameters of the head: final norm and untied output matrix (decoders), or the
    /// pooler (BERT, whose post-norm blocks need no final norm).
    pub fn head_params(&self) -> u64 {
        let h = self.hidden;
        if self.family == Family::Bert {
            return h * h + h;
        }
        let out = if self.tied_embeddings {
            0
        } else {
            self.vocab * h
        };
        self.norm_params() + out
    }

    /// Total parameters of the model (as published model sizes count them).
    pub fn parameter_count(&self) -> u64 {
        self.embedding_params() + self.blocks_params() + self.head_params()
    }

    /// Parameters that one token's forward pass touches (differs from the total for MoE).
    pub fn active_parameter_count(&self) -> u64 {
        self.parameter_count()
            - self.over_blocks(|k| match k.moe {
                None => 0,
                Some(moe) => {
                    (moe.experts - moe.top_k) * k.mlp_params_at(moe.expert_width(k.hidden))
                }
            })
    }

    /// Keys each query of a block attends over at sequence length `seq`: the sequence (or
    /// its attention chunk, where shorter), or the sliding window where it is shorter still.
    pub fn attention_span(&self, seq: u64) -> u64 {
        let context = self.attention_chunk.map_or(seq, |c| c.min(seq));
        self.attention_window.map_or(context, |w| w.min(context))
    }

    /// Forward GEMMs of one block on one GPU, for `tokens` tokens (micro-batch × sequence
    /// on this GPU), with weights split by `shard`. Attention score/value products are not
    /// GEMMs here: their shape is given by [`ModelSpec::attention_shape`].
    ///
    /// For MoE the routed tokens are assumed balanced over experts: each of the
    /// `experts/ep` local experts sees `tokens·top_k·ep/experts` tokens at expert tp = tp
    /// (tokens arrive from the `ep` ranks of the expert group through the all-to-all, and
    /// are gathered over the expert-tp group); an expert tp below tp gathers over fewer
    /// ranks (`etp/tp` of that) and splits the expert's width `ffn/etp` ways.
    pub fn block_gemms(&self, tokens: u64, shard: Shard) -> BlockGemms {
        let h = self.hidden;
        let t = shard.tp;
        let qkv_out = (self.q_width() + 2 * self.kv_width()) / t;
        let gemm = |name, m, n, k| Gemm {
            name,
            m,
            n,
            k,
            count: 1,
        };
        // Multi-head latent attention (Megatron-Core `MLASelfAttention`): the down
        // projections to the q and kv latents (and the shared RoPE key) are replicated over
        // tp; the up projections to the heads are column-parallel, the output row-parallel.
        let (attn, attn_pre) = match self.mla {
            Some(mla) => {
                let heads = self.heads / t;
                let q_up_k = if mla.q_lora_rank > 0 {
                    mla.q_lora_rank
                } else {
                    h
                };
                let down = mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim;
                (
                    [
                        gemm("q_up", tokens, heads * mla.qk_head_dim(), q_up_k),
                        gemm("attn_out", tokens, h, heads * mla.v_head_dim),
                    ],
                    Some([
                        gemm("qkv_down", tokens, down, h),
                        gemm(
                            "kv_up",
                            tokens,
                            heads * (mla.qk_nope_head_dim + mla.v_head_dim),
                            mla.kv_lora_rank,
                        ),
                    ]),
                )
            }
            None => (
                [
                    gemm("qkv", tokens, qkv_out, h),
                    gemm("attn_out", tokens, h, self.q_width() / t),
                ],
                None,
            ),
        };
        let expert_width = self.moe.map_or(h, |m| m.expert_width(h));
        let (f, mlp_tokens, experts, router) = match self.moe {
            None => (self.ffn_hidden / t, tokens, 1, None),
            Some(moe) => {
                let etp = shard.etp.clamp(1, t.max(1));
                let local = (moe.experts / shard.ep).max(1);
                let routed = (tokens * moe.top_k * shard.ep * etp).div_ceil(moe.experts * t);
                (
                    self.ffn_hidden / etp,
                    routed,
                    local,
                    Some(Gemm {
                        name: "router",
                        m: tokens,
                        n: moe.experts,
                        k: h,
                        count: 1,
                    }),
                )
            }
        };
        let up_width = match self.activation {
            Activation::Gelu | Activation::Relu2 => f,
            Activation::SwiGlu => 2 * f,
        };
        let mlp = [
            Gemm {
                name: "mlp_up",
                m: mlp_tokens,
                n: up_width,
                k: expert_width,
                count: experts,
            },
            Gemm {
                name: "mlp_down",
                m: mlp_tokens,
                n: expert_width,
                k: f,
                count: experts,
            },
        ];
        // LatentMoE's projections, replicated over tp, on each tp rank's share of the tokens
        // (the dispatcher's input).
        let latent = self.moe.and_then(|m| m.latent).map(|l| {
            let local = tokens.div_ceil(t.max(1));
            [
                gemm("latent_down", local, l, h),
                gemm("latent_up", local, h, l),
            ]
        });
        // Shared experts run on every token as one dense MLP, split by tp.
        let shared = self.moe.filter(|m| m.shared_experts > 0).map(|moe| {
            let fs = moe.shared_experts * self.ffn_hidden / t;
            let up = match self.activation {
                Activation::Gelu | Activation::Relu2 => fs,
                Activation::SwiGlu => 2 * fs,
            };
            [
                gemm("shared_up", tokens, up, h),
                gemm("shared_down", tokens, h, fs),
            ]
        });
        BlockGemms {
            attn,
            attn_pre,
            mlp,
            router,
            shared,
            latent,
        }
    }

    /// Forward GEMMs of a Mamba-2 block's mixer on one GPU for `tokens` tokens: the input
    /// projection to [z, x, B, C, dt] (column-parallel: heads and groups split over `tp`)
    /// and the output projection from d_inner (row-parallel), as Megatron-LM's
    /// `MambaMixer` splits them (`megatron/core/ssm/mamba_mixer.py`: `nheads % tp_size`,
    /// `ngroups % tp_size`, `d_inner_local_tp = d_inner // tp_size`). `None` for blocks
    /// without a mixer.
    pub fn mamba_gemms(&self, tokens: u64, tp: u64) -> Option<[Gemm; 2]> {
        let mamba = self.mamba.filter(|_| self.block == BlockKind::Mamba)?;
        Some([
            Gemm {
                name: "in_proj",
                m: tokens,
                n: mamba.in_proj_width() / tp,
                k: self.hidden,
                count: 1,
            },
            Gemm {
                name: "out_proj",
                m: tokens,
                n: self.hidden,
                k: mamba.d_inner() / tp,
                count: 1,
            },
        ])
    }

    /// Attention on one GPU: `(heads per GPU, kv heads per GPU, head_dim)`.
    /// Key/value heads are replicated when tp exceeds their number (as Megatron does).
    /// With MLA every head has its own key and value, and `head_dim` is the mean of the
    /// query/key and value widths (the score and value products' FLOPs per element).
    pub fn attention_shape(&self, tp: u64) -> (u64, u64, u64) {
        if let Some(mla) = self.mla {
            let heads = self.heads / tp;
            return (heads, heads, (mla.qk_head_dim() + mla.v_head_dim) / 2);
        }
        (self.heads / tp, (self.kv_heads / tp).max(1), self.head_dim)
    }
}

/// The forward GEMMs of one block on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockGemms {
    /// q/k/v projection (MLA: the query up projection) and attention output projection.
    pub attn: [Gemm; 2],
    /// MLA only: the replicated down projection to the latents and the kv up projection.
    pub attn_pre: Option<[Gemm; 2]>,
    /// MLP up (gate+up for SwiGLU) and down projections, per expert for MoE.
    pub mlp: [Gemm; 2],
    /// MoE router (tokens × experts).
    pub router: Option<Gemm>,
    /// Shared experts' up and down projections (every token).
    pub shared: Option<[Gemm; 2]>,
    /// LatentMoE's projection to the experts' width and back (`MoeSpec::latent`).
    pub latent: Option<[Gemm; 2]>,
}

impl BlockGemms {
    pub fn iter(&self) -> impl Iterator<Item = &Gemm> {
        self.attn
            .iter()
            .chain(self.attn_pre.iter().flatten())
            .chain(self.mlp.iter())
            .chain(self.router.iter())
            .chain(self.shared.iter().flatten())
            .chain(self.latent.iter().flatten())
    }
}
