"""Small ones of the command line: completion of local run names for every job command, did-you-mean for
presets, backends, commands and YAML keys, a YAML typo said in YAML terms, what the estimate's cost to train is for."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_cli_help import _complete, _local_runs

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("command", ["status", "logs", "stop", "wait"])
def test_job_commands_complete_local_run_names(state_dir: Path, command: str) -> None:
    _local_runs(state_dir, "exp2", "exp1", "other")
    assert _complete(f"fsdp-sdk job {command} ex") == ["exp2", "exp1"]


def test_the_readme_has_one_completion_paragraph() -> None:
    paragraphs = [p for p in README.read_text().split("\n\n") if "completion" in p.lower() and "Shell" in p]
    assert len(paragraphs) == 1, paragraphs
    assert "fsdp-sdk completion install" in paragraphs[0] and "job status|logs|stop|wait" in paragraphs[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--preset", "tiy", "--dry-run"], "'tiy' is not one of tiny, tiny-gqa,"),
        (["run", "--preset", "tiy", "--dry-run"], "; did you mean tiny?"),
        (["estimate", "--model", "llama2-7"], "did you mean llama2-7b?"),
        (["rnu"], "No such command 'rnu'. Did you mean 'run'?"),
        (["status", "--backend", "locl"], "did you mean local?"),
        (
            ["run", "--dry-run", "--", "--parallel.api", "fsdp3"],
            "'fsdp3' is not one of fsdp2, fsdp1, none; did you mean fsdp2?",
        ),
    ],
)
def test_did_you_mean(invoke, state_dir: Path, args: list[str], expected: str) -> None:
    pytest.importorskip("fsdp_trainer")
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cluster:\n  nodes: 2\njob:\n  num_worker: 2\n",
            "Error: job.num_worker (from c.yaml, line 4): unknown setting; did you mean job.num_workers?",
        ),
        (
            "trainer:\n  model:\n    presett: tiny\n",
            "Error: trainer.model.presett (from c.yaml, line 3): unknown key; did you mean trainer.model.preset?",
        ),
        (
            "trainer:\n  train:\n    steps: 3\n  modle:\n    preset: tiny\n",
            "Error: trainer.modle.preset (from c.yaml, line 5): unknown key; did you mean trainer.model.preset?",
        ),
    ],
    ids=["sdk-key", "trainer-key", "trainer-section"],
)
def test_a_yaml_typo_is_answered_in_yaml_terms(
    invoke, work_dir: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    """The key path as the file has it, its line, and the key it was meant to be: no trainer flag (--model.preset)."""
    pytest.importorskip("fsdp_trainer")
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "c.yaml").write_text(text)
    monkeypatch.chdir(work_dir)
    result = invoke("run", "--backend", "local", "--dry-run", "-c", "c.yaml")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == expected
    assert "--" not in result.stderr.split(":", 1)[1], "no flag in a YAML file's error"


def test_the_estimates_cost_to_train_says_of_what(invoke) -> None:
    args = ["estimate", "--model", "llama2-70b", "--instance-type", "p5.48xlarge", "--nodes", "16", "--tokens", "300B"]
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("cost: ")]
    assert line.endswith(" to train llama2-70b on 300B tokens (--tokens)"), line
