#!/usr/bin/env bash
# Megatron-LM launch arguments written by plait.
#
# plait plan for nemotron-h-8b on 64 GPUs: dp64 tp1 pp1 mbs1 zero2 recompute=selective 1f1b
# batch: global 256 sequences of 8192 tokens = 4 micro-batches of 1 per pipeline × dp 64; bf16
# blocks per pipeline chunk (virtual stage j = chunk·pp + rank): [52]
# blocks recomputed in full per pipeline rank: [0] (others: selective)
# predicted by plait: 3.124 s per iteration, 671224 tokens/s, 497.7 TFLOP/s per GPU (MFU 50.3 %)
# predicted peak memory: 63.5 GiB of 80.0 GiB per GPU (worst stage 0)
# note: compute 99 % of the step; the largest overhead is recompute (1 %)
# note: memory 63.5 of 80.0 GiB on stage 0
#
# world size = dp×tp×pp×cp = 64×1×1×1 = 64 (Megatron derives dp from it); the vocabulary (131072) comes from the tokenizer flags
# flag names checked against NVIDIA/Megatron-LM d98e8a6 (megatron/training/arguments.py)
# note: ZeRO-2: Megatron's distributed optimizer shards the optimizer state and reduce-scatters gradients, but keeps a full-size gradient buffer (gradient memory as with ZeRO-1); the exact ZeRO-2 layout is Megatron-FSDP: --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads --ckpt-format fsdp_dtensor
#
# usage: source megatron_args.sh; torchrun … pretrain_hybrid.py "${MEGATRON_ARGS[@]}" <data, tokenizer, optimizer and checkpoint flags>

MEGATRON_ARGS=(
    # model
    --hybrid-layer-pattern "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    --hidden-size 4096
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --ffn-hidden-size 21504
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type none
    --squared-relu
    --mamba-num-heads 128
    --mamba-head-dim 64
    --mamba-num-groups 8
    --mamba-state-dim 128
    --spec megatron.core.models.hybrid.hybrid_layer_specs hybrid_stack_spec
    --normalization RMSNorm
    --norm-epsilon 1e-5
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --hidden-dropout 0.0
    --attention-dropout 0.0
    --attention-backend flash

    # parallelism
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce

    # batch
    --micro-batch-size 1
    --global-batch-size 256

    # activation recompute
    --recompute-granularity selective

    # precision
    --bf16
)
