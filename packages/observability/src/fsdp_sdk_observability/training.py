"""What a rendered training job needs to be scraped: the trainer's Prometheus endpoint, its port, its labels.

With ``observability.enabled`` (and the ``prometheus`` component selected), the
``fsdp_sdk_render_job`` hook turns the trainer's endpoint on (``--metrics.prometheus_port``,
``monitoring.trainer_metrics_port`` unless the trainer settings name one), asks it to wait at exit
until Prometheus has scraped its last values (``--metrics.prometheus_linger_s``, two scrape
intervals), and declares the port as ``fsdp-metrics`` in the worker container, which the scrape
configuration (and the operator's ``PodMonitor``) selects on together with the workers' labels.
The usual ``prometheus.io/*`` annotations are added too, for Prometheus setups that use them.

A TrainJob gets the trainer options, and the annotations on its pods through fsdp-sdk's runtime patch;
fsdp-sdk's ClusterTrainingRuntime declares the port (``fsdp-metrics``, 9464: a runtime patch cannot add
one), and one runtime serves every TrainJob of the cluster, so a TrainJob whose endpoint would listen on
another port is refused (one line naming the setting). A job with its own ``job.command`` is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsdp_sdk.errors import ConfigError

from .common import TRAINER_PORT_NAME
from .settings import parse_duration, settings_of

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["PORT_OPTION", "add_trainer_endpoint", "scraping_enabled", "trainer_port"]

#: The trainer option that turns its Prometheus endpoint on.
PORT_OPTION = "--metrics.prometheus_port"
LINGER_OPTION = "--metrics.prometheus_linger_s"
_TRAINER_COMMAND = ["torchrun", "-m", "fsdp_trainer"]


def scraping_enabled(config: Config) -> bool:
    """Whether jobs of this configuration get the trainer endpoint: observability on, Prometheus among the components."""
    wanted = config.observability.components
    return config.observability.enabled and (not wanted or "prometheus" in wanted)


def trainer_port(config: Config) -> int:
    """The port of the trainer's endpoint: the trainer setting when given, else ``monitoring.trainer_metrics_port``."""
    given = (config.trainer.get("metrics") or {}).get("prometheus_port")
    return int(given) if given else settings_of(config).trainer_metrics_port


def _check_trainjob_port(config: Config, port: int) -> None:
    """Refuse a TrainJob whose endpoint would not listen on the port fsdp-sdk's runtime declares."""
    from fsdp_sdk.k8s.trainer_v2 import METRICS_PORT, RUNTIME_NAME

    if port == METRICS_PORT:
        return
    given = (config.trainer.get("metrics") or {}).get("prometheus_port")
    field = "trainer.metrics.prometheus_port" if given else "monitoring.trainer_metrics_port"
    raise ConfigError(
        field,
        f"{port} is not the port fsdp-sdk's ClusterTrainingRuntime {RUNTIME_NAME} declares for TrainJobs "
        f"({METRICS_PORT}), so Prometheus would scrape a port nothing listens on",
        f"use {METRICS_PORT} with --api trainjob, or submit as a PyTorchJob (--api pytorchjob)",
    )


def _options(args: list[str], config: Config) -> list[str]:
    out = list(args)
    if PORT_OPTION not in out and not any(a.startswith(PORT_OPTION + "=") for a in out):
        out += [PORT_OPTION, str(trainer_port(config))]
    if LINGER_OPTION not in out:
        linger = 2 * parse_duration(settings_of(config).scrape_interval)
        out += [LINGER_OPTION, f"{linger:g}"]
    return out


def _annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def _code_env(env: list[dict[str, Any]], config: Config, port: int) -> list[dict[str, Any]]:
    """Your own code's environment with the endpoint of ``fsdp_sdk.report`` on (``fsdp_sdk.step_report``)."""
    from fsdp_sdk.step_report import METRICS_LINGER_ENV, METRICS_PORT_ENV

    linger = 2 * parse_duration(settings_of(config).scrape_interval)
    kept = [e for e in env if e.get("name") not in (METRICS_PORT_ENV, METRICS_LINGER_ENV)]
    return [*kept, {"name": METRICS_PORT_ENV, "value": str(port)}, {"name": METRICS_LINGER_ENV, "value": f"{linger:g}"}]


def add_trainer_endpoint(config: Config, objects: list[dict[str, Any]]) -> None:
    """Turn the trainer's Prometheus endpoint on in the rendered job objects, in place (for your own code
    (``--script``), the endpoint of ``fsdp_sdk.report``, through its environment)."""
    from fsdp_sdk.user_code import CODE_COMMAND

    if not scraping_enabled(config) or config.job.command:
        return
    port = trainer_port(config)
    for obj in objects:
        if obj.get("kind") == "PyTorchJob":
            for replica in (obj["spec"].get("pytorchReplicaSpecs") or {}).values():
                template = replica["template"]
                container = template["spec"]["containers"][0]
                if container.get("command") == CODE_COMMAND:
                    container["env"] = _code_env(container.get("env") or [], config, port)
                elif container.get("command") != _TRAINER_COMMAND:
                    continue
                else:
                    container["args"] = _options(container.get("args") or [], config)
                ports = [p for p in container.get("ports") or [] if p.get("name") != TRAINER_PORT_NAME]
                container["ports"] = [*ports, {"name": TRAINER_PORT_NAME, "containerPort": port, "protocol": "TCP"}]
                meta = template.setdefault("metadata", {})
                meta["annotations"] = {**(meta.get("annotations") or {}), **_annotations(port)}
        elif obj.get("kind") == "TrainJob":
            from fsdp_sdk.k8s.render import worker_pods

            trainer = obj["spec"].get("trainer") or {}
            if trainer.get("command") == CODE_COMMAND:
                _check_trainjob_port(config, port)
                trainer["env"] = _code_env(trainer.get("env") or [], config, port)
            elif trainer.get("command") != _TRAINER_COMMAND:
                continue
            else:
                _check_trainjob_port(config, port)
                trainer["args"] = _options(trainer.get("args") or [], config)
            for pod in worker_pods([obj]):  # the pods of fsdp-sdk's runtime patch; the runtime declares the port
                pod.annotations.update(_annotations(port))
