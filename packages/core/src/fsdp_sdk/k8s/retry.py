"""Retrying what the Kubernetes API server failed for a moment.

A request is retried when the failure says nothing about the request itself: no
answer (connection refused, reset or dropped, a read timeout), ``429 Too Many
Requests``, ``500``, ``502``, ``503``, ``504``, and a ``409 Conflict`` that is not
``AlreadyExists`` (the object changed between a read and a write). Everything else
(400, 401, 403, 404, 422, ...) is final at once: sending it again would fail again.

Delays grow from :attr:`RetryPolicy.first_delay` by :attr:`RetryPolicy.factor` up to
:attr:`RetryPolicy.max_delay`, with jitter, and never undercut a ``Retry-After``
header. One request gives up after :attr:`RetryPolicy.attempts` tries; commands that
follow a job (``job wait``, ``job logs -f``, ``Client.run``) go on through failed
requests (:class:`FailureStreak`) until their own deadline, and give up only when the
API server has failed for :attr:`RetryPolicy.patience` seconds in a row, so an API
server that is away for minutes during an hour-long job does not end the command.

Retrying is safe because every write the job layer makes is idempotent or checked
first: server-side apply of the same object twice is one change, a delete that finds
nothing after an unanswered first try has succeeded, and before re-sending an apply
whose answer was lost, :class:`~fsdp_sdk.k8s.kube.Kube` reads the object back and
takes an identical one as success.

Tests make retries instant with ``RetryPolicy(sleep=...)`` or by replacing
:data:`DEFAULT_POLICY`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from fsdp_sdk.errors import KubernetesError

__all__ = [
    "DEFAULT_POLICY",
    "TRANSIENT_STATUSES",
    "FailureStreak",
    "RetryPolicy",
    "TransientError",
    "is_transient",
    "reason",
]

T = TypeVar("T")

#: HTTP statuses that mean "try again later", not "this request is wrong".
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class TransientError(KubernetesError):
    """A failure that may pass: no answer from the API server, or an answer that says to try later.

    :param message: the one-line message.
    :param retry_after: seconds the server asked to wait (``Retry-After``), if it did.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, line: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        #: The failure itself, without what retrying added to the message.
        self.line = line or message


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is worth retrying (see the module's docstring)."""
    return isinstance(error, TransientError)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep retrying a request the API server failed transiently.

    :param attempts: tries in all for one request (commands without a deadline).
    :param first_delay: seconds before the second try.
    :param factor: each delay is this many times the one before.
    :param max_delay: the longest delay between two tries.
    :param jitter: up to this fraction of a delay is added at random, so many clients
        failing together do not come back together.
    :param request_timeout: seconds one request may take before it counts as unanswered.
    :param patience: commands that follow a job (a watch, a followed log) give up when the API server
        has failed this many seconds in a row, whatever their own deadline.
    :param sleep: how to wait (tests pass a recorder).
    :param clock: monotonic seconds (tests pass a fake clock).
    """

    attempts: int = 6
    first_delay: float = 0.5
    factor: float = 2.0
    max_delay: float = 30.0
    jitter: float = 0.2
    request_timeout: float = 30.0
    patience: float = 900.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        growth = self.factor ** min(max(0, attempt - 1), 64)  # bounded: no overflow however long it goes on
        base = min(self.max_delay, self.first_delay * growth)
        wait = base + random.random() * self.jitter * base
        return max(wait, retry_after or 0.0)

    def call(
        self,
        function: Callable[[], T],
        *,
        on_retry: Callable[[str], None] | None = None,
        before_retry: Callable[[], T | None] | None = None,
    ) -> T:
        """Call ``function`` until it returns, retrying on :class:`TransientError` up to :attr:`attempts` tries.

        :param function: the request.
        :param on_retry: receives one line per retry (what failed, how long until the next try).
        :param before_retry: called before each retry; a result other than ``None`` is returned
            instead of retrying (how a lost answer is recognised as success).
        :raises TransientError: the last failure, once the tries are used up; its message says
            how many tries were made over how long.
        :raises KubernetesError: a failure that is not transient, at once.
        """
        started = self.clock()
        attempt = 0
        while True:
            attempt += 1
            try:
                return function()
            except TransientError as error:
                wait = self.delay(attempt, error.retry_after)
                if attempt >= self.attempts:
                    elapsed = self.clock() - started
                    tries = f"{attempt} {'try' if attempt == 1 else 'tries'}"
                    raise TransientError(
                        f"{error.line} (gave up after {tries} over {elapsed:.0f}s: check the cluster's API server, "
                        "then run the command again)",
                        retry_after=error.retry_after,
                        line=error.line,
                    ) from error
                if on_retry is not None:
                    on_retry(f"{reason(error)}; retrying in {wait:.1f}s (try {attempt + 1} of {self.attempts})")
                self.sleep(wait)
                if before_retry is not None:
                    try:
                        settled = before_retry()
                    except TransientError:  # still away: the retry itself will tell
                        settled = None
                    if settled is not None:
                        return settled


class FailureStreak:
    """Consecutive transient failures of a loop that follows a job (a watch, a followed log).

    :meth:`failed` says how long to wait before the next try; a success (:meth:`reset`) ends the
    streak. The loop gives up when the API server has failed for :attr:`RetryPolicy.patience`
    seconds in a row.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.started: float | None = None
        self.count = 0

    def reset(self) -> None:
        """A request succeeded: the next failure starts a new streak."""
        self.started, self.count = None, 0

    def failed(self, error: TransientError, *, deadline: float | None = None) -> float | None:
        """Record a failure; return the seconds to wait, or ``None`` when ``deadline`` comes first.

        :raises TransientError: the API server has been failing for longer than the policy's patience.
        """
        now = self.policy.clock()
        if self.started is None:
            self.started = now
        self.count += 1
        wait = self.policy.delay(self.count, error.retry_after)
        if now + wait > self.started + self.policy.patience:
            raise TransientError(
                f"{error.line} (still failing after {now - self.started:.0f}s: check the cluster's API server, "
                "then run the command again)",
                retry_after=error.retry_after,
                line=error.line,
            ) from error
        if deadline is not None and now + wait > deadline:
            return None
        return wait


def reason(error: KubernetesError) -> str:
    """The error's message without its advice (the part after the last '; ')."""
    text = error.line if isinstance(error, TransientError) else str(error)
    return text.rsplit("; ", 1)[0] if "; " in text else text


#: The policy :class:`~fsdp_sdk.k8s.kube.Kube` uses unless it is given one.
DEFAULT_POLICY = RetryPolicy()
