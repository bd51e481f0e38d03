//! The one error type of the spec crate: bad input, named by where it came from, the field,
//! what is wrong and what would be accepted.

use std::fmt;

/// Bad input: an unknown preset, a missing or malformed key, a degree that does not divide.
///
/// Displays as one line: `<source>: <field>: <problem> (allowed: <allowed>)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpecError {
    /// Where the value came from: a file path, `--tp`, `preset`, …
    pub source: String,
    /// The field or key, e.g. `num_attention_heads` or `tp`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What would be accepted.
    pub allowed: String,
}

impl SpecError {
    pub fn new(
        source: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> Self {
        Self {
            source: source.into(),
            field: field.into(),
            problem: problem.into(),
            allowed: allowed.into(),
        }
    }

    /// An error in `field` of the caller's own request (a configuration value it passed,
    /// not a file's): the source is left for the caller to name, since only it knows how
    /// the value was given (the CLI names its flag, `--tp`, which the Python package maps
    /// back to its keyword). Until then it displays as `` `field`: problem ``.
    pub fn for_field(
        field: impl Into<String>,
        problem: impl Into<String>,
        allowed: impl Into<String>,
    ) -> Self {
        Self::new("", field, problem, allowed)
    }

    /// Whether this is an error in the request's own field (see [`SpecError::for_field`])
    /// whose source the caller has yet to name.
    pub fn is_request_field(&self) -> bool {
        self.source.is_empty()
    }

    /// Replaces the source (e.g. once the caller knows the file name).
    pub fn in_source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.source.is_empty() {
            write!(f, "{}: ", self.source)?;
        }
        write!(f, "`{}`: {}", self.field, self.problem)?;
        if !self.allowed.is_empty() {
            write!(f, " (allowed: {})", self.allowed)?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecError {}

/// Shorthand used across the crate.
pub type Result<T> = std::result::Result<T, SpecError>;

/// A positive integer, or an error naming `field`.
pub(crate) fn positive(source: &str, field: &str, value: i64) -> Result<u64> {
    if value <= 0 {
        Err(SpecError::new(
            source,
            field,
            format!("must be a positive integer, got {value}"),
            "integers ≥ 1",
        ))
    } else {
        Ok(value as u64)
    }
}
