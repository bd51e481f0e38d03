//! Optimal contiguous partition of computation DAGs into pipeline stages.
