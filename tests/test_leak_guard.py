"""The leak guard (``tests/leakguard.py``) catches what a test leaves behind and names the test; its skip summary says
what skipped tests lacked. Each case runs a small suite of its own in a pytest subprocess, under the guard."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent

CONFTEST = """
from leakguard import LeakGuard

def pytest_configure(config):
    config.pluginmanager.register(LeakGuard(config), "leak-guard")
"""


def _suite(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip


def test_a_leaked_process_fails_the_run_naming_the_test(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    done = _suite(
        tmp_path,
        f"""
        import subprocess, sys
        from pathlib import Path

        def test_clean():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_leaks_a_sleeper():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
            Path({str(pid_file)!r}).write_text(str(child.pid))
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    pid = int(pid_file.read_text())
    line = next(line for line in done.stdout.splitlines() if "left behind:" in line)
    assert line.startswith("test_inner.py::test_leaks_a_sleeper left behind: process ") and str(pid) in line, line
    assert "test_clean" not in done.stdout.split("left behind by tests")[1]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, "the guard stops it"


def test_a_leaked_port_and_file_in_a_fixture_fail_the_run(tmp_path: Path) -> None:
    done = _suite(
        tmp_path,
        """
        import socket
        import pytest

        @pytest.fixture(scope="module")
        def server():
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            yield sock  # never closed

        def test_uses_the_server(server):
            assert server.getsockname()[1]

        def test_writes_outside_its_temporary_directory():
            open("stray.txt", "w").close()
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "fixture 'server' (set up for test_inner.py::test_uses_the_server) left behind: port " in out, out
    assert "test_inner.py::test_writes_outside_its_temporary_directory left behind: file " in out, out


def test_a_child_of_a_process_started_before_the_test_is_not_the_tests(tmp_path: Path) -> None:
    """A process the session started at collection (as tests/core's background venv build) and stops at its end may
    start children while a test runs (its pip): they are its own, not that test's; a test's own child still is."""
    pid_file, suite = tmp_path / "pids", tmp_path / "suite"  # the pids outside the watched suite
    suite.mkdir()
    (suite / "conftest.py").write_text(
        CONFTEST
        + textwrap.dedent(
            """
            import os, signal, subprocess, sys

            SPAWNER = "import subprocess, sys; sys.stdin.readline(); " + (
                "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                "print(child.pid, flush=True); child.wait()"
            )

            def pytest_collection_modifyitems(config, items):
                config.background = subprocess.Popen(
                    [sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    start_new_session=True,
                )

            def pytest_sessionfinish(session):
                background = session.config.background
                os.killpg(background.pid, signal.SIGKILL)
                background.wait()
            """
        )
    )
    (suite / "test_inner.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            def test_while_the_background_starts_a_child(request):
                background = request.config.background
                background.stdin.write("go\\n")
                background.stdin.flush()
                child = background.stdout.readline().strip()
                Path({str(pid_file)!r}).write_text(f"{{background.pid}} {{child}}")
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(suite), str(suite)],
        capture_output=True, text=True, cwd=suite, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "left behind" not in done.stdout, done.stdout
    for pid in map(int, pid_file.read_text().split()):  # the session's end stopped both
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_skips_are_summed_up_by_what_they_lack(tmp_path: Path) -> None:
    done = _suite(
        tmp_path,
        """
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_needs_schemas(n):
            pytest.skip("kubeflow.org_pytorchjobs.yaml not found at ../shared/schemas/ (the shared schemas sit beside)")

        def test_needs_prometheus():
            pytest.skip("prometheus is not installed (apt-get install prometheus)")

        def test_needs_a_module():
            pytest.importorskip("no_such_module_here")
        """,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.split("skipped for lack of something")[1].splitlines()
    assert any(
        line.startswith("the shared schemas (../shared/schemas): 3 tests skipped (test_inner.py (3)); to get it: ")
        for line in summary
    ), summary
    assert any(
        line.startswith("prometheus: 1 test skipped") and "apt-get install prometheus" in line for line in summary
    )
    assert any(line.startswith("the Python package no_such_module_here: 1 test skipped") for line in summary), summary


def test_an_etcd_left_running_by_the_cli_is_caught(tmp_path: Path) -> None:
    """What tests/reliability/test_s3_checkpoints.py did: `fsdp-sdk run` left the local etcd running (no `down`)."""
    import shutil

    import pytest

    if shutil.which("etcd") is None:
        pytest.skip("etcd is not on PATH (apt-get install etcd-server)")
    fsdp_sdk = Path(sys.executable).with_name("fsdp-sdk")
    done = _suite(
        tmp_path,
        f"""
        import os, subprocess

        def test_starts_etcd_and_forgets_it(tmp_path):
            env = {{**os.environ, "FSDP_SDK_STATE_DIR": str(tmp_path / "state")}}
            subprocess.run([{str(fsdp_sdk)!r}, "up", "--backend", "local"], check=True, env=env, capture_output=True)
        """,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if "left behind:" in line)
    assert line.startswith("test_inner.py::test_starts_etcd_and_forgets_it left behind: process ") and "etcd" in line


def test_a_process_that_ran_before_the_window_is_not_counted_when_pids_wrap() -> None:
    """With ``kernel.pid_max`` at 32768 a long fixture can spend every pid: then the window's pid range holds every
    pid, and only a process's creation time tells a session fixture's etcd, running all along, from a leak."""
    import time

    from leakguard import _ours

    since = (0, time.time())  # a pid range that holds every pid: the pids wrapped during the window
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert process.pid in _ours(since)  # started in the window
        began = psutil.Process(process.pid).create_time()
        assert process.pid not in _ours((0, began + 3.0))  # a window that began after it: it ran all along
    finally:
        process.kill()
        process.wait()
