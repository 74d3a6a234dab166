"""What every rank runs for your own code (``fsdp-sdk run --script``, ``--module``, ``Client.train``).

``torchrun ... -m fsdp_sdk.code_entry --dir DIR (--script PATH | --module NAME) [--function NAME --kwargs JSON]
-- ARGS``: the script runs as ``python PATH ARGS`` would (``__main__``, ``sys.argv``, its directory first on
``sys.path``), the module as ``python -m NAME ARGS`` would (``DIR`` on ``sys.path``), a function is called with
its keyword arguments. Standard library only: no torch import of its own, no click.

Your code finds in its environment, besides torchrun's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` (``torch.distributed.init_process_group()`` reads them):

* ``FSDP_SDK_OUTPUT_DIR``: the run's output directory (``metrics.jsonl``, ``summary.json``, your files);
* ``FSDP_SDK_CHECKPOINT_DIR``: where to save checkpoints and resume from, the same on every launch of the
  run (a local directory, or an ``s3://`` URI on an EKS cluster with a checkpoint bucket: the pods have its
  access through EKS Pod Identity, ``AWS_REGION`` is set).

Rank 0 prints the trainer's ``master_addr=`` line first (what the SDK finds the leader's log by) and, when the
code returns, writes ``summary.json`` (the last reported step and loss, the throughput of the reported steps,
and a function's return value as ``result``) and prints it as the last line, as the trainer does. A script
that reports no step still runs; its summary says ``"steps": null``. An exception or a non-zero
``sys.exit`` fails the rank, and the run is restarted within ``job.max_restarts`` like the trainer's.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["RESULT_FILE", "main", "summarize"]

#: A function's return value (rank 0's), in the output directory.
RESULT_FILE = "result.json"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fsdp_sdk.code_entry", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the code's directory (on sys.path)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--script", help="a Python file to run as __main__")
    what.add_argument("--module", help="a module to run as __main__")
    parser.add_argument("--function", help="call this function of --script instead of running it as __main__")
    parser.add_argument("--kwargs", default="{}", help="the function's keyword arguments (a JSON object)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- and the code's own arguments")
    return parser


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def summarize(output_dir: Path, steps_run: int, **extra: Any) -> dict[str, Any]:
    """The run's summary from its ``metrics.jsonl`` (the trainer's summary fields that reports can fill)."""
    records = _records(output_dir / "metrics.jsonl")
    last = records[-1] if records else None
    timed = [r for r in records if isinstance(r.get("tokens"), int) and isinstance(r.get("step_time_s"), (int, float))]
    seconds = sum(r["step_time_s"] for r in timed)
    mems = [r["peak_mem_gib"] for r in records if isinstance(r.get("peak_mem_gib"), (int, float))]
    return {
        "steps": last["step"] if last else None,
        "steps_run": steps_run,
        "measured_steps": len(timed),
        "tokens_per_s_per_gpu": sum(r["tokens"] for r in timed) / seconds if seconds > 0 else None,
        "final_loss": last.get("loss") if last else None,
        "peak_mem_gib": max(mems) if mems else None,
        "world_size": int(os.environ.get("WORLD_SIZE", "1") or 1),
        **_device(),
        "python_version": sys.version.split()[0],
        **extra,
    }


def _device() -> dict[str, Any]:
    """The device the code used, as far as torch (when the code imported it) tells without starting CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if torch.cuda.is_initialized():
            return {"device": "cuda", "gpu_name": torch.cuda.get_device_name(), "torch_version": torch.__version__}
    except Exception:  # a torch build without CUDA
        pass
    return {"device": "cpu", "torch_version": torch.__version__}


class _StepLines:
    """Rank 0's stdout, passed through, its step lines (the trainer's JSON-lines format, printed by
    :func:`fsdp_sdk.report` or by the code itself) also appended to ``metrics.jsonl``."""

    def __init__(self, stream: Any, path: Path | None) -> None:
        self.stream, self.path, self.pending, self.count, self.trimmed = stream, path, "", 0, False

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self._line(line)
        return written

    def _line(self, line: str) -> None:
        from fsdp_sdk.step_report import trim

        text = line.strip()
        if not text.startswith("{"):
            return
        try:
            record = json.loads(text)
        except ValueError:
            return
        if not isinstance(record, dict) or isinstance(record.get("step"), bool) or "steps_run" in record:
            return
        if not isinstance(record.get("step"), int):
            return
        self.count += 1
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.trimmed:
            self.trimmed = True
            trim(self.path, record["step"])
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _run(args: argparse.Namespace, rest: list[str]) -> Any:
    if args.function:
        namespace = runpy.run_path(args.script, run_name="fsdp_sdk_function")
        kwargs = json.loads(args.kwargs)
        return namespace[args.function](**kwargs)
    if args.script:
        sys.argv = [args.script, *rest]
        sys.path.insert(0, str(Path(args.script).resolve().parent))
        runpy.run_path(args.script, run_name="__main__")
    else:
        sys.argv = [args.module, *rest]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the code of ``argv`` on this rank; the exit code."""
    args = _parser().parse_args(argv)
    rest = list(args.args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    rank = int(os.environ.get("RANK", "0") or 0)
    if str(Path(args.dir)) not in sys.path:
        sys.path.insert(0, str(Path(args.dir)))
    if rank == 0:
        # first: the SDK finds the leader's log by this token (as the trainer prints it)
        addr = os.environ.get("MASTER_ADDR") or socket.gethostname()
        print(
            f"master_addr={addr} host={socket.getfqdn()} code={args.function or args.script or args.module}", flush=True
        )
    output = os.environ.get("FSDP_SDK_OUTPUT_DIR")
    lines: _StepLines | None = None
    if rank == 0:
        from fsdp_sdk import step_report

        step_report.FILE_WRITTEN_BY_ENTRY = True  # the lines it prints reach metrics.jsonl through _StepLines
        lines = _StepLines(sys.stdout, Path(output) / "metrics.jsonl" if output else None)
        sys.stdout = lines
    try:
        value = _run(args, rest)
    except SystemExit as done:  # sys.exit() in the script: 0 / None is a success, as for python itself
        if done.code not in (0, None):
            raise
        value = None
    if rank != 0:
        return 0
    assert lines is not None
    sys.stdout = lines.stream
    steps_run = lines.count
    extra: dict[str, Any] = {}
    if args.function:
        try:
            json.dumps(value, allow_nan=False)
            extra["result"] = value
        except (TypeError, ValueError):
            extra["result_repr"] = repr(value)[:2000]
    if output:
        directory = Path(output)
        directory.mkdir(parents=True, exist_ok=True)
        summary = summarize(directory, steps_run, **extra)
        if args.function:
            (directory / RESULT_FILE).write_text(json.dumps({"rank": 0, **extra}) + "\n")
        tmp = directory / f"summary.json.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
        os.replace(tmp, directory / "summary.json")
    else:
        summary = {"steps": None, "steps_run": steps_run, **extra}
    sys.stdout.flush()
    print(json.dumps(summary), flush=True)  # last stdout line: the run's summary
    return 0


if __name__ == "__main__":
    sys.exit(main())
