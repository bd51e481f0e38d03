#!/usr/bin/env python3
"""Kernel measurements on one Hopper GPU for plait's device model (crates/cost/src/device.rs).

What each section measures, and which of the model's mechanisms it checks:
  attention   PyTorch SDPA's flash backend (FlashAttention-2) and its cuDNN backend (the
              fused attention Transformer Engine prefers on Hopper), forward and backward,
              head dims 64/128/256, causal or not, sequences 512 to 128K tokens.
  gemm        bf16 and fp8 (torch._scaled_mm, per-tensor scales: cuBLASLt's fp8 GEMM, with
              split and with fast accumulation) on the
              forward, input-gradient and weight-gradient shapes of Llama 3 8B/70B and GPT-3
              175B layers at tp 1, 2 and 8; and the bf16 -> fp8 cast's bandwidth.
  sustained   30 s of back-to-back bf16 8192^3 GEMMs and 15 s of fp8 ones, with the SM clock,
              power and throttle reasons read by nvidia-smi every 0.5 s.
  contention  a GEMM stream's slowdown while a copy kernel holding C thread blocks (8-32, as
              NCCL's channels do) streams HBM on another stream.
  grouped     MoE expert GEMMs: torch._grouped_mm against a loop of per-expert GEMMs and one
              dense GEMM of the same FLOPs (Mixtral, DeepSeek-V3, Qwen3-MoE, GPT-OSS shapes).
  ring        one rank's share of PyTorch's context-parallel ring attention (torch's own
              `context_parallel`, causal with its head-tail load balance, allgather and
              alltoall rotation) at cp 1, 2, 4 and 8 with 32K local tokens, on a fake process
              group: every kernel and merge a rank runs, no communication. Beside it, the
              bare flash kernels of the same shapes, to separate the implementation's own cost.
  loss        peak memory and time of torchtitan's loss, bytes per logit: `F.cross_entropy(
              pred.float(), labels)` eager and compiled, and under `loss_parallel()` on a
              fake 8-rank process group (DTensor's fp32 decomposition), to check
              plait's `CrossEntropy::TORCH` (12 bytes at the peak) and `TORCH_LOSS_PARALLEL` (16).
  rowwise     fp8 GEMMs with row-wise scales (torch._scaled_mm with one fp32 scale per row of
              A and per column of B, as torchao's float8 "rowwise" recipe runs them) against
              per-tensor scales, fast and split accumulation, on the gemm section's shapes.

  block       one Llama 3.1 8B transformer block as torchtitan writes it, forward and
              backward, eager and compiled, bf16 and torchao's float8 (tensorwise and
              rowwise), at 2 x 8K and 1 x 32K tokens and at one rank's share of tp 8
              (needs torchao; `--kernels`: only tp 8, with the profiler's kernel totals).

Output: JSON lines on stdout and in $OUT/h200_kernels.jsonl. `--dry` runs every section's
logic on the CPU with tiny sizes (Triton in interpreter mode) to check the script itself.
"""
import json
import math
import os
import statistics as st
import subprocess
import sys
import threading
import time

DRY = "--dry" in sys.argv
if DRY:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
DEV = "cpu" if DRY else "cuda"
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
SECTIONS = [a for a in sys.argv[1:] if not a.startswith("--")] or [
    "env", "attention", "gemm", "grouped", "contention", "sustained", "ring", "rowwise", "loss",
    "block"]
T0 = time.time()
_out = open(os.path.join(OUT, "h200_kernels.jsonl"), "w")


def emit(**row):
    line = json.dumps(row)
    print(line, flush=True)
    _out.write(line + "\n")
    _out.flush()


def sync():
    if not DRY:
        torch.cuda.synchronize()


class Clock:
    """CUDA events on the GPU, the wall clock in a dry run."""

    def __init__(self):
        self.ev = torch.cuda.Event(enable_timing=True) if not DRY else None
        self.t = 0.0

    def record(self, stream=None):
        if DRY:
            self.t = time.perf_counter()
        elif stream is None:
            self.ev.record()
        else:
            self.ev.record(stream)

    def ms_to(self, other):
        if DRY:
            return (other.t - self.t) * 1e3
        return self.ev.elapsed_time(other.ev)


def bench(fn, warm=2, reps=5):
    """Median milliseconds of `fn` over `reps` runs after `warm` warm-ups."""
    for _ in range(warm):
        fn()
    sync()
    times = []
    for _ in range(reps):
        a, b = Clock(), Clock()
        a.record()
        fn()
        b.record()
        sync()
        times.append(a.ms_to(b))
    return st.median(times)


def randn(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


def section(name):
    def wrap(f):
        def run():
            if name not in SECTIONS:
                return
            start = time.time()
            try:
                f()
            except Exception as e:  # keep the other sections' rows
                emit(kind="error", section=name, error=f"{type(e).__name__}: {e}"[:500])
            emit(kind="section", section=name, seconds=round(time.time() - start, 1))
        return run
    return wrap


@section("env")
def env():
    row = dict(kind="env", torch=torch.__version__, dry=DRY)
    if not DRY:
        p = torch.cuda.get_device_properties(0)
        row.update(gpu=p.name, sms=p.multi_processor_count, cudnn=torch.backends.cudnn.version(),
                   cuda=torch.version.cuda, memory_gib=round(p.total_memory / 2**30, 1))
        try:
            row["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,power.limit,clocks.max.sm,clocks.max.mem",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as e:
            row["nvidia_smi"] = str(e)
    emit(**row)


@section("attention")
def attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if DRY:
        backends = [("math", SDPBackend.MATH)]
    target = 1e7 if DRY else 4e12  # non-causal forward FLOPs per timed call
    seqs = [64, 128] if DRY else [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    for hd in (64, 128, 256):
        for causal in (False, True):
            for s in seqs:
                per_head = 4.0 * s * s * hd
                # At least 32 (batch x heads), a Llama 3 8B layer's 32 heads at one sequence
                # per micro-batch: fewer leave SMs idle in a causal kernel's last wave, which a
                # training step does not see (7 heads at 32K ran the causal forward 16 % slower).
                bh = max(1 if DRY else 32, round(target / per_head))
                heads = min(bh, 16)
                batch = max(1, bh // heads)
                q, k, v = (randn(batch, heads, s, hd).requires_grad_() for _ in range(3))
                go = randn(batch, heads, s, hd)
                flops = 4.0 * batch * heads * s * s * hd * (0.5 if causal else 1.0)
                for name, backend in backends:
                    row = dict(kind="attention", backend=name, head_dim=hd, causal=causal, seq=s,
                               batch=batch, heads=heads, fwd_flops=flops)
                    try:
                        fwd, bwd = sdpa_fwd_bwd(q, k, v, go, causal, backend,
                                                reps=5 if s <= 16384 else 2)
                        row.update(fwd_ms=fwd, bwd_ms=bwd, fwd_tflops=flops / fwd / 1e9,
                                   bwd_tflops=2.5 * flops / bwd / 1e9)
                    except Exception as e:
                        row.update(error=f"{type(e).__name__}: {e}"[:300])
                    emit(**row)
                del q, k, v, go
                q = k = v = None
                if not DRY:
                    torch.cuda.empty_cache()


def gemm_fns(m, n, k, dtype):
    """A callable computing [m×k]·[k×n] in `dtype` the way training frameworks call it."""
    if dtype == "bf16":
        a, w = randn(m, k), randn(n, k)
        return lambda: a @ w.t()
    # "fp8": split (promoted) accumulation, as Transformer Engine runs dgrad and wgrad;
    # "fp8_fast": fast accumulation, as it runs the forward GEMM.
    a, w = randn(m, k, dtype=FP8), randn(n, k, dtype=FP8)
    one = torch.ones((), device=DEV, dtype=torch.float32)
    fast = dtype == "fp8_fast"
    return lambda: torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=BF16,
                                    use_fast_accum=fast)


@section("gemm")
def gemm():
    # (hidden, ffn, qkv width, gated MLP)
    models = {"llama3-8b": (4096, 14336, 6144, True), "llama3-70b": (8192, 28672, 10240, True),
              "gpt3-175b": (12288, 49152, 36864, False)}
    scale = 64 if DRY else 1
    shapes = set()
    for model, (h, ffn, qkv, gated) in models.items():
        for tp in (1, 2, 8):
            fc1 = (2 if gated else 1) * ffn
            layer = {"qkv": (qkv // tp, h), "proj": (h, h // tp), "fc1": (fc1 // tp, h),
                     "fc2": (h, ffn // tp)}
            for tokens in (8192, 16384):
                if model == "gpt3-175b" and tp == 1 and tokens == 16384:
                    continue
                for op, (n, k) in layer.items():
                    m = tokens
                    for pas, shape in (("fwd", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (n, k, m))):
                        shapes.add(tuple(max(16, x // scale) for x in shape))
                        if DRY and len(shapes) > 6:
                            break
    for (m, n, k) in sorted(shapes):
        for dtype in ("bf16", "fp8", "fp8_fast"):
            row = dict(kind="gemm", dtype=dtype, m=m, n=n, k=k)
            try:
                ms = bench(gemm_fns(m, n, k, dtype), warm=2, reps=5)
                row.update(ms=ms, tflops=2.0 * m * n * k / ms / 1e9)
            except Exception as e:
                row.update(error=f"{type(e).__name__}: {e}"[:300])
            emit(**row)
    # The bf16 -> fp8 cast and an amax: memory-bound kernels a Transformer Engine step runs.
    rows, cols = (256, 256) if DRY else (16384, 8192)
    x = randn(rows, cols)
    for op, fn, nbytes in (("cast_bf16_to_fp8", lambda: x.to(FP8), 3 * x.numel()),
                           ("amax_bf16", lambda: x.abs().amax(), 4 * x.numel()),
                           ("copy_bf16", lambda: x.clone(), 4 * x.numel())):
        try:
            ms = bench(fn, warm=3, reps=10)
            emit(kind="memory_kernel", op=op, elements=x.numel(), bytes=nbytes, ms=ms,
                 gbps=nbytes / ms / 1e6)
        except Exception as e:
            emit(kind="memory_kernel", op=op, error=f"{type(e).__name__}: {e}"[:300])


@section("grouped")
def grouped():
    # name: (hidden, expert ffn, gated)
    models = {"mixtral-8x7b": (4096, 14336, True), "deepseek-v3": (7168, 2048, True),
              "qwen3-30b-a3b": (2048, 768, True), "gpt-oss-120b": (2880, 2880, True)}
    scale = 32 if DRY else 1
    for model, (h, ffn, gated) in models.items():
        for experts in ((8,) if model == "mixtral-8x7b" else (8, 32)):
            for tokens in (256, 1024, 4096):
                fc1 = (2 if gated else 1) * ffn
                for op, (n, k) in (("fc1", (fc1, h)), ("fc2", (h, ffn))):
                    t, n_, k_ = max(16, tokens // scale), max(16, n // scale), max(16, k // scale)
                    x = randn(experts * t, k_)
                    w = randn(experts, n_, k_)
                    offs = torch.arange(1, experts + 1, device=DEV, dtype=torch.int32) * t
                    flops = 2.0 * experts * t * n_ * k_
                    row = dict(kind="grouped", model=model, op=op, experts=experts,
                               tokens_per_expert=t, n=n_, k=k_, flops=flops)
                    variants = {
                        "grouped": lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
                        "loop": lambda: [x[i * t:(i + 1) * t] @ w[i].t() for i in range(experts)],
                        "dense": lambda: x @ w[0].t(),
                    }
                    for name, fn in variants.items():
                        try:
                            ms = bench(fn, warm=2, reps=5)
                            row[f"{name}_ms"] = ms
                            row[f"{name}_tflops"] = flops / ms / 1e9
                        except Exception as e:
                            row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:300]
                    emit(**row)


@section("contention")
def contention():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_loop(src, dst, n_elem, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        nprog = tl.num_programs(0)
        for _ in range(iters):
            for start in range(pid * BLOCK, n_elem, nprog * BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < n_elem
                tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)

    n_elem = 1 << (12 if DRY else 28)  # 1 GiB of fp32 each way
    src = torch.randn(n_elem, device=DEV)
    dst = torch.empty_like(src)
    block = 128 if DRY else 8192

    def copy(ctas, iters):
        copy_loop[(ctas,)](src, dst, n_elem, iters, BLOCK=block, num_warps=16 if not DRY else 1)

    dim = 128 if DRY else 8192
    shapes = {"8192^3": (dim, dim, dim), "16384x14336x4096": (dim * 2, dim * 7 // 4, dim // 2)}
    for label, (m, n, k) in shapes.items():
        a, w = randn(m, k), randn(n, k)
        reps = 2 if DRY else 30

        def gemms():
            for _ in range(reps):
                a @ w.t()

        alone = bench(gemms, warm=1, reps=3)
        emit(kind="contention", gemm=label, ctas=0, gemm_ms=alone, gemm_flops=2.0 * m * n * k * reps)
        for ctas in (8, 16, 24, 32):
            try:
                one = bench(lambda: copy(ctas, 1), warm=1, reps=3)
                iters = max(1, math.ceil(1.5 * alone / one))
                side = torch.cuda.Stream() if not DRY else None
                results = []
                for _ in range(3):
                    sync()
                    c0, c1, g0, g1 = Clock(), Clock(), Clock(), Clock()
                    if DRY:
                        c0.record(); copy(ctas, iters); c1.record()
                        g0.record(); gemms(); g1.record()
                    else:
                        with torch.cuda.stream(side):
                            c0.record(side); copy(ctas, iters); c1.record(side)
                        g0.record(); gemms(); g1.record()
                    sync()
                    results.append((g0.ms_to(g1), c0.ms_to(c1)))
                g = st.median(r[0] for r in results)
                c = st.median(r[1] for r in results)
                emit(kind="contention", gemm=label, ctas=ctas, gemm_ms=g, slowdown=g / alone - 1.0,
                     copy_alone_gbps=2 * 4 * n_elem / one / 1e6,
                     copy_concurrent_gbps=2 * 4 * n_elem * iters / c / 1e6,
                     copy_covers_gemm=c >= g)
            except Exception as e:
                emit(kind="contention", gemm=label, ctas=ctas, error=f"{type(e).__name__}: {e}"[:300])


def poll_smi(samples, stop):
    query = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    while not stop.is_set():
        t = time.time()
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
            samples.append((t, out))
        except Exception as e:
            samples.append((t, f"error {e}"))
            return
        stop.wait(0.5)


@section("sustained")
def sustained():
    dim = 256 if DRY else 8192
    for dtype, seconds in (("bf16", 30.0), ("fp8", 15.0)):
        if DRY:
            seconds = 1.0
        fn = gemm_fns(dim, dim, dim, dtype)
        chunk = 20
        flops = 2.0 * dim**3 * chunk
        bench(fn, warm=3, reps=1)
        samples, stop = [], threading.Event()
        poller = threading.Thread(target=poll_smi, args=(samples, stop), daemon=True)
        poller.start()
        start = time.time()
        chunks = []
        while time.time() - start < seconds:
            a, b = Clock(), Clock()
            a.record()
            for _ in range(chunk):
                fn()
            b.record()
            sync()
            chunks.append((time.time() - start, a.ms_to(b)))
        stop.set()
        poller.join()
        # One row per half second of GEMMs, with the nvidia-smi sample nearest to it.
        window, i = 0.5, 0
        while i < len(chunks):
            j = i
            while j < len(chunks) and chunks[j][0] < chunks[i][0] + window:
                j += 1
            t_end = chunks[j - 1][0]
            ms = sum(c[1] for c in chunks[i:j])
            near = min(samples, key=lambda s: abs(s[0] - start - t_end), default=(0, ""))
            emit(kind="sustained", dtype=dtype, dim=dim, t_s=round(t_end, 2),
                 tflops=flops * (j - i) / ms / 1e9, smi=near[1])
            i = j


def sdpa_fwd_bwd(q, k, v, go, causal, backend, reps):
    """Median forward and backward milliseconds of SDPA's `backend` kernel on these tensors
    (`reps` timed runs after two warm-ups)."""
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel([backend]):
        with torch.no_grad():
            fwd = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                        warm=2, reps=reps)
        times = []
        for i in range(reps + 2):
            q.grad = k.grad = v.grad = None
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            sync()
            a, b = Clock(), Clock()
            a.record()
            o.backward(go)
            b.record()
            sync()
            if i >= 2:
                times.append(a.ms_to(b))
    return fwd, st.median(times)


@section("ring")
def ring():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.testing._internal.distributed.fake_pg import FakeStore
    try:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
    except ImportError:
        from torch.distributed.tensor.experimental._context_parallel._attention import (
            set_rotate_method)
    local = 256 if DRY else 32768
    hd = 16 if DRY else 128
    backend = [SDPBackend.FLASH_ATTENTION] if not DRY else [SDPBackend.MATH]
    # Llama 3 8B (32 heads after repeat_kv, as torchtitan of 2024 ran it) and 405B at tp 8.
    for heads in (32, 16):
        # The bare kernels one rank runs: the causal diagonal block over both local chunks,
        # then per further ring step one non-causal block of half the work, either all
        # queries against the first half of the keys or the second half of the queries
        # against all keys.
        blocks = {"diagonal": (local, local, True), "half_kv": (local, local // 2, False),
                  "half_q": (local // 2, local, False)}
        for name, (sq, skv, causal) in blocks.items():
            q = randn(1, heads, sq, hd).requires_grad_()
            k, v = (randn(1, heads, skv, hd).requires_grad_() for _ in range(2))
            go = randn(1, heads, sq, hd)
            try:
                fwd, bwd = sdpa_fwd_bwd(q, k, v, go, causal, backend[0], reps=3)
                flops = 4.0 * heads * sq * skv * hd * (0.5 if causal else 1.0)
                emit(kind="ring_block", block=name, heads=heads, head_dim=hd, q=sq, kv=skv,
                     causal=causal, fwd_ms=fwd, bwd_ms=bwd, fwd_tflops=flops / fwd / 1e9,
                     bwd_tflops=2.5 * flops / bwd / 1e9)
            except Exception as e:
                emit(kind="ring_block", block=name, heads=heads,
                     error=f"{type(e).__name__}: {e}"[:300])
            del q, k, v, go
        for cp in (1, 2, 4, 8):
            for method in (("allgather", "alltoall") if cp > 1 else ("allgather",)):
                for rank in sorted({0, cp - 1}):
                    row = dict(kind="ring", heads=heads, head_dim=hd, local_seq=local, cp=cp,
                               rotate=method, rank=rank, torch=torch.__version__)
                    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=cp)
                    try:
                        mesh = init_device_mesh(DEV, (cp,), mesh_dim_names=("cp",))
                        set_rotate_method(method)
                        q, k, v = (randn(1, heads, local * cp, hd) for _ in range(3))
                        go = randn(1, heads, local, hd)
                        with sdpa_kernel(backend), context_parallel(
                                mesh, buffers=[q, k, v], buffer_seq_dims=[2, 2, 2],
                                no_restore_buffers={q, k, v}):
                            def fwd():
                                with torch.no_grad():
                                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

                            def fwd_bwd():
                                ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
                                F.scaled_dot_product_attention(ql, kl, vl,
                                                               is_causal=True).backward(go)

                            row.update(fwd_ms=bench(fwd, warm=1, reps=3),
                                       fwd_bwd_ms=bench(fwd_bwd, warm=1, reps=3))
                        # Causal attention over the whole sequence, this rank's share.
                        flops = 4.0 * heads * (local * cp) ** 2 * hd * 0.5 / cp
                        row.update(fwd_flops=flops, fwd_tflops=flops / row["fwd_ms"] / 1e9,
                                   fwd_bwd_tflops=3.5 * flops / row["fwd_bwd_ms"] / 1e9)
                    except Exception as e:
                        row.update(error=f"{type(e).__name__}: {e}"[:500])
                    finally:
                        dist.destroy_process_group()
                    emit(**row)
                    q = k = v = go = None
                    if not DRY:
                        torch.cuda.empty_cache()


def scaled_fns(m, n, k, rowwise, fast):
    """[m×k]·[k×n] in fp8 through torch._scaled_mm, per-tensor or row-wise scales."""
    a, w = randn(m, k, dtype=FP8), randn(n, k, dtype=FP8)
    if rowwise:
        sa = torch.rand(m, 1, device=DEV, dtype=torch.float32) + 0.5
        sb = torch.rand(1, n, device=DEV, dtype=torch.float32) + 0.5
    else:
        sa = sb = torch.ones((), device=DEV, dtype=torch.float32)
    return lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=BF16,
                                    use_fast_accum=fast)


@section("rowwise")
def rowwise():
    models = {"llama3-8b": (4096, 14336, 6144), "llama3-70b": (8192, 28672, 10240)}
    scale = 64 if DRY else 1
    shapes = set()
    for model, (h, ffn, qkv) in models.items():
        for tp in ((1, 8) if model == "llama3-8b" else (8,)):
            layer = {"qkv": (qkv // tp, h), "proj": (h, h // tp), "fc1": (2 * ffn // tp, h),
                     "fc2": (h, ffn // tp)}
            for op, (n, k) in layer.items():
                m = 8192
                for shape in ((m, n, k), (m, k, n), (n, k, m)):
                    shapes.add(tuple(max(16, x // scale) for x in shape))
    for (m, n, k) in sorted(shapes):
        row = dict(kind="rowwise", m=m, n=n, k=k)
        for label, rw, fast in (("tensor_fast", False, True), ("tensor", False, False),
                                ("row_fast", True, True), ("row", True, False)):
            try:
                ms = bench(scaled_fns(m, n, k, rw, fast), warm=2, reps=5)
                row[f"{label}_tflops"] = 2.0 * m * n * k / ms / 1e9
            except Exception as e:
                row[f"{label}_error"] = f"{type(e).__name__}: {e}"[:300]
        emit(**row)
    # Row-wise scaling of an activation: amax along each row and the scaled cast, eager
    # (two kernels) and fused by torch.compile, as torchao's compiled recipe runs it.
    rows, cols = (256, 256) if DRY else (16384, 8192)
    x = randn(rows, cols)

    def rowwise_cast(t):
        amax = t.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
        s = 448.0 / amax
        return (t.float() * s).clamp(-448.0, 448.0).to(FP8), s

    def colwise_cast_transposed(t):
        # The weight gradient's operand: one scale per column, written transposed so that
        # the GEMM reads it row-major (torchao's axiswise cast along dim 0 for x^T, dY^T).
        amax = t.abs().amax(dim=0, keepdim=True).float().clamp(min=1e-12)
        s = 448.0 / amax
        return (t.float() * s).clamp(-448.0, 448.0).to(FP8).t().contiguous(), s

    for label, fn in (("rowwise_cast_eager", rowwise_cast),
                      ("rowwise_cast_compiled", torch.compile(rowwise_cast)),
                      ("colwise_cast_transposed_compiled", torch.compile(colwise_cast_transposed))):
        try:
            ms = bench(lambda: fn(x), warm=3, reps=10)
            emit(kind="memory_kernel", op=label, elements=x.numel(), bytes=3 * x.numel(),
                 ms=ms, gbps=3 * x.numel() / ms / 1e6)
        except Exception as e:
            emit(kind="memory_kernel", op=label, error=f"{type(e).__name__}: {e}"[:300])


@section("loss")
def loss():
    import contextlib
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore
    tokens, vocab = (64, 512) if DRY else (16384, 128256)

    def loss_fn(pred, labels):
        return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))

    def measure(label, make_pred, labels, fn, logits, context=None):
        """Peak bytes over forward and backward above the 16-bit logits themselves (their
        gradient included), per logit this rank holds."""
        pred = make_pred()
        if not DRY:
            # Reset after making the logits: creating them (an fp32 draw, a full tensor that
            # is then sharded) can peak above anything the loss allocates.
            sync()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if not DRY else 0
        start = time.perf_counter()
        with (context() if context else contextlib.nullcontext()):
            out = fn(pred, labels)
            grad_holder = pred
            del pred
            out.backward()
        sync()
        ms = (time.perf_counter() - start) * 1e3
        peak = torch.cuda.max_memory_allocated() - base if not DRY else 0
        emit(kind="loss", variant=label, tokens=tokens, vocab_local=logits // tokens,
             peak_above_logits_bytes_per_logit=peak / logits, ms=ms)
        del grad_holder, out

    labels = torch.randint(0, vocab, (1, tokens), device=DEV)
    make = lambda: randn(1, tokens, vocab).requires_grad_()
    for label, fn in (("eager", loss_fn), ("compiled", torch.compile(loss_fn))):
        try:
            measure(label, make, labels, fn, tokens * vocab)
            measure(label, make, labels, fn, tokens * vocab)  # after compilation/warm-up
        except Exception as e:
            emit(kind="loss", variant=label, error=f"{type(e).__name__}: {e}"[:300])
    # loss_parallel over a fake 8-rank group: this rank holds vocab / 8 of the logits.
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        mesh = init_device_mesh(DEV, (8,), mesh_dim_names=("tp",))
        local = vocab // 8

        def make_dt():
            full = randn(1, tokens, local * 8)
            return distribute_tensor(full, mesh, [Shard(2)]).detach().requires_grad_()

        for _ in range(2):
            measure("loss_parallel", make_dt, labels, loss_fn, tokens * local, loss_parallel)
    except Exception as e:
        emit(kind="loss", variant="loss_parallel", error=f"{type(e).__name__}: {e}"[:300])
    finally:
        dist.destroy_process_group()


@section("block")
def block():
    """One Llama 3.1 8B transformer block as torchtitan writes it (9dec370
    `torchtitan/models/llama/model.py`: RMSNorm in fp32 then `type_as`, separate wq/wk/wv and
    w1/w3 linears, complex RoPE, `repeat_kv`, SDPA causal, SwiGLU), forward and backward
    (no checkpointing), eager and under torch.compile, bf16 and torchao's float8 tensorwise
    recipe (compiled), at 2 x 8192 and 1 x 32768 tokens: to hold plait's torchtitan block
    (`EngineProfile::of(Engine::Torchtitan)`, `for_run` with compile) to a real one."""
    import torch.nn as nn
    full = (64, 8, 8, 16, 128) if DRY else (4096, 32, 8, 128, 14336)

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim, device=DEV, dtype=BF16))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight

    def rope(x, freqs):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(3).type_as(x)

    class Block(nn.Module):
        def __init__(self, dim, n_heads, n_kv, hd, ffn):
            super().__init__()
            self.shape = (n_heads, n_kv, hd)
            lin = lambda i, o: nn.Linear(i, o, bias=False, device=DEV, dtype=BF16)
            self.wq, self.wk, self.wv = lin(dim, n_heads * hd), lin(dim, n_kv * hd), lin(dim, n_kv * hd)
            self.wo = lin(n_heads * hd, dim)
            self.w1, self.w3, self.w2 = lin(dim, ffn), lin(dim, ffn), lin(ffn, dim)
            self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

        def forward(self, x, freqs):
            b, s, _ = x.shape
            n_heads, n_kv, hd = self.shape
            h = self.attention_norm(x)
            q = self.wq(h).view(b, s, n_heads, hd)
            k = self.wk(h).view(b, s, n_kv, hd)
            v = self.wv(h).view(b, s, n_kv, hd)
            q, k = rope(q, freqs), rope(k, freqs)
            rep = n_heads // n_kv
            k = k[:, :, :, None, :].expand(b, s, n_kv, rep, hd).reshape(b, s, n_heads, hd)
            v = v[:, :, :, None, :].expand(b, s, n_kv, rep, hd).reshape(b, s, n_heads, hd)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
            h = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    # (variant, tp, batch, seq), most wanted first: tp 8 is one rank's share of a
    # tensor-parallel block (heads, kv heads and ffn over 8; the sequence gathered).
    runs = [("float8_compiled", 1, 2, 8192), ("bf16_compiled", 1, 2, 8192),
            ("float8_compiled", 1, 1, 32768), ("bf16_compiled", 1, 1, 32768),
            ("float8_rowwise_compiled", 1, 2, 8192), ("bf16_compiled", 8, 4, 8192),
            ("float8_compiled", 8, 4, 8192), ("float8_rowwise_compiled", 8, 4, 8192),
            ("bf16_eager", 1, 2, 8192)]
    # `--kernels`: only tp 8 in bf16 and float8, each step's kernels listed by the profiler.
    kernels = "--kernels" in sys.argv
    if kernels:
        runs = [("bf16_compiled", 8, 4, 8192), ("float8_compiled", 8, 4, 8192)]
    if DRY:
        runs = [(v, tp, b, s // 64) for v, tp, b, s in runs]
    for variant, tp, b, s in runs:
        dim, n_heads, n_kv, hd, ffn = full
        n_heads, n_kv, ffn = n_heads // tp, max(1, n_kv // tp), ffn // tp
        row = dict(kind="block", model="llama3-8b", variant=variant, tp=tp, batch=b, seq=s)
        try:
            torch.manual_seed(0)
            blk = Block(dim, n_heads, n_kv, hd, ffn)
            if variant.startswith("float8"):
                from torchao.float8 import Float8LinearConfig, convert_to_float8_training
                config = (Float8LinearConfig.from_recipe_name("rowwise")
                          if "rowwise" in variant else Float8LinearConfig())
                convert_to_float8_training(blk, config=config)
                row["torchao"] = __import__("torchao").__version__
            fn = torch.compile(blk) if variant.endswith("compiled") else blk
            pos = torch.arange(s, device=DEV, dtype=torch.float32)
            inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=DEV).float() / hd))
            freqs = torch.polar(torch.ones(s, hd // 2, device=DEV), torch.outer(pos, inv))
            freqs = freqs.view(1, s, 1, hd // 2)
            x = randn(b, s, dim).requires_grad_()
            go = randn(b, s, dim)
            fwd_ms = bench(lambda: fn(x, freqs), warm=3, reps=5)
            out = None

            def step():
                nonlocal out
                x.grad = None
                for p_ in blk.parameters():
                    p_.grad = None
                out = fn(x, freqs)
                out.backward(go)
            step_ms = bench(step, warm=2, reps=5)
            row.update(fwd_ms=fwd_ms, fwd_bwd_ms=step_ms)
            if kernels:
                from torch.profiler import ProfilerActivity, profile
                acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
                with profile(activities=acts) as prof:
                    for _ in range(3):
                        step()
                    sync()
                # Device time per kernel name over the three steps, the largest first.
                table = {}
                for ev in prof.key_averages():
                    # A kernel's own device time; operators' is their kernels' (not counted).
                    t_us = ev.cpu_time_total if DRY else getattr(ev, "self_device_time_total", 0.0)
                    if t_us > 0:
                        table[ev.key[:120]] = (t_us / 3e3, ev.count / 3)
                top = sorted(table.items(), key=lambda kv: -kv[1][0])[:40]
                row["kernels_ms_per_step"] = [[k, round(ms, 4), n] for k, (ms, n) in top]
            if not DRY:
                row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
            del blk, fn, x, go, out
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        emit(**row)
        if not DRY:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    for run in (env, attention, gemm, grouped, contention, sustained, ring, rowwise, loss,
                block):
        run()
    emit(kind="done", seconds=round(time.time() - T0, 1))
