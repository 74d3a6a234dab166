"""The ``eksctl`` settings section: what only this backend reads.

Settings both AWS backends share (region, zones, capacity type and reservation, placement group,
volume size, system nodes) live in ``cluster``. These are read from every source like the core's::

    eksctl:                              # YAML (-c FILE)
      ami_family: Bottlerocket
      addon_versions: {vpc-cni: v1.19.2-eksbuild.1}

    FSDP_SDK_EKSCTL__PRIVATE_NETWORKING=false     # .env or the environment
    fsdp-sdk up --set eksctl.timeout_minutes=60   # flags

and shown by ``fsdp-sdk config show``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fsdp_sdk.errors import ConfigError

if TYPE_CHECKING:
    from fsdp_sdk.config import Config

__all__ = ["AMI_FAMILIES", "EksctlSettings"]

#: AMI families whose GPU variants carry the NVIDIA driver (eksctl picks the accelerated AMI by instance type).
AMI_FAMILIES = ("AmazonLinux2023", "AmazonLinux2", "Bottlerocket")

_NODEGROUP = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]{0,62}$")
_AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
_PLACEMENT_GROUP = re.compile(r"^[\x21-\x7e]{1,255}$")
_ADDON = re.compile(r"^[a-z0-9][-a-z0-9]*$")
_ADDON_VERSION = re.compile(r"^(latest|v?\d+\.\d+\.\d+(-eksbuild\.\d+)?)$")
_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,127}$")


def _check(predicate: Callable[[Any], bool], problem: str, fix: str) -> dict[str, Any]:
    return {"check": (predicate, problem, fix)}


def _cidr(value: str) -> bool:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError:
        return False
    return network.version == 4 and 16 <= network.prefixlen <= 24


@dataclass
class EksctlSettings:
    """Settings of the ``eksctl`` backend (section ``eksctl``)."""

    gpu_nodegroup: str = field(
        default="gpu",
        metadata=_check(
            lambda v: bool(_NODEGROUP.match(v)),
            "is not a node group name",
            "use letters, digits and '-', starting with a letter (at most 63)",
        ),
    )
    """Name of the managed node group of GPU nodes (``cluster.instance_type`` x ``cluster.nodes``)."""
    system_nodegroup: str = field(
        default="system",
        metadata=_check(
            lambda v: bool(_NODEGROUP.match(v)),
            "is not a node group name",
            "use letters, digits and '-', starting with a letter (at most 63)",
        ),
    )
    """Name of the managed node group of system nodes (etcd, the Training Operator, monitoring)."""
    ami_family: Literal["AmazonLinux2023", "AmazonLinux2", "Bottlerocket"] = "AmazonLinux2023"
    """AMI family of the nodes; eksctl picks its EKS-accelerated variant for GPU instance types (AL2023 NVIDIA,
    Bottlerocket NVIDIA). AmazonLinux2 is refused from Kubernetes 1.33 on, as EKS no longer builds it."""
    gpu_ami: str | None = field(
        default=None,
        metadata=_check(lambda v: bool(_AMI.match(v)), "is not an AMI id", "use an id like ami-0123456789abcdef0"),
    )
    """A pinned AMI for the GPU nodes (of ``ami_family``), for instance types the installed eksctl does not know
    as GPU types yet (it would pick the standard AMI, without NVIDIA driver). Default: eksctl's choice."""
    private_networking: bool = True
    """Put the nodes in private subnets (outbound through a NAT gateway); off: public subnets."""
    vpc_cidr: str = field(
        default="192.168.0.0/16",
        metadata=_check(_cidr, "is not an IPv4 network from /16 to /24", "use a CIDR like 10.42.0.0/16"),
    )
    """CIDR of the VPC eksctl creates for the cluster."""
    addon_versions: dict[str, str] = field(default_factory=dict)
    """EKS add-on versions by name (``vpc-cni``, ``coredns``, ``kube-proxy``, or another EKS add-on to install);
    an add-on not named here is installed at ``latest``."""
    placement_group_name: str | None = field(
        default=None,
        metadata=_check(
            lambda v: bool(_PLACEMENT_GROUP.match(v)),
            "is not a placement group name",
            "use the name of an existing cluster placement group",
        ),
    )
    """An existing cluster placement group for the GPU nodes (with ``cluster.placement_group``): the one the capacity
    reservation was created in, or one you made ('aws ec2 create-placement-group --strategy cluster')."""
    node_repair: bool = False
    """Turn on EKS node auto repair for the GPU node group (replaces nodes the node monitoring agent reports
    unhealthy, GPU faults included)."""
    install_nvidia_device_plugin: bool = True
    """Apply the NVIDIA device plugin DaemonSet on the GPU nodes (off when the NVIDIA GPU Operator manages it).
    Bottlerocket's NVIDIA AMIs run their own; eksctl's copy is never installed, so one version runs everywhere."""
    timeout_minutes: int = field(
        default=40,
        metadata=_check(
            lambda v: 5 <= v <= 300, "is not between 5 and 300 minutes", "set it to a number of minutes like 40"
        ),
    )
    """eksctl's ``--timeout`` for creating, scaling and deleting (GPU node groups with EFA often take over 25)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags eksctl puts on every AWS resource it creates (cost allocation, ownership)."""

    @property
    def gpu_ami_family(self) -> str:
        """The GPU nodes' AMI family (what the core's EKS layer and the job renderer read)."""
        return self.ami_family

    def validate(self, config: Config) -> None:
        """Refuse settings eksctl would refuse, before anything runs (only when ``cluster.backend`` is ``eksctl``).

        :raises ConfigError: a contradiction, naming the setting and the fix.
        """
        if config.cluster.backend != "eksctl":
            return
        cluster = config.cluster
        if self.gpu_nodegroup == self.system_nodegroup:
            raise ConfigError(
                "eksctl.gpu_nodegroup",
                f"is {self.gpu_nodegroup!r}, the same as eksctl.system_nodegroup",
                "give the two node groups different names",
            )
        if self.ami_family == "AmazonLinux2" and _minor(cluster.kubernetes_version) >= 33:
            raise ConfigError(
                "eksctl.ami_family",
                f"AmazonLinux2 has no EKS AMI for Kubernetes {cluster.kubernetes_version}",
                "use AmazonLinux2023 (or Bottlerocket)",
            )
        if len(cluster.availability_zones) == 1:
            raise ConfigError(
                "cluster.availability_zones",
                f"names one zone ({cluster.availability_zones[0]}) but EKS needs subnets in two at least",
                f"add a second zone of {cluster.region} (the GPU nodes stay in the first)",
            )
        for name, version in self.addon_versions.items():
            if not _ADDON.match(name) or not _ADDON_VERSION.match(version):
                raise ConfigError(
                    "eksctl.addon_versions",
                    f"{name}={version} is not an EKS add-on name and version",
                    "write add-on=version, like vpc-cni=v1.19.2-eksbuild.1 (or latest)",
                )
        for key in self.tags:
            if not _TAG_KEY.match(key) or key.lower().startswith("aws:"):
                raise ConfigError(
                    "eksctl.tags", f"{key!r} is not an AWS tag key", "use up to 127 letters, digits and _ .:/=+-@"
                )
        self._check_placement(config)

    def _check_placement(self, config: Config) -> None:
        cluster = config.cluster
        if self.placement_group_name and not cluster.placement_group:
            raise ConfigError(
                "eksctl.placement_group_name",
                "is set but cluster.placement_group is off",
                "turn cluster.placement_group on, or unset eksctl.placement_group_name",
            )
        if not cluster.placement_group or self.placement_group_name:
            return
        if cluster.capacity_reservation_id:
            raise ConfigError(
                "cluster.placement_group",
                "is on with a capacity reservation, whose instances live in the placement group it was created in",
                "set eksctl.placement_group_name to that group, or turn cluster.placement_group off",
            )
        if not cluster.efa:
            raise ConfigError(
                "cluster.placement_group",
                "is on without EFA: eksctl creates a placement group only for EFA node groups",
                "set eksctl.placement_group_name to an existing cluster placement group, or turn cluster.efa on",
            )


def _minor(version: str) -> int:
    return int(version.split(".")[1])
