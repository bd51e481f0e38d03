"""plait's Rust side, asked from Python: the plan (degrees, stage map, per-stage recompute),
its schedule IR and its predicted step time all come from ``plait simulate --json --ir`` /
``plait plan --json``, run in-process through the package's native module
(``plait._native.run``, the very function the binary calls) or, where the package is not
built, through the ``plait`` binary (``$PLAIT_TORCH_BIN``, ``$PLAIT_BIN``, this checkout's
``target/release/plait``, or ``PATH``). Nothing here computes a number of plait's.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field


try:  # the package's error classes, when the package is importable (it is, as our parent)
    from plait import PlaitError as _PackageError
except ImportError:  # pragma: no cover - plait.torch outside the package
    _PackageError = ValueError


class PlaitError(_PackageError):
    """plait refused the request (bad plan, model or flag); the message is plait's."""


def _binary() -> str | None:
    env = os.environ.get("PLAIT_TORCH_BIN") or os.environ.get("PLAIT_BIN")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.normpath(os.path.join(here, "..", "..", "..", "target", "release", "plait"))
    if os.path.exists(cand):
        return cand
    return shutil.which("plait")


def run(argv: list[str]) -> str:
    """``plait ARGV…``; returns what it prints. In-process through the package
    (``plait.run``) unless ``$PLAIT_TORCH_BIN`` names a binary to run instead."""
    if not os.environ.get("PLAIT_TORCH_BIN"):
        try:
            import plait as _pkg

            pkg_run = getattr(_pkg, "run", None)
        except ImportError:
            pkg_run = None
        if pkg_run is not None:
            try:
                return pkg_run(list(argv))
            except _PackageError as e:
                raise PlaitError(f"plait {argv[0]}: {e}") from None
    exe = _binary()
    if exe is None:
        raise RuntimeError(
            "plait.torch needs plait's Rust side: install the package (`pip install .`), "
            "build the binary (`cargo build --release`) or set PLAIT_TORCH_BIN"
        )
    p = subprocess.run([exe, *argv], capture_output=True, text=True)
    if p.returncode != 0:
        msg = p.stderr.strip().removeprefix("error: ")
        raise PlaitError(f"plait {argv[0]}: {msg}")
    return p.stdout


@dataclass
class Plan:
    """One configuration as plait lays it out and schedules it."""

    text: str  # the plan as given (``dp2,tp2``) or as the planner chose it
    config: dict  # dp, tp, pp, vp, cp, ep, mbs, zero, sp, recompute, schedule
    stage_map: dict  # chunk_blocks, recompute_blocks, virtual_stages, chunk_recompute_blocks
    ir: dict  # the schedule IR (`plait simulate --ir`)
    mesh: dict  # dims and shape, outermost first, as plait orders ranks (for init_device_mesh)
    microbatches: int
    predicted_step_time_s: float
    predicted: dict = field(repr=False)  # the whole `plait simulate --json` answer
    gbs: int = 0
    seq: int = 0
    model: str = ""
    cluster: str = ""
    engine: str = ""

    @property
    def world(self) -> int:
        return math.prod(self.mesh["shape"])


def simulate(model: str, plan: str, world: int, gbs: int, seq: int, schedule: str | None = None,
             cluster: str | None = None, engine: str = "torchtitan") -> Plan:
    """``plait simulate`` of ``plan`` on ``world`` GPUs: the layout, the IR, the prediction."""
    if schedule:  # `--schedule S` overrides the plan's: as plait train does, an item of the plan
        items = [i for i in plan.replace(" ", ",").split(",") if i and not i.startswith("schedule=")]
        plan = ",".join(items + [f"schedule={schedule}"])
    with tempfile.TemporaryDirectory() as d:
        ir_path = os.path.join(d, "ir.json")
        argv = ["simulate", "--model", model, "--gpus", str(world), "--config", plan,
                "--gbs", str(gbs), "--seq", str(seq), "--engine", engine, "--json",
                "--ir", ir_path]
        if cluster:
            argv += ["--cluster", cluster]
        out = run(argv)
        with open(ir_path) as f:
            ir = json.load(f)
    doc = json.loads(out)
    if "stage_map" not in doc:
        raise RuntimeError(
            "plait simulate --json has no `stage_map`: this plait predates plait.torch; "
            "rebuild it (`pip install .` / `cargo build --release`)"
        )
    return Plan(
        text=plan,
        config=doc["config"],
        stage_map=doc["stage_map"],
        ir=ir,
        mesh=doc["mesh"],
        microbatches=doc["microbatches"],
        predicted_step_time_s=doc["iteration_time_s"],
        predicted=doc,
        gbs=gbs,
        seq=seq,
        model=model,
        cluster=doc.get("cluster", cluster or ""),
        engine=doc.get("engine", engine),
    )


def plan_auto(model: str, world: int, gbs: int, seq: int, cluster: str | None = None,
              engine: str = "torchtitan") -> Plan:
    """The planner's best plan for ``world`` GPUs (``plait plan --top 1 --json --ir``),
    with the planner's own block layout and per-stage recompute."""
    with tempfile.TemporaryDirectory() as d:
        ir_path = os.path.join(d, "ir.json")
        argv = ["plan", "--model", model, "--gpus", str(world), "--gbs", str(gbs),
                "--seq", str(seq), "--engine", engine, "--top", "1", "--json", "--ir", ir_path]
        if cluster:
            argv += ["--cluster", cluster]
        doc = json.loads(run(argv))
        plans = doc.get("plans") or []
        if not plans:
            raise PlaitError(
                f"plait plan: no plan for {model} on {world} GPUs: {doc.get('infeasible')}"
            )
        with open(ir_path) as f:
            ir = json.load(f)
    p = plans[0]
    stage_map = dict(p["stage_map"], virtual_stages=p["virtual_stages"],
                     chunk_recompute_blocks=p["chunk_recompute_blocks"])
    return Plan(
        text=p["config_text"],
        config=p["config"],
        stage_map=stage_map,
        ir=ir,
        mesh=p["mesh"],
        microbatches=ir["microbatches"],
        predicted_step_time_s=p["estimate"]["iteration_time_s"],
        predicted=p,
        gbs=gbs,
        seq=seq,
        model=model,
        cluster=doc.get("cluster", cluster or ""),
        engine=engine,
    )
