"""plait for PyTorch users: plans of plait's executed by torch.distributed's own parts.

``parallelize(model, plan)`` applies a plan (text such as ``"dp2,tp2"`` or a
:class:`Plan` from plait's planner) to an unmodified ``transformers`` causal LM:
DeviceMesh in plait's rank order, DTensor tensor/sequence parallelism, FSDP2 data
parallelism / ZeRO, per-stage recompute from plait's stage map, and pipeline stages
run by torch.distributed.pipelining over plait's own schedule IR.
``python -m plait.torch.train`` (under torchrun) trains with it.
"""

from ._bridge import Plan, PlaitError, plan_auto, simulate
from .parallelize import Parallel, parallelize

__all__ = ["Plan", "PlaitError", "Parallel", "parallelize", "plan_auto", "simulate"]
