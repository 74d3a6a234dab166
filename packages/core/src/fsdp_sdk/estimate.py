"""What a training job will need and give, before anything starts: memory per GPU, speed, cost, scaling.

The model is the trainer's own (``fsdp_trainer.autotune``: the memory model ``--auto`` fits micro-batches with,
its speed model, and FSDP's communication volumes), imported here lazily and without torch, so ``fsdp-sdk
estimate``, ``up --dry-run`` and the trainer's ``--auto`` agree. The inputs are the configuration's trainer
settings (model, ``parallel.*``, ``precision.*``, ``ac.*``, ``train.micro_batch_size``, ``compile.*``, ``fp8.*``),
the instance type (any registered one, plugins' included) and the job's nodes and GPUs per node::

    from fsdp_sdk import Client

    client = Client.from_sources(overrides={"cluster.instance_type": "p5.48xlarge"})
    est = client.estimate(model="llama2-70b", nodes=16, trainer_overrides={"ac.mode": "full"})
    print(est.memory.peak_gib, est.memory.fits, est.speed.tokens_per_s, est.cost.usd_per_billion_tokens)

Speed is compute at an MFU plus the communication compute does not hide (``fsdp_trainer.autotune.step_time``
says how much). The MFU is, unless given, the trainer's measured one for the GPU model at its measured settings,
scaled to these by the trainer's speed model; a GPU model without a measurement borrows another's, and the
estimate says so in :attr:`Estimate.assumptions`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.instance_types import InstanceType

__all__ = [
    "DEFAULT_TOKENS",
    "ControlPlaneCost",
    "CostEstimate",
    "Estimate",
    "EstimateUnavailable",
    "MemoryEstimate",
    "ModelSource",
    "ScalingPoint",
    "SpeedEstimate",
    "estimate_job",
    "fit_problem",
    "model_is_given",
    "parse_tokens",
    "read_model",
    "recommend",
    "summary_lines",
]

GiB = 2**30
#: Tokens the "time to train" figures are for, unless given.
DEFAULT_TOKENS = 1e9
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_INSTALL_TRAINER = "pip install 'fsdp-sdk[local]'"


class EstimateUnavailable(ConfigError):
    """No estimate can be made here: the trainer (which holds the model) is not installed, or the model's
    ``config.json`` is not on disk (a Hub id). Commands that estimate on the side skip the estimate then."""


def _autotune() -> ModuleType:
    """The trainer's torch-free model, or a one-line error saying how to get it."""
    try:
        from fsdp_trainer import autotune
    except ImportError:
        raise EstimateUnavailable(
            "estimate",
            "the memory and speed model comes with the trainer (fsdp-trainer), which is not installed here",
            _INSTALL_TRAINER,
        ) from None
    return autotune


# ----------------------------------------------------------------------------- the model's shape


@dataclass(frozen=True)
class ModelSource:
    """Which model an estimate is for, and where its shape came from."""

    name: str
    """A preset name, or the path of the ``config.json`` read."""
    source: str
    """``preset`` or ``config.json``."""
    spec: Mapping[str, Any]
    """The architecture fields (``hidden_size``, ``num_hidden_layers``...), as in a Hugging Face ``config.json``."""
    model_type: str = "llama"
    """``model_type`` of the config; the trainer trains Llama-architecture decoders."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the spec)."""
        return {"name": self.name, "source": self.source, "model_type": self.model_type}


def model_is_given(config: Config) -> bool:
    """Whether the configuration names a model (``trainer.model.preset`` or ``trainer.model.name_or_path``)."""
    model = config.trainer.get("model")
    return isinstance(model, Mapping) and bool(model.get("preset") or model.get("name_or_path"))


def read_model(model: str) -> ModelSource:
    """A preset name, or a Hugging Face ``config.json`` (the file, or a directory holding it), read without
    transformers.

    :raises ConfigError: neither a preset nor a readable Llama-style ``config.json``; a Hub id (nothing is
        downloaded here).
    """
    PRESETS = _autotune().presets.PRESETS
    if model in PRESETS:
        return ModelSource(model, "preset", PRESETS[model]())
    if model.startswith("s3://"):
        return _spec_source(f"{model.rstrip('/')}/config.json", _s3_config_text(model))
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        if _HUB_ID.match(model) and not Path(model).expanduser().exists():
            raise EstimateUnavailable(
                "model",
                f"{model!r} looks like a Hugging Face Hub id; estimates read config.json from disk and download nothing",
                f"download it (huggingface-cli download {model} config.json) and pass its path, or use a preset",
            )
        from fsdp_sdk.config.conversions import close_matches

        close = close_matches(model, PRESETS, n=1)
        raise ConfigError(
            "model",
            f"unknown model {model!r}: not a preset and no config.json there",
            (f"did you mean {close[0]}? " if close else "")
            + f"use a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json or model directory",
        )
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("model", f"{path} is not readable JSON ({exc})", "pass a Hugging Face config.json") from None
    return _spec_source(str(path), text)


def _s3_config_text(uri: str) -> str:
    """The ``config.json`` under an ``s3://`` model prefix (what ``checkpoint.export_hf`` writes), read with the SDK's
    AWS session. :raises ConfigError: no config.json there; :raises EstimateUnavailable: S3 cannot be read here (the
    trainer, with its own credentials, says why if it cannot either)."""
    import os

    from fsdp_sdk.aws.session import aws_client

    bucket, _, prefix = uri[len("s3://") :].partition("/")
    key = "/".join(p for p in (prefix.strip("/"), "config.json") if p)
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    try:
        client = aws_client("s3", region)
        return str(client.get_object(Bucket=bucket, Key=key)["Body"].read().decode())
    except Exception as exc:  # botocore's ClientError, a connection error, no credentials
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404"):
            raise ConfigError(
                "model",
                f"{uri} holds no config.json (not a Hugging Face model directory, or an export that did not finish)",
                "pass the s3:// prefix a finished --checkpoint.export_hf wrote, or a preset",
            ) from None
        raise EstimateUnavailable(
            "model", f"cannot read {uri}/config.json here ({' '.join(str(exc).split())[:200]})", "the trainer reads it"
        ) from None


def _spec_source(where: str, text: str) -> ModelSource:
    """A :class:`ModelSource` from the text of a ``config.json`` (``where`` names it in errors)."""
    path = where
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise ConfigError("model", f"{path} is not readable JSON ({exc})", "pass a Hugging Face config.json") from None
    if not isinstance(spec, dict):
        raise ConfigError("model", f"{path} is not a JSON object", "pass a Hugging Face config.json")
    spec = dict(spec.get("text_config") or spec) if "hidden_size" not in spec else spec
    for key in _CONFIG_KEYS:
        value = spec.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(
                "model",
                f"{path} has no positive integer {key}",
                "pass the config.json of a Llama-architecture decoder (hidden_size, num_hidden_layers, ...)",
            )
    return ModelSource(path, "config.json", spec, str(spec.get("model_type") or "llama"))


def _trainer_model(trainer: Any) -> ModelSource:
    """The model the trainer settings name: ``model.name_or_path`` when set, else ``model.preset``."""
    return read_model(trainer.model.name_or_path or trainer.model.preset)


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class MemoryEstimate:
    """One GPU's memory in GiB (see ``fsdp_trainer.autotune.MemoryBreakdown`` for each line)."""

    parameters_gib: float
    gradients_gib: float
    optimizer_gib: float
    gathered_gib: float
    activations_gib: float
    buffers_gib: float
    step_buffers_gib: float
    forward_peak_gib: float
    step_peak_gib: float
    peak_gib: float
    peak_phase: str
    device_gib: float
    """The GPU's memory."""
    usable_gib: float
    """``memory_fraction`` of it: what the trainer's ``--auto`` lets the estimate fill (the rest is the CUDA
    context, NCCL's buffers and the allocator's slack)."""
    memory_fraction: float

    @property
    def fits(self) -> bool:
        """Whether the peak stays within the usable memory."""
        return self.peak_gib <= self.usable_gib

    @property
    def headroom_gib(self) -> float:
        """Usable memory left at the peak (negative: by how much it is over)."""
        return self.usable_gib - self.peak_gib

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``fits`` and ``headroom_gib``."""
        data = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}
        return {**data, "fits": self.fits, "headroom_gib": round(self.headroom_gib, 2)}


@dataclass(frozen=True)
class SpeedEstimate:
    """A step's time on each GPU, and the throughput it makes."""

    mfu: float
    """Model FLOPs utilisation of the whole step (the trainer's convention: ``fsdp_trainer.flops``)."""
    compute_mfu: float
    """The MFU compute runs at, before communication (what the speed model derives from the measured one)."""
    mfu_basis: str
    """Where ``compute_mfu`` comes from."""
    peak_tflops_per_gpu: float
    step_s: float
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    tokens_per_step: int
    """Tokens of one optimizer step over all GPUs."""
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    collectives: tuple[Mapping[str, Any], ...] = ()
    """Each collective of a step: kind, phase, ranks, nodes spanned, GiB per GPU, seconds alone."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["collectives"] = [dict(c) for c in self.collectives]
        for key in ("step_s", "compute_s", "communication_s", "exposed_communication_s"):
            data[key] = round(data[key], 4)
        for key in ("mfu", "compute_mfu"):
            data[key] = round(data[key], 4)
        data["tokens_per_s"], data["tokens_per_s_per_gpu"] = (
            round(self.tokens_per_s, 1),
            round(self.tokens_per_s_per_gpu, 1),
        )
        return data


@dataclass(frozen=True)
class ControlPlaneCost:
    """The EKS control plane of a cluster backend, priced by its Kubernetes version's support state on a day."""

    kubernetes_version: str
    support: str
    """``standard`` or ``extended`` (a version past extended support is refused before it is priced)."""
    usd_per_hour: float
    on: str
    """The day the state and price are for (``fsdp_sdk.pins.today()``), ISO format."""
    until: str
    """The last day of that support state."""

    def describe(self) -> str:
        """``$0.60/h (Kubernetes 1.34, extended support on 2026-12-03, until 2027-12-02)``."""
        return (
            f"${self.usd_per_hour:.2f}/h (Kubernetes {self.kubernetes_version}, {self.support} support on {self.on}, "
            f"until {self.until})"
        )


@dataclass(frozen=True)
class CostEstimate:
    """What the nodes cost, and what training costs at the estimated speed."""

    usd_per_hour: float | None
    """On-demand price of all the job's nodes, plus the EKS control plane by its support state today on a cluster
    backend; None when the instance type has no on-demand price."""
    usd_per_billion_tokens: float | None
    tokens: float
    """Tokens the next two figures are for."""
    hours_to_train: float | None
    usd_to_train: float | None
    price_note: str = ""
    control_plane: ControlPlaneCost | None = None
    """The EKS control plane included in :attr:`usd_per_hour` (None on the local backend)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class ScalingPoint:
    """The same per-GPU work on another number of nodes (weak scaling)."""

    nodes: int
    gpus: int
    fits: bool
    peak_gib: float
    tokens_per_s: float | None
    tokens_per_s_per_gpu: float | None
    step_s: float | None
    efficiency: float | None
    """Tokens/s per GPU against the first point's."""
    usd_per_billion_tokens: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class Estimate:
    """Memory, speed, cost and scaling of one training configuration on one instance type."""

    model: ModelSource
    params: int
    instance_type: str
    gpu_model: str
    nodes: int
    gpus_per_node: int
    settings: Mapping[str, Any]
    """The training settings estimated (api, sharding, shard degree, precision, checkpointing, micro-batch...)."""
    memory: MemoryEstimate
    speed: SpeedEstimate | None
    """None when speed cannot be estimated (``speed_note`` says why)."""
    cost: CostEstimate
    scaling: tuple[ScalingPoint, ...] = ()
    assumptions: tuple[str, ...] = ()
    speed_note: str = ""
    auto: Mapping[str, Any] | None = None
    """What the trainer's ``--auto`` would choose here, when the settings enable it."""

    @property
    def gpus(self) -> int:
        """GPUs of the job."""
        return self.nodes * self.gpus_per_node

    def where(self) -> str:
        """The model and the GPUs: ``llama2-70b (69.0B) on 16 x p5.48xlarge = 128 GPUs``."""
        name = Path(self.model.name).parent.name if self.model.source == "config.json" else self.model.name
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        return f"{name} ({self.params / 1e9:.1f}B) on {self.nodes} x {self.instance_type} = {gpus}"

    def describe(self) -> str:
        """One line: :meth:`where`, and the settings that change memory and speed the most."""
        s = self.settings
        ac = s["ac_mode"] if s["ac_mode"] != "selective" else f"selective every {s['ac_every']}"
        return (
            f"{self.where()}, {s['api']} {s['sharding']}, micro batch {s['micro_batch_size']} x {s['seq_len']}, "
            f"ac {ac}, {'compiled' if s['compile'] else 'eager'}, {s['param_dtype']}"
        )

    def summary_lines(self) -> list[str]:
        """A few lines for other commands' output (``up --dry-run``); see :func:`summary_lines`."""
        return summary_lines(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "model": {**self.model.to_dict(), "params": self.params},
            "instance_type": self.instance_type,
            "gpu_model": self.gpu_model,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpus": self.gpus,
            "settings": dict(self.settings),
            "memory": self.memory.to_dict(),
            "speed": self.speed.to_dict() if self.speed else None,
            "speed_note": self.speed_note or None,
            "cost": self.cost.to_dict(),
            "scaling": [p.to_dict() for p in self.scaling],
            "assumptions": list(self.assumptions),
            "auto": dict(self.auto) if self.auto is not None else None,
        }


# ----------------------------------------------------------------------------- estimating


@dataclass
class _Inputs:
    """Everything the trainer's model functions take, from the trainer settings and the instance type."""

    trainer: Any
    source: ModelSource
    shape: Any
    instance: InstanceType
    nodes: int
    gpus_per_node: int
    shard_degree: int = 1
    master_weights: bool = False
    network_efficiency: float = 0.8
    notes: list[str] = field(default_factory=list)


def _trainer_config(config: Config, overrides: Mapping[str, Any] | None = None) -> Any:
    """The trainer settings as the trainer resolves them (``TrainerConfig``), with ``overrides`` on top."""
    from fsdp_trainer.config import ConfigError as TrainerConfigError
    from fsdp_trainer.config import TrainerConfig

    data = json.loads(json.dumps(config.trainer, default=str))
    if "activation_checkpointing" in data:  # one spelling, so that an override of ac.* lands in the same section
        data["ac"] = {**data.pop("activation_checkpointing"), **data.get("ac", {})}
    for path, value in (overrides or {}).items():
        path = "ac." + path.split(".", 1)[1] if path.startswith("activation_checkpointing.") else path
        node = data
        *sections, leaf = path.split(".")
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    try:
        return TrainerConfig.from_dict(data)
    except TrainerConfigError as exc:
        raise ConfigError("trainer", " ".join(str(exc).split())) from None


def _shard_degree(autotune: ModuleType, trainer: Any, world: int, gpus_per_node: int) -> int:
    from fsdp_trainer.config import ConfigError as TrainerConfigError

    if trainer.parallel.api == "none" and world > 1:
        raise ConfigError(
            "trainer.parallel.api", f"'none' runs one process, but the job has {world} GPUs", "use fsdp2 or fsdp1"
        )
    try:
        return int(autotune.shard_degree(trainer, world, gpus_per_node))
    except TrainerConfigError as exc:
        raise ConfigError("trainer", " ".join(str(exc).split())) from None


def _fp8_ok(instance: InstanceType) -> bool:
    from fsdp_trainer.flops import FP8_DOUBLES

    return any(name in instance.gpu_model for name in FP8_DOUBLES)


def _memory_kwargs(inputs: _Inputs) -> dict[str, Any]:
    t = inputs.trainer
    compiled = t.compile.enabled
    return {
        "shard_degree": inputs.shard_degree,
        "compiled": compiled,
        "ac_mode": t.activation_checkpointing.mode,
        "ac_every": t.activation_checkpointing.every,
        "loss_chunk_tokens": t.train.loss_chunk_tokens,
        "fused_loss": t.train.fused_loss and t.precision.mode != "fp16",
        "cpu_offload": t.parallel.cpu_offload,
        "param_bytes": 4 if t.precision.param_dtype == "fp32" else 2,
        "grad_accum_steps": t.train.grad_accum_steps,
        "reshard_after_forward": bool(t.parallel.reshard_after_forward),
        "reduce_bytes": 4 if t.precision.reduce_dtype == "fp32" else 2,
        "fused_kernels": t.model.fused_kernels and t.model.attn_implementation != "eager",
        "master_weights": inputs.master_weights,
        "memory_budget": t.compile.memory_budget if compiled else 1.0,
        "fp8": t.fp8.enabled,
    }


def _memory(autotune: ModuleType, inputs: _Inputs) -> MemoryEstimate:
    t = inputs.trainer
    b = autotune.memory_breakdown(inputs.shape, t.data.seq_len, t.train.micro_batch_size, **_memory_kwargs(inputs))
    device = inputs.instance.gpu_memory_gib
    return MemoryEstimate(
        parameters_gib=b.parameters / GiB,
        gradients_gib=b.gradients / GiB,
        optimizer_gib=b.optimizer / GiB,
        gathered_gib=b.gathered / GiB,
        activations_gib=b.activations / GiB,
        buffers_gib=b.buffers / GiB,
        step_buffers_gib=b.step_buffers / GiB,
        forward_peak_gib=b.forward_peak / GiB,
        step_peak_gib=b.step_peak / GiB,
        peak_gib=b.peak / GiB,
        peak_phase=b.peak_phase,
        device_gib=float(device),
        usable_gib=device * t.auto.memory_fraction,
        memory_fraction=t.auto.memory_fraction,
    )


def _speed(autotune: ModuleType, inputs: _Inputs, mfu: float | None) -> tuple[SpeedEstimate | None, str, list[str]]:
    """The speed estimate, or None with the reason; and the assumptions it made."""
    t, instance, shape = inputs.trainer, inputs.instance, inputs.shape
    notes: list[str] = []
    world = inputs.nodes * inputs.gpus_per_node
    if world > 1 and inputs.gpus_per_node > 1 and not instance.intra_node_gbytes_per_s:
        return None, f"{instance.name} gives no intra_node_gbytes_per_s for its GPUs' link", notes
    if inputs.nodes > 1 and not instance.network_gbps:
        return None, f"{instance.name} gives no network_gbps between nodes", notes
    fp8 = t.fp8.enabled
    recompute = autotune.recompute_share(t.activation_checkpointing.mode, t.activation_checkpointing.every)
    compiled = t.compile.enabled
    kwargs = _memory_kwargs(inputs)
    if mfu is not None:
        compute_mfu, basis = mfu, "given (--mfu)"
    elif t.parallel.cpu_offload:
        return (
            None,
            "parallel.cpu_offload runs AdamW on the CPU, which the speed model does not cover; pass --mfu",
            notes,
        )
    elif t.precision.param_dtype == "fp32":
        return None, "no MFU was measured for fp32 compute; pass --mfu (a fraction of the bf16 peak)", notes
    else:
        reference, exact = autotune.measured_mfu(instance.gpu_model, fp8)
        compute_mfu = autotune.modelled_mfu(
            reference,
            ac_recompute=recompute,
            micro_batch=t.train.micro_batch_size,
            compiled=compiled,
            fp8=fp8,
            fused_kernels=kwargs["fused_kernels"],
            memory_budget=kwargs["memory_budget"],
        )
        basis = (
            f"measured {reference.mfu:.1%} on {reference.gpu_model} ({reference.source}), scaled to these settings "
            "by the trainer's speed model"
        )
        if not exact:
            notes.append(
                f"MFU: not measured on {instance.gpu_model}; the {reference.gpu_model}'s is used (pass --mfu to set it)"
            )
    peak = instance.bf16_tflops_per_gpu * (2 if fp8 else 1)
    comms = autotune.collectives(
        shape,
        sharding=t.parallel.sharding,
        nodes=inputs.nodes,
        gpus_per_node=inputs.gpus_per_node,
        shard_degree=inputs.shard_degree,
        micro_batches=t.train.grad_accum_steps,
        param_bytes=kwargs["param_bytes"],
        reduce_bytes=kwargs["reduce_bytes"],
        reshard_after_forward=kwargs["reshard_after_forward"],
        fp8_all_gather=fp8 and t.fp8.all_gather,
    )
    links = autotune.Links.nominal(
        instance.intra_node_gbytes_per_s,
        instance.network_gbps,
        inputs.gpus_per_node,
        network_efficiency=inputs.network_efficiency,
    )
    step = autotune.step_time(
        shape,
        t.data.seq_len,
        t.train.micro_batch_size,
        grad_accum_steps=t.train.grad_accum_steps,
        peak_tflops=peak,
        mfu=compute_mfu,
        ac_recompute=recompute,
        comms=comms,
        links=links,
        fp8=fp8,
    )
    tokens_per_gpu = t.train.micro_batch_size * t.train.grad_accum_steps * t.data.seq_len
    per_gpu = tokens_per_gpu / step.seconds
    model_mfu = per_gpu * shape.flops_per_token(t.data.seq_len) / (peak * 1e12)
    described = tuple(
        {
            "kind": c.kind,
            "phase": c.phase,
            "ranks": c.ranks,
            "nodes": c.nodes,
            "gib_per_gpu": round(c.bytes / GiB, 3),
            "seconds": round(autotune.collective_seconds(c, links), 4),
        }
        for c in comms
    )
    speed = SpeedEstimate(
        mfu=model_mfu,
        compute_mfu=compute_mfu,
        mfu_basis=basis,
        peak_tflops_per_gpu=peak,
        step_s=step.seconds,
        compute_s=step.compute,
        communication_s=step.communication,
        exposed_communication_s=step.exposed,
        tokens_per_step=tokens_per_gpu * world,
        tokens_per_s=per_gpu * world,
        tokens_per_s_per_gpu=per_gpu,
        collectives=described,
    )
    return speed, "", notes


def _control_plane(config: Config) -> ControlPlaneCost | None:
    """The EKS control plane's price per hour today for a cluster backend (None for the local one).

    :raises ConfigError: EKS creates no cluster of ``cluster.kubernetes_version`` today.
    """
    if config.cluster.backend == "local":
        return None
    from fsdp_sdk import pins

    version, on = config.cluster.kubernetes_version, pins.today()
    pins.check_kubernetes_version(version, on)  # refuses a version EKS creates no cluster of
    release = pins.kubernetes_release(version)
    assert release is not None  # check_kubernetes_version refused a version the calendar lacks
    support = release.state(on)
    until = release.end_of_standard if support == "standard" else release.end_of_extended
    return ControlPlaneCost(version, support, pins.control_plane_usd_per_hour(version, on), on.isoformat(), until)


def _cost(
    instance: InstanceType,
    nodes: int,
    speed: SpeedEstimate | None,
    tokens: float,
    control_plane: ControlPlaneCost | None = None,
) -> CostEstimate:
    price = instance.on_demand_usd_per_hour
    plane = control_plane.usd_per_hour if control_plane is not None else 0.0
    hourly = price * nodes + plane if price is not None else None
    note = "" if price is not None else f"{instance.name} has no on-demand price ({instance.notes or 'none listed'})"
    if price is not None and instance.price_date:
        note = f"on-demand us-east-1 price as of {instance.price_date}"
    if control_plane is not None:
        note = "; ".join(filter(None, [note, f"plus the EKS control plane, {control_plane.describe()}"]))
    hours = tokens / speed.tokens_per_s / 3600 if speed is not None else None
    per_billion = hourly / (speed.tokens_per_s * 3600) * 1e9 if hourly is not None and speed is not None else None
    usd = hourly * hours if hourly is not None and hours is not None else None
    return CostEstimate(hourly, per_billion, tokens, hours, usd, note, control_plane)


def _settings(inputs: _Inputs) -> dict[str, Any]:
    t = inputs.trainer
    return {
        "api": t.parallel.api,
        "sharding": t.parallel.sharding,
        "shard_degree": inputs.shard_degree,
        "reshard_after_forward": bool(t.parallel.reshard_after_forward),
        "cpu_offload": t.parallel.cpu_offload,
        "precision": t.precision.mode,
        "param_dtype": t.precision.param_dtype,
        "reduce_dtype": t.precision.reduce_dtype,
        "master_weights": "optimizer" if inputs.master_weights else "params",
        "ac_mode": t.activation_checkpointing.mode,
        "ac_every": t.activation_checkpointing.every,
        "micro_batch_size": t.train.micro_batch_size,
        "grad_accum_steps": t.train.grad_accum_steps,
        "seq_len": t.data.seq_len,
        "compile": t.compile.enabled,
        "memory_budget": t.compile.memory_budget if t.compile.enabled else 1.0,
        "fp8": t.fp8.enabled,
        "fused_loss": t.train.fused_loss and t.precision.mode != "fp16",
    }


def _inputs(
    config: Config,
    instance: InstanceType,
    *,
    model: str | None,
    trainer_overrides: Mapping[str, Any] | None,
) -> _Inputs:
    autotune = _autotune()
    trainer = _trainer_config(config, trainer_overrides)
    source = read_model(model) if model else _trainer_model(trainer)
    shape = autotune.Shape.from_config(dict(source.spec))
    nodes = config.job.num_workers
    gpus_per_node = config.job.nproc_per_node or config.job.gpu_per_worker or instance.gpu_count
    if nodes < 1:
        raise ConfigError("nodes", f"{nodes} is not a number of nodes", "use 1 or more")
    if not 1 <= gpus_per_node <= instance.gpu_count:
        origin = config.origins.get("job.nproc_per_node")
        raise ConfigError(
            origin.name if origin else "job.nproc_per_node",
            f"{gpus_per_node} GPUs per node but {instance.name} has {instance.gpu_count}",
            f"use 1 to {instance.gpu_count}",
            source=origin.source if origin else None,
        )
    if trainer.fp8.enabled and not _fp8_ok(instance):
        raise ConfigError(
            "trainer.fp8.enabled",
            f"{instance.name}'s {instance.gpu_model} GPUs have no float8 tensor cores",
            "choose a Hopper-class instance type (p5, p5e, p5en) or turn fp8 off",
        )
    inputs = _Inputs(trainer, source, shape, instance, nodes, gpus_per_node)
    inputs.shard_degree = _shard_degree(autotune, trainer, nodes * gpus_per_node, gpus_per_node)
    mode = trainer.precision.master_weights
    inputs.master_weights = mode == "optimizer" or (mode == "auto" and trainer.master_weights_blocker() is None)
    if source.model_type not in ("llama", "mistral"):
        inputs.notes.append(f"model_type {source.model_type!r} is estimated as a Llama-architecture decoder")
    if trainer.activation_checkpointing.offload_layers:
        inputs.notes.append("ac.offload_layers is not modelled: the peak estimate is without offloading")
    return inputs


def _apply_auto(autotune: ModuleType, inputs: _Inputs) -> dict[str, Any]:
    """Let the trainer's ``--auto`` choose, as it would on these GPUs; the choice or why nothing fits."""
    from fsdp_trainer.config import ConfigError as TrainerConfigError

    world = inputs.nodes * inputs.gpus_per_node
    try:
        return dict(
            autotune.apply_auto(
                inputs.trainer,
                dict(inputs.source.spec),
                world_size=world,
                local_world_size=inputs.gpus_per_node,
                device_bytes=int(inputs.instance.gpu_memory_gib * GiB),
                on_gpu=True,
                master_weights=inputs.master_weights,
            )
        )
    except TrainerConfigError as exc:
        return {"error": " ".join(str(exc).split())}


def _nodes_for_scaling(nodes: int) -> list[int]:
    counts = [1]
    while counts[-1] * 2 < nodes:
        counts.append(counts[-1] * 2)
    return sorted({*counts, nodes})


def estimate_job(
    config: Config,
    instance: InstanceType,
    *,
    model: str | None = None,
    trainer_overrides: Mapping[str, Any] | None = None,
    mfu: float | None = None,
    tokens: float = DEFAULT_TOKENS,
    scaling: Iterable[int] | bool = True,
    network_efficiency: float | None = None,
) -> Estimate:
    """Estimate one configuration's training job on ``instance`` (``config.job.num_workers`` nodes).

    :param config: a resolved configuration: its trainer settings and ``job.num_workers`` / ``job.nproc_per_node``.
    :param instance: the instance type of the nodes.
    :param model: a preset name or a ``config.json`` path, instead of the configuration's model.
    :param trainer_overrides: trainer settings by dotted name on top of the configuration's.
    :param mfu: the MFU compute runs at, instead of the trainer's measured one scaled to these settings.
    :param tokens: tokens the time and cost to train are given for.
    :param scaling: node counts of the weak-scaling table (True: 1, 2, 4, ... up to the job's nodes; False: none).
    :param network_efficiency: share of the instance's nominal network bandwidth collectives reach (default: the
        model's ``NETWORK_EFFICIENCY``); fit it to a measured sweep (``fsdp-sdk bench scale``).
    :raises ConfigError: an unknown model, impossible settings, or the trainer (its model) is not installed.
    """
    autotune = _autotune()
    if network_efficiency is not None and not 0 < network_efficiency <= 1:
        raise ConfigError(
            "network efficiency", f"{network_efficiency} is not a fraction", "give a number above 0 and at most 1"
        )
    efficiency = autotune.NETWORK_EFFICIENCY if network_efficiency is None else network_efficiency
    if mfu is not None and not 0 < mfu <= 1:
        raise ConfigError(
            "mfu", f"{mfu} is not a fraction", "give the MFU as a number above 0 and at most 1, like 0.45"
        )
    if not tokens > 0:
        raise ConfigError("tokens", f"{tokens} is not a number of tokens", "give a positive count, like 1e9 or 300B")
    inputs = _inputs(config, instance, model=model, trainer_overrides=trainer_overrides)
    inputs.network_efficiency = efficiency
    auto = _apply_auto(autotune, inputs) if inputs.trainer.auto.enabled else None
    if auto is not None and "error" not in auto:
        inputs.master_weights = inputs.master_weights and inputs.trainer.train.grad_accum_steps == 1
    memory = _memory(autotune, inputs)
    speed, speed_note, notes = _speed(autotune, inputs, mfu)
    assumptions = [
        *inputs.notes,
        *notes,
        f"fits: the peak against {memory.memory_fraction:.0%} of the GPU's {memory.device_gib:g} GiB "
        "(auto.memory_fraction; the rest is CUDA context, NCCL buffers, allocator slack)",
    ]
    if speed is not None:
        assumptions += [
            f"compute at MFU {speed.compute_mfu:.1%}: {speed.mfu_basis}",
            f"links at {autotune.NVLINK_EFFICIENCY:.0%} of {instance.intra_node_gbytes_per_s:g} GB/s per GPU "
            f"({instance.intra_node_link}) and {efficiency:.0%} of {instance.network_gbps} Gbit/s "
            "per node (EFA); ring collectives with NCCL's latencies",
            "overlap: all-gathers hide behind the pass they feed, reductions behind the backward; the first unit of "
            "each pass, the last reduction and any excess over the compute are exposed",
        ]
    points: list[ScalingPoint] = []
    counts = _nodes_for_scaling(inputs.nodes) if scaling is True else ([] if scaling is False else list(scaling))
    for count in counts:
        points.append(_scaling_point(config, instance, count, model, trainer_overrides, mfu, inputs))
    if points and points[0].tokens_per_s_per_gpu:
        first = points[0].tokens_per_s_per_gpu
        points = [dataclasses.replace(p, efficiency=(p.tokens_per_s_per_gpu or 0) / first) for p in points]
    return Estimate(
        model=inputs.source,
        params=inputs.shape.params,
        instance_type=instance.name,
        gpu_model=instance.gpu_model,
        nodes=inputs.nodes,
        gpus_per_node=inputs.gpus_per_node,
        settings=_settings(inputs),
        memory=memory,
        speed=speed,
        cost=_cost(instance, inputs.nodes, speed, tokens, _control_plane(config)),
        scaling=tuple(points),
        assumptions=tuple(assumptions),
        speed_note=speed_note,
        auto=auto,
    )


def _scaling_point(
    config: Config,
    instance: InstanceType,
    nodes: int,
    model: str | None,
    overrides: Mapping[str, Any] | None,
    mfu: float | None,
    base: _Inputs,
) -> ScalingPoint:
    """The job at ``nodes`` nodes with the per-GPU settings of ``base`` (those ``--auto`` chose included)."""
    autotune = _autotune()
    t = base.trainer
    fixed = {
        **(overrides or {}),
        "train.micro_batch_size": t.train.micro_batch_size,
        "train.grad_accum_steps": t.train.grad_accum_steps,
        "ac.mode": t.activation_checkpointing.mode,
        "ac.every": t.activation_checkpointing.every,
        "compile.enabled": t.compile.enabled,
        "compile.memory_budget": t.compile.memory_budget,
        "auto.enabled": False,
    }
    scaled = dataclasses.replace(config, job=dataclasses.replace(config.job, num_workers=nodes))
    try:
        inputs = _inputs(scaled, instance, model=model, trainer_overrides=fixed)
    except ConfigError:  # e.g. a fixed hybrid shard that does not tile this world
        return ScalingPoint(nodes, nodes * base.gpus_per_node, False, float("nan"), None, None, None, None)
    inputs.network_efficiency = base.network_efficiency
    memory = _memory(autotune, inputs)
    speed, _, _ = _speed(autotune, inputs, mfu)
    price = instance.on_demand_usd_per_hour
    per_billion = price * nodes / (speed.tokens_per_s * 3600) * 1e9 if speed is not None and price else None
    return ScalingPoint(
        nodes,
        nodes * inputs.gpus_per_node,
        memory.fits,
        memory.peak_gib,
        speed.tokens_per_s if speed else None,
        speed.tokens_per_s_per_gpu if speed else None,
        speed.step_s if speed else None,
        None,
        per_billion,
    )


# ----------------------------------------------------------------------------- recommending

#: Activation checkpointing candidates: (ac.mode, ac.every).
_AC = (("none", 1), ("selective", 4), ("selective", 2), ("full", 1))


def recommend(
    config: Config,
    instance: InstanceType,
    *,
    model: str | None = None,
    trainer_overrides: Mapping[str, Any] | None = None,
    mfu: float | None = None,
    tokens: float = DEFAULT_TOKENS,
    shardings: Sequence[str] | None = None,
    network_efficiency: float | None = None,
) -> list[Estimate]:
    """Every sharding strategy / activation checkpointing / micro-batch combination that fits, fastest first.

    The other settings stay as configured. Compiled runs also try ``compile.memory_budget`` 0.7 without
    checkpointing, as the trainer's ``--auto`` does. Ties in speed go to the smaller peak.

    :raises ConfigError: as :func:`estimate_job`; or speed cannot be estimated (fp32, CPU offload) without ``mfu``.
    """
    autotune = _autotune()
    base = _trainer_config(config, trainer_overrides)
    nodes = config.job.num_workers
    strategies = list(shardings or ["full_shard", "hybrid_shard", "shard_grad_op", "no_shard"])
    if nodes == 1 and "hybrid_shard" in strategies and shardings is None:
        strategies.remove("hybrid_shard")  # one node: the same as full_shard
    budgets = [1.0, autotune.LEAN_BUDGET] if base.compile.enabled and not base.fp8.enabled else [1.0]
    found: list[Estimate] = []
    for sharding in strategies:
        for ac_mode, every in _AC:
            for mb in range(1, autotune.MAX_MICRO_BATCH + 1):
                for budget in budgets if ac_mode == "none" else [1.0]:
                    combo = {
                        **(trainer_overrides or {}),
                        "parallel.sharding": sharding,
                        "parallel.reshard_after_forward": None,
                        "parallel.shard_size": 0,
                        "parallel.replicate_size": 0,
                        "ac.mode": ac_mode,
                        "ac.every": every,
                        "train.micro_batch_size": mb,
                        "compile.memory_budget": budget,
                        "auto.enabled": False,
                    }
                    est = estimate_job(
                        config,
                        instance,
                        model=model,
                        trainer_overrides=combo,
                        mfu=mfu,
                        tokens=tokens,
                        scaling=False,
                        network_efficiency=network_efficiency,
                    )
                    if est.speed is None:
                        raise ConfigError("recommend", f"cannot rank without a speed estimate: {est.speed_note}")
                    if est.memory.fits:
                        found.append(est)
    found.sort(key=lambda e: (-round(e.speed.tokens_per_s, 0) if e.speed else 0.0, e.memory.peak_gib))
    return found


def fit_problem(est: Estimate) -> str | None:
    """Why the job will not fit (one line, with the way out), or None when it does."""
    if est.auto is not None and "error" in est.auto:
        return f"{est.auto['error']}"
    m = est.memory
    if m.fits:
        return None
    return (
        f"{est.describe()} needs about {m.peak_gib:.1f} GiB per GPU, over the {m.usable_gib:.1f} GiB usable "
        f"({m.memory_fraction:.0%} of {m.device_gib:g} GiB) by {-m.headroom_gib:.1f} GiB"
    )


def parse_tokens(text: str) -> float:
    """``1e9``, ``300B``, ``2T``, ``500M`` or ``1_000_000`` as a number of tokens.

    :raises ConfigError: not a positive count.
    """
    units = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = units.get(cleaned[-1:].lower(), 1.0) if cleaned else 1.0
    number = cleaned[:-1] if scale != 1.0 else cleaned
    try:
        value = float(number) * scale
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise ConfigError("--tokens", f"{text!r} is not a number of tokens", "use a count like 1e9, 300B or 2T")
    return value


def summary_lines(data: Mapping[str, Any]) -> list[str]:
    """A few lines from an estimate's :meth:`Estimate.to_dict` (what ``Plan.estimate`` holds)."""
    m, sp, cost, s = data["memory"], data.get("speed"), data["cost"], data["settings"]
    ac = s["ac_mode"] if s["ac_mode"] != "selective" else f"selective every {s['ac_every']}"
    verdict = "fits" if m["fits"] else f"DOES NOT FIT: {-m['headroom_gib']:.1f} GiB over"
    model = data["model"]
    lines = [
        f"Estimate for {model['name']} ({model['params'] / 1e9:.1f}B) on {data['nodes']} x {data['instance_type']}, "
        f"{s['sharding']}, micro batch {s['micro_batch_size']} x {s['seq_len']}, ac {ac} ('fsdp-sdk estimate' for more):",
        f"  memory per GPU: {m['peak_gib']:.1f} of {m['usable_gib']:.1f} GiB usable ({verdict})",
    ]
    if sp:
        lines.append(
            f"  speed: {sp['step_s']:.3g} s per step, {sp['tokens_per_s']:,.0f} tokens/s "
            f"({sp['tokens_per_s_per_gpu']:,.0f} per GPU, MFU {sp['mfu']:.1%})"
        )
    else:
        lines.append(f"  speed: not estimated ({data.get('speed_note')})")
    if cost.get("usd_per_billion_tokens") is not None:
        lines.append(f"  cost: ${cost['usd_per_billion_tokens']:,.2f} per billion tokens")
    return lines
