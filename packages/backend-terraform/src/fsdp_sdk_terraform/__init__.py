"""fsdp-sdk's Terraform backend: ``fsdp-sdk up --backend terraform`` creates an EKS cluster of GPU nodes.

The package ships a Terraform configuration (``configuration/``: VPC with private subnets and NAT, the
EKS cluster with its IAM roles and OIDC provider, a system node group and a GPU node group with every
EFA interface of the instance type, capacity reservation and Capacity Block targeting, an optional
cluster placement group) and drives the ``terraform`` CLI over it, one working directory and state per
cluster under ``<cluster.state_dir>/terraform/<cluster>/``.

* :mod:`~fsdp_sdk_terraform.settings`: the ``terraform`` settings section (binary, configuration, state backend);
* :mod:`~fsdp_sdk_terraform.inputs`: the configuration -> ``terraform.tfvars.json`` (pure, checked);
* :mod:`~fsdp_sdk_terraform.device_plugins`: the NVIDIA and EFA device plugin DaemonSets core applies;
* :mod:`~fsdp_sdk_terraform.cli`: one working directory driven by the terraform CLI;
* :mod:`~fsdp_sdk_terraform.workdir`: the working directory's files;
* :mod:`~fsdp_sdk_terraform.changes`: the summary of a saved plan;
* :mod:`~fsdp_sdk_terraform.backend`: the :class:`~fsdp_sdk.backends.base.ClusterBackend`;
* :mod:`~fsdp_sdk_terraform.plugin`: the hooks (entry point ``terraform`` in group ``fsdp_sdk``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    #: The EKS configuration shipped with the package.
    CONFIGURATION_DIR: Path

__version__ = "0.1.0"

__all__ = ["CONFIGURATION_DIR", "__version__"]


def __getattr__(name: str) -> Any:
    # CONFIGURATION_DIR is computed on first use: the entry point imports this package on every start of the
    # CLI (--help included), and pathlib is not otherwise needed there.
    if name == "CONFIGURATION_DIR":
        from pathlib import Path

        return Path(__file__).with_name("configuration")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
