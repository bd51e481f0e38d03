"""Full recomputation of chosen blocks, with the recompute as an instruction of its own.

plait's schedule IR has an explicit ``recompute`` instruction, and Merak's ``scp`` places it
*before* the wait for the downstream gradient, so that it leaves the critical path.
``torch.utils.checkpoint`` recomputes lazily, inside the backward (after the wait), so it
cannot express that order. This module uses the mechanism that checkpoint's non-reentrant
mode is built on, ``torch.autograd.graph.saved_tensors_hooks``: the forward of a chosen
block keeps none of its saved tensors, only its inputs; :func:`recompute` re-runs the block
from them and hands its saved tensors to the original graph. When nothing called
:func:`recompute` first, the backward recomputes on its own (as checkpoint does). The
recompute runs once per micro-batch even under a split backward (ZB-H1's input and weight
halves share it).

Hooks sit on the block itself (no wrapper module), so parameter names stay the model's.
"""

from __future__ import annotations

import torch
from torch import nn


# Blocks recomputed by this process since the last reset (``early``: of those, the ones
# recomputed before their gradient wait, as scp places them). The train loop logs them.
STATS = {"blocks": 0, "early": 0}


class _Frame:
    """One forward of one block for one micro-batch."""

    __slots__ = ("block", "args", "kwargs", "rng", "count", "tensors")

    def __init__(self, block, args, kwargs):
        self.block = block
        self.args = args
        self.kwargs = kwargs
        self.rng = _rng_state()
        self.count = 0
        self.tensors = None

    def pack(self, t):
        i = self.count
        self.count += 1
        return (self, i)

    @staticmethod
    def unpack(handle):
        frame, i = handle
        if frame.tensors is None:
            frame.recompute()
        return frame.tensors[i]

    def recompute(self):
        if self.tensors is not None:
            return
        saved = []

        def pack(t):
            saved.append(t)
            return t

        def unpack(t):
            return t

        args = [_detach(a) for a in self.args]
        kwargs = {k: _detach(v) for k, v in self.kwargs.items()}
        state = _rng_state()
        _set_rng_state(self.rng)
        try:
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                _call_without_hooks(self.block, args, kwargs)
        finally:
            _set_rng_state(state)
        if len(saved) != self.count:
            raise RuntimeError(
                f"recompute of {type(self.block).__name__} saved {len(saved)} tensors, "
                f"its forward {self.count}: the block is not deterministic"
            )
        self.tensors = saved
        self.args = self.kwargs = None
        STATS["blocks"] += 1


def _detach(v):
    if isinstance(v, torch.Tensor):
        return v.detach().requires_grad_(v.requires_grad)
    if isinstance(v, tuple):
        return tuple(_detach(x) for x in v)
    return v


def _rng_state():
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(s):
    cpu, cuda = s
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda)


def _call_without_hooks(block, args, kwargs):
    # The block's own hooks (ours, FSDP's) stay out of the recompute; an FSDP block
    # is gathered first (the backward's own pre-hook then finds it gathered).
    from torch.distributed.fsdp import FSDPModule

    if isinstance(block, FSDPModule):
        block.unshard()
    block._plait_recompute.inside = True
    try:
        return block.forward(*args, **kwargs)
    finally:
        block._plait_recompute.inside = False


class _State:
    def __init__(self):
        self.frames: dict[int, _Frame] = {}
        self.microbatch = 0
        self.active = None
        self.inside = False


def enable(block: nn.Module) -> None:
    """Makes ``block``'s forward keep only its inputs (full recompute)."""
    if hasattr(block, "_plait_recompute"):
        return
    state = _State()
    block._plait_recompute = state

    def pre(module, args, kwargs):
        if state.inside or not torch.is_grad_enabled():
            return None
        frame = _Frame(module, args, kwargs)
        ctx = torch.autograd.graph.saved_tensors_hooks(frame.pack, _Frame.unpack)
        ctx.__enter__()
        state.active = ctx
        state.frames[state.microbatch] = frame
        return None

    def post(module, args, kwargs, output):
        if state.active is not None:
            ctx, state.active = state.active, None
            ctx.__exit__(None, None, None)
        return None

    # FSDP's pre-forward hook (registered later, prepended) gathers before ours enters
    # the context; its post-forward hook runs after ours has left it.
    block.register_forward_pre_hook(pre, with_kwargs=True)
    block.register_forward_hook(post, with_kwargs=True, always_call=True)


def is_enabled(block: nn.Module) -> bool:
    return hasattr(block, "_plait_recompute")


def set_microbatch(blocks, m: int) -> None:
    """Tags the forwards that follow as micro-batch ``m``'s."""
    for b in blocks:
        if is_enabled(b):
            b._plait_recompute.microbatch = m


def recompute(blocks, m: int) -> int:
    """Runs the recompute of micro-batch ``m`` through ``blocks`` (the IR's ``recompute``);
    returns how many blocks it recomputed."""
    n = 0
    for b in blocks:
        if not is_enabled(b):
            continue
        frame = b._plait_recompute.frames.pop(m, None)
        if frame is not None and frame.tensors is None:
            frame.recompute()
            n += 1
    return n


def release(blocks, m: int) -> None:
    """Forgets micro-batch ``m``'s frames (its graph keeps what it still needs)."""
    for b in blocks:
        if is_enabled(b):
            b._plait_recompute.frames.pop(m, None)
