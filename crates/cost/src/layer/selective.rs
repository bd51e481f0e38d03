//! Megatron-Core's selective recomputation by module (`recompute_modules`): which parts of
//! a block each module reruns and which saved tensors it lets go. The block's kernels and
//! tensors are `transformer`'s; this module only combines them for a module set.

use super::Kernels;

/// Forward kernels of the parts of a block that Megatron-Core can recompute on their own.
#[derive(Default)]
pub(super) struct ModuleKernels {
    /// The pre-attention and pre-MLP norms.
    pub norm1: Kernels,
    pub norm2: Kernels,
    /// MLA's key/value and query up projections and RoPE (the q/k/v projection and RoPE
    /// without MLA).
    pub mla_up: Kernels,
    /// The MLP or MoE module after its norm (router, dispatch, experts, shared experts).
    pub mlp: Kernels,
    /// The experts' activation function.
    pub act: Kernels,
    /// The shared experts.
    pub shared: Kernels,
}

/// What one block offers Megatron-Core's selective recomputation: its parts' forward
/// kernels and forward collectives, and the bytes each module's rerun lets go.
pub(super) struct Selected<'a> {
    pub set: plait_spec::RecomputeModules,
    pub parts: &'a ModuleKernels,
    /// The attention core's forward kernels and the bytes it saves inside.
    pub core_forward: Kernels,
    pub core_saved: f64,
    pub has_attn: bool,
    pub has_mlp: bool,
    pub mla: bool,
    pub moe: bool,
    pub shared: bool,
    /// One half's forward tp collectives.
    pub tp_half: f64,
    /// The forward's expert dispatch and combine.
    pub ep_fwd: f64,
    /// A norm's output.
    pub norm_out: f64,
    /// A dense MLP's saved tensors beyond its input.
    pub dense_mlp_saved: f64,
    /// A MoE layer's saved tensors beyond its input.
    pub moe_saved: f64,
    /// The experts' activation outputs.
    pub act_out: f64,
    /// The shared experts' saved tensors.
    pub shared_saved: f64,
    /// q, k and v as the attention kernel takes them.
    pub attention_inputs: f64,
}

/// The rerun and what it frees.
pub(super) struct ModulesRerun {
    pub rerun: Kernels,
    pub tp_comm_s: f64,
    pub ep_comm_s: f64,
    pub dropped: f64,
}

/// Megatron-Core's `recompute_modules` (Megatron-LM d98e8a6 `transformer_config.py:560`,
/// `transformer_layer.py`): `core_attn`, `mlp`, `moe` and `shared_experts` checkpoint the
/// module (its input kept, everything inside rerun); `moe_act`, `layernorm` and
/// `mla_up_proj` discard their outputs and recompute them. The norms are modules of their
/// own only where Transformer Engine does not fuse them into the next linear: before MLA's
/// down projections and before a MoE layer's router (`gpt_layer_specs.py`); `mlp` applies
/// to dense MLPs, `moe_act` and `shared_experts` to MoE layers `moe` does not rerun whole.
pub(super) fn megatron_modules(b: &Selected) -> ModulesRerun {
    use plait_spec::RecomputeModule as Mod;
    let p = b.parts;
    let moe_block = b.moe && b.has_mlp;
    let mut r = ModulesRerun {
        rerun: Kernels::default(),
        tp_comm_s: 0.0,
        ep_comm_s: 0.0,
        dropped: 0.0,
    };
    let mut take = |on: bool, rerun: Kernels, dropped: f64| {
        if on {
            r.rerun = r.rerun.add(rerun);
            r.dropped += dropped;
        }
        on
    };
    take(b.set.contains(Mod::CoreAttn), b.core_forward, b.core_saved);
    let layernorm = b.set.contains(Mod::Layernorm);
    take(layernorm && b.has_attn && b.mla, p.norm1, b.norm_out);
    take(layernorm && moe_block, p.norm2, b.norm_out);
    take(
        b.set.contains(Mod::MlaUpProj) && b.has_attn && b.mla,
        p.mla_up,
        b.attention_inputs,
    );
    let dense = take(
        b.set.contains(Mod::Mlp) && b.has_mlp && !b.moe,
        p.norm2.add(p.mlp),
        b.dense_mlp_saved,
    );
    let whole_moe = take(b.set.contains(Mod::Moe) && moe_block, p.mlp, b.moe_saved);
    take(
        b.set.contains(Mod::MoeAct) && moe_block && !whole_moe,
        p.act,
        b.act_out,
    );
    take(
        b.set.contains(Mod::SharedExperts) && moe_block && b.shared && !whole_moe,
        p.shared,
        b.shared_saved,
    );
    if dense {
        r.tp_comm_s += b.tp_half;
    }
    if whole_moe {
        r.ep_comm_s += b.ep_fwd;
    }
    r
}
