"""Fixtures of the rehearsal: the whole path from an empty state directory, every outside party simulated.

* ``cluster``: the loopback Kubernetes API server (:mod:`k8s.fake_apiserver`) with Nodes, every body validated
  against the Kubernetes OpenAPI and the Training Operator and Trainer v2.3 CRDs (pruned fields refused), immutable
  fields and server-side apply ownership enforced (:mod:`k8s.server_apply`), and a :class:`~rehearsal.nodes.Nodes`
  controller: device plugins advertise what the nodes' hardware has where their pods can run;
* the eksctl backend's fixtures (:mod:`eksctl.conftest`): moto for AWS, the recording eksctl acting on it and, with
  ``FAKE_EKSCTL_KUBECONFIG``, on the cluster as the real one does (:mod:`eksctl.eksctl_in_cluster`), the Stubber for
  what moto lacks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eksctl.conftest import answers, eksctl_env, tools  # noqa: F401 - fixtures used by the rehearsal tests
from k8s.fake_apiserver import BUILTIN_RESOURCES, FakeApiServer, Resource, schema_validators

from .nodes import Nodes

NODE = Resource("", "v1", "Node", "nodes", namespaced=False, subresources=("status",), short_names=("no",))
JOB = Resource("batch", "v1", "Job", "jobs", subresources=("status",))


@pytest.fixture
def cluster(
    pytorchjob_crd: Path, trainjob_crd: Path, clustertrainingruntime_crd: Path, tmp_path: Path
) -> Iterator[FakeApiServer]:
    """The rehearsal's Kubernetes: see the module docstring. Its kubeconfig is ``<tmp_path>/cluster-kubeconfig``."""
    from fsdp_sdk.k8s.validate import validate_builtin

    validators = schema_validators(pytorchjob_crd, trainjob_crd, runtime_crd=clustertrainingruntime_crd)
    for resource in (NODE, JOB):
        validators[(resource.group_version, resource.kind)] = validate_builtin
    with FakeApiServer(validators, resources=(*BUILTIN_RESOURCES, NODE, JOB)) as server:
        server.write_kubeconfig(tmp_path / "cluster-kubeconfig")
        with Nodes(server):
            yield server


@pytest.fixture(scope="session")
def image_python() -> str:
    """``bin/python`` of the trainer image's environment (built from the Dockerfile's install lines, cached by the
    build's content tag: see :mod:`rehearsal.image`)."""
    from .image import build_image_venv

    trainer = Path(__file__).resolve().parents[2] / "packages" / "trainer"
    return str(build_image_venv(trainer) / "bin" / "python")
