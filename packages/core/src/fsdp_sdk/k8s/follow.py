"""Following a job while it runs: an object's changes through the API's watch, a pod's log across
dropped streams and container restarts.

* :func:`watch_object` reads one object, then watches it from that ``resourceVersion``:
  each change arrives as it happens (no polling); a watch that ends is renewed from the
  last version seen, one that broke is resumed after a backoff, one whose version
  expired (410) starts over from a fresh read.
* :func:`follow_log` streams a pod's log with the kubelet's timestamps; when the stream
  breaks, it reopens it a little further back (``sinceSeconds``) and skips the lines
  already written, by timestamp, so nothing is lost or printed twice.

Both keep trying through an API server that fails for a while (5xx, 429, no answer)
until the caller's deadline, and give up only when it has failed for the retry
policy's ``patience`` in a row.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fsdp_sdk.errors import KubernetesError
from fsdp_sdk.k8s.job_pods import LOG_DRAIN_S, find_leader, job_api, job_pods, pending_reasons
from fsdp_sdk.k8s.retry import FailureStreak, TransientError, reason

if TYPE_CHECKING:
    from fsdp_sdk.k8s.kube import Kube

__all__ = [
    "RESUME_MARGIN_S",
    "WATCH_WINDOW_S",
    "FollowedJobs",
    "LogCursor",
    "LogFollower",
    "follow_log",
    "split_timestamp",
    "watch_object",
]

#: Seconds one watch request lasts before it is renewed from the last version seen.
WATCH_WINDOW_S = 300
#: Seconds further back than the last line received that a resumed log starts (covers delays and clock steps).
RESUME_MARGIN_S = 60


def watch_object(
    kube: Kube,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None,
    *,
    until: Callable[[dict[str, Any] | None], bool],
    deadline: float | None = None,
    window: float = WATCH_WINDOW_S,
) -> dict[str, Any] | None:
    """Follow one object until ``until(object)`` is true, or ``deadline`` passes; return the object last seen.

    :param until: called with the object after every change (``None`` once it is deleted or absent).
    :param deadline: a ``kube.retry.clock`` time; without one, follow until ``until`` says so.
    :param window: seconds one watch request lasts.
    :raises TransientError: the API server failed for longer than the retry policy's patience.
    :raises KubernetesError: a request was refused (not transiently).
    """
    from fsdp_sdk.k8s.kube import WatchExpired

    clock = kube.retry.clock
    streak = FailureStreak(kube.retry)
    version: str | None = None
    current: dict[str, Any] | None = None
    while True:
        try:
            if version is None:
                current = kube.get(api_version, kind, name, namespace)
                if until(current):
                    return current
                if current is not None:
                    version = current["metadata"].get("resourceVersion")
                else:  # not there (yet): watch the collection's changes from now on
                    version = kube.list_with_version(api_version, kind, namespace)[1]
            left = None if deadline is None else deadline - clock()
            if left is not None and left <= 0:
                return current
            timeout = window if left is None else max(1.0, min(window, left))
            for event in kube.watch(api_version, kind, namespace, name=name, resource_version=version, timeout=timeout):
                streak.reset()
                version = event.resource_version or version
                if event.type == "BOOKMARK":
                    continue
                current = None if event.type == "DELETED" else event.object
                if until(current):
                    return current
            streak.reset()
        except WatchExpired:
            version = None
        except TransientError as error:
            wait = streak.failed(error, deadline=deadline)
            if wait is None:
                return current
            kube.report_retry(f"{reason(error)}; watching {kind} {name} again in {wait:.1f}s")
            kube.retry.sleep(wait)


def split_timestamp(line: str) -> tuple[str, str]:
    """``(timestamp, text)`` of a log line the kubelet prefixed with its RFC 3339 timestamp (``("", line)`` without)."""
    stamp, sep, text = line.partition(" ")
    if sep and len(stamp) >= 20 and stamp[4] == "-" and stamp[10] == "T":
        return stamp, text
    return "", line


def _stamp_key(stamp: str) -> tuple[str, int]:
    """A sortable key of a kubelet timestamp (whole seconds, nanoseconds), whatever the fraction's width."""
    seconds, _, rest = stamp.rstrip("Z").partition(".")
    digits = "".join(c for c in rest if c.isdigit())[:9]
    return seconds, int(digits.ljust(9, "0") or 0)


@dataclass
class LogCursor:
    """Where a followed log is: the timestamp of the last line written, so a resumed stream skips what was written.

    :param last: the key of the last line's timestamp (see :func:`split_timestamp`).
    :param same: how many lines written so far carry exactly that timestamp.
    :param received_at: ``clock()`` when the last line arrived.
    """

    last: tuple[str, int] | None = None
    same: int = 0
    received_at: float | None = None
    _repeats: int = 0

    def restart(self) -> None:
        """A new stream begins (lines carrying the last timestamp are counted again)."""
        self._repeats = 0

    def admit(self, stamp: str, now: float) -> bool:
        """Whether a line with this timestamp is new (then it becomes the last one)."""
        if not stamp:
            self.received_at = now
            return True
        key = _stamp_key(stamp)
        if self.last is not None and key < self.last:
            return False
        if self.last is not None and key == self.last:
            self._repeats += 1
            if self._repeats <= self.same:
                return False
            self.same += 1
        else:
            self.last, self.same, self._repeats = key, 1, 1
        self.received_at = now
        return True

    def since_seconds(self, now: float) -> int | None:
        """How far back a resumed stream starts: ``None`` (from the container's start) before any line."""
        if self.received_at is None:
            return None
        return math.ceil(now - self.received_at) + RESUME_MARGIN_S


def follow_log(
    kube: Kube,
    pod: str,
    namespace: str,
    *,
    out: Callable[[str], None],
    cursor: LogCursor | None = None,
    deadline: float | None = None,
    container: str | None = None,
) -> LogCursor:
    """Write a pod's log to ``out`` line by line as it is written, until the container ends.

    A stream that breaks (or a request that fails transiently) is reopened after a backoff,
    from a little before the last line written; lines already written are skipped.

    :param cursor: where an earlier follow of this pod stopped (a restarted container's new lines follow it).
    :param deadline: stop retrying at this ``kube.retry.clock`` time (the log may then be incomplete).
    :returns: the cursor, to follow the pod again later.
    :raises TransientError: the API server failed for longer than the retry policy's patience.
    """
    cursor = cursor or LogCursor()
    clock = kube.retry.clock
    streak = FailureStreak(kube.retry)
    while True:
        cursor.restart()
        try:
            for raw in kube.follow_pod_log(
                pod,
                namespace,
                container=container,
                timestamps=True,
                since_seconds=cursor.since_seconds(clock()),
            ):
                streak.reset()
                stamp, text = split_timestamp(raw)
                if cursor.admit(stamp, clock()):
                    out(text)
            return cursor
        except TransientError as error:
            wait = streak.failed(error, deadline=deadline)
            if wait is None:
                return cursor
            kube.report_retry(f"{reason(error)}; resuming the log of {pod} in {wait:.1f}s")
            kube.retry.sleep(wait)


class FollowedJobs(Protocol):
    """What :class:`LogFollower` needs of the job client (:class:`~fsdp_sdk.k8s.jobs.JobClient` has it)."""

    progress: Callable[[str], None] | None
    leader_recheck_s: float

    @property
    def kube(self) -> Kube: ...

    @property
    def namespace(self) -> str: ...


class LogFollower:
    """Writes a job's leader log (or every worker's) as it is written, until the job has ended.

    Meant to run in a thread beside :meth:`~fsdp_sdk.k8s.jobs.JobClient.wait_for_completion`,
    which sets ``finished``. It waits for the leader when no pod has printed ``master_addr=``
    yet (pod changes come from a watch; the log heads are read again every
    ``jobs.leader_recheck_s`` seconds while pods run), follows it with :func:`follow_log`,
    and, when the leader's container ends before the job does (a restart), finds the leader
    again and goes on with its new lines.

    :param jobs: the job client (its connection, namespace, progress and leader recheck period).
    :param name: the job's name.
    :param out: receives each line (from this thread; with all workers, from one thread per pod).
    :param finished: set once the job has ended.
    :param deadline: a ``kube.retry.clock`` time to stop at.
    :param api: the job's API (``pytorchjob`` / ``trainjob``).
    """

    def __init__(
        self,
        jobs: FollowedJobs,
        name: str,
        *,
        out: Callable[[str], None],
        finished: threading.Event,
        deadline: float | None = None,
        api: str = "pytorchjob",
    ) -> None:
        self.jobs = jobs
        self.name = name
        self.out = out
        self.finished = finished
        self.deadline = deadline
        self.api = api
        #: Why the log could not be followed to its end, when it could not.
        self.error: str | None = None
        self._lock = threading.Lock()

    @property
    def kube(self) -> Kube:
        return self.jobs.kube

    def run(self, all_workers: bool = False) -> None:
        """Follow until the job has ended (the leader's log, or every worker's with ``all_workers``)."""
        try:
            if all_workers:
                self._all_workers()
            else:
                self._leader()
        except KubernetesError as error:
            self.error = str(error)

    def _done(self) -> bool:
        return self.finished.is_set() or (self.deadline is not None and self.kube.retry.clock() >= self.deadline)

    def _say(self, line: str) -> None:
        if self.jobs.progress is not None:
            self.jobs.progress(line)

    def _leader(self) -> None:
        from fsdp_sdk.k8s.kube import ApiStatusError

        cursors: dict[str, LogCursor] = {}
        waited = False
        said: set[tuple[str, str]] = set()
        while True:
            leader = self._looked_up(
                lambda: find_leader(self.kube, self.jobs.namespace, self.name, self.api), "the leader"
            )
            if leader is False:
                return
            if leader is None:
                if self._done():
                    return
                if not waited:
                    self._say(
                        f"waiting for the leader of job {self.jobs.namespace}/{self.name} "
                        "(the pod whose trainer prints master_addr=)"
                    )
                    waited = True
                self._say_why_pending(said)
                self._wait_for_pods()
                continue
            try:
                cursors[leader] = follow_log(
                    self.kube,
                    leader,
                    self.jobs.namespace,
                    out=self.out,
                    cursor=cursors.get(leader),
                    deadline=self.deadline,
                )
            except ApiStatusError as error:
                if error.status != 404:  # the pod went away: look for the leader again
                    raise
            if self._done():
                return
            self._wait_for_pods()  # the leader's container ended before the job: it restarts

    def _all_workers(self) -> None:
        threads: dict[str, threading.Thread] = {}
        waited = False
        while True:
            pods = self._looked_up(lambda: job_pods(self.kube, self.jobs.namespace, self.name, self.api), "the pods")
            if pods is False:
                break
            running = [p["metadata"]["name"] for p in pods or [] if (p.get("status") or {}).get("phase") != "Pending"]
            for pod in sorted(running):
                if pod not in threads:
                    threads[pod] = threading.Thread(target=self._one_worker, args=(pod,), daemon=True)
                    threads[pod].start()
            if self._done():
                break
            if not threads and not waited:
                self._say(f"waiting for the pods of job {self.jobs.namespace}/{self.name}")
                waited = True
            self._wait_for_pods()
        for thread in threads.values():
            thread.join(timeout=LOG_DRAIN_S)

    def _one_worker(self, pod: str) -> None:
        def out(line: str) -> None:
            with self._lock:
                self.out(f"[{pod}] {line}")

        cursor: LogCursor | None = None
        try:
            while True:
                cursor = follow_log(self.kube, pod, self.jobs.namespace, out=out, cursor=cursor, deadline=self.deadline)
                if self._done():
                    return
                self._wait_for_pods()
        except KubernetesError as error:  # the pod went away, or the API server for too long
            if getattr(error, "status", None) != 404:
                self.error = str(error)

    def _looked_up(self, look: Callable[[], Any], what: str) -> Any:
        """``look()``, tried again through transient failures; ``False`` when the follow should end meanwhile."""
        streak = FailureStreak(self.kube.retry)
        while True:
            try:
                return look()
            except TransientError as error:
                wait = streak.failed(error, deadline=self.deadline)
                if wait is None or self._done():
                    return False
                self.kube.report_retry(f"{reason(error)}; looking for {what} again in {wait:.1f}s")
                self.kube.retry.sleep(wait)

    def _say_why_pending(self, said: set[tuple[str, str]]) -> None:
        """Each pod that waits for something a person must act on (no node fits it, its image cannot be pulled),
        said once per reason: a job does not stay Pending without a word."""
        pods = self._looked_up(lambda: job_pods(self.kube, self.jobs.namespace, self.name, self.api), "the pods")
        for pod, why in pending_reasons(pods or []):
            if (pod, why) not in said:
                said.add((pod, why))
                self._say(f"pod {self.jobs.namespace}/{pod} is Pending, {why}")

    def _wait_for_pods(self) -> None:
        """Return at the next change of the job's pods, or after ``jobs.leader_recheck_s`` seconds."""
        from fsdp_sdk.k8s.kube import WatchExpired

        _, _, label = job_api(self.api)
        selector = f"{label}={self.name}"
        timeout = self.jobs.leader_recheck_s
        try:
            _, version = self.kube.list_with_version("v1", "Pod", self.jobs.namespace, label_selector=selector)
            for _ in self.kube.watch(
                "v1", "Pod", self.jobs.namespace, label_selector=selector, resource_version=version, timeout=timeout
            ):
                return
        except WatchExpired:
            return
        except TransientError as error:
            self.kube.report_retry(f"{reason(error)}; looking at the pods again in {timeout:g}s")
            self.kube.retry.sleep(timeout)
