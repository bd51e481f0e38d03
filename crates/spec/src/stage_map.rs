//! Where the transformer blocks go: blocks per pipeline chunk and, per pipeline rank, how
//! many blocks are recomputed in full. The uniform map is Megatron-LM's default; planners
//! write uneven ones (fewer blocks beside the embedding or the LM head, recompute only where
//! memory needs it).

use serde::{Deserialize, Serialize};

use crate::config::ParallelConfig;
use crate::error::{Result, SpecError};
use crate::train::Recompute;
use plait_schedule::{GradReduce, Placement, ScheduleSpec};

use crate::train::TrainSpec;

/// The schedule request of configuration `c` with its blocks laid out by `map`: ranks with
/// fully recomputed blocks recompute (selective recompute stays inside the backward and
/// needs no instruction); data-parallel reductions overlap the backward when the run does.
/// An error only for degrees beyond what a schedule can hold (2^32 − 1).
pub fn schedule_spec(c: &ParallelConfig, t: &TrainSpec, map: &StageMap) -> Result<ScheduleSpec> {
    let small = |what: &str, v: u64, why: &dyn Fn() -> String| {
        u32::try_from(v).map_err(|_| {
            SpecError::new(
                "configuration",
                what,
                format!("{v}{} is too large to schedule", why()),
                "at most 4294967295",
            )
        })
    };
    let microbatches = || {
        format!(
            " (the global batch of {} sequences over dp {} × mbs {})",
            t.gbs, c.dp, c.mbs
        )
    };
    let mut spec = ScheduleSpec::new(
        c.schedule,
        small("pp", c.pp, &String::new)?,
        small("micro-batches", c.microbatches(t), &microbatches)?,
        small("vp", c.vp, &String::new)?,
    );
    spec.recompute = map.recompute_blocks.iter().map(|&x| x > 0).collect();
    spec.grad_reduce = if c.dp * c.cp > 1 && c.zero < 3 {
        if t.overlap_grad_reduce {
            GradReduce::Overlapped
        } else {
            GradReduce::AtEnd
        }
    } else {
        GradReduce::None
    };
    Ok(spec)
}

/// Blocks of global chunk `chunk` of `chunks` under an even split of `layers`: the first
/// and the last chunk, which also hold the embedding and the head, take the fewest; the
/// chunks between take one more each while the remainder lasts. That is torchtitan's split
/// (`generate_split_points`, torchtitan 9dec370 `parallelisms/pipelining_utils.py`), and
/// Megatron-Core's wherever Megatron-Core splits unevenly by itself: counting the
/// embedding and the loss as layers (`account_for_embedding_in_pipeline_split`,
/// `account_for_loss_in_pipeline_split`, Megatron-LM d98e8a6 `transformer_config.py`,
/// `transformer_block.py` `get_num_layers_to_build`) the first and last chunk hold a block
/// fewer than the others; Megatron-Bridge 067f987 sets both for Llama 3.1 405B,
/// `recipes/llama/h100/llama3.py:1227-1228`. With more chunks than blocks (at most two
/// more: [`crate::check_pipeline_chunks`]) the loss, and then the embedding, take a chunk of
/// their own.
pub fn even_chunk_blocks(layers: u64, chunks: u64, chunk: u64) -> std::ops::Range<u64> {
    let split = EvenSplit::new(layers, chunks);
    split.start(chunk)..split.start(chunk + 1)
}

/// [`even_chunk_blocks`]'s split of `layers` over `chunks`, its divisions done once for
/// a layout that asks every chunk.
struct EvenSplit {
    layers: u64,
    chunks: u64,
    /// Blocks of the first chunk and of each middle chunk without a remainder block.
    base: u64,
    /// Middle chunks holding one block more.
    extra: u64,
    /// With more chunks than blocks: 1 where the embedding takes the first chunk alone.
    embedding_alone: u64,
}

impl EvenSplit {
    fn new(layers: u64, chunks: u64) -> Self {
        let chunks = chunks.max(1);
        EvenSplit {
            layers,
            chunks,
            base: layers / chunks,
            extra: layers % chunks,
            embedding_alone: u64::from(chunks >= layers + 2),
        }
    }

    /// The first block of chunk `c`: after the first chunk's `base` and c − 1 middle
    /// chunks, the first `extra` of which hold one more; the last chunk ends at the
    /// model's end. With more chunks than blocks, one block per chunk after the loss's
    /// (and the embedding's) own.
    fn start(&self, c: u64) -> u64 {
        if self.chunks > self.layers {
            return c.saturating_sub(self.embedding_alone).min(self.layers);
        }
        match c {
            0 => 0,
            c if c >= self.chunks => self.layers,
            c => self.base + (c - 1) * self.base + (c - 1).min(self.extra),
        }
    }

    /// Blocks of chunk `c`.
    fn blocks(&self, c: u64) -> u64 {
        self.start(c + 1) - self.start(c)
    }
}

/// The layout of one configuration's blocks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StageMap {
    /// Blocks of each virtual stage, in model order; they sum to the model's layers. The
    /// embedding sits before virtual stage 0, the head after the last.
    pub chunk_blocks: Vec<u64>,
    /// Which virtual stage chunk c of rank r is: the schedule's placement (looped, c·pp + r,
    /// unless the schedule places its chunks in a V).
    #[serde(default, skip_serializing_if = "Placement::is_looped")]
    pub placement: Placement,
    /// Per pipeline rank: blocks recomputed in full (the rank's first blocks, chunk by
    /// chunk). The other blocks follow the configuration's policy (`none` or `selective`;
    /// `full` in the configuration means every listed block).
    pub recompute_blocks: Vec<u64>,
}

impl StageMap {
    /// [`StageMap::uniform`] for `m`, after `c` is checked against the model and training
    /// spec on its own GPUs: the degrees are bounded before the map is sized by them.
    pub fn uniform_checked(
        m: &crate::ModelSpec,
        t: &TrainSpec,
        c: &ParallelConfig,
    ) -> Result<StageMap> {
        c.validate(m, t, c.gpus())?;
        Ok(StageMap::uniform(m.layers, c))
    }

    /// Megatron-LM's layout for `c`: an even split; full recompute on every block of every
    /// rank, except scp's last rank, whose backward follows its forward at once and keeps
    /// its activations (Merak).
    pub fn uniform(layers: u64, c: &ParallelConfig) -> StageMap {
        let split = EvenSplit::new(layers, c.pp * c.vp);
        let chunk_blocks = (0..c.pp * c.vp).map(|j| split.blocks(j)).collect();
        StageMap::with_chunk_blocks(chunk_blocks, c)
    }

    /// `chunk_blocks` (one count per virtual stage, in model order) laid out as `c`'s
    /// schedule places chunks, recomputed as [`StageMap::uniform`] says.
    pub fn with_chunk_blocks(chunk_blocks: Vec<u64>, c: &ParallelConfig) -> StageMap {
        let p = c.pp;
        let mut map = StageMap {
            recompute_blocks: vec![0; p as usize],
            chunk_blocks,
            placement: c.schedule.placement(),
        };
        if c.recompute == Recompute::Full {
            for r in 0..p {
                map.recompute_blocks[r as usize] = map.rank_blocks(r, p);
            }
            for r in 0..p {
                if c.schedule.spares_rank(r, p) {
                    map.recompute_blocks[r as usize] = 0;
                }
            }
        }
        map
    }

    /// Megatron-LM's `--recompute-method block --recompute-num-layers n` (with full
    /// recomputation): in each model chunk of every pipeline rank the first `n` blocks
    /// recompute in full (all of a shorter chunk) and the others keep their activations
    /// (Megatron-LM d98e8a6 `TransformerBlock._checkpointed_forward`, `block` method).
    /// Counts are kept per rank and filled chunk by chunk, so with vp > 1 a rank recomputes
    /// as many blocks as Megatron's, though not always in the same chunks.
    pub fn with_block_recompute(mut self, n: u64, p: u64) -> StageMap {
        let chunks = self.chunk_blocks.len() as u64 / p.max(1);
        for r in 0..p {
            self.recompute_blocks[r as usize] =
                (0..chunks).map(|c| self.blocks_of(r, c, p).min(n)).sum();
        }
        self
    }

    /// Blocks of chunk `c` of pipeline rank `r` of `p` (at the map's placement).
    pub fn blocks_of(&self, r: u64, c: u64, p: u64) -> u64 {
        self.chunk_blocks[self.placement.virtual_stage(r, c, p) as usize]
    }

    /// Index of the first block of virtual stage `j` (blocks are laid out in model order
    /// over the virtual stages).
    pub fn chunk_first_block(&self, j: usize) -> u64 {
        self.chunk_blocks[..j.min(self.chunk_blocks.len())]
            .iter()
            .sum()
    }

    /// Blocks on pipeline rank `r` of `p` (over all its chunks).
    pub fn rank_blocks(&self, r: u64, p: u64) -> u64 {
        let chunks = self.chunk_blocks.len() as u64 / p.max(1);
        (0..chunks).map(|c| self.blocks_of(r, c, p)).sum()
    }

    /// Of rank `r`'s chunk `c`, the blocks recomputed in full (the rank's recompute count
    /// is filled chunk by chunk, in chunk order).
    pub fn chunk_recompute_blocks(&self, r: u64, c: u64, p: u64) -> u64 {
        let mut left = self.recompute_blocks[r as usize];
        for chunk in 0..c {
            left = left.saturating_sub(self.blocks_of(r, chunk, p));
        }
        left.min(self.blocks_of(r, c, p))
    }

    /// Checks the map against `layers` and `c`.
    pub fn validate(&self, layers: u64, c: &ParallelConfig) -> Result<()> {
        let err = |problem: String, allowed: String| {
            Err(SpecError::new(
                "stage map",
                "chunk_blocks",
                problem,
                allowed,
            ))
        };
        let (p, v) = (c.pp, c.vp);
        if self.placement != c.schedule.placement() {
            return Err(SpecError::new(
                "stage map",
                "placement",
                format!(
                    "the map places chunks {:?} but {} places them {:?}",
                    self.placement,
                    c.schedule,
                    c.schedule.placement()
                ),
                format!("{:?}", c.schedule.placement()),
            ));
        }
        if self.chunk_blocks.len() as u64 != p * v {
            return err(
                format!(
                    "{} chunks listed for pp×vp = {}",
                    self.chunk_blocks.len(),
                    p * v
                ),
                format!("{} block counts", p * v),
            );
        }
        let total: u64 = self.chunk_blocks.iter().sum();
        if total != layers {
            return err(
                format!("the chunks hold {total} blocks but the model has {layers}"),
                format!("counts summing to {layers}"),
            );
        }
        if self.recompute_blocks.len() as u64 != p {
            return err(
                format!(
                    "{} recompute counts for pp = {p}",
                    self.recompute_blocks.len()
                ),
                format!("{p} counts"),
            );
        }
        for r in 0..p {
            if self.recompute_blocks[r as usize] > self.rank_blocks(r, p) {
                return err(
                    format!(
                        "rank {r} recomputes {} blocks but holds {}",
                        self.recompute_blocks[r as usize],
                        self.rank_blocks(r, p)
                    ),
                    format!("at most {}", self.rank_blocks(r, p)),
                );
            }
        }
        Ok(())
    }

    /// Whether every chunk holds the same number of blocks.
    pub fn is_even(&self) -> bool {
        self.chunk_blocks.windows(2).all(|w| w[0] == w[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::Schedule;

    #[test]
    fn the_embedding_and_the_loss_take_a_chunk_of_their_own_past_the_blocks() {
        // Megatron-Bridge's Llama 3.1 405B at pp 16 × vp 8: 128 chunks for 126 blocks, the
        // embedding alone in the first, the loss alone in the last (the layout its recipe
        // writes with the embedding and the loss counted as layers).
        let c = ParallelConfig {
            pp: 16,
            vp: 8,
            schedule: Schedule::Interleaved,
            ..ParallelConfig::default()
        };
        let map = StageMap::uniform(126, &c);
        assert_eq!(map.chunk_blocks[0], 0);
        assert_eq!(map.chunk_blocks[127], 0);
        assert!(map.chunk_blocks[1..127].iter().all(|&b| b == 1));
        map.validate(126, &c).unwrap();
        // One chunk more than blocks: the loss alone in the last.
        let blocks: Vec<u64> = (0..5)
            .map(|j| even_chunk_blocks(4, 5, j).count() as u64)
            .collect();
        assert_eq!(blocks, vec![1, 1, 1, 1, 0]);
        let blocks: Vec<u64> = (0..6)
            .map(|j| even_chunk_blocks(4, 6, j).count() as u64)
            .collect();
        assert_eq!(blocks, vec![0, 1, 1, 1, 1, 0]);
        // Three more has a chunk with nothing in it.
        let model = crate::model_preset("tiny-gpt").unwrap();
        assert_eq!(model.layers, 4);
        assert!(crate::check_pipeline_chunks(&model, 3, 2).is_ok());
        let err = crate::check_pipeline_chunks(&model, 7, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pp×vp ≤ 6"), "{err}");
    }

    #[test]
    fn uniform_map_splits_evenly_and_spares_scp_last_rank() {
        let c = ParallelConfig {
            pp: 4,
            vp: 2,
            recompute: Recompute::Full,
            schedule: Schedule::Interleaved,
            ..ParallelConfig::default()
        };
        // The first and last chunks (beside the embedding and the head) hold a block fewer:
        // torchtitan's split, and Megatron-Core's counting the embedding and loss as layers.
        let map = StageMap::uniform(30, &c);
        assert_eq!(map.chunk_blocks, vec![3, 4, 4, 4, 4, 4, 4, 3]);
        assert_eq!(map.rank_blocks(0, 4), 7);
        assert_eq!(map.rank_blocks(1, 4), 8);
        assert_eq!(map.rank_blocks(3, 4), 7);
        assert_eq!(map.recompute_blocks, vec![7, 8, 8, 7]);
        assert_eq!(map.chunk_recompute_blocks(0, 1, 4), 4);
        // torchtitan 9dec370's `generate_split_points` for Llama 3.1 405B over 16 stages:
        // 7, then 8 for each stage between, 7.
        let blocks: Vec<u64> = (0..16)
            .map(|j| even_chunk_blocks(126, 16, j).count() as u64)
            .collect();
        assert_eq!(blocks[0], 7);
        assert!(blocks[1..15].iter().all(|&b| b == 8));
        assert_eq!(blocks[15], 7);
        map.validate(30, &c).unwrap();
        let scp = ParallelConfig {
            vp: 1,
            schedule: Schedule::Scp,
            ..c
        };
        assert_eq!(
            StageMap::uniform(30, &scp).recompute_blocks,
            vec![7, 8, 8, 0]
        );
        let e = map.validate(31, &c).unwrap_err();
        assert!(e.to_string().contains("31"), "{e}");
    }
}
