"""The command line, in process: commands, their options, JSON output, lazy loading."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fsdp_sdk.cli import COMMANDS, LazyGroup

OWN_COMMANDS = ["up", "down", "scale", "status", "run", "plugins", "instance-types", "config"]
# command -> (returns data: --json, changes something: --dry-run, reads the configuration)
TRAITS = {
    ("up",): (True, True, True),
    ("down",): (True, True, True),
    ("scale",): (True, True, True),
    ("status",): (True, False, True),
    ("run",): (True, True, True),
    ("plugins",): (True, False, False),
    ("instance-types",): (True, False, False),
    ("config", "show"): (True, False, True),
    ("versions",): (True, False, False),
}


def test_help_lists_every_command(invoke) -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for name in OWN_COMMANDS:
        assert f"\n  {name} " in result.stdout
    assert "[env var: FSDP_SDK_CONFIG]" in result.stdout and "[env var: FSDP_SDK_ENV_FILE]" in result.stdout


def test_the_table_names_the_kubernetes_commands() -> None:
    assert {COMMANDS[n] for n in ("prereqs", "image", "job")} == {
        "fsdp_sdk.cli.prereqs:prereqs",
        "fsdp_sdk.cli.image:image",
        "fsdp_sdk.cli.job:job",
    }


@pytest.mark.parametrize("command", list(TRAITS), ids=[" ".join(c) for c in TRAITS])
def test_each_command_has_the_options_it_should(invoke, command: tuple[str, ...]) -> None:
    returns_data, changes, configured = TRAITS[command]
    result = invoke(*command, "--help")
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert ("--json" in text) == returns_data
    assert ("--dry-run" in text) == changes
    for option in ("--backend", "-c, --config", "--env-file", "--set"):
        assert (option in text) == configured, option
    assert "--debug" in text


def test_a_missing_command_module_does_not_break_help() -> None:
    @click.group(cls=LazyGroup, lazy_commands={"ghost": "fsdp_sdk.cli.ghost:ghost", "status": COMMANDS["status"]})
    def group() -> None:
        """A group with a command whose module does not exist (yet)."""

    runner = CliRunner()
    result = runner.invoke(group, ["--help"])
    assert result.exit_code == 0 and "status" in result.stdout and "ghost" not in result.stdout
    result = runner.invoke(group, ["ghost"])
    assert result.exit_code == 2
    assert "command 'ghost' is not available here (module fsdp_sdk.cli.ghost is not available)" in result.stderr


def test_status_up_dry_run_and_instance_types_print_json(invoke, state_dir: Path) -> None:
    status = json.loads(invoke("status", "--json").stdout)
    assert (status["backend"], status["state"]) == ("local", "absent")
    plan = json.loads(invoke("up", "--dry-run", "--json").stdout)
    assert plan["plan"]["backend"] == "local" and plan["status"]["state"] == "absent"
    assert not state_dir.exists()
    types = json.loads(invoke("instance-types", "--json").stdout)
    assert {"p5.48xlarge", "g6e.48xlarge"} <= {t["name"] for t in types}


def test_config_show_prints_the_resolved_configuration(invoke) -> None:
    result = invoke("config", "show", "--set", "cluster.instance_type=p4d.24xlarge", "--set", "model.preset=tiny")
    assert result.exit_code == 0, result.stderr
    assert "instance_type: p4d.24xlarge" in result.stdout and "efa_per_worker: 4" in result.stdout
    assert "preset: tiny" in result.stdout
    data = json.loads(invoke("config", "show", "--json", "--origins", "--backend", "local").stdout)
    assert data["origins"]["cluster.backend"] == "--backend (command line)"


def test_run_dry_run_shows_the_agents_commands(invoke, state_dir: Path) -> None:
    result = invoke(
        "run",
        "--nodes",
        "2",
        "--nproc-per-node",
        "1",
        "--preset",
        "tiny",
        "--steps",
        "5",
        "--dry-run",
        "--",
        "--train.lr",
        "0.01",
    )
    assert result.exit_code == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if "fsdp_sdk.backends.local.agent" in line]
    assert len(commands) == 2
    assert (
        "--model.preset tiny" in commands[0] and "--train.steps 5" in commands[0] and "--train.lr 0.01" in commands[0]
    )
    assert not state_dir.exists()


def test_local_lifecycle_through_the_cli(invoke, state_dir: Path) -> None:
    up = invoke("up", "--set", "job.rdzv_backend=c10d", "--json")  # no etcd needed: fast
    assert up.exit_code == 0, up.stderr
    assert json.loads(up.stdout)["state"] == "ready" and "c10d" in up.stderr
    scaled = json.loads(invoke("scale", "4", "--json").stdout)
    assert scaled["nodes"] == 4
    assert invoke("status").stdout.startswith("backend: local\n")
    down = invoke("down", "--json")
    assert json.loads(down.stdout)["state"] == "absent"
    assert not (state_dir / "local" / "state.json").exists()


def test_version(invoke) -> None:
    from fsdp_sdk import __version__

    assert invoke("--version").stdout == f"fsdp-sdk, version {__version__}\n"


def test_versions_lists_every_pin_and_the_kubernetes_calendar_with_their_state(invoke) -> None:
    from fsdp_sdk import pins

    report = json.loads(invoke("versions", "--json", "--on", "2026-12-02").stdout)
    assert [c["name"] for c in report["components"]] == list(pins.pins())
    for component in report["components"]:
        assert component["checked"] and component["source"], component["name"]
        expected = "current" if component["latest"] == component["version"] else "newer available"
        assert component["state"] == expected, component["name"]
    assert {"kubeflow-trainer", "jobset", "efa-installer", "aws-ofi-nccl", "nccl", "cuda-base", "torchao"} <= {
        c["name"] for c in report["components"]
    }
    states = {k["version"]: (k["state"], k["support"], k["control_plane_usd_per_hour"]) for k in report["kubernetes"]}
    assert states["1.31"] == ("past end of life", "ended", None)
    assert states["1.33"] == ("in extended support", "extended", 0.6)
    assert states["1.34"] == states["1.35"] == ("newer available", "standard", 0.1)
    assert states["1.36"] == ("current", "standard", 0.1)
    assert report["default_kubernetes_version"] == "1.36"
    later = {
        k["version"]: k for k in json.loads(invoke("versions", "--json", "--on", "2026-12-03").stdout)["kubernetes"]
    }
    assert later["1.34"]["state"] == "in extended support" and later["1.34"]["control_plane_usd_per_hour"] == 0.6
    assert later["1.34"]["support"] == "extended" and later["1.34"]["until"] == "2027-12-02"
    text = invoke("versions", "--on", "2026-12-02").stdout
    assert "grafana" in text and "newer available: 13.2" in text
    assert "1.36        current: standard support until 2027-08-02" in text
    bad = invoke("versions", "--on", "soon")
    assert bad.exit_code == 2 and "--on: 'soon' is not a date" in bad.stderr


@pytest.mark.parametrize(
    ("args", "corrected"),
    [
        (
            ["run", "--parallel.api", "fsdp1"],
            "fsdp-sdk run -- --parallel.api fsdp1",
        ),
        (
            ["run", "--nodes", "2", "--train.lr=1e-3", "--preset", "tiny", "--auto", "--", "--train.steps", "3"],
            "fsdp-sdk run --nodes 2 --preset tiny -- --train.lr=1e-3 --auto --train.steps 3",
        ),
        (
            ["bench", "scale", "--nodes", "1,2", "--out", "r", "--model.preset", "tiny"],
            "fsdp-sdk bench scale --nodes 1,2 --out r -- --model.preset tiny",
        ),
        (
            ["estimate", "--model", "llama2-7b", "--parallel.sharding", "hybrid_shard"],
            "fsdp-sdk estimate --model llama2-7b -- --parallel.sharding hybrid_shard",
        ),
    ],
)
def test_a_trainer_option_before_the_separator_gets_the_corrected_command(invoke, args, corrected) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    option = next(a for a in args if "." in a and a.startswith("--")).split("=")[0]
    assert result.stderr == (
        f"Error: {option} is a trainer option: trainer options go after '--', as in: {corrected}\n"
    )


def test_a_trainer_option_on_a_command_without_trainer_arguments_is_a_set(invoke) -> None:
    result = invoke("up", "--dry-run", "--parallel.api", "fsdp1", "--model.preset=tiny")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --parallel.api is a trainer option: 'fsdp-sdk up' takes it as --set section.field=VALUE: "
        "fsdp-sdk up --dry-run --set parallel.api=fsdp1 --set model.preset=tiny\n"
    )
    other = invoke("run", "--bogus")  # not a trainer option: click's own message
    assert other.exit_code == 2 and "No such option '--bogus'" in other.stderr and "trainer" not in other.stderr


def test_job_render_and_submit_take_trainer_options_after_the_separator(invoke) -> None:
    """As ``run`` does: what ``job render -- --train.steps 7`` prints is what ``job submit`` with them applies."""
    result = invoke("job", "render", "--", "--train.steps", "7", "--model.preset", "tiny")
    assert result.exit_code == 0, result.stderr
    assert '- "--train.steps"\n' in result.stdout and '- "7"\n' in result.stdout
    misplaced = invoke("job", "submit", "--wait", "--train.steps", "7")
    assert misplaced.exit_code == 2 and misplaced.stderr == (
        "Error: --train.steps is a trainer option: trainer options go after '--', as in: "
        "fsdp-sdk job submit --wait -- --train.steps 7\n"
    )
    bad = invoke("job", "render", "--", "--train.steps", "many")
    assert bad.exit_code == 2 and "--train.steps (from trainer arguments): 'many' is not an integer" in bad.stderr
    assert "[-- TRAINER OPTIONS]" in invoke("job", "submit", "--help").stdout
