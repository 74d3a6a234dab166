"""``fsdp-sdk image``: the Dockerfile and build context, the build command, and the push to ECR (moto over HTTP)."""

from __future__ import annotations

import base64
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsdp_sdk.k8s.image import BUILD_ARGS, NCCL_NET_PLUGIN_DIR, render_dockerfile
from fsdp_sdk.pins import pin

from .conftest import free_port
from .tools import cli, install_fake_tools, recorded

TRAINER_SRC = Path(__file__).resolve().parents[2] / "packages" / "trainer"


pytestmark = pytest.mark.usefixtures("isolated_cli")


def tools_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *names: str) -> Path:
    log = tmp_path / "calls.jsonl"
    bin_dir = install_fake_tools(tmp_path / "bin", log, *names)
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing else: no real docker can be picked up
    return log


def test_dockerfile_pins_every_version_from_the_table() -> None:
    text = render_dockerfile()
    for name, value in BUILD_ARGS.items():
        assert f"ARG {name}={value}" in text
    table = {
        "BASE_IMAGE": pin("cuda-base").image_ref(),
        "EFA_INSTALLER_VERSION": pin("efa-installer").version,
        "AWS_OFI_NCCL_VERSION": pin("aws-ofi-nccl").version,
        "GDRCOPY_VERSION": pin("gdrcopy").version,
        "NCCL_VERSION": pin("nccl").version,
        "TORCH_VERSION": pin("torch").version,
        "TORCHAO_VERSION": pin("torchao").version,
        "PYTHON_ETCD_VERSION": pin("python-etcd").version,
    }
    assert {name: BUILD_ARGS[name] for name in table} == table
    assert BUILD_ARGS["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cu130"  # the CUDA 13.0 base's wheels
    assert text.index("ARG BASE_IMAGE=") < text.index("FROM ${BASE_IMAGE}")
    for needle in (
        "aws-efa-installer-${EFA_INSTALLER_VERSION}",
        "gdrcopy/archive/refs/tags/v${GDRCOPY_VERSION}",
        '"python-etcd==${PYTHON_ETCD_VERSION}"',
        '"torch==${TORCH_VERSION}"',
        '"torchao==${TORCHAO_VERSION}"',
        "ENV NCCL_NET_PLUGIN=ofi",
        "COPY trainer/ /opt/fsdp-trainer/",
    ):
        assert needle in text
    assert "ARG EFA_INSTALLER_VERSION=9.9.9" in render_dockerfile({"EFA_INSTALLER_VERSION": "9.9.9"})


def installed_extras(dockerfile: str) -> set[str]:
    """The extras of the trainer install line of the Dockerfile."""
    found = re.findall(r'pip install [^\n]*"/opt/fsdp-trainer\[([^\]]*)\]"', dockerfile)
    assert len(found) == 1, "the Dockerfile installs the trainer once"
    return set(found[0].split(","))


def extras_the_job_needs(args: list[str]) -> set[str]:
    """The trainer extras a job's arguments ask for, as the trainer's own option docs name them
    ("pip install fsdp-trainer[X]"): an s3:// location needs the extra its option names, a port or a switch
    needs it when on."""
    from fsdp_trainer import options
    from fsdp_trainer.config import TrainerConfig

    sections = dict(options.sections(TrainerConfig))
    needed: set[str] = set()
    for flag, value in itertools.pairwise(args):
        if not flag.startswith("--") or "." not in flag:
            continue
        section, name = flag[2:].split(".", 1)
        doc = options.field_docs(sections[section]).get(name, "")
        extra = re.search(r"pip install '?fsdp-trainer\[(\w+)\]", doc)
        if extra is None:
            continue
        if "s3://" in doc and not value.startswith("s3://"):
            continue  # a local path: the extra is for s3:// locations only
        if value.lower() in ("0", "false", "off", ""):
            continue
        needed.add(extra.group(1))
    return needed


def test_the_image_has_every_extra_an_eks_job_asks_of_the_trainer() -> None:
    """Issue 39: every EKS job checkpoints to s3://<bucket>/..., and the image lacked the ``s3`` extra (the test
    compared the extras string verbatim and agreed with the bug). The expectation now comes from the jobs."""
    import tomllib

    from fsdp_sdk.config import Config
    from fsdp_sdk.k8s.render import render_job
    from fsdp_sdk.plugins import build_plugins

    config = Config.from_dict(
        {
            "cluster": {"checkpoint_bucket": "fsdp-sdk-ckpt-123456789012-us-west-2", "region": "us-west-2"},
            "job": {"registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com", "num_workers": 2},
            "trainer": {"model": {"preset": "tiny"}, "train": {"steps": 10}, "metrics": {"prometheus_port": 9400}},
        }
    )
    objects = render_job(config, rdzv_id="fsdp-extras", plugins=build_plugins(autoload=False))
    args = objects[0]["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"]
    needed = extras_the_job_needs(args)
    assert {"s3", "prometheus"} <= needed  # the bucket and the scrape: both asked for by this job
    dockerfile = render_dockerfile()
    assert needed <= installed_extras(dockerfile), f"the image lacks {sorted(needed - installed_extras(dockerfile))}"
    declared = tomllib.loads((TRAINER_SRC / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert installed_extras(dockerfile) <= set(declared)  # no extra the trainer does not declare (pip only warns)
    assert any(r.startswith("s3torchconnector") for r in declared["s3"])  # what storage.py imports for s3://


def test_dockerfile_builds_nothing_twice_and_checks_the_plugin_nccl_finds() -> None:
    text = render_dockerfile()
    urls = re.findall(r"https://[^\s\"]+", text.split("FROM ${BASE_IMAGE}", 1)[1])
    assert len(urls) == len(set(urls)) == 2  # the EFA installer and GDRCopy: each fetched once
    assert "aws-ofi-nccl" not in " ".join(urls)  # the plugin is the installer's: no second OFI download ...
    assert "./configure" not in text and "--with-libfabric" not in text  # ... and no OFI build
    assert text.count("efa_installer.sh") == 1 and text.count("make -j") == 1  # GDRCopy's library, once
    runs = [block for block in text.split("\nRUN ")[1:]]
    check = next(run for run in runs if "is not on LD_LIBRARY_PATH" in run)
    # the check looks for the file NCCL opens (libnccl-net-<NCCL_NET_PLUGIN>.so) on the library path, fails otherwise
    assert "libnccl-net-${NCCL_NET_PLUGIN}.so" in check and "exit 1" in check and "libfabric.*not found" in check
    assert f"ENV LD_LIBRARY_PATH={NCCL_NET_PLUGIN_DIR}:" in text
    assert text.index("is not on LD_LIBRARY_PATH") > text.index('"/opt/fsdp-trainer[')
    assert "./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in text  # as the field runs it in images


def test_the_image_runs_the_nccl_torch_pins_and_only_that_one() -> None:
    text = render_dockerfile()
    runs = text.split("\nRUN ")[1:]
    assert "--no-deps" not in text
    # the base image's NCCL packages are purged, in the step that installs the build tools
    apt = next(run for run in runs if "apt-get install" in run)
    assert "'libnccl*'" in apt and "apt-get purge -y --allow-change-held-packages $nccl" in apt
    # torch is installed first; every later pip install is constrained to it (none can swap torch and its NCCL)
    installs = [run for run in runs if "pip install" in run]
    assert not any("nccl" in run for run in installs)  # no NCCL installed over torch's
    torch_step = next(run for run in installs if '"torch==${TORCH_VERSION}" --index-url' in run)
    assert 'echo "torch==${TORCH_VERSION}" > /opt/fsdp-sdk/constraints.txt' in torch_step
    later = torch_step.split("constraints.txt", 1)[1:] + installs[installs.index(torch_step) + 1 :]
    assert later and all("PIP_CONSTRAINT=/opt/fsdp-sdk/constraints.txt python -m pip install" in r for r in later)
    # the check: pip's requirements hold, torch requires nvidia-nccl-cu13 == the table's NCCL, no system libnccl
    check = next(run for run in runs if "is not on LD_LIBRARY_PATH" in run)
    assert "python -m pip check" in check and "m.requires('torch')" in check
    assert "v == '${NCCL_VERSION}' and req" in check and "/usr/lib/*-linux-gnu/libnccl.so*" in check
    assert pin("nccl").version == BUILD_ARGS["NCCL_VERSION"] and "torch" in pin("nccl").source


def test_build_writes_the_context_and_runs_the_first_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    log = tools_on_path(tmp_path, monkeypatch, "finch", "buildah")  # no docker: finch comes next
    context = tmp_path / "ctx"
    code, _, err = cli(
        capsys,
        "image",
        "build",
        "--context",
        str(context),
        "--trainer-src",
        str(TRAINER_SRC),
        "--tag",
        "v1",
        "--build-arg",
        "AWS_OFI_NCCL_VERSION=1.13.2",
    )
    assert code == 0, err
    assert recorded(log) == [
        {
            "tool": "finch",
            "stdin": None,
            "argv": [
                "build",
                "--platform",
                "linux/amd64",
                "-t",
                "fsdp-sdk-trainer:v1",
                "-f",
                str(context / "Dockerfile"),
                "--build-arg",
                "AWS_OFI_NCCL_VERSION=1.13.2",
                str(context),
            ],
        }
    ]
    assert "ARG AWS_OFI_NCCL_VERSION=1.13.2" in (context / "Dockerfile").read_text()
    assert (context / "trainer" / "pyproject.toml").is_file()
    assert (context / "trainer" / "src" / "fsdp_trainer" / "__main__.py").is_file()
    assert not list((context / "trainer").rglob("__pycache__"))


def test_build_dry_run_prints_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    log = tools_on_path(tmp_path, monkeypatch, "docker", "buildah")
    code, out, err = cli(capsys, "image", "build", "--dry-run", "--trainer-src", str(TRAINER_SRC))
    assert code == 0, err
    assert out.startswith("# syntax=docker/dockerfile:1")
    assert (
        "# would run: docker build --platform linux/amd64 -t fsdp-sdk-trainer:latest "
        "-f .fsdp-sdk/image/Dockerfile .fsdp-sdk/image" in out
    )
    for name in ("EFA_INSTALLER_VERSION", "AWS_OFI_NCCL_VERSION", "NCCL_VERSION", "TORCHAO_VERSION", "GDRCOPY_VERSION"):
        assert f"ARG {name}={BUILD_ARGS[name]}" in out  # the table's versions
    assert recorded(log) == [] and not (tmp_path / ".fsdp-sdk").exists()
    code, out, err = cli(
        capsys,
        "image",
        "build",
        "--dry-run",
        "--trainer-src",
        str(TRAINER_SRC),
        "--set",
        "job.image_platform=linux/arm64",
    )
    assert code == 0, err
    assert "# would run: docker build --platform linux/arm64 -t" in out


def test_buildah_and_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    log = tools_on_path(tmp_path, monkeypatch, "buildah")
    code, _, err = cli(capsys, "image", "build", "--trainer-src", str(TRAINER_SRC), "--context", "c")
    assert code == 0, err
    assert recorded(log)[0]["argv"][:6] == [
        "build",
        "--layers",
        "--platform",
        "linux/amd64",
        "-t",
        "fsdp-sdk-trainer:latest",
    ]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, _, err = cli(capsys, "image", "build", "--trainer-src", str(TRAINER_SRC))
    assert code == 2 and err.count("\n") == 1 and "no container build tool found" in err


def test_build_failure_and_bad_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    tools_on_path(tmp_path, monkeypatch, "docker")
    code, _, err = cli(capsys, "image", "build", "--trainer-src", str(tmp_path))
    assert code == 2 and "--trainer-src" in err
    code, _, err = cli(capsys, "image", "build", "--trainer-src", str(TRAINER_SRC), "--build-arg", "NOPE=1")
    assert code == 2 and "unknown build argument NOPE" in err
    monkeypatch.setenv("FAKE_TOOL_EXIT", "3")
    code, _, err = cli(capsys, "image", "build", "--trainer-src", str(TRAINER_SRC))
    assert code == 1 and "docker exited with status 3 while it tried to build the image" in err
    assert "error: docker build failed here" in err  # the tool's last lines


# --------------------------------------------------------------------------- push (moto server mode)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server_module = pytest.importorskip("moto.server", reason="moto[server] is needed for the ECR tests")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    ecr = boto3.client("ecr", region_name="us-west-2")

    def empty() -> None:
        for repo in ecr.describe_repositories()["repositories"]:
            ecr.delete_repository(repositoryName=repo["repositoryName"], force=True)

    empty()  # the moto server is the session's: start from an account with no repository, whatever ran before
    yield ecr
    empty()


def test_push_creates_the_repository_logs_in_tags_and_pushes(
    aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    ecr = aws
    log = tools_on_path(tmp_path, monkeypatch, "docker")
    code, out, err = cli(capsys, "image", "push", "--tag", "v2", "--set", "cluster.region=us-west-2")
    assert code == 0, err
    repo = ecr.describe_repositories(repositoryNames=["fsdp-sdk-trainer"])["repositories"][0]
    assert repo["imageScanningConfiguration"]["scanOnPush"] is True
    token = ecr.get_authorization_token()["authorizationData"][0]
    registry = token["proxyEndpoint"].removeprefix("https://")
    password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)[1]
    remote = f"{registry}/fsdp-sdk-trainer:v2"
    assert recorded(log) == [
        {"tool": "docker", "argv": ["login", "--username", "AWS", "--password-stdin", registry], "stdin": password},
        {"tool": "docker", "argv": ["tag", "fsdp-sdk-trainer:v2", remote], "stdin": None},
        {"tool": "docker", "argv": ["push", remote], "stdin": None},
    ]
    assert "repository created" in out and password not in out + err

    code, out, _ = cli(capsys, "image", "push", "--tag", "v2")
    assert code == 0 and "repository created" not in out and len(recorded(log)) == 6


def test_push_to_the_configured_ecr_registry_and_dry_run(
    aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    log = tools_on_path(tmp_path, monkeypatch, "docker")
    registry = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    code, out, err = cli(capsys, "image", "push", "--dry-run", "--set", f"job.registry={registry}")
    assert code == 0, err
    assert "# would create ECR repository fsdp-sdk-trainer" in out
    assert f"# would run: docker push {registry}/fsdp-sdk-trainer:latest" in out
    assert recorded(log) == [] and aws.describe_repositories()["repositories"] == []


def test_push_refuses_a_registry_that_is_not_ecr(aws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    log = tools_on_path(tmp_path, monkeypatch, "docker")
    code, _, err = cli(capsys, "image", "push", "--set", "job.registry=ghcr.io/me")
    assert code == 2 and "job.registry" in err and "not an Amazon ECR registry" in err
    assert recorded(log) == []
