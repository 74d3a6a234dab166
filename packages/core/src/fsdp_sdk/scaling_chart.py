"""The chart of a weak-scaling sweep: throughput and efficiency against nodes, measured beside estimated.

matplotlib is imported here only (``pip install 'fsdp-sdk[bench]'``); without it the sweep keeps its JSON and CSV
and says how to get the chart.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Protocol

from fsdp_sdk.files import write_atomic

__all__ = ["SweepData", "write_chart"]


class SweepData(Protocol):
    """What the chart reads of a sweep (:class:`fsdp_sdk.scaling.ScalingSweep` is one)."""

    @property
    def points(self) -> list[dict[str, Any]]: ...

    @property
    def settings(self) -> dict[str, Any]: ...

    @property
    def csv_path(self) -> Path: ...


def write_chart(sweep: SweepData, path: Path) -> list[str]:
    """Draw ``sweep`` into the PNG ``path`` (replaced atomically); returns warnings (no matplotlib, nothing to draw)."""
    try:
        import matplotlib
    except ImportError:
        return [f"no chart: matplotlib is not installed (pip install 'fsdp-sdk[bench]'); data in {sweep.csv_path}"]
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    points = sweep.points
    if not points:
        return ["no chart: no points yet"]
    nodes = [p["nodes"] for p in points]
    ok = [p for p in points if p["status"] == "ok" and p.get("tokens_per_s")]
    est = [p for p in points if p.get("estimated_tokens_per_s")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if ok:
        left.plot([p["nodes"] for p in ok], [p["tokens_per_s"] for p in ok], "o-", label="measured")
        base = ok[0]["tokens_per_s"] / ok[0]["nodes"]
        left.plot(nodes, [base * n for n in nodes], ":", color="grey", label="linear from the first point")
        right.plot([p["nodes"] for p in ok], [100 * p["efficiency"] for p in ok], "o-", label="measured")
    if est:
        basis = est[0].get("estimate_basis", "")
        left.plot(
            [p["nodes"] for p in est], [p["estimated_tokens_per_s"] for p in est], "s--", label=f"estimate ({basis})"
        )
        eff = [p for p in est if p.get("estimated_efficiency")]
        right.plot([p["nodes"] for p in eff], [100 * p["estimated_efficiency"] for p in eff], "s--", label="estimate")
    for p in points:
        if p["status"] != "ok":
            left.annotate(
                "failed", (p["nodes"], 0), textcoords="offset points", xytext=(0, 8), ha="center", color="red"
            )
    trainer = sweep.settings.get("trainer", {})
    model = (trainer.get("model") or {}).get("name_or_path") or (trainer.get("model") or {}).get("preset") or "tiny"
    backend = sweep.settings.get("backend")
    where = f"{backend} / {'this machine' if backend == 'local' else sweep.settings.get('instance_type')}"
    left.set(
        xlabel="nodes", ylabel="tokens/s (all GPUs)", title=f"{model} throughput ({where})", xscale="log", yscale="log"
    )
    right.set(xlabel="nodes", ylabel="weak-scaling efficiency (%)", title="tokens/s per GPU vs the smallest count")
    right.set_xscale("log")
    right.axhline(100, ls=":", color="grey")
    top = max(
        [100.0]
        + [100 * p["efficiency"] for p in ok]
        + [100 * p["estimated_efficiency"] for p in est if p.get("estimated_efficiency")]
    )
    right.set_ylim(0, top * 1.1)
    for axis in (left, right):
        axis.set_xticks(nodes)
        axis.set_xticklabels([str(n) for n in nodes])
        axis.minorticks_off()
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    fig.tight_layout()
    image = io.BytesIO()
    try:
        fig.savefig(image, format="png", dpi=120)
    finally:
        plt.close(fig)
    write_atomic(path, image.getvalue())  # 0644, like scaling.json and scaling.csv
    return []
