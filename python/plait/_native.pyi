"""The extension module: the ``plait`` command line, run in-process (crates/python)."""

from typing import List, Optional, Tuple

__all__ = ["run", "degrees", "CliError", "__version__"]

__version__: str

class CliError(Exception):
    """The command line failed. ``args`` is ``(message, kind, exit_code, source, field)``:
    the text the binary prints after ``error:``, ``"usage"`` (the arguments did not parse)
    or ``"failed"`` (the command ran and failed), the binary's exit status, and the source
    and field of the spec error behind it (None when there is none)."""

    args: Tuple[str, str, int, Optional[str], Optional[str]]

def run(argv: List[str]) -> str:
    """Runs ``plait ARGV...`` (without the program name) and returns what it prints."""

def degrees() -> List[str]:
    """The parallel degrees' names (``dp``, ``tp``, …), each a keyword argument and a flag."""
