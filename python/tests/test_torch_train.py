"""plait.torch on CPU (gloo): plans executed by torch.distributed under torchrun equal the
single-process run step for step; DCP resume reproduces the uninterrupted run; a failing
or killed rank ends the job in seconds, named.

Each run is tiny-llama (plait's preset: 4 blocks, hidden 128), 5 steps of 8 × 32 tokens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

STEPS = 5
COMMON = ["--model", "tiny-llama", "--seq", "32", "--gbs", "8", "--seed", "3", "--lr", "3e-3"]
REL = 1e-4


def _env():
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _cmd(nproc: int, args: list[str]) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "plait.torch.train", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--monitor-interval", "0.2", "-m", "plait.torch.train", *args]


def train(tmp_path, name: str, nproc: int, plan: str, *extra: str, steps: int = STEPS,
          check: bool = True, timeout: float = 240):
    log = tmp_path / f"{name}.jsonl"
    args = [*COMMON, "--plan", plan, "--steps", str(steps), "--json-log", str(log), *extra]
    p = subprocess.run(_cmd(nproc, args), capture_output=True, text=True, env=_env(), timeout=timeout)
    if check:
        assert p.returncode == 0, f"{plan}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
    records = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
    return p, records


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    _, recs = train(tmp_path_factory.mktemp("ref"), "ref", 1, "dp1")
    losses = [r["loss"] for r in recs]
    assert [r["step"] for r in recs] == list(range(1, STEPS + 1))
    # The trajectory moves: equal trajectories below are not equal by being flat.
    assert losses[-1] < losses[0] - 0.05, losses
    return losses


_RUNS: dict = {}  # plan runs by (plan, extra), shared between tests


def _same(losses, reference, what):
    assert len(losses) == len(reference), what
    for step, (a, b) in enumerate(zip(losses, reference), 1):
        assert abs(a - b) <= REL * abs(b), f"{what}: step {step} loss {a} vs single process {b}"


@pytest.mark.parametrize(
    "nproc,plan,extra",
    [
        (4, "dp2,tp2", []),
        (2, "dp2,zero3", []),
        (4, "dp4,zero3,shard2", []),
        (2, "pp2", ["--schedule", "1f1b"]),
        (2, "pp2,vp2", ["--schedule", "interleaved"]),
        (2, "pp2,recompute=full", ["--schedule", "scp"]),
        (2, "pp2", ["--schedule", "zb-h1"]),
        (2, "pp2", ["--schedule", "zb-v"]),
        (2, "pp2", ["--schedule", "dualpipe-v"]),
    ],
    ids=["dp2xtp2", "dp2-zero3", "dp4-hsdp2", "pp2-1f1b", "pp2-interleaved", "pp2-scp-recompute",
         "pp2-zb-h1", "pp2-zb-v", "pp2-dualpipe-v"],
)
def test_plan_equals_single_process(tmp_path, reference, nproc, plan, extra):
    _, recs = train(tmp_path, "run", nproc, plan, *extra)
    _RUNS[(plan, tuple(extra))] = recs
    _same([r["loss"] for r in recs], reference, plan)
    r = recs[-1]
    for key in ("step", "loss", "grad_norm", "lr", "tokens", "step_time_s", "tokens_per_s",
                "predicted_step_time_s"):
        assert key in r, key
    assert r["predicted_step_time_s"] > 0 and r["tokens"] == 8 * 32
    if "scp" in extra:
        # plait's stage map for scp: rank 0 recomputes both its blocks for each of the 8
        # micro-batches, the last rank none; the last micro-batch's recompute on rank 0 is
        # issued before its gradient wait (Merak's shift).
        assert r["recomputed_blocks"] == [16, 0], r
        assert r["early_recomputed_blocks"] == [2, 0], r
    else:
        assert sum(r["recomputed_blocks"]) == 0


def test_dcp_resume_reproduces_the_next_steps_and_a_failing_rank_is_named(tmp_path):
    ck = tmp_path / "ck"
    key = ("pp2,vp2", ("--schedule", "interleaved"))
    full = _RUNS.get(key) or train(tmp_path, "full", 2, key[0], *key[1])[1]
    # Interrupted: a checkpoint after step 2, then rank 1 fails at step 3.
    t0 = time.monotonic()
    p, first = train(tmp_path, "resumed", 2, key[0], *key[1], "--checkpoint-dir", str(ck),
                     "--checkpoint-every", "2", "--fail-rank", "1", "--fail-step", "3", check=False)
    assert p.returncode != 0
    assert "rank 1 failed at step 3" in p.stderr, p.stderr[-3000:]
    assert time.monotonic() - t0 < 90
    assert [r["step"] for r in first] == [1, 2]
    _, resumed = train(tmp_path, "resumed", 2, key[0], *key[1], "--checkpoint-dir", str(ck), "--resume")
    assert [r["step"] for r in resumed] == list(range(1, STEPS + 1))
    for a, b in zip(resumed, full):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=0), (a, b)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5), (a, b)


def _workers(parent: int) -> dict[int, int]:
    """RANK → pid of torchrun's worker processes."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(env[b"RANK"])] = int(pid)
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc to find the workers")
def test_killed_rank_stops_the_job_in_seconds(tmp_path):
    log = tmp_path / "kill.jsonl"
    args = [*COMMON, "--plan", "dp2", "--steps", "100000", "--json-log", str(log), "--timeout", "30"]
    p = subprocess.Popen(_cmd(2, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and log.read_text().count("\n") >= 2):
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step logged"
            time.sleep(0.2)
        workers = _workers(p.pid)
        assert set(workers) == {0, 1}, workers
        os.kill(workers[1], signal.SIGKILL)
        killed = time.monotonic()
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    assert "rank      : 1" in err and "SIGKILL" in err, err[-3000:]
    print(f"killed rank 1: the job stopped {took:.2f} s later")
    assert took < 15, f"the job took {took:.1f} s to stop after rank 1 was killed"
