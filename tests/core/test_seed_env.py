"""Seed ``.env`` files (the aws-do-eks FSDP example's) work or fail loudly: shell-like expansion, seed names mapped
or warned about, command substitutions refused with the variable named, secrets masked in every output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fsdp_sdk import Client
from fsdp_sdk.k8s.render import render_job
from fsdp_sdk.plugins import build_plugins

# The seed's .env, as the aws-do-eks FSDP example ships it (nanoGPT section on, Llama 2 section commented out).
SEED = """#!/bin/bash

# Configuration for FSDP jobs

## AWS
export AWS_REGION=us-west-2
export ACCOUNT=$(aws sts get-caller-identity --query Account --output text)

## Docker Image
export REGISTRY=${ACCOUNT}.dkr.ecr.${AWS_REGION}.amazonaws.com/
export IMAGE=fsdp
## DOCKERFILE_EXT=nanogpt-sockets|nanogpt-efa|llama2-sockets|llama2-efa
export DOCKERFILE_EXT=nanogpt-sockets
export TAG=":${DOCKERFILE_EXT}"

## FSDP Job
export JOB_NAME=fsdp
export RDZV_HOST=etcd
export RDZV_PORT=2379
export NUM_WORKERS=2
export EFA_PER_WORKER=0
export NPROC_PER_WORKER=8
export INSTANCE_TYPE=g4dn.8xlarge
export FI_PROVIDER=sockets

## NanoGPT train command
export CMD="python -m torch.distributed.run --nproc-per-node=$NPROC_PER_WORKER fsdp_train.py"
export MODEL_NAME="10.5M"
"""
TOKEN = "hf_canaryTOKEN0123456789abcdef"
LLAMA = (
    SEED.replace(
        "export ACCOUNT=$(aws sts get-caller-identity --query Account --output text)", "export ACCOUNT=123456789012"
    )
    .replace("export INSTANCE_TYPE=g4dn.8xlarge", "export INSTANCE_TYPE=p4de.24xlarge")
    .replace("export EFA_PER_WORKER=0", "export EFA_PER_WORKER=4")
    .replace("export FI_PROVIDER=sockets", "export FI_PROVIDER=efa")
    .replace("export DOCKERFILE_EXT=nanogpt-sockets", "export DOCKERFILE_EXT=llama2-efa")
    .split("## NanoGPT")[0]
    + f'export HF_TOKEN="{TOKEN}"\n'
    + "export MODEL_NAME=meta-llama/Llama-2-7b-hf\n"
    + 'export CMD="huggingface-cli login --token ${HF_TOKEN} && torchrun --nproc_per_node=${NPROC_PER_WORKER} '
    + '--nnodes=${NUM_WORKERS} examples/finetuning.py --enable_fsdp --pure_bf16 --model_name $MODEL_NAME --output_dir ."\n'
)


def test_the_seed_env_as_shipped_fails_on_the_command_substitution(invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text(SEED)
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "Error: REGISTRY (from .env line 10): uses ${ACCOUNT}, which is a command substitution "
        "($(aws sts get-caller-identity --query Account --output text)) that fsdp-sdk does not run; set ACCOUNT to "
        "its value in .env (fsdp-sdk runs no commands), or write REGISTRY itself"
    )


def test_with_the_account_written_the_nanogpt_model_name_is_refused(invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text(
        SEED.replace("$(aws sts get-caller-identity --query Account --output text)", "123456789012")
    )
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(
        "Error: MODEL_NAME (from .env line 28): '10.5M' is a nanoGPT size of the seed's example, not a Llama model;"
    )


def test_the_seed_variables_expand_as_the_shell_would(work_dir: Path) -> None:
    env = SEED.replace("$(aws sts get-caller-identity --query Account --output text)", "123456789012").replace(
        'MODEL_NAME="10.5M"', "MODEL_NAME=meta-llama/Llama-2-7b-hf"
    )
    (work_dir / ".env").write_text(env)
    config = Client.from_sources(plugins=build_plugins(autoload=False)).config
    assert config.image_ref == "123456789012.dkr.ecr.us-west-2.amazonaws.com/fsdp:nanogpt-sockets"
    assert config.job.command == "python -m torch.distributed.run --nproc-per-node=8 fsdp_train.py"
    assert (config.job.nproc_per_node, config.job.fi_provider, config.cluster.instance_type) == (
        8,
        "sockets",
        "g4dn.8xlarge",
    )
    assert config.warnings == [
        "DOCKERFILE_EXT (from .env line 13) is not read: fsdp-sdk builds its own trainer image ('fsdp-sdk image "
        "build'): the seed's Dockerfile variants do not apply"
    ]


def test_the_seed_job_on_a_one_gpu_instance_fails_loudly(invoke, work_dir: Path) -> None:
    env = SEED.replace("$(aws sts get-caller-identity --query Account --output text)", "123456789012").replace(
        'MODEL_NAME="10.5M"', "MODEL_NAME=meta-llama/Llama-2-7b-hf"
    )
    (work_dir / ".env").write_text(env)
    result = invoke("job", "render")
    assert result.exit_code == 2
    assert "Error: NPROC_PER_WORKER (from .env): 8 processes per worker but g4dn.8xlarge has 1 GPUs" in result.stderr
    assert "DOCKERFILE_EXT (from .env line 13) is not read" in result.stderr


def test_the_llama_seed_renders_a_valid_job_with_the_token_only_in_the_secret(
    invoke, work_dir: Path, pytorchjob_crd: Path
) -> None:
    (work_dir / ".env").write_text(LLAMA)
    result = invoke("job", "render", "--validate", "--crd", str(pytorchjob_crd))
    assert result.exit_code == 0, result.stderr
    job = next(yaml.safe_load_all(result.stdout))
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "123456789012.dkr.ecr.us-west-2.amazonaws.com/fsdp:llama2-efa"
    assert container["command"] == [
        "/bin/bash",
        "-c",
        "huggingface-cli login --token ${HF_TOKEN} && torchrun --nproc_per_node=8 --nnodes=2 examples/finetuning.py "
        "--enable_fsdp --pure_bf16 --model_name meta-llama/Llama-2-7b-hf --output_dir .",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert env["FI_PROVIDER"]["value"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"]["value"] == "1"
    assert TOKEN not in result.output


def test_a_token_written_into_the_command_is_masked_everywhere(invoke, work_dir: Path) -> None:
    (work_dir / ".env").write_text(LLAMA.replace("--token ${HF_TOKEN}", f"--token {TOKEN}"))
    for args in (("config", "show"), ("config", "show", "--json"), ("config", "show", "--origins")):
        result = invoke(*args)
        assert result.exit_code == 0 and TOKEN not in result.output and "**********" in result.output, args
    shown = json.loads(invoke("config", "show", "--json").stdout)
    assert shown["job"]["command"].startswith("huggingface-cli login --token ********** && torchrun")
    refused = invoke("job", "render")
    assert refused.exit_code == 2 and "job.hf_token" in refused.stderr and TOKEN not in refused.output


def test_a_secret_in_a_refused_value_is_not_printed(invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSDP_SDK_JOB__ENV", f"HF_TOKEN={TOKEN},BAD NAME=x")
    result = invoke("config", "show")
    assert result.exit_code == 2 and "is not an environment variable name" in result.stderr
    assert TOKEN not in result.output


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            'CMD="torchrun $UNSET_VAR"',
            "CMD (from .env line 1): uses $UNSET_VAR, which is set neither earlier in the file nor in the environment",
        ),
        ("CMD=`whoami`", "CMD (from .env line 1): is a command substitution (`whoami`) that fsdp-sdk does not run"),
        ("NUM_WORKERS two", ".env line 1: 'NUM_WORKERS two' is not NAME=VALUE"),
        ('CMD="torchrun', ".env line 1: 'CMD=\"torchrun' has a \" quote that is never closed"),
        ("TAG='v1' extra", ".env line 1: \"TAG='v1' extra\" has text after the closing ' quote"),
        ('TAG="v1 ; rm -rf /"', "TAG (from .env): 'v1 ; rm -rf /' contains whitespace"),
        ("IMAGE=Bad/Image", "IMAGE (from .env): 'Bad/Image' is not an image name"),
        ("FI_PROVIDER=bogus", "FI_PROVIDER (from .env): 'bogus' names an unknown libfabric provider 'bogus'"),
        ("RDZV_HOST=etcd_1", "RDZV_HOST (from .env): 'etcd_1' is not a host name"),
        ('CMD="torchrun \'unbalanced"', 'CMD (from .env): "torchrun \'unbalanced" cannot be split into words'),
        ('REGISTRY="$(aws ecr describe-registry)"', "REGISTRY (from .env line 1): is a command substitution"),
    ],
)
def test_bad_env_lines_are_one_line_exit_2(invoke, work_dir: Path, line: str, expected: str) -> None:
    (work_dir / ".env").write_text(line + "\n")
    result = invoke("config", "show")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {expected}") and len(result.stderr.strip().splitlines()) == 1, (
        result.stderr
    )


def test_quotes_escapes_and_defaults(work_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FROM_ENV", "envvalue")
    (work_dir / ".env").write_text(
        "TAG=':literal'\nJOB_NAME=${MISSING:-fallback}\nCMD=\"echo \\$HOME ${FROM_ENV} $FROM_ENV\"\n"
    )
    config = Client.from_sources(plugins=build_plugins(autoload=False)).config
    assert config.job.tag == "literal" and config.job.name == "fallback"
    assert config.job.command == "echo $HOME envvalue envvalue"


def test_render_of_a_plain_command_needs_no_shell() -> None:
    from fsdp_sdk.config import Config

    config = Config().with_overrides(
        {
            "job.registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com",
            "job.command": "torchrun -m my_trainer --x 'a b'",
        }
    )
    (job,) = render_job(config, plugins=build_plugins(autoload=False))
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["torchrun", "-m", "my_trainer", "--x", "a b"]


def test_the_reader_handles_what_sourced_files_hold(tmp_path: Path) -> None:
    from fsdp_sdk.envfile import read_env_file

    path = tmp_path / ".env"
    path.write_text(
        "#!/bin/bash\r\n"
        "  # indented comment\r\n"
        "export A=plain value   # trailing comment\r\n"
        'B="line one\nline two \\"quoted\\" \\\\ tab\\tend"\r\n'
        "C='single $A'\n"
        "D='keeps $A and \\\\'\n"
        'E="${A}-$A-\\$A" # comment after quotes\n'
        "F=url#fragment\n"
        "G=\n"
    )
    entries = {e.name: e for e in read_env_file(path, {})}
    assert entries["A"].value == "plain value" and entries["A"].line == 3
    assert entries["B"].value == 'line one\nline two "quoted" \\ tab\tend'
    assert entries["C"].value == "single $A" and entries["C"].line == 6
    assert entries["D"].value == "keeps $A and \\"
    assert entries["E"].value == "plain value-plain value-$A"
    assert entries["F"].value == "url#fragment" and entries["G"].value == ""
