"""From zero to a running job in one call: :func:`plan_launch` says what :func:`launch` will do, and at what cost.

::

    from fsdp_sdk import Client

    client = Client.from_sources(overrides={"cluster.backend": "eksctl", "trainer.model.preset": "llama3-8b"})
    plan = client.launch_plan(trainer_args=["--train.steps", "200"])
    print(plan.lines())                 # the steps, the hourly cost, the estimate: nothing changed yet
    result = client.launch(plan, on_output=print)

On a cluster backend the plan is made of the public :class:`~fsdp_sdk.Client` calls, in order: the cluster's plan
(preflight checks, hourly cost), :meth:`~fsdp_sdk.Client.up` when the cluster is absent, :meth:`~fsdp_sdk.Client.scale`
when its GPU nodes were scaled to 0, :meth:`~fsdp_sdk.Client.install_prereqs` when something is missing, the image
built and pushed only when ECR lacks its content tag (:func:`fsdp_sdk.k8s.image.content_tag`), the job submitted
(:meth:`~fsdp_sdk.Client.submit_job`) and followed to its summary, then :meth:`~fsdp_sdk.Client.down` with ``down``.
On the local backend it is :meth:`~fsdp_sdk.Client.run`, which costs nothing.

Planning reads (AWS, the cluster, ECR) and changes nothing, so ``launch --dry-run`` shows exactly what would be done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsdp_sdk.config import Setting, parse_trainer_args
from fsdp_sdk.errors import ConfigError, FsdpSdkError

if TYPE_CHECKING:
    from fsdp_sdk.backends.base import Plan
    from fsdp_sdk.runs import JobRef, RunEvent, RunResult
    from fsdp_sdk.workflows.jobs import JobWorkflow

__all__ = ["LaunchPlan", "LaunchResult", "launch", "plan_launch"]


@dataclasses.dataclass
class LaunchPlan:
    """What :func:`launch` will do, and what it costs; made by :func:`plan_launch` (reads only).

    :param backend: the cluster backend.
    :param cluster: the cluster name.
    :param job: the job's name (``job.name``; locally the run's id is made at start).
    :param local: the backend runs jobs itself (no cluster, no image, no cost).
    :param cluster_state: the cluster's state now (``absent``, ``ready``...).
    :param gpu_nodes: its GPU nodes now.
    :param steps: what will be done, in order, one line each.
    :param cluster_plan: the cluster's plan (:meth:`Client.plan`): what ``up`` applies when the cluster is absent.
    :param hourly_cost_usd: what the cluster costs per hour while it runs (0 locally; None when unknown).
    :param estimate: the job's estimate (:meth:`fsdp_sdk.estimate.Estimate.to_dict`), None where none can be made.
    :param train_steps: the optimizer steps asked for (``train.steps``).
    :param tokens: the tokens the time and cost are for instead of the steps, when given.
    :param hours_to_train: the estimated hours to train them (the steps, or the tokens).
    :param usd_to_train: the estimated cost of those hours at :attr:`hourly_cost_usd`.
    :param image: the image reference the job will run (``<registry>/<job.image>:<content tag>``).
    :param image_tag: the content tag.
    :param build: build and push the image (ECR does not hold that tag yet).
    :param install_prereqs: install etcd / the Training Operator on an existing cluster that lacks them.
    :param scale_to: scale the GPU nodes to this many first (they are at 0).
    :param replace: a finished job of the same name is replaced (deleted, then submitted again).
    :param down: delete the cluster when the job ends.
    :param notes: what the plan could not find out (an estimate not made...).
    :param trainer_args: the trainer options the job runs with (as on the trainer's command line).
    :param unknown: what a dry run could not read (no AWS credentials, no tool, no cluster), one line each with
        the reason; the steps that depend on it say what happens either way.
    """

    backend: str
    cluster: str
    job: str
    local: bool
    cluster_state: str
    gpu_nodes: int
    steps: list[str]
    cluster_plan: Plan | None = None
    hourly_cost_usd: float | None = None
    estimate: dict[str, Any] | None = None
    train_steps: int | None = None
    tokens: float | None = None
    hours_to_train: float | None = None
    usd_to_train: float | None = None
    image: str | None = None
    image_tag: str | None = None
    build: bool = False
    install_prereqs: bool = False
    scale_to: int | None = None
    replace: bool = False
    down: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    trainer_args: tuple[str, ...] = ()
    registry: str | None = None
    unknown: list[str] = dataclasses.field(default_factory=list)

    @property
    def blocked(self) -> list[str]:
        """The preflight checks of the cluster's plan that would stop ``launch``, one line each (a dry run's)."""
        checks = self.cluster_plan.preflight if self.cluster_plan is not None else []
        return [r.line() for r in checks if r.blocking]

    @property
    def creates_paid_resources(self) -> bool:
        """Whether launching starts anything billed by the hour (a new cluster, GPU nodes scaled up, a job)."""
        return not self.local

    def cost_lines(self) -> list[str]:
        """The hourly cost and the job's estimate, as a person reads them."""
        if self.local:
            return ["Cost: local (this machine; nothing billed)"]
        lines = []
        if self.hourly_cost_usd is not None:
            lines.append(f"Cluster cost: ${self.hourly_cost_usd:,.2f}/hour while it runs")
        else:
            lines.append("Cluster cost: unknown (the instance type has no on-demand price)")
        if self.estimate is not None:
            from fsdp_sdk.estimate import summary_lines

            lines += summary_lines(self.estimate)
        if self.hours_to_train is not None:
            from fsdp_sdk.runs import format_duration

            what = f"{self.tokens:,.0f} tokens" if self.tokens is not None else f"{self.train_steps} steps"
            usd = ""
            if self.usd_to_train is not None:
                usd = ", under $0.01" if self.usd_to_train < 0.01 else f", about ${self.usd_to_train:,.2f}"
            lines.append(
                f"  to train {what}: about {format_duration(self.hours_to_train * 3600)} of training{usd} "
                "(cluster creation and start-up not counted)"
            )
        lines += [f"  ({note})" for note in self.notes]
        return lines

    def lines(self) -> list[str]:
        """The whole plan: the failed preflight checks, what will be done, what could not be known, then the cost."""
        head = f"Launch {self.job} on {self.backend} cluster {self.cluster!r} ({self.cluster_state}):"
        checks = self.cluster_plan.preflight if self.cluster_plan is not None else []
        failed = [f"  {r.line()}" for r in checks if not r.ok]
        unknown = [f"  not known: {line}" for line in self.unknown]
        steps = [f"  {n}. {step}" for n, step in enumerate(self.steps, 1)]
        return [head, *failed, *steps, *unknown, *self.cost_lines()]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``launch --dry-run --json``)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "cluster_plan"}
        data["trainer_args"] = list(self.trainer_args)
        data["cluster_plan"] = self.cluster_plan.to_dict() if self.cluster_plan is not None else None
        return data


@dataclasses.dataclass
class LaunchResult:
    """How :func:`launch` ended: the run's result, and whether the cluster was deleted after it."""

    result: RunResult
    plan: LaunchPlan
    deleted_cluster: bool = False


def _trainer_steps(flow: JobWorkflow) -> int | None:
    steps = (flow.config.trainer.get("train") or {}).get("steps")
    return steps if isinstance(steps, int) else None


def plan_launch(
    flow: JobWorkflow,
    *,
    trainer_args: Sequence[str] = (),
    down: bool = False,
    force: bool = False,
    tokens: float | None = None,
    trainer_src: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
    ecr: Any = None,
    collect: bool = False,
) -> LaunchPlan:
    """What :func:`launch` will do for the job workflow's configuration (:class:`~fsdp_sdk.workflows.jobs.JobWorkflow`, what :meth:`fsdp_sdk.Client.launch_plan` passes); reads (AWS, the cluster, ECR), changes nothing.

    :param trainer_args: trainer options as on its command line (``["--train.steps", "200"]``).
    :param down: delete the cluster when the job ends.
    :param force: launch even when the estimate says the job will not fit in its GPUs' memory.
    :param tokens: estimate the time and cost of training this many tokens (default: the requested steps).
    :param trainer_src: the trainer package the image is built from (default: the installed one).
    :param build_args: build arguments of the image (see :data:`fsdp_sdk.k8s.image.BUILD_ARGS`).
    :param ecr: a boto3 ECR client (default: the shared one).
    :param collect: plan anyway what cannot be read (``launch --dry-run``: no AWS credentials, no backend tool):
        the failed preflight checks stay in the cluster plan (:attr:`LaunchPlan.blocked`) and what could not be
        read is in :attr:`LaunchPlan.unknown`, instead of an error.
    :raises PreflightError: a preflight check failed (unless ``collect``).
    :raises ConfigError: an invalid setting, or a job that will not fit (unless ``force``), or a job of that name
        still running.
    """
    from fsdp_sdk.user_code import code_args

    # a bad trainer option: refused here; with --script, what follows -- is the script's
    job_flow = flow.derived(code_args(flow.config, trainer_args) or parse_trainer_args(trainer_args))
    backend = flow.backend
    cluster = flow.config.cluster
    if backend.runs_jobs:
        cluster_plan = flow.cluster.plan(collect=collect)
        local_steps = ["start etcd on this machine unless it runs"] if cluster_plan.steps else []
        nodes = job_flow.config.job.num_workers
        local_steps.append(f"run {flow.config.job.name} here: {nodes} simulated node(s), the progress followed")
        if down:
            local_steps.append("stop etcd and remove the cluster's state (down)")
        return LaunchPlan(
            backend=backend.name,
            cluster=cluster.name,
            job=flow.config.job.name,
            local=True,
            cluster_state=flow.cluster.status().state,
            gpu_nodes=0,
            steps=local_steps,
            cluster_plan=cluster_plan,
            hourly_cost_usd=0.0,
            train_steps=_trainer_steps(job_flow),
            down=down,
            trainer_args=tuple(trainer_args),
        )

    from fsdp_sdk.k8s.image import content_tag, ecr_registry, image_in_ecr

    unknown: list[str] = []

    def read(what: str, reader: Callable[[], Any]) -> Any:
        """``reader()``; in a dry run (``collect``) what it could not read is noted and None returned instead."""
        if not collect:
            return reader()
        try:
            return reader()
        except FsdpSdkError as error:
            unknown.append(f"{what} ({error})")
            return None

    status = read("the cluster's state", flow.cluster.status)
    known = status is not None
    absent = known and status.state == "absent"
    steps: list[str] = []
    cluster_plan = flow.cluster.plan(collect=collect)
    if absent:
        steps.append(f"create the cluster ({len(cluster_plan.steps)} steps: 'fsdp-sdk up --dry-run' lists them)")
    elif not known:
        steps.append(
            f"create the cluster unless it exists ({len(cluster_plan.steps)} steps: 'fsdp-sdk up --dry-run' lists "
            "them); on an existing one, scale its GPU nodes up from 0 and install missing prerequisites"
        )
    elif status.state != "ready":
        raise ConfigError(
            "cluster",
            f"cluster {cluster.name!r} is {status.state}",
            "wait for it ('fsdp-sdk status'), or repair it with 'fsdp-sdk up'",
        )
    scale_to = None
    if known and not absent and status.nodes == 0:
        scale_to = max(cluster.nodes, flow.config.job.num_workers)
        steps.append(f"scale the GPU nodes from 0 to {scale_to}")
    install = False
    if known and not absent:
        prereqs = read("the cluster's prerequisites", flow.cluster.prereq_status)
        if prereqs is not None and not prereqs.healthy:
            install = True
            steps.append("install the prerequisites (etcd, the Kubeflow Training Operator)")

    tag = content_tag(trainer_src, build_args)
    present = read(f"whether ECR holds the image tag {tag}", lambda: image_in_ecr(flow.config, tag, ecr=ecr))
    registry = flow.config.job.registry or read(
        "the account's ECR registry", lambda: _account_registry(ecr_registry(flow.config)[1], ecr)
    )
    shown_registry = registry or f"<account>.dkr.ecr.{cluster.region}.amazonaws.com"
    image = f"{shown_registry}/{flow.config.job.image}:{tag}"
    if present:
        steps.append(f"use the image {image}: ECR holds it (its content has not changed)")
    elif present is None:
        steps.append(f"build the image {flow.config.job.image}:{tag} and push it to ECR ({image}), unless ECR holds it")
    else:
        steps.append(f"build the image {flow.config.job.image}:{tag} and push it to ECR ({image})")
    steps += _code_layer_steps(job_flow, image, ecr)

    job_name = flow.config.job.name
    replace = False
    if known and not absent:
        replace = bool(read(f"whether a job {job_name} is on the cluster", lambda: _existing_job(flow, job_name)))
    submit = f"submit the job {job_name}" + (" (replacing the finished job of that name)" if replace else "")
    steps += [submit, "follow the leader's log to the end, then print the summary"]
    if down:
        steps.append(f"delete cluster {cluster.name!r} when the job ends (down)")

    final = job_flow.derived([Setting("job.tag", tag, "image content tag", "launch")])
    estimate, notes = _estimate(final, force)
    train_steps = _trainer_steps(final)
    hours = usd = None
    speed = (estimate or {}).get("speed")
    if speed and tokens is not None:
        hours = tokens / float(speed["tokens_per_s"]) / 3600
    elif speed and train_steps is not None:
        hours = train_steps * float(speed["step_s"]) / 3600
    if hours is not None and cluster_plan.hourly_cost_usd is not None:
        usd = hours * cluster_plan.hourly_cost_usd
    return LaunchPlan(
        backend=backend.name,
        cluster=cluster.name,
        job=job_name,
        local=False,
        cluster_state=status.state if status is not None else "unknown",
        gpu_nodes=status.nodes if status is not None else 0,
        steps=steps,
        cluster_plan=cluster_plan,
        hourly_cost_usd=cluster_plan.hourly_cost_usd,
        estimate=estimate,
        train_steps=train_steps,
        tokens=tokens,
        hours_to_train=hours,
        usd_to_train=usd,
        image=image,
        image_tag=tag,
        build=not present,
        install_prereqs=install,
        scale_to=scale_to,
        replace=replace,
        down=down,
        notes=notes,
        trainer_args=tuple(trainer_args),
        registry=registry,
        unknown=unknown,
    )


def _code_layer_steps(job_flow: JobWorkflow, image: str, ecr: Any) -> list[str]:
    """The step of your own code's layer (``--script``; :mod:`fsdp_sdk.user_code`) on ``image``, when there is one."""
    from fsdp_sdk.k8s.image import image_in_ecr
    from fsdp_sdk.user_code import active, code_image_ref, collect

    code = active(job_flow.config)
    if code is None:
        return []
    bundle = collect(code, image)  # over code.max_mib: refused here, before anything is created
    layer = code_image_ref(image, bundle.tag)
    if image_in_ecr(job_flow.config, bundle.tag, ecr=ecr):
        return [f"use the code layer {layer} ({code.what()}): ECR holds it (its content has not changed)"]
    return [f"build the code layer {layer} ({code.what()}, {len(bundle.files)} files) and push it to ECR"]


def _account_registry(region: str, ecr: Any) -> str:
    """The account's default ECR registry host, as ECR's authorization token names it."""
    import re

    from fsdp_sdk.aws.session import aws_client, aws_errors

    ecr = ecr or aws_client("ecr", region)
    with aws_errors("ecr", "find the account's ECR registry"):
        endpoint = ecr.get_authorization_token()["authorizationData"][0]["proxyEndpoint"]
    return re.sub(r"^https?://", "", str(endpoint)).rstrip("/")


def _existing_job(flow: JobWorkflow, name: str) -> bool:
    """Whether a finished job named ``name`` is there (to replace); refuses one that still runs."""
    from fsdp_sdk.errors import KubernetesError

    try:
        jobs = flow.jobs.list()
    except KubernetesError:
        return False  # the job kind is not served yet: the prerequisites install it
    status = next((job for job in jobs if job.name == name), None)
    if status is None:
        return False
    if not status.finished:
        raise ConfigError(
            "job.name",
            f"job {name!r} is {status.phase} on the cluster",
            f"follow it with 'fsdp-sdk job logs -f {name}', stop it with 'fsdp-sdk job stop {name}', "
            "or launch under another name (--set job.name=...)",
        )
    return True


def _estimate(flow: JobWorkflow, force: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """The job's estimate (refusing a job that will not fit unless ``force``), and why there is none."""
    from fsdp_sdk.estimate import EstimateUnavailable, fit_problem

    try:
        estimate = flow.estimate(scaling=False)
    except EstimateUnavailable as exc:
        return None, [f"no estimate: {exc}"]
    problem = fit_problem(estimate)
    if problem and not force:
        raise ConfigError(
            "estimate",
            problem,
            "use more nodes, a smaller micro batch or activation checkpointing ('fsdp-sdk estimate --recommend' "
            "lists what fits), or launch it anyway with --force",
        )
    return estimate.to_dict(), []


def launch(
    flow: JobWorkflow,
    plan: LaunchPlan,
    *,
    trainer_src: str | Path | None = None,
    build_args: Mapping[str, str] | None = None,
    tool: str | None = None,
    force: bool = False,
    on_output: Callable[[str], None] | None = None,
    on_event: Callable[[RunEvent], None] | None = None,
    on_submitted: Callable[[JobRef], None] | None = None,
    on_finished: Callable[[RunResult | None, BaseException | None], None] | None = None,
) -> LaunchResult:
    """Do what ``plan`` says: the cluster, its nodes, the prerequisites, the image, the job, followed to its end.

    :param plan: from :func:`plan_launch` (what ``launch --dry-run`` showed).
    :param trainer_src: as for :func:`plan_launch` (the same sources give the same content tag).
    :param build_args: as for :func:`plan_launch`.
    :param tool: the container build tool (default: the first of docker, finch, buildah).
    :param force: submit even when the estimate says the job will not fit.
    :param on_output: receives each line of the leader's log.
    :param on_event: receives the run's events (steps, phases) when ``on_output`` is not given.
    :param on_submitted: called with the job once it is submitted (a Ctrl-C after it leaves the job running).
    :param on_finished: called when the job ended (its result, or the error it ended with), before ``plan.down``
        deletes the cluster.
    :raises RunError: the job failed (after ``plan.down`` deleted the cluster, when asked).
    :raises KeyboardInterrupt: interrupted; a submitted job keeps running and the cluster is kept.
    """
    if plan.local:
        return _launch_local(
            flow,
            plan,
            force=force,
            on_output=on_output,
            on_event=on_event,
            on_submitted=on_submitted,
            on_finished=on_finished,
        )
    from fsdp_sdk.runs import RunResult

    if plan.cluster_plan is not None and plan.cluster_state == "absent":
        flow.cluster.up(plan.cluster_plan)
    elif plan.scale_to:
        flow.cluster.scale(plan.scale_to)
    if plan.install_prereqs:
        flow.cluster.install_prereqs()
    from fsdp_sdk.user_code import code_args

    settings = [
        *(code_args(flow.config, plan.trainer_args) or parse_trainer_args(plan.trainer_args)),
        Setting("job.tag", plan.image_tag, "image content tag", "launch"),
        Setting("job.registry", plan.registry, "image registry", "launch"),
    ]
    job_flow = flow.derived(settings)
    if plan.build:
        context = Path(flow.config.cluster.state_dir) / "image" / flow.config.cluster.name
        job_flow.build_image(context=context, trainer_src=trainer_src, tool=tool, build_args=build_args)
        job_flow.push_image(tool=tool)
    job = job_flow.submit_job(force=force, replace=plan.replace)
    if on_submitted is not None:
        on_submitted(job)
    if on_output is None and on_event is not None:
        on_output = _events_from_lines(on_event, _trainer_steps(job_flow))
    try:
        summary = job_flow.jobs.wait(job, on_output=on_output)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        job_flow.ctx.plugins.hooks.job_finished(job_flow.config, job, False, None)
        _finish(flow, plan, None, error, on_finished)
        raise
    job_flow.ctx.plugins.hooks.job_finished(job_flow.config, job, True, summary)
    result = RunResult(job, summary)
    deleted = _finish(flow, plan, result, None, on_finished)
    return LaunchResult(result, plan, deleted)


def _finish(
    flow: JobWorkflow,
    plan: LaunchPlan,
    result: RunResult | None,
    error: BaseException | None,
    on_finished: Callable[[RunResult | None, BaseException | None], None] | None,
) -> bool:
    if on_finished is not None:
        on_finished(result, error)
    if not plan.down:
        return False
    flow.progress(f"the job ended: deleting cluster {plan.cluster!r} (--down)")
    try:
        flow.cluster.down()
    except FsdpSdkError as failure:
        if error is None:
            raise
        flow.progress(f"could not delete cluster {plan.cluster!r}: {failure}; run 'fsdp-sdk down'")
        return False
    return True


def _launch_local(
    flow: JobWorkflow,
    plan: LaunchPlan,
    *,
    force: bool,
    on_output: Callable[[str], None] | None,
    on_event: Callable[[RunEvent], None] | None,
    on_submitted: Callable[[JobRef], None] | None,
    on_finished: Callable[[RunResult | None, BaseException | None], None] | None,
) -> LaunchResult:
    try:
        result = flow.run(
            trainer_args=plan.trainer_args,
            force=force,
            on_output=on_output,
            on_event=on_event,
            on_started=on_submitted,
        )
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        _finish(flow, plan, None, error, on_finished)
        raise
    deleted = _finish(flow, plan, result, None, on_finished)
    return LaunchResult(result, plan, deleted)


def _events_from_lines(on_event: Callable[[RunEvent], None], total: int | None) -> Callable[[str], None]:
    """The leader's log lines as the run events a local run gives (steps, output)."""
    from fsdp_sdk.runs import leader_line_event

    def line(text: str) -> None:
        event = leader_line_event(text, total)
        if event is not None:
            on_event(event)

    return line
