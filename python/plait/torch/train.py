"""``torchrun --nproc-per-node N -m plait.torch.train --model M --plan PLAN …``: train a
Hugging Face causal LM under a plan of plait's with torch.distributed (NCCL on GPUs, gloo
on CPU), logging measured step times next to plait's prediction for the same plan.

The plan syntax is ``plait train``'s (``dp2,tp2``, ``pp2,vp2``, ``dp2,zero3``,
``pp2,recompute=full``, ``mbs2``; ``auto`` asks plait's planner, engine torchtitan, for the
world size of the job). The JSON log has ``plait train``'s fields (step, loss, grad_norm, lr,
tokens, step_time_s, tokens_per_s) plus ``predicted_step_time_s`` (plait's simulated
iteration for the same plan, model and batch on ``predicted_cluster``) and ``plan``.

Checkpoints are torch.distributed.checkpoint (DCP) directories ``step-NNNNNNNN`` holding
model, optimizer, step (the data position: a step's batch depends only on the seed and
the step) and each rank's RNG state; ``--resume`` continues from the newest complete one
and reproduces the steps a run without interruption would have taken. A rank that fails
prints ``plait.torch.train: rank R failed at step S: …`` and exits at once; torchrun then
stops the others and names the failed rank; every collective is bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist

from . import data as data_mod
from . import models
from . import recompute as rc
from ._bridge import plan_auto, simulate
from .parallelize import dp_rank as parallel_dp_rank
from .parallelize import grad_norm_and_clip, parallelize


def _args(argv=None):
    p = argparse.ArgumentParser(prog="python -m plait.torch.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="tiny-llama, or a Hugging Face config.json (or its directory)")
    p.add_argument("--plan", default="auto", help="auto, or degrees and options such as dp2,tp2 / pp2,vp2 / dp2,zero3 / pp2,recompute=full / mbs2")
    p.add_argument("--schedule", help="gpipe, 1f1b, interleaved, zb-h1, scp (overrides the plan's)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", help="plain text, or JSON lines with a `text` field (default: built-in text)")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--gbs", type=int, default=16, help="global batch in sequences")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warm-up over 10 %% of the steps, cosine to a tenth)")
    p.add_argument("--json-log", help="one JSON object per step (rank 0 writes it)")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (and always at the end); 0: only at the end")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--cluster", help="plait cluster preset or TOML for --plan auto and the prediction (default: the GPU found, else plait's default)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds any collective may wait before the job fails")
    p.add_argument("--dtype", choices=["bf16", "fp32"], help="compute dtype: bf16 autocast (default on GPUs) or fp32 (default on CPU); weights and optimizer stay fp32")
    p.add_argument("--fail-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--fail-step", type=int, default=1, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for name in ("steps", "seq", "gbs"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if a.resume and not a.checkpoint_dir:
        p.error("--resume needs --checkpoint-dir")
    return a


def lr_at(step: int, steps: int, lr: float) -> float:
    """``plait train``'s schedule (crates/runtime/src/optim.rs, OptimConfig::for_steps):
    linear warm-up over min(steps/10, 100) steps, cosine decay to lr/10 at the last step."""
    warmup, decay, min_lr = min(steps // 10, 100), max(steps, 1), lr / 10
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if step >= decay:
        return min_lr
    progress = (step - warmup) / max(decay - warmup, 1)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def _cluster_for(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, preset in (("H200", "dgx-h200"), ("H100", "dgx-h100"), ("A100", "dgx-a100-80g"),
                        ("B200", "dgx-b200"), ("V100", "dgx-v100"), ("L40S", "l40s-8")):
        if key in name:
            return preset
    return None


def _init():
    if "RANK" not in os.environ:  # one process without torchrun
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def _latest(ckpt_dir: str):
    if not os.path.isdir(ckpt_dir):
        return None
    done = [d for d in os.listdir(ckpt_dir) if d.startswith("step-") and os.path.exists(os.path.join(ckpt_dir, d, "COMPLETE"))]
    return os.path.join(ckpt_dir, max(done)) if done else None


def _state(par, opt):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    # Flat optimizer keys (torchtitan's choice): DCP then stores every hyper-parameter.
    msd, osd = get_state_dict(par.module, opt, options=StateDictOptions(flatten_optimizer_state_dict=True))
    return {"model": msd, "optim": osd}


def save(path, par, opt, step, plan_text, rank):
    import torch.distributed.checkpoint as dcp

    state = _state(par, opt)
    state["meta"] = {"step": step, "plan": plan_text, "world": dist.get_world_size()}
    state[f"rng_{rank}"] = torch.get_rng_state()
    dcp.save(state, checkpoint_id=path)
    dist.barrier()
    if rank == 0:
        with open(os.path.join(path, "COMPLETE"), "w") as f:
            f.write(f"{step}\n")
    dist.barrier()


def load(path, par, opt, rank):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    state = _state(par, opt)
    state["meta"] = {"step": 0, "plan": "", "world": 0}
    state[f"rng_{rank}"] = torch.get_rng_state()
    dcp.load(state, checkpoint_id=path)
    set_state_dict(par.module, opt, model_state_dict=state["model"], optim_state_dict=state["optim"],
                   options=StateDictOptions(flatten_optimizer_state_dict=True))
    torch.set_rng_state(state[f"rng_{rank}"])
    return state["meta"]


def main(argv=None) -> int:
    a = _args(argv)
    _init()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout),
                            device_id=device if device.type == "cuda" else None)
    step = 0
    try:
        _train(a, rank, world, device, lambda s: None)
    except BaseException as e:  # noqa: BLE001 - every failure ends the job, naming the rank
        if isinstance(e, SystemExit) and e.code in (0, None):
            raise
        step = getattr(e, "plait_step", step)
        print(f"plait.torch.train: rank {rank} failed at step {step}: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        if os.environ.get("PLAIT_TORCH_TRACEBACK"):
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()
    # Skip the interpreter's teardown: process-group threads torn down there can abort a
    # finished run ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _train(a, rank, world, device, _):
    config, plait_model = models.load_config(a.model)
    cluster = a.cluster or _cluster_for(device)
    resume_from = _latest(a.checkpoint_dir) if (a.resume and a.checkpoint_dir) else None
    if a.checkpoint_dir and not a.resume and _latest(a.checkpoint_dir):
        raise ValueError(f"--checkpoint-dir {a.checkpoint_dir} holds checkpoints; pass --resume or use another directory")
    # The plan, on rank 0 (plait is deterministic; one answer for everyone).
    holder = [None]
    if rank == 0:
        try:
            text = a.plan
            if text.strip().lower() == "auto" and resume_from:
                with open(os.path.join(resume_from, "PLAN")) as f:
                    text = f.read().strip()
            if text.strip().lower() == "auto":
                plan = plan_auto(plait_model, world, a.gbs, a.seq, cluster=cluster)
                if a.schedule:
                    plan = simulate(plait_model, plan.text, world, a.gbs, a.seq, schedule=a.schedule, cluster=cluster)
            else:
                plan = simulate(plait_model, text, world, a.gbs, a.seq, schedule=a.schedule, cluster=cluster)
            holder[0] = plan
        except Exception as e:  # noqa: BLE001
            holder[0] = e
    dist.broadcast_object_list(holder, src=0)
    plan = holder[0]
    if isinstance(plan, Exception):
        raise plan
    model = models.build_model(config, a.seed)
    par = parallelize(model, plan, device=device)
    params = list(par.parameters())
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1, foreach=False)
    tokens, source = data_mod.load_tokens(a.data)
    c = plan.config
    dp_rank = parallel_dp_rank(par.mesh)
    rows = a.gbs // c["dp"]
    first = 0
    if resume_from:
        meta = load(resume_from, par, opt, rank)
        first = int(meta["step"])
    log = None
    if rank == 0:
        print(f"plan: {plan.text} ({plan.config['schedule']}, {plan.microbatches} micro-batches); "
              f"predicted {plan.predicted_step_time_s:.4f} s per step on {plan.cluster} (engine {plan.engine}); "
              f"{world} process{'es' if world > 1 else ''} on {device.type}; data: {source}", flush=True)
        if a.json_log:
            kept = []
            if resume_from and os.path.exists(a.json_log):
                with open(a.json_log) as f:
                    kept = [l for l in f if l.strip() and json.loads(l)["step"] <= first]
            log = open(a.json_log, "w")
            log.writelines(kept)
            log.flush()
    last_saved = first
    bf16 = (a.dtype or ("bf16" if device.type == "cuda" else "fp32")) == "bf16"
    for step in range(first + 1, a.steps + 1):
        try:
            if a.fail_rank == rank and step == a.fail_step:
                raise RuntimeError("injected failure (--fail-rank)")
            t0 = time.perf_counter()
            ids, labels = data_mod.batch(tokens, step, a.gbs, a.seq, a.seed)
            ids, labels = ids[dp_rank * rows : (dp_rank + 1) * rows], labels[dp_rank * rows : (dp_rank + 1) * rows]
            rc.STATS.update(blocks=0, early=0)
            lr = lr_at(step, a.steps, a.lr)
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = par.train_step(ids, labels)
            norm = grad_norm_and_clip(par, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            # The mean loss over the global batch: held by the last stage's dp × tp ranks.
            # One reduction carries the loss and each rank's recompute counts.
            lt = torch.zeros(1 + 2 * world, dtype=torch.float64, device=device)
            lt[0] = loss if loss is not None else 0.0
            lt[1 + rank], lt[1 + world + rank] = rc.STATS["blocks"], rc.STATS["early"]
            dist.all_reduce(lt)
            mean_loss = lt[0].item() / (c["dp"] * c["tp"])
            recomputed = [int(x) for x in lt[1 : 1 + world].tolist()]
            early = [int(x) for x in lt[1 + world :].tolist()]
            if device.type == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        except BaseException as e:
            e.plait_step = step
            raise
        if log is not None:
            rec = dict(step=step, loss=mean_loss, grad_norm=norm, lr=lr, tokens=a.gbs * a.seq,
                       step_time_s=dt, tokens_per_s=a.gbs * a.seq / dt,
                       predicted_step_time_s=plan.predicted_step_time_s,
                       predicted_cluster=plan.cluster, plan=plan.text,
                       recomputed_blocks=recomputed, early_recomputed_blocks=early)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if a.checkpoint_dir and ((a.checkpoint_every and step % a.checkpoint_every == 0) or step == a.steps):
            path = os.path.join(a.checkpoint_dir, f"step-{step:08d}")
            save(path, par, opt, step, plan.text, rank)
            if rank == 0:
                with open(os.path.join(path, "PLAN"), "w") as f:
                    f.write(plan.text + "\n")
            last_saved = step
    if log is not None:
        log.close()
    del last_saved


if __name__ == "__main__":
    sys.exit(main())
