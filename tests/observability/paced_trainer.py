"""``python paced_trainer.py <trainer arguments>``: the trainer, its run paced by the scrapes of the test's Prometheus.

The metrics-path test must not depend on how fast this machine trains: a 100-step CPU run lasts about a second
when idle, and Prometheus (scraping every 500 ms) may then see a single step. Here every ``PACE_EVERY``-th step
waits, after its record, until Prometheus has scraped the trainer's endpoint (the exporter's own
:meth:`~fsdp_trainer.prometheus_export.PrometheusExporter.wait_scraped`) and the DCGM exposition once more (the
test's server counts its scrapes in ``PACE_DCGM_SCRAPES``): whatever the load, Prometheus holds at least
``steps / PACE_EVERY`` samples of each series within the run. Everything else is the real trainer.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from fsdp_trainer import prometheus_export
from fsdp_trainer.cli import main

EVERY = int(os.environ["PACE_EVERY"])
DCGM_SCRAPES = Path(os.environ["PACE_DCGM_SCRAPES"])
WAIT_S = 120.0


def _dcgm_scrapes() -> int:
    try:
        return int(DCGM_SCRAPES.read_text() or 0)
    except (OSError, ValueError):
        return 0


_observe = prometheus_export.PrometheusExporter.observe
_seen = [_dcgm_scrapes()]


def _paced(self: Any, record: dict[str, Any]) -> None:
    _observe(self, record)
    if record["step"] % EVERY:
        return
    if not self.wait_scraped(WAIT_S):
        sys.exit(f"paced_trainer: Prometheus did not scrape step {record['step']} within {WAIT_S:.0f} s")
    deadline = time.monotonic() + WAIT_S
    while _dcgm_scrapes() <= _seen[0]:
        if time.monotonic() > deadline:
            sys.exit(f"paced_trainer: Prometheus did not scrape the DCGM exposition within {WAIT_S:.0f} s")
        time.sleep(0.05)  # polling a counter another process writes, with a deadline
    _seen[0] = _dcgm_scrapes()


prometheus_export.PrometheusExporter.observe = _paced  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
