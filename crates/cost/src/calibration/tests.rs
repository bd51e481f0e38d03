//! The tables' statistics on hand-made rows.

use super::*;

fn row(comparable: &str, measured: f64, predicted: f64) -> RowResult {
    RowResult {
        label: format!("{comparable} {measured}"),
        measured_step_s: measured,
        predicted_step_s: predicted,
        predicted_low_s: predicted,
        predicted_high_s: predicted,
        fits: true,
        measured_memory_bytes: None,
        predicted_memory_bytes: 0.0,
        breakdown: Breakdown::default(),
        comparable: comparable.into(),
    }
}

#[test]
fn pairs_count_comparable_rows_measured_apart() {
    let t = TableResult {
        name: "t",
        engine: Engine::Megatron,
        rows: vec![
            // Measured 20 % apart, predicted the other way round: out of order.
            row("a", 1.0, 1.1),
            row("a", 1.2, 1.0),
            // 5 % from the first: too close to count.
            row("a", 1.05, 2.0),
            // Another model: never paired with the others.
            row("b", 3.0, 0.1),
            // In order.
            row("c", 1.0, 1.0),
            row("c", 2.0, 1.5),
        ],
        skipped: vec![],
    };
    // a: (1.0, 1.2) out of order, (1.05, 1.2) out of order (1.2 ≥ 1.155); c in order.
    assert_eq!(t.pairs_ordered(), (1, 3));
}
