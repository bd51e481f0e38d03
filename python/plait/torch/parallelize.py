"""``plait.torch.parallelize``: a plan of plait's applied to an unmodified Hugging Face
causal LM with PyTorch's own parallelism.

* **Mesh** — ``init_device_mesh`` with dims ``("pp", "dp", "cp", "tp")``, outermost to
  innermost: rank = ((pp·dp + dp)·cp + cp)·tp + tp, plait's rank order (tp fastest, then
  cp, dp, pp; ``crates/spec/src/mesh.rs``); under hybrid sharding plait's JSON splits
  ``dp`` into ``("dp_replicate", "dp_shard")`` (``ParallelConfig::device_mesh``).
* **Tensor + sequence parallel** — DTensor ``parallelize_module`` per block as torchtitan
  does for Llama: q/k/v and gate/up column-parallel, o/down row-parallel, the embedding
  vocabulary-parallel, the head column-parallel with replicated logits; with ``sp`` the
  norms are ``SequenceParallel`` and the hidden states between modules (and between
  pipeline stages) are each rank's sequence shard.
* **Data parallel / ZeRO** — FSDP2: ZeRO-3 is ``fully_shard`` (reshard after forward);
  ZeRO-2 is ``fully_shard(reshard_after_forward=False)``; **ZeRO-1 is the same as ZeRO-2**
  (FSDP2 has no mode that shards optimizer state but keeps full gradients; sharding the
  gradients too saves more memory at the same communication volume, reduce-scatter plus
  all-gather = one all-reduce); ZeRO-0 is FSDP2's ``replicate`` (DDP semantics:
  all-reduced gradients, replicated state). Each block is its own FSDP unit. Under hybrid
  sharding (``shard`` below dp) plait's mesh splits dp into ``dp_replicate`` × ``dp_shard``
  and FSDP2 takes that 2-D mesh: HSDP, sharded over ``dp_shard``, gradient shards
  all-reduced over ``dp_replicate``.
* **Recompute** — the first ``chunk_recompute_blocks[rank][chunk]`` blocks of each chunk,
  as plait's stage map says (:mod:`plait.torch.recompute`).
* **Pipeline** — the blocks cut per ``chunk_blocks`` into ``torch.distributed.pipelining``
  stages (virtual stage j = plait's ``virtual_stages[rank][chunk]``), run by torch's
  action-list runtime over plait's own schedule IR (:mod:`plait.torch.pipeline`).

Context parallelism (cp > 1) and expert parallelism (ep > 1) are refused. Schedules that
place chunks in a V (zb-v) run like the others: torch's runtime takes each stage's rank
from the action lists, and the receives follow their senders' order
(:mod:`plait.torch.pipeline`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

import warnings

from . import models, recompute as rc
from ._bridge import Plan, simulate

# A stage returns its (local) logits or hidden states, views of DTensor locals; nothing
# modifies them in place.
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")


def _local_sum(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def dp_mesh(mesh):
    """The data-parallel part of plait's mesh: ``dp``, or under hybrid sharding the 2-D
    ``(dp_replicate, dp_shard)`` mesh FSDP2 runs HSDP on."""
    names = mesh.mesh_dim_names
    return mesh["dp"] if "dp" in names else mesh["dp_replicate", "dp_shard"]


def dp_rank(mesh) -> int:
    """This rank's data-parallel index (replicate-major under hybrid sharding, as plait's
    rank order lays the shard groups out innermost)."""
    names = mesh.mesh_dim_names
    if "dp" in names:
        return mesh["dp"].get_local_rank()
    return mesh["dp_replicate"].get_local_rank() * mesh["dp_shard"].size() + mesh[
        "dp_shard"
    ].get_local_rank()


class Parallel:
    """A model under a plan on this rank: its stage modules (``parts``), one module over
    all of them with the model's parameter names (``module``: optimizer, checkpoints), the
    mesh, and :meth:`train_step`."""

    def __init__(self, plan: Plan, mesh, parts, pp_rank, device, schedule=None):
        self.plan, self.mesh, self.parts, self.pp_rank = plan, mesh, parts, pp_rank
        self.device = device
        self.schedule = schedule
        c = plan.config
        self.pp, self.dp, self.tp = c["pp"], c["dp"], c["tp"]
        self.module = _rank_view(parts)
        self.holds_first = any(p.is_first for p in parts)
        self.holds_last = any(p.is_last for p in parts)
        self.microbatches = plan.microbatches

    def parameters(self):
        return self.module.parameters()

    def train_step(self, input_ids: torch.Tensor, labels: torch.Tensor):
        """Forward and backward of this data-parallel rank's share of the batch (rows
        ``micro-batches × mbs``), in plait's order; gradients are the mean over the global
        batch once every rank has run. Returns the mean loss of the share on ranks that
        hold the last stage, else None."""
        n = self.microbatches
        if input_ids.shape[0] % n:
            raise ValueError(f"batch of {input_ids.shape[0]} rows does not split into {n} micro-batches")
        if self.schedule is not None:
            losses = []
            args = (input_ids.to(self.device),) if self.holds_first else ()
            target = labels.to(self.device) if self.holds_last else None
            self.schedule.step(*args, target=target, losses=losses, return_outputs=False)
            if not self.holds_last:
                return None
            return torch.stack([l.detach() for l in losses]).mean().item()
        return self._single_stage_step(input_ids.to(self.device), labels.to(self.device))

    def _single_stage_step(self, ids, labels):
        # One pipeline rank: plait's IR for it is the order of forwards, recomputes and
        # backwards over the micro-batches (gradient accumulation).
        (part,) = self.parts
        blocks = part.blocks()
        n = self.microbatches
        ids_mb, labels_mb = ids.chunk(n), labels.chunk(n)
        losses, values = {}, []
        done = 0
        syncs = hasattr(part, "set_requires_gradient_sync")
        for instr in self.plan.ir["ranks"][0]:
            op, m = instr["op"], instr.get("microbatch")
            if op == "forward":
                rc.set_microbatch(blocks, m)
                loss = models.loss_fn(part(ids_mb[m]), labels_mb[m])
                losses[m] = loss
                values.append(loss.detach())
            elif op == "recompute":
                rc.recompute(blocks, m)
            elif op in ("backward", "backward_input"):
                done += 1
                if syncs:
                    part.set_requires_gradient_sync(done == n)
                rc.recompute(blocks, m)
                (losses.pop(m) / n).backward()
            elif op in ("backward_weight", "reduce_gradients"):
                pass  # one rank: the backward computed both halves; FSDP reduces in it
            elif op == "optimizer_step":
                break
            else:
                raise ValueError(f"plait.torch: IR op `{op}` on a single pipeline rank")
        return torch.stack(values).mean().item()


def _rank_view(parts) -> nn.Module:
    """One module holding every piece of this rank's stages at its original path."""
    root = nn.Module()
    for part in parts:
        fam = part.family
        for path in (fam.embed, fam.positions, fam.dropout, fam.norm, fam.head):
            if path and _has(part, path):
                models.put(root, path, models.get(part, path))
        for name, block in zip(part.block_names, part.blocks()):
            models.put(root, f"{fam.blocks}.{name}", block)
    return root


def _has(m, path):
    try:
        models.get(m, path)
        return True
    except AttributeError:
        return False


def make_mesh(mesh: dict, device_type: str):
    """torch's DeviceMesh of plait's mesh (``Plan.mesh``: names and sizes outermost first,
    as plait's Rust side orders ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(
        device_type, tuple(mesh["shape"]), mesh_dim_names=tuple(mesh["dims"])
    )


def _tp(stage: models.Stage, tp_mesh, sp: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    fam = stage.family
    if not fam.tp:
        raise ValueError(
            f"plait.torch: tensor parallelism is not available for {fam.name} models "
            "(use dp, zero and pp)"
        )
    out = Shard(1) if sp else Replicate()
    for block in stage.blocks():
        plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=out),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=out),
        }
        if sp:
            plan.update({
                "input_layernorm": SequenceParallel(),
                "post_attention_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()},
                ),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, tp_mesh, plan)
    top = {}
    if stage.is_first:
        top[fam.embed] = RowwiseParallel(input_layouts=Replicate(), output_layouts=out)
    if stage.is_last:
        if sp:
            top[fam.norm] = SequenceParallel()
        top[fam.head] = ColwiseParallel(input_layouts=out, output_layouts=Replicate())
    if top:
        parallelize_module(stage, tp_mesh, top)
    stage.sequence_parallel = sp
    stage.tp_size = tp_mesh.size()


def _dp(stage: models.Stage, dp_mesh, zero: int) -> None:
    if zero == 0:
        from torch.distributed._composable.replicate_with_fsdp import replicate

        for block in stage.blocks():
            replicate(block, mesh=dp_mesh)
        replicate(stage, mesh=dp_mesh)
        return
    from torch.distributed.fsdp import fully_shard

    reshard = zero >= 3
    for block in stage.blocks():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard)
    fully_shard(stage, mesh=dp_mesh, reshard_after_forward=reshard)


def parallelize(model: nn.Module, plan, mesh=None, *, gbs: int | None = None, seq: int | None = None,
                schedule: str | None = None, device: torch.device | None = None) -> Parallel:
    """Applies ``plan`` (a :class:`Plan`, or plan text such as ``"dp2,tp2"`` resolved by
    ``plait simulate`` for this world, ``gbs`` and ``seq``) to ``model`` on this rank.

    The process group must be initialised (torchrun). ``model`` is cut into this rank's
    stages; its other modules are not used afterwards."""
    world = dist.get_world_size()
    if not isinstance(plan, Plan):
        if gbs is None or seq is None:
            raise ValueError("parallelize: a plan given as text needs gbs= and seq=")
        plan = simulate(_plait_model(model), plan, world, gbs, seq, schedule=schedule)
    c = plan.config
    if plan.world != world:
        raise ValueError(f"plan {plan.text} needs {plan.world} processes, the job has {world}")
    if c["cp"] != 1 or c["ep"] != 1:
        raise ValueError("plait.torch: context and expert parallelism (cp, ep > 1) are not supported")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    if mesh is None:
        mesh = make_mesh(plan.mesh, device.type)
    rank = dist.get_rank()
    pp_rank = mesh["pp"].get_local_rank()
    sm = plan.stage_map
    bounds = [0]
    for b in sm["chunk_blocks"]:
        bounds.append(bounds[-1] + b)
    if bounds[-1] != models.num_blocks(model):
        raise ValueError(
            f"plan's stage map has {bounds[-1]} blocks, the model {models.num_blocks(model)}"
        )
    vstages = sm["virtual_stages"][pp_rank]
    parts = []
    for chunk, j in enumerate(vstages):
        part = models.Stage(model, bounds[j], bounds[j + 1])
        for block in part.blocks()[: sm["chunk_recompute_blocks"][pp_rank][chunk]]:
            rc.enable(block)
        parts.append(part)
    model.to(device)
    for part in parts:
        if c["tp"] > 1:
            _tp(part, mesh["tp"], bool(c["sp"]))
        if c["dp"] > 1:
            _dp(part, dp_mesh(mesh), int(c["zero"]))
    sched = None
    if c["pp"] > 1:
        from .pipeline import PlaitStage, build_schedule

        pp_group = mesh["pp"].get_group()
        n_stages = len(sm["chunk_blocks"])
        stages = [
            PlaitStage(part, j, n_stages, device, group=pp_group)
            for part, j in zip(parts, vstages)
        ]
        sched = build_schedule(stages, plan.ir, pp_rank, sm["virtual_stages"], models.loss_fn)
    del rank
    return Parallel(plan, mesh, parts, pp_rank, device, sched)


def _plait_model(model: nn.Module) -> str:
    """What plait's --model takes for ``model``: its config written as config.json."""
    import json
    import os
    import tempfile

    d = tempfile.mkdtemp(prefix="plait-model-")
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(model.config.to_dict(), f)
    return path


def grad_norm_and_clip(par: Parallel, max_norm: float) -> float:
    """The global gradient norm (every parameter once, over tp, dp shards and pipeline
    stages), then clipped to ``max_norm``. Returns the norm before clipping."""
    from torch.distributed.tensor import DTensor

    groups: dict = {}
    for p in par.parameters():
        if p.grad is None:
            continue
        key = id(p.grad.device_mesh) if isinstance(p.grad, DTensor) else None
        groups.setdefault(key, []).append(p.grad)
    total = torch.zeros((), device=par.device, dtype=torch.float32)
    for grads in groups.values():
        n = torch.nn.utils.get_total_norm(grads, 2.0, foreach=False)
        if isinstance(n, DTensor):
            n = n.full_tensor()
        total = total + n.float() ** 2
    if par.pp > 1:
        dist.all_reduce(total, group=par.mesh["pp"].get_group())
    norm = total.sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for grads in groups.values():
        for g in grads:
            g.mul_(coef.to(g.dtype) if not isinstance(g, DTensor) else coef.item())
    return norm.item()
