//! torchtitan's published benchmarks (`benchmarks/` in its repository) as a calibration
//! table: the runs on hardware a cluster preset describes.

use plait_spec::{
    cluster_preset, model_preset, Dtype, Engine, ParallelConfig, Recompute, SpecError, TrainSpec,
};

use super::{csv, rows, Run, Table};

/// torchtitan's own benchmarks on hardware a preset describes: FSDP2 with its op-level
/// selective recompute, compiled or eager, bf16 or float8 (`torchtitan_benchmarks.csv`).
pub fn torchtitan_benchmarks(text: &str) -> Result<Table, SpecError> {
    const SOURCE: &str = "torchtitan_benchmarks.csv";
    let (header, data) = csv(text, SOURCE)?;
    let mut runs = vec![];
    for row in rows(SOURCE, &header, &data) {
        let (gpus, local, seq) = (row.int("gpus")?, row.int("local_batch")?, row.int("seq")?);
        let dtype = match row.str("dtype")? {
            "fp8" => Dtype::Fp8,
            "bf16" => Dtype::Bf16,
            other => {
                return Err(SpecError::new(
                    SOURCE,
                    "dtype",
                    format!("unknown dtype `{other}`"),
                    "bf16|fp8",
                ))
            }
        };
        let recompute = match row.str("recompute")? {
            "selective" => Recompute::Selective,
            "full" => Recompute::Full,
            _ => Recompute::None,
        };
        let compile = row.int("compile")? == 1;
        runs.push(Run {
            label: format!(
                "{} {} on {gpus} {}{}{}{}",
                row.str("source")?,
                row.str("model")?,
                row.str("cluster")?,
                if compile { " compiled" } else { "" },
                if dtype == Dtype::Fp8 { " float8" } else { "" },
                match recompute {
                    Recompute::Selective => " op-SAC",
                    Recompute::Full => " full AC",
                    Recompute::None => "",
                }
            ),
            model: model_preset(row.str("model")?)?,
            cluster: cluster_preset(row.str("cluster")?)?,
            train: TrainSpec {
                engine: Engine::Torchtitan,
                dtype,
                compile,
                ..TrainSpec::new(local * gpus, seq)
            },
            // FSDP over every GPU: ZeRO-3 at dp = GPUs.
            config: ParallelConfig {
                dp: gpus,
                mbs: local,
                zero: 3,
                recompute,
                ..ParallelConfig::default()
            },
            measured_step_s: row.num("step_s")?,
        });
    }
    Ok(Table {
        name: "torchtitan benchmarks (FSDP2, H200)",
        engine: Engine::Torchtitan,
        runs,
        skipped: vec![],
    })
}
