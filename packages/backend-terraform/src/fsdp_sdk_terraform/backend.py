"""The Terraform backend: ``fsdp-sdk up --backend terraform``.

``plan()`` is pure: the inputs (``terraform.tfvars.json``), the backend block, the steps, the device
plugins core applies afterwards, the hourly cost. ``apply()`` acts on exactly that plan in the
cluster's working directory (``<cluster.state_dir>/terraform/<cluster>/``): it checks the terraform
binary, writes the configuration, the inputs and the backend block, runs ``terraform init``, ``terraform
plan -out up.tfplan``, prints what the saved plan adds, changes and destroys (from ``terraform show
-json``), applies that saved plan, and writes the cluster's kubeconfig. ``scale`` changes
``gpu_nodes`` and applies the same way; ``down`` plans the destruction, prints it, applies it, and
removes the working directory; ``status`` reads ``terraform output -json`` and the cluster and node
groups from EKS. ``preview()`` (``up --dry-run``) runs ``terraform plan`` read-only, without the state
lock, in a scratch copy of the working directory, so the dry run shows Terraform's own summary and
changes nothing.

An interrupted command (Ctrl-C, SIGTERM) stops terraform, which records what it created; ``up``
then continues and ``down`` deletes it. A state lock held by another run fails after
``terraform.lock_timeout_s`` with a line naming the holder.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from fsdp_sdk.aws.eks import hourly_cost
from fsdp_sdk.aws.kubeconfig import eks_kubeconfig, kubeconfig_path
from fsdp_sdk.backends.base import ClusterBackend, ClusterState, ClusterStatus, Plan, ProgressCallback, no_progress
from fsdp_sdk.config import Config
from fsdp_sdk.config.resolution import find_instance_type
from fsdp_sdk.contracts import ResolvedConfig
from fsdp_sdk.errors import BackendError, ConfigError
from fsdp_sdk.resolved import Resolved
from fsdp_sdk.tools import ToolError
from fsdp_sdk_terraform import CONFIGURATION_DIR
from fsdp_sdk_terraform.changes import PlanChanges
from fsdp_sdk_terraform.device_plugins import NAMESPACE, render_device_plugins
from fsdp_sdk_terraform.inputs import check_inputs, gpu_group, terraform_inputs
from fsdp_sdk_terraform.settings import SECTION, TerraformSettings
from fsdp_sdk_terraform.tool import TerraformTool
from fsdp_sdk_terraform.workdir import (
    BACKEND_FILE,
    INPUTS_FILE,
    LOCAL_STATE_FILE,
    Workdir,
    backend_block,
    state_location,
)

__all__ = ["DOWN_PLAN", "SCALE_PLAN", "UP_PLAN", "TerraformBackend"]

#: The saved plans of up, scale and down (removed once applied).
UP_PLAN, SCALE_PLAN, DOWN_PLAN = "up.tfplan", "scale.tfplan", "down.tfplan"
#: Resource changes listed line by line before an apply; more are counted.
SHOWN_CHANGES = 40
# What the shipped configuration outputs besides the cluster's name (for a status without a working directory).
_DEFAULT_OUTPUTS = {"node_group_names": ["system", "gpu"], "gpu_node_group_name": "gpu"}
# Outputs repeated in the status details (the CA is long and says nothing to a reader).
_STATUS_OUTPUTS = ("cluster_name", "cluster_endpoint", "node_group_names", "gpu_node_group_name", "gpu_nodes", "vpc_id")


def _settings(config: Config) -> TerraformSettings:
    settings = config.section(SECTION)
    if not isinstance(settings, TerraformSettings):
        raise ConfigError(SECTION, "is not the Terraform backend's settings section", "reinstall fsdp-sdk-terraform")
    return settings


def _document(plan: Plan, name: str) -> dict[str, Any]:
    for resource in plan.resources:
        if resource.get("file") == name:
            return dict(resource["content"])
    raise ConfigError("plan", f"has no {name}", "make the plan with the terraform backend's plan()")


def _describe(inputs: Mapping[str, Any]) -> str:
    """What the shipped configuration creates for ``inputs``, in one sentence."""
    zones = inputs["availability_zones"]
    gpu = f"GPU node group {inputs['gpu_nodes']} x {inputs['gpu_instance_type']} in {zones[0] if zones else 'the first zone'}"
    efa = len(inputs["gpu_network_interfaces"])
    extras = [f"{efa} EFA interfaces each" if efa else "no EFA"]
    if inputs["capacity_reservation_id"]:
        kind = "Capacity Block" if inputs["capacity_type"] == "capacity-block" else "capacity reservation"
        extras.append(f"{kind} {inputs['capacity_reservation_id']}")
    elif inputs["capacity_type"] == "spot":
        extras.append("spot")
    if inputs["placement_group"]:
        extras.append("a cluster placement group of its own")
    volume = inputs["gpu_volume"]
    extras.append(f"{volume['size_gib']} GiB gp3 on {volume['device_name']}")
    if inputs["gpu_user_data"]:
        extras.append("local NVMe as RAID0")
    extras.append("tainted " + ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in inputs["gpu_taints"]))
    return (
        f"VPC {inputs['vpc_cidr']} with private subnets and a NAT gateway in {', '.join(zones) or '(zones to choose)'}; "
        f"EKS {inputs['kubernetes_version']} cluster {inputs['cluster_name']} with its IAM roles and OIDC provider; "
        f"system node group {inputs['system_nodes']} x {inputs['system_instance_type']}; {gpu} ({', '.join(extras)})"
    )


class TerraformBackend(ClusterBackend):
    """EKS clusters of GPU nodes from a Terraform configuration, one working directory and state per cluster."""

    name: ClassVar[str] = "terraform"
    description: ClassVar[str] = (
        "EKS GPU clusters from a Terraform configuration (VPC, EKS, EFA node groups, reservations)"
    )
    eks_cluster: ClassVar[bool] = True

    # ------------------------------------------------------------------ plan (pure)

    def plan(self, resolved: ResolvedConfig) -> Plan:
        """The inputs, backend block and steps of ``up``, and the device plugins core applies (no side effect)."""
        config, instance = resolved.config, resolved.instance
        settings = _settings(config)
        inputs = terraform_inputs(config, instance, settings)
        workdir = Workdir.of(config)
        backend = backend_block(config, settings)
        source = Path(settings.configuration) if settings.configuration else CONFIGURATION_DIR
        what = _describe(inputs) if settings.configuration is None else f"the configuration in {source}"
        group = gpu_group(config, instance, settings)
        device_plugins = render_device_plugins(config, group, settings)
        cost = hourly_cost(config, instance)
        steps = [
            f"check the terraform binary ({settings.binary}: Terraform 1.5 or newer"
            + (f", exactly {settings.version}" if settings.version else "")
            + ")",
            f"write the configuration and {INPUTS_FILE} to {workdir.path}",
            f"terraform init: state in {state_location(workdir.path, backend)}",
            f"terraform plan -out {UP_PLAN}: {what}",
            f"print what the saved plan adds, changes and destroys, then terraform apply {UP_PLAN}",
        ]
        if device_plugins:
            names = ", ".join(
                f"{obj['metadata']['name']} {obj['spec']['template']['spec']['containers'][0]['image']}"
                for obj in device_plugins
            )
            steps.append(f"once the cluster is up, apply the device plugins ({names}: DaemonSets in {NAMESPACE})")
        return Plan(
            backend=self.name,
            cluster=config.cluster.name,
            steps=steps,
            resources=[{"file": INPUTS_FILE, "content": inputs}, {"file": BACKEND_FILE, "content": backend}],
            hourly_cost_usd=cost.total,
            details={
                "cost": cost.to_dict(),
                "workdir": str(workdir.path),
                "configuration": str(source),
                "state": state_location(workdir.path, backend),
                "plan_file": UP_PLAN,
            },
            kubernetes=device_plugins,
        )

    # ------------------------------------------------------------------ running terraform

    def _tool(
        self, config: Config, settings: TerraformSettings, path: Path, progress: ProgressCallback
    ) -> TerraformTool:
        env: dict[str, str] = {}
        if not os.environ.get("TF_PLUGIN_CACHE_DIR"):
            cache = Path(settings.plugin_cache_dir or Path(config.cluster.state_dir) / "terraform" / "plugin-cache")
            env["TF_PLUGIN_CACHE_DIR"] = str(cache)  # created by the first init
        return TerraformTool(
            path,
            binary=settings.binary,
            lock_timeout_s=settings.lock_timeout_s,
            parallelism=settings.parallelism,
            env=env,
            progress=progress,
        )

    def _plan_and_apply(
        self, tf: TerraformTool, plan_file: str, progress: ProgressCallback, *, destroy: bool = False
    ) -> PlanChanges:
        """Save a plan, print its summary, apply exactly it; the saved plan is removed afterwards."""
        saved = tf.workdir / plan_file
        try:
            tf.plan(plan_file, destroy=destroy)
            changes = tf.show_plan(plan_file)
            progress(f"terraform plan: {changes.line()}")
            for change in changes.resources[:SHOWN_CHANGES]:
                progress(f"  {change.line()}")
            if len(changes.resources) > SHOWN_CHANGES:
                progress(f"  ... and {len(changes.resources) - SHOWN_CHANGES} more")
            if changes.empty:
                progress("no changes: the cluster is as the configuration says")
                return changes
            tf.apply(
                plan_file, step="delete the cluster (apply the destroy plan)" if destroy else "apply the saved plan"
            )
            return changes
        finally:
            saved.unlink(missing_ok=True)

    @staticmethod
    def _interrupted(progress: ProgressCallback, command: str) -> None:
        progress(
            f"interrupted: terraform stopped and recorded what it had done; 'fsdp-sdk {command}' again continues, "
            "'fsdp-sdk down' deletes what was created"
        )

    # ------------------------------------------------------------------ up

    def apply(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> ClusterStatus:
        """Run init, plan, print the plan's summary, apply the saved plan, write the kubeconfig.

        :raises ConfigError: a bad input (nothing runs), or a terraform binary too old.
        :raises ToolNotFoundError: terraform is not installed.
        :raises StateLockedError: another run holds the state lock.
        :raises ToolError: terraform failed (the step and Terraform's error lines).
        """
        if plan.backend != self.name or plan.cluster != config.cluster.name:
            raise ConfigError("plan", f"was made for {plan.backend}/{plan.cluster}", "make the plan with this backend")
        settings = _settings(config)
        inputs, backend = _document(plan, INPUTS_FILE), _document(plan, BACKEND_FILE)
        check_inputs(inputs)
        workdir = Workdir(Path(plan.details["workdir"]))
        tf = self._tool(config, settings, workdir.path, progress)
        version = tf.check_version(settings.version)
        progress(f"terraform {version}: working directory {workdir.path}, state in {plan.details['state']}")
        workdir.write(Path(plan.details["configuration"]), inputs, backend)
        try:
            tf.init()
            self._plan_and_apply(tf, UP_PLAN, progress)
        except KeyboardInterrupt:
            self._interrupted(progress, "up")
            raise
        self._write_kubeconfig(config, tf.outputs(), progress)
        return self.status(config)

    def _write_kubeconfig(self, config: Config, outputs: Mapping[str, Any], progress: ProgressCallback) -> None:
        name = outputs.get("cluster_name")
        if name != config.cluster.name:
            raise BackendError(
                f"terraform: the configuration's output cluster_name is {name!r}, not {config.cluster.name!r}; "
                "a configuration for this backend outputs the cluster_name it was given"
            )
        path = eks_kubeconfig(config, kubeconfig_path(config, self.name))
        progress(f"wrote the kubeconfig of {name} to {path}")

    def preview(self, config: Config, plan: Plan, *, progress: ProgressCallback = no_progress) -> Plan:
        """``terraform plan`` of ``plan``, read-only: in a scratch copy of the working directory, without the state
        lock; the plan comes back with Terraform's summary (``details["changes"]``, and in its apply step).

        Nothing of the cluster's working directory or state changes; providers Terraform downloads are kept in
        the shared provider cache (``terraform.plugin_cache_dir``).
        """
        settings = _settings(config)
        inputs, backend = _document(plan, INPUTS_FILE), _document(plan, BACKEND_FILE)
        check_inputs(inputs)
        workdir = Workdir(Path(plan.details["workdir"]))
        local = backend["terraform"]["backend"].get("local")
        if local is not None:  # read the cluster's state where it is; an absent one reads as empty
            state = workdir.path / local["path"]
            backend = {
                "terraform": {"backend": {"local": {"path": str(state) if state.is_file() else LOCAL_STATE_FILE}}}
            }
        with tempfile.TemporaryDirectory(prefix="fsdp-sdk-terraform-preview-") as scratch:
            copy = Workdir(Path(scratch))
            tf = self._tool(config, settings, copy.path, progress)
            tf.check_version(settings.version)
            copy.write(Path(plan.details["configuration"]), inputs, backend)
            try:
                tf.init()
                tf.plan("preview.tfplan", lock=False, step="plan the changes (read-only, for --dry-run)")
                changes = tf.show_plan("preview.tfplan")
            except ToolError as error:  # offline, no access to the state...: the SDK's plan still stands
                progress(f"terraform plan did not run, the plan shows fsdp-sdk's steps only: {error}")
                return dataclasses.replace(plan, details={**plan.details, "changes": None, "changes_error": str(error)})
        progress(f"terraform plan (dry run): {changes.line()}")
        steps = [
            f"{step} ({changes.line()})" if step.startswith("print what the saved plan") else step
            for step in plan.steps
        ]
        return dataclasses.replace(plan, steps=steps, details={**plan.details, "changes": changes.to_dict()})

    # ------------------------------------------------------------------ scale, down

    def scale(
        self, config: Config, nodes: int, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """Set ``gpu_nodes`` in the cluster's inputs and apply (plan, summary, saved plan), nothing else.

        :raises ConfigError: ``nodes`` is outside ``cluster.min_nodes..cluster.max_nodes``.
        :raises BackendError: the cluster has no working directory (``up`` first).
        """
        cluster = config.cluster
        low, high = cluster.min_nodes, cluster.max_nodes if cluster.max_nodes is not None else cluster.nodes
        if nodes < 0 or not low <= nodes <= high:
            raise ConfigError(
                "nodes",
                f"{nodes} is outside cluster.min_nodes..cluster.max_nodes ({low}..{high})",
                f"pass a number from {low} to {high}, or change cluster.max_nodes and run 'fsdp-sdk up'",
            )
        workdir = Workdir.of(config)
        inputs = workdir.read_inputs()
        if inputs is None or not workdir.has_configuration():
            raise BackendError(
                f"cluster {cluster.name!r} has no Terraform working directory at {workdir.path}; "
                "create it with 'fsdp-sdk up --backend terraform'"
            )
        if nodes > inputs["gpu_max_nodes"]:
            raise ConfigError(
                "nodes",
                f"{nodes} is above the node group's maximum {inputs['gpu_max_nodes']}",
                f"set cluster.max_nodes to {nodes} or more and run 'fsdp-sdk up' first",
            )
        if dry_run:
            progress(f"would set gpu_nodes from {inputs['gpu_nodes']} to {nodes} and apply (dry run: nothing changed)")
            return self.status(config)
        settings = _settings(config)
        tf = self._tool(config, settings, workdir.path, progress)
        tf.check_version(settings.version)
        progress(f"scaling the GPU node group of {cluster.name} from {inputs['gpu_nodes']} to {nodes}")
        workdir.write_inputs({**inputs, "gpu_nodes": nodes})
        try:
            tf.init()
            self._plan_and_apply(tf, SCALE_PLAN, progress)
        except KeyboardInterrupt:
            self._interrupted(progress, "scale")
            raise
        return self.status(config)

    def down(self, config: Config, *, dry_run: bool = False, progress: ProgressCallback = no_progress) -> ClusterStatus:
        """:meth:`delete` for a caller with the configuration alone: with the state in S3 and no working directory
        here, the instance type is looked up in the installed plugins (:class:`fsdp_sdk.Client` calls
        :meth:`delete` with its own resolved value instead)."""
        return self._down(config, None, dry_run=dry_run, progress=progress)

    def delete(
        self, resolved: ResolvedConfig, *, dry_run: bool = False, progress: ProgressCallback = no_progress
    ) -> ClusterStatus:
        """Plan the destruction, print it, apply it, then remove the working directory (local state included).

        Deleting an absent cluster is not an error; after a failed or interrupted ``up`` this deletes
        whatever the state records. With the state in S3 and no working directory here, the configuration and
        inputs are written again from ``resolved`` (its instance type: no plugin set is built).
        """
        return self._down(resolved.config, resolved, dry_run=dry_run, progress=progress)

    def _down(
        self, config: Config, resolved: ResolvedConfig | None, *, dry_run: bool, progress: ProgressCallback
    ) -> ClusterStatus:
        settings = _settings(config)
        workdir = Workdir.of(config)
        if dry_run:
            current = self.status(config)
            if current.state != "absent":
                progress(
                    f"would destroy everything in the state of {config.cluster.name} ({current.state}) and remove {workdir.path}"
                )
            return current
        if not workdir.has_configuration():
            if not settings.remote_state:  # no local state: nothing was created from here
                workdir.remove()
                return self._absent(config, "no working directory")
            # The state is in S3: destroy what it records, with the configuration and inputs written again
            if resolved is None:  # down(config) alone: the instance type comes from the installed plugins
                from fsdp_sdk.plugins import build_plugins

                plugins = build_plugins()  # hermetic: allowed (tests/core/test_embedding.py), Client calls delete()
                resolved = Resolved(config, find_instance_type(config, plugins), plugins)
            plan = self.plan(resolved)
            workdir.write(
                Path(plan.details["configuration"]), _document(plan, INPUTS_FILE), _document(plan, BACKEND_FILE)
            )
        tf = self._tool(config, settings, workdir.path, progress)
        tf.check_version(settings.version)
        progress(f"deleting cluster {config.cluster.name} (working directory {workdir.path})")
        try:
            tf.init()
            self._plan_and_apply(tf, DOWN_PLAN, progress, destroy=True)
        except KeyboardInterrupt:
            self._interrupted(progress, "down")
            raise
        left = tf.state_resources()
        if left:
            raise BackendError(
                f"terraform: {len(left)} resource(s) remain in the state after the deletion ({', '.join(left[:3])}); "
                "run 'fsdp-sdk down' again"
            )
        workdir.remove()
        progress(f"deleted cluster {config.cluster.name} and its working directory")
        return self._absent(config, "deleted")

    # ------------------------------------------------------------------ status

    def _absent(self, config: Config, why: str) -> ClusterStatus:
        return ClusterStatus(
            self.name, config.cluster.name, "absent", 0, None, {"workdir": str(Workdir.of(config).path), "why": why}
        )

    def status(self, config: Config) -> ClusterStatus:
        """The cluster as the state and EKS see it (reads only: ``terraform output -json``, boto3)."""
        settings = _settings(config)
        workdir = Workdir.of(config)
        backend = backend_block(config, settings)
        if not workdir.has_configuration():
            if settings.remote_state:  # the cluster may have been made from another machine: ask EKS
                details: dict[str, Any] = {"workdir": str(workdir.path), "state": state_location(workdir.path, backend)}
                found = self._from_eks(config, _DEFAULT_OUTPUTS | {"cluster_name": config.cluster.name}, details)
                if found.state != "degraded" or "cluster_status" in found.details:
                    return found
            return self._absent(config, "no working directory")
        local_state = workdir.path / LOCAL_STATE_FILE
        if not settings.remote_state and not local_state.is_file():
            return self._absent(config, "no state: nothing was created")
        tf = self._tool(config, settings, workdir.path, no_progress)
        if not workdir.initialised():
            tf.init()  # S3 state read from another machine, or an up interrupted before init
        outputs = tf.outputs()
        details = {
            "workdir": str(workdir.path),
            "state": state_location(workdir.path, backend),
            "outputs": {key: outputs[key] for key in _STATUS_OUTPUTS if key in outputs},
        }
        if "cluster_name" not in outputs:
            resources = tf.state_resources()
            if not resources:
                return ClusterStatus(
                    self.name, config.cluster.name, "absent", 0, None, {**details, "why": "the state is empty"}
                )
            details["resources"] = len(resources)
            details["why"] = "a partial apply: 'fsdp-sdk up' continues it, 'fsdp-sdk down' deletes it"
            return ClusterStatus(self.name, config.cluster.name, "degraded", 0, None, details)
        return self._from_eks(config, outputs, details)

    def _from_eks(self, config: Config, outputs: Mapping[str, Any], details: dict[str, Any]) -> ClusterStatus:
        from fsdp_sdk.aws.session import aws_client, aws_errors, error_code

        name, region = str(outputs["cluster_name"]), config.cluster.region
        eks = aws_client("eks", region)
        with aws_errors("eks", f"describe the EKS cluster {name}"):
            try:
                cluster = eks.describe_cluster(name=name)["cluster"]
            except Exception as error:
                if error_code(error) != "ResourceNotFoundException":
                    raise
                details["why"] = (
                    f"the state has cluster {name} but EKS in {region} does not: 'fsdp-sdk up' re-creates it"
                )
                return ClusterStatus(self.name, config.cluster.name, "degraded", 0, None, details)
        groups: dict[str, dict[str, Any]] = {}
        for group in outputs.get("node_group_names") or []:
            with aws_errors("eks", f"describe the node group {group}"):
                try:
                    found = eks.describe_nodegroup(clusterName=name, nodegroupName=group)["nodegroup"]
                except Exception as error:
                    if error_code(error) != "ResourceNotFoundException":
                        raise
                    groups[group] = {"status": "MISSING"}
                    continue
            scaling = found.get("scalingConfig") or {}
            groups[group] = {
                "status": found.get("status"),
                "desired": scaling.get("desiredSize"),
                "min": scaling.get("minSize"),
                "max": scaling.get("maxSize"),
                "issues": [
                    f"{i.get('code')}: {i.get('message')}" for i in (found.get("health") or {}).get("issues") or []
                ],
            }
        details["cluster_status"] = cluster.get("status")
        details["node_groups"] = groups
        statuses = [cluster.get("status"), *(g["status"] for g in groups.values())]
        state: ClusterState
        if all(s == "ACTIVE" for s in statuses):
            state = "ready"
        elif any(s in ("CREATING", "UPDATING", "DELETING", "PENDING") for s in statuses):
            state = "pending"
        else:
            state = "degraded"
        gpu = groups.get(str(outputs.get("gpu_node_group_name") or "gpu")) or {}
        return ClusterStatus(
            self.name, config.cluster.name, state, int(gpu.get("desired") or 0), cluster.get("endpoint"), details
        )

    def kubeconfig(self, config: Config) -> Path:
        """``<cluster.state_dir>/terraform/<cluster>/kubeconfig`` (written by ``up``)."""
        return kubeconfig_path(config, self.name)
