"""The metrics path for real: Debian's Prometheus on loopback scrapes a local trainer run (CPU, tiny preset)
and two DCGM exporters' text expositions, one per node of the job (dcgm-exporter before 4.9, with the old names,
and 4.9.0, ``scrapes/dcgm-exporter-4.9.0.txt``, with the renamed metrics, ratio and hertz units and the
``hostname`` label); ``fsdp-sdk job report`` reads the figures back through Prometheus's
HTTP API; headless Chromium renders the report; every dashboard query runs against that Prometheus.

One module-scoped fixture runs it all once (about half a minute on 2 cores); every wait polls with a deadline.
Nothing depends on how fast the machine is: the trainer's run is paced by Prometheus's scrapes
(``paced_trainer.py``: every ``PACE``-th step waits until both targets were scraped again), so Prometheus holds
at least ``STEPS / PACE`` samples of every series within the run, idle machine or saturated.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fsdp_sdk.config.resolution import resolve

pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
RUN_ID = "e2e0run1"
JOB = "fsdp"
#: Steps of the trainer run, and the pace: every PACE-th step waits for a scrape of the trainer and of the DCGM
#: exposition, so Prometheus keeps at least STEPS / PACE samples of each series within the run (the report's plots
#: draw them as lines) however fast or slow the machine trains.
STEPS = 100
PACE = 10
HOSTNAME = "ip-10-0-1-17"
#: The node whose DCGM exporter is 4.9.0 (the fixture's hostname label), and that exposition as recorded.
HOSTNAME_49 = "ip-10-0-1-18"
EXPOSITION_49 = Path(__file__).with_name("scrapes") / "dcgm-exporter-4.9.0.txt"
# gpu -> DCGM field -> value, as the exporter would serve them for the job's pod
GPUS = {
    "0": {"DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_MEM_COPY_UTIL": 40, "DCGM_FI_DEV_POWER_USAGE": 510.5,
          "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_XID_ERRORS": 0},
    "1": {"DCGM_FI_DEV_GPU_UTIL": 91, "DCGM_FI_DEV_MEM_COPY_UTIL": 42, "DCGM_FI_DEV_POWER_USAGE": 498.5,
          "DCGM_FI_DEV_GPU_TEMP": 65, "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_XID_ERRORS": 13},
}  # fmt: skip


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dcgm_exposition() -> str:
    """A DCGM exporter's /metrics text for two GPUs of the job's worker pod, with the exporter's labels."""
    from fsdp_sdk_observability.dcgm import COUNTERS

    help_text = {name: (kind, text) for name, kind, text in COUNTERS}
    lines = []
    for field in GPUS["0"]:
        kind, text = help_text[field]
        lines += [f"# HELP {field} {text}", f"# TYPE {field} {kind}"]
        for gpu, values in GPUS.items():
            labels = (
                f'gpu="{gpu}",UUID="GPU-0000000{gpu}-aaaa-bbbb-cccc-dddddddddddd",pci_bus_id="00000000:5{gpu}:00.0",'
                f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{HOSTNAME}",'
                f'container="pytorch",namespace="default",pod="{JOB}-worker-0"'
            )
            lines.append(f"{field}{{{labels}}} {values[field]}")
    return "\n".join(lines) + "\n"


class _Exposition(http.server.BaseHTTPRequestHandler):
    body = b""
    scrapes = 0
    counter: Path | None = None  # where the count of scrapes is written, for the paced trainer

    def do_GET(self) -> None:
        type(self).scrapes += 1
        if self.counter is not None:
            tmp = self.counter.with_suffix(".tmp")
            tmp.write_text(str(self.scrapes))
            tmp.replace(self.counter)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    """An exporter whose scraper may hang up mid-answer (Prometheus gives up on a slow scrape): that is no error, and
    a traceback printed from a server thread would land in whatever test's output is being captured then."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Exposition49(_Exposition):
    """The second node's exporter, dcgm-exporter 4.9.0 (not counted for the pace)."""

    body = EXPOSITION_49.read_bytes()
    counter = None

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    data = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=10) as response:
        return json.loads(response.read())["data"]["result"]


def _poll(
    what: str, check: Any, timeout: float, process: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if process is not None and process.poll() is not None:
            raise AssertionError(
                f"{what}: the process ended ({process.returncode}): {log.read_text()[-3000:] if log else ''}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s" + (f": {log.read_text()[-3000:]}" if log else ""))
        time.sleep(0.2)


@dataclass
class MetricsPath:
    prometheus: str
    records: list[dict[str, Any]]
    report: dict[str, Any]
    screenshot: Path | None


@pytest.fixture(scope="module")
def metrics_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsPath]:
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    pytest.importorskip("prometheus_client")
    pytest.importorskip("fsdp_trainer")
    from fsdp_sdk.config import load_config
    from fsdp_sdk.plugins import build_plugins
    from fsdp_sdk_observability import plugin
    from fsdp_sdk_observability.prometheus import prometheus_config, static_scrape_job

    root = tmp_path_factory.mktemp("metrics-path")
    state = root / "state"
    run_dir = state / "local" / "runs" / RUN_ID
    trainer_port, prometheus_port = _port(), _port()

    _Exposition.body = dcgm_exposition().encode()
    _Exposition.counter = root / "dcgm-scrapes"
    exposition = _QuietServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=exposition.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    exposition_49 = _QuietServer(("127.0.0.1", 0), _Exposition49)
    threading.Thread(target=exposition_49.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    # The scrape settings as the plugin renders them, with loopback targets in place of Kubernetes discovery.
    plugins = build_plugins(autoload=False)
    plugins.register(plugin, name="observability")
    config = load_config(
        None,
        None,
        {"monitoring.scrape_interval": "500ms"},
        environ={},
        read_default_env_file=False,
        sections=plugins.settings,
    )
    rendered = prometheus_config(
        resolve(config, plugins, validate_trainer=False),
        extra_jobs=[
            static_scrape_job("fsdp-trainer", [f"127.0.0.1:{trainer_port}"], {"fsdp_job": JOB, "run_id": RUN_ID}),
            static_scrape_job("dcgm-exporter", [f"127.0.0.1:{exposition.server_address[1]}"], {"node": HOSTNAME}),
            static_scrape_job(
                "dcgm-exporter-4-9", [f"127.0.0.1:{exposition_49.server_address[1]}"], {"node": HOSTNAME_49}
            ),
        ],
    )
    rendered["scrape_configs"] = [
        job for job in rendered["scrape_configs"] if "static_configs" in job and job["job_name"] != "prometheus"
    ]
    (root / "prometheus.yml").write_text(yaml.safe_dump(rendered))
    prometheus_log = root / "prometheus.log"
    prometheus = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus_port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(prometheus_log, "wb"),  # noqa: SIM115 - Prometheus writes to it while it runs
    )
    url = f"http://127.0.0.1:{prometheus_port}"
    try:
        _poll(
            "Prometheus ready",
            lambda: urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200,
            60,
            prometheus,
            prometheus_log,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_SDK_", "KUBECONFIG"))}
        env.update(PACE_EVERY=str(PACE), PACE_DCGM_SCRAPES=str(_Exposition.counter))
        trainer_log = root / "trainer.log"
        command = [
            sys.executable, str(Path(__file__).with_name("paced_trainer.py")),
            "--model.preset", "tiny", "--data.seq_len", "256", "--train.steps", str(STEPS), "--train.log_every", "10",
            "--runtime.device", "cpu", "--checkpoint.enabled", "false",
            "--train.output_dir", str(run_dir),
            "--metrics.prometheus_port", str(trainer_port), "--metrics.prometheus_linger_s", "20",
            "--metrics.peak_tflops", "0.5",  # a peak for the CPU, so MFU is known and its panel and plot have data
        ]  # fmt: skip
        with open(trainer_log, "wb") as log:
            trainer = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, timeout=200)
        assert trainer.returncode == 0, trainer_log.read_text()[-3000:]
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert len(records) == STEPS
        selector = f'{{run_id="{RUN_ID}"}}'
        _poll(
            "the last step in Prometheus",
            lambda: any(
                float(r["value"][1]) == STEPS for r in _query(url, f"max_over_time(fsdp_trainer_step{selector}[10m])")
            ),
            30,
        )
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"):  # both exporters' series are in
            _poll(f"{name} in Prometheus", lambda n=name: len(_query(url, f"last_over_time({n}[10m])")) == 2, 30)

        out = root / "report"
        env["FSDP_SDK_STATE_DIR"] = str(state)
        cli = Path(sys.executable).with_name("fsdp-sdk")
        done = subprocess.run(
            [str(cli), "job", "report", RUN_ID, "--backend", "local", "--prometheus", url, "-o", str(out), "--json"],
            capture_output=True, text=True, env=env, cwd=root, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)

        screenshot = None
        if CHROMIUM is not None:
            screenshot = root / "screenshot.png"
            subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={root / 'chromium'}", f"--screenshot={screenshot}", "--window-size=1280,3200",
                 (out / "report.html").as_uri()],
                capture_output=True, timeout=120, cwd=root,
            )  # fmt: skip
        yield MetricsPath(url, records, report, screenshot)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=20)
        exposition.shutdown()
        exposition_49.shutdown()
        exposition.server_close()
        exposition_49.server_close()


def test_report_reads_the_run_back_through_prometheus(metrics_path: MetricsPath) -> None:
    summary = metrics_path.report["summary"]
    assert summary["source"] == f"prometheus {metrics_path.prometheus}"
    assert summary["run"] == RUN_ID and summary["job"] == JOB
    training = summary["training"]
    by_step = {r["step"]: r for r in metrics_path.records}
    assert training["steps"] == STEPS  # the trainer lingered until Prometheus scraped the last step
    assert training["final_loss"] == by_step[STEPS]["loss"]
    assert training["measured_steps"] >= 1
    # Every figure the report took from Prometheus is the trainer's own, exactly, for the steps scraped.
    html = Path(metrics_path.report["files"]["html"]).read_text()
    assert "prometheus" in html and f"{training['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU" in html
    gpu = summary["gpu"]
    # both nodes' GPUs: the 4.9 exporter's by their new names, its utilisation ratio read as percent
    assert gpu["gpus"] == [f"{HOSTNAME} GPU 0", f"{HOSTNAME} GPU 1", f"{HOSTNAME_49} GPU 0", f"{HOSTNAME_49} GPU 1"]
    assert gpu["mean_utilisation_pct"] == pytest.approx(89.0)  # 87, 91 % and 0.85, 0.93
    assert gpu["mean_power_w"] == pytest.approx(504.5)
    assert (gpu["mean_temperature_c"], gpu["max_temperature_c"]) == (pytest.approx(63.0), 66.0)
    assert gpu["xid_errors"] == {f"{HOSTNAME} GPU 1": [13]}


def test_prometheus_samples_are_the_trainer_records(metrics_path: MetricsPath) -> None:
    from fsdp_sdk.reports.prometheus_api import PrometheusApi
    from fsdp_sdk.reports.sources import from_prometheus

    metrics = from_prometheus(PrometheusApi(metrics_path.prometheus), run_id=RUN_ID)
    by_step = {r["step"]: r for r in metrics_path.records}
    assert (
        len(metrics.records) >= STEPS // PACE and metrics.records[-1]["step"] == STEPS
    )  # one per paced step, at least
    for record in metrics.records:
        expected = by_step[record["step"]]
        for field in ("loss", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "step_time_s", "grad_norm"):
            assert record[field] == expected[field], (record["step"], field)
        assert "peak_mem_gib" not in record  # unknown on CPU: the endpoint leaves it out


def test_screenshot_of_the_report_shows_the_plots(metrics_path: MetricsPath) -> None:
    if metrics_path.screenshot is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    assert metrics_path.screenshot.is_file(), "headless Chromium wrote no screenshot"
    import numpy as np
    from matplotlib import image

    pixels = (image.imread(metrics_path.screenshot)[..., :3] * 255).astype(int)
    line = np.all(np.abs(pixels - np.array([31, 119, 180])) <= 40, axis=-1)  # the plots' first line colour
    second = np.all(np.abs(pixels - np.array([214, 39, 40])) <= 40, axis=-1)  # the second GPU's line
    assert line.sum() > 2000, f"only {line.sum()} pixels of plot lines: the plots did not render"
    rows = np.flatnonzero(line.any(axis=1))
    assert rows.max() - rows.min() > 1200, "the plot lines are all in one place: not every plot rendered"
    assert second.sum() > 300, "the GPU utilisation plot has no second GPU line"
    assert np.flatnonzero(second.any(axis=1)).min() > rows.min() + 900  # it is the last plot, below the others


def test_every_dashboard_query_returns_data(metrics_path: MetricsPath) -> None:
    from fsdp_sdk_observability.dashboard import PANELS, dashboard_json

    dashboard_queries = {
        t["expr"] for p in dashboard_json()["panels"] if p["type"] == "timeseries" for t in p["targets"]
    }
    assert dashboard_queries == {p.expr for p in PANELS}
    empty, partial = [], []
    for panel in PANELS:
        result = _query(metrics_path.prometheus, f"last_over_time(({panel.expr.replace('$job', JOB)})[10m:500ms])")
        if not result:
            empty.append(panel.title)
        if panel.row == "GPUs" and {r["metric"].get("Hostname") for r in result} != {HOSTNAME, HOSTNAME_49}:
            partial.append(panel.title)  # each GPU panel reads both exporters, named by node in the legend's label
    assert not empty, f"queries without data: {empty}"
    assert not partial, f"GPU panels missing one exporter's GPUs: {partial}"
    utilisation = next(p for p in PANELS if p.title == "GPU utilisation").expr.replace("$job", JOB)
    values = {
        r["metric"]["Hostname"] + " " + r["metric"]["gpu"]: float(r["value"][1])
        for r in _query(metrics_path.prometheus, f"last_over_time(({utilisation})[10m:500ms])")
    }
    assert values == pytest.approx(
        {f"{HOSTNAME} 0": 87, f"{HOSTNAME} 1": 91, f"{HOSTNAME_49} 0": 85, f"{HOSTNAME_49} 1": 93}
    )
    query = urllib.parse.urlencode({"match[]": "fsdp_trainer_step"})
    with urllib.request.urlopen(
        f"{metrics_path.prometheus}/api/v1/label/fsdp_job/values?{query}", timeout=10
    ) as response:
        assert json.loads(response.read())["data"] == [JOB]  # what the job variable lists
