"""Shared fixtures of the Python tests: the `plait` binary the package is compared with."""

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def plait_bin() -> str:
    """$PLAIT_BIN, else the workspace's `plait` built by cargo (a no-op after `cargo test`)."""
    given = os.environ.get("PLAIT_BIN")
    if given:
        return given
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.fail("set PLAIT_BIN to a plait binary, or put cargo on PATH to build one")
    subprocess.run(
        [cargo, "build", "--quiet", "-p", "plait", "--bin", "plait"], cwd=ROOT, check=True
    )
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    return str(target / "debug" / "plait")
