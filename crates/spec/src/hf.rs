//! Hugging Face `config.json` → `ModelSpec`.

use crate::error::{Result, SpecError};
use crate::model::ModelSpec;

/// Parses a Hugging Face `config.json`; `source` (the file name) is used in errors.
pub fn model_from_hf_config(_text: &str, source: &str) -> Result<ModelSpec> {
    Err(SpecError::new(source, "model_type", "not implemented yet", ""))
}
