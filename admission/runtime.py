"""Per-process state of the webhook: the compiled policy, the decision-log buffer, the metrics.

The hot path only reads ``STATE.policy`` (a reference swap makes refreshes atomic) and appends to a
bounded deque. A background thread checks the policy revision every ALLOT_ADMISSION_REFRESH_SECONDS
(one cheap query), recompiles when it changed, and writes buffered decisions in one batch, trimming
the log to ALLOT_ADMISSION_LOG_KEEP rows. Nothing here is needed to scale out: every replica rebuilds
its own cache from the database.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from prometheus_client import Counter, Gauge, Histogram

from admission.models import AdmissionDecision
from admission.policy.model import AdmissionPolicy
from admission.selectors import admission_cluster, admission_policy, policy_revision

log = logging.getLogger("allot.admission")

DECISIONS = Counter("allot_admission_decisions_total", "Admission decisions", ["webhook", "kind", "reason", "allowed"])
LATENCY = Histogram(
    "allot_admission_duration_seconds",
    "Time to decide, from body to answer",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
REVISION = Gauge("allot_admission_policy_revision", "Policy revision the process decides with")


class _State:
    def __init__(self) -> None:
        self.policy: AdmissionPolicy | None = None
        self.pending: deque[AdmissionDecision] = deque(maxlen=10_000)
        self.lock = threading.Lock()
        self.started = False

    def current(self) -> AdmissionPolicy:
        policy = self.policy
        if policy is None:
            with self.lock:
                if self.policy is None:
                    self.refresh()
                self._start()
            policy = self.policy
        assert policy is not None
        return policy

    def refresh(self, *, force: bool = True) -> bool:
        """Recompile when the revision moved (or always with ``force``). True when it did."""
        if not force and self.policy is not None and policy_revision() == self.policy.revision:
            return False
        self.policy = admission_policy(admission_cluster())
        REVISION.set(self.policy.revision)
        return True

    def record(self, decision: AdmissionDecision) -> None:
        self.pending.append(decision)

    def flush(self) -> int:
        """Write buffered decisions in one batch and trim the log; returns how many were written."""
        batch = []
        while self.pending:
            batch.append(self.pending.popleft())
        if batch:
            AdmissionDecision.objects.bulk_create(batch)
            newest = AdmissionDecision.objects.order_by("-id").values_list("id", flat=True).first() or 0
            AdmissionDecision.objects.filter(id__lte=newest - settings.ALLOT_ADMISSION_LOG_KEEP).delete()
        return len(batch)

    def _start(self) -> None:
        if self.started or not settings.ALLOT_ADMISSION_BACKGROUND:
            return
        self.started = True
        threading.Thread(target=self._loop, name="allot-admission", daemon=True).start()

    def _loop(self) -> None:
        last_refresh = time.monotonic()
        while True:
            time.sleep(1.0)
            try:
                close_old_connections()
                self.flush()
                if time.monotonic() - last_refresh >= settings.ALLOT_ADMISSION_REFRESH_SECONDS:
                    last_refresh = time.monotonic()
                    self.refresh(force=False)
            except Exception:  # keep serving the last good policy; say why
                log.exception("admission background refresh failed; serving the last good policy")


STATE = _State()


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def decision_row(
    *, webhook: str, request: dict[str, Any], allowed: bool, reason: str, message: str, unit: str, latency_ms: float
) -> AdmissionDecision:
    """A log row from any request, however malformed: every field is read defensively."""
    meta = _dict(_dict(request.get("object")).get("metadata"))
    labels = _dict(meta.get("labels"))
    return AdmissionDecision(
        at=timezone.now(),
        cluster=STATE.policy.cluster if STATE.policy else "",
        webhook=webhook,
        uid=str(request.get("uid", ""))[:64],
        namespace=str(request.get("namespace") or "")[:63],
        kind=str(_dict(request.get("kind")).get("kind", ""))[:64],
        name=str(meta.get("name") or "")[:253],
        operation=str(request.get("operation") or "")[:16],
        allowed=allowed,
        reason=reason,
        message=message,
        unit_path=unit,
        owner=str(labels.get("allot.dev/owner", ""))[:150],
        latency_ms=latency_ms,
    )
