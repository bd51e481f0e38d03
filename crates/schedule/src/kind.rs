//! The schedule kinds and their rules: which chunk counts each accepts, which ranks keep
//! their activations whatever the plan says, whether the backward splits, and where a
//! rank's chunks sit in the pipeline (`Placement`).
//! The one place these rules live; the cost model, the planner and the runtime ask here.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Pipeline schedule. Non-exhaustive: crates outside this one handle a kind they do not
/// name (an exporter refuses it, the search tries what [`ScheduleKind::SEARCHED`] lists),
/// so a new schedule is a change here alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ScheduleKind {
    #[serde(rename = "gpipe")]
    Gpipe,
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Megatron-LM's interleaved 1F1B: several chunks per rank.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// Zero-bubble ZB-H1 (Qi et al.): the weight gradient deferred into the bubbles.
    #[serde(rename = "zb-h1")]
    ZbH1,
    /// Merak's shifted critical path 1F1B.
    #[serde(rename = "scp")]
    Scp,
    /// Zero-bubble ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"):
    /// two chunks per rank placed in a V, the backward split into its input and weight
    /// passes; torch.distributed.pipelining's `ScheduleZBVZeroBubble`.
    #[serde(rename = "zb-v")]
    ZbV,
    /// DualPipeV (DeepSeek-AI's DualPipe, DeepSeek-V3 technical report §3.2.1, "cut in
    /// half" by Sea AI Lab; deepseek-ai/DualPipe 3da1bbe `dualpipe/dualpipev.py`,
    /// torch.distributed.pipelining's `ScheduleDualPipeV`): two chunks per rank placed in
    /// a V; in its steady state each rank pairs a chunk's forward of one micro-batch with
    /// the other chunk's backward of another. DeepSeek's own runtime overlaps the pair's
    /// computation with its communication; torch's `OVERLAP_F_B` action runs the two in
    /// turn unless a custom function is registered for it (torch 2.15
    /// `distributed/pipelining/schedules.py`), and torchtitan registers none, so the
    /// engines plait models run the pairs back to back.
    #[serde(rename = "dualpipe-v")]
    DualPipeV,
}

/// Where a rank's chunks sit among the pipeline's virtual stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Chunks go round the ranks in order (Megatron-LM's interleaving): chunk c of rank r
    /// is virtual stage c·p + r.
    #[default]
    Looped,
    /// Chunks go down the ranks and back up (ZB-V, DualPipe-V): even chunks as looped,
    /// odd chunks in reverse, so chunk 1 of rank r is virtual stage 2p − 1 − r and the last
    /// rank hands its chunk 0's output to its own chunk 1.
    V,
}

impl Placement {
    /// Whether this is the default, looped placement (serialisation leaves it out).
    pub fn is_looped(&self) -> bool {
        *self == Placement::Looped
    }

    /// The virtual stage (position in the pipeline) of chunk `chunk` of rank `rank` among
    /// `ranks` ranks.
    pub fn virtual_stage(self, rank: u64, chunk: u64, ranks: u64) -> u64 {
        match self {
            Placement::V if chunk % 2 == 1 => chunk * ranks + (ranks - 1 - rank),
            _ => chunk * ranks + rank,
        }
    }

    /// The (rank, chunk) holding virtual stage `stage` among `ranks` ranks.
    pub fn locate(self, stage: u64, ranks: u64) -> (u64, u64) {
        let (chunk, i) = (stage / ranks, stage % ranks);
        match self {
            Placement::V if chunk % 2 == 1 => (ranks - 1 - i, chunk),
            _ => (i, chunk),
        }
    }
}

impl ScheduleKind {
    pub const ALL: &'static [ScheduleKind] = &[
        ScheduleKind::Gpipe,
        ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved,
        ScheduleKind::ZbH1,
        ScheduleKind::Scp,
        ScheduleKind::ZbV,
        ScheduleKind::DualPipeV,
    ];

    pub fn keyword(self) -> &'static str {
        match self {
            ScheduleKind::Gpipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
            ScheduleKind::Interleaved => "interleaved",
            ScheduleKind::ZbH1 => "zb-h1",
            ScheduleKind::Scp => "scp",
            ScheduleKind::ZbV => "zb-v",
            ScheduleKind::DualPipeV => "dualpipe-v",
        }
    }

    /// What the schedule is, in a few words (for help texts; its rules say the rest).
    pub fn summary(self) -> &'static str {
        match self {
            ScheduleKind::Gpipe => "all forwards, then all backwards",
            ScheduleKind::OneFOneB => "one forward, one backward in turn",
            ScheduleKind::Interleaved => "Megatron-LM's, several chunks per rank",
            ScheduleKind::ZbH1 => "zero bubble, weight passes deferred into the bubbles",
            ScheduleKind::Scp => "Merak's shifted critical path",
            ScheduleKind::ZbV => "zero bubble, two chunks per rank in a V",
            ScheduleKind::DualPipeV => "DeepSeek's DualPipeV, two chunks per rank in a V",
        }
    }

    /// The keywords, `|`-separated (for error messages).
    pub fn allowed() -> String {
        Self::ALL
            .iter()
            .map(|k| k.keyword())
            .collect::<Vec<_>>()
            .join("|")
    }

    /// The kinds a planner's search tries, in the order it tries them (the order breaks
    /// ties between equally fast plans).
    pub const SEARCHED: [ScheduleKind; 7] = [
        ScheduleKind::OneFOneB,
        ScheduleKind::Gpipe,
        ScheduleKind::ZbH1,
        ScheduleKind::Scp,
        ScheduleKind::ZbV,
        ScheduleKind::Interleaved,
        ScheduleKind::DualPipeV,
    ];

    /// Whether the schedule runs `microbatches` micro-batches on `ranks` pipeline ranks:
    /// Megatron-LM's interleaved schedule needs a multiple of the ranks (it runs them in
    /// groups of `ranks`, `schedules.py` `forward_backward_pipelining_with_interleaving`);
    /// DualPipeV at least two per rank (`dualpipev.py`, `num_chunks >= num_ranks * 2`);
    /// the others any number.
    pub fn accepts_microbatches(self, microbatches: u64, ranks: u64) -> bool {
        match self {
            ScheduleKind::Interleaved => microbatches.is_multiple_of(ranks.max(1)),
            ScheduleKind::DualPipeV => microbatches >= 2 * ranks,
            _ => true,
        }
    }

    /// The micro-batch counts [`ScheduleKind::accepts_microbatches`] allows, in words, with
    /// the pipeline ranks called `pp` (for messages); `None` where it allows any.
    pub fn microbatches_allowed(self) -> Option<&'static str> {
        match self {
            ScheduleKind::Interleaved => Some("a multiple of pp"),
            ScheduleKind::DualPipeV => Some("at least 2 × pp"),
            _ => None,
        }
    }

    /// The rule, in words, that `microbatches` on `ranks` ranks breaks; `None` if it runs.
    pub fn microbatches_refused(self, microbatches: u64, ranks: u64) -> Option<&'static str> {
        self.microbatches_allowed()
            .filter(|_| !self.accepts_microbatches(microbatches, ranks))
    }

    /// Whether the stages finish their share of the pipeline in turn, the last first, as
    /// every schedule that alternates forwards and backwards does (1F1B's drain); GPipe
    /// runs every backward after every forward, so its stages finish together.
    pub fn stages_finish_in_turn(self) -> bool {
        self != ScheduleKind::Gpipe
    }

    /// Megatron-LM's schedule for `chunks` chunks per rank: interleaved with more than one,
    /// 1F1B otherwise.
    pub fn megatron_for_chunks(chunks: u64) -> ScheduleKind {
        if chunks > 1 {
            ScheduleKind::Interleaved
        } else {
            ScheduleKind::OneFOneB
        }
    }

    /// Whether the schedule runs `chunks` chunks per rank: interleaved any number, ZB-V
    /// and DualPipeV exactly two, the others one.
    pub fn accepts_chunks(self, chunks: u64) -> bool {
        match self {
            ScheduleKind::Interleaved => chunks >= 1,
            _ => chunks == self.fixed_chunks().unwrap_or(1),
        }
    }

    /// The chunks per rank the schedule runs when it fixes them (ZB-V, DualPipeV: two).
    pub fn fixed_chunks(self) -> Option<u64> {
        (self.placement() == Placement::V).then_some(2)
    }

    /// Chunks per rank under this schedule for a request that gave `given` chunks (or
    /// none): a schedule that fixes its count (ZB-V: two) sets it where none is given.
    pub fn chunks_per_rank(self, given: Option<u64>) -> u64 {
        given.or(self.fixed_chunks()).unwrap_or(1)
    }

    /// Where the schedule places a rank's chunks.
    pub fn placement(self) -> Placement {
        if matches!(self, ScheduleKind::ZbV | ScheduleKind::DualPipeV) {
            Placement::V
        } else {
            Placement::Looped
        }
    }

    /// The virtual stage of chunk `chunk` of rank `rank` among `ranks` ranks under this
    /// schedule's placement.
    pub fn virtual_stage(self, rank: u64, chunk: u64, ranks: u64) -> u64 {
        self.placement().virtual_stage(rank, chunk, ranks)
    }

    /// Whether rank `rank` of `ranks` keeps its activations whatever the plan asks: Merak's
    /// scp never recomputes on the last rank, whose backward follows its forward at once.
    pub fn spares_rank(self, rank: u64, ranks: u64) -> bool {
        self == ScheduleKind::Scp && ranks > 1 && rank + 1 == ranks
    }

    /// Whether the schedule is 1F1B's order when no rank recomputes (scp only moves where
    /// recomputation happens).
    pub fn is_1f1b_without_recompute(self) -> bool {
        self == ScheduleKind::Scp
    }

    /// The share of the backward that is deferred as a separate weight-gradient pass when
    /// only the backward's total is known: half under ZB-H1, none otherwise. A linear
    /// layer's backward is two GEMMs of its forward's size, the input gradient and the
    /// weight gradient (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", whose handcrafted
    /// schedules take T_F = T_B = T_W), so a transformer's weight pass is half its backward.
    /// The cost model
    /// times the two passes from the GEMMs instead.
    pub fn default_weight_share(self) -> f64 {
        if self.splits_backward() {
            0.5
        } else {
            0.0
        }
    }

    /// Whether the schedule runs the backward as an input-gradient pass and a deferred
    /// weight-gradient pass (the zero-bubble schedules; DualPipeV in its warm-up and drain).
    pub fn splits_backward(self) -> bool {
        matches!(
            self,
            ScheduleKind::ZbH1 | ScheduleKind::ZbV | ScheduleKind::DualPipeV
        )
    }

    /// Whether the schedule rebuilds a rank's recomputed chunk before its backward as one
    /// instruction with its own memory (scp), rather than layer by layer inside it.
    pub fn rebuilds_before_backward(self) -> bool {
        self == ScheduleKind::Scp
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.keyword())
    }
}

impl FromStr for ScheduleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let key = s.to_ascii_lowercase();
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.keyword() == key)
            .ok_or_else(|| format!("`{s}` is not one of {}", Self::allowed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_round_trip_and_rules_hold() {
        for &k in ScheduleKind::ALL {
            assert_eq!(k.keyword().parse::<ScheduleKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.keyword()));
        }
        assert!(ScheduleKind::Interleaved.accepts_chunks(4));
        assert!(!ScheduleKind::OneFOneB.accepts_chunks(2));
        assert!(ScheduleKind::Scp.spares_rank(3, 4));
        assert!(!ScheduleKind::Scp.spares_rank(0, 1));
        assert!(!ScheduleKind::OneFOneB.spares_rank(3, 4));
        assert_eq!(ScheduleKind::Interleaved.virtual_stage(1, 2, 4), 9);
        // V: chunk 1 of rank 1 of 4 is stage 6; the last rank holds stages 3 and 4.
        assert_eq!(ScheduleKind::ZbV.virtual_stage(1, 1, 4), 6);
        assert_eq!(ScheduleKind::ZbV.virtual_stage(3, 0, 4), 3);
        assert_eq!(ScheduleKind::ZbV.virtual_stage(3, 1, 4), 4);
        for placement in [Placement::Looped, Placement::V] {
            for j in 0..8 {
                let (r, c) = placement.locate(j, 4);
                assert_eq!(placement.virtual_stage(r, c, 4), j);
            }
        }
        assert!(ScheduleKind::ZbV.accepts_chunks(2));
        assert!(!ScheduleKind::ZbV.accepts_chunks(1));
        // Megatron's interleaving runs micro-batches in groups of pp; the others any count.
        assert!(!ScheduleKind::Interleaved.accepts_microbatches(6, 4));
        assert!(ScheduleKind::Interleaved.accepts_microbatches(8, 4));
        assert!(ScheduleKind::ZbV.accepts_microbatches(6, 4));
        // DualPipeV: ZB-V's V and two chunks, and at least two micro-batches per rank.
        assert!(!ScheduleKind::DualPipeV.accepts_microbatches(7, 4));
        assert!(ScheduleKind::DualPipeV.accepts_microbatches(8, 4));
        assert_eq!(ScheduleKind::DualPipeV.fixed_chunks(), Some(2));
        assert_eq!(ScheduleKind::DualPipeV.virtual_stage(1, 1, 4), 6);
        assert!(!ScheduleKind::Gpipe.stages_finish_in_turn());
        assert!(ScheduleKind::OneFOneB.stages_finish_in_turn());
        // The search tries every kind, each once.
        for k in ScheduleKind::ALL {
            assert_eq!(
                ScheduleKind::SEARCHED.iter().filter(|&s| s == k).count(),
                1,
                "{k}"
            );
        }
        assert!("pipedream"
            .parse::<ScheduleKind>()
            .unwrap_err()
            .contains("zb-h1"));
    }
}
