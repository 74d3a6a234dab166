"""The trainer's Prometheus endpoint (``fsdp_trainer.prometheus_export``): what a scrape reads, and the linger."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from fsdp_trainer.prometheus_export import PrometheusExporter

RECORD = {
    "step": 7,
    "loss": 4.25,
    "lr": 0.0003,
    "grad_norm": 1.5,
    "tokens_per_s_per_gpu": 12000.0,
    "tflops_per_gpu": 420.0,
    "mfu": 0.42,
    "peak_mem_gib": 2.0,
    "step_time_s": 0.5,
    "tokens": 6000,
}


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_reads_the_last_step() -> None:
    port = _port()
    exporter = PrometheusExporter(
        port, {"rank": "0", "world_size": "2", "device": "cuda", "gpu": "H200", "leader": "true"}
    )
    try:
        before = _scrape(port)
        assert "fsdp_trainer_loss" not in before and before["fsdp_trainer_tokens_total"] == 0
        exporter.observe({**RECORD, "step": 6, "loss": 9.0})
        exporter.observe(RECORD)
        values = _scrape(port)
    finally:
        exporter.close()
    assert values["fsdp_trainer_step"] == 7 and values["fsdp_trainer_loss"] == 4.25
    assert values["fsdp_trainer_tokens_per_second_per_gpu"] == 12000.0 and values["fsdp_trainer_mfu_ratio"] == 0.42
    assert values["fsdp_trainer_peak_memory_bytes"] == 2 * 2**30 and values["fsdp_trainer_step_time_seconds"] == 0.5
    assert values["fsdp_trainer_tokens_total"] == 12000 and values["fsdp_trainer_info"] == 1


def test_unknown_values_are_left_out() -> None:
    port = _port()
    exporter = PrometheusExporter(port, {"leader": "true"})
    try:
        exporter.observe({**RECORD, "mfu": None, "peak_mem_gib": None})
        values = _scrape(port)
    finally:
        exporter.close()
    assert "fsdp_trainer_mfu_ratio" not in values and "fsdp_trainer_peak_memory_bytes" not in values
    assert values["fsdp_trainer_tflops_per_gpu"] == 420.0


def test_close_waits_for_a_scrape_of_the_last_step() -> None:
    port = _port()
    exporter = PrometheusExporter(port, {"leader": "true"})
    exporter.observe(RECORD)
    scraped: list[dict[str, Any]] = []
    closing = threading.Event()

    def scrape_later() -> None:  # the scraper comes once close() has begun, as Prometheus would after the run
        closing.wait(30)
        came_at.append(time.monotonic())  # before the request: close() may return as soon as it is answered
        scraped.append(_scrape(port))

    came_at: list[float] = []
    thread = threading.Thread(target=scrape_later)
    thread.start()
    closing.set()
    exporter.close(linger_s=60)
    closed_at = time.monotonic()
    thread.join()
    assert scraped and scraped[0]["fsdp_trainer_step"] == 7
    assert came_at[0] <= closed_at, "close() returned before the scraper came for the last step"


def test_close_gives_up_after_the_linger() -> None:
    exporter = PrometheusExporter(_port(), {"leader": "true"})
    exporter.observe(RECORD)
    start = time.monotonic()
    exporter.close(linger_s=0.3)
    assert 0.25 <= time.monotonic() - start < 30  # it waited the linger, then gave up (not the whole wait of a scrape)


def test_a_port_in_use_is_a_one_line_trainer_error() -> None:
    import torch

    from fsdp_trainer.config import MetricsConfig
    from fsdp_trainer.distributed import DistEnv
    from fsdp_trainer.errors import ConfigError
    from fsdp_trainer.prometheus_export import serve_metrics

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"))

        class Records:
            name = "cpu"

            def __init__(self) -> None:
                self.sinks: list = []
                self.on_close: list = []

        with pytest.raises(ConfigError, match=rf"^--metrics.prometheus_port: cannot serve on port {port}"):
            serve_metrics(Records(), MetricsConfig(prometheus_port=port), env)  # type: ignore[arg-type]


def test_trainer_option_is_validated() -> None:
    from fsdp_trainer.config import ConfigError, TrainerConfig

    with pytest.raises(ConfigError, match=r"--metrics\.prometheus_port: 80 is not a usable port"):
        TrainerConfig.from_dict({"metrics": {"prometheus_port": 80}})
