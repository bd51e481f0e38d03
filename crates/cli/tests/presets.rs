//! Every cluster preset runs Llama 3 8B through `plait estimate` with finite numbers, and the
//! header says where the groups run: tp inside a 72-GPU NVL72 rack is at NVLink rates.

mod common;

use common::{json, plait};
use plait_spec::CLUSTER_PRESETS;

#[test]
fn every_cluster_preset_estimates_llama3_8b() {
    for cluster in CLUSTER_PRESETS {
        let v = json(&[
            "estimate",
            "--model",
            "llama3-8b",
            "--cluster",
            cluster,
            "--gpus",
            "16",
            "--tp",
            "8",
            "--gbs",
            "32",
            "--seq",
            "4096",
            "--json",
        ]);
        for key in [
            "iteration_time_s",
            "tokens_per_s",
            "mfu",
            "peak_memory_bytes",
        ] {
            let x = v[key].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{cluster}: {key} = {x}");
        }
    }
}

#[test]
fn nvl72_places_tp_inside_the_rack_at_nvlink_rates() {
    for cluster in ["gb200-nvl72", "gb300-nvl72"] {
        let c = plait_spec::cluster_preset(cluster).unwrap();
        assert_eq!(c.gpus_per_node, 72);
        // tp 8 (and dp 9) fill one rack: both groups run at the NVLink rate.
        let tp = plait_cost::comm::Group::place(&c, 8, 1);
        assert!(!tp.spans_nodes);
        assert_eq!(tp.ring_bytes_per_s, c.intra_node.achieved_bytes_per_s());
        let dp = plait_cost::comm::Group::place(&c, 9, 8);
        assert!(!dp.spans_nodes);
        let (code, out, err) = plait(&[
            "estimate",
            "--model",
            "llama3-8b",
            "--cluster",
            cluster,
            "--gpus",
            "144",
            "--tp",
            "8",
            "--gbs",
            "144",
            "--seq",
            "8192",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("cluster: 72 GPUs per node") && out.contains("900 GB/s per GPU"),
            "{out}"
        );
        assert!(
            out.contains("placement: tp 8 inside one node, dp 18 across 2 nodes"),
            "{out}"
        );
    }
}

#[test]
fn plan_header_prints_total_and_active_parameters() {
    let (code, out, err) = plait(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "mi300x-8",
        "--gpus",
        "16",
        "--gbs",
        "64",
        "--seq",
        "4096",
        "--top",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.contains("(46.70 B parameters, 12.88 B active per token)"),
        "{first}"
    );
    assert!(out.contains("cluster: 8 GPUs per node"), "{out}");
}
