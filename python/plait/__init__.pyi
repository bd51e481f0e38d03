# Type stubs of the plait package (python/plait/__init__.py). Result classes declare the
# fields the command line's --json documents; any other field is reachable as an attribute
# too (typed Any). Nested JSON objects are Records, lists are lists.

from os import PathLike
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

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

__version__: str

_Path = Union[str, "PathLike[str]"]
# A preset name, a config.json or model directory path, a config dict, or a
# transformers.PretrainedConfig (anything with .to_dict()).
_Model = Union[str, "PathLike[str]", Mapping[str, Any], Any]

class PlaitError(ValueError):
    flag: Optional[str]
    field: Optional[str]
    source: Optional[str]
    def __init__(
        self,
        message: str,
        *,
        flag: Optional[str] = ...,
        field: Optional[str] = ...,
        source: Optional[str] = ...,
    ) -> None: ...

class ModelError(PlaitError): ...
class ClusterError(PlaitError): ...
class ConfigError(PlaitError): ...
class InfeasibleError(PlaitError): ...

class Record:
    def __init__(self, data: Mapping[str, Any]) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
    def __getitem__(self, name: str) -> Any: ...
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def keys(self) -> List[str]: ...
    def to_dict(self) -> Dict[str, Any]: ...

class Estimate(Record):
    model: str
    cluster: str
    gpu: str
    gpus: int
    profile: Optional[str]
    pipeline: str
    config: Record
    engine: str
    microbatches: int
    iteration_time_s: float
    iteration_time_low_s: float
    iteration_time_high_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    mfu: float
    model_flops_per_iteration: float
    peak_memory_bytes: float
    peak_memory_high_bytes: float
    memory_capacity_bytes: float
    fits: bool
    worst_stage: int
    breakdown: Record
    memory: Record
    stages: List[Record]
    reason: Optional[str]
    layers: List[Record]

class Simulation(Record):
    model: str
    cluster: str
    gpus: int
    config: Record
    engine: str
    microbatches: int
    iteration_time_s: float
    iteration_time_low_s: float
    iteration_time_high_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    mfu: float
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits: bool
    breakdown: Record
    memory: Record
    stages: List[Record]
    reason: Optional[str]
    makespan_s: float
    bubble_fraction: float
    closed_form_iteration_time_s: float
    instructions: int
    simulated_stages: List[Record]
    critical_path: List[str]
    ir: Optional[Dict[str, Any]]
    def __init__(self, data: Mapping[str, Any], ir: Optional[Dict[str, Any]] = ...) -> None: ...

class Plan(Record):
    config: Record
    stage_map: Record
    microbatches: int
    estimate: Record
    closed_form_iteration_time_s: float
    notes: List[str]
    reason: Optional[str]

class PlanResult(Record):
    model: str
    cluster: str
    gpus: int
    search: Record
    infeasible: Optional[Record]
    exported: List[str]
    ir: Optional[Dict[str, Any]]
    def __init__(self, data: Mapping[str, Any], ir: Optional[Dict[str, Any]] = ...) -> None: ...
    @property
    def plans(self) -> List[Plan]: ...
    @property
    def best(self) -> Plan: ...

class Schedule(Record):
    schedule: str
    stages: int
    microbatches: int
    virtual: int
    forward: float
    backward: float
    weight: float
    recompute: float
    comm: float
    makespan: float
    closed_form_makespan: float
    bubble_fraction: float
    bubble: float
    peak_inflight_microbatches: List[float]
    busy: List[float]
    instructions: int
    critical_path: List[str]
    ir: Dict[str, Any]
    def __init__(self, data: Mapping[str, Any], ir: Dict[str, Any]) -> None: ...

def run(argv: Sequence[str]) -> str: ...
def estimate(
    model: Optional[_Model] = ...,
    *,
    cluster: Optional[_Path] = ...,
    gpus: Optional[int] = ...,
    gbs: Optional[int] = ...,
    seq: Optional[int] = ...,
    tp: Optional[int] = ...,
    pp: Optional[int] = ...,
    dp: Optional[int] = ...,
    vp: Optional[int] = ...,
    cp: Optional[int] = ...,
    cp_comm: Optional[str] = ...,
    ep: Optional[int] = ...,
    etp: Optional[int] = ...,
    shard: Optional[int] = ...,
    mbs: Optional[int] = ...,
    zero: Optional[int] = ...,
    sp: bool = ...,
    recompute: Optional[str] = ...,
    recompute_layers: Optional[int] = ...,
    pipeline_layout: Optional[str] = ...,
    schedule: Optional[str] = ...,
    config: Optional[str] = ...,
    engine: Optional[str] = ...,
    dtype: Optional[str] = ...,
    profile: Optional[_Path] = ...,
    no_profile: bool = ...,
    attention: Optional[str] = ...,
    dropout: bool = ...,
    no_overlap_grad_reduce: bool = ...,
    moe_skew: Optional[float] = ...,
    moe_capacity: Optional[float] = ...,
    task: Optional[str] = ...,
    lora_rank: Optional[int] = ...,
    lora_targets: Optional[str] = ...,
    pack_len: Optional[int] = ...,
    sample_lengths: Optional[str] = ...,
    compile: bool = ...,
    compile_components: Optional[str] = ...,
    async_tp: bool = ...,
    sdpa: Optional[str] = ...,
    float8_recipe: Optional[str] = ...,
    float8_all_gather: bool = ...,
    no_fp8_param_gather: bool = ...,
    cuda_graphs: Optional[str] = ...,
    moe_a2a_overlap: Optional[bool] = ...,
    moe_dispatcher: Optional[str] = ...,
    bf16_first_layers: Optional[int] = ...,
    bf16_last_layers: Optional[int] = ...,
    optimizer_state: Optional[str] = ...,
    cpu_offload_layers: Optional[int] = ...,
    optimizer_offload: Optional[float] = ...,
    simulate: bool = ...,
    **degrees: int,
) -> Estimate: ...
def simulate(
    model: Optional[_Model] = ...,
    *,
    cluster: Optional[_Path] = ...,
    gpus: Optional[int] = ...,
    gbs: Optional[int] = ...,
    seq: Optional[int] = ...,
    tp: Optional[int] = ...,
    pp: Optional[int] = ...,
    dp: Optional[int] = ...,
    vp: Optional[int] = ...,
    cp: Optional[int] = ...,
    cp_comm: Optional[str] = ...,
    ep: Optional[int] = ...,
    etp: Optional[int] = ...,
    shard: Optional[int] = ...,
    mbs: Optional[int] = ...,
    zero: Optional[int] = ...,
    sp: bool = ...,
    recompute: Optional[str] = ...,
    recompute_layers: Optional[int] = ...,
    pipeline_layout: Optional[str] = ...,
    schedule: Optional[str] = ...,
    config: Optional[str] = ...,
    engine: Optional[str] = ...,
    dtype: Optional[str] = ...,
    profile: Optional[_Path] = ...,
    no_profile: bool = ...,
    attention: Optional[str] = ...,
    dropout: bool = ...,
    no_overlap_grad_reduce: bool = ...,
    moe_skew: Optional[float] = ...,
    moe_capacity: Optional[float] = ...,
    task: Optional[str] = ...,
    lora_rank: Optional[int] = ...,
    lora_targets: Optional[str] = ...,
    pack_len: Optional[int] = ...,
    sample_lengths: Optional[str] = ...,
    compile: bool = ...,
    compile_components: Optional[str] = ...,
    async_tp: bool = ...,
    sdpa: Optional[str] = ...,
    float8_recipe: Optional[str] = ...,
    float8_all_gather: bool = ...,
    no_fp8_param_gather: bool = ...,
    cuda_graphs: Optional[str] = ...,
    moe_a2a_overlap: Optional[bool] = ...,
    moe_dispatcher: Optional[str] = ...,
    bf16_first_layers: Optional[int] = ...,
    bf16_last_layers: Optional[int] = ...,
    optimizer_state: Optional[str] = ...,
    cpu_offload_layers: Optional[int] = ...,
    optimizer_offload: Optional[float] = ...,
    svg: Optional[_Path] = ...,
    trace: Optional[_Path] = ...,
    ir: bool = ...,
    **degrees: int,
) -> Simulation: ...
def plan(
    model: Optional[_Model] = ...,
    *,
    cluster: Optional[_Path] = ...,
    gpus: Optional[int] = ...,
    gbs: Optional[int] = ...,
    seq: Optional[int] = ...,
    tp: Optional[int] = ...,
    pp: Optional[int] = ...,
    dp: Optional[int] = ...,
    vp: Optional[int] = ...,
    cp: Optional[int] = ...,
    cp_comm: Optional[str] = ...,
    ep: Optional[int] = ...,
    etp: Optional[int] = ...,
    shard: Optional[int] = ...,
    mbs: Optional[int] = ...,
    zero: Optional[int] = ...,
    sp: Optional[bool] = ...,
    recompute: Optional[str] = ...,
    schedule: Optional[str] = ...,
    engine: Optional[str] = ...,
    dtype: Optional[str] = ...,
    profile: Optional[_Path] = ...,
    no_profile: bool = ...,
    attention: Optional[str] = ...,
    dropout: bool = ...,
    no_overlap_grad_reduce: bool = ...,
    moe_skew: Optional[float] = ...,
    moe_capacity: Optional[float] = ...,
    task: Optional[str] = ...,
    lora_rank: Optional[int] = ...,
    lora_targets: Optional[str] = ...,
    pack_len: Optional[int] = ...,
    sample_lengths: Optional[str] = ...,
    compile: bool = ...,
    compile_components: Optional[str] = ...,
    async_tp: bool = ...,
    sdpa: Optional[str] = ...,
    float8_recipe: Optional[str] = ...,
    float8_all_gather: bool = ...,
    no_fp8_param_gather: bool = ...,
    cuda_graphs: Optional[str] = ...,
    moe_a2a_overlap: Optional[bool] = ...,
    moe_dispatcher: Optional[str] = ...,
    bf16_first_layers: Optional[int] = ...,
    bf16_last_layers: Optional[int] = ...,
    optimizer_state: Optional[str] = ...,
    cpu_offload_layers: Optional[int] = ...,
    optimizer_offload: Optional[float] = ...,
    top: Optional[int] = ...,
    simulate: Optional[int] = ...,
    threads: Optional[int] = ...,
    export: Optional[str] = ...,
    out: Optional[_Path] = ...,
    svg: Optional[_Path] = ...,
    trace: Optional[_Path] = ...,
    ir: bool = ...,
    **degrees: int,
) -> PlanResult: ...
def schedule(
    schedule: Optional[str] = ...,
    *,
    stages: Optional[int] = ...,
    microbatches: Optional[int] = ...,
    virtual: Optional[int] = ...,
    forward: Optional[float] = ...,
    backward: Optional[float] = ...,
    weight: Optional[float] = ...,
    recompute: Optional[float] = ...,
    comm: Optional[float] = ...,
    svg: Optional[_Path] = ...,
    trace: Optional[_Path] = ...,
) -> Schedule: ...
