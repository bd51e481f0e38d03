"""scripts/bench_torch_vs_plait.py runs (CPU part, --quick) and writes its table."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "bench_torch_vs_plait.py")


def test_bench_writes_measured_and_predicted(tmp_path):
    out, js = tmp_path / "bench.md", tmp_path / "bench.json"
    p = subprocess.run([sys.executable, SCRIPT, "--quick", "--no-gpu", "--out", str(out), "--json", str(js)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = json.loads(js.read_text())
    assert [r["plan"] for r in rows] == ["dp1", "pp2"]
    for r in rows:
        assert r["measured_step_time_s"] > 0 and r["predicted_step_time_s"] > 0
        assert r["loss_last"] < r["loss_first"]
    table = out.read_text()
    assert "| 2 CPU processes (gloo) | tiny-llama | pp2 |" in table
