//! Helpers and released config.json fixtures shared by the `model_from_hf_config` tests.

#![allow(dead_code)]

use plait_spec::{model_from_hf_config, ModelSpec, SpecError};
use serde_json::Value;

pub const GPT2: &str = include_str!("../fixtures/hf/gpt2.json");
pub const LLAMA2_7B: &str = include_str!("../fixtures/hf/llama-2-7b-hf.json");
pub const MISTRAL_7B: &str = include_str!("../fixtures/hf/mistral-7b-v0.1.json");
pub const MIXTRAL_8X7B: &str = include_str!("../fixtures/hf/mixtral-8x7b-v0.1.json");
pub const QWEN2_7B: &str = include_str!("../fixtures/hf/qwen2-7b.json");
pub const BERT_LARGE: &str = include_str!("../fixtures/hf/bert-large-uncased.json");
pub const PYTHIA_160M: &str = include_str!("../fixtures/hf/pythia-160m.json");
pub const QWEN3_8B: &str = include_str!("../fixtures/hf/qwen3-8b.json");
pub const QWEN3_30B_A3B: &str = include_str!("../fixtures/hf/qwen3-30b-a3b.json");
/// meta-llama/Llama-4-Scout-17B-16E config.json (its vision_config abbreviated to the keys
/// that shape it; plait reads only `text_config`).
pub const LLAMA4_SCOUT: &str = include_str!("../fixtures/hf/llama-4-scout-17b-16e.json");
pub const NEMOTRON_H_8B: &str = include_str!("../fixtures/hf/nemotron-h-8b.json");

pub const FIXTURES: [&str; 10] = [
    LLAMA4_SCOUT,
    QWEN3_8B,
    QWEN3_30B_A3B,
    GPT2,
    LLAMA2_7B,
    MISTRAL_7B,
    MIXTRAL_8X7B,
    QWEN2_7B,
    BERT_LARGE,
    PYTHIA_160M,
];

pub fn parse(text: &str, source: &str) -> ModelSpec {
    model_from_hf_config(text, source).unwrap_or_else(|e| panic!("{e}"))
}

/// The error for `text`, checked to be one line naming `field` and the source.
pub fn error(text: &str, field: &str) -> SpecError {
    let err = model_from_hf_config(text, "cfg.json").expect_err("should be rejected");
    let line = err.to_string();
    assert!(!line.contains('\n'), "{line:?}");
    assert_eq!(err.field, field, "{line}");
    assert_eq!(err.source, "cfg.json");
    assert!(line.contains(&format!("`{field}`")), "{line}");
    err
}

/// `fixture` with `key` set to `value` (`Value::Null` here means: removed).
pub fn with(fixture: &str, key: &str, value: Value) -> String {
    let mut doc: Value = serde_json::from_str(fixture).unwrap();
    let map = doc.as_object_mut().unwrap();
    if value.is_null() {
        map.remove(key);
    } else {
        map.insert(key.to_string(), value);
    }
    doc.to_string()
}

/// `fixture` with the key `from` renamed to `to`.
pub fn renamed(fixture: &str, from: &str, to: &str) -> String {
    let mut doc: Value = serde_json::from_str(fixture).unwrap();
    let map = doc.as_object_mut().unwrap();
    let v = map.remove(from).unwrap();
    map.insert(to.to_string(), v);
    doc.to_string()
}

/// `got` within 1 % of the `published` total.
pub fn within_1_percent(name: &str, got: u64, published: f64) {
    let rel = (got as f64 - published).abs() / published;
    assert!(
        rel <= 0.01,
        "{name}: {got} parameters vs published {published} ({:.3} % off)",
        100.0 * rel
    );
}
