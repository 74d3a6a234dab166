"""A cluster's Terraform working directory: ``<cluster.state_dir>/terraform/<cluster>/``.

It holds a copy of the configuration (so ``down`` destroys with the configuration that created the
cluster, whatever version of the package is installed later), ``terraform.tfvars.json`` (the inputs,
which Terraform reads by itself), ``backend.tf.json`` (where the state lives: ``terraform.tfstate``
beside them, or S3), Terraform's own ``.terraform/`` and lock file, the saved plans while a command
runs, and the cluster's kubeconfig. Every file the SDK writes is written atomically.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.files import write_atomic

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk_terraform.settings import TerraformSettings

__all__ = ["BACKEND_FILE", "INPUTS_FILE", "LOCAL_STATE_FILE", "Workdir", "backend_block", "state_location"]

#: The inputs, read by Terraform without a -var-file flag.
INPUTS_FILE = "terraform.tfvars.json"
#: The backend block the SDK writes (JSON syntax: no HCL built from strings).
BACKEND_FILE = "backend.tf.json"
#: The local state, when no S3 bucket is set.
LOCAL_STATE_FILE = "terraform.tfstate"
# The names of the configuration files the SDK copied, and where from.
_MANIFEST = ".fsdp-sdk-configuration.json"
# Files of a configuration directory that are not configuration (state, inputs, plans, Terraform's data).
_NOT_CONFIGURATION = (".", "terraform.tfstate", "terraform.tfvars", BACKEND_FILE, "kubeconfig")


def _is_configuration(name: str) -> bool:
    """Whether a file of a configuration directory is copied (its provider lock file is; its state is not)."""
    if name == ".terraform.lock.hcl":
        return True
    return not name.startswith(_NOT_CONFIGURATION) and not name.endswith(".tfplan")


def backend_block(config: Config, settings: TerraformSettings) -> dict[str, Any]:
    """The ``terraform { backend ... }`` block for the cluster, as JSON configuration (pure)."""
    if not settings.remote_state:
        return {"terraform": {"backend": {"local": {"path": LOCAL_STATE_FILE}}}}
    s3: dict[str, Any] = {
        "bucket": settings.state_bucket,
        "key": settings.state_key or f"fsdp-sdk/{config.cluster.name}/terraform.tfstate",
        "region": settings.state_region or config.cluster.region,
        "encrypt": True,
    }
    if settings.lock_table:
        s3["dynamodb_table"] = settings.lock_table
    if settings.s3_lockfile:
        s3["use_lockfile"] = True
    if settings.s3_use_path_style:
        s3["use_path_style"] = True
    return {"terraform": {"backend": {"s3": s3}}}


def state_location(workdir: Path, backend: Mapping[str, Any]) -> str:
    """Where the state lives, for messages: a local path or ``s3://bucket/key`` (and its lock)."""
    backends = backend["terraform"]["backend"]
    if "local" in backends:
        return str(workdir / backends["local"]["path"])
    s3 = backends["s3"]
    lock = f", locked with DynamoDB table {s3['dynamodb_table']}" if s3.get("dynamodb_table") else ""
    if s3.get("use_lockfile"):
        lock += ", locked with an S3 lock file"
    return f"s3://{s3['bucket']}/{s3['key']} ({s3['region']}{lock})"


def _json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


class Workdir:
    """The working directory of one cluster.

    :param path: ``<cluster.state_dir>/terraform/<cluster>``.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def of(cls, config: Config) -> Workdir:
        """The working directory of ``cluster.name`` under ``cluster.state_dir``."""
        return cls(Path(config.cluster.state_dir) / "terraform" / config.cluster.name)

    def __repr__(self) -> str:
        return f"Workdir({str(self.path)!r})"

    def exists(self) -> bool:
        """Whether the directory exists."""
        return self.path.is_dir()

    def initialised(self) -> bool:
        """Whether ``terraform init`` ran here (its data directory exists)."""
        return (self.path / ".terraform").is_dir()

    def write(self, source: Path, inputs: Mapping[str, Any], backend: Mapping[str, Any]) -> None:
        """Copy the configuration from ``source`` and write the inputs and the backend block.

        Configuration files copied by an earlier call and gone from ``source`` are removed.

        :param source: the configuration directory (``.tf`` files and what they refer to).
        :param inputs: the variables (``terraform.tfvars.json``).
        :param backend: the backend block (``backend.tf.json``).
        """
        self.path.mkdir(parents=True, exist_ok=True)
        names = sorted(entry.name for entry in Path(source).iterdir() if _is_configuration(entry.name))
        for stale in set(self._copied()) - set(names):
            target = self.path / stale
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        for name in names:
            entry, target = Path(source) / name, self.path / name
            if entry.is_dir():
                shutil.copytree(entry, target, dirs_exist_ok=True)
            else:
                shutil.copy2(entry, target)
        write_atomic(self.path / _MANIFEST, _json({"source": str(Path(source).resolve()), "files": names}))
        self.write_inputs(inputs)
        write_atomic(self.path / BACKEND_FILE, _json(backend))

    def _copied(self) -> list[str]:
        try:
            return list(json.loads((self.path / _MANIFEST).read_text())["files"])
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def write_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Write ``terraform.tfvars.json``."""
        write_atomic(self.path / INPUTS_FILE, _json(dict(inputs)))

    def read_inputs(self) -> dict[str, Any] | None:
        """The inputs last written, or ``None``."""
        try:
            return dict(json.loads((self.path / INPUTS_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def has_configuration(self) -> bool:
        """Whether a configuration, its inputs and its backend block are in place (a command can run)."""
        return bool(self._copied()) and (self.path / INPUTS_FILE).is_file() and (self.path / BACKEND_FILE).is_file()

    def remove(self) -> None:
        """Delete the directory and everything in it."""
        shutil.rmtree(self.path, ignore_errors=True)
