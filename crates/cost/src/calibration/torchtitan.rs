//! torchtitan's published benchmarks (`benchmarks/` in its repository) as a calibration
//! table: the runs on hardware a cluster preset describes.

use plait_spec::{
    cluster_preset, model_preset, parse_config_items, Dtype, Engine, Float8Recipe, SpecError,
    TrainSpec, GIB,
};

use super::{csv, rows, Run, Table};

/// torchtitan's own benchmarks (`torchtitan_benchmarks.csv`): FSDP2 alone or with DTensor
/// TP (async or not), pipelining and context parallelism, compiled or eager, bf16 or
/// torchao's float8 (tensor-wise or row-wise); each row's configuration is its plan string.
pub fn torchtitan_benchmarks(text: &str) -> Result<Table, SpecError> {
    const SOURCE: &str = "torchtitan_benchmarks.csv";
    let (header, data) = csv(text, SOURCE)?;
    let mut runs = vec![];
    for row in rows(SOURCE, &header, &data) {
        let (gpus, gbs, seq) = (row.int("gpus")?, row.int("gbs")?, row.int("seq")?);
        // `none`, or the components compiled (`model`, `model+loss`).
        let (compile, compile_loss) = match row.str("compile")? {
            "none" => (false, true),
            list => (
                true,
                plait_spec::parse_compile_components(list).map_err(|problem| {
                    SpecError::new(
                        SOURCE,
                        "compile",
                        format!("row {}: {problem}", row.line),
                        "none|model|model+loss",
                    )
                })?,
            ),
        };
        let async_tp = row.flag("async_tp")?;
        let float8_all_gather = row.flag("float8_all_gather")?;
        let (config, dp) = parse_config_items(row.str("config")?).map_err(|problem| {
            SpecError::new(
                SOURCE,
                "config",
                format!("row {}: {problem}", row.line),
                "a plan string such as `dp32 tp8 mbs16 zero3 sp recompute=full`",
            )
        })?;
        let label = format!(
            "{} {} {config} on {gpus}{}{}{}{}",
            row.str("source")?,
            row.str("model")?,
            match (compile, compile_loss) {
                (false, _) => "",
                (true, false) => " compiled (blocks)",
                (true, true) => " compiled",
            },
            if async_tp { " async-TP" } else { "" },
            match row.str("dtype")? {
                "bf16" => "",
                "fp8" => " float8",
                _ => " float8 rowwise",
            },
            if float8_all_gather {
                " (fp8 all-gather)"
            } else {
                ""
            },
        );
        let (dtype, float8_recipe) = match row.str("dtype")? {
            "fp8" => (Dtype::Fp8, Float8Recipe::Tensorwise),
            "bf16" => (Dtype::Bf16, Float8Recipe::Tensorwise),
            // torchao's rowwise recipe (`--float8.recipe_name rowwise`).
            "fp8-rowwise" => (Dtype::Fp8, Float8Recipe::Rowwise),
            other => {
                return Err(SpecError::new(
                    SOURCE,
                    "dtype",
                    format!("unknown dtype `{other}`"),
                    "bf16|fp8|fp8-rowwise",
                ))
            }
        };
        let dp = dp.ok_or_else(|| {
            SpecError::new(
                SOURCE,
                "config",
                format!("row {} gives no dp", row.line),
                "the plan string with its dp",
            )
        })?;
        runs.push(Run {
            stage_map: None,
            label,
            software: row.str("source")?.to_string(),
            model: model_preset(row.str("model")?)?,
            cluster: cluster_preset(row.str("cluster")?)?,
            train: TrainSpec {
                engine: Engine::Torchtitan,
                dtype,
                float8_recipe: Some(float8_recipe),
                float8_all_gather,
                compile,
                compile_loss,
                async_tp,
                ..TrainSpec::new(gbs, seq)
            },
            config: plait_spec::ParallelConfig { dp, ..config }.normalised(),
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: match row.str("memory_gib")? {
                "" => None,
                _ => Some(row.num("memory_gib")? * GIB),
            },
        });
    }
    Ok(Table {
        name: "torchtitan benchmarks (FSDP2, Grand Teton H100 and H200)",
        engine: Engine::Torchtitan,
        runs,
        skipped: vec![],
    })
}
