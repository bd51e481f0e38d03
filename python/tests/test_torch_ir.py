"""plait.torch's translation of plait's schedule IR into torch.distributed.pipelining
actions, and plait's answers as plait.torch reads them (no processes started)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
from plait.torch import PlaitError, simulate  # noqa: E402
from plait.torch.pipeline import translate  # noqa: E402
from torch.distributed.pipelining import schedules as S  # noqa: E402

_KIND = {
    "forward": S.FORWARD, "backward": S.FULL_BACKWARD, "backward_input": S.BACKWARD_INPUT,
    "backward_weight": S.BACKWARD_WEIGHT, "send_activation": S.SEND_F,
    "recv_activation": S.RECV_F, "send_gradient": S.SEND_B, "recv_gradient": S.RECV_B,
}


@pytest.mark.parametrize("plan", ["pp2,schedule=gpipe", "pp2", "pp2,vp2", "pp2,schedule=zb-h1",
                                  "pp2,recompute=full,schedule=scp", "dp2,pp2,vp2"])
def test_actions_are_the_ir_op_for_op(plan):
    world = 4 if plan.startswith("dp2") else 2
    p = simulate("tiny-llama", plan, world, 8, 32)
    for r in range(p.config["pp"]):
        vs = p.stage_map["virtual_stages"][r]
        actions, early = translate(p.ir, r, p.stage_map["virtual_stages"])
        mapped = [(a.stage_index, a.computation_type, a.microbatch_index)
                  for a in actions if a.computation_type in _KIND.values()]
        expected = [(vs[i.get("chunk", 0)], _KIND[i["op"]], i["microbatch"])
                    for i in p.ir["ranks"][r] if i["op"] in _KIND]
        assert mapped == expected
        reduces = [a.stage_index for a in actions if a.computation_type == S.REDUCE_GRAD]
        assert sorted(reduces) == sorted(vs)
        if "scp" in plan:
            # Merak's shift: upstream ranks recompute the last micro-batch before its wait.
            assert early == ({(0, p.microbatches - 1)} if r == 0 else set())
        else:
            assert early == set()


# ZB-V's receives must move; DualPipeV's pairs already receive in the senders' order.
@pytest.mark.parametrize("plan,world,moved", [("pp2,schedule=zb-v", 2, True),
                                              ("pp2,schedule=dualpipe-v", 2, False)])
def test_receives_are_posted_in_the_senders_order(plan, world, moved):
    # torch matches untagged sends and receives between two ranks in posting order. A V
    # sends chunk 0's activations and chunk 1's gradients down the same pair, which the
    # receiver's IR consumes in another order: its receives follow the sender's sends, and
    # each is still posted before the computation that consumes it.
    p = simulate("tiny-llama", plan, world, 8, 32)
    vs = p.stage_map["virtual_stages"]
    owner = {j: r for r, stages in enumerate(vs) for j in stages}
    per_rank = [translate(p.ir, r, vs)[0] for r in range(world)]
    sends: dict = {}
    recvs: dict = {}
    reordered = False
    for r, actions in enumerate(per_rank):
        done = set()
        for a in actions:
            j, kind, m = a.stage_index, a.computation_type, a.microbatch_index
            if kind in (S.SEND_F, S.SEND_B):
                to = j + 1 if kind == S.SEND_F else j - 1
                sends.setdefault((r, owner[to]), []).append((to, m))
            elif kind in (S.RECV_F, S.RECV_B):
                frm = j - 1 if kind == S.RECV_F else j + 1
                recvs.setdefault((owner[frm], r), []).append((j, m))
                done.add((kind, j, m))
            elif kind == S.FORWARD and j - 1 in owner and owner[j - 1] != r:
                assert (S.RECV_F, j, m) in done, f"rank {r}: F{j},{m} before its receive"
            elif kind in (S.FULL_BACKWARD, S.BACKWARD_INPUT) and j + 1 in owner and owner[j + 1] != r:
                assert (S.RECV_B, j, m) in done, f"rank {r}: B{j},{m} before its receive"
        ir_recvs = [(vs[r][i.get("chunk", 0)], i["microbatch"]) for i in p.ir["ranks"][r]
                    if i["op"] in ("recv_activation", "recv_gradient")]
        posted = [(a.stage_index, a.microbatch_index) for a in actions
                  if a.computation_type in (S.RECV_F, S.RECV_B)]
        assert sorted(posted) == sorted(ir_recvs)
        reordered |= posted != ir_recvs
    assert sends == recvs
    # Where the IR's own order would not have matched, the translation moved receives.
    assert reordered == moved


def test_scp_spares_the_last_rank_in_the_stage_map():
    p = simulate("tiny-llama", "pp2,recompute=full,schedule=scp", 2, 8, 32)
    assert p.stage_map["chunk_recompute_blocks"] == [[2], [0]]
    assert p.predicted_step_time_s > 0


def test_bad_plans_are_refused_with_plaits_message():
    with pytest.raises(PlaitError, match="dp"):
        simulate("tiny-llama", "dp3", 2, 8, 32)
    with pytest.raises(PlaitError):
        simulate("tiny-llama", "tp2,xx3", 2, 8, 32)
