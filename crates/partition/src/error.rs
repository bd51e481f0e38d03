//! The one error type of the partition crate: bad input (a malformed file, a graph that is
//! not a DAG, an unsupported ONNX operator, impossible limits), named by where it came from,
//! the field, what is wrong and what would be accepted.
//!
//! A graph that simply does not fit the devices is *not* an error: it is a
//! [`Partition`](crate::Partition) with `feasible = false` and a reason.

use thiserror::Error;

/// Bad input. Displays as one line:
/// ``<origin>: `<field>`: <problem> (allowed: <allowed>)``.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{origin}: `{field}`: {problem}{}", allowed_suffix(.allowed))]
pub struct PartitionError {
    /// Where the value came from: a file name, `limits`, …
    pub origin: String,
    /// The field, key or node, e.g. `edges[3].destId` or `node Conv_7`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What would be accepted (empty when there is nothing useful to say).
    pub allowed: String,
}

fn allowed_suffix(allowed: &str) -> String {
    if allowed.is_empty() {
        String::new()
    } else {
        format!(" (allowed: {allowed})")
    }
}

impl PartitionError {
    pub fn new(
        origin: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> Self {
        // One line, whatever the pieces contain.
        let flat = |s: String| s.replace(['\n', '\r'], " ");
        PartitionError {
            origin: flat(origin.into()),
            field: flat(field.into()),
            problem: flat(problem.into()),
            allowed: flat(allowed.into()),
        }
    }
}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, PartitionError>;
