//! Communication: where each parallel group's ranks sit (inside a node or across nodes) and
//! alpha–beta times of the collectives NCCL runs over them.
//!
//! Rank order is `plait_spec::Mesh`'s (Megatron-LM's): groups are placed by its strides.

use plait_spec::{ClusterSpec, Dim, ParallelConfig};

/// A communicator: its size and the link it effectively runs over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Group {
    pub size: u64,
    /// Bus bandwidth of ring collectives over this group.
    pub ring_bytes_per_s: f64,
    /// Bandwidth each rank has towards ranks of other nodes (all-to-all, p2p).
    pub point_bytes_per_s: f64,
    /// Latency of one step (Simple protocol) over the group's slowest link: the node's
    /// NVLink inside a node, the network across nodes.
    pub step_latency_s: f64,
    /// Latency of one step between two ranks of the same node (Simple protocol).
    pub intra_step_latency_s: f64,
    pub spans_nodes: bool,
    /// Nodes the group's ranks sit on.
    pub nodes: u64,
    /// Members of the group on each of its nodes.
    pub local: u64,
    /// Bandwidth between two members of the same node (NVLink), per direction.
    pub intra_bytes_per_s: f64,
}

/// NCCL's ring protocols as its tuner models them (NCCL 5067397, `src/graph/tuning.cc`):
/// base latency (µs), per-step latency inside a node and across the network, each relative
/// to the Simple protocol's (NVLink 3.4 µs, network 14 µs), and the fraction of the bus
/// bandwidth the protocol reaches (LL: `busBw * .5`, LL128: `busBw * 0.92`). NCCL picks the
/// fastest for each message size; so does this model.
struct RingProtocol {
    base_s: f64,
    intra_rel: f64,
    inter_rel: f64,
    bandwidth_share: f64,
    /// Simple pays the proxy's network overhead three times per step (`tuning.cc:408`).
    simple: bool,
}

const RING_PROTOCOLS: [RingProtocol; 3] = [
    RingProtocol {
        base_s: 6.6e-6,
        intra_rel: 0.6 / 3.4,
        inter_rel: 2.7 / 14.0,
        bandwidth_share: 0.5,
        simple: false,
    },
    RingProtocol {
        base_s: 14.0e-6,
        intra_rel: 1.9 / 3.4,
        inter_rel: 4.0 / 14.0,
        bandwidth_share: 0.92,
        simple: false,
    },
    RingProtocol {
        base_s: 8.4e-6,
        intra_rel: 1.0,
        inter_rel: 1.0,
        bandwidth_share: 1.0,
        simple: true,
    },
];
/// On multi-node rings every step pays the proxy's network overhead, 1 µs on x86 hosts and
/// 3× that with the Simple protocol (`getNetOverhead`, `tuning.cc:228-233, 404-410`).
const NET_OVERHEAD_S: f64 = 1.0e-6;

impl Group {
    /// A group of one rank: every collective is free.
    pub fn place_single() -> Group {
        Group {
            size: 1,
            ring_bytes_per_s: f64::INFINITY,
            point_bytes_per_s: f64::INFINITY,
            step_latency_s: 0.0,
            intra_step_latency_s: 0.0,
            spans_nodes: false,
            nodes: 1,
            local: 1,
            intra_bytes_per_s: f64::INFINITY,
        }
    }

    /// Places a group of `size` ranks spaced `stride` ranks apart.
    pub fn place(cluster: &ClusterSpec, size: u64, stride: u64) -> Group {
        let g = cluster.gpus_per_node;
        let intra = cluster.intra_node.achieved_bytes_per_s();
        if size <= 1 {
            return Group::place_single();
        }
        if size * stride <= g {
            return Group {
                size,
                ring_bytes_per_s: intra,
                point_bytes_per_s: intra,
                step_latency_s: cluster.intra_node.latency_s,
                intra_step_latency_s: cluster.intra_node.latency_s,
                spans_nodes: false,
                nodes: 1,
                local: size,
                intra_bytes_per_s: intra,
            };
        }
        // Members of this group inside one node; a ring through them uses that many NICs
        // (NCCL runs one channel per NIC), shared with the node's other groups.
        let local = (g / stride.min(g)).clamp(1, size);
        let per_gpu_nic = cluster.inter_node.achieved_bytes_per_s();
        let ring = (per_gpu_nic * local as f64).min(if local > 1 { intra } else { f64::INFINITY });
        Group {
            size,
            ring_bytes_per_s: ring,
            point_bytes_per_s: per_gpu_nic,
            step_latency_s: cluster.inter_node.latency_s,
            intra_step_latency_s: cluster.intra_node.latency_s,
            spans_nodes: true,
            nodes: size.div_ceil(local),
            local,
            intra_bytes_per_s: intra,
        }
    }

    fn fraction(&self) -> f64 {
        (self.size - 1) as f64 / self.size as f64
    }

    /// A ring collective of `rounds` passes (2 for all-reduce, 1 for reduce-scatter or
    /// all-gather) moving `bytes` of bus traffic per rank: the fastest NCCL protocol's
    /// latency plus bandwidth time. Nothing to move is no collective (an engine issues none
    /// for a group of parameters it does not have, e.g. a dense model's experts).
    fn ring_s(&self, rounds: f64, bytes: f64) -> f64 {
        if self.size <= 1 || bytes <= 0.0 {
            return 0.0;
        }
        let steps = rounds * (self.size - 1) as f64;
        let inter_steps = rounds * (self.nodes - 1) as f64;
        RING_PROTOCOLS
            .iter()
            .map(|p| {
                let mut intra = self.intra_step_latency_s * p.intra_rel;
                if self.nodes > 1 {
                    let overhead = if p.simple { 3.0 } else { 1.0 } * NET_OVERHEAD_S;
                    intra = intra.max(overhead);
                }
                let inter = self.step_latency_s * p.inter_rel;
                p.base_s
                    + (steps - inter_steps) * intra
                    + inter_steps * inter
                    + bytes / (self.ring_bytes_per_s * p.bandwidth_share)
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Ring all-reduce of a `bytes` buffer.
    pub fn all_reduce_s(&self, bytes: f64) -> f64 {
        self.ring_s(2.0, 2.0 * self.fraction() * bytes)
    }

    /// Ring reduce-scatter (or all-gather) whose full buffer is `bytes`.
    pub fn reduce_scatter_s(&self, bytes: f64) -> f64 {
        self.ring_s(1.0, self.fraction() * bytes)
    }

    /// All-gather whose gathered buffer is `bytes` (same cost as reduce-scatter).
    pub fn all_gather_s(&self, bytes: f64) -> f64 {
        self.reduce_scatter_s(bytes)
    }

    /// All-to-all where each rank holds `bytes` and keeps 1/size of them. NCCL runs it as
    /// grouped point-to-point sends (`ncclAllToAll` = one `ncclSend`/`ncclRecv` pair per
    /// peer inside `ncclGroupStart/End`, NCCL 5067397 `src/collectives.cc`): the share for
    /// peers on the same node crosses NVLink while the share for the other nodes' peers
    /// crosses this rank's NIC share, both at once — the slower of the two sets the time.
    pub fn all_to_all_s(&self, bytes: f64) -> f64 {
        if self.size <= 1 {
            return 0.0;
        }
        let per_peer = bytes / self.size as f64;
        let local_peers = (self.local.min(self.size) - 1) as f64;
        let remote_peers = (self.size - self.local.min(self.size)) as f64;
        self.exchange_s(local_peers * per_peer, remote_peers * per_peer)
    }

    /// An exchange with every peer at once, `intra_bytes` of it over NVLink and
    /// `inter_bytes` over this rank's NIC share: the slower of the two, after a latency per
    /// peer.
    fn exchange_s(&self, intra_bytes: f64, inter_bytes: f64) -> f64 {
        let intra = intra_bytes / self.intra_bytes_per_s;
        let inter = if inter_bytes > 0.0 {
            inter_bytes / self.point_bytes_per_s
        } else {
            0.0
        };
        (self.size - 1) as f64 * self.step_latency_s + intra.max(inter)
    }

    /// Dispatch (or combine) of a dispatcher that sends each token once to every other
    /// NVLink domain (node) holding one of its experts and forwards the copies inside the
    /// domain (DeepEP's and HybridEP's, `plait_spec::MoeDispatcher`): `copies_bytes` of
    /// routed copies, all delivered over NVLink but those landing on the GPU that
    /// received the token (1/local of them), and `remote_domains` × `token_bytes` over this
    /// rank's NIC share, both at once as in [`Group::all_to_all_s`], with its latency. In
    /// one domain it is that all-to-all.
    pub fn domain_deduplicated_all_to_all_s(
        &self,
        copies_bytes: f64,
        token_bytes: f64,
        remote_domains: f64,
    ) -> f64 {
        if self.size <= 1 {
            return 0.0;
        }
        let local = self.local.min(self.size) as f64;
        let remote = if self.nodes > 1 { remote_domains } else { 0.0 };
        self.exchange_s(copies_bytes * (local - 1.0) / local, token_bytes * remote)
    }

    /// One point-to-point transfer of `bytes` to a neighbour in this group.
    pub fn p2p_s(&self, bytes: f64) -> f64 {
        if self.size <= 1 {
            return 0.0;
        }
        self.step_latency_s + bytes / self.point_bytes_per_s
    }
}

/// The groups of one configuration on one cluster.
#[derive(Debug, Clone, Copy)]
pub struct Groups {
    pub tp: Group,
    pub cp: Group,
    /// Data parallel (with context parallel folded in: gradients reduce over dp × cp).
    pub dp: Group,
    /// The ZeRO shard group: the innermost shard × cp ranks of the dp × cp block, all of
    /// it without hybrid sharding (`ParallelConfig::dp_shard`).
    pub dp_shard: Group,
    /// The hybrid copies of one shard: dp / shard ranks, one per shard group, that
    /// all-reduce their gradient shards (size 1 without hybrid sharding).
    pub dp_replicate: Group,
    pub ep: Group,
    /// The expert MLPs' tensor-parallel group (the first `etp` ranks of a tp group).
    pub etp: Group,
    /// Neighbouring pipeline stages.
    pub pp: Group,
}

impl Groups {
    /// The groups of `c`, placed by the mesh's rank order (`plait_spec::Mesh`).
    pub fn new(cluster: &ClusterSpec, c: &ParallelConfig) -> Groups {
        let mesh = c.mesh();
        let stride = |d: Dim| mesh.stride(d);
        // Gradients reduce over the dp × cp block, which starts at cp's stride; a hybrid
        // shard group is its innermost shard × cp ranks, the copies every shard-th dp rank.
        let dp = Group::place(cluster, c.dp * c.cp, stride(Dim::Cp));
        let (dp_shard, dp_replicate) = if c.dp_replicas() > 1 {
            (
                Group::place(cluster, c.dp_shard() * c.cp, stride(Dim::Cp)),
                Group::place(cluster, c.dp_replicas(), stride(Dim::Dp) * c.dp_shard()),
            )
        } else {
            (dp, Group::place_single())
        };
        Groups {
            tp: Group::place(cluster, c.tp, stride(Dim::Tp)),
            cp: Group::place(cluster, c.cp, stride(Dim::Cp)),
            dp,
            dp_shard,
            dp_replicate,
            // Expert layers have a rank order of their own: expert-tp (tp unless set), ep,
            // expert-dp, pp, with cp folded into ep × expert-dp (Megatron-LM d98e8a6
            // `parallel_state.py:871-893`: `expert_tensor_parallel_size` defaults to tp and
            // `expert_decoder_rank_generator` is built with `cp=1`): an expert group is
            // every expert-tp-th rank.
            ep: Group::place(cluster, c.ep, c.expert_tp()),
            etp: Group::place(cluster, c.expert_tp(), 1),
            pp: Group::place(cluster, c.pp.min(2), stride(Dim::Pp)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plait_spec::cluster_preset;

    #[test]
    fn placement_picks_the_link() {
        let c = cluster_preset("dgx-a100-80g").unwrap();
        let tp = Group::place(&c, 8, 1);
        assert!(!tp.spans_nodes);
        assert_eq!(tp.ring_bytes_per_s, 300e9 * 0.78);
        // dp across nodes with tp = 8: one rank per node, one NIC each.
        let dp = Group::place(&c, 32, 8);
        assert!(dp.spans_nodes);
        assert_eq!(dp.ring_bytes_per_s, 25e9 * 0.9);
        // dp across nodes with tp = 1: eight ranks per node drive eight NICs.
        let dp = Group::place(&c, 32, 1);
        assert_eq!(dp.ring_bytes_per_s, 200e9 * 0.9);
    }

    #[test]
    fn collectives_follow_alpha_beta() {
        let c = cluster_preset("dgx-h100").unwrap();
        let g = Group::place(&c, 8, 1);
        let bytes = 1e9;
        let ar = g.all_reduce_s(bytes);
        // Large messages run the Simple protocol: 8.4 µs base + 14 steps of 3.4 µs.
        assert!((ar - (8.4e-6 + 14.0 * 3.4e-6 + 1.75e9 / (450e9 * 0.78))).abs() < 1e-9);
        // Small messages take LL: 6.6 µs base + 14 steps of 0.6 µs at half the bandwidth.
        let small = g.all_reduce_s(8.0);
        assert!((small - (6.6e-6 + 14.0 * 0.6e-6 + 14.0 / (450e9 * 0.78 * 0.5))).abs() < 1e-12);
        assert_eq!(Group::place(&c, 1, 1).all_reduce_s(bytes), 0.0);
    }

    #[test]
    fn all_to_all_splits_nvlink_and_network_peers() {
        let c = cluster_preset("dgx-b200").unwrap();
        let bytes = 8e9;
        // 8 ranks in one node: 7/8 of the bytes over NVLink.
        let node = Group::place(&c, 8, 1);
        let nvlink = c.intra_node.achieved_bytes_per_s();
        assert!(
            (node.all_to_all_s(bytes) - (7.0 * bytes / 8.0 / nvlink + 7.0 * node.step_latency_s))
                .abs()
                < 1e-9
        );
        // 8 ranks spaced 2 apart span two nodes, 4 on each: 3 peers over NVLink and 4 over
        // the NIC at once; the NIC share sets the time.
        let two = Group::place(&c, 8, 2);
        assert_eq!((two.nodes, two.local), (2, 4));
        let nic = c.inter_node.achieved_bytes_per_s();
        let expected = 7.0 * two.step_latency_s + 4.0 * bytes / 8.0 / nic;
        assert!((two.all_to_all_s(bytes) - expected).abs() < 1e-9);
        // One rank per node: every peer over the network.
        let spread = Group::place(&c, 8, 8);
        assert!(spread.all_to_all_s(bytes) > two.all_to_all_s(bytes));
    }

    #[test]
    fn expert_groups_follow_megatrons_expert_rank_order() {
        // tp 2 × cp 8 with ep 8 and the experts split as the dense layers (Megatron-Core's
        // own default, expert tp = tp) on 8-GPU nodes: the expert group is every tp-th rank
        // (cp is folded into ep × expert-dp), 16 ranks on two nodes, not every (tp·cp)-th
        // rank.
        let c = cluster_preset("dgx-b200").unwrap();
        let cfg: ParallelConfig = "dp4 tp2 pp4 vp14 cp8 ep8 etp2 mbs1 zero1 sp"
            .parse()
            .unwrap();
        let g = Groups::new(&c, &cfg);
        assert_eq!((g.ep.size, g.ep.nodes, g.ep.local), (8, 2, 4));
        // On an NVL72 rack the same group stays inside the NVLink domain.
        let nvl = cluster_preset("gb200-nvl72").unwrap();
        assert!(!Groups::new(&nvl, &cfg).ep.spans_nodes);
    }
}
