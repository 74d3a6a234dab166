"""A pytest plugin that fails the run when a test leaves something behind, and says what was skipped for lack of what.

Registered for the whole suite by ``tests/conftest.py``. After each test (its fixtures torn down):

* **processes**: every process started during the test that still runs. A process is the suite's when its
  environment carries :data:`MARK` (set in this process at start-up, so every child inherits it, even one that
  daemonizes as etcd does); processes of other users of the machine never carry it. A process started by a
  module- or session-scoped fixture belongs to that fixture and must be gone once the fixture is finalized; a
  process started by one of the session's that was already running (tests/core's background venv build, its
  pip) belongs to that one.
  Leaked processes are killed after being reported, so they do not outlive the run;
* **ports**: TCP ports this pytest process listens on that it did not listen on before (a server thread not shut
  down), with the same fixture ownership;
* **files**: entries that appeared in the checkout or pytest's root directory (outside ``.git``, virtual
  environments and caches): a test writes in its temporary directories only. (The default state directory,
  ``~/.local/state/fsdp-sdk``, is not watched: on a shared machine other users' runs write there; every test that
  runs fsdp-sdk sets ``FSDP_SDK_STATE_DIR`` under its temporary directory.)

Each leak names the test; the run's exit status is 1 when anything leaked. At the end, one summary says which
tests were skipped for lack of what (the shared schemas, a binary, a Python package) and how to get it.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: The variable every process of this test session inherits (its value: the session's id).
MARK = "PYTEST_LEAKGUARD_SESSION"  # not FSDP_SDK_*: tests clear those from the environments they build
#: Seconds a process (or port) started during a test may take to go away after its teardown.
GRACE_S = 5.0
ROOT = Path(__file__).resolve().parents[1]
#: Directories of the checkout that are not watched (created by tools, not by tests).
IGNORED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
                ".hypothesis", "build", "dist", ".tox", ".eggs"}  # fmt: skip
IGNORED_SUFFIXES = (".pyc", ".egg-info", ".coverage")


@dataclass
class _Watched:
    """The processes and ports that appeared while a higher-scoped fixture was set up: its own until finalized."""

    fixture: str
    nodeid: str
    pids: set[int] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)


def _last_pid() -> int:
    """The pid the kernel gave last (``/proc/loadavg``): processes started later get the pids after it."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[4])


def _window() -> tuple[int, float]:
    """Where a window of watching starts: the pid the kernel gave last and the time."""
    import time

    return _last_pid(), time.time()


def _ours(since: tuple[int, float]) -> dict[int, Any]:
    """Live processes of this session (they carry :data:`MARK`) started since ``since`` (a :func:`_window`).

    A process is new when its pid comes after the window's first pid and it was not created before the window began:
    pids wrap around (``kernel.pid_max`` is 32768 here, and a long fixture can spend them all), so the pid range alone
    would count a process that ran all along, such as a session fixture's etcd."""
    import psutil

    after_pid, since_time = since
    last = _last_pid()
    listed = {int(name) for name in os.listdir("/proc") if name.isdigit()}
    if after_pid <= last:
        in_range = {p for p in listed if after_pid < p <= last}
    else:  # the pids wrapped around
        in_range = {p for p in listed if p > after_pid or p <= last}
    candidates = set()
    for pid in in_range:
        try:  # psutil's creation time counts from the boot time in whole seconds: a margin of two
            if psutil.Process(pid).create_time() >= since_time - 2.0:
                candidates.add(pid)
        except psutil.Error:
            continue
    found: dict[int, Any] = {}
    mark = os.environ.get(MARK)
    if not mark:
        return found
    for pid in sorted(candidates - {os.getpid()}):
        try:
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(MARK) == mark:
                if _interpreter_helper(process) or _inherited(process, candidates, mark):
                    continue
                found[pid] = process
        except psutil.Error:
            continue
    return found


def _inherited(process: Any, window: set[int], mark: str) -> bool:
    """Whether ``process`` descends from a process of this session that was already running before the window (below
    pytest itself): a child that process started later (the pip of tests/core's background venv build, started at
    collection and stopped at the session's end), which is that process's to stop, not the test's that ran meanwhile."""
    import psutil

    try:
        for parent in process.parents():
            if parent.pid == os.getpid():
                return False
            if parent.pid not in window and parent.environ().get(MARK) == mark:
                return True
    except psutil.Error:
        return False
    return False


def _interpreter_helper(process: Any) -> bool:
    """Python's multiprocessing resource tracker: started by a ``spawn`` pool (torch.multiprocessing in the trainer's
    tests) as a child of the interpreter that spawned, it lives by design until that interpreter exits and then ends
    by itself; it is the interpreter's, not the test's."""
    import psutil

    try:
        return "multiprocessing.resource_tracker" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _listening() -> set[int]:
    import psutil

    try:
        connections = psutil.Process().net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def _describe(process: Any) -> str:
    import psutil

    try:
        command = " ".join(process.cmdline())[:160]
    except psutil.Error:
        command = "?"
    return f"process {process.pid} ({command})"


class _Tree:
    """Directory listings of the watched places, refreshed only where a directory's mtime changed."""

    def __init__(self, roots: list[Path]) -> None:
        self.listings: dict[Path, tuple[int, set[str]]] = {}
        for root in roots:
            if root.is_dir():
                self._scan(root)

    def _scan(self, directory: Path) -> None:
        try:
            stat = directory.stat()
            entries = set(os.listdir(directory))
        except OSError:
            return
        self.listings[directory] = (stat.st_mtime_ns, entries)
        for name in entries:
            child = directory / name
            if name not in IGNORED_DIRS and child.is_dir() and not child.is_symlink():
                self._scan(child)

    def new_entries(self) -> list[Path]:
        """Entries that appeared since the last call (the listings are updated)."""
        new: list[Path] = []
        for directory, (mtime, entries) in list(self.listings.items()):
            try:
                now = directory.stat().st_mtime_ns
            except OSError:
                del self.listings[directory]
                continue
            if now == mtime:
                continue
            try:
                current = set(os.listdir(directory))
            except OSError:
                continue
            self.listings[directory] = (now, current)
            for name in sorted(current - entries):
                if name in IGNORED_DIRS or name.endswith(IGNORED_SUFFIXES):
                    continue
                path = directory / name
                new.append(path)
                if path.is_dir() and not path.is_symlink():
                    self._scan(path)
        return new


class LeakGuard:
    """The plugin (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        os.environ.setdefault(MARK, uuid.uuid4().hex)
        self.tree = _Tree(sorted({ROOT, Path(config.rootpath)}))
        self.current = "collection"
        self.leaks: list[str] = []
        self.owned: dict[int, _Watched] = {}  # id(fixturedef) -> what its setup started
        self.started = _window()
        self.ports_before: set[int] = set()
        self.skips: list[tuple[str, str]] = []

    # ------------------------------------------------------------------ fixtures of a wider scope

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: pytest.FixtureRequest) -> Any:
        if fixturedef.scope == "function":
            yield
            return
        since, ports = _window(), _listening()
        yield
        watched = _Watched(fixturedef.argname, self.current)
        watched.pids = set(_ours(since))
        watched.ports = _listening() - ports
        if watched.pids or watched.ports:
            self.owned[id(fixturedef)] = watched

    def pytest_fixture_post_finalizer(self, fixturedef: Any, request: pytest.FixtureRequest) -> None:
        watched = self.owned.pop(id(fixturedef), None)
        if watched is None:
            return
        import psutil

        alive = [p for p in (self._process(pid) for pid in watched.pids) if p is not None]
        _, alive = psutil.wait_procs(alive, timeout=GRACE_S)
        what = [_describe(p) for p in alive]
        what += [f"port {port}" for port in sorted(watched.ports & _listening())]
        if what:
            self._leaked(f"fixture {watched.fixture!r} (set up for {watched.nodeid})", what, alive)

    @staticmethod
    def _process(pid: int) -> Any:
        import psutil

        try:
            process = psutil.Process(pid)
            return None if process.status() == psutil.STATUS_ZOMBIE else process
        except psutil.Error:
            return None

    # ------------------------------------------------------------------ each test

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Any:
        self.started, self.current = _window(), item.nodeid
        self.ports_before = _listening()
        self.tree.new_entries()  # what appeared between tests (collection, session fixtures) is not this test's
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        yield  # the test's fixtures are finalized
        import psutil

        owned_pids = {pid for w in self.owned.values() for pid in w.pids}
        owned_ports = {port for w in self.owned.values() for port in w.ports}
        left = [p for pid, p in _ours(self.started).items() if pid not in owned_pids]
        if left:
            _, left = psutil.wait_procs(left, timeout=GRACE_S)
        what = [_describe(p) for p in left]
        ports = _listening() - self.ports_before - owned_ports
        what += [f"port {port} (listened on by the pytest process)" for port in sorted(ports)]
        what += [f"file {path}" for path in self.tree.new_entries()]
        if what:
            self._leaked(item.nodeid, what, left)

    def _leaked(self, who: str, what: list[str], processes: list[Any]) -> None:
        import psutil

        self.leaks.append(f"{who} left behind: " + "; ".join(what))
        for process in processes:  # reported: now stopped, so the leak does not outlive the run
            with contextlib.suppress(psutil.Error):
                process.kill()

    # ------------------------------------------------------------------ skips

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.skips.append((report.nodeid, reason.removeprefix("Skipped: ")))

    # ------------------------------------------------------------------ the end

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.leaks and session.exitstatus == 0:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.skips:
            terminalreporter.section("skipped for lack of something", sep="-")
            for line in skip_summary(self.skips):
                terminalreporter.write_line(line)
        if self.leaks:
            terminalreporter.section("left behind by tests (the run fails)", sep="-", red=True)
            for line in self.leaks:
                terminalreporter.write_line(line)


#: (pattern of a skip reason, what is missing, how to get it).
_MISSING = (
    (re.compile(r"not found at \.\./shared/schemas"), "the shared schemas (../shared/schemas)",
     "check out the shared folder beside the project root (../shared, as /work/wt/shared); CI's clean clone has it"),
    (re.compile(r"\b(prometheus|promtool)\b.*not (installed|on PATH)", re.I), "prometheus",
     "apt-get install prometheus (scripts/setup.sh --test installs it)"),
    (re.compile(r"\bchromium\b.*not installed", re.I), "chromium",
     "apt-get install chromium (scripts/setup.sh --test installs it)"),
    (re.compile(r"\betcd\b.*not on PATH", re.I), "etcd", "apt-get install etcd-server (scripts/setup.sh installs it)"),
    (re.compile(r"\bterraform\b.*not (installed|on PATH|found)", re.I), "terraform", "scripts/setup.sh installs it"),
    (re.compile(r"could not import '([\w.]+)'|No module named '?([\w.]+)'?|trainer \(fsdp_trainer\) is not installed"),
     "a Python package", "scripts/setup.sh --test installs every package the tests use into .venv"),
)  # fmt: skip


def skip_summary(skips: list[tuple[str, str]]) -> list[str]:
    """One line per missing thing: how many tests it skipped (in which files) and how to get it; then the rest."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for nodeid, reason in skips:
        for pattern, what, how in _MISSING:
            if match := pattern.search(reason):
                if what == "a Python package":
                    name = next((g for g in match.groups() if g), "fsdp_trainer")
                    what = f"the Python package {name}"
                groups[(what, how)].append(nodeid)
                break
        else:
            groups[(reason, "")].append(nodeid)
    lines = []
    for (what, how), nodeids in sorted(groups.items(), key=lambda g: -len(g[1])):
        files = Counter(nodeid.split("::")[0] for nodeid in nodeids)
        where = ", ".join(f"{f} ({n})" for f, n in files.most_common(4)) + (", ..." if len(files) > 4 else "")
        tests = f"{len(nodeids)} test{'s' if len(nodeids) > 1 else ''}"
        lines.append(f"{what}: {tests} skipped ({where})" + (f"; to get it: {how}" if how else ""))
    return lines
