//! The `plait` command line as a library: [`run_cli`] parses an argument vector exactly as
//! the binary does and returns the text it would print. The binary (`main.rs`) and the Python
//! bindings (`crates/python`) both call it, so they share one parser and one code path.
//! No modelling happens here.

mod auto_plan;
mod estimate_cmd;
mod inputs;
mod mixed_cmd;
mod outputs;
mod partition_cmd;
mod place_cmd;
mod plan_cmd;
mod profile_cmd;
mod schedule_cmd;
mod simulate_cmd;
mod train_cmd;
mod validate_cmd;

use std::ffi::OsString;
use std::fmt;

use clap::{Parser, Subcommand};
use plait_spec::SpecError;

/// plait: plan, estimate and run the parallel training of large transformers.
#[derive(Debug, Parser)]
#[command(name = "plait", version, about, allow_negative_numbers = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Every subcommand; a new one is a variant here and an arm in [`run_cli`].
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
    /// Place a chain of layers (explicit costs, or a transformer's inference) over
    /// heterogeneous devices and links: optimal pipeline for latency or throughput.
    Place(place_cmd::PlaceArgs),
    /// Plan training on a mixed cluster (groups of different GPUs, e.g. H100 + A100 nodes):
    /// pipelines across the groups with uneven layers per GPU kind, against each group alone.
    Mixed(mixed_cmd::MixedArgs),
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

/// Why [`run_cli`] returned no report.
#[derive(Debug)]
pub enum CliError {
    /// The arguments did not parse, or asked for `--help`/`--version`: clap's own error,
    /// whose `exit()` prints and exits exactly as the binary always has.
    Usage(clap::Error),
    /// The command ran and failed; `Display` is the text after the binary's `error: `.
    Failed(anyhow::Error),
}

impl CliError {
    /// The exit status the binary ends with: clap's (0 for help and version, 2 for a usage
    /// error) or 2 for a failed command.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(e) => e.exit_code(),
            CliError::Failed(_) => 2,
        }
    }

    /// The first structured spec error in the cause chain, if the failure was one: its
    /// `source` (a flag such as `--tp`, a file path, `preset`) and `field`.
    pub fn spec_error(&self) -> Option<&SpecError> {
        match self {
            CliError::Usage(_) => None,
            CliError::Failed(e) => e.chain().find_map(spec_error_in),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // clap's rendering, without its trailing newline.
            CliError::Usage(e) => write!(f, "{}", e.render().to_string().trim_end()),
            CliError::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

impl std::error::Error for CliError {}

/// Runs the command line `argv` (program name first, as `std::env::args()` gives it) and
/// returns what the binary prints on success.
pub fn run_cli<I, T>(argv: I) -> Result<String, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(argv).map_err(CliError::Usage)?;
    match &cli.command {
        Command::Plan(args) => plan_cmd::run(args),
        Command::Estimate(args) => estimate_cmd::run(args),
        Command::Simulate(args) => simulate_cmd::run(args),
        Command::Schedule(args) => schedule_cmd::run(args),
        Command::Partition(args) => partition_cmd::run(args),
        Command::Place(args) => place_cmd::run(args),
        Command::Mixed(args) => mixed_cmd::run(args),
        Command::Train(args) => train_cmd::run(args),
        Command::Profile(args) => profile_cmd::run(args),
        Command::Validate(args) => validate_cmd::run(args),
    }
    .map_err(|e| CliError::Failed(name_request_field(e)))
}

/// The flag that sets the request's field `field` (`--field`, underscores and dots as
/// hyphens: `cp_comm` → `--cp-comm`, `checkpoint.dir` → `--checkpoint-dir`). Libraries name
/// fields only; this is the one place a flag is spelt from one.
pub(crate) fn flag_for(field: &str) -> String {
    format!("--{}", field.replace(['_', '.'], "-"))
}

/// The spec error `e` is, or carries as the planner's or the runtime's error.
fn spec_error_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a SpecError> {
    if let Some(s) = e.downcast_ref::<SpecError>() {
        return Some(s);
    }
    match e.downcast_ref::<plait_planner::PlanError>() {
        Some(plait_planner::PlanError::Spec(s)) => return Some(s),
        Some(_) => return None,
        None => {}
    }
    match e.downcast_ref::<plait_runtime::RuntimeError>() {
        Some(
            plait_runtime::RuntimeError::Spec(s) | plait_runtime::RuntimeError::ScheduleSpec(s),
        ) => Some(s),
        _ => None,
    }
}

/// Names the flag behind a library's error in a field of the request
/// (`SpecError::for_field`, which leaves its source to the caller).
fn name_request_field(mut e: anyhow::Error) -> anyhow::Error {
    use plait_planner::PlanError;
    use plait_runtime::RuntimeError;
    let spec = if e.is::<SpecError>() {
        e.downcast_mut::<SpecError>()
    } else if e.is::<PlanError>() {
        match e.downcast_mut::<PlanError>() {
            Some(PlanError::Spec(s)) => Some(s),
            _ => None,
        }
    } else {
        match e.downcast_mut::<RuntimeError>() {
            Some(RuntimeError::Spec(s) | RuntimeError::ScheduleSpec(s)) => Some(s),
            _ => None,
        }
    };
    if let Some(s) = spec.filter(|s| s.is_request_field()) {
        s.source = flag_for(&s.field);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_and_usage_errors_keep_clap_exit_codes() {
        let help = run_cli(["plait", "--help"]).unwrap_err();
        assert!(matches!(help, CliError::Usage(_)));
        assert_eq!(help.exit_code(), 0);
        let bad = run_cli(["plait", "estimate", "--dtype", "fp4"]).unwrap_err();
        assert_eq!(bad.exit_code(), 2);
        assert!(bad.to_string().contains("--dtype"), "{bad}");
    }

    #[test]
    fn failed_commands_carry_the_spec_error() {
        let err = run_cli(["plait", "estimate", "--tp", "0"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let spec = err.spec_error().expect("a spec error");
        assert_eq!((spec.source.as_str(), spec.field.as_str()), ("--tp", "tp"));
        assert!(err.to_string().starts_with("--tp: `tp`:"), "{err}");
    }

    #[test]
    fn success_returns_the_printed_text() {
        let text = run_cli(["plait", "schedule", "--json"]).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["schedule"], "1f1b");
    }
}
