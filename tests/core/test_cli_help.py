"""The CLI as a newcomer meets it: global options apart in help, shell completion, backends that are not installed."""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import FSDP_SDK
from .test_startup import loaded_modules


def test_global_options_have_their_own_section(invoke) -> None:
    text = invoke("run", "--help").stdout
    own, _, shared = text.partition("Global options:")
    assert "--model NAME" in own and "--steps" in own and "--backend NAME" not in own
    assert "--backend NAME" in shared and "--env-file FILE" in shared and "--set KEY=VALUE" in shared
    assert "Global options:" in invoke("job", "submit", "--help").stdout


def _option_help(text: str, flag: str) -> str:
    """The help of ``flag`` in a command's ``--help``: its line and the indented lines that continue it."""
    lines = text.partition("\nOptions:\n")[2].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {flag} "))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith(" " * 10) or line.strip().startswith("-"):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


#: Every command with --nodes; bench scale's takes a list of counts, each the same setting.
NODES_COMMANDS = [("up",), ("run",), ("estimate",), ("job", "render"), ("job", "submit"), ("bench", "scale")]


def test_every_commands_nodes_names_the_same_setting(invoke) -> None:
    for command in NODES_COMMANDS:
        text = _option_help(invoke(*command, "--help").stdout, "--nodes")
        assert "odes of the cluster the job runs on (cluster.nodes)" in text, (command, text)
        assert "one worker per node (job.num_workers)" in text, (command, text)


def test_model_and_preset_are_one_flag_documented_as_model(invoke) -> None:
    for command in (("run",), ("estimate",), ("bench", "scale")):
        text = invoke(*command, "--help").stdout
        assert "--model " in text and "--preset" not in text, command
    run = invoke("run", "--preset", "tiny", "--model", "tiny", "--dry-run", "--steps", "1")
    assert run.exit_code == 0, run.stderr  # both names given: the same setting, the last wins
    estimate = invoke("estimate", "--preset", "tiny", "--nodes", "1", "--json")
    assert estimate.exit_code == 0, estimate.stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("fsdp-sdk run --model llama2", ["llama2-13b", "llama2-70b", "llama2-7b"]),
        ("fsdp-sdk estimate --preset llama2", ["llama2-13b", "llama2-70b", "llama2-7b"]),
        ("fsdp-sdk up --instance-type p5", ["p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]),
        ("fsdp-sdk status --backend lo", ["local"]),
    ],
)
def test_shell_completion_knows_presets_instance_types_and_backends(words: str, expected: list[str]) -> None:
    env = {
        **os.environ,
        "_FSDP_SDK_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    out = subprocess.run([FSDP_SDK], env=env, capture_output=True, text=True, timeout=60).stdout
    assert [line.split(",", 1)[1] for line in out.splitlines()] == expected


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (
            "eksctl",
            "backend 'eksctl' comes with the fsdp-sdk-eksctl package, which is not installed; pip install fsdp-sdk-eksctl",
        ),
        (
            "Terraform",
            "backend 'terraform' comes with the fsdp-sdk-terraform package, which is not installed; pip install fsdp-sdk-terraform",
        ),
        ("LOCAL", "unknown backend 'LOCAL'; did you mean local? (backend names are lower-case)"),
        ("locl", "unknown backend 'locl'; did you mean local? use one of: local (fsdp-sdk plugins lists them)"),
    ],
)
def test_a_backend_that_is_not_installed_names_its_package(invoke, monkeypatch, backend: str, message: str) -> None:
    monkeypatch.setenv("FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = invoke("status", "--backend", backend)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: --backend (from command line): {message}"


def _complete(words: str) -> list[str]:
    """What the shell would offer for ``words`` (the last one being completed; a trailing space: a new word)."""
    from click.shell_completion import BashComplete

    from fsdp_sdk.cli import cli

    args = words.split()[1:]
    incomplete = "" if words.endswith(" ") else args.pop()
    completer = BashComplete(cli, {}, "fsdp-sdk", "_FSDP_SDK_COMPLETE")
    return [item.value for item in completer.get_completions(args, incomplete)]


def _local_runs(state_dir, *names: str) -> None:
    for age, name in enumerate(reversed(names)):
        run_dir = state_dir / "local" / "runs" / name
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text("{}")
        os.utime(run_dir / "run.json", (1_700_000_000 + age, 1_700_000_000 + age))
    (state_dir / "local" / "runs" / "half-created").mkdir()  # no run.json: not a run


def test_completion_of_run_names_instance_types_for_estimate_and_reports(state_dir) -> None:
    _local_runs(state_dir, "exp2", "exp1", "fsdp-20261201-1200-ab12c")  # newest first
    assert _complete("fsdp-sdk run --resume ") == ["exp2", "exp1", "fsdp-20261201-1200-ab12c"]
    assert _complete("fsdp-sdk run --resume ex") == ["exp2", "exp1"]
    assert _complete("fsdp-sdk run --name e") == ["exp2", "exp1"]
    assert _complete("fsdp-sdk job report fsdp") == ["fsdp-20261201-1200-ab12c"]
    assert _complete("fsdp-sdk estimate --instance-type p5e") == ["p5e.48xlarge", "p5en.48xlarge"]


def test_completing_a_run_name_imports_neither_plugins_nor_configuration(state_dir) -> None:
    _local_runs(state_dir, "exp1")
    env = {
        **os.environ,
        "_FSDP_SDK_COMPLETE": "bash_complete",
        "COMP_WORDS": "fsdp-sdk run --resume ",
        "COMP_CWORD": "3",
    }
    result = subprocess.run([FSDP_SDK], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines() == ["plain,exp1"]
    modules = loaded_modules(env=env)
    assert "fsdp_sdk.cli.run" in modules, "the module list was not read"
    assert not modules & {"fsdp_sdk.plugins", "fsdp_sdk.config", "fsdp_sdk.client", "fsdp_sdk.entry_points"}


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "ZDOTDIR"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_completion_install_for_bash_is_one_command_and_idempotent(invoke, home, monkeypatch) -> None:
    monkeypatch.setenv("SHELL", "/bin/bash")
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    first = invoke("completion", "install")
    assert first.exit_code == 0, first.output
    script = home / ".local" / "share" / "fsdp-sdk" / "completion.bash"
    assert f"wrote {script}" in first.stdout and "open a new shell" in first.stdout
    assert script.read_text() == invoke("completion", "show", "--shell", "bash").stdout
    assert oct(script.stat().st_mode & 0o777) == "0o644"
    rc = (home / ".bashrc").read_text()
    assert rc.startswith("alias ll='ls -l'\n") and rc.count("# fsdp-sdk shell completion") == 1
    again = invoke("completion", "install", "--shell", "bash")
    assert again.exit_code == 0 and "already installed" in again.stdout
    assert (home / ".bashrc").read_text() == rc
    # the rc file's line really registers the completion in bash
    shell = subprocess.run(
        ["bash", "-c", f"source {home / '.bashrc'} && complete -p fsdp-sdk"], capture_output=True, text=True
    )
    assert "_fsdp_sdk_completion" in shell.stdout and "fsdp-sdk" in shell.stdout, shell.stderr


def test_completion_install_for_zsh_and_fish(invoke, home, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ZDOTDIR", str(tmp_path / "zdot"))
    result = invoke("completion", "install", "--shell", "zsh")
    assert result.exit_code == 0, result.output
    line = (tmp_path / "zdot" / ".zshrc").read_text()
    assert "compinit" in line and str(home / ".local/share/fsdp-sdk/completion.zsh") in line
    assert "compdef" in (home / ".local/share/fsdp-sdk/completion.zsh").read_text()
    dotfiles = tmp_path / "dotfiles" / "zshrc"
    dotfiles.parent.mkdir()
    dotfiles.write_text("setopt autocd\n")
    (tmp_path / "zdot" / ".zshrc").unlink()
    (tmp_path / "zdot" / ".zshrc").symlink_to(dotfiles)  # a dotfiles repository's link stays a link
    assert invoke("completion", "install", "--shell", "zsh").exit_code == 0
    assert (tmp_path / "zdot" / ".zshrc").is_symlink() and dotfiles.read_text() == f"setopt autocd\n{line}"
    fish = invoke("completion", "install", "--shell", "fish")
    assert fish.exit_code == 0 and (home / ".config/fish/completions/fsdp-sdk.fish").is_file()
    assert not (home / ".config/fish/config.fish").exists()  # fish loads its completions directory itself


def test_completion_install_without_a_known_shell_is_one_line_exit_2(invoke, home, monkeypatch) -> None:
    monkeypatch.setenv("SHELL", "/usr/bin/tcsh")
    result = invoke("completion", "install")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "$SHELL (tcsh)" in result.stderr and "--shell bash|zsh|fish" in result.stderr
    assert not (home / ".bashrc").exists()
