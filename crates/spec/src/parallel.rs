//! The knobs of a parallel configuration, declared once: [`Parallel`] holds the degrees
//! (dp, tp, pp, vp, cp, ep, and the experts' own tp), the micro-batch, ZeRO, sequence parallelism, recompute,
//! the schedule and how the experts' tokens move, each as `F::Of<T>` for a [`Form`] `F`. [`Exact`] gives the configuration itself
//! ([`ParallelConfig`](crate::ParallelConfig): every knob has its value); [`Pinned`] gives
//! the planner's pins ([`ParallelPins`]: every knob `Option`al, `None` = search it). A new
//! knob is one field here and it exists in both forms.
//!
//! [`Degree`] names the degrees one by one (flag name, whether the display shows it at 1),
//! so checks, parsers and flags iterate over them instead of listing them. The rank order of
//! the mesh dimensions is [`Mesh`](crate::Mesh)'s alone.

use std::fmt;
use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::mesh::Dim;
use crate::train::{CpComm, MoeDispatcher, Recompute, RecomputeModules, Schedule};

/// What a knob's value may be: plain data.
pub trait Value:
    Copy + fmt::Debug + PartialEq + Eq + Hash + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<T> Value for T where
    T: Copy
        + fmt::Debug
        + PartialEq
        + Eq
        + Hash
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// How each knob of a [`Parallel`] is held.
pub trait Form: Copy + fmt::Debug + PartialEq + Eq + Hash + Send + Sync + 'static {
    type Of<T: Value>: Value;
    /// A knob at its default: the value's default, or unpinned.
    fn default_of<T: Value + Default>() -> Self::Of<T>;
    /// Whether a knob is at its default (it is then left out of the serialised form, which
    /// keeps configurations written before the knob existed byte for byte).
    fn is_default_of<T: Value + Default>(v: &Self::Of<T>) -> bool;
}

/// Every knob has its value: a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Exact;

/// Every knob may be fixed (`Some`) or left to the search (`None`): pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pinned;

impl Form for Exact {
    type Of<T: Value> = T;
    fn default_of<T: Value + Default>() -> T {
        T::default()
    }
    fn is_default_of<T: Value + Default>(v: &T) -> bool {
        *v == T::default()
    }
}

impl Form for Pinned {
    type Of<T: Value> = Option<T>;
    fn default_of<T: Value + Default>() -> Option<T> {
        None
    }
    fn is_default_of<T: Value + Default>(v: &Option<T>) -> bool {
        v.is_none()
    }
}

/// One parallel configuration (`F = Exact`) or pins on one (`F = Pinned`): degrees,
/// micro-batch, ZeRO, sequence parallel, recompute and schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct Parallel<F: Form> {
    pub dp: F::Of<u64>,
    pub tp: F::Of<u64>,
    pub pp: F::Of<u64>,
    /// Virtual pipeline chunks per pipeline rank (interleaved schedule); 1 otherwise.
    pub vp: F::Of<u64>,
    pub cp: F::Of<u64>,
    /// How context parallelism moves the sequence for attention (ring, all-to-all or
    /// all-gather); `p2p` whenever cp = 1.
    pub cp_comm: F::Of<CpComm>,
    /// Expert parallel degree (MoE), carved out of the data-parallel ranks.
    pub ep: F::Of<u64>,
    /// Tensor parallelism of the expert MLPs (MoE), a divisor of tp; `None` = the default,
    /// [`Parallel::default_expert_tp`]. Below tp, the expert layers' rank order (expert-tp,
    /// ep, expert-dp) lets ep take the rest of the tp ranks.
    pub etp: F::Of<Option<u64>>,
    /// Data-parallel ranks the ZeRO states are sharded over; `None` = all of dp. Below dp,
    /// the dp / shard groups of ranks each hold a whole sharded copy and all-reduce their
    /// gradient shards with each other: hybrid sharding (PyTorch FSDP's `HYBRID_SHARD`,
    /// torchtitan's `data_parallel_shard_degree` beside `data_parallel_replicate_degree`,
    /// DeepSpeed's MiCS `mics_shard_size`, Megatron-LM's
    /// `--num-distributed-optimizer-instances` = dp / shard). A shard group is the
    /// innermost dp ranks (with cp folded in, as ZeRO shards over dp × cp), so it stays
    /// inside a node where it fits.
    pub dp_shard: F::Of<Option<u64>>,
    /// Micro-batch size in sequences.
    pub mbs: F::Of<u64>,
    /// ZeRO stage 0–3 over the data-parallel group.
    pub zero: F::Of<u8>,
    /// Megatron sequence parallelism inside the tensor-parallel group.
    pub sp: F::Of<bool>,
    /// For pins, `None`: per-stage recompute chosen by the planner (`auto`).
    pub recompute: F::Of<Recompute>,
    /// What selective recomputation reruns (Megatron-Core's `recompute_modules`); the
    /// attention core alone unless set, and the attention core whenever `recompute` is not
    /// selective.
    pub recompute_modules: F::Of<RecomputeModules>,
    pub schedule: F::Of<Schedule>,
    /// How the expert layers dispatch tokens ([`MoeDispatcher`]; it moves nothing at
    /// ep = 1). Left out of the serialised form at its default.
    #[serde(
        default = "F::default_of::<MoeDispatcher>",
        skip_serializing_if = "F::is_default_of::<MoeDispatcher>"
    )]
    pub moe_dispatcher: F::Of<MoeDispatcher>,
    /// Megatron-Core's overlap of the expert all-to-alls with another micro-batch's compute
    /// (`overlap_moe_expert_parallel_comm`, Megatron-LM d98e8a6 `model_parallel_config.py`,
    /// `pipeline_parallel/combined_1f1b.py`): in the 1F1B steady state each forward runs
    /// beside the backward of another micro-batch, and the expert all-to-alls of each
    /// overlap the other's compute. NVIDIA's MoE performance recipes turn it on
    /// (Megatron-Bridge 067f987 `perf_recipes/deepseek/common.py`, `qwen/common.py`,
    /// `gpt_oss/common.py`); Megatron-Core's default is off.
    #[serde(
        default = "F::default_of::<bool>",
        skip_serializing_if = "F::is_default_of::<bool>"
    )]
    pub moe_a2a_overlap: F::Of<bool>,
}

/// Pins on a configuration: the knobs the user fixed; `None` means "search it".
pub type ParallelPins = Parallel<Pinned>;

impl Default for Parallel<Exact> {
    fn default() -> Self {
        Self {
            dp: 1,
            tp: 1,
            pp: 1,
            vp: 1,
            cp: 1,
            cp_comm: CpComm::P2p,
            ep: 1,
            etp: None,
            dp_shard: None,
            mbs: 1,
            zero: 0,
            sp: false,
            recompute: Recompute::None,
            recompute_modules: RecomputeModules::CORE_ATTN,
            schedule: Schedule::OneFOneB,
            moe_dispatcher: MoeDispatcher::AllToAll,
            moe_a2a_overlap: false,
        }
    }
}

impl Default for Parallel<Pinned> {
    fn default() -> Self {
        Self {
            dp: None,
            tp: None,
            pp: None,
            vp: None,
            cp: None,
            cp_comm: None,
            ep: None,
            etp: None,
            dp_shard: None,
            mbs: None,
            zero: None,
            sp: None,
            recompute: None,
            recompute_modules: None,
            schedule: None,
            moe_dispatcher: None,
            moe_a2a_overlap: None,
        }
    }
}

/// Declares [`Degree`] and its accessors on [`Parallel`] from one list, so a degree cannot
/// be missing from [`Degree::ALL`] or from the accessors.
macro_rules! degrees {
    ($($(#[$m:meta])* $var:ident => $field:ident: $what:literal),+ $(,)?) => {
        /// A degree of a configuration: the four mesh dimensions, the chunks per pipeline
        /// rank and the expert-parallel degree (carved out of dp × cp).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Degree {
            $($(#[$m])* $var),+
        }

        impl Degree {
            /// In the order a configuration is written (`dp32 tp8 pp4 vp2 cp2 ep8`).
            pub const ALL: &'static [Degree] = &[$(Degree::$var),+];

            /// The name: the configuration item's prefix, the flag without `--`, the
            /// error's field, the field of [`Parallel`].
            pub fn name(self) -> &'static str {
                match self {
                    $(Degree::$var => stringify!($field)),+
                }
            }

            /// What the degree is and its default, in words (the CLI's help for its flag).
            pub fn what(self) -> &'static str {
                match self {
                    $(Degree::$var => $what),+
                }
            }
        }

        impl<F: Form> Parallel<F> {
            /// The degree `d`.
            pub fn degree(&self, d: Degree) -> F::Of<u64> {
                match d {
                    $(Degree::$var => self.$field),+
                }
            }

            /// The degree `d`, to set.
            pub fn degree_mut(&mut self, d: Degree) -> &mut F::Of<u64> {
                match d {
                    $(Degree::$var => &mut self.$field),+
                }
            }
        }
    };
}

degrees! {
    Dp => dp: "Data-parallel degree (default: the GPUs over tp × pp × cp)",
    Tp => tp: "Tensor-parallel degree (default: 1)",
    Pp => pp: "Pipeline-parallel degree (default: 1)",
    Vp => vp: "Virtual pipeline chunks per rank, interleaved schedule (default: 1)",
    Cp => cp: "Context-parallel degree, ring attention over the sequence (default: 1)",
    Ep => ep: "Expert-parallel degree (MoE models), carved out of dp × cp (default: 1)",
}

impl Degree {
    /// The degree called `name`.
    pub fn named(name: &str) -> Option<Degree> {
        Degree::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// The names of `degrees` joined for a message (`dp, tp, pp, vp`).
    pub fn names(degrees: &[Degree]) -> String {
        let names: Vec<&str> = degrees.iter().map(|d| d.name()).collect();
        names.join(", ")
    }

    /// Whether a configuration's display writes this degree when it is 1.
    pub fn shown_at_one(self) -> bool {
        matches!(self, Degree::Dp | Degree::Tp | Degree::Pp)
    }

    /// The mesh dimension this degree is, if it is one (vp and ep are not: chunks live on
    /// a pipeline rank, expert groups inside the dp × cp block).
    pub fn mesh_dim(self) -> Option<Dim> {
        match self {
            Degree::Dp => Some(Dim::Dp),
            Degree::Tp => Some(Dim::Tp),
            Degree::Pp => Some(Dim::Pp),
            Degree::Cp => Some(Dim::Cp),
            Degree::Vp | Degree::Ep => None,
        }
    }

    /// Whether the degree splits one model replica over the mesh (tp, pp, cp: the GPUs of
    /// one replica are their product, and dp counts the replicas).
    pub fn splits_replica(self) -> bool {
        self.mesh_dim().is_some() && self != Degree::Dp
    }
}

impl Parallel<Exact> {
    /// GPUs per model replica: the product of the degrees that split one
    /// ([`Degree::splits_replica`]), in [`Degree::ALL`]'s order.
    pub fn replica_gpus(&self) -> u64 {
        Degree::ALL
            .iter()
            .filter(|d| d.splits_replica())
            .map(|&d| self.degree(d))
            .product()
    }

    /// The degrees above 1 that are not among `known` (the degrees a crate was written
    /// for), in [`Degree::ALL`]'s order: what a crate refuses by name until it learns a
    /// degree declared after it.
    pub fn degrees_outside<'a>(&'a self, known: &'a [Degree]) -> impl Iterator<Item = Degree> + 'a {
        Degree::ALL
            .iter()
            .copied()
            .filter(move |&d| self.degree(d) > 1 && !known.contains(&d))
    }
}

impl Parallel<Exact> {
    /// The expert MLPs' tensor-parallel degree ([`Parallel::etp`], or the default).
    pub fn expert_tp(&self) -> u64 {
        self.etp.unwrap_or_else(|| self.default_expert_tp())
    }

    /// The expert tp a configuration runs without naming one: 1, the experts whole on each
    /// rank, as NVIDIA's performance recipes run every MoE model (Megatron-Bridge 067f987
    /// `perf_recipes/*`, `expert_tensor_parallel_size = 1`; NeMo's Mixtral 8x22B, `etp_size`
    /// 1), torchtitan (`ParallelDims.etp` = 1) and DeepSpeed-MoE (expert tensor parallelism
    /// off unless enabled); tp where tp > 1 runs without sequence parallelism, which
    /// Megatron-Core needs for an expert tp other than tp (its own default is tp,
    /// Megatron-LM d98e8a6 `arguments.py`).
    pub fn default_expert_tp(&self) -> u64 {
        if self.sp || self.tp == 1 {
            1
        } else {
            self.tp
        }
    }

    /// Ranks of one pipeline stage that the expert layers' ep × expert-dp dimensions share:
    /// the dense layers' tp × cp × dp in the expert order, less expert tp (tp / expert tp ×
    /// cp × dp). ep must divide it; the replicas of one expert are it over ep.
    pub fn expert_ranks(&self) -> u64 {
        self.tp / self.expert_tp().max(1) * self.cp * self.dp
    }

    /// Replicas of one expert: the expert-dp dimension of the expert layers' rank order
    /// (expert-tp, ep, expert-dp), [`Parallel::expert_ranks`] over ep.
    pub fn expert_replicas(&self) -> u64 {
        (self.expert_ranks() / self.ep.max(1)).max(1)
    }

    /// Data-parallel ranks the ZeRO states are sharded over ([`Parallel::dp_shard`]; all
    /// of dp unless set).
    pub fn dp_shard(&self) -> u64 {
        self.dp_shard.unwrap_or(self.dp)
    }

    /// Copies of the sharded states that all-reduce their gradient shards: dp / shard (1
    /// without hybrid sharding).
    pub fn dp_replicas(&self) -> u64 {
        (self.dp / self.dp_shard().max(1)).max(1)
    }

    /// Ranks each ZeRO-sharded state is split over: the dense layers' shard × cp, and the
    /// expert layers' replicas of one expert less the hybrid copies (expert-dp / (dp /
    /// shard)). The one place the cost model, the layout and the search take them from.
    pub fn state_shards(&self) -> (u64, u64) {
        let replicas = self.dp_replicas();
        (
            self.dp_shard() * self.cp,
            (self.expert_replicas() / replicas).max(1),
        )
    }
}

impl fmt::Display for Degree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ParallelConfig;

    #[test]
    fn degrees_name_their_fields() {
        let mut c = ParallelConfig::default();
        let mut p = ParallelPins::default();
        for (i, &d) in Degree::ALL.iter().enumerate() {
            assert_eq!(Degree::named(d.name()), Some(d));
            *c.degree_mut(d) = i as u64 + 2;
            *p.degree_mut(d) = Some(i as u64 + 2);
        }
        assert_eq!((c.dp, c.tp, c.pp, c.vp, c.cp, c.ep), (2, 3, 4, 5, 6, 7));
        assert_eq!(p.ep, Some(7));
        assert_eq!(c.replica_gpus(), 3 * 4 * 6);
        // Every mesh dimension is a degree.
        for dim in Dim::ORDER {
            assert!(Degree::ALL.iter().any(|d| d.mesh_dim() == Some(dim)));
        }
    }
}
