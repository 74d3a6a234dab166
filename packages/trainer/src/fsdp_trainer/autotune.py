"""``--auto``: pick the fastest settings that fit in the accelerator's memory.

What it chooses, among the settings the user did not give explicitly:

- ``compile.enabled`` and ``compile.loss``: on for CUDA runs (off on CPU, where
  compile time outweighs the gain for the small models trained there);
- ``ac.mode`` / ``ac.every``: no activation checkpointing when it fits, else
  selective (one block in 4, then one in 2), else full (``AC_CANDIDATES``);
- ``compile.memory_budget``: 1, or ``LEAN_BUDGET`` (compiled blocks without checkpointing recompute their
  norms and SiLU(gate)*up in backward and keep a third less per token) where the larger micro-batch this makes
  room for is the faster candidate; 1 under ``fp8.enabled``, where the lean budget measured slower at every
  micro-batch (``bench/reports/2026-11-30-llama3.1-8b-h200x2-memory-budget.md``);
- ``train.micro_batch_size``: the largest that fits, up to ``MAX_MICRO_BATCH``; when
  the user fixed the per-rank batch (``micro_batch_size`` x ``grad_accum_steps``)
  it is kept, split into the largest micro-batches that fit.

It leaves what changes the numbers a run computes to the user: ``precision.reduce_dtype`` (bf16 reduction is
faster still on the 8B, but rounds every gradient sum), ``precision.param_dtype``, ``fp8.*`` and the optimizer; and
the experimental options (``experimental.*``), such as NCCL symmetric memory for the collectives.

Candidates are ranked by a throughput model (recompute cost of checkpointing, and the
per-step overhead that larger micro-batches amortise) and the first one whose
estimated peak memory fits in ``auto.memory_fraction`` of the device is taken.

The memory model, per GPU, for N parameters sharded over S ranks:

- optimizer step: fp32 parameters, fp32 gradients and AdamW's two moments, ``16 N / S`` (at most that with
  ``precision.master_weights optimizer``: bf16 parameters and gradients, 16-bit master remainders);
- forward/backward: fp32 parameters and moments ``12 N / S`` (the same with bf16 parameters beside their masters'
  16-bit remainders, ``fsdp_trainer/optim/triton_adamw.py``; sharded gradients come as activations go), plus
  activations, plus
  unsharded bf16 copies of the blocks in flight
  and of the root (embeddings, lm_head), plus the loss's per-chunk buffers;
- activations per token per decoder layer without checkpointing, compiled:
  ``12.7 d + 6 ffn + 4 kv_dim`` bytes (eager: 1.13 times that with ``model.fused_kernels``,
  1.42 with Hugging Face's element-wise RMSNorm and rotary code); ``8 d + 4 ffn + 4 kv_dim`` compiled with a
  memory budget of 0.7 or less (what the compiler keeps at 0.7: the block's input, query, key, value, attention
  output, one more ``d``-wide tensor, gate and up); ``FP8_ACTIVATION_SHARE`` of those under ``fp8.enabled``; a checkpointed layer keeps
  its bf16 input (``2 d``) and one layer's activations are rebuilt at a time.

The coefficients were fitted to peaks measured on H200s (Llama-2-7B and Llama-3.1-8B, FSDP2, micro-batches 1 to 6,
compiled and eager, full and selective checkpointing, both memory budgets, bf16 and FP8;
``bench/reports/2026-12-01-h200x2-auto.md``); ``tests/trainer/test_autotune.py`` holds those measurements against
the model. Torch-free: the runtime side passes in the device memory and world size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import presets

GiB = 2**30
#: Micro-batches beyond this rarely pay (the step's fixed costs are amortised by then).
MAX_MICRO_BATCH = 8
#: Activation checkpointing candidates, fastest first: (mode, every, share of forward FLOPs recomputed).
AC_CANDIDATES = (("none", 1, 0.0), ("selective", 4, 0.25), ("selective", 2, 0.5), ("full", 1, 1.0))
#: Default share of the device's memory the estimate may fill; the rest is the CUDA context, NCCL
#: buffers and the caching allocator's slack (the estimate is of allocated bytes). Runs that came within about
#: 12 GiB of an H200's 140 slowed sharply, the allocator short of memory; 0.85 (119 GiB) stays clear of that.
MEMORY_FRACTION = 0.85
#: Candidates this close in estimated speed count as a tie, settled by memory. The speed model's micro-batch gains
#: match the measured ones to about 0.1% on Llama-3.1-8B over 2 H200s, so a gain of 1% or more is taken.
NEAR_TIE = 0.01
#: ``compile.memory_budget`` of the lean candidates, and what its backward recompute costs, as a share of a forward
#: (fitted to Llama-3.1-8B at equal micro-batch, where the lean budget costs 0.7%).
LEAN_BUDGET, LEAN_RECOMPUTE = 0.7, 0.02
#: Activations kept under ``fp8.enabled``, as a share of bf16's: the float8 linears keep their inputs in float8.
#: Fitted on Llama-2-7B over 2 H200s, compiled, at both budgets.
FP8_ACTIVATION_SHARE = 0.71
#: A step's fixed costs under ``fp8.enabled``, in micro-batches' worth of compute (0.3 in bf16), fitted to Llama-2-7B
#: on 2 H200s from micro batch 4 to 6.
FP8_FIXED_COST = 0.9


@dataclass(frozen=True)
class Shape:
    """What the memory model needs of a Llama architecture; counts come from ``presets``."""

    vocab: int
    hidden: int
    ffn: int
    layers: int
    tied: bool
    kv_dim: int
    block_params: int
    params: int

    @classmethod
    def from_config(cls, hf: Any) -> Shape:
        """From a ``LlamaConfig`` or a preset spec (a dict with the same field names)."""
        keys = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "tie_word_embeddings",
        )
        spec = {k: (hf.get(k) if isinstance(hf, dict) else getattr(hf, k, None)) for k in keys}
        return cls(
            vocab=spec["vocab_size"],
            hidden=spec["hidden_size"],
            ffn=spec["intermediate_size"],
            layers=spec["num_hidden_layers"],
            tied=bool(spec["tie_word_embeddings"]),
            kv_dim=presets.kv_dim(spec),
            block_params=presets.block_params(spec),
            params=presets.num_params(spec),
        )


@dataclass(frozen=True)
class Candidate:
    """One setting the tuner considers, with its estimates."""

    ac_mode: str
    ac_every: int
    micro_batch_size: int
    grad_accum_steps: int
    compiled: bool
    peak_bytes: int
    speed: float  # relative tokens/s, comparable between candidates of one run only
    memory_budget: float = 1.0

    def describe(self) -> str:
        ac = self.ac_mode if self.ac_mode != "selective" else f"selective every {self.ac_every}"
        budget = f" memory_budget={self.memory_budget:g}" if self.memory_budget < 1 else ""
        return f"micro_batch_size={self.micro_batch_size} grad_accum_steps={self.grad_accum_steps} ac={ac} compile={'on' if self.compiled else 'off'}{budget}"


def activation_bytes_per_token(
    shape: Shape,
    compiled: bool,
    ac_mode: str,
    ac_every: int,
    fused_kernels: bool = True,
    memory_budget: float = 1.0,
    fp8: bool = False,
) -> float:
    """Bytes kept per token for the whole decoder between forward and backward."""
    full_layer = 12.7 * shape.hidden + 6 * shape.ffn + 4 * shape.kv_dim
    if compiled and memory_budget <= LEAN_BUDGET:  # between it and 1: counted as 1 (measured only at 0.7 and 0.8)
        full_layer = 8 * shape.hidden + 4 * shape.ffn + 4 * shape.kv_dim
    if not compiled:
        full_layer *= 1.13 if fused_kernels else 1.42
    if fp8:
        full_layer *= FP8_ACTIVATION_SHARE
    checkpointed = {"none": 0, "full": shape.layers}.get(ac_mode, shape.layers // max(ac_every, 1))
    kept = (shape.layers - checkpointed) * full_layer + checkpointed * 2 * shape.hidden
    if checkpointed:
        kept += full_layer  # one checkpointed layer rebuilt at a time in backward
    return kept


def estimate_peak_bytes(
    shape: Shape,
    seq_len: int,
    micro_batch: int,
    *,
    shard_degree: int,
    compiled: bool,
    ac_mode: str,
    ac_every: int = 2,
    loss_chunk_tokens: int = 4096,
    fused_loss: bool = True,
    cpu_offload: bool = False,
    param_bytes: int = 2,
    grad_accum_steps: int = 1,
    reshard_after_forward: bool = True,
    reduce_bytes: int = 4,
    fused_kernels: bool = True,
    master_weights: bool = False,
    memory_budget: float = 1.0,
    fp8: bool = False,
    master_bytes: int = 2,
) -> int:
    """Estimated peak of allocated bytes (``torch.cuda.max_memory_allocated``) on one GPU in a training step.

    ``grad_accum_steps`` > 1: between micro-steps FSDP keeps every gradient unsharded, in the
    reduce dtype (the price of skipping the reduce-scatter). ``reshard_after_forward`` False
    (shard_grad_op): every block stays gathered from its forward to its backward. ``master_weights``: the run keeps
    bf16 parameters and their masters when it does not accumulate (``precision.master_weights``), ``master_bytes``
    per parameter beside the bf16 one (2: the remainder the Triton AdamW keeps; 4: a whole fp32 copy).
    ``fp8``: float8 linears (``fp8.enabled``), which keep less per token.
    """
    n_shard = shape.params / max(shard_degree, 1)
    fwd_bytes = 2 + master_bytes + 8 if master_weights and grad_accum_steps == 1 else 12
    states_fwd, states_step = (0.0, 0.0) if cpu_offload else (fwd_bytes * n_shard, 16 * n_shard)
    tokens = micro_batch * seq_len
    activations = tokens * activation_bytes_per_token(
        shape, compiled, ac_mode, ac_every, fused_kernels, memory_budget, fp8
    )
    blocks_gathered = 3 if reshard_after_forward else shape.layers
    gathered = param_bytes * (
        blocks_gathered * shape.block_params + shape.vocab * shape.hidden * (1 if shape.tied else 2)
    )
    if grad_accum_steps > 1:
        gathered += reduce_bytes * shape.params
    chunk = min(loss_chunk_tokens, tokens)
    logits = chunk * shape.vocab
    if fused_loss:  # fp32 logits and their softmax, bf16 gradient; lm_head gradient (+ fp32 sum over chunks)
        loss = logits * (4 + 4 + 2) + shape.vocab * shape.hidden * (2 + (4 if tokens > chunk else 0))
    else:  # fp32 logits, bf16 logits, fp32 gradient in the checkpointed recompute
        loss = logits * (4 + 2 + 4)
    hidden_states = tokens * shape.hidden * 2 * 4  # embeddings out, final norm, its gradient
    forward_peak = states_fwd + activations + gathered + loss + hidden_states
    # End of backward / optimizer step: the last unsharded gradients (low precision, and fp32 for the reduce).
    root_params = shape.vocab * shape.hidden * (1 if shape.tied else 2)
    step_peak = states_step + (param_bytes + 4) * (shape.block_params + root_params)
    return int(max(forward_peak, step_peak))


def relative_speed(ac_recompute: float, micro_batch: int, compiled: bool, fp8: bool = False) -> float:
    """Relative tokens/s: forward recompute costs a third of a step per recomputed forward; fixed step costs amortise over the micro-batch.

    Fitted to the H200 runs: micro-batch 1 -> 2 gains about 13% eager, 2 -> 3 about 5% compiled. Under FP8 the
    matmuls are faster and the fixed costs a larger share (``FP8_FIXED_COST``).
    """
    fixed = FP8_FIXED_COST if fp8 else 0.3
    return (1.0 / (1.0 + ac_recompute / 3.0)) * (micro_batch / (micro_batch + fixed)) * (1.2 if compiled else 1.0)


def choose(
    shape: Shape,
    seq_len: int,
    *,
    device_bytes: int,
    memory_fraction: float,
    shard_degree: int,
    compiled: bool,
    fixed_batch: int | None,
    fixed_micro_batch: int | None,
    ac_fixed: tuple[str, int] | None,
    loss_chunk_tokens: int,
    fused_loss: bool,
    cpu_offload: bool,
    param_bytes: int = 2,
    ac_every_fixed: int | None = None,
    reshard_after_forward: bool = True,
    reduce_bytes: int = 4,
    fused_kernels: bool = True,
    master_weights: bool = False,
    memory_budgets: tuple[float, ...] = (1.0,),
    fp8: bool = False,
) -> tuple[Candidate | None, list[Candidate]]:
    """The fastest candidate that fits (None when none does) and every candidate considered, fastest first.

    ``fixed_batch``: micro-batch x accumulation per rank to keep (micro-batches must divide it);
    ``fixed_micro_batch``: a micro-batch the user set; ``ac_fixed``: (mode, every) the user set;
    ``ac_every_fixed``: an ``ac.every`` the user set without a mode (selective candidates use it);
    ``memory_budgets``: the ``compile.memory_budget`` values to consider (below 1: compiled runs without checkpointing only).
    """
    budget = device_bytes * memory_fraction
    if ac_fixed is not None:
        acs = [(ac_fixed[0], ac_fixed[1], _recompute_share(*ac_fixed))]
    elif ac_every_fixed is not None:
        acs = [
            ("none", 1, 0.0),
            ("selective", ac_every_fixed, _recompute_share("selective", ac_every_fixed)),
            ("full", 1, 1.0),
        ]
    else:
        acs = list(AC_CANDIDATES)
    if fixed_micro_batch is not None:
        micro_batches = [fixed_micro_batch]
    elif fixed_batch is not None:
        micro_batches = [m for m in range(1, fixed_batch + 1) if fixed_batch % m == 0]
    else:
        micro_batches = list(range(1, MAX_MICRO_BATCH + 1))
    considered = []
    for mode, every, recompute in acs:
        kept_shares = [b for b in memory_budgets if b >= 1 or (compiled and mode == "none")] or [1.0]
        for mb in micro_batches:
            accum = (fixed_batch // mb) if fixed_batch is not None else 1
            for share in kept_shares:
                peak = estimate_peak_bytes(
                    shape,
                    seq_len,
                    mb,
                    shard_degree=shard_degree,
                    compiled=compiled,
                    ac_mode=mode,
                    ac_every=every,
                    loss_chunk_tokens=loss_chunk_tokens,
                    fused_loss=fused_loss,
                    cpu_offload=cpu_offload,
                    param_bytes=param_bytes,
                    grad_accum_steps=accum,
                    reshard_after_forward=reshard_after_forward,
                    reduce_bytes=reduce_bytes,
                    fused_kernels=fused_kernels,
                    master_weights=master_weights,
                    memory_budget=share,
                    fp8=fp8,
                )
                speed = relative_speed(recompute + (LEAN_RECOMPUTE if share < 1 else 0.0), mb, compiled, fp8)
                considered.append(Candidate(mode, every, mb, accum, compiled, peak, speed, share))
    considered.sort(key=lambda c: (-c.speed, c.peak_bytes))
    fitting = [c for c in considered if c.peak_bytes <= budget]
    if not fitting:
        return None, considered
    # Near-ties (within NEAR_TIE of the fastest) go to the smallest footprint: the estimate is a model.
    near = [c for c in fitting if c.speed >= fitting[0].speed * (1 - NEAR_TIE)]
    return min(near, key=lambda c: c.peak_bytes), considered


def _recompute_share(mode: str, every: int) -> float:
    return {"none": 0.0, "full": 1.0}.get(mode, 1.0 / max(every, 1))


def shard_degree(cfg: Any, world_size: int, local_world_size: int) -> int:
    """Over how many ranks parameters and optimizer state are split (the mesh's shard dimension)."""
    from .distributed import mesh_shape

    if cfg.parallel.api == "none":
        return 1
    return mesh_shape(cfg.parallel, world_size, local_world_size)[1]


def apply_auto(
    cfg: Any,
    hf_config: Any,
    *,
    world_size: int,
    local_world_size: int,
    device_bytes: int,
    on_gpu: bool,
    master_weights: bool = False,
) -> dict[str, Any]:
    """Fill the settings ``--auto`` owns into ``cfg`` (those not set explicitly); returns a record for logs and the summary.

    ``master_weights``: whether the run keeps fp32 masters in the optimizer when it does not accumulate
    (``optim.use_master_weights`` with one micro-batch per step).

    Raises ``ConfigError`` when nothing fits, naming what would.
    """
    from .errors import ConfigError

    explicit: frozenset[str] = getattr(cfg, "explicit", frozenset())
    t, ac, comp = cfg.train, cfg.activation_checkpointing, cfg.compile
    compiled = comp.enabled if "compile.enabled" in explicit else on_gpu
    mb_set, accum_set = "train.micro_batch_size" in explicit, "train.grad_accum_steps" in explicit
    fixed_batch = t.micro_batch_size * t.grad_accum_steps if accum_set else None
    ac_fixed = (ac.mode, ac.every) if "ac.mode" in explicit else None
    shape = Shape.from_config(hf_config)
    degree = shard_degree(cfg, world_size, local_world_size)
    param_bytes = 4 if cfg.precision.param_dtype == "fp32" else 2
    best, considered = choose(
        shape,
        cfg.data.seq_len,
        device_bytes=device_bytes,
        memory_fraction=cfg.auto.memory_fraction,
        shard_degree=degree,
        compiled=compiled,
        fixed_batch=fixed_batch,
        fixed_micro_batch=t.micro_batch_size if mb_set else None,
        ac_fixed=ac_fixed,
        loss_chunk_tokens=t.loss_chunk_tokens,
        fused_loss=t.fused_loss,
        cpu_offload=cfg.parallel.cpu_offload,
        param_bytes=param_bytes,
        ac_every_fixed=ac.every if "ac.every" in explicit else None,
        reshard_after_forward=bool(cfg.parallel.reshard_after_forward),
        reduce_bytes=4 if cfg.precision.reduce_dtype == "fp32" else 2,
        fused_kernels=cfg.model.fused_kernels
        and cfg.model.attn_implementation != "eager",  # eager attention stays Hugging Face's
        master_weights=master_weights,
        fp8=cfg.fp8.enabled,
        memory_budgets=(comp.memory_budget,)
        if "compile.memory_budget" in explicit
        else ((1.0, LEAN_BUDGET) if compiled and not cfg.fp8.enabled else (1.0,)),
    )
    where = f"{world_size} x {device_bytes / GiB:.1f} GiB ({'GPUs' if on_gpu else 'CPU processes'})"
    if best is None:
        smallest = min(considered, key=lambda c: (c.peak_bytes, c.micro_batch_size))
        raise ConfigError(
            f"--auto: nothing fits on {where} (at best {smallest.describe()} needs about {smallest.peak_bytes / GiB:.0f} GiB per device "
            f"with {cfg.auto.memory_fraction:.0%} usable); use more GPUs, --parallel.cpu_offload true, or a shorter --data.seq_len"
        )
    t.micro_batch_size, t.grad_accum_steps = best.micro_batch_size, best.grad_accum_steps
    ac.mode, ac.every = best.ac_mode, best.ac_every if best.ac_mode == "selective" else ac.every
    comp.enabled = compiled
    if "compile.memory_budget" not in explicit:
        comp.memory_budget = best.memory_budget
    if "compile.loss" not in explicit:
        comp.loss = compiled
    kept = sorted(k for k in explicit if k in AUTO_FIELDS)
    if "train.grad_accum_steps" in kept and not mb_set:  # the per-rank batch is kept, split anew
        kept[kept.index("train.grad_accum_steps")] = (
            f"per-rank batch {fixed_batch} (micro_batch_size x grad_accum_steps)"
        )
    return {
        "chosen": best.describe(),
        "estimated_peak_gib": round(best.peak_bytes / GiB, 1),
        "device_gib": round(device_bytes / GiB, 1),
        "memory_fraction": cfg.auto.memory_fraction,
        "shard_degree": degree,
        "global_batch_sequences": best.micro_batch_size * best.grad_accum_steps * world_size,
        "kept": kept,
    }


#: The settings ``--auto`` may choose; any of them given explicitly is kept (grad_accum_steps: the per-rank batch it makes).
AUTO_FIELDS = (
    "train.micro_batch_size",
    "train.grad_accum_steps",
    "ac.mode",
    "ac.every",
    "compile.enabled",
    "compile.loss",
    "compile.memory_budget",
)
