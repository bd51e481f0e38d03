//! Llama 4 from its released `config.json` (the multimodal `llama4` file, its
//! `text_config`, or a text-only `llama4_text` one): parameter counts against Meta's
//! published totals, the layer kinds (MoE and dense MLPs, chunked and full attention), and
//! one-line errors naming the bad key.

mod common;

use common::parse;
use plait_spec::{model_from_hf_config, Family};
use serde_json::{json, Value};

const SCOUT: &str = common::LLAMA4_SCOUT;

/// Scout's config with `text_config.key` set to `value` (`Value::Null`: removed).
fn scout_with(key: &str, value: Value) -> String {
    let mut doc: Value = serde_json::from_str(SCOUT).unwrap();
    let text = doc["text_config"].as_object_mut().unwrap();
    if value.is_null() {
        text.remove(key);
    } else {
        text.insert(key.into(), value);
    }
    doc.to_string()
}

/// Maverick (meta-llama/Llama-4-Maverick-17B-128E): Scout's text model with 128 experts,
/// MoE on every other layer (`interleave_moe_layer_step` 2, the others dense MLPs of
/// `intermediate_size_mlp`), no q/k norm and no RoPE rescaling.
fn maverick() -> String {
    let mut doc: Value = serde_json::from_str(SCOUT).unwrap();
    let text = doc["text_config"].as_object_mut().unwrap();
    text.insert("num_local_experts".into(), json!(128));
    text.insert("interleave_moe_layer_step".into(), json!(2));
    text.insert(
        "moe_layers".into(),
        json!((1..48).step_by(2).collect::<Vec<_>>()),
    );
    text.insert("use_qk_norm".into(), json!(false));
    text.insert("rope_scaling".into(), Value::Null);
    text.insert("max_position_embeddings".into(), json!(1_048_576));
    doc.to_string()
}

/// `got` within `tolerance` (relative) of the `published` figure.
fn near(name: &str, got: u64, published: f64, tolerance: f64) {
    let rel = (got as f64 - published).abs() / published;
    assert!(
        rel <= tolerance,
        "{name}: {got} vs published {published} ({:.2} % off)",
        100.0 * rel
    );
}

#[test]
fn scout_counts_and_layer_kinds() {
    let m = parse(SCOUT, "config.json");
    assert_eq!(m.family, Family::Moe);
    assert_eq!(
        (m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim),
        (5120, 48, 40, 8, 128)
    );
    let moe = m.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k, moe.shared_experts), (16, 1, 1));
    assert_eq!(m.ffn_hidden, 8192);
    assert_eq!(m.rope_theta, 500_000.0);
    let router = m.router.unwrap();
    assert!(router.sigmoid && !router.normalize_topk && !router.expert_bias);
    // Every layer MoE; three of four attend within 8,192-token chunks, every fourth over
    // the whole sequence.
    let kinds = m.block_kinds();
    assert_eq!(kinds.len(), 2);
    assert_eq!(kinds[0].attention_chunk, Some(8192));
    assert_eq!(kinds[1].attention_chunk, None);
    assert!(kinds.iter().all(|k| k.moe.is_some()));
    assert_eq!(m.block_runs.iter().map(|r| r.count).sum::<u64>(), 48);
    assert_eq!(
        m.block_runs[..2]
            .iter()
            .map(|r| r.count)
            .collect::<Vec<_>>(),
        [3, 1]
    );
    // Per layer: attention 62,914,560, 16 routed + 1 shared expert of 3 × 5120 × 8192,
    // router 5120 × 16, two norms; embeddings and head 2 × 202048 × 5120; the final norm.
    assert_eq!(m.parameter_count(), 107_769_861_120);
    // Meta's model card: 109 B in all, which counts the vision encoder (≈ 0.8 B, 34 ViT
    // layers of width 1408) that a language-model run does not train: 1.1 % apart.
    near("scout total", m.parameter_count(), 109e9, 0.015);
    // 17 B active (to the nearest billion): attention, the shared and one routed expert.
    assert_eq!(m.active_parameter_count(), 17_172_894_720);
    near("scout active", m.active_parameter_count(), 17e9, 0.03);
    // Attention within a chunk is costed as over a sequence of the chunk's length.
    assert_eq!(kinds[0].attention_span(32_768), 8192);
    assert_eq!(kinds[1].attention_span(32_768), 32_768);
    assert_eq!(kinds[0].attention_span(4096), 4096);
}

#[test]
fn maverick_interleaves_dense_and_moe_layers() {
    let m = parse(&maverick(), "config.json");
    let kinds = m.block_kinds();
    // Dense layers (even indices) all use RoPE; MoE layers with RoPE, and MoE layers
    // without (every fourth layer is odd, so MoE).
    assert_eq!(kinds.len(), 3);
    let dense: Vec<_> = kinds.iter().filter(|k| k.moe.is_none()).collect();
    assert_eq!(dense.len(), 1);
    assert_eq!(dense[0].ffn_hidden, 16384);
    assert_eq!(dense[0].attention_chunk, Some(8192));
    // Meta's model card: 400 B in all, 17 B active.
    near("maverick total", m.parameter_count(), 400e9, 0.01);
    near("maverick active", m.active_parameter_count(), 17e9, 0.03);
    // The same model from transformers' defaults (no `moe_layers`, no `no_rope_layers`).
    let mut doc: Value = serde_json::from_str(&maverick()).unwrap();
    let text = doc["text_config"].as_object_mut().unwrap();
    text.remove("moe_layers");
    text.remove("no_rope_layers");
    assert_eq!(parse(&doc.to_string(), "config.json"), m);
}

#[test]
fn text_only_config_parses_alike() {
    let doc: Value = serde_json::from_str(SCOUT).unwrap();
    let text = doc["text_config"].to_string();
    let m = model_from_hf_config(&text, "Llama-4-Scout-text/config.json").unwrap();
    assert_eq!(
        m.parameter_count(),
        parse(SCOUT, "config.json").parameter_count()
    );
    assert_eq!(m.name, "Llama-4-Scout-text");
}

#[test]
fn no_chunk_size_means_full_attention_everywhere() {
    let m = parse(
        &scout_with("attention_chunk_size", Value::Null),
        "config.json",
    );
    assert!(m.block_kinds().iter().all(|k| k.attention_chunk.is_none()));
    assert_eq!(
        m.parameter_count(),
        parse(SCOUT, "config.json").parameter_count()
    );
}

#[test]
fn bad_llama4_configs_name_the_key() {
    let cases: Vec<(String, &str)> = vec![
        (scout_with("moe_layers", json!([0, 48])), "moe_layers"),
        (scout_with("moe_layers", json!("all")), "moe_layers"),
        (
            scout_with("no_rope_layers", json!([1, 0])),
            "no_rope_layers",
        ),
        (
            scout_with("no_rope_layers", json!(vec![2; 48])),
            "no_rope_layers",
        ),
        (
            scout_with("num_experts_per_tok", json!(17)),
            "num_experts_per_tok",
        ),
        (
            scout_with("num_key_value_heads", json!(7)),
            "num_key_value_heads",
        ),
        (scout_with("hidden_size", Value::Null), "hidden_size"),
        (
            scout_with("moe_layers", Value::Null).replace(
                "\"interleave_moe_layer_step\":1",
                "\"interleave_moe_layer_step\":0",
            ),
            "interleave_moe_layer_step",
        ),
    ];
    for (text, field) in cases {
        let err = model_from_hf_config(&text, "config.json").expect_err(field);
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(err.field, field, "{line}");
        assert!(line.contains("config.json (text_config)"), "{line}");
    }
    // The multimodal file without its language model.
    let mut doc: Value = serde_json::from_str(SCOUT).unwrap();
    doc.as_object_mut().unwrap().remove("text_config");
    let err = model_from_hf_config(&doc.to_string(), "config.json").unwrap_err();
    assert_eq!(err.field, "text_config");
    doc["text_config"] = json!([1, 2]);
    let err = model_from_hf_config(&doc.to_string(), "config.json").unwrap_err();
    assert_eq!(err.field, "text_config");
    assert!(err.to_string().contains("must be an object"), "{err}");
}
