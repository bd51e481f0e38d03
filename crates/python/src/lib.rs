//! `plait._native`: the `plait` command line, run in-process. It takes an argument vector,
//! calls [`plait::run_cli`] (the very function the binary calls) and hands back the text the
//! binary would print. The Python package (`python/plait`) builds the argument vectors and
//! parses the `--json` output; nothing here or there computes a number.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use plait::{run_cli, CliError as RustCliError};

create_exception!(
    _native,
    CliError,
    PyException,
    "The command line failed. args: (message, kind, exit_code, source, field): the text the \
     binary prints after `error: `, \"usage\" (the arguments did not parse) or \"failed\" (the \
     command ran and failed), the binary's exit status, and the source and field of the spec \
     error behind it (None when the failure is not one)."
);

/// Runs `plait ARGV...` (without the program name) and returns what it prints on stdout.
/// The GIL is released while it runs.
#[pyfunction]
fn run(py: Python<'_>, argv: Vec<String>) -> PyResult<String> {
    let args: Vec<String> = std::iter::once("plait".to_string()).chain(argv).collect();
    py.detach(move || run_cli(args)).map_err(|e| {
        let kind = match e {
            RustCliError::Usage(_) => "usage",
            RustCliError::Failed(_) => "failed",
        };
        let (source, field) = match e.spec_error() {
            Some(s) => (Some(s.source.clone()), Some(s.field.clone())),
            None => (None, None),
        };
        CliError::new_err((e.to_string(), kind, e.exit_code(), source, field))
    })
}

/// The parallel degrees' names (`plait_spec::Degree::ALL`: `dp`, `tp`, …), each the keyword
/// argument and the flag (`--tp`) of one degree, so the package passes a degree declared
/// after it was written.
#[pyfunction]
fn degrees() -> Vec<&'static str> {
    plait_spec::Degree::ALL.iter().map(|d| d.name()).collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(degrees, m)?)?;
    m.add("CliError", m.py().get_type::<CliError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
