"""plait's schedule IR executed by torch.distributed.pipelining's action-list runtime.

Each instruction of a pipeline rank becomes the ``_Action`` torch's
``_PipelineScheduleRuntime`` executes, one for one and in plait's order:

=====================  ==========================================================
plait IR op            torch action (stage = plait's virtual stage of the chunk)
=====================  ==========================================================
forward                ``F``
backward               ``B``
backward_input         ``I`` (ZB-H1's input half)
backward_weight        ``W`` (ZB-H1's weight half)
send_activation        ``SEND_F``   (its ``WAIT_SEND_F`` placed by torch's own pass)
recv_activation        ``RECV_F``   (posted in the sender's order, below; awaited by the ``F``
                       that consumes it)
send_gradient          ``SEND_B``
recv_gradient          ``RECV_B``   (posted; awaited by the ``B``/``I`` that consumes it)
reduce_gradients       ``REDUCE_GRAD`` … ``WAIT_REDUCE_GRAD`` (one pending at a time)
recompute              the recompute of :mod:`plait.torch.recompute`, run by our ``B``/``I``
                       before the gradient wait when the IR puts it before the
                       ``recv_gradient`` (Merak's scp), after it otherwise
optimizer_step         end of the list (the optimizer steps after ``schedule.step``)
=====================  ==========================================================

FSDP stages are gathered (``UNSHARD``) at the start and released (``RESHARD``) at the end.
Nothing here decides an order of work: a rank's list is its IR.

Receives are posted in the order their sender posts the sends. Between two ranks torch
matches untagged sends and receives in posting order, whatever they carry, while plait's
IR places each receive where its consumer needs it. In a looped schedule the two orders
agree; in a V (ZB-V) one pair carries two streams (chunk 0's activations and chunk 1's
gradients, both towards the next rank), which the receiver consumes in another order than
the sender sends. So at a receive, this rank posts every receive from that sender still
unposted up to the one it needs, in the sender's order (a receive posted early only waits
in torch's queue), and the computation that consumes each message waits for its own.
"""

from __future__ import annotations

from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from . import recompute as rc

_A = S._Action


class PlaitStage(PipelineStage):
    """A PipelineStage whose forwards tag their micro-batch for the recompute hooks."""

    def __init__(self, submod, *args, **kwargs):
        super().__init__(submod, *args, **kwargs)
        self._blocks = submod.blocks()

    def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
        rc.set_microbatch(self._blocks, fwd_chunk_id)
        return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)


def _owners(virtual_stages: list[list[int]]) -> dict:
    """The pipeline rank holding each virtual stage."""
    return {j: r for r, stages in enumerate(virtual_stages) for j in stages}


def send_orders(ir: dict, virtual_stages: list[list[int]]) -> dict:
    """Per (sender, receiver) pipeline rank pair: the messages the sender posts, in its
    IR order, each as (receive op, receiving stage, micro-batch)."""
    owner = _owners(virtual_stages)
    orders: dict = {}
    for q, instrs in enumerate(ir["ranks"]):
        for instr in instrs:
            op = instr["op"]
            if op not in ("send_activation", "send_gradient"):
                continue
            j = virtual_stages[q][instr.get("chunk", 0)]
            to, recv = (j + 1, "recv_activation") if op == "send_activation" else (j - 1, "recv_gradient")
            orders.setdefault((q, owner[to]), []).append((recv, to, instr["microbatch"]))
    return orders


def translate(ir: dict, rank: int, virtual_stages: list[list[int]],
              orders: dict | None = None) -> tuple[list, set]:
    """Rank ``rank``'s IR as torch actions (``virtual_stages``: every rank's stages, by
    chunk; ``orders``: :func:`send_orders`, computed here when not given); also the
    (stage, micro-batch) pairs whose recompute the IR issues before their gradient wait."""
    if orders is None:
        orders = send_orders(ir, virtual_stages)
    owner = _owners(virtual_stages)
    positions: dict = {}  # (sender, rank) → each message's place in the sender's order
    posted: dict = {}  # sender → how many of its messages to this rank are posted
    virtual_stages = virtual_stages[rank]
    ops = {
        "forward": S.FORWARD,
        "backward": S.FULL_BACKWARD,
        "backward_input": S.BACKWARD_INPUT,
        "backward_weight": S.BACKWARD_WEIGHT,
        "send_activation": S.SEND_F,
        "recv_activation": S.RECV_F,
        "send_gradient": S.SEND_B,
        "recv_gradient": S.RECV_B,
    }
    local = sorted(set(virtual_stages))
    actions = [_A(j, S.UNSHARD, None) for j in local]
    early: set[tuple[int, int]] = set()
    pending_recompute: set[tuple[int, int]] = set()
    pending_reduce = None
    reduced = set()
    for instr in ir["ranks"][rank]:
        op, m, c = instr["op"], instr.get("microbatch"), instr.get("chunk", 0)
        j = virtual_stages[c]
        if op in ("recv_activation", "recv_gradient"):
            if op == "recv_gradient" and (j, m) in pending_recompute:
                early.add((j, m))
            sender = owner[j - 1 if op == "recv_activation" else j + 1]
            order = orders.get((sender, rank), [])
            want = positions.setdefault((sender, rank), {msg: i for i, msg in enumerate(order)})
            if (op, j, m) not in want:
                raise ValueError(f"plait.torch: rank {rank}'s {op} of stage {j}, micro-batch {m} has no send")
            upto = want[(op, j, m)] + 1
            for recv, stage, mb in order[posted.get(sender, 0):upto]:
                actions.append(_A(stage, ops[recv], mb))
            posted[sender] = max(posted.get(sender, 0), upto)
        elif op in ops:
            if op in ("backward", "backward_input"):
                pending_recompute.discard((j, m))
            actions.append(_A(j, ops[op], m))
        elif op == "recompute":
            pending_recompute.add((j, m))
        elif op == "reduce_gradients":
            if pending_reduce is not None:
                actions.append(_A(pending_reduce, S.WAIT_REDUCE_GRAD, None))
            actions.append(_A(j, S.REDUCE_GRAD, None))
            pending_reduce = j
            reduced.add(j)
        elif op == "optimizer_step":
            break
        else:
            raise ValueError(f"plait.torch: schedule IR op `{op}` is not known")
    if pending_reduce is not None:
        actions.append(_A(pending_reduce, S.WAIT_REDUCE_GRAD, None))
    # Without data parallelism the IR reduces nothing; torch's REDUCE_GRAD still scales
    # the accumulated gradients by 1/micro-batches (the mean loss over the batch).
    for j in local:
        if j not in reduced:
            actions.append(_A(j, S.REDUCE_GRAD, None))
            actions.append(_A(j, S.WAIT_REDUCE_GRAD, None))
    actions += [_A(j, S.RESHARD, None) for j in local]
    return actions, early


def _backward(early: set, split: bool):
    """Torch's ``B``/``I`` (schedules.py, _PipelineScheduleRuntime._step_microbatches),
    with plait's recompute before or after the gradient wait."""

    def run(action, ctx):
        sched = ctx.schedule_ref
        j, m = action.stage_index, action.microbatch_index
        stages = {s.stage_index: s for s in sched._stages}
        stage = stages[j]
        blocks = stage._blocks
        sched._assert_unsharded(stage)
        if (j, m) in early:
            rc.STATS["early"] += rc.recompute(blocks, m)
        next_local = j + 1 in stages
        if not stage.is_last and not next_local:
            key = (j, m)
            if key not in sched.bwd_recv_ops:
                raise AssertionError(f"{action} before its gradient was received")
            S._wait_batch_p2p(sched.bwd_recv_ops.pop(key))
        rc.recompute(blocks, m)
        loss = sched._maybe_get_loss(stage, m)
        if split:
            stage.backward_one_chunk(m, loss=loss, full_backward=False, last_backward=False)
        else:
            sched.backward_counter[j] += 1
            last = sched.backward_counter[j] == sched._n_microbatches
            stage.backward_one_chunk(m, loss=loss, full_backward=True, last_backward=last)
        if j - 1 in stages:
            stages[j - 1].set_local_bwd_input(stage.get_local_bwd_output(m), m)

    return run


def build_schedule(stages, ir: dict, pp_rank: int, virtual_stages, loss_fn):
    """A ``_PipelineScheduleRuntime`` over this rank's ``stages`` running ``ir``."""
    n = ir["microbatches"]
    sched = S._PipelineScheduleRuntime(stages, n_microbatches=n, loss_fn=loss_fn, scale_grads=True)
    actions = {}
    early = set()
    orders = send_orders(ir, virtual_stages)
    for r in range(ir["stages"]):
        acts, e = translate(ir, r, virtual_stages, orders)
        actions[r] = acts
        early |= e
    actions = S._add_wait_send(actions)
    sched._prepare_schedule_with_comms(actions, format="compute_comms")
    sched.register_custom_function(S.FULL_BACKWARD, _backward(early, split=False))
    sched.register_custom_function(S.BACKWARD_INPUT, _backward(early, split=True))
    return sched
