//! The `plait` binary: parses flags, reads files, calls the library crates and prints.
//! No modelling happens here.

mod auto_plan;
mod estimate_cmd;
mod inputs;
mod outputs;
mod partition_cmd;
mod plan_cmd;
mod profile_cmd;
mod schedule_cmd;
mod simulate_cmd;
mod train_cmd;
mod validate_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// plait: plan, estimate and run the parallel training of large transformers.
#[derive(Debug, Parser)]
#[command(name = "plait", version, about, allow_negative_numbers = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Search every parallel configuration of the GPUs and rank the best plans.
    Plan(plan_cmd::PlanArgs),
    /// Time, throughput and per-GPU memory of one parallel configuration.
    Estimate(estimate_cmd::EstimateArgs),
    /// Simulate one configuration event by event: timeline, memory, critical path.
    Simulate(simulate_cmd::SimulateArgs),
    /// A pipeline schedule over identical synthetic stages (teaching and testing).
    Schedule(schedule_cmd::ScheduleArgs),
    /// Optimal split of an ONNX or placement graph into contiguous pipeline stages.
    Partition(partition_cmd::PartitionArgs),
    /// Train a model for real on CPU worker threads under a plan (dp × tp × pp, schedules,
    /// recompute, ZeRO-1), with checkpoints and resume.
    Train(train_cmd::TrainArgs),
    /// Measure this machine's CPU worker (GEMMs, blocks, bandwidth, communicator) and write
    /// a calibration profile for `train --plan auto`.
    Profile(profile_cmd::ProfileArgs),
    /// The cost model against the published runs this repository carries, each under its
    /// engine: error per run and per table.
    Validate(validate_cmd::ValidateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Plan(args) => plan_cmd::run(args),
        Command::Estimate(args) => estimate_cmd::run(args),
        Command::Simulate(args) => simulate_cmd::run(args),
        Command::Schedule(args) => schedule_cmd::run(args),
        Command::Partition(args) => partition_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Profile(args) => profile_cmd::run(args),
        Command::Validate(args) => validate_cmd::run(args),
    };
    match result {
        Ok(text) => {
            use std::io::Write;
            match std::io::stdout().lock().write_all(text.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                // The reader left (`plait plan | head`): nothing more to say.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the output: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
