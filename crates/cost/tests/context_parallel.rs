//! Context parallelism's three ways of moving the sequence (`cp-comm`): the ring (p2p),
//! Ulysses' all-to-all (a2a) and the key/value all-gather, in what they cost and hold.

use plait_cost::estimate::layer_costs;
use plait_cost::{comm::Groups, device_for, estimate, layer::Workload, Estimate};
use plait_spec::{cluster_preset, model_preset, Dtype, ParallelConfig, TrainSpec};

/// `config` for `model` on DGX H100s in bf16, dp filled to `gpus`.
fn run(model: &str, gpus: u64, seq: u64, config: &str) -> Estimate {
    let m = model_preset(model).unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let mut c: ParallelConfig = config.parse().unwrap();
    c.dp = gpus / c.replica_gpus();
    let c = c.normalised();
    let t = TrainSpec::new(c.dp * c.mbs, seq);
    c.validate(&m, &t, gpus).unwrap();
    estimate(&m, &cluster, &t, &c, &d).unwrap()
}

/// The three kinds of `base` (a configuration with cp > 1).
fn kinds(model: &str, gpus: u64, seq: u64, base: &str) -> [Estimate; 3] {
    ["p2p", "a2a", "allgather"].map(|k| run(model, gpus, seq, &format!("{base} cp-comm={k}")))
}

#[test]
fn every_kind_holds_the_same_activations() {
    // Outside attention the sequence is split over cp whatever moves it; inside, Ulysses'
    // head-split q, k, v are as large as the sequence-split ones.
    let [p2p, a2a, gather] = kinds("llama2-7b", 16, 32768, "tp1 cp8 mbs1 zero1");
    let act = |e: &Estimate| e.stages[0].memory.activations_bytes;
    assert_eq!(act(&p2p), act(&a2a));
    assert_eq!(act(&p2p), act(&gather));
}

#[test]
fn ulysses_runs_attention_over_the_whole_sequence() {
    // Llama 2 7B at 8k over cp 8: the ring's kernels see 1,024-token chunks, Ulysses'
    // kernels the 8,192-token sequence for 4 of the 32 heads — the same work at the
    // longer sequence's kernel efficiency (FlashAttention-2's tables rise with length).
    let [p2p, a2a, _] = kinds("llama2-7b", 8, 8192, "tp1 cp8 mbs1");
    assert!(
        a2a.breakdown.compute_s < p2p.breakdown.compute_s,
        "a2a {} s vs ring {} s of compute",
        a2a.breakdown.compute_s,
        p2p.breakdown.compute_s
    );
    // Its all-to-alls run in line: never hidden.
    assert!(a2a.breakdown.cp_comm_s > 0.0);
}

#[test]
fn inside_a_node_the_all_gather_hides_less_than_the_ring() {
    // Both move (cp − 1) key/value chunks into every rank; the ring hides each step behind
    // the attention of the chunk already present, the all-gather only behind the rank's own.
    for (gpus, seq, base) in [(8, 8192, "tp1 cp8 mbs1"), (8, 65536, "tp2 cp4 mbs1 sp")] {
        let [p2p, _, gather] = kinds("llama2-7b", gpus, seq, base);
        assert!(
            gather.breakdown.cp_comm_s >= p2p.breakdown.cp_comm_s,
            "{base} at {seq}: all-gather {} s vs ring {} s exposed",
            gather.breakdown.cp_comm_s,
            p2p.breakdown.cp_comm_s
        );
    }
}

#[test]
fn across_nodes_the_ring_waits_on_one_nic_per_step() {
    // cp 16 over two DGX nodes: every ring step waits for the chunk that crosses between
    // the nodes through one GPU's NIC share, while NCCL's all-gather runs a ring per NIC
    // (channel), so the node's eight NICs carry it together.
    let [p2p, _, gather] = kinds("llama2-7b", 16, 32768, "tp1 cp16 mbs1");
    assert!(
        p2p.breakdown.cp_comm_s > 4.0 * gather.breakdown.cp_comm_s,
        "ring {} s vs all-gather {} s exposed",
        p2p.breakdown.cp_comm_s,
        gather.breakdown.cp_comm_s
    );
}

#[test]
fn ulysses_across_nodes_costs_more_than_inside_one() {
    // cp 8 inside a DGX node against cp 16 over two: the all-to-all's off-node share
    // crosses the 50 GB/s NIC share instead of NVLink; per GPU the bytes are about the same.
    let inside = run("llama2-7b", 8, 16384, "tp1 cp8 mbs1 cp-comm=a2a");
    let across = run("llama2-7b", 16, 32768, "tp1 cp16 mbs1 cp-comm=a2a");
    assert!(
        across.breakdown.cp_comm_s > 2.0 * inside.breakdown.cp_comm_s,
        "across {} s vs inside {} s",
        across.breakdown.cp_comm_s,
        inside.breakdown.cp_comm_s
    );
}

#[test]
fn ulysses_needs_heads_that_split_over_cp() {
    // Llama 3 70B has 8 key/value heads: one per rank at tp 8, none to split over cp 2.
    let m = model_preset("llama3-70b").unwrap();
    let t = TrainSpec::new(8, 8192);
    let c: ParallelConfig = "dp4 tp8 cp2 mbs1 sp cp-comm=a2a".parse().unwrap();
    let e = c.validate(&m, &t, 64).unwrap_err();
    assert_eq!(e.field, "cp_comm");
    assert!(e.is_request_field());
    assert!(e.allowed.contains("p2p"), "{e}");
    // The ring and the all-gather have no such limit.
    for k in ["p2p", "allgather"] {
        let c: ParallelConfig = format!("dp4 tp8 cp2 mbs1 sp cp-comm={k}").parse().unwrap();
        c.validate(&m, &t, 64).unwrap();
    }
}

#[test]
fn the_kind_round_trips_through_the_configuration_text() {
    for (text, shown) in [
        (
            "dp2 tp2 cp4 mbs1 cp-comm=a2a",
            "dp2 tp2 pp1 cp4 cp-comm=a2a mbs1 1f1b",
        ),
        (
            "dp2 cp4 cp-comm=allgather",
            "dp2 tp1 pp1 cp4 cp-comm=allgather mbs1 1f1b",
        ),
        // The ring is the default, and without cp there is nothing to move.
        ("dp2 cp4 cp-comm=p2p", "dp2 tp1 pp1 cp4 mbs1 1f1b"),
        ("dp2 cp-comm=a2a", "dp2 tp1 pp1 mbs1 1f1b"),
    ] {
        let c: ParallelConfig = text.parse().unwrap();
        let c = c.normalised();
        assert_eq!(c.to_string(), shown, "{text}");
        assert_eq!(shown.parse::<ParallelConfig>().unwrap().normalised(), c);
    }
    assert!("cp4 cp-comm=ring"
        .parse::<ParallelConfig>()
        .unwrap_err()
        .contains("p2p|a2a|allgather"));
}

#[test]
fn the_all_gather_holds_the_whole_sequence_of_keys_and_values() {
    // Llama 2 7B at 256K tokens over cp 8: the all-gather holds the gathered keys and values
    // (4 GiB) and, in the backward, their gradients before the reduce-scatter; the ring
    // holds two local chunks and their gradients in flight (2 GiB).
    let [p2p, _, gather] = kinds("llama2-7b", 8, 262_144, "tp1 cp8 mbs1 zero1");
    let transient = |e: &Estimate| e.stages[0].memory.transient_bytes;
    let chunk = 2.0 * 32768.0 * 4096.0 * 2.0;
    assert!(
        transient(&gather) - transient(&p2p) > 0.9 * (2.0 * 8.0 - 4.0) * chunk,
        "all-gather {} GiB, ring {} GiB",
        transient(&gather) / f64::from(1u32 << 30),
        transient(&p2p) / f64::from(1u32 << 30)
    );
}

/// Llama 3.1 8B's block at 256K tokens over cp 8 with all-gathered keys and values on one
/// DGX H100 (torchtitan's CP benchmark shape), under `engine`, compiled or not.
fn llama3_8b_cp8_block(
    engine: plait_spec::Engine,
    compile: bool,
    with: impl Fn(Workload) -> Workload,
) -> (
    plait_cost::layer::LayerCost,
    Groups,
    plait_cost::device::DeviceModel,
) {
    let m = model_preset("llama3-8b").unwrap();
    let cluster = cluster_preset("dgx-h100").unwrap();
    let d = device_for(&cluster, Dtype::Bf16).unwrap();
    let c: ParallelConfig = "dp1 tp1 cp8 cp-comm=allgather mbs1 zero3".parse().unwrap();
    let t = TrainSpec {
        engine,
        compile,
        ..TrainSpec::new(1, 262_144)
    };
    let g = Groups::new(&cluster, &c);
    let block = layer_costs(&m, &d, &g, &with(Workload::new(&c, &t))).block;
    (block, g, d)
}

#[test]
fn pytorch_context_parallelism_merges_each_chunk_in_fp32() {
    use plait_cost::engine::{CpMerge, EngineProfile};
    // torchtitan runs PyTorch's ring, which merges each chunk's output into an fp32 one and
    // adds each chunk's gradients into fp32 accumulators; Transformer Engine's merges are
    // fused into its kernels. Llama 3.1 8B at 256K tokens over cp 8: 32,768 × 4,096 output
    // elements per rank.
    let titan = plait_spec::Engine::Torchtitan;
    let (ring, _, d) = llama3_8b_cp8_block(titan, false, |w| {
        assert_eq!(w.engine.cp_merge, CpMerge::PYTORCH_FP32);
        w
    });
    let (te, _, _) = llama3_8b_cp8_block(titan, false, |w| Workload {
        engine: EngineProfile {
            cp_merge: CpMerge::FUSED,
            ..w.engine
        },
        ..w
    });
    let out = 32768.0 * 4096.0;
    let merge = CpMerge::PYTORCH_FP32;
    let forward = d.memory_s(out * (merge.forward_fixed + 7.0 * merge.forward_per_step));
    let backward = d.memory_s(out * (merge.backward_fixed + 8.0 * merge.backward_per_step));
    let extra_f = ring.forward.compute_s - te.forward.compute_s;
    let extra_b = ring.backward.compute_s - te.backward.compute_s;
    assert!(
        (extra_f / forward - 1.0).abs() < 0.02,
        "{extra_f} vs {forward}"
    );
    assert!(
        (extra_b / backward - 1.0).abs() < 0.02,
        "{extra_b} vs {backward}"
    );
}

#[test]
fn pytorch_context_parallelism_returns_fp32_gradients_and_compiled_waits_in_line() {
    // Llama 3.1 8B at 256K tokens over cp 8 on one node (torchtitan's CP benchmark shape):
    // PyTorch's backward gathers K and V again and sends the fp32 dK, dV (1 GiB per rank
    // after `repeat_kv`) once per step; compiled, every collective is waited on where it is
    // issued, so none of it hides behind the attention.
    let block = |engine, compile| llama3_8b_cp8_block(engine, compile, |w| w);
    let (te, _, _) = block(plait_spec::Engine::Megatron, false);
    let (eager, _, _) = block(plait_spec::Engine::Torchtitan, false);
    let (compiled, g, _) = block(plait_spec::Engine::Torchtitan, true);
    let gathered = 8.0 * 2.0 * 32768.0 * 4096.0 * 2.0;
    let in_line_forward = g.cp.all_gather_s(gathered);
    let dkv = g.cp.p2p_s(2.0 * 32768.0 * 4096.0 * 4.0);
    let in_line_backward = in_line_forward + 8.0 * dkv;
    let close = |got: f64, want: f64| (got / want - 1.0).abs() < 1e-9;
    assert!(
        close(compiled.forward.cp_comm_s, in_line_forward),
        "{} vs {in_line_forward}",
        compiled.forward.cp_comm_s
    );
    assert!(
        close(compiled.backward.cp_comm_s, in_line_backward),
        "{} vs {in_line_backward}",
        compiled.backward.cp_comm_s
    );
    // Eager, each exchange hides behind the next step's kernel: only the last one shows
    // here, where a step's attention outlasts it.
    assert!(
        eager.backward.cp_comm_s < 0.5 * compiled.backward.cp_comm_s
            && eager.backward.cp_comm_s >= dkv,
        "eager {} s, compiled {} s",
        eager.backward.cp_comm_s,
        compiled.backward.cp_comm_s
    );
    // Transformer Engine reduce-scatters 16-bit gradients beside the kernel.
    assert!(te.backward.cp_comm_s < eager.backward.cp_comm_s);
}
