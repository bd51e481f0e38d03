"""Training text as byte tokens, and the batch of each step.

Tokens are the text's UTF-8 bytes (ids 0–255, as ``plait train``'s byte tokenizer; valid
for any model whose vocabulary has at least 256 entries). The batch of step ``s`` is
``gbs`` windows of ``seq + 1`` tokens at offsets drawn from a generator seeded by
``(seed, s)``: it depends on nothing but the step, so a resumed run's data position is its
step and every plan sees the same global batch.
"""

from __future__ import annotations

import json

import torch

_BUILTIN = """\
It is a truth universally acknowledged that a model of many parameters must be split over
many devices. Data parallelism copies the model and splits the batch; tensor parallelism
splits each matrix multiplication over the devices of a node; pipeline parallelism cuts the
layers into stages and streams micro-batches through them, and a schedule decides, on every
stage, which micro-batch runs its forward and which its backward next. Recomputation trades
compute for memory: a stage keeps only the inputs of its blocks and runs their forward again
just before the backward needs what it dropped. The zero redundancy optimizer shards the
optimizer state, then the gradients, then the weights themselves over the data-parallel
ranks, gathering each block's weights just before they are used. Every choice changes the
time of an iteration and the memory of every device, and the best split of one model on one
cluster is rarely the best on another. The planner searches them all and explains its answer;
the simulator times the schedule instruction by instruction; the runtime executes the very
same instructions. Measure, then predict, then measure again, and write down where the
prediction was wrong and why.
"""


def load_tokens(path: str | None) -> tuple[torch.Tensor, str]:
    """All tokens of ``path`` (plain text, or JSON lines with a ``text`` field), or of the
    built-in text; and a name for the source."""
    if path is None:
        text, source = _BUILTIN * 8, "built-in text"
    else:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        lines = [l for l in raw.splitlines() if l.strip()]
        if lines and all(l.lstrip().startswith("{") for l in lines):
            try:
                text = "\n".join(json.loads(l)["text"] for l in lines)
            except (json.JSONDecodeError, KeyError) as e:
                raise ValueError(f"--data {path}: JSON lines need a `text` field ({e})") from None
        else:
            text = raw
        source = path
    tokens = torch.tensor(list(text.encode("utf-8")), dtype=torch.long)
    return tokens, source


def batch(tokens: torch.Tensor, step: int, gbs: int, seq: int, seed: int):
    """``(input_ids, labels)`` of step ``step`` (1-based): ``gbs × seq`` each."""
    if tokens.numel() < seq + 2:
        raise ValueError(f"the data has {tokens.numel()} tokens, fewer than --seq {seq} + 2")
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, tokens.numel() - seq - 1, (gbs,), generator=g)
    windows = torch.stack([tokens[s : s + seq + 1] for s in starts.tolist()])
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
