#!/usr/bin/env bash
# Megatron-LM launch arguments written by plait.
#
# plait plan for llama3-70b on 64 GPUs: dp64 tp1 pp1 mbs1 zero3 1f1b
# batch: global 256 sequences of 8192 tokens = 4 micro-batches of 1 per pipeline × dp 64; fp8
# blocks per pipeline chunk (virtual stage j = chunk·pp + rank): [80]
# blocks recomputed in full per pipeline rank: [0] (others: none)
# predicted by plait: 7.252 s per iteration, 289190 tokens/s, 2175.4 TFLOP/s per GPU (MFU 43.5 %)
# predicted peak memory: 172.9 GiB of 268.2 GiB per GPU (worst stage 0)
# note: compute 96 % of the step; the largest overhead is dp comm (exposed) (4 %)
# note: memory 172.9 of 268.2 GiB on stage 0
#
# world size = dp×tp×pp×cp = 64×1×1×1 = 64 (Megatron derives dp from it); the vocabulary (128256) comes from the tokenizer flags
# flag names checked against NVIDIA/Megatron-LM d98e8a6 (megatron/training/arguments.py)
# note: ZeRO-3 is Megatron-FSDP (it turns on the distributed optimizer itself and needs CUDA_DEVICE_MAX_CONNECTIONS unset or > 1)
#
# usage: source megatron_args.sh; torchrun … pretrain_gpt.py "${MEGATRON_ARGS[@]}" <data, tokenizer, optimizer and checkpoint flags>

MEGATRON_ARGS=(
    # model
    --num-layers 80
    --hidden-size 8192
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --ffn-hidden-size 28672
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type rope
    --rotary-base 500000
    --use-rope-scaling
    --rope-scaling-factor 8
    --swiglu
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
    --use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params
    --ckpt-format fsdp_dtensor
    --overlap-grad-reduce

    # batch
    --micro-batch-size 1
    --global-batch-size 256

    # precision
    --bf16
    --fp8-format hybrid
    --fp8-recipe delayed
    --fp8-param-gather

    # activation offloading
    --cpu-offloading-num-layers 20
)
