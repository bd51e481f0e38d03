"""`plait plan --export` files parsed by the engines' own code, so that an export an engine
rejects fails here: DeepSpeed's `DeepSpeedConfig` (which runs `_batch_assertion`),
torchtitan's `ConfigManager` (tyro and every `__post_init__` check) with its `ParallelDims`,
and Megatron-LM's `parse_args` + `validate_args` (megatron/training/arguments.py) where it
is importable.

Each engine's tests skip when the engine is not installed; CI installs DeepSpeed and
torchtitan from python/requirements-engines.txt (.ci/run). Megatron-LM's argument parser
is not on PyPI (`megatron-core` ships `megatron/core` only), so its test runs only where a
Megatron-LM checkout is on PYTHONPATH, e.g. `git archive d98e8a6 megatron | tar -x -C DIR`
and `PYTHONPATH=DIR`; torch is all it needs besides.
"""

import importlib
import json
import pathlib
import re
import shlex
import subprocess
import sys
import typing

import pytest

MODEL = "llama3-8b"


def export(plait_bin, tmp_path, engine, gpus, gbs=64, seq=4096, model=MODEL, **pins):
    """Runs `plait plan --export ENGINE` with the pins; returns (best plan, output dir)."""
    out = tmp_path / engine
    out.mkdir()
    argv = [plait_bin, "plan", "--json", "--model", model, "--gpus", str(gpus)]
    argv += ["--gbs", str(gbs), "--seq", str(seq), "--export", engine, "--out", str(out)]
    for k, v in pins.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        else:
            argv += [flag, str(v)]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["plans"], f"no plan for {pins}: {doc.get('infeasible')}"
    assert doc["exported"], doc
    return doc["plans"][0], out


# --- DeepSpeed ------------------------------------------------------------------------

DEEPSPEED_PLANS = [
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=1), id="zero1"),
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=2), id="zero2"),
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=3), id="zero3"),
    pytest.param(dict(gpus=8, tp=2, pp=1, zero=1), id="autotp2-zero1"),
    pytest.param(dict(gpus=16, tp=4, pp=1, zero=2), id="autotp4-zero2"),
    pytest.param(dict(gpus=8, tp=1, pp=4, zero=1), id="pipeline4-zero1"),
    pytest.param(dict(gpus=8, tp=1, pp=2, zero=0, recompute="full"), id="pipeline2-full"),
    # ZeRO-Offload: all of the state under ZeRO-2, half of it under ZeRO-3 (`ratio`).
    pytest.param(
        dict(gpus=8, tp=1, pp=1, zero=2, cluster="dgx-h100", optimizer_offload=1.0),
        id="zero2-offload",
    ),
    pytest.param(
        dict(gpus=8, tp=1, pp=1, zero=3, cluster="dgx-h100", optimizer_offload=0.5),
        id="zero3-offload-half",
    ),
]


class _PipelineGrid:
    """What `deepspeed.initialize` passes as `mpu` for a `PipelineModule` (its grid): the
    data-parallel size of DeepSpeed's own pipeline topology."""

    def __init__(self, pp, dp):
        from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

        self.topology = PipeDataParallelTopology(num_pp=pp, num_dp=dp)

    def get_data_parallel_world_size(self):
        return self.topology.get_dim("data")


def deepspeed_config(monkeypatch, path, config):
    """`DeepSpeedConfig` as `deepspeed.initialize` builds it on every rank of the plan's
    world: no mpu for AutoTP and data parallelism, the pipeline grid for pipelining."""
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    world = config["dp"] * config["tp"] * config["pp"]
    monkeypatch.setattr(ds_config.dist, "get_world_size", lambda group=None: world)
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda group=None: 0)
    mpu = _PipelineGrid(config["pp"], config["dp"]) if config["pp"] > 1 else None
    return ds_config.DeepSpeedConfig(str(path), mpu=mpu)


@pytest.mark.parametrize("pins", DEEPSPEED_PLANS)
def test_deepspeed_accepts_the_export(plait_bin, tmp_path, monkeypatch, pins):
    pytest.importorskip("deepspeed")
    best, out = export(plait_bin, tmp_path, "deepspeed", **pins)
    c = best["config"]
    for k in ("tp", "pp", "zero"):
        assert c[k] == pins[k], (k, c)
    cfg = deepspeed_config(monkeypatch, out / "ds_config.json", c)
    assert cfg.train_micro_batch_size_per_gpu == c["mbs"]
    assert cfg.gradient_accumulation_steps == best["microbatches"]
    assert cfg.zero_optimization_stage == c["zero"]
    if c["tp"] > 1:
        assert cfg.tensor_parallel_config.autotp_size == c["tp"]
    if c["pp"] > 1:
        assert cfg.pipeline["stages"] == c["pp"]
    # The global batch in sequences: DeepSpeed's count over its world, less the
    # tensor-parallel ranks that read the same sequences.
    assert cfg.train_batch_size // c["tp"] == 64
    offload = pins.get("optimizer_offload")
    if offload:
        section = cfg.zero_config.offload_optimizer
        assert section.device == "cpu" and section.pin_memory
        assert section.ratio == offload


def test_deepspeed_rejects_autotp_without_the_tensor_parallel_ranks(
    plait_bin, tmp_path, monkeypatch
):
    """The export's batch before the fix (micro × accumulation × dp) fails DeepSpeed's batch
    assertion under AutoTP: the test above would catch it coming back."""
    pytest.importorskip("deepspeed")
    best, out = export(plait_bin, tmp_path, "deepspeed", gpus=8, tp=2, pp=1, zero=1)
    path = out / "ds_config.json"
    doc = json.loads(path.read_text())
    doc["train_batch_size"] = 64
    path.write_text(json.dumps(doc))
    with pytest.raises(AssertionError, match="train_batch_size"):
        deepspeed_config(monkeypatch, path, best["config"])


# --- torchtitan -----------------------------------------------------------------------

TORCHTITAN_PLANS = [
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=0, cluster="dgx-b300"), id="replicate"),
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=1), id="fsdp-zero1"),
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=3, recompute="selective"), id="fsdp-zero3"),
    pytest.param(dict(gpus=8, tp=2, pp=1, zero=1, sp=True), id="tp2-sp"),
    pytest.param(dict(gpus=16, tp=2, pp=1, cp=2, zero=1, sp=True), id="cp2"),
    pytest.param(dict(gpus=8, tp=1, pp=4, zero=1, recompute="full"), id="pp4-1f1b"),
    pytest.param(
        dict(gpus=8, tp=1, pp=2, vp=2, zero=1, schedule="interleaved"), id="pp2-interleaved"
    ),
    # ZB-V: two chunks per rank in a V (ZBVZeroBubble); --schedule zb-v implies vp 2.
    pytest.param(dict(gpus=8, tp=1, pp=4, zero=1, schedule="zb-v"), id="pp4-zb-v"),
    # DeepSeek's DualPipeV, placed in a V as ZB-V (torch's ScheduleDualPipeV).
    pytest.param(dict(gpus=8, tp=1, pp=4, zero=1, schedule="dualpipe-v"), id="pp4-dualpipe-v"),
    pytest.param(
        dict(gpus=64, tp=8, pp=2, zero=1, sp=True, model="llama3-70b", seq=8192), id="70b"
    ),
    # Compiled blocks with async tensor parallelism (CompileConfig's own check needs both).
    pytest.param(dict(gpus=8, tp=2, zero=1, sp=True, compile=True, async_tp=True), id="tp2-async"),
    # The blocks compiled, the loss eager (torchtitan's `components = ["model"]`).
    pytest.param(dict(gpus=8, tp=1, zero=3, compile=True, compile_components="model"), id="blocks"),
]


@pytest.fixture
def torchtitan_config(monkeypatch):
    """Parses an exported `torchtitan_config.py` with torchtitan's `ConfigManager`."""
    config_mod = pytest.importorskip("torchtitan.config")

    def parse(out):
        monkeypatch.syspath_prepend(str(out))
        monkeypatch.delitem(sys.modules, "torchtitan_config", raising=False)
        importlib.invalidate_caches()
        args = ["--module", "torchtitan_config", "--config", "plait"]
        return config_mod.ConfigManager().parse_args(args)

    return parse


@pytest.mark.parametrize("pins", TORCHTITAN_PLANS)
def test_torchtitan_accepts_the_export(plait_bin, tmp_path, torchtitan_config, pins):
    pytest.importorskip("torchtitan")
    from torchtitan.distributed import ParallelDims

    gbs = 64
    best, out = export(plait_bin, tmp_path, "torchtitan", gbs=gbs, **pins)
    c = best["config"]
    text = (out / "torchtitan_config.py").read_text()
    assert text.startswith("# torchtitan 0.3.0 config module")
    cfg = torchtitan_config(out)
    p, t = cfg.parallelism, cfg.training
    dims = ParallelDims(
        dp_replicate=p.data_parallel_replicate_degree,
        dp_shard=p.data_parallel_shard_degree,
        cp=p.context_parallel_degree,
        tp=p.tensor_parallel_degree,
        pp=p.pipeline_parallel_degree,
        ep=p.expert_parallel_degree,
        world_size=pins["gpus"],
    )
    assert (dims.tp, dims.pp, dims.cp) == (c["tp"], c["pp"], c["cp"])
    assert dims.dp_replicate * dims.dp_shard == c["dp"]
    # trainer.py's batch checks and its accumulation steps.
    batch_degree = dims.dp_replicate * dims.dp_shard
    assert t.global_batch_size == gbs
    assert t.global_batch_size % (t.local_batch_size * batch_degree) == 0
    steps = t.global_batch_size // (t.local_batch_size * batch_degree)
    if c["pp"] > 1:
        assert steps == 1
        assert t.local_batch_size // p.pipeline_parallel_microbatch_size == best["microbatches"]
        assert len(p.module_fqns_per_model_part) == c["pp"] * c["vp"]
    else:
        assert steps == best["microbatches"]
    assert t.seq_len % dims.seq_len_divisor == 0
    assert cfg.compile.enable == bool(pins.get("compile"))
    assert cfg.compile.enable_async_tensor_parallel == bool(pins.get("async_tp"))
    components = pins.get("compile_components", "model,loss").split(",")
    assert sorted(cfg.compile.components) == sorted(components)
    names = {"none": "NoneType", "full": "Config", "selective": "Config"}
    assert type(cfg.activation_checkpoint).__name__ == names[c["recompute"]]
    if c["recompute"] != "none":
        kind = "FullAC" if c["recompute"] == "full" else "SelectiveAC"
        assert type(cfg.activation_checkpoint).__qualname__ == f"{kind}.Config"


def test_torchtitan_rejects_a_pipeline_with_cuda_graphs(plait_bin, tmp_path, torchtitan_config):
    """Without `disable_cuda_graphs` torchtitan 0.3.0 refuses pipelining: the parser has
    teeth, and the export must keep that line."""
    pytest.importorskip("torchtitan")
    _, out = export(plait_bin, tmp_path, "torchtitan", gpus=8, tp=1, pp=4, zero=1)
    path = out / "torchtitan_config.py"
    text = path.read_text()
    assert "    config.training.disable_cuda_graphs = True\n" in text
    path.write_text(text.replace("    config.training.disable_cuda_graphs = True\n", ""))
    with pytest.raises(SystemExit):
        torchtitan_config(out)


# --- Megatron-LM ----------------------------------------------------------------------

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "crates/spec/tests/fixtures/hf"

# A small Qwen3-MoE whose first two layers are dense (`mlp_only_layers`): the Megatron
# export writes --moe-layer-freq, both widths and --qk-layernorm.
QWEN3_MOE_MIXED = {
    "model_type": "qwen3_moe", "hidden_size": 1024, "intermediate_size": 3072,
    "moe_intermediate_size": 512, "num_hidden_layers": 8, "num_attention_heads": 16,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 8, "num_experts_per_tok": 2,
    "mlp_only_layers": [0, 1], "decoder_sparse_step": 1, "vocab_size": 32000,
    "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "hidden_act": "silu", "norm_topk_prob": True,
}

# A small DeepSeek-V3: MLA with YaRN, sigmoid routing with expert bias over groups, a dense
# first layer, a shared expert and one MTP layer.
DEEPSEEK_V3_SMALL = {
    "model_type": "deepseek_v3", "hidden_size": 1024, "intermediate_size": 2816,
    "moe_intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 8, "q_lora_rank": 256, "kv_lora_rank": 128,
    "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 4, "topk_group": 1,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 1, "vocab_size": 32000,
    "max_position_embeddings": 16384, "rope_theta": 10000, "rms_norm_eps": 1e-6,
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "tie_word_embeddings": False, "hidden_act": "silu",
}

# A small Nemotron 3 Super: Mamba-2, LatentMoE (experts at moe_latent_size) and attention
# layers (nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16's keys at toy sizes).
NEMOTRON_3_SUPER_SMALL = {
    "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
    "hidden_size": 1024, "num_hidden_layers": 6, "hybrid_override_pattern": "MEM*EM",
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
    "mamba_num_heads": 32, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
    "conv_kernel": 4, "chunk_size": 128, "n_routed_experts": 16, "n_shared_experts": 1,
    "num_experts_per_tok": 4, "moe_intermediate_size": 512, "moe_latent_size": 256,
    "moe_shared_expert_intermediate_size": 1024, "mlp_hidden_act": "relu2", "n_group": 1,
    "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 5.0,
    "vocab_size": 32000, "tie_word_embeddings": False,
}

# A small Qwen2 with YaRN outside multi-latent attention (Megatron's --position-embedding-type
# yarn), its band left unrounded as GPT-OSS's is (`truncate: false`).
QWEN2_YARN_SMALL = {
    "model_type": "qwen2", "hidden_size": 1024, "intermediate_size": 2816,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
    "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1000000,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "hidden_act": "silu",
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192,
                     "truncate": False},
}

MEGATRON_PLANS = [
    pytest.param(dict(gpus=8, tp=2, pp=1, zero=1), id="tp2"),
    pytest.param(dict(gpus=16, tp=2, pp=4, zero=1, vp=2, schedule="interleaved"), id="pp4-vp2"),
    pytest.param(dict(gpus=8, tp=1, pp=1, zero=3), id="fsdp"),
    pytest.param(dict(gpus=16, tp=2, pp=1, cp=2, zero=1, recompute="selective"), id="cp2"),
    # Ulysses (--cp-comm-type a2a) and the key/value all-gather.
    pytest.param(dict(gpus=16, tp=2, pp=1, cp=2, zero=1, cp_comm="a2a"), id="cp2-a2a"),
    pytest.param(dict(gpus=16, tp=2, pp=1, cp=2, zero=1, cp_comm="allgather"), id="cp2-allgather"),
    pytest.param(dict(gpus=16, tp=2, pp=1, ep=8, zero=1, model="mixtral-8x7b"), id="moe-ep8"),
    # Qwen3: RMSNorm on each head's q and k (--qk-layernorm).
    pytest.param(dict(gpus=8, tp=2, pp=1, zero=1, model=str(FIXTURES / "qwen3-8b.json")), id="qwen3"),
    pytest.param(dict(gpus=8, tp=1, pp=1, ep=4, zero=1, model="qwen3-moe-mixed"), id="qwen3-moe-mixed"),
    pytest.param(dict(gpus=8, tp=1, pp=1, ep=4, zero=1, model="deepseek-v3-small"), id="deepseek-v3"),
    pytest.param(dict(gpus=8, tp=2, pp=1, zero=1, model="qwen2-yarn-small"), id="qwen2-yarn"),
    # Experts unsplit beside tp 2 (--expert-tensor-parallel-size 1): ep 8 takes tp ranks too.
    pytest.param(
        dict(gpus=16, tp=2, pp=1, ep=8, etp=1, zero=1, model="mixtral-8x7b"), id="moe-etp1"
    ),
    # Llama 3.1's RoPE rescaling (--use-rope-scaling --rope-scaling-factor 8).
    pytest.param(dict(gpus=256, tp=8, pp=8, zero=1, model="llama3-405b"), id="llama31-rope"),
    # Mamba-2 hybrids: the layer pattern carries the layers and the pipeline segments.
    pytest.param(dict(gpus=16, tp=2, pp=2, zero=1, model="nemotron-h-8b"), id="hybrid-pp2"),
    pytest.param(
        dict(gpus=16, tp=2, pp=2, vp=2, zero=1, schedule="interleaved", model="nemotron-h-8b"),
        id="hybrid-pp2-vp2",
    ),
    pytest.param(
        dict(gpus=8, tp=1, pp=1, ep=4, zero=1, model="nemotron-3-super-small"), id="latent-moe"
    ),
    # Megatron-Core's flex dispatcher over HybridEP (--moe-dispatcher hybridep).
    pytest.param(
        dict(gpus=16, tp=1, pp=1, ep=8, zero=1, model="mixtral-8x7b", moe_dispatcher="hybridep"),
        id="moe-hybridep",
    ),
]

NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"




def megatron_args(path):
    """The `MEGATRON_ARGS=( … )` array of `megatron_args.sh`, as argv words."""
    body = re.search(r"^MEGATRON_ARGS=\(\n(.*?)^\)", path.read_text(), re.S | re.M).group(1)
    return shlex.split(body, comments=True)


@pytest.mark.parametrize("pins", MEGATRON_PLANS)
def test_megatron_parses_the_export(plait_bin, tmp_path, monkeypatch, pins):
    if not hasattr(typing, "override"):
        # Megatron-LM (d98e8a6, megatron/training/models/hybrid.py) imports typing.override,
        # new in Python 3.12; typing_extensions (a torch dependency) has the same decorator.
        typing_extensions = pytest.importorskip("typing_extensions")
        monkeypatch.setattr(typing, "override", typing_extensions.override, raising=False)
    try:
        arguments = importlib.import_module("megatron.training.arguments")
    except ImportError as e:
        pytest.skip(
            "Megatron-LM's megatron/training/arguments.py is not importable (PyPI's "
            f"megatron-core ships megatron/core only; put a Megatron-LM checkout on PYTHONPATH): {e}"
        )
    configs = {
        "qwen3-moe-mixed": QWEN3_MOE_MIXED,
        "deepseek-v3-small": DEEPSEEK_V3_SMALL,
        "qwen2-yarn-small": QWEN2_YARN_SMALL,
        "nemotron-3-super-small": NEMOTRON_3_SUPER_SMALL,
    }
    name = pins.get("model")
    if name in configs:
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(configs[name]))
        pins = {**pins, "model": str(path)}
    best, out = export(plait_bin, tmp_path, "megatron", **pins)
    script = out / "megatron_args.sh"
    argv = megatron_args(script)
    # The environment the script exports (CUDA_DEVICE_MAX_CONNECTIONS=1 for TP/CP overlap,
    # which validate_args checks), as `source megatron_args.sh` would set it.
    for var, value in re.findall(r"^export (\w+)=(\S+)$", script.read_text(), re.M):
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py"] + argv)
    # torchrun's environment for rank 0 of the plan's world: validate_args checks the degrees
    # against it (divisibility, schedule and ZeRO constraints) as pretrain_gpt.py does.
    monkeypatch.setenv("WORLD_SIZE", str(pins["gpus"]))
    monkeypatch.setenv("RANK", "0")
    # validate_args asks the GPU's architecture (Megatron-LM d98e8a6 arguments.py:1454, 1379):
    # answer for the plan's cluster, dgx-a100-80g (Ampere, compute capability 8.0).
    monkeypatch.setattr(arguments, "get_device_arch_version", lambda: 8)
    monkeypatch.setattr(arguments.torch.cuda, "get_device_capability", lambda *a: (8, 0))
    args = arguments.parse_args(ignore_unknown_args=False)
    arguments.validate_args(args)
    c = best["config"]
    assert args.tensor_model_parallel_size == c["tp"]
    assert args.pipeline_model_parallel_size == c["pp"]
    assert args.context_parallel_size == c["cp"]
    assert args.cp_comm_type == [c["cp_comm"]]
    assert args.expert_model_parallel_size == c["ep"]
    # plait's default expert tp (`ParallelConfig::default_expert_tp`): 1 with sequence
    # parallelism or without tp, else tp; a model without experts keeps Megatron's (tp).
    default_etp = 1 if c["sp"] or c["tp"] == 1 else c["tp"]
    expected_etp = c["etp"] or (default_etp if args.num_experts else c["tp"])
    assert args.expert_tensor_parallel_size == expected_etp
    assert args.data_parallel_size == c["dp"]
    assert args.sequence_parallel == c["sp"]
    assert args.micro_batch_size == c["mbs"]
    assert args.global_batch_size == 64
    if args.num_experts:
        # The local experts run as one grouped GEMM, as plait costs them under `megatron`.
        assert args.moe_grouped_gemm
    if pins.get("model") == "llama3-405b":
        assert args.use_rope_scaling and args.rope_scaling_factor == 8.0
        assert args.rotary_base == 500000
    if "qwen3" in (name or ""):
        assert args.qk_layernorm
    if name == "qwen3-moe-mixed":
        # Megatron built the layer mix plait costed: two dense layers, then six MoE ones.
        assert args.moe_layer_freq == [0, 0, 1, 1, 1, 1, 1, 1]
        assert (args.ffn_hidden_size, args.moe_ffn_hidden_size) == (3072, 512)
    if name == "deepseek-v3-small":
        assert args.multi_latent_attention and args.qk_layernorm
        assert (args.q_lora_rank, args.kv_lora_rank) == (256, 128)
        assert (args.qk_head_dim, args.qk_pos_emb_head_dim, args.v_head_dim) == (64, 32, 64)
        assert args.rope_type == "yarn" and args.rotary_scaling_factor == 4
        assert (args.mscale, args.mscale_all_dim) == (1.0, 1.0)
        assert args.moe_router_score_function == "sigmoid"
        assert args.moe_router_enable_expert_bias
        assert (args.moe_router_num_groups, args.moe_router_group_topk) == (4, 1)
        assert args.moe_router_topk_scaling_factor == 2.5
        assert args.moe_layer_freq == [0, 1, 1, 1]
        assert (args.ffn_hidden_size, args.moe_ffn_hidden_size) == (2816, 512)
        assert args.moe_shared_expert_intermediate_size == 512
        assert args.mtp_num_layers == 1
    if name == "qwen2-yarn-small":
        assert args.position_embedding_type == "yarn" and args.rotary_scaling_factor == 4
        assert args.yarn_original_max_position_embeddings == 8192
        assert (args.yarn_beta_fast, args.yarn_beta_slow) == (32, 1)
        assert args.yarn_correction_range_round_to_int is False
    if pins.get("moe_dispatcher") == "hybridep":
        assert args.moe_token_dispatcher_type == "flex"
        assert args.moe_flex_dispatcher_backend == "hybridep"
    if name == "nemotron-3-super-small":
        assert args.hybrid_layer_pattern == "MEM*EM"
        assert args.moe_latent_size == 256 and args.num_experts == 16
        assert args.moe_shared_expert_intermediate_size == 1024
    if pins.get("model") == "nemotron-h-8b":
        # Megatron derived the layers and the virtual stages from the pattern.
        assert args.hybrid_layer_pattern.replace("|", "") == NEMOTRON_H_8B_PATTERN
        assert args.hybrid_layer_pattern.count("|") == c["pp"] * c["vp"] - 1
        assert args.num_layers == 52
        assert (args.virtual_pipeline_model_parallel_size or 1) == c["vp"]
        assert args.squared_relu and args.position_embedding_type == "none"
        assert (args.mamba_num_heads, args.mamba_head_dim) == (128, 64)
        assert (args.mamba_num_groups, args.mamba_state_dim) == (8, 128)


def test_megatron_args_reader_reads_the_array(plait_bin, tmp_path):
    """The reader above, checked where Megatron-LM is absent too."""
    _, out = export(plait_bin, tmp_path, "megatron", gpus=8, tp=2, pp=1, zero=1)
    argv = megatron_args(pathlib.Path(out) / "megatron_args.sh")
    assert argv[argv.index("--tensor-model-parallel-size") + 1] == "2"
    assert all(not a.startswith("#") for a in argv)


def test_the_package_writes_both_torchtitan_forms(tmp_path):
    """`plait.plan(export=…)` passes the keywords through: the 0.3 module and the 0.2 TOML."""
    plait = pytest.importorskip("plait")
    new = plait.plan(MODEL, gpus=8, gbs=64, zero=1, tp=1, pp=1, export="torchtitan", out=tmp_path)
    assert new.exported == [str(tmp_path / "torchtitan_config.py")]
    old = plait.plan(
        MODEL, gpus=8, gbs=64, zero=1, tp=1, pp=1, export="torchtitan-0.2", out=tmp_path
    )
    assert old.exported == [str(tmp_path / "torchtitan.toml")]
    assert (tmp_path / "torchtitan.toml").read_text().startswith("# torchtitan 0.2.2 job config")
