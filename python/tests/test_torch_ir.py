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
        actions, early = translate(p.ir, r, vs)
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


def test_scp_spares_the_last_rank_in_the_stage_map():
    p = simulate("tiny-llama", "pp2,recompute=full,schedule=scp", 2, 8, 32)
    assert p.stage_map["chunk_recompute_blocks"] == [[2], [0]]
    assert p.predicted_step_time_s > 0


def test_bad_plans_are_refused_with_plaits_message():
    with pytest.raises(PlaitError, match="dp"):
        simulate("tiny-llama", "dp3", 2, 8, 32)
    with pytest.raises(PlaitError):
        simulate("tiny-llama", "tp2,xx3", 2, 8, 32)
