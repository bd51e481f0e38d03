//! Built-in model presets. Each preset's hyper-parameters come from the paper or the
//! released `config.json` named beside it; the test module checks the resulting parameter
//! counts against the published totals.

use crate::error::{Result, SpecError};
use crate::model::arch::{bert, llama4, llama4_layout, nemotron_h};
use crate::model::{MambaSpec, ModelSpec, MoeSpec};

/// The GPT and LLaMA templates, which tables of published runs build their models on
/// (`plait_cost::calibration`).
pub use crate::model::arch::{gpt, llama};

/// Presets that are a released model's `config.json` (the keys that shape it, in
/// `crates/spec/presets/`, whose README names each file's repository), read by the parser
/// users' files go through.
const HF_PRESETS: [(&str, &str); 15] = [
    (
        "mixtral-8x22b",
        include_str!("../presets/mixtral-8x22b.json"),
    ),
    ("deepseek-v3", include_str!("../presets/deepseek-v3.json")),
    ("kimi-k2", include_str!("../presets/kimi-k2.json")),
    ("qwen3-8b", include_str!("../presets/qwen3-8b.json")),
    ("qwen3-32b", include_str!("../presets/qwen3-32b.json")),
    (
        "qwen3-30b-a3b",
        include_str!("../presets/qwen3-30b-a3b.json"),
    ),
    (
        "qwen3-235b-a22b",
        include_str!("../presets/qwen3-235b-a22b.json"),
    ),
    ("gpt-oss-20b", include_str!("../presets/gpt-oss-20b.json")),
    ("gpt-oss-120b", include_str!("../presets/gpt-oss-120b.json")),
    ("mpt-7b", include_str!("../presets/mpt-7b.json")),
    ("mpt-30b", include_str!("../presets/mpt-30b.json")),
    ("dbrx", include_str!("../presets/dbrx.json")),
    ("bloom-176b", include_str!("../presets/bloom-176b.json")),
    (
        "nemotron-3-nano-30b-a3b",
        include_str!("../presets/nemotron-3-nano-30b-a3b.json"),
    ),
    (
        "nemotron-3-super-120b-a12b",
        include_str!("../presets/nemotron-3-super-120b-a12b.json"),
    ),
];

/// Llama 3.1's names for the Llama 3 presets, which are the 3.1 releases (RoPE scaling to
/// 128K included, `llama3`).
const ALIASES: [(&str, &str); 3] = [
    ("llama3.1-8b", "llama3-8b"),
    ("llama3.1-70b", "llama3-70b"),
    ("llama3.1-405b", "llama3-405b"),
];

/// The layer pattern of Nemotron-H-8B (`hybrid_override_pattern` of
/// nvidia/Nemotron-H-8B-Base-8K's config.json and of Megatron-Bridge's Nemotron-H 8B
/// provider): 24 Mamba-2, 24 MLP and 4 attention layers.
pub const NEMOTRON_H_8B_PATTERN: &str = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";

/// Llama 3.1 (the herd paper's models, Dubey et al. 2024): RoPE base θ = 500,000 (§3.2)
/// and the RoPE rescaling of the released config.json files (`rope_scaling`: llama3,
/// factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192), which
/// torchtitan's llama3 also applies (v0.2.2 `models/llama3/model/args.py`,
/// `RoPEScalingArgs`).
fn llama3(m: ModelSpec) -> ModelSpec {
    ModelSpec {
        rope_theta: 500_000.0,
        rope_scaling: Some(crate::model::RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_positions: 8192,
        }),
        ..m
    }
}

/// Llama 4 Scout (`experts` 16, `moe_step` 1) or Maverick (128, 2) as released
/// (meta-llama/Llama-4-{Scout-17B-16E,Maverick-17B-128E} config.json, `text_config`):
/// hidden 5120, 48 layers, 40 query and 8 kv heads of 128, experts and shared expert 8192
/// wide, dense layers 16384, top-1, vocabulary 202048, chunks of 8192 tokens on the RoPE
/// layers, every fourth layer NoPE (full attention).
fn llama4_release(name: &str, experts: u64, moe_step: u64) -> ModelSpec {
    const LAYERS: u64 = 48;
    let moe: Vec<bool> = (0..LAYERS).map(|i| (i + 1) % moe_step == 0).collect();
    let rope: Vec<bool> = (0..LAYERS).map(|i| (i + 1) % 4 != 0).collect();
    let dense = (moe_step > 1).then_some(16384);
    let (attention_chunk, block_runs) = llama4_layout(&moe, &rope, dense, Some(8192));
    ModelSpec {
        attention_chunk,
        block_runs,
        ..llama4(
            name,
            (5120, LAYERS, 40, 8, 128),
            8192,
            202048,
            MoeSpec {
                experts,
                top_k: 1,
                shared_experts: 1,
                latent: None,
            },
        )
    }
}

/// The SC'21 Table 1 GPT sizes (Narayanan et al. 2021): (name, heads, hidden, layers).
/// Vocabulary 51,200 and sequence 2,048 as in the paper.
pub const SC21_GPT: [(&str, u64, u64, u64); 10] = [
    ("gpt-1.7b", 24, 2304, 24),
    ("gpt-3.6b", 32, 3072, 30),
    ("gpt-7.5b", 32, 4096, 36),
    ("gpt-18.4b", 48, 6144, 40),
    ("gpt-39.1b", 64, 8192, 48),
    ("gpt-76.1b", 80, 10240, 60),
    ("gpt-145.6b", 96, 12288, 80),
    ("gpt-310.1b", 128, 16384, 96),
    ("gpt-529.6b", 128, 20480, 105),
    ("gpt-1t", 160, 25600, 128),
];

/// Names of every built-in model preset.
pub fn model_preset_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = SC21_GPT.iter().map(|r| r.0).collect();
    names.extend([
        "gpt3-175b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "mixtral-8x7b",
        "llama4-scout",
        "llama4-maverick",
        "bert-large",
        "nemotron-h-8b",
        "nemotron-3.5-lightning-30b-a3b",
        "tiny-gpt",
        "tiny-llama",
    ]);
    names.extend(HF_PRESETS.iter().map(|p| p.0));
    names.extend(ALIASES.iter().map(|a| a.0));
    names
}

/// A built-in model by name (case-insensitive).
pub fn model_preset(name: &str) -> Result<ModelSpec> {
    let key = name.to_ascii_lowercase();
    if let Some(&(alias, of)) = ALIASES.iter().find(|a| a.0 == key) {
        return Ok(ModelSpec {
            name: alias.into(),
            ..model_preset(of)?
        });
    }
    if let Some(&(preset, text)) = HF_PRESETS.iter().find(|p| p.0 == key) {
        let m = crate::hf::model_from_hf_config(text, &format!("preset {preset}"))?;
        return Ok(ModelSpec {
            name: preset.into(),
            ..m
        });
    }
    if let Some(&(n, heads, hidden, layers)) = SC21_GPT.iter().find(|r| r.0 == key) {
        return Ok(gpt(n, hidden, layers, heads, 51200, 2048));
    }
    let spec = match key.as_str() {
        // Brown et al. 2020, Table 2.1; GPT-2 BPE vocabulary of 50,257.
        "gpt3-175b" => gpt("gpt3-175b", 12288, 96, 96, 50257, 2048),
        // Touvron et al. 2023 (Llama 2), Table 1 and the released config.json files.
        "llama2-7b" => llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, None),
        "llama2-13b" => llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, None),
        "llama2-70b" => llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, None),
        // Llama 3 herd paper (Dubey et al. 2024), Table 3, and the released config.json files.
        // RoPE θ = 500,000 (paper §3.2; `rope_theta` in the config.json files), RMSNorm ε 1e-5.
        "llama3-8b" => llama3(llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, None)),
        "llama3-70b" => llama3(llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, None)),
        "llama3-405b" => llama3(llama(
            "llama3-405b",
            16384,
            126,
            128,
            8,
            53248,
            128256,
            None,
        )),
        // Jiang et al. 2024 (Mixtral of Experts), Table 1: 8 experts, top-2; RoPE θ = 10^6
        // (`rope_theta` of the released config.json).
        "mixtral-8x7b" => ModelSpec {
            rope_theta: 1e6,
            ..llama(
                "mixtral-8x7b",
                4096,
                32,
                32,
                8,
                14336,
                32000,
                Some(MoeSpec {
                    experts: 8,
                    top_k: 2,
                    shared_experts: 0,
                    latent: None,
                }),
            )
        },
        // "Nemotron 3.5 Lightning uses the same architecture as Nemotron 3 Nano, but its
        // checkpoint was trained natively with multi-token prediction" (Megatron-Bridge
        // 067f987 `examples/models/nemotron/nemotron_3/lightning/README.md:3-4`; its
        // config.json is not public): Nano's blocks, and the MTP module its recipes build, one
        // "*E" module run twice and kept in bf16 (v0.6.0 `perf_recipes/nemotronh/gb200/
        // nemotronh.py:494-498`: `mtp_num_layers = 2`, `mtp_hybrid_override_pattern = "*E"`,
        // `mtp_use_repeated_layer`, `keep_mtp_spec_in_bf16`).
        "nemotron-3.5-lightning-30b-a3b" => ModelSpec {
            name: key.clone(),
            mtp_layers: 2,
            mtp_pattern: Some("*E".into()),
            mtp_shared: true,
            mtp_bf16: true,
            ..model_preset("nemotron-3-nano-30b-a3b")?
        },
        "llama4-scout" => llama4_release("llama4-scout", 16, 1),
        "llama4-maverick" => llama4_release("llama4-maverick", 128, 2),
        // nvidia/Nemotron-H-8B-Base-8K config.json (and Megatron-Bridge's
        // `NemotronHModelProvider8B`): hidden 4096, 52 layers of the pattern above, 32 query
        // and 8 kv heads of 128, MLP 21504 squared ReLU, Mamba-2 with 128 heads of 64
        // (d_inner 8192 = 2 × 4096), state 128, 8 groups, conv kernel 4, chunk 128,
        // vocabulary 131072, untied.
        "nemotron-h-8b" => nemotron_h(
            "nemotron-h-8b",
            4096,
            NEMOTRON_H_8B_PATTERN,
            (32, 8, 128),
            21504,
            131072,
            MambaSpec {
                heads: 128,
                head_dim: 64,
                state: 128,
                groups: 8,
                conv_kernel: 4,
                chunk: crate::model::DEFAULT_MAMBA_CHUNK,
                conv_bias: true,
                proj_bias: false,
            },
            None,
        )
        .expect("the Nemotron-H-8B pattern names only M, * and -"),
        // Devlin et al. 2019: BERT-large, 24 layers, h 1024, 16 heads, WordPiece 30,522.
        "bert-large" => bert("bert-large", 1024, 24, 16, 30522, 512),
        // Small models for the CPU runtime (`plait train`): GPT-2's and LLaMA's block
        // structure at a size that trains in minutes on two cores; vocabulary 256 for the
        // byte-level tokenizer. tiny-llama keeps grouped-query attention (4 heads, 2 kv
        // heads) and LLaMA's MLP width rule 2/3·4h = 341 rounded up to a multiple of 32
        // (LLaMA rounds to 256, too coarse at this size).
        "tiny-gpt" => gpt("tiny-gpt", 128, 4, 4, 256, 128),
        "tiny-llama" => llama("tiny-llama", 128, 4, 4, 2, 352, 256, None),
        _ => {
            return Err(SpecError::for_field(
                "model",
                format!("unknown model preset `{name}`"),
                format!(
                    "{}, or a path to a Hugging Face config.json",
                    model_preset_names().join(", ")
                ),
            ))
        }
    };
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Published totals, with their sources. SC'21 sizes are printed to one decimal in
    /// billions, so those are checked by rounding rather than by 1 %.
    fn check(name: &str, published: f64) {
        let got = model_preset(name).unwrap().parameter_count() as f64;
        let rel = (got - published).abs() / published;
        assert!(
            rel <= 0.01,
            "{name}: {got} parameters vs published {published} ({:.2} % off)",
            rel * 100.0
        );
    }

    #[test]
    fn parameter_counts_match_published_totals() {
        check("gpt3-175b", 175e9); // Brown et al. 2020
        check("llama2-7b", 6_738_415_616.0); // HF model card / safetensors index
        check("llama2-13b", 13_015_864_320.0);
        check("llama2-70b", 68_976_648_192.0);
        check("llama3-8b", 8_030_261_248.0);
        check("llama3-70b", 70_553_706_496.0);
        check("llama3-405b", 405_853_388_800.0);
        check("mixtral-8x7b", 46_702_792_704.0); // "47B total, 13B active"
                                                 // Meta's Llama 4 model card: Maverick 400 B total (17 B active).
        check("llama4-maverick", 400e9);
        // BertModel (with pooler) as released; the paper's "340M" is a rounded figure.
        check("bert-large", 335_141_888.0);
        // NVIDIA publishes Nemotron-H-8B as "8B" (model card), a rounded figure; by hand
        // from its config.json: 24 Mamba-2 layers of 4096·18560 (in_proj: 2·8192 + 2·8·128
        // + 128) + 10240·4 + 10240 (conv1d over 8192 + 2·8·128 channels, bias) + 3·128
        // (A_log, D, dt_bias) + 8192 (gated norm) + 8192·4096 (out_proj) + 4096 (pre-norm)
        // = 109,640,064 each; 24 MLP layers of 2·4096·21504 + 4096 = 176,164,864; 4
        // attention layers of 4096·(4096 + 2·1024) + 4096·4096 + 4096 = 41,947,136;
        // embedding and untied head 2·131072·4096 and the final norm 4096: in all
        // 8,100,852,736. The published figure is the rounded "8B", so it is checked by
        // rounding (as the SC'21 sizes are), the exact count against the sum above.
        let nemotron = model_preset("nemotron-h-8b").unwrap().parameter_count();
        assert_eq!(nemotron, 8_100_852_736);
        assert_eq!((nemotron as f64 / 1e9).round(), 8.0);
    }

    #[test]
    fn hybrid_fields_stay_out_of_the_serialised_form_of_other_models() {
        for name in model_preset_names() {
            let m = model_preset(name).unwrap();
            let text = serde_json::to_string(&m).unwrap();
            let back: ModelSpec = serde_json::from_str(&text).unwrap();
            assert_eq!(back, m, "{name}");
            if m.is_hybrid() {
                assert!(text.contains("\"kind\":\"mamba\""), "{text}");
            } else {
                assert!(
                    !text.contains("\"block\"") && !text.contains("mamba"),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn sc21_sizes_round_to_the_published_figure() {
        let published = [1.7, 3.6, 7.5, 18.4, 39.1, 76.1, 145.6, 310.1, 529.6, 1008.0];
        for ((name, ..), want) in SC21_GPT.iter().zip(published) {
            let got_b = model_preset(name).unwrap().parameter_count() as f64 / 1e9;
            assert!(
                (got_b - want).abs() <= 0.05 + 0.01 * want,
                "{name}: {got_b:.3} B vs published {want} B"
            );
            assert_eq!(format!("{got_b:.1}"), format!("{want:.1}"), "{name}");
        }
    }

    #[test]
    fn llama4_presets_are_their_config_files() {
        // The language model of meta-llama/Llama-4-Scout-17B-16E (the card's 109 B adds its
        // ≈ 0.8 B vision encoder): the count `hf_llama4` derives from the config.json.
        let scout = model_preset("llama4-scout").unwrap();
        assert_eq!(scout.parameter_count(), 107_769_861_120);
        assert_eq!(scout.active_parameter_count(), 17_172_894_720);
        assert_eq!(scout.block_kinds().len(), 2);
        let maverick = model_preset("llama4-maverick").unwrap();
        assert_eq!(maverick.block_kinds().len(), 3);
        let active = maverick.active_parameter_count() as f64;
        assert!((active / 17e9 - 1.0).abs() < 0.03, "{active}");
    }

    #[test]
    fn kind_runs_count_every_block_range_as_its_blocks_add_up() {
        // Maverick's kinds: 0 dense chunked (even layers), 1 MoE chunked, 2 MoE full
        // (every fourth layer).
        let m = model_preset("llama4-maverick").unwrap();
        let runs = m.kind_runs();
        let kind_of = |b: u64| match (b % 2, b % 4) {
            (0, _) => 0,
            (_, 3) => 2,
            _ => 1,
        };
        for first in 0..=m.layers + 1 {
            for count in 0..=m.layers + 1 - first {
                let mut want = [0u64; crate::model::MAX_BLOCK_KINDS];
                for b in first..(first + count).min(m.layers) {
                    want[kind_of(b)] += 1;
                }
                assert_eq!(runs.counts(first, count), want, "{first}+{count}");
            }
        }
        assert!(!runs.is_uniform());
        assert!(model_preset("llama3-8b").unwrap().kind_runs().is_uniform());
    }

    #[test]
    fn hf_presets_match_their_published_totals() {
        // (preset, total, active per token) from each model card (README of the repository
        // `crates/spec/presets/README.md` names); active `None` for dense models.
        let published: [(&str, f64, Option<f64>); 18] = [
            // "141B parameters, 39B active" (Mistral AI, Mixtral 8x22B announcement).
            ("mixtral-8x22b", 141e9, Some(39e9)),
            // 671 B in the main model; the card's 685 B add the 14 B MTP module. 37 B active.
            ("deepseek-v3", 671e9, Some(37e9)),
            // "Number of Parameters: 8.2B", "32.8B", "30.5B / 3.3B activated", "235B / 22B".
            ("qwen3-8b", 8.2e9, None),
            ("qwen3-32b", 32.8e9, None),
            ("qwen3-30b-a3b", 30.5e9, Some(3.3e9)),
            ("qwen3-235b-a22b", 235e9, Some(22e9)),
            // "21B parameters with 3.6B active", "117B parameters with 5.1B active"; OpenAI
            // counts the active parameters without the input embedding (the gpt-oss model
            // card's table: 3.61 B and 5.13 B, the 0.58 B unembedding included), so its
            // table is added back here.
            ("gpt-oss-20b", 20.9e9, Some(3.61e9 + 201088.0 * 2880.0)),
            ("gpt-oss-120b", 116.8e9, Some(5.13e9 + 201088.0 * 2880.0)),
            // MosaicML: MPT-7B 6.7 B, MPT-30B 29.96 B.
            ("mpt-7b", 6.7e9, None),
            ("mpt-30b", 29.96e9, None),
            // "132B total parameters of which 36B parameters are active".
            ("dbrx", 132e9, Some(36e9)),
            // BigScience's model card: 176,247,271,424 parameters.
            ("bloom-176b", 176.247e9, None),
            // NVIDIA's model card: 31.6 B total, about 3.6 B active with the embeddings.
            ("nemotron-3-nano-30b-a3b", 31.6e9, Some(3.6e9)),
            // Nano's architecture ("30B-A3B" in its name), its MTP module not counted as
            // for Super.
            ("nemotron-3.5-lightning-30b-a3b", 31.6e9, Some(3.6e9)),
            // The released checkpoint's safetensors headers: 123,611,012,096 BF16 weights,
            // 2,942,324,736 of them the MTP module (not modelled for this family), and
            // 107,898,470,400 the experts a token does not use: 120.67 B and 12.77 B
            // active ("120B total, 12B active", NVIDIA's model card).
            ("nemotron-3-super-120b-a12b", 120.669e9, Some(12.770e9)),
            // The Llama 3.1 names of the Llama 3 presets.
            ("llama3.1-8b", 8.03e9, None),
            ("llama3.1-70b", 70.6e9, None),
            ("llama3.1-405b", 405.9e9, None),
        ];
        // Kimi-K2's card rounds to "1T total parameters" and "32B activated": held to the
        // rounding, as the existing `kimi_k2_is_deepseek_v3_shaped` parse test is.
        let kimi = model_preset("kimi-k2").unwrap();
        assert!((kimi.parameter_count() as f64 / 1e12 - 1.0).abs() < 0.05);
        assert!((kimi.active_parameter_count() as f64 / 32e9 - 1.0).abs() < 0.05);
        for (name, total, active) in published {
            check(name, total);
            let m = model_preset(name).unwrap();
            assert_eq!(m.name, name);
            if let Some(want) = active {
                let got = m.active_parameter_count() as f64;
                assert!(
                    (got / want - 1.0).abs() < 0.05,
                    "{name}: {got} active vs published {want}"
                );
            }
        }
    }

    #[test]
    fn u128_count_agrees_with_model_spec() {
        // The parsers' size guard counts in u128 what `ModelSpec` counts in u64.
        for name in model_preset_names() {
            let m = model_preset(name).unwrap();
            assert_eq!(
                crate::hf::parameter_count_u128(&m),
                u128::from(m.parameter_count()),
                "{name}"
            );
        }
    }

    #[test]
    fn mixtral_active_parameters() {
        let m = model_preset("mixtral-8x7b").unwrap();
        let active = m.active_parameter_count() as f64;
        // Jiang et al. 2024: 12.9 B active parameters per token.
        assert!((active - 12.9e9).abs() / 12.9e9 < 0.01, "{active}");
    }

    #[test]
    fn every_listed_preset_resolves() {
        for name in model_preset_names() {
            let m = model_preset(name).unwrap();
            assert_eq!(m.name, name);
            assert_eq!(m.hidden % m.heads, 0, "{name}");
        }
    }

    #[test]
    fn unknown_preset_is_a_one_line_error_listing_presets() {
        let err = model_preset("gpt5").unwrap_err().to_string();
        assert!(!err.contains('\n'));
        assert!(err.contains("gpt5") && err.contains("llama3-70b"), "{err}");
    }
}
