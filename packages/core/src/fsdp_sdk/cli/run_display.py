"""How long commands show their progress: a live display on a terminal, raw lines for pipes and ``--json``.

On a terminal (:class:`TerminalDisplay`, with ``rich``, imported only then): what the run is doing
(starting etcd, waiting for the agents at the rendezvous, loading the model), one formatted line
per step (step n/N, loss, tokens/s, elapsed, ETA) under a progress bar, the leader's log dimmed,
restarts and warnings in colour. Elsewhere (:class:`PlainDisplay`): progress lines on stderr and
the trainer's per-step JSON lines on stdout (on stderr with ``--json``) and everything else (the
leader's other lines, the summary) on stderr, so piped stdout is JSON lines only. Either way the
summary is printed once, by the command, from :func:`summary_lines`.

Cluster operations (``up``, ``down``, ``scale``: minutes of eksctl or Terraform) get :func:`live_progress`: on a
terminal, the current step with a spinner and the time since the start, each step printed once, the tools' own
lines dimmed above it; elsewhere the same lines, plain, on stderr.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click

from fsdp_sdk.runs import format_duration

if TYPE_CHECKING:
    from rich.console import Console

    from fsdp_sdk.cli.application import Application
    from fsdp_sdk.runs import RunEvent

__all__ = [
    "OperationDisplay",
    "PlainDisplay",
    "TerminalDisplay",
    "TracebackFilter",
    "format_duration",
    "format_started",
    "format_step",
    "live_progress",
    "readable_times",
    "stopped_lines",
    "summary_lines",
]


def _number(value: Any, digits: int = 0) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:,.{digits}f}"


def format_started(when: Any) -> str:
    """A Unix time as a person reads it: ``2026-12-06 22:30:21 UTC``; ``-`` when unknown."""
    if not isinstance(when, (int, float)) or isinstance(when, bool):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def readable_times(data: Mapping[str, Any]) -> dict[str, Any]:
    """A run's record for a person (``job status`` of a local run): every ``*_at`` time as
    :func:`format_started` writes it, every ``*duration_s`` as ``0:37`` under its name without ``_s``
    (``--json`` keeps the raw values)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = format_started(value)
        elif key == "duration_s" and isinstance(value, (int, float)):
            out["segment_duration"] = format_duration(value)  # the latest segment's; the whole run's: run_duration
        elif key.endswith("duration_s") and isinstance(value, (int, float)):
            out[key.removesuffix("_s")] = format_duration(value)
        elif key == "tokens_per_s" and isinstance(value, (int, float)):
            out[key] = f"{value:,.0f} (the whole run, per process)"  # as 'runs' writes it
        elif key == "final_loss" and isinstance(value, (int, float)):
            out[key] = f"{value:.4f}"
        elif key == "earlier_s" and isinstance(value, (int, float)):
            out["earlier_segments"] = format_duration(value)
        elif key == "segments" and isinstance(value, list):
            out[key] = [f"{format_started(a)} for {format_duration(b - a)}" for a, b in value]
        else:
            out[key] = value
    return out


def format_step(record: Mapping[str, Any], total: int | None, elapsed: float, eta: float | None) -> str:
    """One step as a line: ``step  3/20  loss 10.2734  tokens/s 1,234  elapsed 0:04  ETA 0:23``."""
    step = record.get("step", "?")
    width = len(str(total)) if total else 1
    of = f"{step:>{width}}/{total}" if total else f"{step}"
    loss = record.get("loss")
    loss_text = f"{loss:.4f}" if isinstance(loss, (int, float)) else "-"
    return (
        f"step {of}  loss {loss_text}  tokens/s {_number(record.get('tokens_per_s_per_gpu'))}  "
        f"elapsed {format_duration(elapsed)}  ETA {format_duration(eta)}"
    )


def summary_lines(
    run_id: str,
    summary: Mapping[str, Any],
    output_dir: Any,
    wall_s: float,
    *,
    segment_s: float | None = None,
    run_tokens_per_s: float | None = None,
    local: bool = True,
) -> list[str]:
    """The summary a person reads (the full one stays in ``summary.json``), ending with what to do next.

    :param wall_s: the whole run's duration (every segment: what ``fsdp-sdk runs`` shows).
    :param segment_s: this segment's, when the run was continued (said beside the whole run's).
    :param run_tokens_per_s: the whole run's throughput (``runs`` and ``job report`` show the same); default: the
        trainer's figure of this segment.
    :param local: a local run (the next steps name its commands).
    """
    steps, run_now = summary.get("steps"), summary.get("steps_run")
    continued = isinstance(run_now, int) and run_now != steps
    segment = summary.get("tokens_per_s_per_gpu")
    tokens = run_tokens_per_s if isinstance(run_tokens_per_s, (int, float)) else segment
    took = format_duration(wall_s)
    if continued:
        took += f" (the whole run; {format_duration(segment_s)} this segment)" if segment_s is not None else ""
    loss = summary.get("final_loss")
    throughput = f"{_number(tokens)} tokens/s"
    if continued and isinstance(segment, (int, float)):
        given = isinstance(run_tokens_per_s, (int, float))
        throughput += f" over the whole run ({_number(segment)} this segment)" if given else " this segment"
    lines = [
        f"Run {run_id} finished in {took}: "
        + (f"{steps} steps" if steps is not None else "no steps reported (fsdp_sdk.report)")
        + (f" ({run_now} in this segment)" if continued and steps is not None else "")
        + ", final loss "
        + (f"{loss:.4f}" if isinstance(loss, (int, float)) else "-"),
        f"  throughput   {throughput} and {_number(summary.get('tflops_per_gpu'), 2)} TFLOP/s per process"
        + (f", MFU {summary['mfu'] * 100:.1f}%" if isinstance(summary.get("mfu"), (int, float)) else ""),
        f"  processes    {summary.get('world_size', '-')} on {summary.get('gpu_name') or summary.get('device', '-')}"
        + (
            f", peak memory {summary['peak_mem_gib']:.1f} GiB"
            if isinstance(summary.get("peak_mem_gib"), (int, float))
            else ""
        ),
        f"  outputs      {output_dir} (summary.json holds the full summary and configuration)",
        f"Next: 'fsdp-sdk job report {run_id}' (plots and figures), 'fsdp-sdk job logs {run_id}' (the leader's log)"
        + (f", or 'fsdp-sdk run --name {run_id} --steps N' to train it further" if local else ""),
    ]
    return lines


#: Words of a failure that a resume would only repeat (the supervisor's, for a run out of memory): no resume hint.
UNRESUMABLE = ("it would run out again",)


def stopped_lines(client: Any, run_id: str, exc: BaseException) -> list[str]:
    """What ``fsdp-sdk run`` prints when a started run is interrupted or fails, before the error itself (the last
    line): what is saved (local runs: the last step and checkpoint, where a resume continues) and the command that
    continues it; nothing where a resume would fail the same way (out of memory) or has nothing to continue."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    if not interrupted and any(words in str(exc) for words in UNRESUMABLE):
        return []
    saved = ""
    if client.backend.runs_jobs:
        with contextlib.suppress(Exception):  # the record unreadable: the hint alone
            saved = f": {client.runner.saved(run_id)}"
    if not interrupted and saved.startswith(": stopped before its first step") and "last checkpoint" not in saved:
        return []  # nothing done, nothing saved: nothing to continue (the error says what to fix)
    what = "interrupted" if interrupted else "failed"
    return [f"Run {run_id} {what}{saved}; continue it with: fsdp-sdk run --resume {run_id}"]


_TRACEBACK = re.compile(r"^(\[(?:rank|default)\d+\]:\s?)?Traceback \(most recent call last\):")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_RULE = re.compile(r"^={20,}$")
#: What the displays show in place of a traceback (a failure's cause is the error line; the traceback is logged).
TRACEBACK_NOTE = "(a traceback: kept in the run's logs, 'fsdp-sdk job logs --all' shows it)"


class TracebackFilter:
    """Keeps Python tracebacks and torchrun's failure summaries (``ChildFailedError`` between ``====`` rules) out of
    a run's display: the one-line cause says what failed, the logs keep the rest. :meth:`__call__` returns the
    line to show (``None``: held back; :data:`TRACEBACK_NOTE` once where a traceback began)."""

    def __init__(self) -> None:
        self.inside = False
        self.summary = False
        self.noted = False

    def __call__(self, line: str) -> str | None:
        text = _RANK_PREFIX.sub("", line)
        if self.summary:
            self.summary = not _RULE.match(text.strip())
            return None
        if _RULE.match(text.strip()):
            self.summary = True
            return None
        if _TRACEBACK.match(line):
            first = not self.noted
            self.inside = self.noted = True
            return TRACEBACK_NOTE if first else None  # said once: every rank's traceback is in the logs
        if not self.inside:
            return line
        if not text.strip() or text[:1].isspace() or text.startswith(_CHAINED):
            return None
        self.inside = False  # the exception's own line ends the traceback; it is held back too
        return None


class PlainDisplay:
    """Lines for pipes and ``--json``: progress on stderr, the leader's output as printed (tracebacks held back:
    :class:`TracebackFilter`).

    :param output_to_stderr: print the leader's lines on stderr (``--json``: stdout carries only the summary).
    """

    def __init__(self, *, output_to_stderr: bool = False) -> None:
        self.output_to_stderr = output_to_stderr
        self.tracebacks = TracebackFilter()

    def progress(self, message: str) -> None:
        """A progress line (stderr)."""
        click.echo(message, err=True)

    def event(self, event: RunEvent) -> None:
        """Show one run event: a step's JSON line on stdout (stderr with ``--json``), everything else on stderr."""
        if event.kind == "step":
            click.echo(event.message, err=self.output_to_stderr)
        elif event.kind == "output":
            if (line := self.tracebacks(event.message)) is not None:
                click.echo(line, err=True)
        elif event.kind == "restart":
            click.echo(f"restart: {event.message}", err=True)
        elif event.kind == "warning":
            click.echo(f"warning: {event.message}", err=True)
        else:
            click.echo(event.message, err=True)

    def close(self) -> None:
        """Nothing to tear down."""


class TerminalDisplay:
    """A live display on a terminal (``rich``): phases, formatted steps under a progress bar, the log dimmed."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

        self.console = Console(highlight=False, soft_wrap=True)  # long paths stay whole (copy and paste)
        self.tracebacks = TracebackFilter()
        self.started = time.monotonic()
        self.first_step: tuple[int, float] | None = None
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=30),
            TextColumn("{task.fields[detail]}"),
            console=self.console,
            transient=True,
        )
        self.task = self.bar.add_task("starting", total=None, detail="")
        self.bar.start()

    def progress(self, message: str) -> None:
        """A progress line: printed, and shown as what the run is doing."""
        self.console.print(f"[bold cyan]>[/] {message}", markup=True, highlight=False)
        self.bar.update(self.task, description=message[:60])

    def _eta(self, step: int, total: int | None) -> float | None:
        now = time.monotonic()
        if self.first_step is None:
            self.first_step = (step, now)
            return None
        first, at = self.first_step
        if total is None or step <= first or now <= at:
            return None
        return (total - step) * (now - at) / (step - first)

    def event(self, event: RunEvent) -> None:
        """Show one run event."""
        if event.kind == "step" and event.record is not None:
            step = int(event.record.get("step", 0))
            eta = self._eta(step, event.total_steps)
            elapsed = time.monotonic() - self.started
            self.console.print(format_step(event.record, event.total_steps, elapsed, eta), markup=False)
            loss = event.record.get("loss")
            self.bar.update(
                self.task,
                description=f"step {step}/{event.total_steps or '?'}",
                total=event.total_steps,
                completed=step,
                detail=(f"loss {loss:.4f}  " if isinstance(loss, (int, float)) else "") + f"ETA {format_duration(eta)}",
            )
        elif event.kind == "output":
            if (line := self.tracebacks(event.message)) is not None:
                self.console.print(line, style="dim", markup=False)
        elif event.kind == "restart":
            self.console.print(f"restart: {event.message}", style="yellow", markup=False)
        elif event.kind == "warning":
            self.console.print(f"warning: {event.message}", style="yellow", markup=False)
        else:
            self.progress(event.message)

    def close(self) -> None:
        """Remove the live bar (the printed lines stay)."""
        self.bar.stop()


#: A line of an external tool, as :mod:`fsdp_sdk.tools` passes it on: ``[eksctl 02:31] creating nodegroup "gpu"``.
_TOOL_LINE = re.compile(r"^\[[\w.-]+ \d+:\d\d(:\d\d)?\] ")


class OperationDisplay:
    """A live display of a long cluster operation on a terminal (``rich``), on stderr: the current step with a
    spinner and the time since the start; each step printed once (``> ...``), the tools' lines dimmed.

    :param what: the first step shown, e.g. ``up``.
    :param console: where to draw (default: a console on stderr).
    """

    def __init__(self, what: str, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True
        )
        self.task = self.bar.add_task(what, total=None)
        self.bar.start()

    def progress(self, message: str) -> None:
        """Show one progress line: a tool's line dimmed; any other is the step now under way."""
        if _TOOL_LINE.match(message):
            self.console.print(message, style="dim", markup=False, highlight=False)
            return
        self.console.print(f"[bold cyan]>[/] {message}", markup=True, highlight=False)
        self.bar.update(self.task, description=message[:70])

    def close(self) -> None:
        """Remove the live line (the printed lines stay)."""
        self.bar.stop()


@contextlib.contextmanager
def live_progress(app: Application, what: str, *, enabled: bool = True) -> Iterator[None]:
    """Within the block, the command's progress lines go to an :class:`OperationDisplay` when ``enabled`` and
    stderr is a terminal; otherwise they stay plain lines on stderr."""
    if not (enabled and sys.stderr.isatty()):
        yield
        return
    display = OperationDisplay(what)
    app.progress_sink = display.progress
    try:
        yield
    finally:
        display.close()
        app.progress_sink = None
