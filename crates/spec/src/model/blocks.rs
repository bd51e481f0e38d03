//! What a block of the layer list holds: its kind (transformer, attention, MLP, Mamba-2),
//! the Mamba-2 mixer's shape, the runs of blocks that differ from the model's default
//! block (sliding windows, attention chunks, dense layers among MoE ones, hybrid
//! patterns), and `ModelSpec`'s answers about them (`block_kinds`, `kind_counts`: the one
//! place that knows which block is which).
//!
//! Shapes and counts only, like the rest of `model`.

use serde::{Deserialize, Serialize};

use super::{ModelSpec, MoeSpec};

/// What one block (one layer of the layer list) holds, each part behind its own pre-norm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// Self-attention and an MLP: a transformer block (every model but the hybrids).
    #[default]
    Transformer,
    /// Self-attention alone (Nemotron-H's `*` layers: pre-norm + attention, no MLP).
    Attention,
    /// An MLP alone (Nemotron-H's `-` layers: pre-norm + MLP, no attention).
    Mlp,
    /// A Mamba-2 mixer alone (Nemotron-H's `M` layers), shaped by [`ModelSpec::mamba`].
    Mamba,
}

impl BlockKind {
    /// Whether this is the default (serialisation leaves it out, so that the models that
    /// existed before hybrid blocks keep their serialised form).
    pub fn is_transformer(&self) -> bool {
        *self == BlockKind::Transformer
    }
    /// Whether the block has self-attention.
    pub fn has_attention(self) -> bool {
        matches!(self, BlockKind::Transformer | BlockKind::Attention)
    }
    /// Whether the block has an MLP (dense or MoE).
    pub fn has_mlp(self) -> bool {
        matches!(self, BlockKind::Transformer | BlockKind::Mlp)
    }
    /// Pre-norms of the block: one per part.
    pub fn norms(self) -> u64 {
        match self {
            BlockKind::Transformer => 2,
            _ => 1,
        }
    }
}

impl BlockKind {
    /// The kind a symbol of Megatron-LM's `hybrid_override_pattern` names
    /// (`megatron/core/ssm/mamba_hybrid_layer_allocation.py`: `M` Mamba, `*` attention,
    /// `-` MLP); `None` for any other symbol (`E`, a MoE layer, is an MLP of the model's
    /// experts: [`runs_from_pattern`] reads it where the model has them).
    pub fn from_pattern_symbol(c: char) -> Option<BlockKind> {
        match c {
            'M' => Some(BlockKind::Mamba),
            '*' => Some(BlockKind::Attention),
            '-' => Some(BlockKind::Mlp),
            _ => None,
        }
    }

    /// The symbol of this kind in a `hybrid_override_pattern` (`T` for a transformer block,
    /// which the pattern cannot name).
    pub fn pattern_symbol(self) -> char {
        match self {
            BlockKind::Mamba => 'M',
            BlockKind::Attention => '*',
            BlockKind::Mlp => '-',
            BlockKind::Transformer => 'T',
        }
    }
}

/// The block runs of a `hybrid_override_pattern` (one symbol per layer), run-length
/// encoded; `Err((position, symbol))` at the first symbol that names no kind. In a model
/// with experts (`dense_beside_experts`: the dense MLP's width), `E` is an MLP layer of
/// the model's experts (Megatron-LM d98e8a6 `mamba_hybrid_layer_allocation.py`: `E` a MoE
/// layer) and `-` a dense MLP of that width; without experts `E` names no kind.
pub fn runs_from_pattern(
    pattern: &str,
    dense_beside_experts: Option<u64>,
) -> std::result::Result<Vec<BlockRun>, (usize, char)> {
    let mut runs: Vec<BlockRun> = Vec::new();
    for (i, c) in pattern.chars().enumerate() {
        let (kind, dense_ffn) = match (c, dense_beside_experts) {
            ('E', Some(_)) => (BlockKind::Mlp, None),
            ('-', width) => (BlockKind::Mlp, width),
            _ => (BlockKind::from_pattern_symbol(c).ok_or((i, c))?, None),
        };
        match runs.last_mut() {
            Some(r) if r.kind == kind && r.dense_ffn == dense_ffn => r.count += 1,
            _ => runs.push(BlockRun {
                count: 1,
                kind,
                window: None,
                dense_ffn,
                chunk: None,
            }),
        }
    }
    Ok(runs)
}

/// Run-length encodes one block per layer (each `count` 1) into runs of alike blocks.
pub fn runs_of(blocks: impl IntoIterator<Item = BlockRun>) -> Vec<BlockRun> {
    let mut runs: Vec<BlockRun> = Vec::new();
    for b in blocks {
        match runs.last_mut() {
            Some(r)
                if BlockRun {
                    count: b.count,
                    ..*r
                } == b =>
            {
                r.count += b.count
            }
            _ => runs.push(b),
        }
    }
    runs
}

/// Chunk length Q of the SSD scan when a config does not give one: Megatron-LM's
/// `MambaMixer` default (`megatron/core/ssm/mamba_mixer.py`, `chunk_size=128`), which
/// Nemotron-H trains with.
pub const DEFAULT_MAMBA_CHUNK: u64 = 128;

fn default_mamba_chunk() -> u64 {
    DEFAULT_MAMBA_CHUNK
}

fn default_true() -> bool {
    true
}

/// A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", §7 the Mamba-2 block) as
/// Megatron-LM's `MambaMixer` and transformers' `NemotronHMamba2Mixer` build it: one input
/// projection to [z, x, B, C, dt], a causal depthwise conv1d over [x, B, C], the SSD scan
/// with per-head A, D and dt bias, a gated RMSNorm over d_inner and the output projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MambaSpec {
    /// SSM heads (`mamba_num_heads`).
    pub heads: u64,
    /// Channels per head P (`mamba_head_dim`).
    pub head_dim: u64,
    /// State size N (`ssm_state_size`).
    pub state: u64,
    /// Groups sharing B and C (`n_groups`).
    pub groups: u64,
    /// Kernel width of the causal conv1d (`conv_kernel`).
    pub conv_kernel: u64,
    /// Chunk length Q of the SSD algorithm (`chunk_size`).
    #[serde(default = "default_mamba_chunk")]
    pub chunk: u64,
    /// Bias on the conv1d (`use_conv_bias`, default true).
    #[serde(default = "default_true")]
    pub conv_bias: bool,
    /// Bias on the in and out projections (`use_bias`, default false).
    #[serde(default)]
    pub proj_bias: bool,
}

impl MambaSpec {
    /// d_inner = heads × head_dim (= expand × hidden for Nemotron-H).
    pub fn d_inner(&self) -> u64 {
        self.heads * self.head_dim
    }
    /// Width of the B and C projections together: 2 × groups × state.
    pub fn bc_width(&self) -> u64 {
        2 * self.groups * self.state
    }
    /// Output width of the input projection: z and x (d_inner each), B and C, dt (one per
    /// head).
    pub fn in_proj_width(&self) -> u64 {
        2 * self.d_inner() + self.bc_width() + self.heads
    }
    /// Channels of the depthwise conv1d: x, B and C.
    pub fn conv_channels(&self) -> u64 {
        self.d_inner() + self.bc_width()
    }
    /// Parameters of one mixer (without the layer's pre-norm): in_proj, conv1d weight (and
    /// bias), A_log, D and dt_bias (one per head each), the gated RMSNorm weight, out_proj.
    pub fn params(&self, hidden: u64) -> u64 {
        let d = self.d_inner();
        let in_proj = hidden * self.in_proj_width()
            + if self.proj_bias {
                self.in_proj_width()
            } else {
                0
            };
        let conv = self.conv_channels() * self.conv_kernel
            + if self.conv_bias {
                self.conv_channels()
            } else {
                0
            };
        let out_proj = d * hidden + if self.proj_bias { hidden } else { 0 };
        in_proj + conv + 3 * self.heads + d + out_proj
    }
}

/// A run of consecutive blocks that differ from the model's default block in their
/// attention span, their MLP or what they hold: sliding-window layers between
/// full-attention ones (Gemma 2 and 3, GPT-OSS), dense layers among MoE ones (DeepSeek's
/// `first_k_dense_replace`, Llama 4's interleaving), Mamba-2, attention-only and MLP-only
/// layers of a hybrid (Nemotron-H's `hybrid_override_pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BlockRun {
    pub count: u64,
    /// What the blocks hold (default: attention and MLP).
    #[serde(default, skip_serializing_if = "BlockKind::is_transformer")]
    pub kind: BlockKind,
    /// Sliding-window attention over this many keys (`None`: the model's default span).
    #[serde(default)]
    pub window: Option<u64>,
    /// A dense MLP of this width in place of the model's MoE (`None`: the default MLP).
    #[serde(default)]
    pub dense_ffn: Option<u64>,
    /// Chunked local attention: each query attends only to the earlier keys of its own
    /// chunk of this many tokens (Llama 4's `attention_chunk_size` on its RoPE layers;
    /// `None`: the model's default span).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u64>,
}

/// Most distinct block kinds a model may have (sliding or chunked/full × dense/MoE;
/// Nemotron-H's Mamba-2, attention and MLP layers).
pub const MAX_BLOCK_KINDS: usize = 4;

/// A block kind's identity: what it holds, attention window, attention chunk, experts, MLP width.
type RunKey = (BlockKind, Option<u64>, Option<u64>, Option<MoeSpec>, u64);

/// Which block is which: the kinds of a model's blocks and where each sits.
impl ModelSpec {
    /// What distinguishes a run's blocks: the attention span and the MLP (experts, width).
    fn run_key(&self, run: &BlockRun) -> RunKey {
        let window = run.window.or(self.attention_window);
        let chunk = run.chunk.or(self.attention_chunk);
        let (moe, ffn) = match run.dense_ffn {
            Some(f) => (None, f),
            None => (self.moe, self.ffn_hidden),
        };
        // Only the parts a block holds tell its kind apart.
        match run.kind {
            BlockKind::Transformer => (run.kind, window, chunk, moe, ffn),
            BlockKind::Attention => (run.kind, window, chunk, None, 0),
            BlockKind::Mlp => (run.kind, None, None, moe, ffn),
            BlockKind::Mamba => (run.kind, None, None, None, 0),
        }
    }

    /// Kind index (into [`ModelSpec::block_kinds`]) of each run, without allocating: kinds
    /// are numbered in the order they first appear.
    fn run_kinds(&self) -> impl Iterator<Item = (usize, &BlockRun)> + '_ {
        let mut seen: [Option<RunKey>; MAX_BLOCK_KINDS] = [None; MAX_BLOCK_KINDS];
        self.block_runs.iter().map(move |run| {
            let key = self.run_key(run);
            let k = match seen.iter().position(|s| *s == Some(key)) {
                Some(k) => k,
                None => {
                    let free = seen
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or(MAX_BLOCK_KINDS - 1);
                    seen[free] = Some(key);
                    free
                }
            };
            (k, run)
        })
    }

    /// The distinct kinds of block, as uniform models (each without runs), in the order
    /// they first appear; one entry for a uniform model.
    pub fn block_kinds(&self) -> Vec<ModelSpec> {
        if self.block_runs.is_empty() {
            return vec![self.clone()];
        }
        let mut kinds: Vec<ModelSpec> = Vec::new();
        for (k, run) in self.run_kinds() {
            if k == kinds.len() {
                kinds.push(self.variant(run));
            }
        }
        kinds
    }

    /// The uniform model whose blocks are those of `run`.
    pub fn variant(&self, run: &BlockRun) -> ModelSpec {
        let mut v = ModelSpec {
            block_runs: Vec::new(),
            ..self.clone()
        };
        if run.window.is_some() {
            v.attention_window = run.window;
        }
        if run.chunk.is_some() {
            v.attention_chunk = run.chunk;
        }
        if let Some(f) = run.dense_ffn {
            v.moe = None;
            v.ffn_hidden = f;
        }
        v.block = run.kind;
        if !run.kind.has_mlp() {
            v.moe = None;
        }
        v
    }

    /// Whether any block is a Mamba-2 mixer.
    pub fn has_mamba(&self) -> bool {
        self.block == BlockKind::Mamba
            || self
                .block_runs
                .iter()
                .any(|r| r.kind == BlockKind::Mamba && r.count > 0)
    }

    /// The model's `hybrid_override_pattern` (one symbol per block), when it is a hybrid
    /// whose blocks are all Mamba-2, attention-only or MLP-only.
    pub fn hybrid_pattern(&self) -> Option<String> {
        if !self.is_hybrid() {
            return None;
        }
        // An MLP layer of the model's experts is `E`; a dense one (or any without experts) `-`.
        let symbol = |kind: BlockKind, dense_ffn: Option<u64>| match kind {
            BlockKind::Mlp if self.moe.is_some() && dense_ffn.is_none() => 'E',
            other => other.pattern_symbol(),
        };
        let symbols: Vec<(BlockKind, char)> = if self.block_runs.is_empty() {
            vec![(self.block, symbol(self.block, None)); self.layers as usize]
        } else {
            self.block_runs
                .iter()
                .flat_map(|r| {
                    std::iter::repeat_n((r.kind, symbol(r.kind, r.dense_ffn)), r.count as usize)
                })
                .collect()
        };
        if symbols.iter().any(|(k, _)| k.is_transformer()) {
            return None;
        }
        Some(symbols.iter().map(|&(_, c)| c).collect())
    }

    /// Whether some block is not a transformer block (a hybrid such as Nemotron-H).
    pub fn is_hybrid(&self) -> bool {
        !self.block.is_transformer() || self.block_runs.iter().any(|r| !r.kind.is_transformer())
    }

    /// The kind (indexed as [`ModelSpec::block_kinds`]) of the last block, which
    /// multi-token-prediction modules repeat.
    pub fn last_block_kind(&self) -> usize {
        self.kind_counts(self.layers.saturating_sub(1), 1)
            .iter()
            .position(|&n| n > 0)
            .unwrap_or(0)
    }

    /// The kinds (indexed as [`ModelSpec::block_kinds`]) of a multi-token-prediction
    /// module's blocks, in order: those [`ModelSpec::mtp_pattern`] names (`M` Mamba-2, `*`
    /// attention, `-` a dense MLP, `E` a MoE MLP), or the last block's kind without one.
    /// `Err` with the position and symbol of one naming no kind of the model's blocks.
    pub fn mtp_kinds(&self) -> std::result::Result<Vec<usize>, (usize, char)> {
        let Some(pattern) = &self.mtp_pattern else {
            return Ok(vec![self.last_block_kind()]);
        };
        let kinds = self.block_kinds();
        pattern
            .chars()
            .enumerate()
            .map(|(i, c)| {
                let wanted = |v: &ModelSpec| match c {
                    'E' => v.block == BlockKind::Mlp && v.moe.is_some(),
                    '-' => v.block == BlockKind::Mlp && v.moe.is_none(),
                    _ => BlockKind::from_pattern_symbol(c) == Some(v.block),
                };
                kinds.iter().position(wanted).ok_or((i, c))
            })
            .collect()
    }

    /// Blocks of each kind (indexed as [`ModelSpec::block_kinds`]) among blocks
    /// `first..first + count`; blocks past the last are ignored. Callers that ask many
    /// times take [`ModelSpec::kind_runs`] once.
    pub fn kind_counts(&self, first: u64, count: u64) -> [u64; MAX_BLOCK_KINDS] {
        self.kind_runs().counts(first, count)
    }

    /// The blocks as runs of kind indices (adjacent runs of one kind merged), for counting
    /// kinds over block ranges without telling the kinds apart again.
    pub fn kind_runs(&self) -> KindRuns {
        if self.block_runs.is_empty() {
            return KindRuns {
                ends: vec![self.layers],
                kinds: vec![0],
            };
        }
        let mut runs = KindRuns {
            ends: Vec::with_capacity(self.block_runs.len()),
            kinds: Vec::with_capacity(self.block_runs.len()),
        };
        let mut end = 0u64;
        for (k, run) in self.run_kinds() {
            end = end.saturating_add(run.count);
            if runs.kinds.last() == Some(&k) {
                *runs.ends.last_mut().expect("a kind has its end") = end;
            } else {
                runs.ends.push(end);
                runs.kinds.push(k);
            }
        }
        runs
    }
}

/// A model's blocks as runs of one kind each, in order ([`ModelSpec::kind_runs`]): where
/// each run ends (blocks before its end) and its kind index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRuns {
    ends: Vec<u64>,
    kinds: Vec<usize>,
}

impl KindRuns {
    /// Blocks of each kind among blocks `first..first + count` (those past the last are
    /// ignored): from the run holding `first` (found by bisection) to the one holding the
    /// range's last block.
    pub fn counts(&self, first: u64, count: u64) -> [u64; MAX_BLOCK_KINDS] {
        let mut out = [0; MAX_BLOCK_KINDS];
        let (lo, hi) = (first, first.saturating_add(count));
        let from = self.ends.partition_point(|&end| end <= lo);
        let mut start = if from == 0 { 0 } else { self.ends[from - 1] };
        for (&end, &k) in self.ends[from..].iter().zip(&self.kinds[from..]) {
            if start >= hi {
                break;
            }
            out[k] += end.min(hi).saturating_sub(start.max(lo));
            start = end;
        }
        out
    }

    /// Whether every block is of one kind.
    pub fn is_uniform(&self) -> bool {
        self.kinds.len() <= 1
    }
}
