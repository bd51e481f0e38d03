"""The Python API against the `plait` binary: same JSON (parsed, compared for equality), same
errors, the model given every way it can be."""

import ast
import inspect
import json
import pathlib
import subprocess

import pytest

import plait

STUBS = pathlib.Path(plait.__file__).with_name("__init__.pyi")


def cli(plait_bin, *args, files=()):
    """Runs the binary; returns its parsed --json output (and the parsed JSON `files`)."""
    out = subprocess.run(
        [plait_bin, *args], check=True, capture_output=True, text=True
    ).stdout
    doc = json.loads(out)
    if files:
        return (doc, *[json.loads(pathlib.Path(f).read_text()) for f in files])
    return doc


def without_timing(plan_doc):
    """A plan document without the search's wall time, the one field that differs per run."""
    doc = json.loads(json.dumps(plan_doc))
    assert doc["search"]["elapsed_s"] >= 0.0
    del doc["search"]["elapsed_s"]
    return doc


LLAMA = dict(
    model_type="llama",
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=8,
    vocab_size=32000,
    max_position_embeddings=4096,
)


# --------------------------------------------------------------------------------------------
# The same numbers as the command line


ESTIMATES = [
    (dict(model="llama3-8b", gpus=8, tp=2, gbs=64), ["--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--gbs", "64"]),
    (
        dict(gpus=64, tp=8, pp=4, vp=2, gbs=64, zero=1, sp=True, recompute="selective"),
        ["--gpus", "64", "--tp", "8", "--pp", "4", "--vp", "2", "--gbs", "64", "--zero", "1", "--sp", "--recompute", "selective"],
    ),
    (
        dict(model="mixtral-8x7b", cluster="dgx-h100", gpus=16, tp=2, ep=4, gbs=32, seq=4096, dtype="fp8", engine="torchtitan", moe_skew=1.5),
        ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--ep", "4", "--gbs", "32", "--seq", "4096", "--dtype", "fp8", "--engine", "torchtitan", "--moe-skew", "1.5"],
    ),
    (
        dict(model="mixtral-8x7b", cluster="dgx-h100", gpus=16, tp=2, ep=8, etp=1, sp=True, gbs=32, seq=4096),
        ["--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--tp", "2", "--ep", "8", "--etp", "1", "--sp", "--gbs", "32", "--seq", "4096"],
    ),
    (
        dict(model="llama2-7b", config="dp4 tp2 mbs2 zero3 recompute=full", gbs=32, dropout=True, no_overlap_grad_reduce=True, attention="unfused"),
        ["--model", "llama2-7b", "--config", "dp4 tp2 mbs2 zero3 recompute=full", "--gbs", "32", "--dropout", "--no-overlap-grad-reduce", "--attention", "unfused"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h200", gpus=16, pp=4, gbs=64, schedule="zb-h1", simulate=True),
        ["--model", "llama3-8b", "--cluster", "dgx-h200", "--gpus", "16", "--pp", "4", "--gbs", "64", "--schedule", "zb-h1", "--simulate"],
    ),
    (
        dict(model="llama4-scout", cluster="dgx-h100", gpus=64, tp=2, pp=4, ep=8, sp=True, gbs=64, seq=8192, recompute="full", recompute_layers=4),
        ["--model", "llama4-scout", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "2", "--pp", "4", "--ep", "8", "--sp", "--gbs", "64", "--seq", "8192", "--recompute", "full", "--recompute-layers", "4"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h200", gpus=8, gbs=16, no_profile=True),
        ["--model", "llama3-8b", "--cluster", "dgx-h200", "--gpus", "8", "--gbs", "16", "--no-profile"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h100", gpus=8, pp=4, gbs=32, pipeline_layout="Et*7|t*9|t*9|t*7L"),
        ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--pp", "4", "--gbs", "32", "--pipeline-layout", "Et*7|t*9|t*9|t*7L"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-b200", gpus=8, gbs=32, dtype="nvfp4", bf16_first_layers=1, bf16_last_layers=4),
        ["--model", "llama3-8b", "--cluster", "dgx-b200", "--gpus", "8", "--gbs", "32", "--dtype", "nvfp4", "--bf16-first-layers", "1", "--bf16-last-layers", "4"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h100", gpus=8, gbs=64, seq=4096, task="sft", sample_lengths="512:1,3584:1"),
        ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64", "--seq", "4096", "--task", "sft", "--sample-lengths", "512:1,3584:1"],
    ),
    (
        dict(model="llama3-8b", cluster="gb200-nvl72", gpus=8, gbs=32, zero=3, cpu_offload_layers=8),
        ["--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "8", "--gbs", "32", "--zero", "3", "--cpu-offload-layers", "8"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h100", gpus=8, gbs=64, zero=1, dtype="fp8", no_fp8_param_gather=True),
        ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64", "--zero", "1", "--dtype", "fp8", "--no-fp8-param-gather"],
    ),
    (
        dict(model="qwen3-30b-a3b", cluster="dgx-b200", gpus=8, gbs=64, seq=4096, dtype="mxfp8", ep=8, cuda_graphs="layers"),
        ["--model", "qwen3-30b-a3b", "--cluster", "dgx-b200", "--gpus", "8", "--gbs", "64", "--seq", "4096", "--dtype", "mxfp8", "--ep", "8", "--cuda-graphs", "layers"],
    ),
    (
        dict(model="llama3-8b", cluster="dgx-h100", gpus=8, gbs=64, zero=1, optimizer_offload=0.5),
        ["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64", "--zero", "1", "--optimizer-offload", "0.5"],
    ),
]


@pytest.mark.parametrize("kwargs,argv", ESTIMATES)
def test_estimate_equals_cli_json(plait_bin, kwargs, argv):
    e = plait.estimate(**kwargs)
    assert isinstance(e, plait.Estimate)
    expected = cli(plait_bin, "estimate", *argv, "--json")
    assert e.to_dict() == expected
    # Attributes are the JSON's fields, nested objects too.
    assert e.iteration_time_s == expected["iteration_time_s"]
    assert e.config.tp == expected["config"]["tp"]
    assert e.breakdown.compute_s == expected["breakdown"]["compute_s"]
    assert e.stages[0].memory.weights_bytes == expected["stages"][0]["memory"]["weights_bytes"]
    assert e["layers"][0].to_dict() == expected["layers"][0]
    assert e.pipeline == ("simulated" if kwargs.get("simulate") else "closed-form")


def test_estimate_inputs_reach_the_command_line():
    """Each configuration argument changes the answer the way its flag does."""
    base = plait.estimate("llama3-8b", gpus=8, gbs=64)
    assert base.config.tp == 1 and base.config.dp == 8
    tp = plait.estimate("llama3-8b", gpus=8, gbs=64, tp=4)
    assert (tp.config.tp, tp.config.dp) == (4, 2)
    assert tp.iteration_time_s != base.iteration_time_s
    bf16 = plait.estimate("llama3-8b", cluster="dgx-h100", gpus=8, gbs=64)
    fp8 = plait.estimate("llama3-8b", cluster="dgx-h100", gpus=8, gbs=64, dtype="fp8")
    assert fp8.iteration_time_s < bf16.iteration_time_s < base.iteration_time_s
    assert plait.estimate("llama3-8b", gpus=8, gbs=64, vp=2, pp=2).config.schedule == "interleaved"
    eager = plait.estimate("llama3-8b", cluster="dgx-h100", gpus=8, gbs=16, seq=8192, engine="torchtitan")
    compiled = plait.estimate(
        "llama3-8b", cluster="dgx-h100", gpus=8, gbs=16, seq=8192, engine="torchtitan", compile=True
    )
    assert compiled.iteration_time_s < eager.iteration_time_s
    with pytest.raises(plait.PlaitError, match="--compile"):
        plait.estimate("llama3-8b", gpus=8, gbs=64, compile=True)
    # torchao's float8 recipes: row-wise quantises every operand again in the backward.
    titan = dict(cluster="dgx-h100", gpus=8, gbs=16, seq=8192, engine="torchtitan", dtype="fp8")
    tensorwise = plait.estimate("llama3-8b", **titan)
    rowwise = plait.estimate("llama3-8b", float8_recipe="rowwise", **titan)
    assert rowwise.iteration_time_s > tensorwise.iteration_time_s
    with pytest.raises(plait.PlaitError, match="--float8-recipe"):
        plait.estimate("llama3-8b", cluster="dgx-h100", gpus=8, gbs=64, dtype="fp8", float8_recipe="rowwise")


def test_text_output_equals_the_binary(plait_bin):
    """plait.run is the binary in-process: the very text it prints."""
    for argv in (
        ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2", "--gbs", "64"],
        ["schedule", "--schedule", "zb-h1", "--stages", "4", "--microbatches", "8"],
    ):
        printed = subprocess.run([plait_bin, *argv], check=True, capture_output=True, text=True).stdout
        assert plait.run(argv) == printed
    assert plait.run(["--version"]) == subprocess.run(
        [plait_bin, "--version"], check=True, capture_output=True, text=True
    ).stdout


def test_plan_equals_cli_json(plait_bin):
    r = plait.plan("llama3-8b", gpus=64, gbs=128, top=3)
    assert isinstance(r, plait.PlanResult)
    expected = cli(plait_bin, "plan", "--model", "llama3-8b", "--gpus", "64", "--gbs", "128", "--top", "3", "--json")
    assert without_timing(r.to_dict()) == without_timing(expected)
    assert len(r.plans) == 3 and all(isinstance(p, plait.Plan) for p in r.plans)
    assert r.best.to_dict() == expected["plans"][0]
    assert r.best.estimate.iteration_time_s == expected["plans"][0]["estimate"]["iteration_time_s"]
    assert r.infeasible is None and r.ir is None


def test_plan_pins_are_the_cli_pins(plait_bin):
    r = plait.plan(
        "llama3-8b", gpus=32, gbs=64, tp=2, pp=2, sp=False, recompute="full", schedule="1f1b",
        zero=1, top=2, simulate=4, threads=1, engine="plait",
    )
    expected = cli(
        plait_bin, "plan", "--model", "llama3-8b", "--gpus", "32", "--gbs", "64", "--tp", "2",
        "--pp", "2", "--no-sp", "--recompute", "full", "--schedule", "1f1b", "--zero", "1",
        "--top", "2", "--simulate", "4", "--threads", "1", "--engine", "plait", "--json",
    )
    assert without_timing(r.to_dict()) == without_timing(expected)
    for p in r.plans:
        c = p.config
        assert (c.tp, c.pp, c.sp, c.recompute, c.schedule, c.zero) == (2, 2, False, "full", "1f1b", 1)
    assert r.search.threads == 1
    required = plait.plan("llama3-8b", gpus=32, gbs=64, tp=2, sp=True, top=2)
    assert all(p.config.sp for p in required.plans)


def test_plan_searches_the_expert_knobs_unless_pinned(plait_bin):
    # Megatron-Core's all-to-all overlap and dispatcher: searched when left out (None), pinned
    # on or off as `--moe-a2a-overlap` / `--no-moe-a2a-overlap` pin them.
    moe = dict(cluster="dgx-h100", gpus=64, gbs=512, seq=4096, dtype="fp8", ep=32, pp=2, vp=2, top=1, threads=1)
    searched = plait.plan("qwen3-30b-a3b", **moe)
    off = plait.plan("qwen3-30b-a3b", moe_a2a_overlap=False, moe_dispatcher="alltoall", **moe)
    expected = cli(
        plait_bin, "plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100", "--gpus", "64",
        "--gbs", "512", "--seq", "4096", "--dtype", "fp8", "--ep", "32", "--pp", "2", "--vp", "2",
        "--top", "1", "--threads", "1", "--no-moe-a2a-overlap", "--moe-dispatcher", "alltoall",
        "--json",
    )
    assert without_timing(off.to_dict()) == without_timing(expected)
    assert searched.best.config.moe_a2a_overlap is True
    assert "moe_a2a_overlap" not in off.to_dict()["plans"][0]["config"]
    assert searched.best.estimate.iteration_time_s < off.best.estimate.iteration_time_s


def test_plan_ir_is_the_cli_ir(plait_bin, tmp_path):
    r = plait.plan("llama3-8b", gpus=16, gbs=64, pp=4, top=1, ir=True)
    ir_file = tmp_path / "ir.json"
    expected, ir = cli(
        plait_bin, "plan", "--model", "llama3-8b", "--gpus", "16", "--gbs", "64", "--pp", "4",
        "--top", "1", "--ir", str(ir_file), "--json", files=[ir_file],
    )
    assert without_timing(r.to_dict()) == without_timing(expected)
    assert r.ir == ir
    assert len(r.ir["ranks"]) == 4


def test_plan_export_writes_the_engine_files(tmp_path):
    r = plait.plan("llama3-8b", gpus=16, gbs=64, export="megatron", out=tmp_path)
    assert r.exported == [str(tmp_path / "megatron_args.sh")]
    assert "--tensor-model-parallel-size" in (tmp_path / "megatron_args.sh").read_text()


def test_simulate_equals_cli_json_and_ir(plait_bin, tmp_path):
    s = plait.simulate("llama3-8b", gpus=16, pp=4, vp=2, gbs=64, recompute="selective", ir=True, svg=tmp_path / "t.svg")
    assert isinstance(s, plait.Simulation)
    ir_file = tmp_path / "ir.json"
    expected, ir = cli(
        plait_bin, "simulate", "--model", "llama3-8b", "--gpus", "16", "--pp", "4", "--vp", "2",
        "--gbs", "64", "--recompute", "selective", "--ir", str(ir_file), "--json", files=[ir_file],
    )
    assert s.to_dict() == expected
    assert s.ir == ir and s.ir["chunks"] == 2
    assert (tmp_path / "t.svg").read_text().startswith("<svg")
    assert plait.simulate("llama3-8b", gpus=8, gbs=16).ir is None


SCHEDULES = [
    (dict(), []),
    (dict(schedule="gpipe", stages=3, microbatches=5), ["--schedule", "gpipe", "--stages", "3", "--microbatches", "5"]),
    (dict(schedule="interleaved", stages=4, microbatches=8, virtual=2, comm=0.25), ["--schedule", "interleaved", "--stages", "4", "--microbatches", "8", "--virtual", "2", "--comm", "0.25"]),
    (dict(schedule="zb-h1", stages=4, microbatches=8, backward=2, weight=1), ["--schedule", "zb-h1", "--stages", "4", "--microbatches", "8", "--backward", "2.0", "--weight", "1.0"]),
    (dict(schedule="scp", stages=4, microbatches=8, forward=1, backward=2, recompute=1), ["--schedule", "scp", "--stages", "4", "--microbatches", "8", "--forward", "1", "--backward", "2", "--recompute", "1"]),
    (dict(schedule="1f1b", stages=2, microbatches=3, forward=0.1, backward=0.30000000000000004), ["--stages", "2", "--microbatches", "3", "--forward", "0.1", "--backward", "0.30000000000000004"]),
]


@pytest.mark.parametrize("kwargs,argv", SCHEDULES)
def test_schedule_equals_cli_json_and_ir(plait_bin, tmp_path, kwargs, argv):
    s = plait.schedule(**kwargs)
    assert isinstance(s, plait.Schedule)
    ir_file = tmp_path / "ir.json"
    expected, ir = cli(plait_bin, "schedule", *argv, "--ir", str(ir_file), "--json", files=[ir_file])
    assert s.to_dict() == expected
    assert s.ir == ir
    # The IR is plain data: one instruction list per rank, each instruction a dict.
    assert type(s.ir) is dict and type(s.ir["ranks"]) is list
    assert len(s.ir["ranks"]) == s.stages
    assert sum(len(r) for r in s.ir["ranks"]) == s.instructions
    assert {"op", "microbatch", "chunk"} <= set(s.ir["ranks"][0][0])
    assert "ir" not in s.to_dict()


def test_schedule_closed_form_through_the_api():
    """ZB-H1 with m ≥ p and W ≤ min(F, B): m(F + B) + (p − 1)(F + Bi − W), as README says."""
    s = plait.schedule("zb-h1", stages=4, microbatches=8, backward=2, weight=1)
    assert s.makespan == s.closed_form_makespan == 27.0


# --------------------------------------------------------------------------------------------
# The model as a preset, a file, a directory, a dict and a transformers config


def test_model_file_and_directory(plait_bin, tmp_path):
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    args = ["--gpus", "4", "--tp", "2", "--gbs", "16"]
    by_dir = plait.estimate(str(d), gpus=4, tp=2, gbs=16)
    assert by_dir.to_dict() == cli(plait_bin, "estimate", "--model", str(d), *args, "--json")
    assert by_dir.model == "my-llama"
    by_path = plait.estimate(d / "config.json", gpus=4, tp=2, gbs=16)  # a pathlib.Path
    assert by_path.to_dict() == by_dir.to_dict()
    assert plait.plan(d, gpus=4, gbs=16, top=1).model == "my-llama"


def test_model_dict_equals_the_same_config_file(plait_bin, tmp_path):
    f = tmp_path / "llama.json"
    f.write_text(json.dumps(LLAMA))
    args = ["--gpus", "8", "--pp", "2", "--gbs", "32"]
    e = plait.estimate(LLAMA, gpus=8, pp=2, gbs=32)
    assert e.to_dict() == cli(plait_bin, "estimate", "--model", str(f), *args, "--json")
    assert e.model == "llama"
    named = plait.estimate({**LLAMA, "_name_or_path": "acme/llama-tiny"}, gpus=8, pp=2, gbs=32)
    assert named.model == "acme/llama-tiny"
    deeper = plait.estimate({**LLAMA, "num_hidden_layers": 16}, gpus=8, pp=2, gbs=32)
    assert deeper.iteration_time_s > e.iteration_time_s


def test_model_transformers_config(plait_bin, tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=8, vocab_size=32000,
    )
    f = tmp_path / "llama.json"
    f.write_text(json.dumps(config.to_dict()))
    e = plait.estimate(config, gpus=8, tp=2, gbs=32, seq=1024)
    expected = cli(plait_bin, "estimate", "--model", str(f), "--gpus", "8", "--tp", "2", "--gbs", "32", "--seq", "1024", "--json")
    assert e.to_dict() == expected
    r = plait.plan(config, gpus=8, gbs=32, seq=1024, top=2)
    expected = cli(plait_bin, "plan", "--model", str(f), "--gpus", "8", "--gbs", "32", "--seq", "1024", "--top", "2", "--json")
    assert without_timing(r.to_dict()) == without_timing(expected)
    # The config's shape reaches the cost model.
    wider = transformers.LlamaConfig(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=8, vocab_size=32000,
    )
    assert plait.estimate(wider, gpus=8, tp=2, gbs=32, seq=1024).iteration_time_s > e.iteration_time_s


# --------------------------------------------------------------------------------------------
# Errors


ERRORS = [
    (plait.estimate, dict(tp=0), plait.ConfigError, "tp", ["--tp", "integers ≥ 1"]),
    (plait.estimate, dict(gpus=7, tp=2), plait.ConfigError, "gpus", ["7 GPUs", "multiples of 2"]),
    (plait.estimate, dict(zero=4), plait.ConfigError, "zero", ["0|1|2|3"]),
    (plait.estimate, dict(dtype="fp4"), plait.ConfigError, "dtype", ["--dtype", "bf16|fp16|fp8"]),
    (plait.estimate, dict(schedule="zz"), plait.ConfigError, "schedule", ["gpipe|1f1b|interleaved|zb-h1|scp"]),
    (plait.estimate, dict(dtype="--help"), plait.ConfigError, "dtype", ["`--help` is not one of bf16|fp16|fp8"]),
    (plait.estimate, dict(config="dp2 tp2", tp=2), plait.ConfigError, "config", ["'--config <CONFIG>' cannot be used with '--tp <TP>'"]),
    (plait.estimate, dict(model="llama3-8b", gpus=6, tp=3), plait.ConfigError, "tp", ["attention heads", "divisors of 32"]),
    (plait.estimate, dict(moe_skew=0.5), plait.ConfigError, "moe_skew", ["--moe-skew", "from 1 to 64"]),
    (plait.estimate, dict(model="no-such-model"), plait.ModelError, "model", ["no-such-model", "llama3-8b", "allowed"]),
    (plait.estimate, dict(model="/no/such/config.json"), plait.ModelError, "model", ["--model", "/no/such/config.json"]),
    (plait.estimate, dict(cluster="no-such-cluster"), plait.ClusterError, "cluster", ["dgx-h100", "allowed"]),
    (plait.estimate, dict(cluster="/no/such/cluster.toml"), plait.ClusterError, "cluster", ["--cluster", "cannot read"]),
    (plait.plan, dict(), plait.ConfigError, "gpus", ["--gpus", "number of GPUs"]),
    (plait.plan, dict(gpus=8, recompute="sometimes"), plait.ConfigError, "recompute", ["none|selective|full", "auto"]),
    (plait.plan, dict(gpus=8, export="deepspeed", engine="megatron"), plait.ConfigError, "engine", ["contradicts --export"]),
    (plait.simulate, dict(gpus=8, mbs=0), plait.ConfigError, "mbs", ["--mbs"]),
    (plait.schedule, dict(stages=0), plait.ConfigError, "stages", ["--stages", "integers ≥ 1"]),
    (plait.schedule, dict(backward=1, weight=2), plait.ConfigError, "weight", ["cannot exceed"]),
    (plait.schedule, dict(schedule="zz"), plait.ConfigError, "schedule", ["gpipe|1f1b"]),
]


@pytest.mark.parametrize("fn,kwargs,cls,flag,texts", ERRORS)
def test_errors_raise_the_subclass_naming_the_field(fn, kwargs, cls, flag, texts):
    with pytest.raises(cls) as info:
        fn(**kwargs)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, plait.PlaitError)
    assert e.flag == flag
    for t in texts:
        assert t in str(e)
    assert not str(e).startswith("error:") and "try '--help'" not in str(e) and "Usage:" not in str(e)


def test_model_errors_from_a_dict_name_the_key_not_a_temporary_file():
    with pytest.raises(plait.ModelError) as info:
        plait.estimate({**LLAMA, "hidden_size": "wide"})
    e = info.value
    assert e.field == "hidden_size" and e.flag == "model"
    assert str(e).startswith("model (dict): `hidden_size`:")
    assert "plait-" not in str(e) and e.source == "model (dict)"


def test_model_errors_from_a_file_name_the_file_and_key(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA, "num_attention_heads": 0}))
    with pytest.raises(plait.ModelError) as info:
        plait.estimate(d)
    assert info.value.field == "num_attention_heads"
    assert str(d / "config.json") in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(plait.ModelError, match="without a config.json"):
        plait.estimate(tmp_path / "empty")


def test_cluster_file_errors_are_cluster_errors(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('name = "x"\n')
    with pytest.raises(plait.ClusterError) as info:
        plait.estimate(cluster=f)
    assert str(f) in str(info.value)


def test_infeasible_plan_is_an_answer_and_best_raises():
    r = plait.plan("gpt-1t", gpus=1)
    assert r.plans == [] and r.infeasible is not None
    assert r.infeasible.min_gpus == 208 and r.infeasible.min_gpus_lower_bound == 193
    with pytest.raises(plait.InfeasibleError, match="the smallest GPU count with a plan is 208"):
        r.best


TYPE_ERRORS = [
    (plait.estimate, dict(tp="8"), "`tp` must be an int"),
    (plait.estimate, dict(tp=True), "`tp` must be an int"),
    (plait.estimate, dict(gpus=8.0), "`gpus` must be an int"),
    (plait.estimate, dict(sp=1), "`sp` must be a bool"),
    (plait.estimate, dict(model=42), "`model` must be a preset name"),
    (plait.estimate, dict(cluster=3), "`cluster` must be a str or path"),
    (plait.estimate, dict(moe_skew="1.5"), "`moe_skew` must be a number"),
    (plait.estimate, dict(recompute=True), "`recompute` must be a str"),
    (plait.plan, dict(gpus=8, sp="yes"), "`sp` must be a bool"),
    (plait.plan, dict(gpus=8, ir=1), "`ir` must be a bool"),
    (plait.schedule, dict(forward="1"), "`forward` must be a number"),
    (plait.schedule, dict(stages=2.5), "`stages` must be an int"),
    (plait.estimate, dict(model={"x": {1, 2}}), "`model` does not convert to JSON"),
]


@pytest.mark.parametrize("fn,kwargs,text", TYPE_ERRORS)
def test_wrong_types_raise_type_error_naming_the_argument(fn, kwargs, text):
    with pytest.raises(TypeError, match=text):
        fn(**kwargs)


def test_every_degree_is_a_keyword_and_others_are_refused():
    """The degrees come from the native list (plait_spec::Degree::ALL): each the commands
    name reaches its flag, one passed through ``**degrees`` would too, and a name that is no
    degree is refused as Python refuses an unknown keyword."""
    degrees = plait._native.degrees()
    assert degrees[:6] == ["dp", "tp", "pp", "vp", "cp", "ep"]
    for fn in (plait.estimate, plait.simulate, plait.plan):
        params = inspect.signature(fn).parameters
        assert "degrees" in params
        assert all(d in params for d in degrees[:6]), fn.__name__
    for fn in (plait.estimate, plait.plan):
        with pytest.raises(TypeError, match="unexpected keyword argument 'xp'"):
            fn("llama3-8b", gpus=8, gbs=64, xp=2)
    merged = plait._with_degrees("estimate", {"tp": None, "degrees": {"pp": 2}})
    assert merged == {"tp": None, "pp": 2}
    # The degree dictionary feeds the flags: a degree's value becomes its `--name`.
    assert plait._flags("estimate", {"pp": 2}, plait._CONFIG) == ["--pp=2"]


def test_numpy_integers_are_ints():
    np = pytest.importorskip("numpy")
    a = plait.estimate("llama3-8b", gpus=np.int64(8), tp=np.int32(2), gbs=64, moe_skew=np.float64(1.0))
    assert a.to_dict() == plait.estimate("llama3-8b", gpus=8, tp=2, gbs=64).to_dict()


def test_results_are_read_only_and_to_dict_is_a_copy():
    e = plait.estimate("llama3-8b", gpus=8, gbs=64)
    with pytest.raises(AttributeError):
        e.mfu = 1.0
    with pytest.raises(AttributeError, match="no field `nope`"):
        e.nope
    d = e.to_dict()
    d["config"]["tp"] = 99
    assert e.config.tp == 1


# --------------------------------------------------------------------------------------------
# The type stubs


def _stub_classes():
    tree = ast.parse(STUBS.read_text())
    classes, functions = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = [
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)
            ] + [n.name for n in node.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
        elif isinstance(node, ast.FunctionDef):
            a = node.args
            functions[node.name] = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + (
                [a.kwarg.arg] if a.kwarg else []
            )
    return classes, functions


def test_stub_signatures_match_the_functions():
    _, functions = _stub_classes()
    for name in ("estimate", "plan", "simulate", "schedule", "run"):
        assert functions[name] == list(inspect.signature(getattr(plait, name)).parameters), name


def test_stub_fields_are_in_the_outputs():
    classes, _ = _stub_classes()
    outputs = {
        "Estimate": plait.estimate("llama3-8b", gpus=8, gbs=64),
        "Simulation": plait.simulate("llama3-8b", gpus=8, pp=2, gbs=64, ir=True),
        "PlanResult": plait.plan("llama3-8b", gpus=8, gbs=64, top=1, ir=True),
        "Schedule": plait.schedule(),
    }
    outputs["Plan"] = outputs["PlanResult"].best
    for name, result in outputs.items():
        for field in classes[name]:
            getattr(result, field)  # raises AttributeError for a field the output lacks
            assert field in result or field in ("ir", "plans", "best", "to_dict", "keys"), (name, field)
    assert set(plait.__all__) <= set(classes) | {"estimate", "plan", "simulate", "schedule", "run"}


def test_fine_tuning_flags_reach_the_cost_model(plait_bin):
    full = plait.estimate("llama2-7b", cluster="dgx-h100", gpus=8, gbs=32, seq=4096, zero=1)
    lora = plait.estimate(
        "llama2-7b", cluster="dgx-h100", gpus=8, gbs=32, seq=4096, zero=1,
        task="lora", lora_rank=16, lora_targets="qkv,proj",
    )
    assert lora.iteration_time_s < full.iteration_time_s
    cli = json.loads(subprocess.run(
        [plait_bin, "estimate", "--json", "--model", "llama2-7b", "--cluster", "dgx-h100",
         "--gpus", "8", "--gbs", "32", "--seq", "4096", "--zero", "1", "--task", "lora",
         "--lora-rank", "16", "--lora-targets", "qkv,proj"],
        check=True, capture_output=True, text=True).stdout)
    assert lora.to_dict() == cli
    with pytest.raises(plait.PlaitError, match="pack-len"):
        plait.estimate("llama2-7b", cluster="dgx-h100", gpus=8, pack_len=512)
