#!/usr/bin/env python3
"""Measured against predicted: plait.torch.train runs of a few plans, each step time next
to plait's prediction for the same plan, model and batch; writes a Markdown table.

On a machine with a GPU: world size 1 with NCCL on GPU 0 (a ~150M-parameter Llama, bf16
autocast, plait's cluster preset for the GPU found, e.g. dgx-h200 for an H200), then the
CPU multi-process checks (gloo) on tiny-llama. Without a GPU only the CPU part runs; its
predictions are for plait's default GPU cluster, not for this CPU, so the ratio there says
nothing about plait's accuracy; it shows the plumbing works.

    python scripts/bench_torch_vs_plait.py --out bench.md [--json bench.json] [--quick]

Measured step time: the mean over the steps after the first two (warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# A Llama of ~150M parameters for one GPU (layers, hidden, heads as Llama's ratios).
GPU_MODEL = dict(
    model_type="llama", vocab_size=32000, hidden_size=1024, intermediate_size=2816,
    num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
    max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
)


def _run(nproc, model, plan, steps, seq, gbs, extra, workdir):
    log = os.path.join(workdir, f"{len(os.listdir(workdir))}.jsonl")
    args = ["--model", model, "--plan", plan, "--steps", str(steps), "--seq", str(seq),
            "--gbs", str(gbs), "--json-log", log, *extra]
    if nproc == 1:
        cmd = [sys.executable, "-m", "plait.torch.train", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "-m", "plait.torch.train", *args]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONWARNINGS="ignore")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        return dict(plan=plan, world=nproc, error=(p.stderr.strip().splitlines() or ["?"])[-1][:200])
    recs = [json.loads(l) for l in open(log)]
    timed = recs[2:] if len(recs) > 2 else recs[-1:]
    measured = sum(r["step_time_s"] for r in timed) / len(timed)
    last = recs[-1]
    return dict(plan=last["plan"], world=nproc, steps=len(recs), seq=seq, gbs=gbs,
                measured_step_time_s=measured, predicted_step_time_s=last["predicted_step_time_s"],
                predicted_cluster=last["predicted_cluster"], loss_first=recs[0]["loss"],
                loss_last=last["loss"], wall_s=wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench_torch_vs_plait.md")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="fewest runs and steps (tests)")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU part even where a GPU is")
    a = ap.parse_args()
    import torch

    rows = []
    gpu = torch.cuda.is_available() and not a.no_gpu
    with tempfile.TemporaryDirectory() as work:
        if gpu:
            cfg = os.path.join(work, "config.json")
            with open(cfg, "w") as f:
                json.dump(GPU_MODEL, f)
            name = torch.cuda.get_device_name(0)
            for plan, seq, gbs in ([("dp1,mbs4", 1024, 8)] if a.quick else
                                   [("dp1,mbs4", 1024, 8), ("dp1,mbs2", 2048, 8),
                                    ("dp1,mbs4,recompute=full", 1024, 8)]):
                r = _run(1, cfg, plan, 4 if a.quick else 12, seq, gbs, ["--dtype", "bf16"], work)
                rows.append(dict(r, device=f"1 × {name} (NCCL)", model="llama-150m"))
        env_cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU checks stay on the CPU
        try:
            cpu_runs = [(1, "dp1"), (2, "pp2")] if a.quick else [
                (1, "dp1"), (2, "dp2"), (2, "dp2,zero3"), (2, "tp2,sp"), (2, "pp2"),
                (2, "pp2,vp2"), (2, "pp2,recompute=full,schedule=scp"), (4, "dp2,tp2")]
            for nproc, plan in cpu_runs:
                seq, gbs = (32, 8) if a.quick else (64, 16)
                r = _run(nproc, "tiny-llama", plan, 3 if a.quick else 8, seq, gbs, [], work)
                rows.append(dict(r, device=f"{nproc} CPU process{'es' if nproc > 1 else ''} (gloo)",
                                 model="tiny-llama"))
        finally:
            if env_cuda is None:
                del os.environ["CUDA_VISIBLE_DEVICES"]
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = env_cuda
    lines = [
        "# plait.torch: measured step time against plait's prediction",
        "",
        f"Host: {os.uname().nodename}; torch {torch.__version__}; "
        + ("GPU: " + torch.cuda.get_device_name(0) if gpu else "no GPU (CPU rows only)") + ".",
        "CPU rows are predicted for the GPU cluster named, not for this CPU: their ratio is no accuracy figure.",
        "",
        "| device | model | plan | seq × gbs | measured s/step | predicted s/step | predicted for | measured / predicted | loss first → last |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['device']} | {r['model']} | {r['plan']} | | failed: {r['error']} | | | | |")
            continue
        lines.append(
            f"| {r['device']} | {r['model']} | {r['plan']} | {r['seq']} × {r['gbs']} | "
            f"{r['measured_step_time_s']:.4f} | {r['predicted_step_time_s']:.4f} | {r['predicted_cluster']} | "
            f"{r['measured_step_time_s'] / r['predicted_step_time_s']:.2f} | {r['loss_first']:.3f} → {r['loss_last']:.3f} |")
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(text)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
