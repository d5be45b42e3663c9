"""Prometheus's HTTP API (``/api/v1/query``, ``/api/v1/query_range``): PromQL in, JSON results out,
and every way it can fail said in Prometheus's own words (errorType and error), or as unreachable."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3


@dataclass
class PrometheusError(Exception):
    kind: str
    """``unreachable``, ``timeout``, ``http`` or Prometheus's errorType (``bad_data``, ``execution``…)."""
    message: str
    query: str = ""

    def __str__(self) -> str:
        where = f" (query {self.query})" if self.query else ""
        return f"{self.kind}: {self.message}{where}"


class Prometheus:
    def __init__(self, url: str, *, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.http = urllib3.PoolManager(retries=False)

    def _get(self, path: str, fields: dict[str, str]) -> Any:
        query = fields.get("query", "")
        try:
            response = self.http.request(
                "GET",
                f"{self.url}{path}",
                fields={**fields, "timeout": f"{max(1, round(self.timeout * 1000))}ms"},
                timeout=urllib3.Timeout(connect=5, read=self.timeout + 5),
            )
        except urllib3.exceptions.NewConnectionError as exc:  # a subclass of the timeout error: first
            raise PrometheusError("unreachable", f"cannot reach Prometheus at {self.url}: {exc}", query) from exc
        except urllib3.exceptions.TimeoutError as exc:
            raise PrometheusError("timeout", f"no answer from {self.url} within {self.timeout:g} s", query) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise PrometheusError("unreachable", f"cannot reach Prometheus at {self.url}: {exc}", query) from exc
        try:
            body = json.loads(response.data or b"{}")
        except ValueError:
            body = {}
        if not isinstance(body, dict) or body.get("status") != "success":
            detail = body.get("error") if isinstance(body, dict) else None
            kind = body.get("errorType") if isinstance(body, dict) else None
            text = response.data[:200].decode(errors="replace")
            raise PrometheusError(str(kind or "http"), f"HTTP {response.status}: {detail or text}", query)
        return body.get("data")

    def query_range(self, query: str, start: datetime, end: datetime, step_seconds: int) -> list[dict[str, Any]]:
        """A range query's matrix: one entry per series, ``values`` as [unix time, "value"] pairs."""
        data = self._get(
            "/api/v1/query_range",
            {
                "query": query,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": f"{step_seconds}s",
            },
        )
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError("bad_answer", f"expected a matrix, got {str(data)[:100]}", query)
        return list(data.get("result") or [])

    def server_time(self) -> float:
        """Prometheus's clock (``time()``), to tell clock skew from late data."""
        data = self._get("/api/v1/query", {"query": "time()"})
        try:
            return float(data["result"][1])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusError("bad_answer", f"time() gave {str(data)[:100]}", "time()") from exc
