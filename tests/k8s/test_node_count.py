"""One node count: ``--nodes`` is the cluster's nodes and the job runs one worker per node; a job that needs more
nodes than the cluster can ever have is refused at render and submit, and ``run`` on a cluster with fewer nodes
now is refused unless ``--scale``, which scales it first (a recording backend behind the loopback API server)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fsdp_sdk.client import Client
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import resolve
from fsdp_sdk.errors import ConfigError
from fsdp_sdk.hookspecs import hookimpl
from fsdp_sdk.k8s.render import render_job
from fsdp_sdk.plugins import build_plugins

from .fake_apiserver import FakeApiServer
from .test_estimate_on_clusters import REGISTRY, ScalingBackend, _client, _operator
from .tools import cli

SMALL = {"model.preset": "llama2-7b", "train.steps": 5}
TOO_MANY = (
    "the job needs 4 nodes but cluster fsdp-sdk can have at most 2 (cluster.max_nodes); give the cluster 4 nodes "
    "(--nodes 4; a running one: 'fsdp-sdk scale 4') or run fewer workers (--workers 2)"
)


@pytest.mark.parametrize(
    ("data", "nodes", "workers"),
    [
        ({}, 2, 2),  # neither set
        ({"cluster": {"nodes": 3}}, 3, 3),  # the workers follow the cluster
        ({"job": {"num_workers": 3}}, 3, 3),  # the cluster follows the workers (NUM_WORKERS in a seed .env)
        ({"cluster": {"nodes": 4}, "job": {"num_workers": 2}}, 4, 2),  # fewer workers than nodes
        ({"cluster": {"max_nodes": 2}, "job": {"num_workers": 3}}, 2, 3),  # bounded: render refuses (below)
    ],
)
def test_the_workers_and_the_nodes_follow_each_other(data: dict, nodes: int, workers: int) -> None:
    plugins = build_plugins(autoload=False)
    config = resolve(Config.from_dict(data), plugins, validate_trainer=False)
    assert (config.cluster.nodes, config.job.num_workers) == (nodes, workers)
    again = resolve(config, plugins, validate_trainer=False)
    assert (again.cluster.nodes, again.job.num_workers, again.cluster.max_nodes) == (
        nodes,
        workers,
        config.cluster.max_nodes,
    )


def test_render_refuses_more_workers_than_the_cluster_can_ever_have() -> None:
    plugins = build_plugins(autoload=False)
    config = Config.from_dict({"cluster": {"nodes": 2}, "job": {"num_workers": 4, "registry": REGISTRY}})
    with pytest.raises(ConfigError) as error:
        render_job(config, plugins=plugins)
    assert str(error.value) == f"job.num_workers (from dict): {TOO_MANY}"
    assert (
        render_job(config.with_overrides({"cluster.max_nodes": 4}), plugins=plugins)[0]["spec"]["pytorchReplicaSpecs"][
            "Worker"
        ]["replicas"]
        == 4
    )


def test_job_render_and_submit_refuse_it_in_one_line(
    isolated_cli: None, kubeconfig: Path, apiserver: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (["job", "render"], ["job", "submit", "--kubeconfig", str(kubeconfig)]):
        code, out, err = cli(capsys, *command, "--nodes", "2", "--workers", "4", "--set", f"job.registry={REGISTRY}")
        assert code == 2 and out == "", err
        assert err == f"Error: --workers (from command line): {TOO_MANY}\n"
    assert apiserver.writes() == []
    code, out, err = cli(capsys, "job", "render", "--nodes", "4", "--set", f"job.registry={REGISTRY}")
    assert code == 0 and "replicas: 4" in out, err


def test_run_on_a_smaller_cluster_is_refused_without_scale(apiserver: FakeApiServer, tmp_path: Path) -> None:
    client = _client(apiserver, tmp_path, nodes=4)  # the cluster runs 2 nodes
    with pytest.raises(ConfigError) as error:
        client.run(trainer_overrides=SMALL)
    assert str(error.value) == (
        "cluster.nodes: the job needs 4 nodes but cluster fsdp-sdk has 2; add --scale to scale it to 4 nodes first, "
        "or run fewer workers (--workers 2)"
    )
    assert ScalingBackend.sizes == [] and apiserver.writes() == []
    lines: list[str] = []
    client.progress = lines.append
    assert client.run(trainer_overrides=SMALL, scale=True, dry_run=True).dry_run
    assert ScalingBackend.sizes == []  # a dry run says so and scales nothing
    assert "the job needs 4 nodes but cluster fsdp-sdk has 2: it would be scaled to 4 nodes first" in lines[0]


def test_run_with_scale_scales_the_cluster_first_and_says_so(apiserver: FakeApiServer, tmp_path: Path) -> None:
    client = _client(apiserver, tmp_path, nodes=4)
    lines: list[str] = []
    client.progress = lines.append
    stop = threading.Event()
    threading.Thread(target=_operator, args=(apiserver, stop, {4: 1000.0}), daemon=True).start()
    try:
        result = client.run(trainer_overrides=SMALL, scale=True)
    finally:
        stop.set()
    assert ScalingBackend.sizes == [4]
    assert lines[0] == "the job needs 4 nodes but cluster fsdp-sdk has 2: scaling it to 4 nodes first"
    assert result.summary["world_size"] == 32
    (job,) = [
        w.body for w in apiserver.writes() if w.method in ("PATCH", "POST") and w.body.get("kind") == "PyTorchJob"
    ]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


def test_up_with_no_gpu_nodes_yet_is_not_a_job_of_no_workers(isolated_cli: None, capsys) -> None:
    code, out, err = cli(capsys, "up", "--backend", "local", "--nodes", "0", "--dry-run", "--json")
    assert code == 0, err
    assert "runs: 1 torchrun agents" in " ".join(json.loads(out)["plan"]["steps"])


def test_scale_n_gives_the_cluster_n_nodes_within_its_configured_maximum(
    isolated_cli: None, apiserver: FakeApiServer, tmp_path: Path, capsys
) -> None:
    from fsdp_sdk.plugins import get_plugins

    _client(apiserver, tmp_path)  # resets the recording backend
    get_plugins().register(Register(), name="fake-kube")
    code, out, err = cli(capsys, "scale", "4", "--backend", "fake-kube", "--json")
    assert code == 0 and json.loads(out)["nodes"] == 4, err  # NODES is cluster.nodes: the maximum, unset, follows it
    assert ScalingBackend.sizes == [4]
    code, out, err = cli(capsys, "scale", "5", "--backend", "fake-kube", "--set", "cluster.max_nodes=4")
    assert (
        code == 2
        and out == ""
        and err
        == (
            "Error: NODES (from command line): 5 is outside min_nodes..max_nodes (0..4); "
            "make cluster.min_nodes <= NODES <= cluster.max_nodes\n"
        )
    )
    assert ScalingBackend.sizes == [4]


class Register:
    @hookimpl
    def fsdp_sdk_register_backends(self, registry) -> None:
        registry.add(ScalingBackend)


class EksScalingBackend(ScalingBackend):
    """The recording cluster, as an EKS backend's (its GPU node group can target a capacity reservation)."""

    eks_cluster = True


@pytest.mark.parametrize(("workers", "refused"), [(4, False), (6, True)])
def test_a_job_needing_more_nodes_than_the_reservation_holds_is_refused(
    apiserver: FakeApiServer, tmp_path: Path, stubbed, monkeypatch: pytest.MonkeyPatch, workers: int, refused: bool
) -> None:
    """``run`` (before scaling) and ``job submit`` (before anything is sent) on an EKS cluster whose GPU nodes
    target a capacity reservation of 4 instances."""
    import fsdp_sdk.aws.preflight

    ec2, stubber = stubbed("ec2")
    reservation = "cr-0123456789abcdef0"
    found = {"CapacityReservationId": reservation, "InstanceType": "p5.48xlarge", "TotalInstanceCount": 4}
    for _ in range(2):
        stubber.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [found]},
            {"CapacityReservationIds": [reservation]},
        )
    monkeypatch.setattr(fsdp_sdk.aws.preflight, "aws_client", lambda service, region: ec2)
    client = _client(apiserver, tmp_path, nodes=8, capacity_reservation_id=reservation)
    client.backend = EksScalingBackend()
    resolved = client.resolved.with_overrides({"job.num_workers": workers})
    config = resolved.config
    if not refused:
        # within the reservation: only the scaling is said
        client.cluster_workflow.ensure_nodes(resolved, scale=True, dry_run=True)
        client.cluster_workflow.check_reservation(config)
        return
    message = (
        "job.num_workers (from overrides): the job needs 6 nodes but the capacity reservation "
        "cr-0123456789abcdef0 of cluster fsdp-sdk holds 4 instances; run fewer workers (--workers 4) or move the "
        "cluster to a reservation of 6 or more (cluster.capacity_reservation_id)"
    )
    with pytest.raises(ConfigError) as error:
        client.cluster_workflow.ensure_nodes(resolved, scale=True, dry_run=True)
    assert str(error.value) == message
    submitting = Client(config, plugins=client.loaded_plugins)
    submitting.backend = EksScalingBackend()
    with pytest.raises(ConfigError) as error:
        submitting.submit_job(force=True)
    assert str(error.value) == message
    assert ScalingBackend.sizes == [] and apiserver.writes() == []


def test_run_on_a_cluster_scaled_to_zero_scales_it_back_from_the_library_as_from_the_cli(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """The idle controller scaled the GPU nodes to 0: ``Client.run`` (which ``fsdp-sdk run`` calls, with nothing
    of its own before it) scales them back to ``cluster.nodes`` without ``scale``, says so, then runs."""
    client = _client(apiserver, tmp_path, nodes=2)
    ScalingBackend.sizes.append(0)  # the idle controller's work
    lines: list[str] = []
    client.progress = lines.append
    with pytest.raises(ConfigError, match="has 0; add --scale"):
        client.run(trainer_overrides=SMALL, dry_run=True)  # a dry run scales nothing, and says what is needed
    assert ScalingBackend.sizes == [0]
    stop = threading.Event()
    threading.Thread(target=_operator, args=(apiserver, stop, {2: 1000.0}), daemon=True).start()
    try:
        result = client.run(trainer_overrides=SMALL)
    finally:
        stop.set()
    assert ScalingBackend.sizes == [0, 2]
    assert lines[0] == "the GPU nodes of cluster 'fsdp-sdk' are at 0: scaling them to 2"
    assert result.summary["world_size"] == 16
