"""Hugging Face causal LMs as plait sees them: the built-in ``tiny-llama``, configs from a
path, and the pieces a pipeline stage is cut from (embedding, blocks, final norm, head).

A stage is an ``nn.Module`` holding the *original* modules of the model at their original
paths (``model.embed_tokens``, ``model.layers.3``, ``lm_head`` …), so a stage's parameter
names are the model's and torch.distributed.checkpoint keys are the same on every plan.
The forward is the model's own computation, spelled once here for every plan (single
process included): embedding → blocks → final norm → head, with causal attention through
SDPA's ``is_causal`` (no mask tensor).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
from torch import nn

# plait's `tiny-llama` preset (crates/spec/src/presets.rs): hidden 128, 4 blocks, 4 heads,
# 2 key-value heads, MLP width 352, byte vocabulary 256, untied head.
TINY_LLAMA = dict(
    model_type="llama",
    vocab_size=256,
    hidden_size=128,
    intermediate_size=352,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    attention_dropout=0.0,
)

BUILTIN = {"tiny-llama": TINY_LLAMA}


def load_config(name_or_path: str):
    """A ``transformers`` config for ``--model``: a built-in name, a ``config.json`` file,
    or a directory holding one. Returns ``(config, plait_model_arg)``, the second being
    what plait's ``--model`` takes for the same model (preset name or the JSON path)."""
    from transformers import AutoConfig

    if name_or_path in BUILTIN:
        d = dict(BUILTIN[name_or_path])
        mt = d.pop("model_type")
        return AutoConfig.for_model(mt, **d), name_or_path
    path = name_or_path
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"--model: `{name_or_path}` is neither a built-in model "
            f"({', '.join(BUILTIN)}) nor a config.json file or directory"
        )
    with open(path) as f:
        d = json.load(f)
    mt = d.pop("model_type", None)
    if mt is None:
        raise ValueError(f"--model: {path} has no `model_type`")
    return AutoConfig.for_model(mt, **d), path


def build_model(config, seed: int) -> nn.Module:
    """The model, initialised from ``seed`` the same way on every rank (fp32, CPU)."""
    from transformers import AutoModelForCausalLM

    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    return model.float().train()


@dataclass
class Family:
    """Where a family keeps its pieces (dotted paths in the HF model)."""

    name: str
    embed: str
    positions: str | None  # learned position embedding (GPT-2), else None
    rotary: str | None
    blocks: str
    norm: str
    head: str
    dropout: str | None = None
    # Tensor parallelism: the block's submodules (Megatron/torchtitan column/row split).
    tp: bool = True


_LLAMA = Family(
    "llama",
    embed="model.embed_tokens",
    positions=None,
    rotary="model.rotary_emb",
    blocks="model.layers",
    norm="model.norm",
    head="lm_head",
)
_GPT2 = Family(
    "gpt2",
    embed="transformer.wte",
    positions="transformer.wpe",
    rotary=None,
    blocks="transformer.h",
    norm="transformer.ln_f",
    head="lm_head",
    dropout="transformer.drop",
    tp=False,  # fused qkv in a Conv1D: no column/row split without rewriting the model
)
FAMILIES = {
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "qwen3": _LLAMA,
    "mistral": _LLAMA,
    "mixtral": Family(**{**_LLAMA.__dict__, "name": "mixtral", "tp": False}),
    "gpt2": _GPT2,
}


def family_of(model: nn.Module) -> Family:
    mt = getattr(model.config, "model_type", None)
    if mt not in FAMILIES:
        raise ValueError(
            f"plait.torch: model type `{mt}` is not supported "
            f"(supported: {', '.join(sorted(FAMILIES))})"
        )
    return FAMILIES[mt]


def get(root: nn.Module, path: str | None):
    if path is None:
        return None
    m = root
    for part in path.split("."):
        m = getattr(m, part)
    return m


def put(root: nn.Module, path: str, module: nn.Module) -> None:
    """Sets ``root.<path> = module``, creating plain containers on the way."""
    parts = path.split(".")
    m = root
    for part in parts[:-1]:
        if not hasattr(m, part):
            m.add_module(part, nn.Module())
        m = getattr(m, part)
    m.add_module(parts[-1], module)


def num_blocks(model: nn.Module) -> int:
    return len(get(model, family_of(model).blocks))


class Stage(nn.Module):
    """Blocks ``[first, last)`` of ``model`` (with the embedding when ``first == 0``, the
    final norm and head when ``last`` is the model's end), under their original names.

    Inputs and outputs are plain tensors: token ids (first stage) or hidden states in,
    hidden states or logits out. Under sequence parallelism the hidden states between
    stages are each tensor-parallel rank's sequence shard (set by
    :func:`plait.torch.parallelize`)."""

    def __init__(self, model: nn.Module, first: int, last: int):
        super().__init__()
        fam = family_of(model)
        self.family = fam
        self.config = model.config
        n = num_blocks(model)
        self.first, self.last = first, last
        self.is_first, self.is_last = first == 0, last == n
        blocks = get(model, fam.blocks)
        self.block_names = [str(i) for i in range(first, last)]
        put(self, fam.blocks, nn.ModuleDict({str(i): blocks[i] for i in range(first, last)}))
        if self.is_first:
            put(self, fam.embed, get(model, fam.embed))
            if fam.positions:
                put(self, fam.positions, get(model, fam.positions))
            if fam.dropout:
                put(self, fam.dropout, get(model, fam.dropout))
        if self.is_last:
            put(self, fam.norm, get(model, fam.norm))
            put(self, fam.head, get(model, fam.head))
        # Rotary tables have no parameters: every stage keeps the model's module.
        self._rotary = [get(model, fam.rotary)] if fam.rotary else []
        self.tp_size = 1  # set under sequence parallelism
        self.sequence_parallel = False

    def blocks(self) -> list[nn.Module]:
        d = get(self, self.family.blocks)
        return [d[k] for k in self.block_names]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fam = self.family
        if self.is_first:
            ids = x
            seq = ids.shape[1]
            h = get(self, fam.embed)(ids)
            if fam.positions:
                pos = torch.arange(seq, device=ids.device).unsqueeze(0)
                h = h + get(self, fam.positions)(pos)
            if fam.dropout:
                h = get(self, fam.dropout)(h)
        else:
            # Between modules hidden states are local tensors (torchtitan's convention);
            # under sequence parallelism each rank holds its sequence shard.
            h = x
            seq = h.shape[1] * (self.tp_size if self.sequence_parallel else 1)
        kwargs = {}
        if self._rotary:
            pos = torch.arange(seq, device=h.device).unsqueeze(0)
            kwargs["position_embeddings"] = self._rotary[0](h, pos)
            kwargs["position_ids"] = pos
        for block in self.blocks():
            h = block(h, **kwargs)
            if isinstance(h, tuple):  # older transformers return (hidden, …)
                h = h[0]
            h = _local(h)
        if not self.is_last:
            return _local(h)
        h = get(self, fam.norm)(h)
        logits = get(self, fam.head)(h)
        return _local(logits)


def _local(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of one micro-batch (labels are already shifted)."""
    return nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1)
    )
