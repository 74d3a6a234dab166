"""The per-step metrics on a Prometheus endpoint (``--metrics.prometheus_port``; needs ``prometheus-client``).

Imported only when the option is on. The leader serves them; so does the first process
(``LOCAL_RANK`` 0) of every other node where the port is free: in Kubernetes each worker pod
has its own network, so every pod is a healthy target with its own throughput, step time and
peak memory, while several simulated nodes on one machine (local runs) leave the port to the
leader. The values are those of the process's last optimizer step, as in ``metrics.jsonl``:

=====================================  ==========================================================
``fsdp_trainer_step``                  the step (gauge)
``fsdp_trainer_loss``                  loss, averaged over every rank
``fsdp_trainer_learning_rate``         learning rate
``fsdp_trainer_grad_norm``             total gradient norm before clipping
``fsdp_trainer_tokens_per_second_per_gpu``  this process's tokens per second
``fsdp_trainer_tflops_per_gpu``        achieved TFLOP/s of this process
``fsdp_trainer_mfu_ratio``             TFLOP/s over the GPU's peak (absent when unknown: CPU)
``fsdp_trainer_step_time_seconds``     the step's wall time on the device
``fsdp_trainer_peak_memory_bytes``     CUDA's peak allocated memory in the step (absent on CPU)
``fsdp_trainer_tokens_total``          tokens this process consumed since it started (counter)
``fsdp_trainer_info``                  ``rank``, ``world_size``, ``device``, ``gpu``, ``leader``
=====================================  ==========================================================

Scrapers add who the series belong to (the job, the run, the pod) as target labels. With
``--metrics.prometheus_linger_s``, the end of the run waits (at most that long) until a scrape
has read the last step, so short runs and the final steps are not lost when the process exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import MetricsConfig
    from .distributed import DistEnv
    from .metrics import Metrics

__all__ = ["PrometheusExporter", "serve_metrics"]

log = logging.getLogger(__name__)

# (metric name, record key, help, scale)
_GAUGES = (
    ("fsdp_trainer_step", "step", "The last optimizer step.", 1.0),
    ("fsdp_trainer_loss", "loss", "Training loss of the last step, averaged over every rank.", 1.0),
    ("fsdp_trainer_learning_rate", "lr", "Learning rate of the last step.", 1.0),
    ("fsdp_trainer_grad_norm", "grad_norm", "Total gradient norm of the last step, before clipping.", 1.0),
    ("fsdp_trainer_tokens_per_second_per_gpu", "tokens_per_s_per_gpu", "Tokens per second of this process.", 1.0),
    ("fsdp_trainer_tflops_per_gpu", "tflops_per_gpu", "Achieved TFLOP/s of this process.", 1.0),
    ("fsdp_trainer_mfu_ratio", "mfu", "Model FLOPs utilisation: TFLOP/s over the accelerator's dense peak.", 1.0),
    ("fsdp_trainer_step_time_seconds", "step_time_s", "Wall time of the last step on the device.", 1.0),
    ("fsdp_trainer_peak_memory_bytes", "peak_mem_gib", "Peak allocated accelerator memory in the last step.", 2.0**30),
)


class PrometheusExporter:
    """An HTTP endpoint serving the last step's record of this process (a ``prometheus_client`` collector).

    :param port: the TCP port (all interfaces).
    :param info: the labels of ``fsdp_trainer_info``.
    :raises OSError: the port cannot be bound.
    """

    def __init__(self, port: int, info: dict[str, str]) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.port, self.info = port, dict(info)
        self._record: dict[str, Any] | None = None
        self._tokens = 0
        self._changes = 0  # records seen
        self._served = 0  # the records a scrape has read
        self._lock = threading.Condition()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self._server, self._thread = start_http_server(port, registry=registry)

    def observe(self, record: dict[str, Any]) -> None:
        """Take one step's record (a :class:`~fsdp_trainer.metrics.Metrics` sink)."""
        with self._lock:
            self._record = dict(record)
            self._tokens += int(record.get("tokens") or 0)
            self._changes += 1

    def describe(self) -> list[Any]:
        """Nothing to describe up front (the families depend on the records)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The metric families of the last record (called by each scrape)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        with self._lock:
            record, tokens = self._record, self._tokens
            self._served = self._changes
            self._lock.notify_all()
        yield InfoMetricFamily("fsdp_trainer", "The trainer process serving these metrics.", value=self.info)
        yield CounterMetricFamily("fsdp_trainer_tokens", "Tokens this process consumed since it started.", value=tokens)
        if record is None:
            return
        for name, key, text, scale in _GAUGES:
            value = record.get(key)
            if value is not None:
                yield GaugeMetricFamily(name, text, value=float(value) * scale)

    def wait_scraped(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds until a scrape has read the last record; whether one has."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._served < self._changes and time.monotonic() < deadline:
                self._lock.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            return self._served >= self._changes

    def close(self, linger_s: float = 0.0) -> None:
        """Stop serving, after waiting up to ``linger_s`` seconds for a scrape of the last record."""
        if not self.wait_scraped(linger_s) and linger_s > 0:
            log.warning("metrics.prometheus_linger_s: no scrape read the last step within %.0fs", linger_s)
        self._server.shutdown()
        self._server.server_close()


def serve_metrics(metrics: Metrics, cfg: MetricsConfig, env: DistEnv) -> PrometheusExporter | None:
    """Serve ``metrics``' records on ``cfg.prometheus_port`` from the leader and, where the port is free, from the
    first process of every other node. Called on every rank (it waits at a barrier so the leader binds first).

    :returns: this process's exporter, or ``None`` when it serves none.
    :raises ConfigError: prometheus-client is not installed, or the leader cannot bind the port.
    """
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--metrics.prometheus_port: needs prometheus-client; pip install 'fsdp-trainer[prometheus]'"
        ) from None
    info = {
        "rank": str(env.rank),
        "world_size": str(env.world_size),
        "device": env.device.type,
        "gpu": metrics.name if env.device.type == "cuda" else "",
        "leader": "true" if env.is_leader else "false",
    }
    exporter: PrometheusExporter | None = None
    if env.is_leader:
        try:
            exporter = PrometheusExporter(cfg.prometheus_port, info)
        except OSError as error:
            raise ConfigError(
                f"--metrics.prometheus_port: cannot serve on port {cfg.prometheus_port} ({error}); choose a free port"
            ) from None
        log.info("Prometheus metrics on port %d (/metrics)", cfg.prometheus_port)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    if not env.is_leader and env.local_rank == 0:
        try:
            exporter = PrometheusExporter(cfg.prometheus_port, info)
        except OSError:
            log.debug(
                "port %d is taken on this machine (by the leader): this node serves no metrics", cfg.prometheus_port
            )
    if exporter is not None:
        metrics.sinks.append(exporter.observe)
        linger = cfg.prometheus_linger_s
        metrics.on_close.append(lambda: exporter.close(linger))
    return exporter
