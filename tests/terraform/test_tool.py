"""The exact terraform command lines (built by python-terraform, never a shell string), and how terraform's
output becomes one line: diagnostics, lock holders, a dry run whose ``terraform plan`` cannot run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fsdp_sdk.plugins import Plugins
from fsdp_sdk_terraform.backend import TerraformBackend
from fsdp_sdk_terraform.tool import error_lines, lock_info, parse_version

from .conftest import make_config, resolve

# A terraform that records its argument lists and answers like the real one where the SDK reads its output.
_FAKE = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(json.dumps({{"cwd": os.getcwd(), "argv": args}}) + "\\n")
if args[0] == "version":
    print("Terraform v1.11.4")
    print("on linux_amd64")
elif args[0] == "show":
    print(json.dumps({{"resource_changes": [{{"address": "terraform_data.x", "change": {{"actions": ["create"]}}}}]}}))
elif args[0] == "output":
    print(json.dumps({{"cluster_name": {{"value": "fsdp-sdk"}}}}))
    print("Warning: on stderr, never in the JSON", file=sys.stderr)
elif args[0] == "plan" and os.environ.get("FAKE_PLAN_FAILS"):
    print("Error: Failed to query available provider packages", file=sys.stderr)
    print("", file=sys.stderr)
    print("Could not retrieve the list of available versions for provider", file=sys.stderr)
    print("hashicorp/aws: could not connect to registry.terraform.io", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def fake_terraform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "terraform.jsonl"
    binary = tmp_path / "bin" / "terraform"
    binary.parent.mkdir()
    binary.write_text(_FAKE.format(python=sys.executable, log=str(log)))
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("TF_PLUGIN_CACHE_DIR", raising=False)
    return log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line)["argv"] for line in log.read_text().splitlines()]


def test_up_runs_exactly_these_commands(fake_terraform: Path, plugins: Plugins, tmp_path: Path, monkeypatch) -> None:
    config = make_config(plugins, tmp_path / "state", **{"terraform.lock_timeout_s": 90, "terraform.parallelism": 4})
    backend = TerraformBackend()
    monkeypatch.setattr(TerraformBackend, "_write_kubeconfig", lambda self, config, outputs, progress: None)
    monkeypatch.setattr(TerraformBackend, "status", lambda self, config: None)
    lines: list[str] = []
    backend.apply(config, backend.plan(resolve(config)), progress=lines.append)
    assert _calls(fake_terraform) == [
        ["version"],
        ["init", "-input=false", "-no-color", "-lock-timeout=90s"],
        ["plan", "-input=false", "-no-color", "-out=up.tfplan", "-parallelism=4", "-lock-timeout=90s"],
        ["show", "-json", "-no-color", "up.tfplan"],
        ["apply", "-input=false", "-no-color", "-parallelism=4", "-lock-timeout=90s", "up.tfplan"],
        ["output", "-json", "-no-color"],
    ]
    workdir = tmp_path / "state" / "terraform" / "fsdp-sdk"
    assert {json.loads(line)["cwd"] for line in fake_terraform.read_text().splitlines()[1:]} == {str(workdir)}
    assert "terraform plan: 1 to add, 0 to change, 0 to destroy" in lines and "  + terraform_data.x" in lines
    cache = tmp_path / "state" / "terraform" / "plugin-cache"
    assert cache.is_dir(), "providers are cached once for every cluster"


def test_a_dry_run_whose_terraform_plan_cannot_run_still_shows_the_sdks_plan(
    fake_terraform: Path, plugins: Plugins, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_PLAN_FAILS", "1")
    config = make_config(plugins, tmp_path / "state")
    backend = TerraformBackend()
    plan = backend.plan(resolve(config))
    lines: list[str] = []
    previewed = backend.preview(config, plan, progress=lines.append)
    assert previewed.steps == plan.steps and previewed.details["changes"] is None
    assert previewed.details["changes_error"] == (
        "terraform exited with status 1 while it tried to plan the changes (read-only, for --dry-run): "
        "Error: Failed to query available provider packages: Could not retrieve the list of available versions "
        "for provider hashicorp/aws: could not connect to registry.terraform.io"
    )
    assert lines[-1].startswith("terraform plan did not run, the plan shows fsdp-sdk's steps only: ")
    assert [c[0] for c in _calls(fake_terraform)] == ["version", "init", "plan"]
    assert ["plan", "-input=false", "-no-color", "-out=preview.tfplan", "-parallelism=10", "-lock=false"] in _calls(
        fake_terraform
    )
    assert not (tmp_path / "state" / "terraform" / "fsdp-sdk").exists(), "the dry run planned in a scratch copy"


def test_error_lines_keep_the_diagnostics_and_drop_the_source_snippets() -> None:
    output = """
Planning failed. Terraform encountered an error while generating this plan.

Error: Invalid value for variable

  on terraform.tfvars.json line 1:
   1: {"n": 9}
    ├────────────────
    │ var.n is 9

n must be between 0 and
5.

This was checked by the validation rule at main.tf:6,3-13.

Error: local-exec provisioner error

  with terraform_data.node[2],
  on main.tf line 14, in resource "terraform_data" "node":
  14:   provisioner "local-exec" {

Error running command 'sleep 20': exit status 1. Output:
""".splitlines()
    assert error_lines(output) == [
        "Error: Invalid value for variable: n must be between 0 and 5.",
        "Error: local-exec provisioner error: Error running command 'sleep 20': exit status 1. Output:",
    ]


def test_lock_info_reads_the_holder() -> None:
    output = """Acquiring state lock. This may take a few moments...

Error: Error acquiring the state lock

Error message: ConditionalCheckFailedException: The conditional request failed
Lock Info:
  ID:        8f7a1d4e-2b8c-4c1e-9f0a-1234567890ab
  Path:      team-tf-state/fsdp-sdk/fsdp-sdk/terraform.tfstate
  Operation: OperationTypeApply
  Who:       alice@build-7
  Version:   1.11.4
  Created:   2026-12-01 15:31:26.980574192 +0000 UTC
  Info:
""".splitlines()
    holder = lock_info(output)
    assert holder is not None
    assert (holder.id, holder.who, holder.operation) == (
        "8f7a1d4e-2b8c-4c1e-9f0a-1234567890ab",
        "alice@build-7",
        "OperationTypeApply",
    )
    assert lock_info(["Error: something else"]) is None


def test_versions() -> None:
    assert parse_version("1.11.4") == (1, 11, 4) and parse_version("1.10.0-rc1") == (1, 10, 0)
    with pytest.raises(ValueError):
        parse_version("v")
