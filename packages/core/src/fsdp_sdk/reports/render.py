"""A run report as files: PNG plots (matplotlib, no display needed) and one self-contained HTML page.

The page embeds the plots as ``data:`` URIs and needs nothing else (no script, no stylesheet,
no network), so it can be mailed, attached to a ticket or opened from an artifact store.
"""

from __future__ import annotations

import base64
import html
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsdp_sdk.errors import ConfigError
from fsdp_sdk.reports.run_metrics import RunMetrics

__all__ = ["PLOTS", "ReportFiles", "default_report_dir", "write_report"]

#: File name -> (title, y label) of each plot.
PLOTS = {
    "throughput.png": ("Throughput", "tokens/s per GPU"),
    "mfu.png": ("Model FLOPs utilisation", "MFU (%)"),
    "loss.png": ("Training loss", "loss"),
    "gpu_utilisation.png": ("GPU utilisation (DCGM)", "GPU utilisation (%)"),
}
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`write_report` wrote."""

    html: Path
    plots: dict[str, Path]
    summary: Path

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "html": str(self.html),
            "plots": {k: str(v) for k, v in self.plots.items()},
            "summary": str(self.summary),
        }


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "matplotlib", "is not installed (the report's plots need it)", "pip install 'fsdp-sdk[report]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_unit(longest: float) -> tuple[float, str]:
    """Seconds per unit of the x axis, and the unit's name."""
    if longest > 2 * 3600:
        return 3600.0, "h"
    if longest > 180:
        return 60.0, "min"
    return 1.0, "s"


def _plot(
    plt: Any,
    path: Path,
    title: str,
    ylabel: str,
    lines: dict[str, list[tuple[float, float]]],
    empty: str,
    *,
    span: tuple[float, float],
    axis: str,
) -> tuple[float, float] | None:
    """Draw ``lines`` (``(t, value)`` points) over the x range ``span`` (seconds) labelled ``axis``; return the
    first and last ``t`` drawn (``None`` when nothing was)."""
    figure, axes = plt.subplots(figsize=(8, 3.6), dpi=100)
    unit, unit_name = _time_unit(span[1])
    drawn: list[float] = []
    for i, (label, points) in enumerate(sorted(lines.items())):
        points = [(t, v) for t, v in points if v is not None and math.isfinite(v)]
        if not points:
            continue
        axes.plot(
            [t / unit for t, _ in points],
            [v for _, v in points],
            label=label,
            color=_COLOURS[i % len(_COLOURS)],
            linewidth=1.6,
            marker="." if len(points) < 40 else None,
        )
        drawn += [points[0][0], points[-1][0]]
    if not drawn:
        axes.text(0.5, 0.5, empty, ha="center", va="center", transform=axes.transAxes, color="#666666", wrap=True)
        axes.set_xticks([])
        axes.set_yticks([])
    else:
        axes.set_xlim(span[0] / unit, span[1] / unit)
        axes.set_xlabel(f"{axis} ({unit_name})")
        if len(lines) > 1:
            axes.legend(fontsize=7, loc="best")
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return (min(drawn), max(drawn)) if drawn else None


def _fmt(value: Any, digits: int = 3, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        text = f"{value:,.{digits}f}" if abs(value) < 1e6 else f"{value:,.0f}"
    else:
        text = str(value)
    return f"{text}{unit}"


def default_report_dir(metrics: RunMetrics, state_dir: str | Path) -> Path:
    """Where ``job report`` writes without ``-o``: a local run's directory (``report/`` in it), else
    ``<cluster.state_dir>/reports/<run>``; never the current directory (a checkout, often)."""
    if metrics.run_dir is not None:
        return Path(metrics.run_dir) / "report"
    return Path(state_dir) / "reports" / metrics.run


def _duration(train: dict[str, Any]) -> str:
    """``0:37`` as ``fsdp-sdk runs`` writes it, with the latest segment's beside it for a continued run."""
    from fsdp_sdk.runs import format_duration

    text = format_duration(train.get("duration_s"))
    segment = train.get("segment_duration_s")
    return f"{text} ({format_duration(segment)} this segment)" if isinstance(segment, (int, float)) else text


def _axis_note(summary: dict[str, Any]) -> str:
    """What the plots' x axis is and how far it runs, beside the duration the table gives."""
    from fsdp_sdk.runs import format_duration

    axis = summary.get("time_axis") or {}
    train = summary["training"]
    end = (axis.get("span_s") or [0.0, 0.0])[1]
    return (
        f"x axis: {axis.get('of', 'time')}, from 0:00 to {format_duration(end)} "
        f"(the duration above: {format_duration(train.get('duration_s'))}, {train.get('duration_of') or 'the whole run'})"
    )


def _rows(pairs: list[tuple[str, str]]) -> str:
    return "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in pairs)


def _page(metrics: RunMetrics, summary: dict[str, Any], images: dict[str, bytes]) -> str:
    train, gpu = summary["training"], summary["gpu"]
    mfu = train["mfu"]
    training_rows = [
        ("steps", _fmt(train["steps"])),
        ("measured steps (after warm-up)", _fmt(train["measured_steps"])),
        (f"duration ({train.get('duration_of') or 'the whole run'})", _duration(train)),
        ("throughput (whole run, after warm-up)", _fmt(train["tokens_per_s_per_gpu"], 0, " tokens/s per GPU")),
        ("TFLOP/s per GPU", _fmt(train["tflops_per_gpu"], 2)),
        ("MFU", _fmt(mfu * 100 if mfu is not None else None, 1, " %")),
        ("step time", _fmt(train["step_time_s"], 3, " s")),
        ("peak memory", _fmt(train["peak_mem_gib"], 2, " GiB")),
        ("loss (first / final)", f"{_fmt(train['first_loss'], 4)} / {_fmt(train['final_loss'], 4)}"),
    ]
    if gpu["telemetry"]:
        xid = "; ".join(f"{g}: {', '.join(map(str, codes))}" for g, codes in gpu["xid_errors"].items()) or "none"
        gpu_rows = [
            ("GPUs", str(len(gpu["gpus"]))),
            ("mean GPU utilisation", _fmt(gpu["mean_utilisation_pct"], 1, " %")),
            ("mean memory copy utilisation", _fmt(gpu["mean_memory_copy_utilisation_pct"], 1, " %")),
            ("mean power", _fmt(gpu["mean_power_w"], 1, " W")),
            (
                "temperature (mean / max)",
                f"{_fmt(gpu['mean_temperature_c'], 1)} / {_fmt(gpu['max_temperature_c'], 1)} °C",
            ),
            ("mean SM clock", _fmt(gpu["mean_sm_clock_mhz"], 0, " MHz")),
            ("XID errors", xid),
        ]
        gpu_table = f"<table>{_rows(gpu_rows)}</table>"
    else:
        gpu_table = '<p class="note">No GPU telemetry: it comes from the DCGM exporter through Prometheus.</p>'
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(metrics.started)) if metrics.started else "n/a"
    figures = "\n".join(
        f'<figure><img alt="{html.escape(PLOTS[name][0])}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'
        f"<figcaption>{html.escape(PLOTS[name][0])}</figcaption></figure>"
        for name, data in images.items()
    )
    title = f"Training run {metrics.run}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 0 0 1.5em 0; }}
th, td {{ text-align: left; padding: 0.25em 1em 0.25em 0; border-bottom: 1px solid #ddd; }}
th {{ font-weight: normal; color: #555; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 100%; }}
.note {{ color: #666; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>job <b>{html.escape(str(metrics.job or "n/a"))}</b>, started {html.escape(started)}; metrics from {html.escape(metrics.source)}</p>
<h2>Training</h2>
<table>{_rows(training_rows)}</table>
<h2>GPUs</h2>
{gpu_table}
<h2>Over time</h2>
<p class="note">{html.escape(_axis_note(summary))}</p>
{figures}
</body></html>
"""


def write_report(metrics: RunMetrics, out_dir: Path) -> ReportFiles:
    """Write ``report.html``, the PNG plots of :data:`PLOTS` and ``summary.json`` into ``out_dir``.

    :raises ConfigError: matplotlib is missing, or ``out_dir`` cannot be written.
    """
    plt = _pyplot()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            "--out", f"cannot create {out_dir} ({error.strerror})", "choose a writable directory"
        ) from None
    records = metrics.records

    def line(field: str, scale: float = 1.0) -> dict[str, list[tuple[float, float]]]:
        points = [(r["t"], r[field] * scale) for r in records if r.get(field) is not None]
        return {field: points} if points else {}

    cpu = not any(r.get("mfu") is not None for r in records)
    plots = {
        "throughput.png": (line("tokens_per_s_per_gpu"), "no throughput recorded"),
        "mfu.png": (
            line("mfu", 100.0),
            "MFU unknown: no peak TFLOP/s for this device (CPU)" if cpu else "no MFU recorded",
        ),
        "loss.png": (line("loss"), "no loss recorded"),
        "gpu_utilisation.png": (
            metrics.gpus.get("utilisation_pct", {}),
            "no GPU telemetry (DCGM exporter through Prometheus)",
        ),
    }
    summary = metrics.summary()
    # the x axis runs from the start to the end of the duration the tables give (the whole run's, for a local run:
    # the same clock), or further when a point lies beyond it
    duration = float(summary["training"]["duration_s"] or 0.0)
    latest = max((t for lines, _ in plots.values() for points in lines.values() for t, _ in points), default=0.0)
    span = (0.0, max(duration, latest) or 1.0)
    paths: dict[str, Path] = {}
    images: dict[str, bytes] = {}
    drawn: dict[str, list[float] | None] = {}
    for name, (lines, empty) in plots.items():
        path = out_dir / name
        points = _plot(plt, path, *PLOTS[name], lines, empty, span=span, axis=metrics.time_axis)
        drawn[name] = list(points) if points else None
        paths[name] = path
        images[name] = path.read_bytes()
    summary["time_axis"] = {"of": metrics.time_axis, "span_s": list(span), "drawn_s": drawn}
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=1, default=str))
    page = out_dir / "report.html"
    page.write_text(_page(metrics, summary, images), encoding="utf-8")
    return ReportFiles(page, paths, summary_path)
