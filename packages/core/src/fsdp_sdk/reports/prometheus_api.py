"""A small client of the Prometheus HTTP API (``/api/v1/query``), on the standard library.

Reports want every raw sample of a run, not a resampled range, so :meth:`PrometheusApi.samples`
evaluates a range-vector selector (``metric{...}[<seconds>s]``) as an instant query: Prometheus
answers with the samples as they were scraped, with their own timestamps.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from fsdp_sdk.errors import BackendError

__all__ = ["PrometheusApi", "Series"]


@dataclass(frozen=True)
class Series:
    """One time series: its labels and its ``(unix time, value)`` samples."""

    labels: dict[str, str]
    samples: list[tuple[float, float]]


class PrometheusApi:
    """The HTTP API of one Prometheus server.

    :param url: its base URL (``http://127.0.0.1:9090``).
    :param timeout: seconds to wait for each answer.
    """

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, expr: str, *, at: float | None = None) -> dict[str, Any]:
        """Evaluate ``expr`` at ``at`` (default: now); returns the answer's ``data`` (``resultType``, ``result``).

        :raises BackendError: Prometheus cannot be reached, or refused the query (its message is kept).
        """
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        request = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=urllib.parse.urlencode(params).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read()).get("error", "")
            except ValueError:
                message = error.reason
            raise BackendError(f"Prometheus at {self.url} refused the query {expr!r}: {message}") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            raise BackendError(
                f"cannot reach Prometheus at {self.url} ({reason}); check the URL (--prometheus) and that it runs"
            ) from None
        if body.get("status") != "success":
            raise BackendError(f"Prometheus at {self.url}: query {expr!r} failed: {body.get('error', body)}")
        return body["data"]

    def samples(self, selector: str, *, seconds: float, at: float | None = None) -> list[Series]:
        """Every raw sample of the series ``selector`` matches in the ``seconds`` before ``at`` (default: now).

        :param selector: a series selector, ``metric{label="value"}``.
        """
        data = self.query(f"{selector}[{max(1, int(seconds + 0.999))}s]", at=at)
        if data.get("resultType") != "matrix":
            raise BackendError(
                f"Prometheus at {self.url}: expected a matrix for {selector}, got {data.get('resultType')}"
            )
        return [
            Series(dict(item.get("metric") or {}), [(float(t), float(v)) for t, v in item.get("values") or []])
            for item in data.get("result") or []
        ]

    def ready(self) -> bool:
        """Whether the server answers ``/-/ready``."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=self.timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False
