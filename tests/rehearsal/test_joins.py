"""Rehearsal cases for the other joins of issue 39, fixed on the branch ``joins`` (another helper's): each is
expected to fail here until that branch is merged, and then to pass (``strict``: an unexpected pass fails, so the
marker is removed with the merge)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eksctl.helpers import Tools, configure
from k8s.tools import cli

pytestmark = pytest.mark.usefixtures("eksctl_env")


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fsdp_sdk.aws.session import reset_sessions

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reset_sessions()


def test_the_efa_plugin_image_is_a_tag_eks_publishes() -> None:
    """EKS's chart (aws/eks-charts) ships ``v0.5.21-eksbuild.N`` builds; the bare ``v0.5.21`` is not in the
    registry: ImagePullBackOff on every GPU node."""
    from fsdp_sdk_eksctl.device_plugins import device_plugin_objects

    config, instance = configure()
    (efa,) = [
        o for o in device_plugin_objects(config, instance) if o["metadata"]["name"] == "aws-efa-k8s-device-plugin"
    ]
    image = efa["spec"]["template"]["spec"]["containers"][0]["image"]
    assert re.search(r":v\d+\.\d+\.\d+-eksbuild\.\d+$", image), image


def test_launch_dry_run_shows_its_plan_without_credentials(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_credentials(monkeypatch, tmp_path)
    code, out, err = cli(capsys, "launch", "--backend", "eksctl", "--preset", "tiny", "--dry-run", "--json")
    plan = json.loads(out)  # --json always prints the plan
    assert plan["steps"] and code in (0, 1), err


def test_status_without_credentials_is_the_same_on_both_backends(
    tools: Tools, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_credentials(monkeypatch, tmp_path)
    from fsdp_sdk.plugins import get_plugins
    from fsdp_sdk_terraform import plugin as terraform

    get_plugins().register(terraform, name="terraform")
    eksctl = cli(capsys, "status", "--backend", "eksctl")
    terraform_status = cli(capsys, "status", "--backend", "terraform")
    assert eksctl[0] == terraform_status[0] == 0, (eksctl, terraform_status)
    assert "absent" in eksctl[1] and "absent" in terraform_status[1]
