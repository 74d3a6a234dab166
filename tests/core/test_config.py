"""Configuration: the design table, precedence of the sources, seed .env names, secrets, derived values."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from fsdp_sdk.config import DOTENV_NAMES, Config, Secret, Setting, load_config
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.pins import kubernetes_release, kubernetes_releases, table_date
from fsdp_sdk.plugins import build_plugins

from .conftest import ROOT

DESIGN = ROOT / "docs" / "design.md"


def _design_rows() -> list[tuple[str, str]]:
    """(field path, seed .env name) of every row of the configuration table in docs/design.md."""
    rows = []
    for line in DESIGN.read_text().splitlines():
        match = re.match(
            r"^\| ((?:cluster|job|trainer|observability)\.[\w.]+)(?: / (\w+))? \| [^|]* \| ([A-Z_]*) ?\|$", line
        )
        if match:
            path, second, seed = match.groups()
            rows.append((path, seed))
            if second:
                rows.append((f"{path.split('.')[0]}.{second}", ""))
    return rows


def test_every_field_of_the_design_table_exists_with_its_seed_name() -> None:
    rows = _design_rows()
    assert len(rows) >= 30, "the table in docs/design.md was not found"
    data = Config().to_dict()
    for path, seed in rows:
        section, name = path.split(".", 1)
        if section != "trainer":
            assert name in data[section], path
        if seed:
            assert DOTENV_NAMES[seed] == path


def test_defaults_are_those_of_the_design() -> None:
    c = Config()
    assert (c.cluster.name, c.cluster.backend, c.cluster.region, c.cluster.instance_type) == (
        "fsdp-sdk",
        "local",
        "us-west-2",
        "p5.48xlarge",
    )
    assert (c.cluster.nodes, c.cluster.min_nodes, c.cluster.max_nodes, c.cluster.kubernetes_version, c.cluster.efa) == (
        2,
        0,
        None,
        "1.36",  # the newest version in EKS standard support on the pins table's date
        True,
    )
    release = kubernetes_release(c.cluster.kubernetes_version)
    assert release is not None and release.state(table_date()) == "standard"
    newer = [r for r in kubernetes_releases() if r.released > release.released]
    assert all(r.state(table_date()) != "standard" or r.released > table_date().isoformat() for r in newer)
    j = c.job
    assert (j.name, j.namespace, j.api, j.registry, j.image, j.tag, j.num_workers) == (
        "fsdp",
        "default",
        "pytorchjob",
        None,
        "fsdp-sdk-trainer",
        "latest",
        2,
    )
    assert (
        j.rdzv_backend,
        j.rdzv_host,
        j.rdzv_port,
        j.max_restarts,
        j.fi_provider,
        j.nccl_debug,
        j.hf_token_secret,
    ) == ("etcd-v2", "etcd", 2379, 3, "efa", "WARN", "hf-token")
    assert c.image_ref == "fsdp-sdk-trainer:latest"


def test_state_dir_defaults_to_the_environment_variable(state_dir: Path) -> None:
    assert load_config().cluster.state_dir == state_dir


# ---------------------------------------------------------------------- precedence


@pytest.fixture
def sources(work_dir: Path) -> dict[str, Path]:
    yaml_file = work_dir / "cluster.yaml"
    yaml_file.write_text(
        "cluster:\n  region: eu-west-1\njob:\n  num_workers: 3\n  tag: from-yaml\n  image: from-yaml\n"
    )
    env_file = work_dir / "team.env"
    env_file.write_text("NUM_WORKERS=4\nTAG=from-dotenv\n")
    return {"yaml": yaml_file, "env": env_file}


def test_each_source_overrides_the_one_before(sources: dict[str, Path]) -> None:
    environ = {"FSDP_SDK_JOB__NUM_WORKERS": "5", "FSDP_SDK_JOB__IMAGE": "from-environment"}
    cli = [Setting("job.num_workers", "6", "--nodes", "command line")]

    assert load_config().job.num_workers == 2
    c = load_config(sources["yaml"], environ={})
    assert (c.job.num_workers, c.job.tag, c.cluster.region) == (3, "from-yaml", "eu-west-1")
    c = load_config(sources["yaml"], sources["env"], environ={})
    assert (c.job.num_workers, c.job.tag, c.job.image) == (4, "from-dotenv", "from-yaml")
    c = load_config(sources["yaml"], sources["env"], environ=environ)
    assert (c.job.num_workers, c.job.tag, c.job.image) == (5, "from-dotenv", "from-environment")
    c = load_config(sources["yaml"], sources["env"], cli, environ=environ)
    assert (c.job.num_workers, c.cluster.region) == (6, "eu-west-1")
    assert c.origins["job.num_workers"].name == "--nodes"
    assert c.origins["job.tag"].source == "team.env" and c.origins["cluster.region"].source == "cluster.yaml"


def test_precedence_through_the_cli(sources: dict[str, Path], invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_SDK_JOB__IMAGE", "from-environment")  # undone after the test, unlike os.environ[...]
    result = invoke(
        "config",
        "show",
        "--json",
        "-c",
        str(sources["yaml"]),
        "--env-file",
        str(sources["env"]),
        "--set",
        "job.tag=from-cli",
    )
    assert result.exit_code == 0, result.stderr
    job = json.loads(result.stdout)["job"]
    assert (job["num_workers"], job["tag"], job["image"]) == (4, "from-cli", "from-environment")


def test_a_dotenv_in_the_current_directory_is_read_by_default(work_dir: Path) -> None:
    (work_dir / ".env").write_text("NUM_WORKERS=7\n")
    assert load_config().job.num_workers == 7
    assert load_config(read_default_env_file=False).job.num_workers == 2


def test_the_seed_dotenv_names_map_to_fields(work_dir: Path) -> None:
    (work_dir / ".env").write_text(
        "export AWS_REGION=us-east-2\nREGISTRY=123456789012.dkr.ecr.us-east-2.amazonaws.com\nIMAGE=fsdp\nTAG=v7\n"
        "JOB_NAME=llama-ft\nRDZV_HOST=etcd-client\nRDZV_PORT=2380\nNUM_WORKERS=4\nGPU_PER_WORKER=8\n"
        "EFA_PER_WORKER=32\nINSTANCE_TYPE=p5.48xlarge\nMODEL_NAME=meta-llama/Llama-3.1-8B\nHF_TOKEN=hf_s3cr3t\n"
        'CMD="python train.py"\nFI_PROVIDER=efa\nCLUSTER_NAME=team-a\nSOMETHING_ELSE=ignored\n'
    )
    c = load_config()
    assert c.cluster.region == "us-east-2" and c.cluster.name == "team-a"
    assert c.image_ref == "123456789012.dkr.ecr.us-east-2.amazonaws.com/fsdp:v7"
    j = c.job
    assert (j.name, j.rdzv_host, j.rdzv_port, j.num_workers, j.gpu_per_worker, j.efa_per_worker) == (
        "llama-ft",
        "etcd-client",
        2380,
        4,
        8,
        32,
    )
    assert (j.command, j.fi_provider) == ("python train.py", "efa")
    assert c.trainer == {"model": {"name_or_path": "meta-llama/Llama-3.1-8B"}}
    assert isinstance(j.hf_token, Secret) and j.hf_token.get_secret_value() == "hf_s3cr3t"
    assert c.origins["job.num_workers"] == c.origins["job.num_workers"].__class__("NUM_WORKERS", ".env")
    assert "HF_TOKEN" not in os.environ and "NUM_WORKERS" not in os.environ  # reading a .env never exports it


def test_trainer_settings_nest_in_environment_variables() -> None:
    c = load_config(environ={"FSDP_SDK_TRAINER__MODEL__PRESET": "tiny", "FSDP_SDK_TRAINER__TRAIN__STEPS": "20"})
    assert c.trainer == {"model": {"preset": "tiny"}, "train": {"steps": "20"}}
    assert c.trainer_args() == ["--model.preset", "tiny", "--train.steps", "20"]


def test_other_fsdp_sdk_variables_are_not_settings() -> None:
    environ = {"FSDP_SDK_STATE_DIR": "/tmp/x", "FSDP_SDK_DISABLE_PLUGIN_AUTOLOAD": "1", "FSDP_SDK_CONFIG": "a.yaml"}
    assert load_config(environ=environ).cluster.state_dir == Path("/tmp/x")


# ---------------------------------------------------------------------- secrets


def test_secrets_are_redacted_everywhere(invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text("HF_TOKEN=hf_s3cr3t\n")
    c = load_config()
    for shown in (repr(c), str(c), repr(c.job.hf_token), str(c.job.hf_token), json.dumps(c.to_dict())):
        assert "hf_s3cr3t" not in shown
    assert c.to_dict()["job"]["hf_token"] == "**********"
    assert c.to_dict(redact=False)["job"]["hf_token"] == "hf_s3cr3t"
    for args in (("config", "show"), ("config", "show", "--json")):
        result = invoke(*args)
        assert result.exit_code == 0, result.stderr
        assert "hf_s3cr3t" not in result.output and "**********" in result.output


def test_config_show_redacts_secret_looking_env_values(invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text("HF_TOKEN=hf_s3cr3t\n")
    env = "WANDB_API_KEY=k3y,DB_PASSWORD=hunter2,MY_SECRET=s1,GH_TOKEN=t0k,HUB_AUTH=hf_s3cr3t,LOG_LEVEL=debug"
    for args in (("config", "show", "--json"), ("config", "show")):
        result = invoke(*args, "--set", f"job.env={env}")
        assert result.exit_code == 0, result.stderr
        for secret in ("k3y", "hunter2", "s1", "t0k", "hf_s3cr3t"):
            assert secret not in result.output, (args, secret)
    shown = json.loads(invoke("config", "show", "--json", "--set", f"job.env={env}").stdout)["job"]["env"]
    assert shown == {
        "WANDB_API_KEY": "**********",
        "DB_PASSWORD": "**********",
        "MY_SECRET": "**********",
        "GH_TOKEN": "**********",
        "HUB_AUTH": "**********",
        "LOG_LEVEL": "debug",
    }
    # one pattern for config show and for the renderer's refusal
    import fsdp_sdk.k8s.render as render
    from fsdp_sdk.config import SECRET_ENV_NAME

    assert render.SECRET_ENV_NAME is SECRET_ENV_NAME
    c = load_config().with_overrides({"job.env": env})
    assert c.to_dict(redact=False)["job"]["env"]["DB_PASSWORD"] == "hunter2"


# ---------------------------------------------------------------------- resolution


@pytest.fixture(scope="module")
def plugins():
    return build_plugins(autoload=False)


def test_gpu_and_efa_counts_follow_the_instance_type(plugins) -> None:
    c = resolve(Config().with_overrides({"cluster.instance_type": "p4d.24xlarge"}), plugins)
    assert (c.job.gpu_per_worker, c.job.efa_per_worker, c.cluster.max_nodes) == (8, 4, 2)
    c = resolve(Config().with_overrides({"cluster.efa": "false", "job.gpu_per_worker": "4"}), plugins)
    assert (c.job.gpu_per_worker, c.job.efa_per_worker) == (4, 0)
    assert resolve(c, plugins) == c  # idempotent


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"job.gpu_per_worker": 16}, "job.gpu_per_worker (from overrides): 16 GPUs per worker but p5.48xlarge has 8"),
        (
            {"job.efa_per_worker": 33},
            "job.efa_per_worker (from overrides): 33 EFA interfaces per worker but p5.48xlarge has 32",
        ),
        ({"cluster.efa": False, "job.efa_per_worker": 1}, "cluster.efa is off"),
        ({"cluster.nodes": 5, "cluster.max_nodes": 4}, "5 is outside min_nodes..max_nodes (0..4)"),
        ({"cluster.instance_type": "p5.48xlarg"}, "did you mean p5.48xlarge?"),
        ({"cluster.backend": "eks"}, "unknown backend 'eks'; did you mean eksctl? use one of: local"),
    ],
)
def test_contradictions_are_refused(plugins, overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(Config().with_overrides(overrides), plugins)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_trainer_section_is_validated_by_the_trainer(plugins) -> None:
    pytest.importorskip("fsdp_trainer.config", reason="the trainer package is not installed")
    steps = Setting("trainer.train.steps", "-3", "--steps", "command line")
    with pytest.raises(ConfigError, match=r"^--steps \(from command line\): must be positive \(got -3\)$"):
        resolve(Config().with_overrides([steps]), plugins)
    unknown = Setting("trainer.train.stepz", "3", "FSDP_SDK_TRAINER__TRAIN__STEPZ", "environment")
    with pytest.raises(ConfigError, match=r"FSDP_SDK_TRAINER__TRAIN__STEPZ \(from environment\): unknown option"):
        resolve(Config().with_overrides([unknown]), plugins)
    ok = resolve(Config().with_overrides({"trainer.model.preset": "tiny", "trainer.train.steps": "20"}), plugins)
    assert ok.trainer == {"model": {"preset": "tiny"}, "train": {"steps": "20"}}


def test_values_are_converted_to_the_field_types() -> None:
    c = load_config(
        overrides={
            "cluster.efa": "no",
            "cluster.availability_zones": "us-west-2a, us-west-2b",
            "job.env": "A=1,B=two",
            "job.registry": "none",
            "cluster.state_dir": "~/somewhere",
        }
    )
    assert c.cluster.efa is False
    assert c.cluster.availability_zones == ["us-west-2a", "us-west-2b"]
    assert c.job.env == {"A": "1", "B": "two"} and c.job.registry is None
    assert c.cluster.state_dir == Path("~/somewhere").expanduser()


def test_unknown_yaml_keys_name_the_key_and_suggest(work_dir: Path) -> None:
    path = work_dir / "c.yaml"
    path.write_text("cluster:\n  instance_typ: p5.48xlarge\n")
    with pytest.raises(
        ConfigError,
        match=r"^cluster.instance_typ \(from c.yaml, line 2\): unknown setting; did you mean cluster.instance_type\?$",
    ):
        load_config(path)
    path.write_text("clustr:\n  nodes: 2\n")
    with pytest.raises(ConfigError, match=r"^clustr \(from c.yaml, line 1\): unknown setting; did you mean cluster\?$"):
        load_config(path)
