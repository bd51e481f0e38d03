//! NeMo's long-context table (Llama 2 7B in FP8 on DGX-H100, 4K to 1,024K tokens with
//! context parallelism) as a calibration table: the attention kernel's rate at lengths the
//! other tables do not reach.

use plait_spec::{
    cluster_preset, model_preset, CpComm, Dtype, Engine, ParallelConfig, Recompute, Schedule,
    SpecError, TrainSpec,
};

use super::{csv, rows, Run, Table};

/// `nemo_long_context_h100.csv`: Megatron-Core with Transformer Engine in FP8, the
/// distributed optimizer and sequence parallelism with tp > 1 (as the NeMo table's runs),
/// ring attention over cp (Megatron-Core's default `cp_comm_type`, p2p).
pub fn nemo_long_context_h100(text: &str) -> Result<Table, SpecError> {
    const SOURCE: &str = "nemo_long_context_h100.csv";
    let (header, data) = csv(text, SOURCE)?;
    let model = model_preset("llama2-7b")?;
    let cluster = cluster_preset("dgx-h100")?;
    let mut runs = vec![];
    for row in rows(SOURCE, &header, &data) {
        let (gpus, gbs, seq_k) = (row.int("gpus")?, row.int("gbs")?, row.int("seq_k")?);
        let (tp, pp, dp, cp) = (
            row.int("tp")?,
            row.int("pp")?,
            row.int("dp")?,
            row.int("cp")?,
        );
        runs.push(Run {
            stage_map: None,
            label: format!("24.03 LLAMA2-7B {seq_k}K tokens on {gpus} (tp{tp} pp{pp} cp{cp})"),
            software: String::new(),
            model: model.clone(),
            cluster: cluster.clone(),
            train: TrainSpec {
                dtype: Dtype::Fp8,
                engine: Engine::Megatron,
                ..TrainSpec::new(gbs, seq_k * 1024)
            },
            config: ParallelConfig {
                dp,
                tp,
                pp,
                cp,
                cp_comm: CpComm::P2p,
                mbs: 1,
                zero: 1,
                sp: tp > 1,
                recompute: Recompute::None,
                schedule: Schedule::OneFOneB,
                ..ParallelConfig::default()
            },
            measured_step_s: row.num("step_s")?,
            measured_memory_bytes: None,
        });
    }
    Ok(Table {
        name: "NeMo long context (Llama 2 7B, FP8, H100)",
        engine: Engine::Megatron,
        runs,
        skipped: vec![],
    })
}
