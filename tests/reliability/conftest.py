"""The reliability suite: every fault and bad input tried, and what happened, written to docs/RELIABILITY.md.

Every test under ``tests/reliability/`` is one row of the report (one per parametrization):

* **fault or input**: the first line of the test's docstring, followed by ``[<param id>]`` for a
  parametrized test (so write the docstring as the fault: "etcd SIGKILLed in the middle of a run");
* **what happened**: what the test recorded with the ``outcome`` fixture —
  ``outcome.saw("Error: run ... failed: ...")`` for the line the user got, ``outcome.note("...")`` for
  what the test checked, ``outcome.timed("detected", seconds)`` for how long detection or recovery
  took — or, when it recorded nothing, ``passed``/``failed``/``skipped: <reason>``;
* **seconds**: the test's own duration.

Add a file ``test_<area>_faults.py`` (or ``test_<area>_inputs.py``) here and its tests are rows; a
module docstring's first line names the area. Nothing else to register. This directory is a package:
import helpers with ``from .conftest import outcome, cli, Run, ...``. Shared here for local runs:
``cli()``, ``Run`` (a background ``fsdp-sdk run --json`` read line by line), ``processes_of(run_id)``,
``rank_process``, ``agent_processes``, ``wait_until`` (poll with a deadline: no fixed sleeps).

Write the report by running the suite with ``--reliability-report``::

    .venv/bin/python -m pytest tests/reliability --reliability-report docs/RELIABILITY.md

``test_report.py`` fails when the committed report does not list exactly the suite's tests with
their current descriptions (``--reliability-catalogue FILE`` writes the list of tests and
descriptions at collection, which is how it checks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The cluster backends' fault tests (test_eksctl_faults.py, test_terraform_faults.py) belong to this suite; their
# fixtures stay beside the rest of each backend's tests.
from eksctl.conftest import answers, apiserver, eksctl_env, tools  # noqa: F401
from terraform.conftest import local_config, local_configuration, plugins, terraform_env  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
#: The console script installed next to this interpreter.
FSDP_SDK = str(Path(sys.executable).with_name("fsdp-sdk"))


# ---------------------------------------------------------------------------------------------- the report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("reliability")
    group.addoption(
        "--reliability-report",
        metavar="PATH",
        help="write the reliability report (markdown) of the tests under tests/reliability that ran",
    )
    group.addoption(
        "--reliability-catalogue",
        metavar="PATH",
        help="write the collected reliability tests and their descriptions as JSON (used by test_report.py)",
    )


def _is_reliability(item: pytest.Item) -> bool:
    path = Path(str(item.fspath))
    return path.parent == Path(__file__).parent and path.name != "test_report.py"


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<=[.:;])\s", paragraph, maxsplit=1)[0]
    return sentence.rstrip(".:;").replace("``", "`")


def describe(item: pytest.Item) -> dict[str, str]:
    """The row key of a test: its id, area (the module docstring's first sentence) and fault.

    The fault is the ``report_fault`` of a parameter that has one (a bad-input case says what it gives), else the
    docstring's first line, else the test's name as a sentence; a parameter id is added to tell cases apart.
    """
    function = getattr(item, "function", None)
    name = getattr(item, "originalname", item.name).removeprefix("test_").replace("_", " ")
    doc = (getattr(function, "__doc__", None) or "").strip().splitlines()
    fault = doc[0].strip() if doc else name[:1].upper() + name[1:]
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        described = [p.report_fault for p in callspec.params.values() if hasattr(p, "report_fault")]
        fault = described[0] if described else f"{fault} [{callspec.id}]"
    module_doc = getattr(getattr(item, "module", None), "__doc__", None) or ""
    area = _first_sentence(module_doc) if module_doc.strip() else Path(str(item.fspath)).stem
    return {"id": item.nodeid.split("::", 1)[1], "file": Path(str(item.fspath)).name, "area": area, "fault": fault}


_COLLECTED = pytest.StashKey[list[dict[str, str]]]()


@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: the rows of every collected test, run or not
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    rows = [describe(item) for item in items if _is_reliability(item)]
    config.stash[_COLLECTED] = rows
    path = config.getoption("--reliability-catalogue")
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))


class Outcome:
    """What a reliability test saw happen; becomes the "what happened" cell of its row."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def saw(self, line: str) -> None:
        """The line the user got (an error, a warning), quoted in the report (paths and numbers kept)."""
        text = " ".join(line.split())
        self.parts.append(f"`{_shorten(text)}`")

    def note(self, text: str) -> None:
        """What the test checked, in words."""
        self.parts.append(text)

    def timed(self, what: str, seconds: float) -> None:
        """How long something took (detection, recovery)."""
        self.parts.append(f"{what} in {seconds:.1f} s")


def _shorten(text: str, limit: int = 300) -> str:
    """The line with what changes from run to run (temporary paths, pids, ports, generated run ids) replaced."""
    text = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/ ]+", "<tmp>", text)
    text = re.sub(r"\b(pid|port) \d+", r"\1 N", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    text = re.sub(r"\b[\w.-]+-\d{8}-\d{6}-[0-9a-f]{4}\b", "<run id>", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@pytest.fixture
def outcome(request: pytest.FixtureRequest) -> Outcome:
    """Record what happened (see :class:`Outcome`); the report shows it."""
    recorded = Outcome()
    request.node.stash[_OUTCOME] = recorded
    return recorded


_OUTCOME = pytest.StashKey[Outcome]()
_RESULTS = pytest.StashKey[dict[str, dict[str, Any]]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome_ = yield
    report = outcome_.get_result()
    if not _is_reliability(item):
        return
    results = item.config.stash.setdefault(_RESULTS, {})
    row = results.setdefault(item.nodeid, {**describe(item), "result": "passed", "seconds": 0.0, "happened": ""})
    row["seconds"] += report.duration
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        row["result"], row["happened"] = "skipped", f"skipped: {reason.removeprefix('Skipped: ')}"
    elif report.failed:
        row["result"] = "failed"
    recorded = item.stash.get(_OUTCOME, None)
    if recorded is not None and recorded.parts and row["result"] != "skipped":
        row["happened"] = "; ".join(recorded.parts)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--reliability-report")
    collected = session.config.stash.get(_COLLECTED, [])
    if not path or not collected:
        return
    results = {(r["file"], r["id"]): r for r in session.config.stash.get(_RESULTS, {}).values()}
    report = Path(path)
    existing = {(r["file"], r["id"]): r for r in parse_report(report.read_text())} if report.exists() else {}
    files = {row["file"] for row in collected}
    rows = [r for key, r in existing.items() if key[0] not in files]  # other files' rows: as they were
    for row in collected:
        key = (row["file"], row["id"])
        old = existing.get(key)
        if key in results:
            rows.append(results[key])
        elif old is not None and old["fault"] == row["fault"]:
            rows.append(old)  # collected but not run this time (-k, -m): its last result stays
        else:
            rows.append({**row, "result": "not run", "seconds": 0.0, "happened": "not run yet"})
    report.write_text(render_report(rows))


_SECTION = re.compile(r"^## (?P<area>.+) \(`(?P<file>[^`]+)`\)$")
_ROW = re.compile(
    r"^\| (?P<fault>.+?) <br>`(?P<id>[^`]+)` \| (?P<happened>.*) \| (?P<result>[a-z ]+) \| (?P<seconds>\d+) \|$"
)


def parse_report(text: str) -> list[dict[str, Any]]:
    """The rows of a report :func:`render_report` wrote."""
    rows: list[dict[str, Any]] = []
    area = file = ""
    for line in text.splitlines():
        if section := _SECTION.match(line):
            area, file = section.group("area"), section.group("file")
        elif row := _ROW.match(line):
            rows.append(
                {
                    "id": row.group("id"),
                    "file": file,
                    "area": area,
                    "fault": row.group("fault").replace("\\|", "|"),
                    "happened": row.group("happened").replace("\\|", "|"),
                    "result": row.group("result"),
                    "seconds": float(row.group("seconds")),
                }
            )
    return rows


#: "What happened" of a test that recorded nothing: its name or docstring says what it checks.
_UNRECORDED = {"passed": "as stated: every check held", "failed": "FAILED: see the test's output"}


def render_report(rows: list[dict[str, Any]]) -> str:
    """The markdown of docs/RELIABILITY.md: one section per test file, one row per test."""
    lines = [
        "# Reliability: every fault and bad input tried, and what happened",
        "",
        "Generated from the suite's own results by "
        "`.venv/bin/python -m pytest tests/reliability --reliability-report docs/RELIABILITY.md`",
        "(a run of some files rewrites only their rows); `tests/reliability/test_report.py` fails when a test of the",
        "suite is missing here or described differently. How to add rows: `tests/reliability/conftest.py`. Local",
        "faults run with real etcd and real torchrun (gloo on CPU, the tiny preset).",
        "",
    ]
    total = sum(r["seconds"] for r in rows)
    by_file: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_file.setdefault(row["file"], []).append(row)
    for file, file_rows in sorted(by_file.items()):
        lines += [
            f"## {file_rows[0]['area']} (`{file}`)",
            "",
            "| fault or input | what happened | result | s |",
            "|---|---|---|---|",
        ]
        for row in file_rows:
            happened = (row["happened"] or _UNRECORDED.get(row["result"], row["result"])).replace("|", "\\|")
            fault = row["fault"].replace("|", "\\|")
            lines.append(f"| {fault} <br>`{row['id']}` | {happened} | {row['result']} | {row['seconds']:.0f} |")
        lines.append("")
    lines.append(f"{len(rows)} tests, {total / 60:.1f} minutes of test time on the machines that wrote these rows.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- local runs


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test: its own state directory and working directory, no FSDP_SDK_* variables from outside."""
    from fsdp_sdk.plugins import reset_plugins

    for name in list(os.environ):
        if name.startswith("FSDP_SDK_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FSDP_SDK_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    reset_plugins()
    yield
    reset_plugins()


def need_etcd_and_trainer() -> None:
    """Skip, saying why, without etcd or the trainer."""
    import importlib.util

    if shutil.which("etcd") is None:
        pytest.skip("etcd is not on PATH (apt-get install etcd-server)")
    if importlib.util.find_spec("fsdp_trainer") is None:
        pytest.skip("the trainer (fsdp_trainer) is not installed")


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the ``fsdp-sdk`` console script to its end."""
    return subprocess.run([FSDP_SDK, *args], capture_output=True, text=True, timeout=timeout, env=os.environ.copy())


def last_line(text: str) -> str:
    """The last non-empty line."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class Run:
    """An ``fsdp-sdk run`` in the background, its stderr read line by line (the log goes there with ``--json``)."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [FSDP_SDK, "run", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )
        self.stderr: list[str] = []
        self.run_id: str | None = None

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match[str]:
        """Read stderr until a line matches ``pattern``; fails when the run ends or ``timeout`` passes first."""
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        import selectors

        selector = selectors.DefaultSelector()
        selector.register(self.process.stderr, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=1.0):
                continue
            line = self.process.stderr.readline()
            if not line:
                break
            self.stderr.append(line)
            if self.run_id is None and (m := re.match(r"run (\S+): \d+ agents x", line)):
                self.run_id = m.group(1)
            if match := regex.search(line):
                return match
        pytest.fail(f"no line matching {pattern!r} within {timeout:.0f} s; stderr:\n{''.join(self.stderr)[-3000:]}")

    def finish(self, timeout: float = 180) -> tuple[int, str, str]:
        """Wait for the end: (exit code, stdout, all of stderr)."""
        out, err = self.process.communicate(timeout=timeout)
        self.stderr.append(err)
        return self.process.returncode, out, "".join(self.stderr)

    def kill(self) -> None:
        """SIGKILL it when still running (test clean-up)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


def _of_this_test(cmdline: list[str], run_id: str) -> bool:
    """Whether a process's arguments are of run ``run_id`` of this test: the run id, and a path under the test's
    own temporary directory (another test, or another checkout's suite, may run a job of the same name)."""
    root = str(Path(os.environ["FSDP_SDK_STATE_DIR"]).parent)
    return any(run_id in arg for arg in cmdline) and any(root in arg for arg in cmdline)


def processes_of(run_id: str) -> list[int]:
    """Pids of live processes of run ``run_id`` (agents and ranks carry it in paths and ids)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        if _of_this_test(process.info["cmdline"] or [], run_id):
            found.append(process.pid)
    return found


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> float:
    """Poll ``condition`` until it holds; returns the seconds it took. Fails after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if condition():
            return time.monotonic() - start
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout:.0f} s")


def rank_process(run_id: str, rank: int) -> Any:
    """The trainer process of ``rank`` in run ``run_id``."""
    import psutil

    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "fsdp_sdk.backends.local.rank" in cmdline and _of_this_test(cmdline, run_id):
            try:
                if process.environ().get("RANK") == str(rank):
                    return process
            except psutil.Error:
                continue
    pytest.fail(f"no process of rank {rank} in run {run_id}")


def agent_processes(run_id: str) -> list[Any]:
    """The agents of run ``run_id``, by their index order (start order)."""
    import psutil

    agents = [
        p
        for p in psutil.process_iter(["pid", "cmdline", "create_time"])
        if "fsdp_sdk.backends.local.agent" in (p.info["cmdline"] or []) and _of_this_test(p.info["cmdline"], run_id)
    ]
    return sorted(agents, key=lambda p: (p.info["create_time"], p.pid))


def state_file() -> dict[str, Any]:
    """The local backend's state.json of this test."""
    return json.loads((Path(os.environ["FSDP_SDK_STATE_DIR"]) / "local" / "state.json").read_text())
