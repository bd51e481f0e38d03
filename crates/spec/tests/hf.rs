//! `model_from_hf_config` on released `config.json` files (parameter counts against the
//! published totals) and on broken ones (one-line errors naming the key).

mod common;

use common::*;
use plait_spec::{model_from_hf_config, Family, ModelSpec, Positions};
use proptest::prelude::*;
use serde_json::{json, Value};

#[test]
fn gpt2_124m() {
    let m = parse(GPT2, "tests/fixtures/hf/gpt2.json");
    assert_eq!(m.name, "gpt2");
    assert_eq!(m.family, Family::Gpt);
    assert_eq!((m.hidden, m.layers, m.heads, m.head_dim), (768, 12, 12, 64));
    assert_eq!((m.ffn_hidden, m.max_positions), (3072, 1024));
    assert!(m.tied_embeddings && m.causal);
    assert_eq!(m.parameter_count(), 124_439_808);
}

#[test]
fn gpt2_n_inner_and_n_ctx() {
    let text = with(GPT2, "n_inner", json!(1000));
    assert_eq!(parse(&text, "x.json").ffn_hidden, 1000);
    let text = with(GPT2, "n_inner", json!(null));
    assert_eq!(parse(&text, "x.json").ffn_hidden, 3072);
    let text = with(&with(GPT2, "n_positions", json!(null)), "n_ctx", json!(512));
    assert_eq!(parse(&text, "x.json").max_positions, 512);
}

#[test]
fn llama2_7b() {
    let m = parse(LLAMA2_7B, "config.json");
    assert_eq!(m.name, "meta-llama/Llama-2-7b-hf");
    assert_eq!(m.family, Family::Llama);
    assert_eq!(m.kv_heads, 32);
    assert_eq!(m.parameter_count(), 6_738_415_616);
    assert_eq!(
        m,
        ModelSpec {
            name: m.name.clone(),
            ..plait_spec::model_preset("llama2-7b").unwrap()
        }
    );
}

#[test]
fn mistral_7b() {
    let m = parse(MISTRAL_7B, "mistralai/Mistral-7B-v0.1/config.json");
    assert_eq!(m.name, "Mistral-7B-v0.1");
    assert_eq!(m.family, Family::Llama);
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (32, 8, 128));
    assert_eq!(m.parameter_count(), 7_241_732_096);
}

#[test]
fn mixtral_8x7b() {
    let m = parse(MIXTRAL_8X7B, "mixtral.json");
    assert_eq!(m.family, Family::Moe);
    let moe = m.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k), (8, 2));
    assert_eq!(m.parameter_count(), 46_702_792_704);
}

#[test]
fn qwen2_7b() {
    let m = parse(QWEN2_7B, "qwen2.json");
    assert_eq!(m.family, Family::Llama);
    assert!(m.qkv_bias && !m.linear_bias && !m.tied_embeddings);
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (28, 4, 128));
    assert_eq!(m.parameter_count(), 7_615_616_512);
}

#[test]
fn qwen3_8b() {
    // Model card: 8.2 B parameters, 6.95 B without embeddings; 36 layers, 32 q / 8 kv heads.
    let m = parse(QWEN3_8B, "qwen3.json");
    assert_eq!(m.family, Family::Llama);
    assert_eq!((m.heads, m.kv_heads, m.head_dim), (32, 8, 128));
    let total = m.parameter_count() as f64;
    let embeddings = 2.0 * (m.vocab * m.hidden) as f64;
    assert_eq!(format!("{:.1}", total / 1e9), "8.2");
    assert_eq!(format!("{:.2}", (total - embeddings) / 1e9), "6.95");
}

#[test]
fn qwen3_30b_a3b() {
    // Model card: 30.5 B parameters in total, 3.3 B activated; 128 experts, 8 per token.
    let m = parse(QWEN3_30B_A3B, "qwen3_moe.json");
    assert_eq!(m.family, Family::Moe);
    let moe = m.moe.unwrap();
    assert_eq!((moe.experts, moe.top_k, m.ffn_hidden), (128, 8, 768));
    // q is wider than the hidden size (32 heads × 128 = 4096 over 2048).
    assert_eq!(m.q_width(), 4096);
    assert_eq!(format!("{:.1}", m.parameter_count() as f64 / 1e9), "30.5");
    // 3.35 B with both embedding matrices counted; the card rounds to 3.3.
    let active = m.active_parameter_count() as f64 / 1e9;
    assert!((3.3..3.4).contains(&active), "{active}");
    // Dense layers mixed in become dense block runs of `intermediate_size` (6144).
    let mixed = parse(
        &with(QWEN3_30B_A3B, "decoder_sparse_step", json!(2)),
        "q.json",
    );
    let kinds = mixed.block_kinds();
    assert_eq!(kinds.len(), 2);
    assert!(kinds[0].moe.is_none() && kinds[0].ffn_hidden == 6144);
    assert_eq!(&mixed.kind_counts(0, 48)[..2], &[24, 24]);
    let first_two = parse(
        &with(QWEN3_30B_A3B, "mlp_only_layers", json!([0, 1])),
        "q.json",
    );
    assert_eq!(&first_two.kind_counts(0, 2)[..2], &[2, 0]);
    assert_eq!(&first_two.kind_counts(0, 48)[..2], &[2, 46]);
    assert!(first_two.parameter_count() < m.parameter_count());
    error(
        &with(QWEN3_30B_A3B, "mlp_only_layers", json!([48])),
        "mlp_only_layers",
    );
}

#[test]
fn local_and_global_attention_layers_are_block_runs() {
    // google/gemma-2-9b: 9.24 B parameters; local (4096-token window) and global layers
    // alternate, local first.
    let gemma2 = json!({
        "model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "intermediate_size": 14336, "vocab_size": 256000, "sliding_window": 4096,
        "hidden_activation": "gelu_pytorch_tanh",
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0
    });
    let m = parse(&gemma2.to_string(), "gemma2.json");
    assert!(m.tied_embeddings);
    let p = m.parameter_count() as f64 / 1e9;
    assert!((p / 9.24 - 1.0).abs() < 0.01, "{p}");
    let kinds = m.block_kinds();
    assert_eq!(kinds[0].attention_window, Some(4096));
    assert_eq!(kinds[1].attention_window, None);
    assert_eq!(&m.kind_counts(0, 42)[..2], &[21, 21]);
    assert_eq!(&m.kind_counts(0, 1)[..2], &[1, 0]);
    // Gemma 3: five local layers, then a global one (`sliding_window_pattern` 6).
    let mut gemma3 = gemma2.clone();
    gemma3["model_type"] = json!("gemma3_text");
    gemma3["num_hidden_layers"] = json!(12);
    let m3 = parse(&gemma3.to_string(), "gemma3.json");
    assert_eq!(&m3.kind_counts(0, 12)[..2], &[10, 2]);
    assert_eq!(&m3.kind_counts(5, 1)[..2], &[0, 1]);
    // An explicit `layer_types` wins, and must list every layer with a known type.
    gemma3["layer_types"] = json!(vec!["full_attention"; 12]);
    assert!(parse(&gemma3.to_string(), "gemma3.json")
        .block_runs
        .is_empty());
    gemma3["layer_types"] = json!(["sliding_attention", "full_attention"]);
    error(&gemma3.to_string(), "layer_types");
    gemma3["layer_types"] = json!(vec!["local"; 12]);
    error(&gemma3.to_string(), "layer_types");
    let mut no_window = gemma2.clone();
    no_window["sliding_window"] = json!(null);
    error(&no_window.to_string(), "sliding_window");
    let mut act = gemma2.clone();
    act["hidden_activation"] = json!("relu");
    error(&act.to_string(), "hidden_activation");
}

#[test]
fn gpt_oss() {
    // openai/gpt-oss-20b: 20.91 B parameters (model card); 24 layers alternating a
    // 128-token window and full attention; 32 experts, 4 per token, biased linears.
    let oss = json!({
        "model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "intermediate_size": 2880, "num_local_experts": 32, "num_experts_per_tok": 4,
        "vocab_size": 201088, "sliding_window": 128, "rope_theta": 150000,
        "tie_word_embeddings": false,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention", "sliding_attention", "full_attention", "sliding_attention",
            "full_attention"]
    });
    let m = parse(&oss.to_string(), "oss.json");
    assert!(m.qkv_bias && m.linear_bias);
    let p = m.parameter_count() as f64 / 1e9;
    assert!((p / 20.91 - 1.0).abs() < 0.01, "{p}");
    assert_eq!(&m.kind_counts(0, 24)[..2], &[12, 12]);
    // gpt-oss-120b: 116.83 B parameters; 36 layers, 128 experts (default alternation).
    let mut big = oss.clone();
    big["num_hidden_layers"] = json!(36);
    big["num_local_experts"] = json!(128);
    big.as_object_mut().unwrap().remove("layer_types");
    let m = parse(&big.to_string(), "oss120.json");
    let p = m.parameter_count() as f64 / 1e9;
    assert!((p / 116.83 - 1.0).abs() < 0.01, "{p}");
    assert_eq!(&m.kind_counts(0, 36)[..2], &[18, 18]);
}

#[test]
fn bert_large_uncased() {
    let m = parse(BERT_LARGE, "bert.json");
    assert_eq!(m.family, Family::Bert);
    assert!(!m.causal);
    assert_eq!((m.type_vocab, m.max_positions), (2, 512));
    assert_eq!(m.parameter_count(), 335_141_888);
}

#[test]
fn pythia_160m() {
    let m = parse(PYTHIA_160M, "pythia.json");
    assert_eq!(m.family, Family::Gpt);
    assert_eq!(m.positions, Positions::Rotary);
    assert_eq!(m.max_positions, 0);
    assert!(!m.tied_embeddings && m.qkv_bias && m.linear_bias);
    assert_eq!(m.parameter_count(), 162_322_944);
}

#[test]
fn explicit_head_dim_and_defaults() {
    // Mistral-NeMo style: q width (32 × 128) differs from hidden 5120.
    let text = with(
        &with(MISTRAL_7B, "hidden_size", json!(5120)),
        "head_dim",
        json!(128),
    );
    let m = parse(&text, "nemo.json");
    assert_eq!((m.hidden, m.head_dim, m.q_width()), (5120, 128, 4096));
    // Without num_key_value_heads there is no grouped-query attention.
    let m = parse(
        &with(MISTRAL_7B, "num_key_value_heads", json!(null)),
        "x.json",
    );
    assert_eq!(m.kv_heads, 32);
    let m = parse(
        &with(LLAMA2_7B, "tie_word_embeddings", json!(null)),
        "x.json",
    );
    assert!(!m.tied_embeddings);
    let m = parse(&with(LLAMA2_7B, "attention_bias", json!(true)), "x.json");
    assert!(m.qkv_bias && !m.linear_bias);
}

#[test]
fn missing_key_is_named() {
    let err = error(
        &with(LLAMA2_7B, "intermediate_size", json!(null)),
        "intermediate_size",
    );
    assert_eq!(err.problem, "missing");
    assert_eq!(err.allowed, "a positive integer ≤ 1000000000");
    error(&with(GPT2, "n_embd", json!(null)), "n_embd");
    error(
        &with(BERT_LARGE, "type_vocab_size", json!(null)),
        "type_vocab_size",
    );
    error(
        &with(MIXTRAL_8X7B, "num_local_experts", json!(null)),
        "num_local_experts",
    );
    let both = with(
        &with(GPT2, "n_positions", json!(null)),
        "n_ctx",
        json!(null),
    );
    error(&both, "n_positions");
}

#[test]
fn misspelled_key_is_reported_missing_with_a_hint() {
    let text = renamed(LLAMA2_7B, "num_hidden_layers", "num_hidden_layer");
    let err = error(&text, "num_hidden_layers");
    assert_eq!(err.problem, "missing (found `num_hidden_layer` — a typo?)");
    let err = error(&renamed(GPT2, "n_head", "n_haed"), "n_head");
    assert!(err.problem.contains("`n_haed`"), "{err}");
    // A key another family reads (MPT's `n_heads`) is never offered as the typo.
    let err = error(&renamed(GPT2, "n_head", "n_heads"), "n_head");
    assert_eq!(err.problem, "missing");
    // Too far from any required key: no hint.
    let err = error(
        &renamed(BERT_LARGE, "vocab_size", "vocabulary"),
        "vocab_size",
    );
    assert_eq!(err.problem, "missing");
}

#[test]
fn wrong_types_name_the_key() {
    for (value, needle) in [
        (json!("4096"), "string"),
        (json!(4096.5), "integer"),
        (json!(4096.0), "integer"),
        (json!(-4096), "-4096"),
        (json!(0), "0"),
        (json!(true), "true"),
        (json!([4096]), "array"),
        (json!({"v": 1}), "object"),
        (json!(1e30), "integer"),
        (json!(4_000_000_000u64), "too large"),
    ] {
        let err = error(
            &with(LLAMA2_7B, "hidden_size", value.clone()),
            "hidden_size",
        );
        assert!(err.problem.contains(needle), "{value}: {err}");
    }
    error(&with(GPT2, "n_layer", json!(-1)), "n_layer");
    error(&with(GPT2, "n_inner", json!("big")), "n_inner");
    error(
        &with(QWEN2_7B, "tie_word_embeddings", json!("no")),
        "tie_word_embeddings",
    );
    error(
        &with(PYTHIA_160M, "attention_bias", json!(1)),
        "attention_bias",
    );
    error(
        &with(MIXTRAL_8X7B, "num_experts_per_tok", json!(9)),
        "num_experts_per_tok",
    );
    error(
        &with(LLAMA2_7B, "num_hidden_layers", json!(1_000_000)),
        "num_hidden_layers",
    );
    error(&with(LLAMA2_7B, "model_type", json!(7)), "model_type");
}

#[test]
fn string_values_stay_on_one_line() {
    let err = error(&with(GPT2, "n_embd", json!("7\n68")), "n_embd");
    assert!(err.problem.contains("7\\n68"), "{err}");
    let err = error(&renamed(GPT2, "n_layer", "n_layer\n"), "n_layer");
    assert!(err.problem.contains("n_layer\\n"), "{err}");
    error(&with(GPT2, "model_type", json!("gpt2\nx")), "model_type");
}

#[test]
fn heads_must_divide() {
    let err = error(
        &with(LLAMA2_7B, "num_attention_heads", json!(30)),
        "num_attention_heads",
    );
    assert!(err.problem.contains("4096"), "{err}");
    error(&with(GPT2, "n_head", json!(7)), "n_head");
    error(
        &with(BERT_LARGE, "num_attention_heads", json!(1000)),
        "num_attention_heads",
    );
    let err = error(
        &with(MISTRAL_7B, "num_key_value_heads", json!(6)),
        "num_key_value_heads",
    );
    assert!(err.allowed.contains("32"), "{err}");
    error(
        &with(MISTRAL_7B, "num_key_value_heads", json!(64)),
        "num_key_value_heads",
    );
}

#[test]
fn unsupported_model_type_lists_the_supported_ones() {
    let err = error(&with(GPT2, "model_type", json!("t5")), "model_type");
    assert!(err.problem.contains("t5"), "{err}");
    for t in [
        "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "phi3", "olmo2", "falcon",
        "bert",
    ] {
        assert!(err.allowed.contains(t), "{err}");
    }
    let err = error(&with(GPT2, "model_type", json!(null)), "model_type");
    assert!(err.problem.starts_with("missing"), "{err}");
}

#[test]
fn invalid_json_reports_line_and_column() {
    let err = error(
        "{\n  \"model_type\": \"gpt2\",\n  \"n_embd\": 768,,\n}",
        "(json)",
    );
    assert!(err.problem.contains("line 3"), "{err}");
    let err = error("", "(json)");
    assert!(err.problem.contains("EOF"), "{err}");
    error("   ", "(json)");
    error("[1, 2]", "(json)");
    error("null", "(json)");
    error("{\"model_type\": \"gpt2\"} trailing", "(json)");
    error(&"[".repeat(10_000), "(json)");
}

#[test]
fn oversized_models_are_rejected_not_overflowed() {
    let huge = |t: &str, keys: &[&str]| {
        let mut text = t.to_string();
        for k in keys {
            text = with(&text, k, json!(1_000_000_000));
        }
        text
    };
    let text = huge(
        LLAMA2_7B,
        &["hidden_size", "intermediate_size", "vocab_size"],
    );
    error(&text, "hidden_size");
    let text = huge(MIXTRAL_8X7B, &["num_local_experts", "num_experts_per_tok"]);
    error(&text, "num_local_experts");
    let text = huge(GPT2, &["n_embd", "n_head"]);
    error(&text, "n_embd");
}

fn any_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..100_000).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,64}") {
        let _ = model_from_hf_config(&text, "fuzz.json");
    }

    #[test]
    fn corrupted_configs_never_panic(
        fixture in 0..FIXTURES.len(),
        edits in prop::collection::vec((0usize..40, any_json()), 1..4),
    ) {
        let mut doc: Value = serde_json::from_str(FIXTURES[fixture]).unwrap();
        let keys: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
        for (i, v) in edits {
            let key = keys[i % keys.len()].clone();
            doc.as_object_mut().unwrap().insert(key, v);
        }
        match model_from_hf_config(&doc.to_string(), "fuzz.json") {
            Ok(m) => {
                let total = m.parameter_count();
                prop_assert!(m.active_parameter_count() <= total);
                prop_assert_eq!(m.layer_list().len() as u64, m.layers + 2);
            }
            Err(e) => prop_assert!(!e.to_string().contains('\n')),
        }
    }
}
