"""plait from Python: plan, estimate, simulate and schedule the parallel training of large
transformers.

Every function here builds the argument vector of the ``plait`` command line from its keyword
arguments, runs that command line in-process (``plait._native.run``, the very code the binary
runs) with ``--json``, and wraps the parsed JSON: no number is computed in Python, and
``result.to_dict()`` equals what ``plait <command> --json`` prints, parsed with ``json.loads``.

Keyword arguments are the command line's flags with ``-`` written ``_`` (``moe_skew`` for
``--moe-skew``). An argument left at ``None`` (or a flag left ``False``) is not passed, so the
command line's own default applies; ``plait <command> --help`` lists them. Values are checked
by the command line, whose errors name the flag and the values it accepts; they are raised as
:class:`PlaitError` subclasses. A value of the wrong Python type raises ``TypeError`` naming
the argument before anything runs.
"""

from __future__ import annotations

import copy
import json
import numbers
import operator
import os
import re
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import _native

__version__: str = _native.__version__

__all__ = [
    "estimate",
    "plan",
    "simulate",
    "schedule",
    "run",
    "Record",
    "Estimate",
    "Simulation",
    "Plan",
    "PlanResult",
    "Schedule",
    "PlaitError",
    "ModelError",
    "ClusterError",
    "ConfigError",
    "InfeasibleError",
]


# --------------------------------------------------------------------------------------------
# Errors


class PlaitError(ValueError):
    """The command line refused the request. ``str(e)`` is its message (what the binary prints
    after ``error:``), which names the flag and the values it accepts. ``flag`` is the flag
    the message is about (``"tp"`` for ``--tp``), where one is named; ``field`` and ``source``
    are those of the structured spec error behind it (a config.json key such as
    ``"hidden_size"`` and the file it came from), where there is one."""

    def __init__(
        self,
        message: str,
        *,
        flag: Optional[str] = None,
        field: Optional[str] = None,
        source: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.flag = flag
        self.field = field
        self.source = source


class ModelError(PlaitError):
    """``model`` is not a preset, a readable config.json or model directory, or the config
    does not describe a model plait can cost."""


class ClusterError(PlaitError):
    """``cluster`` is not a preset or a valid cluster TOML file."""


class ConfigError(PlaitError):
    """A parallel configuration, batch, schedule or other option is out of range or does not
    fit the model or the GPUs."""


class InfeasibleError(PlaitError):
    """No configuration of the GPUs fits (raised by :attr:`PlanResult.best`; the
    :class:`PlanResult` itself carries the answer in ``infeasible``)."""


_FLAG_AT_START = re.compile(r"^--([a-z0-9][a-z0-9-]*)")
# clap names the flag quoted: "invalid value 'x' for '--dtype <DTYPE>'" (the flag after
# "for", whatever the value), "unexpected argument '--foo' found".
_CLAP_FLAG_FOR = re.compile(r"for '--([a-z0-9][a-z0-9-]*)")
_CLAP_FLAG = re.compile(r"'--([a-z0-9][a-z0-9-]*)")


def _error_class(flag: Optional[str]) -> type[PlaitError]:
    if flag == "model":
        return ModelError
    if flag == "cluster":
        return ClusterError
    if flag is None:
        return PlaitError
    return ConfigError


def _translate(err: Any, files: Mapping[str, Tuple[str, str]]) -> PlaitError:
    """The PlaitError for a failed command line. ``files`` maps each path this call passed as
    ``--model`` or ``--cluster`` to (that flag, how messages name it)."""
    message, kind, _code, source, field = err.args
    if kind == "usage":
        # clap's rendering: "error: " before the message; tips, the usage line and a hint
        # to --help in paragraphs after it, about the command line rather than this call.
        message = re.sub(r"^error: ", "", message).split("\n\n")[0].strip()
    for path, (_, shown) in files.items():
        if path != shown:
            message = message.replace(path, shown)
    flag: Optional[str] = None
    if source is not None and source.startswith("--"):
        flag = source[2:]
    elif source is not None:
        # A spec error whose source is a file: the one passed as --model or --cluster (a model
        # directory's errors name the config.json inside it).
        for path, (f, shown) in files.items():
            if source == path or os.path.dirname(source) == path.rstrip(os.sep):
                flag = f
                source = source.replace(path, shown)
                break
    if flag is None:
        if kind == "usage":
            m = _CLAP_FLAG_FOR.search(message) or _CLAP_FLAG.search(message)
        else:
            m = _FLAG_AT_START.match(message)
        if m:
            flag = m.group(1)
    if flag is not None:
        flag = flag.replace("-", "_")
    return _error_class(flag)(message, flag=flag, field=field, source=source)


# --------------------------------------------------------------------------------------------
# Results


class Record:
    """A JSON object of the command line's output with its fields as attributes.

    Nested objects are :class:`Record` too, lists are lists (of Records where they hold
    objects); ``rec["field"]`` works as ``rec.field`` does (for keys that are no Python
    identifier), ``"field" in rec`` asks whether it is there, and :meth:`to_dict` returns the
    parsed JSON itself (a deep copy)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        if not isinstance(data, Mapping):
            raise TypeError(f"{type(self).__name__} wraps a JSON object, got {type(data).__name__}")
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str) -> Any:
        try:
            value = self._data[name]
        except KeyError:
            raise AttributeError(
                f"{type(self).__name__} has no field `{name}` (fields: {', '.join(self._data)})"
            ) from None
        return _wrap(value)

    def __getitem__(self, name: str) -> Any:
        return _wrap(self._data[name])

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def keys(self) -> List[str]:
        return list(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | {k for k in self._data if k.isidentifier()})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return type(self) is type(other) and self._data == other._data
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({json.dumps(self._data)[:200]})"

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object, as ``json.loads`` parses the command line's output."""
        return copy.deepcopy(self._data)


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Record(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class Estimate(Record):
    """``plait estimate --json``: one configuration's iteration time (with its band),
    throughput, MFU, per-GPU memory, the per-stage and per-layer breakdown, and whether it
    fits (``fits``; ``reason`` says why not)."""


class Simulation(Record):
    """``plait simulate --json``: the estimate's fields with the simulated iteration and
    memory, plus ``makespan_s``, ``bubble_fraction``, ``simulated_stages`` and
    ``critical_path``. ``ir`` is the simulated schedule's IR when ``ir=True`` was asked for,
    else None."""

    __slots__ = ("ir",)

    def __init__(self, data: Mapping[str, Any], ir: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(data)
        object.__setattr__(self, "ir", ir)


class Plan(Record):
    """One plan of ``plait plan --json``'s ``plans[]``: ``config``, ``stage_map``,
    ``estimate``, ``notes``, ``reason``."""


class PlanResult(Record):
    """``plait plan --json``: ``plans`` (best first, :class:`Plan` each), ``search`` (what
    was searched), ``infeasible`` (why nothing fits and what would, or None), ``exported``
    (files written by ``export=``), ``what_if`` (the best plan's step with an engine switch
    left off: ``flag``, ``iteration_time_s``, ``change``; torchtitan's compile and async TP;
    Megatron-Core's dispatcher and all-to-all overlap are the plans' own knobs, in each
    ``config`` where not at their defaults). ``ir`` is the best plan's schedule IR when ``ir=True`` was asked for, else None."""

    __slots__ = ("ir",)

    def __init__(self, data: Mapping[str, Any], ir: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(data)
        object.__setattr__(self, "ir", ir)

    @property
    def plans(self) -> List[Plan]:
        return [Plan(p) for p in self._data["plans"]]

    @property
    def best(self) -> Plan:
        """The best plan; raises :class:`InfeasibleError` with the planner's reason when no
        configuration fits."""
        if self._data["plans"]:
            return Plan(self._data["plans"][0])
        inf = self._data.get("infeasible")
        if inf:
            more = f"; the model state alone needs ≥ {inf['min_gpus_lower_bound']} GPUs"
            if inf.get("max_gpus_below") is not None:
                more += f"; a smaller GPU count with a plan is {inf['max_gpus_below']}"
            if inf.get("min_gpus") is not None:
                more += f"; the smallest GPU count with a plan is {inf['min_gpus']}"
            raise InfeasibleError(f"no plan fits: {inf['reason']}{more}", flag="gpus")
        raise InfeasibleError("the search found no plan for the given flags", flag=None)


class Schedule(Record):
    """``plait schedule --json``: ``makespan``, ``closed_form_makespan``, ``bubble``,
    ``bubble_fraction``, ``peak_inflight_microbatches``, ``busy``, ``instructions``,
    ``critical_path`` and the inputs. ``ir`` is the schedule IR that ``plait schedule --ir
    FILE`` writes (a plain dict: ``name``, ``stages``, ``chunks``, ``microbatches``,
    ``grad_reduce`` and ``ranks``, one list of ``{"op", "microbatch", "chunk"}`` instructions
    per pipeline rank); it is not part of :meth:`to_dict`."""

    __slots__ = ("ir",)

    def __init__(self, data: Mapping[str, Any], ir: Dict[str, Any]) -> None:
        super().__init__(data)
        object.__setattr__(self, "ir", ir)


# --------------------------------------------------------------------------------------------
# Arguments


def _check_int(fn: str, name: str, v: Any) -> str:
    if isinstance(v, bool):
        raise TypeError(f"plait.{fn}: `{name}` must be an int, got bool {v!r}")
    try:
        return str(operator.index(v))
    except TypeError:
        raise TypeError(
            f"plait.{fn}: `{name}` must be an int, got {type(v).__name__} {v!r}"
        ) from None


def _check_float(fn: str, name: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"plait.{fn}: `{name}` must be a number, got {type(v).__name__} {v!r}")
    # A float's repr round-trips exactly through the command line's f64 parser.
    return repr(float(v))


def _check_str(fn: str, name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"plait.{fn}: `{name}` must be a str, got {type(v).__name__} {v!r}")
    return v


def _check_path(fn: str, name: str, v: Any) -> str:
    if isinstance(v, (str, os.PathLike)):
        return os.fspath(v)
    raise TypeError(
        f"plait.{fn}: `{name}` must be a str or path, got {type(v).__name__} {v!r}"
    )


def _check_bool(fn: str, name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"plait.{fn}: `{name}` must be a bool, got {type(v).__name__} {v!r}")
    return v


def _flags(fn: str, values: Mapping[str, Any], spec: Mapping[str, Any]) -> List[str]:
    """argv for the keyword arguments in ``values`` per ``spec``: name -> a value checker
    (``--flag VALUE``), ``bool`` (``--flag`` when True) or ``"tristate"`` (``--flag`` when
    True, ``--no-flag`` when False)."""
    argv: List[str] = []
    for name, kind in spec.items():
        v = values.get(name)
        if v is None:
            continue
        flag = "--" + name.replace("_", "-")
        if kind is bool:
            if _check_bool(fn, name, v):
                argv.append(flag)
        elif kind == "tristate":
            argv.append(flag if _check_bool(fn, name, v) else "--no-" + name.replace("_", "-"))
        else:
            # `--flag=VALUE`: a value that starts with `-` stays a value.
            argv.append(f"{flag}={kind(fn, name, v)}")
    return argv


def _with_degrees(fn: str, values: Mapping[str, Any]) -> Dict[str, Any]:
    """A command's keyword arguments with those passed through ``**degrees`` merged in: each
    must be a parallel degree's name (``_native.degrees()``)."""
    out = {k: v for k, v in values.items() if k != "degrees"}
    for name, value in values.get("degrees", {}).items():
        if name not in _DEGREES:
            raise TypeError(f"{fn}() got an unexpected keyword argument '{name}'")
        out[name] = value
    return out


_WORKLOAD: Dict[str, Any] = {
    "gpus": _check_int,
    "gbs": _check_int,
    "seq": _check_int,
    "dtype": _check_str,
    "profile": _check_path,
    "no_profile": bool,
    "attention": _check_str,
    "dropout": bool,
    "no_overlap_grad_reduce": bool,
    "engine": _check_str,
    "moe_skew": _check_float,
    "moe_capacity": _check_float,
    "task": _check_str,
    "lora_rank": _check_int,
    "lora_targets": _check_str,
    "pack_len": _check_int,
    "sample_lengths": _check_str,
    "compile": bool,
    "compile_components": _check_str,
    "async_tp": bool,
    "sdpa": _check_str,
    "float8_recipe": _check_str,
    "float8_all_gather": bool,
    "no_fp8_param_gather": bool,
    "cuda_graphs": _check_str,
    "moe_a2a_overlap": "tristate",
    "moe_dispatcher": _check_str,
    "bf16_first_layers": _check_int,
    "bf16_last_layers": _check_int,
    "optimizer_state": _check_str,
    "cpu_offload_layers": _check_int,
    "optimizer_offload": _check_float,
}

# The parallel degrees, as the native module lists them (``plait_spec::Degree::ALL``): one
# integer keyword argument and flag each. The commands name the ones written when they were
# and take any other through ``**degrees``.
_DEGREES: Dict[str, Any] = {name: _check_int for name in _native.degrees()}

_CONFIG: Dict[str, Any] = {
    "config": _check_str,
    **_DEGREES,
    "cp_comm": _check_str,
    "etp": _check_int,
    "shard": _check_int,
    "mbs": _check_int,
    "zero": _check_int,
    "sp": bool,
    "recompute": _check_str,
    "recompute_layers": _check_int,
    "pipeline_layout": _check_str,
    "schedule": _check_str,
}

_PINS: Dict[str, Any] = {**_CONFIG, "sp": "tristate"}
del _PINS["config"]
del _PINS["recompute_layers"]
del _PINS["pipeline_layout"]

_PICTURES: Dict[str, Any] = {"svg": _check_path, "trace": _check_path}

_PLAN: Dict[str, Any] = {
    "top": _check_int,
    "simulate": _check_int,
    "threads": _check_int,
    "export": _check_str,
    "out": _check_path,
}

_SCHEDULE: Dict[str, Any] = {
    "schedule": _check_str,
    "stages": _check_int,
    "microbatches": _check_int,
    "virtual": _check_int,
    "forward": _check_float,
    "backward": _check_float,
    "weight": _check_float,
    "recompute": _check_float,
    "comm": _check_float,
}


def _is_config_object(model: Any) -> bool:
    return callable(getattr(model, "to_dict", None)) and not isinstance(model, Mapping)


class _Call:
    """One command line run: temporary files for a model dict and the IR, the argv."""

    def __init__(self, fn: str) -> None:
        self.fn = fn
        self.tmp: Optional[tempfile.TemporaryDirectory[str]] = None
        self.files: Dict[str, Tuple[str, str]] = {}

    def __enter__(self) -> "_Call":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()

    def tmpdir(self) -> str:
        if self.tmp is None:
            self.tmp = tempfile.TemporaryDirectory(prefix="plait-")
        return self.tmp.name

    def model_argv(self, model: Any, cluster: Any) -> List[str]:
        argv: List[str] = []
        if model is not None:
            argv.append(f"--model={self.model(model)}")
        if cluster is not None:
            path = _check_path(self.fn, "cluster", cluster)
            self.files.setdefault(path, ("cluster", path))
            argv.append(f"--cluster={path}")
        return argv

    def model(self, model: Any) -> str:
        """``--model``'s value: a preset or path as given, a dict or config object written
        to a config file the command line reads."""
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            self.files.setdefault(path, ("model", path))
            return path
        if _is_config_object(model):
            shown = f"model ({type(model).__name__})"
            model = model.to_dict()
            if not isinstance(model, Mapping):
                raise TypeError(f"plait.{self.fn}: `model`.to_dict() returned {type(model).__name__}, not a dict")
        elif isinstance(model, Mapping):
            shown = "model (dict)"
        else:
            raise TypeError(
                f"plait.{self.fn}: `model` must be a preset name, a path to a config.json or "
                f"model directory, a dict or a transformers.PretrainedConfig, got "
                f"{type(model).__name__}"
            )
        try:
            text = json.dumps(model)
        except (TypeError, ValueError) as e:
            raise TypeError(f"plait.{self.fn}: `model` does not convert to JSON: {e}") from None
        # The command line names a config without `_name_or_path` after its file: write it as
        # <model_type>.json so the model is called by its type, as `--model llama.json` is.
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", str(model.get("model_type") or "model")) or "model"
        path = os.path.join(self.tmpdir(), f"{stem}.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        self.files[path] = ("model", shown)
        return path

    def ir_file(self) -> str:
        return os.path.join(self.tmpdir(), "ir.json")

    def run(self, argv: Sequence[str]) -> Dict[str, Any]:
        try:
            text = _native.run(list(argv))
        except _native.CliError as e:
            raise _translate(e, self.files) from None
        doc: Dict[str, Any] = json.loads(text)
        return doc

    def read_ir(self) -> Dict[str, Any]:
        with open(self.ir_file(), encoding="utf-8") as f:
            ir: Dict[str, Any] = json.load(f)
        return ir


def run(argv: Sequence[str]) -> str:
    """Runs ``plait ARGV...`` in-process and returns what it prints (the tables, or JSON with
    ``--json``). Errors raise :class:`PlaitError` subclasses."""
    if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
        raise TypeError("plait.run: `argv` must be a list of str (the arguments after `plait`)")
    try:
        return _native.run(list(argv))
    except _native.CliError as e:
        message, kind, code = e.args[:3]
        if kind == "usage" and code == 0:
            # --help and --version: clap's text, as the binary prints it.
            return message + "\n"
        raise _translate(e, {}) from None


# --------------------------------------------------------------------------------------------
# Commands


def estimate(
    model: Any = None,
    *,
    cluster: Any = None,
    gpus: Optional[int] = None,
    gbs: Optional[int] = None,
    seq: Optional[int] = None,
    tp: Optional[int] = None,
    pp: Optional[int] = None,
    dp: Optional[int] = None,
    vp: Optional[int] = None,
    cp: Optional[int] = None,
    cp_comm: Optional[str] = None,
    ep: Optional[int] = None,
    etp: Optional[int] = None,
    shard: Optional[int] = None,
    mbs: Optional[int] = None,
    zero: Optional[int] = None,
    sp: bool = False,
    recompute: Optional[str] = None,
    recompute_layers: Optional[int] = None,
    pipeline_layout: Optional[str] = None,
    schedule: Optional[str] = None,
    config: Optional[str] = None,
    engine: Optional[str] = None,
    dtype: Optional[str] = None,
    profile: Any = None,
    no_profile: bool = False,
    attention: Optional[str] = None,
    dropout: bool = False,
    no_overlap_grad_reduce: bool = False,
    moe_skew: Optional[float] = None,
    moe_capacity: Optional[float] = None,
    task: Optional[str] = None,
    lora_rank: Optional[int] = None,
    lora_targets: Optional[str] = None,
    pack_len: Optional[int] = None,
    sample_lengths: Optional[str] = None,
    compile: bool = False,
    compile_components: Optional[str] = None,
    async_tp: bool = False,
    sdpa: Optional[str] = None,
    float8_recipe: Optional[str] = None,
    float8_all_gather: bool = False,
    no_fp8_param_gather: bool = False,
    cuda_graphs: Optional[str] = None,
    moe_a2a_overlap: Optional[bool] = None,
    moe_dispatcher: Optional[str] = None,
    bf16_first_layers: Optional[int] = None,
    bf16_last_layers: Optional[int] = None,
    optimizer_state: Optional[str] = None,
    cpu_offload_layers: Optional[int] = None,
    optimizer_offload: Optional[float] = None,
    simulate: bool = False,
    **degrees: int,
) -> Estimate:
    """``plait estimate --json``: one parallel configuration's time, throughput and memory.
    ``simulate=True`` times the pipeline with the event simulator (``--simulate``)."""
    values = _with_degrees("estimate", locals())
    with _Call("estimate") as call:
        argv = ["estimate", "--json"] + call.model_argv(model, cluster)
        argv += _flags("estimate", values, {**_WORKLOAD, **_CONFIG, "simulate": bool})
        return Estimate(call.run(argv))


def simulate(
    model: Any = None,
    *,
    cluster: Any = None,
    gpus: Optional[int] = None,
    gbs: Optional[int] = None,
    seq: Optional[int] = None,
    tp: Optional[int] = None,
    pp: Optional[int] = None,
    dp: Optional[int] = None,
    vp: Optional[int] = None,
    cp: Optional[int] = None,
    cp_comm: Optional[str] = None,
    ep: Optional[int] = None,
    etp: Optional[int] = None,
    shard: Optional[int] = None,
    mbs: Optional[int] = None,
    zero: Optional[int] = None,
    sp: bool = False,
    recompute: Optional[str] = None,
    recompute_layers: Optional[int] = None,
    pipeline_layout: Optional[str] = None,
    schedule: Optional[str] = None,
    config: Optional[str] = None,
    engine: Optional[str] = None,
    dtype: Optional[str] = None,
    profile: Any = None,
    no_profile: bool = False,
    attention: Optional[str] = None,
    dropout: bool = False,
    no_overlap_grad_reduce: bool = False,
    moe_skew: Optional[float] = None,
    moe_capacity: Optional[float] = None,
    task: Optional[str] = None,
    lora_rank: Optional[int] = None,
    lora_targets: Optional[str] = None,
    pack_len: Optional[int] = None,
    sample_lengths: Optional[str] = None,
    compile: bool = False,
    compile_components: Optional[str] = None,
    async_tp: bool = False,
    sdpa: Optional[str] = None,
    float8_recipe: Optional[str] = None,
    float8_all_gather: bool = False,
    no_fp8_param_gather: bool = False,
    cuda_graphs: Optional[str] = None,
    moe_a2a_overlap: Optional[bool] = None,
    moe_dispatcher: Optional[str] = None,
    bf16_first_layers: Optional[int] = None,
    bf16_last_layers: Optional[int] = None,
    optimizer_state: Optional[str] = None,
    cpu_offload_layers: Optional[int] = None,
    optimizer_offload: Optional[float] = None,
    svg: Any = None,
    trace: Any = None,
    ir: bool = False,
    **degrees: int,
) -> Simulation:
    """``plait simulate --json``: one configuration through the event simulator. ``svg`` and
    ``trace`` write the timeline files; ``ir=True`` returns the schedule IR as ``.ir``."""
    values = _with_degrees("simulate", locals())
    _check_bool("simulate", "ir", ir)
    with _Call("simulate") as call:
        argv = ["simulate", "--json"] + call.model_argv(model, cluster)
        argv += _flags("simulate", values, {**_WORKLOAD, **_CONFIG, **_PICTURES})
        if ir:
            argv.append(f"--ir={call.ir_file()}")
        doc = call.run(argv)
        return Simulation(doc, call.read_ir() if ir else None)


def plan(
    model: Any = None,
    *,
    cluster: Any = None,
    gpus: Optional[int] = None,
    gbs: Optional[int] = None,
    seq: Optional[int] = None,
    tp: Optional[int] = None,
    pp: Optional[int] = None,
    dp: Optional[int] = None,
    vp: Optional[int] = None,
    cp: Optional[int] = None,
    cp_comm: Optional[str] = None,
    ep: Optional[int] = None,
    etp: Optional[int] = None,
    shard: Optional[int] = None,
    mbs: Optional[int] = None,
    zero: Optional[int] = None,
    sp: Optional[bool] = None,
    recompute: Optional[str] = None,
    schedule: Optional[str] = None,
    engine: Optional[str] = None,
    dtype: Optional[str] = None,
    profile: Any = None,
    no_profile: bool = False,
    attention: Optional[str] = None,
    dropout: bool = False,
    no_overlap_grad_reduce: bool = False,
    moe_skew: Optional[float] = None,
    moe_capacity: Optional[float] = None,
    task: Optional[str] = None,
    lora_rank: Optional[int] = None,
    lora_targets: Optional[str] = None,
    pack_len: Optional[int] = None,
    sample_lengths: Optional[str] = None,
    compile: bool = False,
    compile_components: Optional[str] = None,
    async_tp: bool = False,
    sdpa: Optional[str] = None,
    float8_recipe: Optional[str] = None,
    float8_all_gather: bool = False,
    no_fp8_param_gather: bool = False,
    cuda_graphs: Optional[str] = None,
    moe_a2a_overlap: Optional[bool] = None,
    moe_dispatcher: Optional[str] = None,
    bf16_first_layers: Optional[int] = None,
    bf16_last_layers: Optional[int] = None,
    optimizer_state: Optional[str] = None,
    cpu_offload_layers: Optional[int] = None,
    optimizer_offload: Optional[float] = None,
    top: Optional[int] = None,
    simulate: Optional[int] = None,
    threads: Optional[int] = None,
    export: Optional[str] = None,
    out: Any = None,
    svg: Any = None,
    trace: Any = None,
    ir: bool = False,
    **degrees: int,
) -> PlanResult:
    """``plait plan --json``: search every configuration of ``gpus`` GPUs and rank the best.

    A configuration argument given pins that dimension (``sp=True`` requires sequence
    parallelism, ``sp=False`` forbids it, ``recompute="auto"`` — the default — lets the
    planner choose per stage); ``simulate`` is how many candidates the event simulator
    re-ranks, ``export`` writes the best plan's launch files into ``out``; ``ir=True`` returns
    the best plan's schedule IR as ``.ir``."""
    values = _with_degrees("plan", locals())
    _check_bool("plan", "ir", ir)
    with _Call("plan") as call:
        argv = ["plan", "--json"] + call.model_argv(model, cluster)
        argv += _flags("plan", values, {**_WORKLOAD, **_PINS, **_PLAN, **_PICTURES})
        if ir:
            argv.append(f"--ir={call.ir_file()}")
        doc = call.run(argv)
        return PlanResult(doc, call.read_ir() if ir and doc["plans"] else None)


def schedule(
    schedule: Optional[str] = None,
    *,
    stages: Optional[int] = None,
    microbatches: Optional[int] = None,
    virtual: Optional[int] = None,
    forward: Optional[float] = None,
    backward: Optional[float] = None,
    weight: Optional[float] = None,
    recompute: Optional[float] = None,
    comm: Optional[float] = None,
    svg: Any = None,
    trace: Any = None,
) -> Schedule:
    """``plait schedule --json`` over identical synthetic stages, with its IR (``.ir``,
    what ``--ir FILE`` writes)."""
    values = dict(locals())
    with _Call("schedule") as call:
        argv = ["schedule", "--json"] + _flags("schedule", values, {**_SCHEDULE, **_PICTURES})
        argv.append(f"--ir={call.ir_file()}")
        doc = call.run(argv)
        return Schedule(doc, call.read_ir())
