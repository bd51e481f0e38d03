//! The `plait` binary: runs the command line through the library ([`plait::run_cli`]) and
//! prints. No modelling happens here.

use std::io::Write;
use std::process::ExitCode;

use plait::{run_cli, CliError};

fn main() -> ExitCode {
    match run_cli(std::env::args_os()) {
        Ok(text) => match std::io::stdout().lock().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            // The reader left (`plait plan | head`): nothing more to say.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write the output: {e}");
                ExitCode::from(2)
            }
        },
        // Help, version and usage errors print and exit as clap always has.
        Err(CliError::Usage(e)) => e.exit(),
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}
