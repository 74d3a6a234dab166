"""``fsdp-sdk bench scale`` on the local backend: a weak-scaling sweep over simulated nodes on CPU, its CSV, JSON and
chart, an interrupted sweep resumed, a failed point recorded; and the sweep's bad inputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from fsdp_sdk.client import Client
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.scaling import CSV_COLUMNS, ScalingSweep, parse_node_counts, point_estimate, run_sweep

#: A tiny job that takes seconds per point on CPU; c10d rendezvous (no etcd needed).
TINY = {
    "model.preset": "tiny",
    "data.seq_len": 64,
    "train.micro_batch_size": 2,
    "train.steps": 4,
    "metrics.warmup_steps": 1,
    "checkpoint.enabled": False,
}


def _client(progress=None) -> Client:
    return Client.from_sources(
        overrides={"cluster.backend": "local", "job.rdzv_backend": "c10d"},
        read_default_env_file=False,
        progress=progress,
    )


class Interrupted(Exception):
    """Stands for Ctrl-C after the first point (KeyboardInterrupt would stop pytest itself)."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_local_sweep_writes_csv_json_and_chart_and_resumes_after_an_interruption(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    lines: list[str] = []

    def stop_after_the_first_point(line: str) -> None:
        lines.append(line)
        if line.startswith("point 1/2 (1 node): ok"):
            raise Interrupted

    with pytest.raises(Interrupted):
        run_sweep(_client(stop_after_the_first_point), [2, 1], out, trainer_overrides=TINY)
    first = json.loads((out / "scaling.json").read_text())
    assert [p["nodes"] for p in first["points"]] == [1] and first["points"][0]["status"] == "ok"
    assert (out / "scaling.csv").exists() and (out / "scaling.png").exists()

    lines.clear()
    sweep = run_sweep(_client(lines.append), "1,2", out, trainer_overrides=TINY)
    assert any("1 of 2 points already recorded; running the other 1" in line for line in lines)
    assert not any(line.startswith("point 1/1 (1 node)") for line in lines)
    one, two = sweep.points
    assert one == first["points"][0]  # kept as recorded, not run again
    assert (one["nodes"], one["gpus"], two["nodes"], two["gpus"]) == (1, 1, 2, 2)
    assert two["status"] == "ok" and two["world_size"] == 2
    for p in (one, two):
        assert p["tokens_per_s"] > 0 and p["tokens_per_s_per_gpu"] == pytest.approx(p["tokens_per_s"] / p["gpus"])
        assert p["step_time_s"] == pytest.approx(2 * 64 / p["tokens_per_s_per_gpu"])
        assert p["mfu"] is None and p["peak_mem_gib"] is None  # CPU: no peak FLOPs, no CUDA memory
        assert "estimated_tokens_per_s" not in p and "p5.48xlarge nodes" in p["estimate_error"]  # CPU: no estimate
    assert one["efficiency"] == 1.0 and two["efficiency"] == pytest.approx(
        two["tokens_per_s_per_gpu"] / one["tokens_per_s_per_gpu"]
    )
    assert one["estimated_efficiency"] is None and two["estimated_efficiency"] is None

    recorded = json.loads((out / "scaling.json").read_text())
    assert recorded["settings"]["backend"] == "local" and recorded["settings"]["gpus_per_node"] == 1
    assert recorded["settings"]["trainer"]["model"]["preset"] == "tiny"
    assert recorded["points"] == sweep.points
    with (out / "scaling.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS and [r["nodes"] for r in rows] == ["1", "2"]
    assert float(rows[1]["tokens_per_s"]) == pytest.approx(two["tokens_per_s"])
    png = (out / "scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not list(out.glob(".scaling*"))  # no temporary file left behind


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path, invoke) -> None:
    out = tmp_path / "sweep"
    # parallel.api none runs one process: the 2-node point fails in the trainer, the sweep records it
    result = invoke(
        "bench",
        "scale",
        "--backend",
        "local",
        "--set",
        "job.rdzv_backend=c10d",
        "--nodes",
        "2",
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--",
        "--parallel.api",
        "none",
        "--checkpoint.enabled",
        "false",
    )
    assert result.exit_code == 1, result.stderr[-2000:]
    point = json.loads((out / "scaling.json").read_text())["points"][0]
    assert point["status"] == "failed" and point["nodes"] == 2 and point["error"]
    assert point["estimate_error"].startswith("not estimated: the run is measured on this machine")
    assert "failed" in result.stdout
    # recorded: the same command does not run it again (and still reports it)
    again = invoke(
        "bench",
        "scale",
        "--backend",
        "local",
        "--set",
        "job.rdzv_backend=c10d",
        "--nodes",
        "2",
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--",
        "--parallel.api",
        "none",
        "--checkpoint.enabled",
        "false",
    )
    assert again.exit_code == 1 and "1 of 1 points already recorded" in again.stderr and "starting" not in again.stderr


def test_a_directory_of_another_sweep_is_refused(tmp_path: Path) -> None:
    settings = {
        "backend": "local",
        "instance_type": "p5.48xlarge",
        "gpus_per_node": 1,
        "trainer": {"model": {"preset": "tiny"}},
    }
    sweep = ScalingSweep(tmp_path, settings)
    sweep.record({"nodes": 1, "gpus": 1, "status": "failed", "error": "x"})
    assert ScalingSweep.open(tmp_path, settings).points[0]["nodes"] == 1
    other = {**settings, "trainer": {"model": {"preset": "tiny-gqa"}}}
    with pytest.raises(ConfigError, match=r"holds a sweep of other settings \(trainer differ\)"):
        ScalingSweep.open(tmp_path, other)
    assert ScalingSweep.open(tmp_path, other, restart=True).points == []
    (tmp_path / "scaling.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not a sweep's record"):
        ScalingSweep.open(tmp_path, settings)


def test_node_counts() -> None:
    assert parse_node_counts("16,1,2,2,4") == [1, 2, 4, 16]
    assert parse_node_counts([2, 1]) == [1, 2]
    for bad in ("0", "1,x", "", "-1"):
        with pytest.raises(ConfigError, match="--nodes"):
            parse_node_counts(bad)


@pytest.mark.parametrize(
    "args, names",
    [
        (["--nodes", "0,1"], "--nodes: '0' is not a node count"),
        (["--nodes", "1", "--", "--auto"], "--auto picks the micro-batch per point"),
    ],
)
def test_bad_sweeps_are_one_line_exit_2(invoke, tmp_path: Path, args, names) -> None:
    result = invoke("bench", "scale", "--out", str(tmp_path / "out"), *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert names in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_local_point_is_not_set_beside_an_estimate_of_another_machine() -> None:
    """Locally the sweep measures this machine: an estimate of cluster.instance_type nodes (p5.48xlarge by default,
    112.7M tokens/s beside 13.9k measured on CPU) is not recorded or drawn; a cluster point gets its own."""
    assert point_estimate(_client(), 1) == {
        "estimate_error": "not estimated: the run is measured on this machine, and the estimate models "
        "p5.48xlarge nodes"
    }
    cluster = Client.from_sources(
        overrides={
            "cluster.backend": "eksctl",
            "cluster.instance_type": "p5.48xlarge",
            "trainer.model.preset": "llama2-7b",
        },
        read_default_env_file=False,
    )
    estimated = point_estimate(cluster, 8)
    assert estimated["estimate_basis"] == "p5.48xlarge" and estimated["estimated_tokens_per_s"] > 0


def test_the_chart_is_written_readable_like_the_csv_and_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    settings = {"backend": "local", "instance_type": "p5.48xlarge", "gpus_per_node": 1, "trainer": {}}
    sweep = ScalingSweep(tmp_path, settings)
    for nodes, per_gpu in ((1, 14000.0), (2, 13000.0)):
        sweep.record({"nodes": nodes, "gpus": nodes, "status": "ok", "tokens_per_s": per_gpu * nodes,
                      "tokens_per_s_per_gpu": per_gpu})  # fmt: skip
    assert sweep.warnings == [] and sweep.chart_path.read_bytes()[:4] == b"\x89PNG"
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (sweep.json_path, sweep.csv_path, sweep.chart_path)}
    assert modes == {"scaling.json": "0o644", "scaling.csv": "0o644", "scaling.png": "0o644"}
    assert not list(tmp_path.glob(".scaling*"))
