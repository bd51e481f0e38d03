//! Errors of the runtime. Bad input (a plan that does not fit the workers, a missing data
//! file) is `Config`; a failure while training names the rank, its coordinates, the step
//! and the instruction it was executing.

use thiserror::Error;

use crate::comm::CommError;

#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The request cannot run: the message says what and what would be accepted.
    #[error("{0}")]
    Config(String),
    #[error("data: {0}")]
    Data(String),
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// The I/O error is part of the message and deliberately not a `source`: printing the
    /// chain (`{err:#}`) would repeat it.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error("tensor: {0}")]
    Tensor(String),
    /// A worker thread panicked (the panic's message).
    #[error("panicked: {0}")]
    Panicked(String),
    /// The test switch [`crate::Fault`] fired.
    #[error("injected failure (test switch)")]
    Injected,
    /// A worker failed (error or panic); every other rank was stopped.
    #[error("rank {rank} ({coords}) failed at step {step}, {at}: {message}")]
    RankFailed {
        rank: usize,
        coords: String,
        step: u64,
        /// The instruction (`instruction 7 (F micro-batch 1 chunk 0)`) or phase.
        at: String,
        message: String,
    },
}

impl From<candle_core::Error> for RuntimeError {
    fn from(e: candle_core::Error) -> Self {
        // candle appends a backtrace to some messages; the first line is the error.
        let text = e.to_string();
        RuntimeError::Tensor(text.lines().next().unwrap_or("").to_string())
    }
}

impl RuntimeError {
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            path: path.as_ref().display().to_string(),
            error: source,
        }
    }
}
