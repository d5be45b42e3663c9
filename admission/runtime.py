"""Per-process state of the webhook: the compiled policy, the decision-log buffer, the metrics.

The hot path only reads ``STATE.policy`` (a reference swap makes refreshes atomic) and appends to a
bounded deque. A background thread checks the policy revision every ALLOT_ADMISSION_REFRESH_SECONDS
(one cheap query), recompiles when it changed, and writes buffered decisions every FLUSH_SECONDS in one
batch (a COPY on PostgreSQL), trimming the log to ALLOT_ADMISSION_LOG_KEEP rows every TRIM_SECONDS.
Nothing here is needed to scale out: every replica rebuilds its own cache from the database.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from operator import itemgetter
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections, router, transaction
from django.utils import timezone
from prometheus_client import Counter, Gauge, Histogram

from admission import workers
from admission.lines import LINES
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
UNLOGGED = Counter(
    "allot_admission_decisions_unlogged",
    "Decisions the decision log refused to store, written to ALLOT_ADMISSION_SPILL_FILE instead",
)
LOG_FAILING = Gauge("allot_admission_decision_log_failing", "1 while this process cannot write its decision log")


class PolicyUnavailable(RuntimeError):
    """No policy is loaded yet (the database did not answer): the webhook cannot judge workloads."""


FLUSH_SECONDS = 0.2
"""How often the background thread writes buffered decisions: small batches, so that adapting them never holds
the interpreter long beside the request threads (a second's batch put a 30–60 ms tail on the answers)."""
TRIM_SECONDS = 30.0
"""How often it trims the log to ALLOT_ADMISSION_LOG_KEEP rows (it may hold a little more in between)."""
RETRY_SECONDS = 1.0
"""While no policy is loaded, a request tries to load it at most this often (others fail fast)."""


class _State:
    def __init__(self) -> None:
        self.policy: AdmissionPolicy | None = None
        self.pending: deque[dict[str, Any]] = deque(maxlen=10_000)  # decision_row()s, inserted by flush()
        self.lock = threading.Lock()
        self.started = False
        self.last_error = ""
        self.failed_at = 0.0
        self.log_error = ""
        """Why the last write of the decision log failed ("" once one succeeds): readiness reports it."""
        self.spilled = 0

    def current(self) -> AdmissionPolicy:
        """The loaded policy; the first call loads it. Raises PolicyUnavailable (with the cause) while
        it cannot be loaded; the background thread keeps trying."""
        policy = self.policy
        if policy is not None:
            return policy
        with self.lock:
            if self.policy is None and time.monotonic() - self.failed_at >= RETRY_SECONDS:
                try:
                    self.refresh()
                    self.last_error = ""
                except Exception as exc:
                    self.failed_at = time.monotonic()
                    self.last_error = f"{type(exc).__name__}: {exc}".strip()[:300]
                    log.warning("admission policy could not be loaded: %s", self.last_error)
                    self._publish(None, self.last_error)
            self._start()
        if self.policy is None:
            raise PolicyUnavailable(self.last_error or "the policy is being loaded")
        return self.policy

    def refresh(self, *, force: bool = True, publish: bool = True) -> bool:
        """Recompile when the revision moved (or always with ``force``, or when none is loaded).
        True when it did."""
        if not force and self.policy is not None and policy_revision() == self.policy.revision:
            return False
        self.policy = admission_policy(admission_cluster())
        REVISION.set(self.policy.revision)
        if publish:
            self._publish(self.policy.revision)
        return True

    def preload(self) -> None:
        """Load the policy in gunicorn's master before it forks (deploy/gunicorn.conf.py), so every worker
        starts able to decide; a database that does not answer leaves each worker to load its own."""
        from django.db import connections

        try:
            self.refresh(publish=False)  # the master decides nothing: only its workers publish
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}".strip()[:300]
            log.warning("admission policy not preloaded: %s", self.last_error)
        finally:
            connections.close_all()  # no connection may be shared by the forked workers

    def worker_started(self) -> None:
        """In each forked worker (gunicorn's post_worker_init hook): its first word on its state, and its
        own refresh loop (threads do not survive the fork; a preloaded policy would otherwise never move)."""
        self._publish(self.policy.revision if self.policy else None, self.last_error)
        self._start()

    def record(self, row: dict[str, Any]) -> None:
        """Buffer a decision-log row (decision_row's fields); flush() inserts it, off the request."""
        self.pending.append(row)

    def flush(self, *, trim: bool = True) -> int:
        """Write buffered decisions in one batch and (``trim``) trim the log, and the decisions' waiting log lines
        (admission.lines); returns how many rows were written."""
        try:
            LINES.flush()
        except (OSError, ValueError):  # stderr closed or gone: the lines are lost, never the decision-log rows
            log.exception("admission decision lines could not be written")
        batch: list[dict[str, Any]] = []
        while self.pending:
            batch.append(self.pending.popleft())
        if batch:
            try:
                _insert(batch)
            except Exception as exc:
                if isinstance(exc, UNREACHABLE):
                    self._failing(exc)
                    self.pending.extendleft(reversed(batch))  # the database is away: keep them (bounded)
                    raise
                self._one_by_one(batch)  # a row the database refuses must not hold back the others
            else:
                self._written()
        if batch and trim:
            newest = AdmissionDecision.objects.order_by("-id").values_list("id", flat=True).first() or 0
            AdmissionDecision.objects.filter(id__lte=newest - settings.ALLOT_ADMISSION_LOG_KEEP).delete()
        return len(batch)

    def _one_by_one(self, batch: list[dict[str, Any]]) -> None:
        """Each row of a refused batch on its own; a row refused again goes to the spill file, counted and
        said (readiness, the metric, the log), never dropped. Raises, keeping the rest, if the database goes."""
        for i, row in enumerate(batch):
            try:
                _insert([row])
            except Exception as exc:
                if isinstance(exc, UNREACHABLE):
                    self._failing(exc)
                    self.pending.extendleft(reversed(batch[i:]))
                    raise
                self._failing(exc)
                spill(row, exc)
                self.spilled += 1
                UNLOGGED.inc()
            else:
                self._written()

    def _publish(self, revision: int | None, error: str = "") -> None:
        """This worker's state for the pod's readiness (admission.workers), always with its decision log's."""
        workers.publish(revision, error, log_error=self.log_error)

    def _failing(self, exc: BaseException) -> None:
        self.log_error = f"{type(exc).__name__}: {exc}".strip()[:300]
        LOG_FAILING.set(1)
        self._publish(self.policy.revision if self.policy else None, self.last_error)

    def _written(self) -> None:
        if self.log_error:
            self.log_error = ""
            LOG_FAILING.set(0)
            self._publish(self.policy.revision if self.policy else None, self.last_error)

    def _start(self) -> None:
        if self.started or not settings.ALLOT_ADMISSION_BACKGROUND:
            return
        self.started = True
        threading.Thread(target=self._loop, name="allot-admission", daemon=True).start()

    def _loop(self) -> None:
        last_refresh = last_trim = time.monotonic()
        while True:
            time.sleep(FLUSH_SECONDS)
            close_old_connections()
            due = time.monotonic() - last_refresh >= settings.ALLOT_ADMISSION_REFRESH_SECONDS
            if due or self.policy is None:
                last_refresh = time.monotonic()
                try:
                    self.refresh(force=False)
                    self.last_error = ""
                except Exception as exc:  # keep serving the last good policy; say why
                    self.last_error = f"{type(exc).__name__}: {exc}".strip()[:300]
                    log.exception("admission policy refresh failed; serving the last good policy")
                    if self.policy is None:
                        self._publish(None, self.last_error)
            trim = time.monotonic() - last_trim >= TRIM_SECONDS
            try:
                self.flush(trim=trim)
                last_trim = time.monotonic() if trim else last_trim
            except Exception:
                log.exception("admission decision log could not be written; kept for the next try")


STATE = _State()

_FIELDS = [f for f in AdmissionDecision._meta.concrete_fields if not f.primary_key]
_ROW = itemgetter(*(f.name for f in _FIELDS))
_AT = [f.name for f in _FIELDS].index("at")


def _insert(rows: list[dict[str, Any]]) -> None:
    """Insert decision-log rows in one transaction, no model instances: a flush runs beside the request threads
    of its process, and building a thousand models a second held the interpreter long enough to put a 30 ms tail
    on the webhook's answers (bench/admission.py). PostgreSQL: one COPY of the plain tuples (psycopg adapts the
    aware datetimes itself); elsewhere one prepared statement (executemany), the time as the backend stores it."""
    db = router.db_for_write(AdmissionDecision)
    connection = connections[db]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in _FIELDS)
    table = quote(AdmissionDecision._meta.db_table)
    with transaction.atomic(using=db), connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # COPY: no statement per row, on either side
            # the rows were already a buffer in memory: the commit need not wait for the WAL's flush to disk
            # (a database crash may lose the last fraction of a second of them, like a webhook crash does)
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(_ROW(row))
        else:
            at = AdmissionDecision._meta.get_field("at")
            params = []
            for row in rows:
                values = list(_ROW(row))
                values[_AT] = at.get_db_prep_save(values[_AT], connection)  # SQLite stores the time as text
                params.append(values)
            marks = ", ".join(["%s"] * len(_FIELDS))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", params)


UNREACHABLE = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
"""The database cannot be reached (keep the rows and try again), as opposed to refusing these rows: Django's
wrappers, and psycopg's own, which the COPY raises unwrapped."""


def spill(row: dict[str, Any], exc: BaseException) -> None:
    """Append a decision the log refused to ALLOT_ADMISSION_SPILL_FILE (one JSON object a line, with why); if
    even that fails, its fields go to this process's log."""
    line = json.dumps({**row, "at": row["at"].isoformat(), "why": f"{type(exc).__name__}: {exc}"[:300]})
    try:
        path = Path(settings.ALLOT_ADMISSION_SPILL_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
    except OSError:
        log.error("admission decision not logged (the spill file could not be written either): %s", line)
    else:
        log.error("admission decision refused by the decision log, written to %s: %s", path, line)


def safe(text: str) -> str:
    """``text`` as every backend can store it: a NUL byte (PostgreSQL's text refuses it) and a lone surrogate
    (not UTF-8) are written as their escapes, ``\\x00`` and ``\\ud800``; other text is returned as it is."""
    if text.isascii():
        return text.replace("\x00", "\\x00") if "\x00" in text else text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(request: dict[str, Any], meta: dict[str, Any]) -> str:
    """The object's name; a controller's pods arrive with only ``generateName`` on CREATE (the API
    server picks the suffix after admission): ``train-abcde-`` is logged as ``train-abcde-*``."""
    name = meta.get("name") or request.get("name") or ""
    if not name and meta.get("generateName"):
        return f"{meta['generateName']}*"
    return str(name)


def decision_row(
    *, webhook: str, request: dict[str, Any], allowed: bool, reason: str, message: str, unit: str, latency_ms: float
) -> dict[str, Any]:
    """A log row's fields (AdmissionDecision's) from any request, however malformed: every field is read
    defensively. A plain dict, so that the request thread does not pay for a model instance."""
    meta = _dict(_dict(request.get("object")).get("metadata"))
    labels = _dict(meta.get("labels"))
    return {
        "at": timezone.now(),
        "cluster": STATE.policy.cluster if STATE.policy else "",
        "webhook": webhook,
        "uid": safe(str(request.get("uid", "")))[:64],
        "namespace": safe(str(request.get("namespace") or ""))[:63],
        "kind": safe(str(_dict(request.get("kind")).get("kind", "")))[:64],
        "name": safe(_name(request, meta))[:253],
        "operation": safe(str(request.get("operation") or ""))[:16],
        "allowed": allowed,
        "reason": reason,
        "message": safe(message),
        "unit_path": safe(unit),
        "owner": safe(str(labels.get("allot.dev/owner", "")))[:150],
        "latency_ms": latency_ms,
    }
