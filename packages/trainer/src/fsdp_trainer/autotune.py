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
from .errors import ConfigError
from .flops import flops_per_token

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
#: (fitted to Llama-3.1-8B at equal micro-batch, where the lean budget costs about 0.7%).
LEAN_BUDGET, LEAN_RECOMPUTE = 0.7, 0.027
#: What recomputing a micro-batch's whole forward costs, as a share of its forward and backward: the forward is a little
#: over a quarter of the work (attention's backward costs more than twice its forward), and the fused loss is not
#: recomputed. Fitted to Llama-2-7B on 2 H200s, eager, micro batches 1 and 2, where full checkpointing ran at 0.825 and
#: 0.813 of the speed without (bench/results/2026-11-30-h200x2-fused-kernels.json).
RECOMPUTE_COST = 0.27
#: A micro-batch's fixed costs (optimizer step, FSDP's copies, launches), in micro-batches' worth of compute.
FIXED_COST = 0.3
#: Eager blocks' speed as a share of compiled ones, with ``model.fused_kernels`` (Llama-2-7B, micro batch 2: 0.94) and
#: with Hugging Face's element-wise RMSNorm and rotary code (0.83).
EAGER_SPEED, EAGER_SPEED_HF_KERNELS = 0.92, 0.81
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
    heads: int = 0
    head_dim: int = 0

    @property
    def embedding_params(self) -> int:
        """Parameters of the input embedding table (a lookup: no FLOPs)."""
        return self.vocab * self.hidden

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder blocks that FSDP gathers with the root: embeddings and lm_head."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def flops_per_token(self, seq_len: int) -> int:
        """Model FLOPs per trained token, as the trainer's MFU counts them (``fsdp_trainer.flops``)."""
        return flops_per_token(self.params, self.embedding_params, self.layers, self.heads, self.head_dim, seq_len)

    def work_flops_per_token(self, seq_len: int) -> int:
        """FLOPs per token the GPUs do: the MFU convention leaves out a tied lm_head's matmuls with the embedding."""
        return self.flops_per_token(seq_len) + (6 * self.vocab * self.hidden if self.tied else 0)

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
        spec: dict[str, Any] = {k: (hf.get(k) if isinstance(hf, dict) else getattr(hf, k, None)) for k in keys}
        return cls(
            vocab=spec["vocab_size"],
            hidden=spec["hidden_size"],
            ffn=spec["intermediate_size"],
            layers=spec["num_hidden_layers"],
            tied=bool(spec["tie_word_embeddings"]),
            kv_dim=presets.kv_dim(spec),
            block_params=presets.block_params(spec),
            params=presets.num_params(spec),
            heads=spec["num_attention_heads"],
            head_dim=spec["head_dim"] or spec["hidden_size"] // spec["num_attention_heads"],
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
    compute_bytes: int = 2,
) -> float:
    """Bytes kept per token for the whole decoder between forward and backward.

    ``compute_bytes``: bytes per element of the activations (2 for bf16 / fp16 compute, 4 for fp32).
    """
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
    return kept * compute_bytes / 2


@dataclass(frozen=True)
class MemoryBreakdown:
    """Where one GPU's memory goes in a training step, in bytes, at the two moments the peak can fall on.

    While activations peak (end of forward, start of backward) the GPU holds its parameter shards and optimizer
    moments, the unsharded blocks in flight, the activations and the loss's buffers; sharded gradients arrive as
    activations are freed. At the optimizer step it holds parameters, gradients and moments, plus the last unsharded
    gradients. The peak is the larger of the two; the lines do not all add up to it.
    """

    parameters: float
    """Sharded parameters (fp32, or bf16 beside their masters' remainders), counted in both phases."""
    gradients: float
    """Sharded gradients at the optimizer step."""
    optimizer: float
    """AdamW's two fp32 moments of the shard."""
    gathered: float
    """Unsharded copies in flight while activations peak: blocks being gathered or used, the root (embeddings,
    lm_head), and with gradient accumulation the unsharded gradients kept between micro-batches."""
    activations: float
    """What the decoder keeps for backward (``activation_bytes_per_token`` x tokens)."""
    buffers: float
    """The loss's per-chunk logits and lm_head gradient, and the hidden states around the decoder."""
    step_buffers: float
    """Unsharded gradients of the last units still being reduced when the optimizer step starts."""

    @property
    def forward_peak(self) -> float:
        """Bytes while activations peak."""
        return self.parameters + self.optimizer + self.gathered + self.activations + self.buffers

    @property
    def step_peak(self) -> float:
        """Bytes at the optimizer step."""
        return self.parameters + self.gradients + self.optimizer + self.step_buffers

    @property
    def peak(self) -> int:
        """The estimated peak of allocated bytes (``torch.cuda.max_memory_allocated``)."""
        return int(max(self.forward_peak, self.step_peak))

    @property
    def peak_phase(self) -> str:
        """``forward/backward`` or ``optimizer step``: where the peak falls."""
        return "forward/backward" if self.forward_peak >= self.step_peak else "optimizer step"


def memory_breakdown(
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
    compute_bytes: int | None = None,
) -> MemoryBreakdown:
    """One GPU's memory in a training step, by what holds it (see ``estimate_peak_bytes`` for the arguments).

    ``compute_bytes``: bytes per activation element; default ``param_bytes`` (the dtype blocks compute in).
    """
    n_shard = shape.params / max(shard_degree, 1)
    masters = master_weights and grad_accum_steps == 1
    if cpu_offload:
        parameters = gradients = optimizer = 0.0
    else:
        # fp32 parameters, or bf16 ones beside their masters' remainders; AdamW's two fp32 moments; the sharded
        # gradients, in the sharded parameters' dtype (bf16 beside masters, else fp32).
        parameters = (2 + master_bytes if masters else 4) * n_shard
        optimizer = 8 * n_shard
        gradients = (2 if masters else 4) * n_shard
    tokens = micro_batch * seq_len
    activations = tokens * activation_bytes_per_token(
        shape,
        compiled,
        ac_mode,
        ac_every,
        fused_kernels,
        memory_budget,
        fp8,
        param_bytes if compute_bytes is None else compute_bytes,
    )
    blocks_gathered = 3 if reshard_after_forward else shape.layers
    gathered = param_bytes * (blocks_gathered * shape.block_params + shape.root_params)
    if grad_accum_steps > 1:
        gathered += reduce_bytes * shape.params
    chunk = min(loss_chunk_tokens, tokens)
    logits = chunk * shape.vocab
    if fused_loss:  # fp32 logits and their softmax, bf16 gradient; lm_head gradient (+ fp32 sum over chunks)
        loss = logits * (4 + 4 + 2) + shape.vocab * shape.hidden * (2 + (4 if tokens > chunk else 0))
    else:  # fp32 logits, bf16 logits, fp32 gradient in the checkpointed recompute
        loss = logits * (4 + 2 + 4)
    hidden_states = tokens * shape.hidden * 2 * 4  # embeddings out, final norm, its gradient
    return MemoryBreakdown(
        parameters=parameters,
        gradients=gradients,
        optimizer=optimizer,
        gathered=gathered,
        activations=activations,
        buffers=loss + hidden_states,
        step_buffers=(param_bytes + 4) * (shape.block_params + shape.root_params),
    )


def estimate_peak_bytes(shape: Shape, seq_len: int, micro_batch: int, **settings: Any) -> int:
    """Estimated peak of allocated bytes (``torch.cuda.max_memory_allocated``) on one GPU in a training step: the
    ``peak`` of :func:`memory_breakdown`, which takes the same arguments and says where the memory goes.

    ``grad_accum_steps`` > 1: between micro-steps FSDP keeps every gradient unsharded, in the
    reduce dtype (the price of skipping the reduce-scatter). ``reshard_after_forward`` False
    (shard_grad_op): every block stays gathered from its forward to its backward. ``master_weights``: the run keeps
    bf16 parameters and their masters when it does not accumulate (``precision.master_weights``), ``master_bytes``
    per parameter beside the bf16 one (2: the remainder the Triton AdamW keeps; 4: a whole fp32 copy).
    ``fp8``: float8 linears (``fp8.enabled``), which keep less per token.
    """
    return memory_breakdown(shape, seq_len, micro_batch, **settings).peak


def relative_speed(
    ac_recompute: float, micro_batch: int, compiled: bool, fp8: bool = False, fused_kernels: bool = True
) -> float:
    """Relative tokens/s of one GPU's training step, comparable between settings of one model and GPU.

    A micro-batch costs its forward and backward, plus ``RECOMPUTE_COST`` of that per forward recomputed
    (``ac_recompute``: the share of the decoder checkpointed); each micro-batch also pays fixed costs worth
    ``FIXED_COST`` micro-batches (``FP8_FIXED_COST`` under FP8, whose matmuls are faster). Eager blocks run at
    ``EAGER_SPEED`` of compiled ones (``EAGER_SPEED_HF_KERNELS`` without ``model.fused_kernels``).
    """
    fixed = FP8_FIXED_COST if fp8 else FIXED_COST
    kernels = 1.0 if compiled else (EAGER_SPEED if fused_kernels else EAGER_SPEED_HF_KERNELS)
    return kernels * micro_batch / (micro_batch * (1.0 + RECOMPUTE_COST * ac_recompute) + fixed)


def recompute_share(ac_mode: str, every: int) -> float:
    """Share of the decoder's forward that activation checkpointing recomputes in backward."""
    return {"none": 0.0, "full": 1.0}.get(ac_mode, 1.0 / max(every, 1))


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
        acs = [(ac_fixed[0], ac_fixed[1], recompute_share(*ac_fixed))]
    elif ac_every_fixed is not None:
        acs = [
            ("none", 1, 0.0),
            ("selective", ac_every_fixed, recompute_share("selective", ac_every_fixed)),
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
                speed = relative_speed(
                    recompute + (LEAN_RECOMPUTE if share < 1 else 0.0), mb, compiled, fp8, fused_kernels
                )
                considered.append(Candidate(mode, every, mb, accum, compiled, peak, speed, share))
    considered.sort(key=lambda c: (-c.speed, c.peak_bytes))
    fitting = [c for c in considered if c.peak_bytes <= budget]
    if not fitting:
        return None, considered
    # Near-ties (within NEAR_TIE of the fastest) go to the smallest footprint: the estimate is a model.
    near = [c for c in fitting if c.speed >= fitting[0].speed * (1 - NEAR_TIE)]
    return min(near, key=lambda c: c.peak_bytes), considered


def mesh_shape(parallel: Any, world_size: int, local_world_size: int) -> tuple[int, int]:
    """(replicate, shard) sizes of the device mesh for ``parallel.sharding`` (a ``ParallelConfig``).

    Raises ``ConfigError`` when ``parallel.shard_size`` x ``parallel.replicate_size`` does not tile the world.
    """
    if parallel.sharding in ("full_shard", "shard_grad_op"):
        return 1, world_size
    if parallel.sharding == "no_shard":
        return world_size, 1
    shard, replicate = parallel.shard_size, parallel.replicate_size
    if not shard:
        shard = world_size // replicate if replicate else min(local_world_size, world_size)
    if not replicate:
        replicate = max(world_size // shard, 1)
    if shard * replicate != world_size:
        raise ConfigError(
            f"--parallel.shard_size: shard_size {shard} x replicate_size {replicate} must equal the world size {world_size}"
        )
    return replicate, shard


def shard_degree(cfg: Any, world_size: int, local_world_size: int) -> int:
    """Over how many ranks parameters and optimizer state are split (the mesh's shard dimension)."""
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


# --------------------------------------------------------------------------- step time
# The estimate of how long a step takes (``fsdp-sdk estimate``, ``fsdp-sdk bench scale``): compute at an MFU the
# trainer measured, scaled to other settings by ``relative_speed``, plus the part of FSDP's collectives that compute
# does not hide.


@dataclass(frozen=True)
class MeasuredMfu:
    """An MFU the trainer measured on a GPU model, and the settings it ran with; ``modelled_mfu`` scales it."""

    gpu_model: str
    """``InstanceType.gpu_model`` of the GPUs it ran on."""
    mfu: float
    """Model FLOPs utilisation against the GPU's dense peak (twice the bf16 peak under FP8)."""
    micro_batch: int
    compiled: bool
    fp8: bool = False
    memory_budget: float = 1.0
    ac_recompute: float = 0.0
    source: str = ""
    """What ran, and the record that holds it."""


#: The MFUs the speed model starts from, one per GPU model (and FP8 or not). GPU models without one borrow the first
#: entry's (the estimate says so).
MEASURED_MFU: tuple[MeasuredMfu, ...] = (
    MeasuredMfu(
        "H200",
        0.594,
        5,
        True,
        memory_budget=LEAN_BUDGET,
        source="Llama-3.1-8B, --auto (no checkpointing, micro batch 5, compile.memory_budget 0.7), FSDP2 over 2 H200s, "
        "seq 4096: bench/results/2026-12-01-h200x2-speed-suite.json, variant 8b-auto",
    ),
    MeasuredMfu(
        "H200",
        0.414,
        6,
        True,
        fp8=True,
        source="Llama-2-7B, FP8 tensorwise, --auto (no checkpointing, micro batch 6), FSDP2 over 2 H200s, seq 4096: "
        "bench/results/2026-12-01-h200x2-speed-suite.json, variant 7b-fp8-auto",
    ),
)


def measured_mfu(gpu_model: str, fp8: bool = False) -> tuple[MeasuredMfu, bool]:
    """The trainer's measured MFU for ``gpu_model``, and whether it was measured on that model (False: another's)."""
    same_kind = [m for m in MEASURED_MFU if m.fp8 == fp8] or list(MEASURED_MFU)
    for measured in same_kind:
        if measured.gpu_model == gpu_model:
            return measured, True
    return same_kind[0], False


def modelled_mfu(
    reference: MeasuredMfu,
    *,
    ac_recompute: float,
    micro_batch: int,
    compiled: bool,
    fp8: bool = False,
    fused_kernels: bool = True,
    memory_budget: float = 1.0,
) -> float:
    """``reference.mfu`` scaled by ``relative_speed`` from the settings it was measured at to these."""

    def speed(recompute: float, mb: int, comp: bool, budget: float, fused: bool) -> float:
        lean = LEAN_RECOMPUTE if comp and budget <= LEAN_BUDGET else 0.0
        return relative_speed(recompute + lean, mb, comp, fp8, fused)

    ref = reference
    return (
        ref.mfu
        * speed(ac_recompute, micro_batch, compiled, memory_budget, fused_kernels)
        / speed(ref.ac_recompute, ref.micro_batch, ref.compiled, ref.memory_budget, True)
    )


@dataclass(frozen=True)
class Collective:
    """One kind of collective FSDP runs in a training step, summed over its calls."""

    kind: str
    """``all-gather``, ``reduce-scatter`` or ``all-reduce``."""
    phase: str
    """``forward`` or ``backward``: the compute it overlaps with."""
    ranks: int
    """Ranks in each group."""
    nodes: int
    """Nodes each group spans."""
    ranks_per_node: int
    """Ranks of one group on one node."""
    bytes: float
    """Bytes each GPU receives over the step, all calls together."""
    calls: int
    """Calls per step (one per FSDP unit and micro-batch)."""


def collectives(
    shape: Shape,
    *,
    sharding: str,
    nodes: int,
    gpus_per_node: int,
    shard_degree: int,
    micro_batches: int = 1,
    param_bytes: int = 2,
    reduce_bytes: int = 4,
    reshard_after_forward: bool = True,
    fp8_all_gather: bool = False,
) -> list[Collective]:
    """The collectives of one optimizer step of ``micro_batches`` micro-batches, per GPU.

    Ring volumes: an all-gather or reduce-scatter over ``g`` ranks moves ``(g - 1) / g`` of the full tensor through
    each GPU, an all-reduce twice that. Parameters are gathered in ``param_bytes`` (float8 for the blocks with
    ``fp8_all_gather``) for every micro-batch's forward and, when resharded after it, again for its backward;
    gradients are reduce-scattered in ``reduce_bytes`` once per step (accumulated unsharded before). Hybrid sharding
    then all-reduces each shard across the replicas; ``no_shard`` all-reduces whole gradients.
    """
    world = nodes * gpus_per_node
    units = shape.layers + (1 if shape.tied else 2)  # blocks, the root (embeddings), the lm_head
    block_bytes = 1 if fp8_all_gather else param_bytes
    gathered = (
        shape.layers * shape.block_params * block_bytes
        + (shape.params - shape.layers * shape.block_params) * param_bytes
    )
    out: list[Collective] = []
    shard = max(shard_degree, 1)
    if sharding != "no_shard" and shard > 1:
        per_node = min(shard, gpus_per_node)
        span = -(-shard // gpus_per_node)
        share = (shard - 1) / shard
        passes = [("forward", micro_batches)] + ([("backward", micro_batches)] if reshard_after_forward else [])
        for phase, times in passes:
            out.append(Collective("all-gather", phase, shard, span, per_node, times * share * gathered, times * units))
        out.append(
            Collective("reduce-scatter", "backward", shard, span, per_node, share * shape.params * reduce_bytes, units)
        )
    replicas = world // shard
    if replicas > 1:
        per_node = max(gpus_per_node // shard, 1) if shard < gpus_per_node else 1
        volume = 2 * (replicas - 1) / replicas * shape.params / shard * reduce_bytes
        out.append(
            Collective("all-reduce", "backward", replicas, max(replicas // per_node, 1), per_node, volume, units)
        )
    return out


#: Share of a link's nominal bandwidth NCCL's ring collectives reach with large messages (assumed, not measured here).
NVLINK_EFFICIENCY = 0.8
NETWORK_EFFICIENCY = 0.8
#: NCCL's ring latencies (its tuning model, Simple protocol), seconds: per collective, per step within a node, per
#: step between nodes.
NCCL_BASE_LATENCY, NCCL_INTRA_STEP_LATENCY, NCCL_NETWORK_STEP_LATENCY = 8.4e-6, 3.4e-6, 14e-6


@dataclass(frozen=True)
class Links:
    """What collectives run over: achievable bandwidths, bytes per second."""

    intra_node: float
    """Per GPU, one direction, to the other GPUs of its node."""
    network: float
    """Per node, one direction, to other nodes (all its network interfaces)."""
    gpus_per_node: int
    """GPUs of one node that share ``network``."""

    @classmethod
    def nominal(
        cls,
        intra_node_gbytes_per_s: float,
        network_gbps: float,
        gpus_per_node: int,
        *,
        network_efficiency: float = NETWORK_EFFICIENCY,
        intra_node_efficiency: float = NVLINK_EFFICIENCY,
    ) -> Links:
        """From the instance type's figures (GB/s per GPU within a node, Gbit/s per node), at these efficiencies."""
        return cls(
            intra_node_gbytes_per_s * 1e9 * intra_node_efficiency,
            network_gbps / 8 * 1e9 * network_efficiency,
            gpus_per_node,
        )


def collective_seconds(collective: Collective, links: Links) -> float:
    """Seconds the collective's calls of one step take, if nothing else used the links.

    A ring is as fast as its slowest link: each GPU's link within the node, and between nodes the node's network
    shared by the groups that cross it at once (``gpus_per_node / ranks_per_node`` of them).
    """
    c = collective
    if c.ranks < 2:
        return 0.0
    rounds = 2 if c.kind == "all-reduce" else 1
    steps, network_steps = rounds * (c.ranks - 1), rounds * (c.nodes - 1)
    latency = c.calls * (
        NCCL_BASE_LATENCY
        + (steps - network_steps) * NCCL_INTRA_STEP_LATENCY
        + network_steps * NCCL_NETWORK_STEP_LATENCY
    )
    bandwidths = []
    if c.ranks_per_node > 1:
        bandwidths.append(links.intra_node)
    if c.nodes > 1:
        bandwidths.append(links.network * c.ranks_per_node / max(links.gpus_per_node, 1))
    return c.bytes / min(bandwidths) + latency if bandwidths else latency


@dataclass(frozen=True)
class StepTime:
    """The seconds of one optimizer step on one GPU, and where they go."""

    forward: float
    """Forward compute of all micro-batches."""
    backward: float
    """Backward compute, with any forward recomputed for activation checkpointing."""
    fixed: float
    """Per-micro-batch fixed costs: the optimizer step, FSDP's copies, launches."""
    communication: float
    """What the collectives would take alone (``collective_seconds``, all of them)."""
    exposed: float
    """The part of it compute does not hide."""

    @property
    def compute(self) -> float:
        """Forward, backward and fixed costs."""
        return self.forward + self.backward + self.fixed

    @property
    def seconds(self) -> float:
        """The step: compute plus exposed communication."""
        return self.compute + self.exposed


def step_time(
    shape: Shape,
    seq_len: int,
    micro_batch: int,
    *,
    grad_accum_steps: int,
    peak_tflops: float,
    mfu: float,
    ac_recompute: float,
    comms: list[Collective],
    links: Links,
    fp8: bool = False,
) -> StepTime:
    """One GPU's step: its FLOPs at ``mfu`` of ``peak_tflops`` (``modelled_mfu``), plus exposed communication.

    Compute splits as ``relative_speed`` models it: per micro-batch a forward (``RECOMPUTE_COST`` of forward and
    backward), a backward with the recomputed share of the forward, and ``FIXED_COST`` micro-batches of fixed costs.
    Overlap: FSDP gathers the next unit while the current one computes, and reduces a unit's gradients while the
    next computes its backward. So each micro-batch's forward all-gathers hide behind its forward compute, its
    backward all-gathers and (in the last micro-batch) the reduce-scatters and all-reduces behind its backward;
    what exceeds that window is exposed, and so is each pass's first unit (the last unit's, for reductions).
    Fixed costs hide nothing. ``mfu`` counts model FLOPs as the trainer does; a tied lm_head's matmuls come on top.
    """
    tokens = micro_batch * grad_accum_steps * seq_len
    compute = tokens * shape.work_flops_per_token(seq_len) / (peak_tflops * 1e12 * mfu)
    fixed_cost = FP8_FIXED_COST if fp8 else FIXED_COST
    denominator = micro_batch * (1 + RECOMPUTE_COST * ac_recompute) + fixed_cost
    forward = compute * micro_batch * RECOMPUTE_COST / denominator
    backward = compute * micro_batch * (1 - RECOMPUTE_COST + RECOMPUTE_COST * ac_recompute) / denominator
    fixed = compute * fixed_cost / denominator
    units = shape.layers + (1 if shape.tied else 2)
    seconds = {(c.kind, c.phase): 0.0 for c in comms}
    for c in comms:
        seconds[(c.kind, c.phase)] += collective_seconds(c, links)
    gather_fwd = seconds.get(("all-gather", "forward"), 0.0) / grad_accum_steps
    gather_bwd = seconds.get(("all-gather", "backward"), 0.0) / grad_accum_steps
    reduce = seconds.get(("reduce-scatter", "backward"), 0.0) + seconds.get(("all-reduce", "backward"), 0.0)
    fwd_window, bwd_window = forward / grad_accum_steps, backward / grad_accum_steps

    def exposed(comm: float, window: float) -> float:
        return max(0.0, comm * (1 - 1 / units) - window) + comm / units

    shown = grad_accum_steps * exposed(gather_fwd, fwd_window)
    shown += (grad_accum_steps - 1) * exposed(gather_bwd, bwd_window) + exposed(gather_bwd + reduce, bwd_window)
    return StepTime(forward, backward, fixed, sum(seconds.values()), shown)
