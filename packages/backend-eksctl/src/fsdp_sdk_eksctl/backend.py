"""The ``eksctl`` backend: EKS GPU clusters created, scaled and deleted with the real ``eksctl``.

* :meth:`EksctlBackend.plan` (pure) renders the ClusterConfig, the device plugin DaemonSets, the steps
  and the hourly cost (:mod:`fsdp_sdk_eksctl.plan`);
* :meth:`~EksctlBackend.apply` looks at what exists in AWS (:mod:`fsdp_sdk_eksctl.observe`) and acts on
  the plan: ``eksctl create cluster -f`` for a new cluster; on an existing one it creates the missing
  node groups and scales the others to the planned sizes, and says what it did; stacks an interrupted
  or failed ``up`` left behind are deleted first. Then it writes the kubeconfig from
  ``eks:DescribeCluster``. Core then applies the plan's Kubernetes objects (etcd, the device plugins),
  installs the Training Operator and calls ``fsdp_sdk_cluster_created``;
* :meth:`~EksctlBackend.scale` runs ``eksctl scale nodegroup`` on the GPU node group, within
  ``cluster.min_nodes..cluster.max_nodes``;
* :meth:`~EksctlBackend.down` runs ``eksctl delete cluster`` (with ``--force`` when only the stacks of a
  failed ``up`` remain) and removes the local state;
* :meth:`~EksctlBackend.status` reads the cluster, node groups, add-ons and stacks through boto3.

Every eksctl run goes through :func:`fsdp_sdk.tools.run_tool`: its output streams as
``[eksctl mm:ss] line``, and a failure is one line naming the step and eksctl's last lines.
Ctrl-C stops eksctl and leaves a state from which ``up`` continues or ``down`` cleans up.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fsdp_sdk.backends.base import ClusterBackend, ClusterState, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.errors import BackendError, ConfigError, FsdpSdkError
from fsdp_sdk.tools import ToolError, run_tool
from fsdp_sdk_eksctl import commands
from fsdp_sdk_eksctl.observe import Observed, observe
from fsdp_sdk_eksctl.plan import make_plan
from fsdp_sdk_eksctl.state import StateDir

if TYPE_CHECKING:
    from fsdp_sdk.config import Config
    from fsdp_sdk.contracts import ResolvedConfig

__all__ = ["EksctlBackend"]

_BUSY = {"CREATING", "UPDATING", "DELETING", "PENDING"}
_BROKEN_NODEGROUP = {"CREATE_FAILED", "DELETE_FAILED", "DEGRADED"}


class EksctlBackend(ClusterBackend):
    """EKS clusters of GPU nodes, made with eksctl (see the module docstring)."""

    name = "eksctl"
    description = "Amazon EKS GPU clusters created with eksctl (EFA, capacity reservations, Capacity Blocks)"
    eks_cluster = True

    #: Seconds between two looks at a cluster or stack that is still changing.
    poll_s: ClassVar[float] = 20.0

    # ------------------------------------------------------------------ plan

    def plan(self, resolved: ResolvedConfig) -> Plan:
        return make_plan(self.name, resolved.config, resolved.instance)

    # ------------------------------------------------------------------ up

    def apply(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> ClusterStatus:
        details = plan.details
        paths = StateDir(Path(details["state_dir"]))
        name = plan.cluster
        timeout = int(details["timeout_minutes"])
        with paths.lock("up"):
            observed = self._settle(config, progress, timeout)
            self._refuse_foreign(observed, name)
            try:
                if observed.cluster is not None and observed.cluster_status == "FAILED":
                    raise BackendError(
                        f"eksctl: EKS cluster {name} is FAILED; delete it with 'fsdp-sdk down --backend eksctl', "
                        "then run 'fsdp-sdk up' again"
                    )
                paths.write_config(_yaml(plan.resources[0]))
                if observed.cluster is None:
                    if observed.leftover_stacks:
                        self._delete_leftovers(observed, config, paths, progress, timeout)
                    paths.record("creating")
                    progress(f"creating EKS cluster {name} in {details['region']} (eksctl takes 15 to 40 minutes)")
                    self._eksctl(details["create_cluster"], f"create the EKS cluster {name}", progress)
                    progress(f"EKS cluster {name} created")
                else:
                    paths.record("reconciling")
                    self._reconcile(observed, config, plan, progress)
                from fsdp_sdk.aws.kubeconfig import eks_kubeconfig

                eks_kubeconfig(config, paths.kubeconfig)
                progress(f"wrote the cluster's kubeconfig to {paths.kubeconfig}")
            except KeyboardInterrupt:
                paths.record("interrupted")
                progress(
                    f"interrupted: 'fsdp-sdk up' picks up from here, 'fsdp-sdk down' deletes what eksctl created "
                    f"(local state in {paths.root})"
                )
                raise
            except FsdpSdkError as error:
                paths.record("failed", error=str(error))
                raise
            paths.record("ready")
        return self.status(config)

    def _reconcile(self, observed: Observed, config: Config, plan: Plan, progress: ProgressCallback) -> None:
        """Bring an existing cluster's node groups to the plan: create the missing, scale the others."""
        details, name = plan.details, plan.cluster
        wanted: dict[str, dict[str, Any]] = details["nodegroups"]
        for group, want in wanted.items():
            have = observed.nodegroups.get(group)
            if have is not None and have.instance_types and want["instance_type"] not in have.instance_types:
                raise BackendError(
                    f"eksctl: node group {group} of {name} runs {','.join(have.instance_types)}, not the planned "
                    f"{want['instance_type']}; eksctl cannot change a node group's instance type: delete the cluster "
                    "with 'fsdp-sdk down', or give the new node group another name (eksctl.gpu_nodegroup)"
                )
        done: list[str] = []
        missing = [group for group in wanted if group not in observed.nodegroups]
        timeout = int(details["timeout_minutes"])
        if missing:
            progress(f"EKS cluster {name} exists; creating the missing node group(s) {', '.join(missing)}")
            argv = commands.create_nodegroups(details["config_file"], missing, timeout_minutes=timeout)
            self._eksctl(argv, f"create the node group(s) {', '.join(missing)} of {name}", progress)
            done.append(f"created node group(s) {', '.join(missing)}")
        for group, want in wanted.items():
            have = observed.nodegroups.get(group)
            if have is None:
                continue
            sizes = (want["nodes"], want["min"], want["max"])
            if (have.desired, have.min_size, have.max_size) == sizes:
                continue
            argv = commands.scale_nodegroup(
                name,
                details["region"],
                group,
                nodes=want["nodes"],
                min_nodes=want["min"],
                max_nodes=want["max"],
                timeout_minutes=timeout,
            )
            self._eksctl(argv, f"scale the node group {group} of {name}", progress)
            done.append(
                f"scaled {group} from {have.desired} to {want['nodes']} nodes (min {want['min']}, max {want['max']})"
            )
        for group in sorted(set(observed.nodegroups) - set(wanted)):
            progress(f"node group {group} of {name} is not in the plan: left as it is")
        if done:
            progress(f"EKS cluster {name} exists: " + "; ".join(done))
        else:
            progress(f"EKS cluster {name} exists and matches the plan: nothing to change")

    def _delete_leftovers(
        self, observed: Observed, config: Config, paths: StateDir, progress: ProgressCallback, timeout: int
    ) -> None:
        stacks = ", ".join(f"{stack} ({status})" for stack, status in observed.leftover_stacks)
        progress(f"an earlier 'up' of {config.cluster.name} stopped half-way and left {stacks}; deleting them first")
        paths.record("cleaning")
        argv = commands.delete_cluster(config.cluster.name, config.cluster.region, force=True, timeout_minutes=timeout)
        self._eksctl(argv, f"delete the stacks an earlier up of {config.cluster.name} left", progress)

    # ------------------------------------------------------------------ down

    def down(self, config: Config, *, dry_run: bool = False, progress: ProgressCallback = no_progress) -> ClusterStatus:
        name, region = config.cluster.name, config.cluster.region
        paths = StateDir.of(config.cluster.state_dir, name)
        timeout = config.section("eksctl").timeout_minutes
        observed = observe(config)
        self._refuse_foreign(observed, name)
        if observed.absent:
            if not dry_run and paths.root.exists():
                paths.remove()
                progress(f"removed the local state in {paths.root}")
            progress(f"no EKS cluster {name} in {region}: nothing to delete")
            return self._status(config, observed)
        force = observed.cluster is None
        argv = commands.delete_cluster(name, region, force=force, timeout_minutes=timeout)
        if dry_run:
            what = f"EKS cluster {name}" if not force else "the stacks an interrupted or failed 'up' left"
            progress(f"would delete {what} in {region}: {' '.join(argv)}")
            return self._status(config, observed)
        with paths.lock("down"):
            observed = self._settle(config, progress, timeout)
            paths.record("deleting")
            try:
                if not observed.absent:
                    progress(f"deleting EKS cluster {name} in {region} (eksctl takes 10 to 20 minutes)")
                    argv = commands.delete_cluster(
                        name, region, force=observed.cluster is None, timeout_minutes=timeout
                    )
                    self._eksctl(argv, f"delete the EKS cluster {name}", progress, retry="down")
            except KeyboardInterrupt:
                paths.record("interrupted")
                progress("interrupted: run 'fsdp-sdk down' again to finish deleting")
                raise
            except BackendError as error:
                paths.record("failed", error=str(error))
                raise
            left = observe(config)
            if not left.absent:
                remains = [f"cluster {left.cluster_status}"] if left.cluster else []
                remains += [f"{stack} ({status})" for stack, status in left.stacks]
                paths.record("failed", error="left: " + ", ".join(remains))
                raise BackendError(
                    f"eksctl: deleted {name}, but {', '.join(remains)} remain(s); run 'fsdp-sdk down' again, "
                    "or see the CloudFormation console for what blocks the deletion"
                )
            paths.remove()
        progress(f"deleted EKS cluster {name} and its local state")
        return self._status(config, left)

    # ------------------------------------------------------------------ scale

    def scale(
        self, config: Config, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        cluster = config.cluster
        low, high = cluster.min_nodes, cluster.max_nodes if cluster.max_nodes is not None else cluster.nodes
        if not low <= nodes <= high:
            raise ConfigError(
                "nodes",
                f"{nodes} is outside cluster.min_nodes..cluster.max_nodes ({low}..{high})",
                "pick a number in that range, or change cluster.min_nodes / cluster.max_nodes",
            )
        settings = config.section("eksctl")
        group = settings.gpu_nodegroup
        observed = observe(config)
        if observed.cluster is None:
            raise BackendError(
                f"eksctl: no EKS cluster {cluster.name} in {cluster.region} to scale; run 'fsdp-sdk up --backend eksctl'"
            )
        if group not in observed.nodegroups:
            raise BackendError(f"eksctl: cluster {cluster.name} has no node group {group}; 'fsdp-sdk up' creates it")
        argv = commands.scale_nodegroup(
            cluster.name,
            cluster.region,
            group,
            nodes=nodes,
            min_nodes=low,
            max_nodes=high,
            timeout_minutes=settings.timeout_minutes,
        )
        if dry_run:
            progress(
                f"would scale node group {group} from {observed.nodegroups[group].desired} to {nodes}: {' '.join(argv)}"
            )
            return self._status(config, observed)
        paths = StateDir.of(cluster.state_dir, cluster.name)
        with paths.lock("scale"):
            self._eksctl(argv, f"scale the node group {group} of {cluster.name} to {nodes}", progress)
            paths.record("ready", scaled_to=nodes)
        progress(f"node group {group} of {cluster.name} scaled to {nodes} node(s)")
        return self.status(config)

    # ------------------------------------------------------------------ status

    def status(self, config: Config) -> ClusterStatus:
        """The cluster as EKS and CloudFormation see it (reads only). Without AWS credentials and without local state
        of an earlier ``up`` it is ``absent``, as the terraform backend says without state, with the reason in
        ``details["why"]``; with local state, the missing credentials are the error (exit 2), as there."""

        try:
            observed = observe(config, addons=True)
        except ConfigError as error:
            if StateDir.of(config.cluster.state_dir, config.cluster.name).read() is not None:
                raise
            why = f"no local state of an 'up', and EKS was not asked: {error}"
            details = {"region": config.cluster.region, "why": why}
            return ClusterStatus(self.name, config.cluster.name, "absent", 0, None, details)
        return self._status(config, observed)

    def _status(self, config: Config, observed: Observed) -> ClusterStatus:
        name = config.cluster.name
        paths = StateDir.of(config.cluster.state_dir, name)
        record = paths.read()
        details: dict[str, Any] = {"region": config.cluster.region}
        if record is not None:
            details["last_operation"] = record.get("phase")
        if observed.absent:
            if record is not None:
                details["problems"] = [
                    f"local state of an earlier run remains in {paths.root}: 'fsdp-sdk down' removes it"
                ]
            return ClusterStatus(self.name, name, "absent", 0, None, details)
        problems: list[str] = []
        cluster = observed.cluster or {}
        details["cluster_status"] = observed.cluster_status or "missing"
        if cluster:
            details["kubernetes_version"] = cluster.get("version")
        if paths.kubeconfig.exists():
            details["kubeconfig"] = str(paths.kubeconfig)
        details["nodegroups"] = [group.to_dict() for group in observed.nodegroups.values()]
        if observed.addons is not None:
            details["addons"] = [addon.to_dict() for addon in observed.addons]
        if observed.addons_error:
            details["addons_error"] = observed.addons_error
        if observed.stacks:
            details["stacks"] = [{"name": stack, "status": status} for stack, status in observed.stacks]
        state = self._state(observed, config, problems)
        if problems:
            details["problems"] = problems
        gpu = observed.nodegroups.get(config.section("eksctl").gpu_nodegroup)
        nodes = gpu.desired if gpu is not None else 0
        return ClusterStatus(self.name, name, state, nodes, cluster.get("endpoint"), details)

    @staticmethod
    def _state(observed: Observed, config: Config, problems: list[str]) -> ClusterState:
        if observed.cluster is None:
            stacks = ", ".join(f"{stack} ({status})" for stack, status in observed.stacks)
            if observed.stacks_busy:
                problems.append(f"CloudFormation is still working on {stacks}")
                return "pending"
            problems.append(
                f"{stacks} left by an interrupted or failed 'up': 'fsdp-sdk up' continues, 'fsdp-sdk down' deletes them"
            )
            return "degraded"
        status = observed.cluster_status
        problems += [f"control plane: {issue}" for issue in observed.cluster_issues()]
        if status in _BUSY:
            return "pending"
        if status != "ACTIVE":
            problems.append(f"the EKS cluster is {status}")
            return "degraded"
        group = config.section("eksctl").gpu_nodegroup
        state: ClusterState = "ready"
        if group not in observed.nodegroups:
            problems.append(f"node group {group} is missing: 'fsdp-sdk up' creates it")
            state = "degraded"
        for ng in observed.nodegroups.values():
            problems += [f"node group {ng.name}: {issue}" for issue in ng.health_issues]
            if ng.status in _BUSY and state == "ready":
                state = "pending"
            elif ng.status in _BROKEN_NODEGROUP or ng.health_issues:
                if ng.status != "ACTIVE":
                    problems.append(f"node group {ng.name} is {ng.status}")
                state = "degraded"
        for addon in observed.addons or ():
            if addon.status in ("DEGRADED", "CREATE_FAILED", "UPDATE_FAILED"):
                problems.append(
                    f"add-on {addon.name} is {addon.status}" + "".join(f": {i}" for i in addon.health_issues)
                )
                state = "degraded"
        return state

    def kubeconfig(self, config: Config) -> Path | None:
        return StateDir.of(config.cluster.state_dir, config.cluster.name).kubeconfig

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _refuse_foreign(observed: Observed, name: str) -> None:
        if observed.cluster is not None and not observed.stacks:
            raise BackendError(
                f"eksctl: EKS cluster {name} exists but eksctl did not create it (no eksctl stack is tagged with it); "
                "manage it with the tool that created it, or choose another cluster.name"
            )

    def _settle(self, config: Config, progress: ProgressCallback, timeout_minutes: int) -> Observed:
        """Observe the cluster, waiting while it or its stacks are still changing (another or an earlier run)."""
        deadline = time.monotonic() + timeout_minutes * 60
        while True:
            observed = observe(config)
            busy = [f"cluster {observed.cluster_status}"] if observed.cluster_status in _BUSY else []
            busy += [f"{stack} {status}" for stack, status in observed.stacks if status.endswith("_IN_PROGRESS")]
            busy += [f"node group {ng.name} {ng.status}" for ng in observed.nodegroups.values() if ng.status in _BUSY]
            if not busy:
                return observed
            if time.monotonic() >= deadline:
                raise BackendError(
                    f"eksctl: {config.cluster.name} is still changing after {timeout_minutes} minutes "
                    f"({', '.join(busy)}); run the command again later"
                )
            progress(f"waiting for {', '.join(busy)} to finish")
            time.sleep(self.poll_s)

    @staticmethod
    def _eksctl(argv: Sequence[str], step: str, progress: ProgressCallback, *, retry: str = "up") -> None:
        progress("running " + " ".join(argv))
        try:
            run_tool(list(argv), step=step, progress=progress)
        except ToolError as error:
            hint = (
                "'fsdp-sdk up' tries again, 'fsdp-sdk down' deletes what was created"
                if retry == "up"
                else "'fsdp-sdk down' tries again (deleting is safe to repeat)"
            )
            raise BackendError(f"{error}; {hint}") from error


def _yaml(document: Mapping[str, Any]) -> str:
    import yaml  # imported here: the CLI starts without it

    header = "# Written by fsdp-sdk (backend eksctl): the ClusterConfig of the applied plan.\n"
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
