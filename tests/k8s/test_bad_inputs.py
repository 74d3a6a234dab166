"""Bad inputs: one-line configuration errors (exit 2), and nothing written to the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_sdk.cli import main
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.plugins import build_plugins, get_plugins

from .fake_apiserver import FakeApiServer

REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
TOKEN = "hf_TheRealTokenValue0001"


pytestmark = pytest.mark.usefixtures("isolated_cli")


CASES = {
    "unknown instance type": (["--set", "cluster.instance_type=p9.mega"], "cluster.instance_type"),
    "more GPUs than the node has": (["--set", "job.gpu_per_worker=16"], "job.gpu_per_worker"),
    "more EFA interfaces than the node has": (["--set", "job.efa_per_worker=64"], "job.efa_per_worker"),
    "no registry": (["--set", "job.registry="], "job.registry"),
    "empty image": (["--set", "job.image="], "job.image"),
    "HF_TOKEN in plain env": (["--set", f"job.env=HF_TOKEN={TOKEN}"], "job.env.HF_TOKEN"),
    "a *_API_KEY in env": (["--set", "job.env=WANDB_API_KEY=abc123"], "job.env.WANDB_API_KEY"),
    "a *PASSWORD* in env": (["--set", "job.env=DB_PASSWORD=hunter2"], "job.env.DB_PASSWORD"),
    "a *SECRET* in env": (["--set", "job.env=AWS_SECRET_ACCESS_KEY=x"], "job.env.AWS_SECRET_ACCESS_KEY"),
    "the token's value under another name": (["--set", f"job.env=HUB_AUTH={TOKEN}"], "job.env.HUB_AUTH"),
    "an invalid job name": (["--set", "job.name=Bad_Name"], "job.name"),
    "an invalid rendezvous id": (["--rdzv-id", "bad id/with slash"], "--rdzv-id"),
    "an unknown trainer setting value": (["--set", "parallel.sharding=everything"], "parallel.sharding"),
    "more processes than GPUs": (["--set", "job.nproc_per_node=16"], "job.nproc_per_node"),
    "the token in job.command": (["--set", f"job.command=python train.py --hf-token {TOKEN}"], "job.hf_token"),
    "the token in a trainer setting": (["--set", f"train.output_dir=/local/{TOKEN}"], "job.hf_token"),
}


@pytest.mark.parametrize("args, field", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_exit_2_and_sends_nothing(
    args: list[str],
    field: str,
    apiserver: FakeApiServer,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "submit", "--set", f"job.registry={REGISTRY}", "--set", f"job.hf_token={TOKEN}", *args])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("Error: ") and field in err, err
    assert TOKEN not in err and TOKEN not in out
    assert apiserver.writes() == []


def test_render_refuses_the_same_inputs_without_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "render", "--set", f"job.registry={REGISTRY}", "--set", "job.env=MY_TOKEN=abc"])
    assert exit_info.value.code == 2
    assert "job.env.MY_TOKEN" in capsys.readouterr().err


def test_a_plugin_that_copies_the_token_into_an_object_is_refused(
    apiserver: FakeApiServer,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class LeakToken:
        @hookimpl
        def fsdp_sdk_render_job(self, config: Config, objects: list[dict]) -> None:
            token = config.job.hf_token.get_secret_value()
            objects[0]["metadata"].setdefault("annotations", {})["example.com/hub-auth"] = token

    get_plugins().register(LeakToken(), name="leak-token")
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "submit", "--set", f"job.registry={REGISTRY}", "--set", f"job.hf_token={TOKEN}"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("Error: job.hf_token: "), err
    assert "in the rendered PyTorchJob fsdp" in err and "HF_TOKEN" in err
    assert TOKEN not in err and TOKEN not in out
    assert apiserver.writes() == []


def test_more_processes_than_gpus_names_the_gpu_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["job", "render", "--set", f"job.registry={REGISTRY}", "--set", "job.nproc_per_node=16"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(
        "Error: job.nproc_per_node (from --set): 16 processes per worker but p5.48xlarge "
        "has 8 GPUs; set it to 8 or less, or leave it unset"
    ), err
    with pytest.raises(SystemExit):
        main(
            [
                "job",
                "render",
                "--set",
                f"job.registry={REGISTRY}",
                "--set",
                "job.gpu_per_worker=4",
                "--set",
                "job.nproc_per_node=8",
            ]
        )
    assert "each worker gets 4 GPUs" in capsys.readouterr().err
    # the local backend runs CPU processes: the configuration itself still allows more processes than GPUs
    assert (
        resolve(Config.from_dict({"job": {"nproc_per_node": 16}}), build_plugins(autoload=False)).job.nproc_per_node
        == 16
    )
