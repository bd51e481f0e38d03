//! The 64-device, 120-layer instances answer and say whether they are optimal (speed is
//! measured by `examples/place_64x120.rs`, never here).

use plait_place::{evaluate, place, synth, Objective, Options};

#[test]
fn fleet_64x120_is_proven_optimal() {
    let p = synth::fleet(120, 1.0, 1);
    assert_eq!((p.devices.len(), p.layers.len()), (64, 120));
    for objective in [Objective::Latency, Objective::Throughput] {
        let a = place(
            &p,
            &Options {
                objective,
                ..Options::default()
            },
        );
        assert!(a.feasible && a.optimal, "{objective:?}: {:?}", a.reason);
        assert_eq!(a.lower_bound_s, a.value_s);
        assert_eq!(a.search.device_classes, 8);
        let stages: Vec<_> = a
            .stages
            .iter()
            .map(|s| (s.device_index, s.first_layer, s.last_layer))
            .collect();
        let (_, lat, bot) = evaluate(&p, &stages).expect("a valid placement");
        let own = if objective == Objective::Latency {
            lat
        } else {
            bot
        };
        assert!((own - a.value_s.unwrap()).abs() <= 1e-12 * own);
    }
}

#[test]
fn a_search_stopped_by_its_budget_says_so_with_a_bound() {
    let p = synth::random(64, 120, 4.0, 1.0, 2);
    let a = place(
        &p,
        &Options {
            objective: Objective::Latency,
            slo_s: None,
            max_labels: 2_000,
        },
    );
    assert!(a.feasible, "{:?}", a.reason);
    assert!(!a.optimal && a.search.budget_exhausted);
    let (v, lb) = (a.value_s.unwrap(), a.lower_bound_s.unwrap());
    assert!(lb > 0.0 && lb <= v, "bound {lb} vs value {v}");
}
