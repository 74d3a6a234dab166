"""Trainer configuration: nested dataclasses, one section per concern, a docstring under every field.

Importable without torch: the SDK validates trainer settings offline with
``TrainerConfig.from_dict(d)``. Settings come from a YAML/JSON file and then
``--section.field value`` overrides (``load_config``). Fields left at ``None``
are derived in ``__post_init__`` (the rule is in each docstring), so ``to_dict()``
returns the resolved config that a run actually used.
"""

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import options
from .errors import ConfigError
from .presets import PRESETS, is_tiny

__all__ = ["ConfigError", "TrainerConfig", "load_config"]

Dtype = Literal["bf16", "fp16", "fp32"]


@dataclass(eq=False, repr=False)
class ModelConfig(options.Section):
    """The ``--model.*`` options: which Llama, and how its weights start."""

    preset: str = "tiny"
    """Architecture: tiny, tiny-gqa, llama2-7b, llama2-13b, llama2-70b, llama3.1-8b or llama3.1-70b (ignored when model.name_or_path is set)."""
    name_or_path: str | None = None
    """Local Hugging Face model directory or Hub id; when set, the architecture (and with model.init=pretrained the weights) come from it. Hub downloads use $HF_TOKEN."""
    init: Literal["random", "pretrained"] | None = None
    """random: fresh weights from train.seed; pretrained: weights from model.name_or_path. Default: pretrained when model.name_or_path is set, else random."""
    random_init: Literal["auto", "replicated", "sharded"] = "auto"
    """Where random weights are drawn. replicated: every rank draws the full model on CPU from train.seed, so the weights are identical whatever the sharding (parity tests); sharded: each rank draws its own shards on the device after sharding (no full copy anywhere; differs with the sharding). auto: replicated up to 1B parameters, sharded above."""
    attn_implementation: str = "sdpa"
    """Attention kernel passed to transformers (sdpa, eager, flash_attention_2, flex_attention)."""
    sdpa_backend: Literal["auto", "cudnn", "flash", "efficient", "math", "default"] = "auto"
    """SDPA kernel when model.attn_implementation is sdpa: checked at start-up against the run's shapes (if it refuses them, torch's default order is used, with a warning); math is the fallback for other calls. Grouped key/value heads go to the kernel as they are wherever it takes them for the run's shapes. auto: cudnn on sm_90+ GPUs (H100/H200; bench/reports/2026-11-30-h200-attention-kernels.md), torch's default order elsewhere; default: always torch's default order."""
    fused_kernels: bool = True
    """Fused RMSNorm (F.rms_norm: one kernel each way on CUDA) and a rotary embedding on the projections' contiguous layout, in place of Hugging Face's element-wise code (converters/fused_kernels.py). Pays in eager runs (bench/reports/2026-11-30-llama2-7b-h200x2-fused-kernels.md); compiled blocks gain nothing, since the compiler fuses these itself. Same weights and checkpoints; equal results in fp32, one rounding fewer in bf16."""
    tokenizer: str | None = None
    """Tokenizer directory or Hub id, or 'bytes' for the builtin byte-level tokenizer (256 bytes + BOS/EOS/PAD). Default: model.name_or_path when set, 'bytes' for tiny presets, none otherwise (synthetic data needs none)."""


@dataclass(eq=False, repr=False)
class DataConfig(options.Section):
    """The ``--data.*`` options: where the tokens come from, how they are cut and in what order."""

    source: Literal["synthetic", "text", "jsonl", "hf"] | None = None
    """synthetic: seeded random tokens (benchmarks); text: .txt files, documents split on blank lines; jsonl: one JSON object per line (data.text_field); hf: a Hugging Face dataset (pip install fsdp-trainer[hub]). Default: jsonl when data.path ends in .jsonl, text when data.path is any other path; without data.path, text (the builtin corpus) for tiny presets without model.name_or_path, synthetic otherwise."""
    path: str | None = None
    """File or directory for text/jsonl sources. For text, unset means the builtin corpus: docstrings of Python standard-library modules (no download, nothing shipped)."""
    dataset: str = "knkarthick/samsum"
    """Hub dataset name for data.source=hf. Datasets with 'dialogue' and 'summary' columns (samsum; the default is its parquet copy, since the original 'samsum' is a loading script that datasets>=4 no longer runs) use the summarisation prompt; others use data.text_field."""
    split: str = "train"
    """Dataset split for data.source=hf."""
    text_field: str = "text"
    """Field holding the text in jsonl lines and in non-dialogue hf datasets."""
    seq_len: int = 2048
    """Tokens per training sequence; documents are concatenated and packed into seq_len+1 windows (inputs and labels shifted by one)."""
    seed: int | None = None
    """Seed of the sample order and of synthetic tokens. Default: train.seed."""


@dataclass(eq=False, repr=False)
class TrainConfig(options.Section):
    """The ``--train.*`` options: steps, batch, optimizer and schedule."""

    steps: int = 100
    """Optimizer steps to run (in total, counting steps done before a resume)."""
    micro_batch_size: int = 1
    """Sequences per rank per forward/backward."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; global batch = micro_batch_size * grad_accum_steps * world size sequences."""
    lr: float = 3e-4
    """Peak learning rate of AdamW."""
    min_lr_ratio: float = 0.1
    """The decay ends at min_lr_ratio * train.lr."""
    warmup_steps: int = 10
    """Steps of linear warm-up from near zero to train.lr."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Decay after warm-up, over the remaining steps."""
    weight_decay: float = 0.1
    """AdamW weight decay (not applied to norm weights)."""
    adamw: Literal["auto", "fused", "foreach", "triton"] = "auto"
    """AdamW implementation. fused: torch's fused CUDA kernels; foreach: torch's multi-tensor ops (CPU and GPU); triton: one Triton kernel per parameter shard, at memory speed (CUDA; fp32 parameters, or bf16 ones with their masters' lower 16 bits under precision.master_weights optimizer; optim/triton_adamw.py); auto: triton on GPUs where Triton is installed, fused without it and with fp8.enabled (where fused measured faster), foreach on CPU and with parallel.cpu_offload (bench/reports/2026-11-30-llama3.1-8b-h200-triton-adamw.md). All keep the same optimizer state, so checkpoints move between them."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value; 0 disables clipping (the norm is still reported)."""
    loss_chunk_tokens: int = 4096
    """Tokens per chunk of the lm_head + cross-entropy; only one chunk's logits exist at a time (larger chunks measured no faster: bench/reports/2026-11-30-llama3.1-8b-h200-fused-loss.md)."""
    fused_loss: bool = True
    """Compute each loss chunk's gradients during the forward (no logits kept, no lm_head recompute in backward; holds one lm_head-sized gradient from forward to backward). false: checkpoint each chunk and recompute its logits in backward (what fp16 runs always do: their loss scale must reach the gradients before the cast to fp16)."""
    seed: int = 42
    """Master seed: random weights, and data.seed / runtime.seed unless set."""
    output_dir: str = "./outputs"
    """Where metrics, summary.json and (by default) checkpoints go."""
    log_every: int = 1
    """Print a metrics line every N steps (every step is still written to the metrics file)."""


@dataclass(eq=False, repr=False)
class ParallelConfig(options.Section):
    """The ``--parallel.*`` options: the FSDP API, sharding and what FSDP overlaps."""

    api: Literal["fsdp2", "fsdp1", "none"] = "fsdp2"
    """fsdp2: torch fully_shard (DTensor); fsdp1: FullyShardedDataParallel; none: a plain single-process model (a reference for parity checks; world size must be 1)."""
    sharding: Literal["full_shard", "hybrid_shard", "shard_grad_op", "no_shard"] = "full_shard"
    """full_shard: parameters, gradients and optimizer state sharded over all ranks; hybrid_shard: sharded within a group of parallel.shard_size ranks, replicated across groups; shard_grad_op: parameters stay gathered between forward and backward; no_shard: every rank holds everything (like DDP)."""
    shard_size: int = 0
    """hybrid_shard: ranks per shard group. 0 = ranks per node ($LOCAL_WORLD_SIZE), or world size / parallel.replicate_size when that is set."""
    replicate_size: int = 0
    """hybrid_shard: number of replicas. 0 = world size / parallel.shard_size. shard_size * replicate_size must equal the world size."""
    reshard_after_forward: bool | None = None
    """fsdp2: free gathered parameters after forward. Default: true, except false for shard_grad_op."""
    cpu_offload: bool = False
    """Keep sharded parameters, gradients and optimizer state in CPU memory (CUDA only)."""
    forward_prefetch: bool = False
    """Issue the next block's all-gather before the current block's forward runs."""
    backward_prefetch: Literal["pre", "post", "none"] = "pre"
    """When to prefetch the next all-gather in backward. fsdp2 always prefetches the previous block ('pre'); 'post' and 'none' are fsdp1-only."""
    limit_all_gathers: bool = True
    """fsdp1: rate-limit all-gathers to bound memory (fsdp2 always does)."""


@dataclass(eq=False, repr=False)
class PrecisionConfig(options.Section):
    """The ``--precision.*`` options: compute, reduction and master-weight dtypes."""

    mode: Dtype = "bf16"
    """Training precision. bf16/fp16: parameters cast for compute, fp32 master weights and optimizer; fp16 adds a gradient scaler."""
    param_dtype: Dtype | None = None
    """Dtype of gathered parameters and compute. Default: precision.mode."""
    reduce_dtype: Dtype | None = None
    """Dtype of gradient reduction across ranks. Default: fp32 (sums over many ranks lose precision in 16 bits); bf16 halves the traffic and is faster over several GPUs (bench/reports/2026-12-01-llama3.1-8b-h200x2-vs-torchtitan.md), a numerics choice --auto leaves to you."""
    master_weights: Literal["auto", "params", "optimizer"] = "auto"
    """Where the fp32 weights live. params: the parameters are fp32 and FSDP casts them to precision.param_dtype for each all-gather; optimizer: the parameters are bf16 and the optimizer keeps the other 16 bits of each fp32 value, read and written by the Triton AdamW in the same pass (FSDP2 then skips the cast, and gradients stay bf16: less memory traffic, and the same memory as fp32 parameters; converters/master_weights.py, bench/reports/2026-11-30-llama3.1-8b-h200x2-master-weights.md). Checkpoints are the same either way. optimizer needs fsdp2, bf16, the Triton AdamW and no gradient accumulation (bf16 gradients would accumulate in bf16). auto: optimizer where those hold (GPU runs with Triton), params otherwise."""


@dataclass(eq=False, repr=False)
class ActivationCheckpointConfig(options.Section):
    """The ``--ac.*`` options: activation checkpointing."""

    mode: Literal["none", "full", "selective"] = "none"
    """Recompute decoder blocks in backward to save activation memory: none, full (every block) or selective (every ac.every-th block)."""
    every: int = 2
    """selective: checkpoint one block in every ac.every blocks."""
    offload_layers: int = 0
    """Decoder blocks, from the first, whose saved activations are copied to pinned host memory during forward and back ahead of their backward (side stream, copy engines over PCIe; converters/activation_offload.py). Frees about one block's activations each, at a small cost in speed: use it when a run does not fit otherwise (bench/reports/2026-11-30-llama3.1-8b-h200x2-activation-offload.md). CUDA only; 0: off."""


@dataclass(eq=False, repr=False)
class CompileConfig(options.Section):
    """The ``--compile.*`` options: torch.compile of the blocks and the loss."""

    enabled: bool = False
    """torch.compile each decoder block (before FSDP wraps it; FSDP1 keeps use_orig_params=True for it)."""
    loss: bool = False
    """torch.compile the lm_head + cross-entropy of one chunk (fused or chunked, see train.fused_loss)."""
    memory_budget: float = 1.0
    """Activation memory what the trainer compiles keeps for backward (the blocks; also the loss with compile.loss and train.fused_loss false), as a fraction of what the compiler keeps by default (torch._functorch.config.activation_memory_budget, set for the process); below 1 it recomputes the cheapest operations in backward instead. 0.7 on Llama blocks: the RMSNorms and SiLU(gate)*up are recomputed, a third less memory per token. Use it to make room for a larger micro-batch, which pays more than the recompute costs (bench/reports/2026-11-30-llama3.1-8b-h200x2-memory-budget.md); --auto weighs it. 0 is the whole block recomputed."""


@dataclass(eq=False, repr=False)
class Fp8Config(options.Section):
    """The ``--fp8.*`` options: float8 linear layers."""

    enabled: bool = False
    """Float8 training of the decoder's linear layers with torchao (pip install fsdp-trainer[fp8]; converters/float8.py); needs a Hopper-class GPU (sm_89 or newer). Faster than bf16 with the loss within 1% of it (bench/reports/2026-12-01-llama2-7b-h200x2-bf16-and-fp8-throughput.md, bench/reports/2026-11-30-llama2-7b-h200-fp8-loss.md)."""
    recipe: Literal["tensorwise", "rowwise"] = "tensorwise"
    """torchao scaling recipe: tensorwise (one scale per tensor; the fastest, and the one measured within 1% of bf16's loss) or rowwise (one scale per row; slower, for a run whose loss departs under tensorwise)."""
    all_gather: bool = False
    """fsdp2 + tensorwise: all-gather weights in float8 (halves all-gather traffic; part of the fastest FP8 configuration)."""


@dataclass(eq=False, repr=False)
class AutoConfig(options.Section):
    """The ``--auto.*`` options: settings chosen from the memory model."""

    enabled: bool = False
    """Pick the fastest settings that fit in memory (--auto for short): micro-batch (keeping micro_batch_size x grad_accum_steps when either is given), activation checkpointing, compile and its memory budget, from a memory model of the architecture (bench/reports/2026-12-01-h200x2-auto.md); settings given explicitly are kept, and nothing that changes the numerics (reduce dtype, FP8) or is experimental is chosen. The choice is logged and recorded in summary.json."""
    memory_fraction: float = 0.85
    """Share of each device's memory the estimated peak may fill (the rest: CUDA context, communication buffers, allocator slack)."""


@dataclass(eq=False, repr=False)
class CheckpointConfig(options.Section):
    """The ``--checkpoint.*`` options: saving, resuming and exporting."""

    enabled: bool = True
    """Save checkpoints (sharded, with torch.distributed.checkpoint). Off: no save, no resume."""
    dir: str | None = None
    """Checkpoint directory. Default: <train.output_dir>/checkpoints. Or s3://BUCKET/PREFIX (pip install fsdp-trainer[s3]; endpoint, region and credentials from the standard AWS settings; a checkpoint counts once its COMPLETE object is written, after every rank's shards)."""
    every_steps: int = 0
    """Save every N steps; 0 = only at the end."""
    keep: int = 2
    """Complete checkpoints to keep (older ones are deleted)."""
    resume: str = "auto"
    """auto: resume from the newest complete checkpoint in checkpoint.dir if any; never: start fresh; or the path of a step_XXXXXXXX directory (then the complete checkpoints in checkpoint.dir newer than it, left by the abandoned run, are deleted once it is loaded)."""
    export_hf: str | None = None
    """At the end, write a consolidated Hugging Face model directory (save_pretrained, plus tokenizer) here: a directory or s3://BUCKET/PREFIX."""
    export_dtype: Dtype | None = None
    """Dtype of the exported weights. Default: precision.param_dtype."""
    async_mode: Literal["auto", "disabled", "async"] = "auto"
    """How saves run. async: in the background (torchtitan's async_mode): each rank copies its shards into pinned host buffers kept between saves, on a CUDA stream of its own that overlaps the next step's forward and backward (the optimizer step waits for the copy on the device), and DCP writes that copy from a background thread; the next save waits for the previous one (the first save's end says, from the store's measured speed, whether saves will queue and what interval would not), a failed background save fails the run with its cause, the last one is waited for. disabled: synchronous, training waits for the write. auto: async unless the copies would take over half the node's available host memory. (Replaces checkpoint.async_save true/false/none.)"""
    write_threads: int = 1
    """Threads each rank's save writes its shards with, one file each (DCP's thread_count): more can help a store that one writing thread cannot fill (a RAID of NVMe drives, memory, S3)."""
    s3_client: Literal["s3torchconnector", "fsspec"] = "s3torchconnector"
    """What writes and reads s3:// checkpoints: s3torchconnector (AWS's CRT client and DCP storage), or fsspec (torch's FsspecWriter/Reader over s3fs, pip install s3fs), the fallback for an S3-compatible store the CRT client cannot serve."""
    s3_connect_timeout_s: float = 10.0
    """Seconds the first contact with each s3:// location (at start, before the process group) may take before the run is refused: an endpoint that does not answer."""
    s3_timeout_s: float = 60.0
    """Seconds any S3 operation of a checkpoint (a listing, a small object, a read, a shard upload) may go without an answer from the endpoint before the run fails saying so."""
    save_timeout_s: float = 1800.0
    """Seconds a whole save may take (an asynchronous one: to its commit, checked at every step); past it the run fails naming the checkpoint."""


@dataclass(eq=False, repr=False)
class MetricsConfig(options.Section):
    """The ``--metrics.*`` options: what is measured and where it goes."""

    file: str | None = None
    """Per-step JSON lines. Default: <train.output_dir>/metrics.jsonl."""
    peak_tflops: float | None = None
    """Peak dense TFLOP/s of one accelerator for MFU. Default: looked up from the GPU name; unknown (MFU null) on CPU."""
    warmup_steps: int = 2
    """First steps left out of the summary's averages (compilation, allocator warm-up)."""
    profile_steps: str = ""
    """Steps to trace with torch.profiler, 'A-B' or 'A' (e.g. 8-9): every rank writes <train.output_dir>/profile/trace-rank<R>.json.gz (open it in Perfetto), the leader also kernels.txt (GPU time by kernel). Empty: no profiling."""
    prometheus_port: int = 0
    """Serve the per-step metrics for Prometheus on this port (pip install fsdp-trainer[prometheus]): the leader, and the first process of each other node where the port is free. 0: off."""
    prometheus_linger_s: float = 0.0
    """At the end of the run, wait up to this many seconds until Prometheus has scraped the last step's values."""

    def profile_range(self) -> tuple[int, int] | None:
        """``profile_steps`` as (first, last) steps, inclusive; None when off. Raises ConfigError on a bad value."""
        text = self.profile_steps.strip()
        if not text:
            return None
        first, _, last = text.partition("-")
        try:
            a, b = int(first), int(last or first)
        except ValueError:
            raise ConfigError(
                f"--metrics.profile_steps: expected 'A-B' or 'A' (step numbers), got {self.profile_steps!r}"
            ) from None
        if not 1 <= a <= b:
            raise ConfigError(f"--metrics.profile_steps: steps count from 1 and A <= B (got {self.profile_steps!r})")
        return a, b


@dataclass(eq=False, repr=False)
class RuntimeConfig(options.Section):
    """The ``--runtime.*`` options: device, process group and logging."""

    device: Literal["auto", "cuda", "cpu"] = "auto"
    """auto: CUDA when a GPU is visible, else CPU."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend. auto: nccl (with gloo for CPU tensors) on CUDA, gloo on CPU."""
    seed: int | None = None
    """Seed of torch's and Python's global generators on every rank (dropout, anything stochastic). Default: train.seed."""
    log_all_ranks: bool = False
    """Log from every rank, not only the leader."""
    timeout_s: int = 1800
    """Collective timeout in seconds (rank 0 loading a 70B checkpoint keeps the others waiting)."""


@dataclass(eq=False, repr=False)
class ExperimentalConfig(options.Section):
    """The ``--experimental.*`` options: speed-ups that rely on private torch internals or wait for a GPU measurement; off by default."""

    symmetric_memory: bool = False
    """fsdp2 on GPUs: every unit's all-gathers and reduce-scatters in NCCL symmetric memory; on one node the all-gathers then run on the copy engines and leave every SM to compute (the trainer sets NCCL_CTA_POLICY=2 unless it is set). Use it for FSDP2 over several GPUs of one node: faster, numerics unchanged (bench/reports/2026-11-30-llama3.1-8b-h200x2-symmetric-memory.md). Experimental: private torch modules (experimental/symmetric_memory.py)."""
    stage_on_device: bool = False
    """Asynchronous saves on CUDA: copy the shards to spare device memory first, when the run's peak leaves room for them beside a margin (5% of the device, at least 2 GiB; else pinned host memory as usual), so the next optimizer step waits for a device-to-device copy, not one at PCIe speed, and move them to pinned host memory in the background. Experimental until a GPU measurement stands behind it (bench/reports/2026-12-06-h200-checkpoint-blocking.md). (Was checkpoint.stage_on_device.)"""
    flat_shards: bool = False
    """fsdp2: keep each unit's parameter shards in one buffer that its all-gather sends as is, instead of copying them into the all-gather's buffer before every all-gather (experimental/flat_shards.py). Applies to units whose parameters are gathered in their own dtype (bf16 with precision.master_weights optimizer, or fp32), unpadded and on the device. Part of the fastest measured configuration, with a gain within noise (bench/reports/2026-11-30-llama3.1-8b-h200x2-flat-shards.md). Experimental: replaces FSDP2's private copy-in op for the whole process."""


#: Options that were removed or moved: ``section.field`` -> the one-line refusal (after the flag) naming what replaces
#: it. Refused on the command line and in config files alike.
REMOVED_OPTIONS = {
    "parallel.comm_buffers": (
        "removed; NCCL symmetric memory for FSDP2's collectives is --experimental.symmetric_memory true, "
        "and PyTorch's own buffers need no flag (process_group and symmetric_all_gather had no measured gain)"
    ),
    "parallel.flat_shards": "moved to --experimental.flat_shards (off by default)",
    "compile.mode": (
        "removed; compiled blocks use torch.compile's default mode "
        "(max-autotune-no-cudagraphs measured no faster: bench/reports/2026-11-30-h200-options-without-gain.md)"
    ),
    "model.sdpa_gqa": (
        "removed; grouped key/value heads go to the attention kernel as they are wherever it takes them "
        "(repeat measured slower: bench/reports/2026-11-30-llama3.1-8b-h200x2-grouped-heads-cudnn.md)"
    ),
}
#: Options renamed or moved with their meaning kept: ``section.field`` -> (its old type, a function of its value
#: giving the ``section.field``: value pairs that replace it). Still accepted, with a deprecation warning naming
#: the replacement (``map_deprecated``).
DEPRECATED_OPTIONS: dict[str, tuple[Any, Any]] = {
    "checkpoint.async_save": (
        bool | None,
        lambda v: {"checkpoint.async_mode": {True: "async", False: "disabled", None: "auto"}[v]},
    ),
    "checkpoint.stage_on_device": (
        bool | None,  # auto (None) meant: on the device when there is room, which the experimental option does
        lambda v: {} if v is False else {"experimental.stage_on_device": True},
    ),
}


#: Choices that were removed: (``section.field``, value) -> the one-line refusal.
REMOVED_CHOICES = {
    ("fp8.recipe", "rowwise_with_gw_hp"): (
        "rowwise_with_gw_hp was removed (slower than tensorwise, with no better loss: "
        "bench/reports/2026-11-30-h200-options-without-gain.md); use tensorwise or rowwise"
    ),
}


# Sections whose CLI flag prefix differs from their attribute name.
FLAG_PREFIX = {"activation_checkpointing": "ac"}


@dataclass(eq=False, repr=False)
class TrainerConfig(options.Section):
    """Every trainer option, by section: ``--<section>.<field> VALUE`` on the command line, ``<section>:`` in a
    YAML file. Built with :meth:`from_dict` or :func:`load_config`, which check each value and every rule between them."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Which Llama and how its weights start."""
    data: DataConfig = field(default_factory=DataConfig)
    """Where tokens come from and how they are packed."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Steps, batch, optimizer and schedule."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """FSDP flavour and sharding."""
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    """Mixed precision."""
    activation_checkpointing: ActivationCheckpointConfig = field(default_factory=ActivationCheckpointConfig)
    """Activation checkpointing (flags: --ac.*)."""
    compile: CompileConfig = field(default_factory=CompileConfig)
    """torch.compile."""
    fp8: Fp8Config = field(default_factory=Fp8Config)
    """Float8 training."""
    auto: AutoConfig = field(default_factory=AutoConfig)
    """Automatic choice of the fastest settings that fit."""
    experimental: ExperimentalConfig = field(default_factory=ExperimentalConfig)
    """Speed features on private torch internals or with gains within noise; off by default (fsdp_trainer/experimental/README.md)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Sharded checkpoints, resume and Hugging Face export."""
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    """Throughput and MFU reporting."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """Device and process group."""

    def __post_init__(self) -> None:
        #: ``section.field`` names given in the config file or as flags (``--auto`` keeps these); not a config field.
        self.explicit: frozenset[str] = frozenset()
        #: What ``--auto`` chose (set at start-up, recorded in summary.json); not a config field.
        self.auto_choice: dict[str, Any] | None = None
        for name, cls in options.sections(TrainerConfig):
            section = getattr(self, name)
            if not isinstance(section, cls):
                raise ConfigError(f"--{flag_prefix(name)}: expected a {cls.__name__}")
            hints = options.field_types(cls)
            for f in dataclasses.fields(cls):
                options.check(f"--{flag_prefix(name)}.{f.name}", hints[f.name], getattr(section, f.name))
        self._resolve_defaults()
        self._validate()

    def _resolve_defaults(self) -> None:
        m, d, t, p, ck = self.model, self.data, self.train, self.precision, self.checkpoint
        if m.preset not in PRESETS:
            raise ConfigError(f"--model.preset: {m.preset!r} is not one of {', '.join(PRESETS)}")
        tiny = is_tiny(m.preset) and m.name_or_path is None
        if m.init is None:
            m.init = "pretrained" if m.name_or_path else "random"
        if d.source is None:
            if d.path:
                d.source = "jsonl" if d.path.endswith(".jsonl") else "text"
            elif m.init == "pretrained" and m.name_or_path:
                # Fine-tuning real weights on random tokens only ever makes sense as a benchmark: say so, loudly.
                raise ConfigError(
                    "--data.source: the pretrained weights of --model.name_or_path would train on synthetic tokens; "
                    "fine-tune on data (--data.source hf, or --data.path FILE.jsonl/DIR of text), or say "
                    "--data.source synthetic to measure speed on random tokens"
                )
            else:
                d.source = "text" if tiny else "synthetic"
        if m.tokenizer is None and d.source != "synthetic":  # synthetic tokens need no tokenizer
            m.tokenizer = m.name_or_path or ("bytes" if tiny else None)
        if d.seed is None:
            d.seed = t.seed
        if self.runtime.seed is None:
            self.runtime.seed = t.seed
        if p.param_dtype is None:
            p.param_dtype = p.mode
        if p.reduce_dtype is None:
            p.reduce_dtype = "fp32"
        if self.parallel.reshard_after_forward is None:
            self.parallel.reshard_after_forward = self.parallel.sharding != "shard_grad_op"
        if ck.dir is None:
            ck.dir = str(Path(t.output_dir) / "checkpoints")
        if ck.export_dtype is None:
            ck.export_dtype = p.param_dtype
        if self.metrics.file is None:
            self.metrics.file = str(Path(t.output_dir) / "metrics.jsonl")

    def _validate(self) -> None:
        m, d, t, par = self.model, self.data, self.train, self.parallel
        positive: dict[str, float] = {
            "--data.seq_len": d.seq_len,
            "--train.steps": t.steps,
            "--train.micro_batch_size": t.micro_batch_size,
            "--train.grad_accum_steps": t.grad_accum_steps,
            "--train.loss_chunk_tokens": t.loss_chunk_tokens,
            "--train.log_every": t.log_every,
            "--ac.every": self.activation_checkpointing.every,
            "--checkpoint.keep": self.checkpoint.keep,
            "--checkpoint.write_threads": self.checkpoint.write_threads,
            "--runtime.timeout_s": self.runtime.timeout_s,
        }
        for flag, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{flag}: must be positive (got {value})")
        non_negative: dict[str, float] = {
            "--train.warmup_steps": t.warmup_steps,
            "--train.weight_decay": t.weight_decay,
            "--train.max_grad_norm": t.max_grad_norm,
            "--checkpoint.every_steps": self.checkpoint.every_steps,
            "--parallel.shard_size": par.shard_size,
            "--parallel.replicate_size": par.replicate_size,
            "--metrics.warmup_steps": self.metrics.warmup_steps,
            "--ac.offload_layers": self.activation_checkpointing.offload_layers,
        }
        for flag, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"{flag}: must be zero or positive (got {value})")
        port = self.metrics.prometheus_port
        if port and not 1024 <= port <= 65535:
            raise ConfigError(f"--metrics.prometheus_port: {port} is not a usable port; use 0 (off) or 1024-65535")
        if self.metrics.prometheus_linger_s < 0:
            raise ConfigError(
                f"--metrics.prometheus_linger_s: must be zero or positive (got {self.metrics.prometheus_linger_s})"
            )
        if t.lr <= 0:
            raise ConfigError(f"--train.lr: must be positive (got {t.lr})")
        if not 0.0 <= self.compile.memory_budget <= 1.0:
            raise ConfigError(f"--compile.memory_budget: must be between 0 and 1 (got {self.compile.memory_budget})")
        if self.compile.memory_budget != 1.0 and not (self.compile.enabled or self.auto.enabled):
            raise ConfigError(
                f"--compile.memory_budget: {self.compile.memory_budget} needs --compile.enabled true (or --auto, which turns compile on for GPUs)"
            )
        profile = self.metrics.profile_range()
        if profile and profile[1] > t.steps:
            raise ConfigError(
                f"--metrics.profile_steps: step {profile[1]} is after the last step ({t.steps}); profile steps within --train.steps"
            )
        if not 0.0 < self.auto.memory_fraction <= 1.0:
            raise ConfigError(
                f"--auto.memory_fraction: must be above 0 and at most 1 (got {self.auto.memory_fraction})"
            )
        if not 0.0 <= t.min_lr_ratio <= 1.0:
            raise ConfigError(f"--train.min_lr_ratio: must be between 0 and 1 (got {t.min_lr_ratio})")
        if m.init == "pretrained" and not m.name_or_path:
            raise ConfigError("--model.init: 'pretrained' needs --model.name_or_path (a local HF directory or Hub id)")
        if d.source in ("text", "jsonl", "hf") and not m.tokenizer:
            raise ConfigError(
                f"--model.tokenizer: data.source={d.source} needs a tokenizer; set --model.tokenizer or --model.name_or_path"
            )
        if d.source == "jsonl" and not d.path:
            raise ConfigError("--data.path: data.source=jsonl needs a file or directory of .jsonl files")

        if (par.shard_size or par.replicate_size) and par.sharding != "hybrid_shard":
            flag = "--parallel.shard_size" if par.shard_size else "--parallel.replicate_size"
            raise ConfigError(f"{flag}: only used with --parallel.sharding hybrid_shard")
        if par.api == "fsdp2" and par.backward_prefetch != "pre":
            raise ConfigError(
                f"--parallel.backward_prefetch: {par.backward_prefetch!r} is fsdp1-only; fsdp2 always prefetches the previous block ('pre')"
            )
        for name in ("symmetric_memory", "flat_shards"):
            if getattr(self.experimental, name) and par.api != "fsdp2":
                raise ConfigError(f"--experimental.{name}: needs --parallel.api fsdp2")
        if self.experimental.symmetric_memory and par.cpu_offload:
            raise ConfigError("--experimental.symmetric_memory: cannot be combined with --parallel.cpu_offload true")
        if par.api == "none" and par.cpu_offload:
            raise ConfigError("--parallel.cpu_offload: needs --parallel.api fsdp2 or fsdp1")
        if self.fp8.enabled and par.api == "fsdp1":
            raise ConfigError("--fp8.enabled: float8 training is supported with --parallel.api fsdp2 or none")
        if self.fp8.all_gather and (self.fp8.recipe != "tensorwise" or par.api != "fsdp2"):
            raise ConfigError("--fp8.all_gather: needs --fp8.recipe tensorwise and --parallel.api fsdp2")
        blocker = self.master_weights_blocker() if self.precision.master_weights == "optimizer" else None
        if blocker:
            raise ConfigError(f"--precision.master_weights: optimizer {blocker}")
        if t.adamw == "triton" and par.cpu_offload:
            raise ConfigError(
                "--train.adamw: triton runs on the GPU and cannot step parameters offloaded to CPU; use foreach or auto"
            )
        if self.runtime.device == "cpu" and self.runtime.backend == "nccl":
            raise ConfigError("--runtime.backend: nccl needs CUDA; use gloo (or auto) with --runtime.device cpu")
        resume = self.checkpoint.resume
        self._validate_s3()
        if resume not in ("auto", "never") and not Path(resume.rstrip("/")).name.startswith("step_"):
            raise ConfigError(
                f"--checkpoint.resume: {resume!r} is not auto, never or a step_XXXXXXXX checkpoint directory"
            )

    def _validate_s3(self) -> None:
        """Each s3:// location names a bucket (the network checks come at start: ``storage.check_s3_access``)."""
        from .storage import is_s3, parse_s3

        ck = self.checkpoint
        for flag, value in (
            ("--checkpoint.dir", ck.dir),
            ("--checkpoint.export_hf", ck.export_hf),
            ("--checkpoint.resume", ck.resume),
            ("--model.name_or_path", self.model.name_or_path),
            ("--model.tokenizer", self.model.tokenizer),
        ):
            if is_s3(value):
                parse_s3(str(value), flag)

    def master_weights_blocker(self, grad_accum_steps: int | None = None) -> str | None:
        """Why ``precision.master_weights optimizer`` cannot apply to these settings (the flag to change, and how), or None.

        ``grad_accum_steps``: judge with this many micro-batches per step instead of ``train.grad_accum_steps``.
        """
        p, par = self.precision, self.parallel
        accum = self.train.grad_accum_steps if grad_accum_steps is None else grad_accum_steps
        if par.api != "fsdp2":
            return f"needs --parallel.api fsdp2 (got {par.api})"
        if p.param_dtype != "bf16":
            return f"needs bf16 parameters (--precision.param_dtype is {p.param_dtype})"
        if self.fp8.enabled:
            return "cannot be combined with --fp8.enabled true yet; use --precision.master_weights params"
        if accum > 1:
            return f"needs --train.grad_accum_steps 1 (got {accum}): bf16 gradients would accumulate in bf16"
        if par.cpu_offload:
            return "cannot be combined with --parallel.cpu_offload true (the Triton AdamW runs on the GPU)"
        if self.train.adamw not in ("auto", "triton"):
            return f"needs the Triton AdamW (--train.adamw triton or auto; got {self.train.adamw})"
        return None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainerConfig":
        """Build and validate a config from nested dicts (YAML/JSON shape); unknown keys raise ConfigError."""
        if not isinstance(d, dict):
            raise ConfigError(f"config: expected a mapping of sections, got {type(d).__name__}")
        known = known_flags()
        by_key = {flag_prefix(name): (name, sec) for name, sec in options.sections(cls)}
        by_key.update({name: (name, sec) for name, sec in options.sections(cls)})
        built: dict[str, Any] = {}
        explicit: set[str] = set()
        d = map_deprecated(d)
        for key, values in d.items():
            if key not in by_key:
                raise removed_option(f"--{key}") or options.unknown_option(f"--{key}", known)
            name, sec = by_key[key]
            if values is None:
                values = {}
            if not isinstance(values, dict):
                raise ConfigError(f"--{flag_prefix(name)}: expected a mapping of fields, got {values!r}")
            hints = options.field_types(sec)
            kwargs = {}
            for fname, value in values.items():
                flag = f"--{flag_prefix(name)}.{fname}"
                if fname not in hints:
                    raise removed_option(flag) or options.unknown_option(flag, known)
                removed = REMOVED_CHOICES.get((f"{flag_prefix(name)}.{fname}", str(value).strip()))
                if removed:
                    raise ConfigError(f"{flag}: {removed}")
                kwargs[fname] = options.coerce(flag, hints[fname], value)
                explicit.add(f"{flag_prefix(name)}.{fname}")
            built[name] = sec(**kwargs)
        cfg = cls(**built)
        cfg.explicit = frozenset(explicit)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict keyed by CLI flag prefixes (``ac`` for activation checkpointing)."""
        return {
            flag_prefix(name): dataclasses.asdict(getattr(self, name)) for name, _ in options.sections(TrainerConfig)
        }


def map_deprecated(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` (nested sections) with each ``DEPRECATED_OPTIONS`` key replaced by what replaces it, a warning logged
    for each. Raises ConfigError on a bad old value, or when the replacement is given too (say one of them)."""
    import logging

    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for old, (tp, replace) in DEPRECATED_OPTIONS.items():
        section, fname = old.split(".", 1)
        values = out.get(section)
        if not isinstance(values, dict) or fname not in values:
            continue
        value = options.coerce(f"--{old}", tp, values.pop(fname))
        new = replace(value)
        for key, new_value in new.items():
            new_section, new_field = key.split(".", 1)
            target = out.setdefault(new_section, {})
            if not isinstance(target, dict):
                raise ConfigError(f"--{new_section}: expected a mapping of fields in the config file")
            if new_field in target:
                raise ConfigError(f"--{old}: deprecated, and --{key} is given too; keep --{key} only")
            target[new_field] = new_value
        said = ", ".join(f"--{k} {str(v).lower()}" for k, v in new.items()) or "nothing (the default)"
        logging.getLogger(__name__).warning("--%s is deprecated: it now means %s; use that instead", old, said)
    return out


def removed_option(flag: str) -> ConfigError | None:
    """The refusal of a removed or moved option (``REMOVED_OPTIONS``), or None when ``flag`` was never one."""
    message = REMOVED_OPTIONS.get(flag.removeprefix("--"))
    return ConfigError(f"{flag}: {message}") if message else None


def flag_prefix(section: str) -> str:
    """The CLI prefix of a section attribute (``activation_checkpointing`` -> ``ac``)."""
    return FLAG_PREFIX.get(section, section)


def known_flags() -> list[str]:
    """Every ``--section.field`` flag."""
    return [
        f"--{flag_prefix(name)}.{f.name}"
        for name, sec in options.sections(TrainerConfig)
        for f in dataclasses.fields(sec)
    ]


def read_config_file(path: str) -> dict[str, Any]:
    """Parse a YAML or JSON config file into nested dicts."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config: {path} is not a file")
    text = p.read_text()
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # any parse error becomes one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--config: cannot parse {path}: {first}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of sections")
    return data


def load_config(path: str | None, overrides: list[str]) -> TrainerConfig:
    """Config file (YAML/JSON, optional), then ``--section.field value`` overrides; raises ConfigError."""
    merged: dict[str, Any] = {}
    if path:
        for key, values in read_config_file(path).items():
            merged[flag_prefix(key) if key in FLAG_PREFIX else key] = (
                dict(values or {}) if isinstance(values, dict) else values
            )
    known = set(known_flags())
    for key, value in options.parse_overrides(overrides):
        if f"--{key}" not in known and key not in DEPRECATED_OPTIONS:
            raise removed_option(f"--{key}") or options.unknown_option(f"--{key}", sorted(known))
        section, fname = key.split(".", 1)
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"--{section}: expected a mapping of fields in the config file")
        target[fname] = value
    return TrainerConfig.from_dict(merged)


def help_text() -> str:
    """The option reference shown by ``fsdp-train --help`` (also the README's config reference)."""
    lines = []
    for name, sec in options.sections(TrainerConfig):
        lines.append(f"\n{flag_prefix(name)}: {options.field_docs(TrainerConfig)[name]}")
        hints = options.field_types(sec)
        default_obj = sec()  # each section field is field(default_factory=<its section class>)
        for f in dataclasses.fields(sec):
            default = getattr(default_obj, f.name)
            lines.append(f"  --{flag_prefix(name)}.{f.name} {options.type_label(hints[f.name])} (default: {default})")
            lines.append(f"      {options.field_docs(sec)[f.name]}")
    return "\n".join(lines)
