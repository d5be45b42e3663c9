"""Kubernetes admission webhooks: AdmissionReview v1 in, AdmissionReview v1 out.

Answers come from the in-memory policy (no database on the hot path). Malformed input gets a 400
that names the problem; anything Allot cannot decide is denied, never allowed by accident, and never
a 500. Dry runs leave no trace in the decision log.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from admission import workers
from admission.lines import LINES
from admission.policy.decide import MAX_WARNING, Decision, Reason, decide
from admission.runtime import DECISIONS, LATENCY, STATE, PolicyUnavailable, decision_row

log = logging.getLogger("allot.admission")
API_VERSION, KIND = "admission.k8s.io/v1", "AdmissionReview"


def _bad(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"detail": message}, status=status)


def _authenticated(request: HttpRequest) -> str | None:
    """None when the caller may call; else why not."""
    mode = settings.ALLOT_ADMISSION_AUTH
    if mode == "none":
        return None
    if mode == "client-cert":
        header = "HTTP_" + settings.ALLOT_ADMISSION_CLIENT_CERT_HEADER.upper().replace("-", "_")
        return None if request.META.get(header) == "SUCCESS" else "a verified client certificate is required"
    token = settings.ALLOT_ADMISSION_TOKEN
    if not token:
        return "no ALLOT_ADMISSION_TOKEN is configured: every call is refused"
    sent = request.META.get("HTTP_AUTHORIZATION", "")
    if not sent.startswith("Bearer ") or not hmac.compare_digest(sent[7:].encode(), token.encode()):
        return "a valid bearer token is required"
    return None


UID = re.compile(rb'"uid"\s*:\s*"([^"\\]{1,128})"')


def _too_large(head: bytes, size: str) -> HttpResponse:
    """The object is over ALLOT_ADMISSION_MAX_BODY_BYTES: a denial the API server shows the user when
    the review's uid can be read from its first bytes (it comes first), else a JSON 413."""
    limit = settings.ALLOT_ADMISSION_MAX_BODY_BYTES
    message = f"the object is too large for Allot to judge ({size}; the limit is {limit} bytes)"
    found = UID.search(head[:65536])
    if found is None:
        return _bad(message, 413)
    decision = Decision(False, Reason.TOO_LARGE, message + ": make it smaller (e.g. move data into a ConfigMap)")
    body = {"apiVersion": API_VERSION, "kind": KIND, "response": _answer(found.group(1).decode(), decision)}
    return HttpResponse(json.dumps(body), content_type="application/json")


def _read_review(request: HttpRequest) -> tuple[dict[str, Any] | None, HttpResponse | None]:
    if request.method != "POST":
        return None, _bad("POST an AdmissionReview", 405)
    refused = _authenticated(request)
    if refused:
        return None, _bad(refused, 401)
    limit = settings.ALLOT_ADMISSION_MAX_BODY_BYTES
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    raw = request.read(limit + 1)  # never more than the limit in memory (Django's own cap is not used)
    if length > limit or len(raw) > limit:
        return None, _too_large(raw, f"{length} bytes" if length else f"over {limit} bytes")
    try:
        review = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, _bad("body is not valid UTF-8")
    except RecursionError:
        return None, _bad("body nests JSON too deeply to be an AdmissionReview")
    except ValueError:
        return None, _bad("body is not JSON")
    if not isinstance(review, dict) or review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        return None, _bad(f"expected apiVersion {API_VERSION} and kind {KIND}")
    inner = review.get("request")
    if not isinstance(inner, dict) or not isinstance(inner.get("uid"), str) or not inner["uid"]:
        return None, _bad("request.uid is missing")
    return review, None


def _answer(uid: str, decision: Decision, *, with_patch: bool = False) -> dict[str, Any]:
    response: dict[str, Any] = {
        "uid": uid,
        "allowed": decision.allowed,
        "auditAnnotations": {"reason": decision.reason.value},
    }
    if not decision.allowed:
        response["status"] = {
            "code": 403,
            "reason": "Forbidden",
            "message": f"Allot [{decision.reason.value}]: {decision.message}",
        }
    if decision.warnings:
        response["warnings"] = [w[:MAX_WARNING] for w in decision.warnings]
    if with_patch and decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(decision.patch)).encode()).decode()
    return response


class _Answer(HttpResponse):
    """An AdmissionReview answer with its length set (no chunked encoding) whose bookkeeping — the metrics,
    the log line, the decision-log row — runs in ``close()``: the WSGI server calls it after it has sent the
    bytes, so the API server's wait ends with the decision, not with Allot's records of it (issue #40.6)."""

    def __init__(self, body: dict[str, Any], after: Callable[[], None] | None = None) -> None:
        content = json.dumps(body).encode()
        super().__init__(content, content_type="application/json")
        self["Content-Length"] = str(len(content))
        self._after = after

    def close(self) -> None:
        after, self._after = self._after, None  # once, however many times the server closes it
        try:
            if after is not None:
                after()
        except Exception:  # records are best-effort: the answer has gone already
            log.exception("admission bookkeeping failed")
        finally:
            super().close()


def _serve(request: HttpRequest, webhook: str) -> HttpResponse:
    started = time.perf_counter()
    review, error = _read_review(request)
    if error is not None:
        return error
    assert review is not None
    inner = review["request"]
    try:
        decision = _decide(inner, webhook)
    except Exception as exc:  # never a 500, never an accidental allow
        log.exception("admission decision failed uid=%s", inner.get("uid"))
        decision = Decision(
            False,
            Reason.MALFORMED,
            f"Allot could not decide ({type(exc).__name__}); try again or ask the platform team",
        )
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": _answer(inner["uid"], decision, with_patch=webhook == "mutate"),
    }
    latency = time.perf_counter() - started
    return _Answer(body, lambda: _record(webhook, inner, decision, latency))


_COUNTERS: dict[tuple[str, str, Reason, bool], Any] = {}
"""The decision counter's child per label set, found once: ``labels()`` checks and locks at every call."""
_TIMERS: dict[str, Any] = {}


def _record(webhook: str, inner: dict[str, Any], decision: Decision, latency: float) -> None:
    """What a decision leaves behind: its metrics, a JSON log line (for a refusal, or as ALLOT_ADMISSION_LOG_LINES
    says) and (unless a dry run) a decision-log row."""
    key = (webhook, decision.kind, decision.reason, decision.allowed)
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = DECISIONS.labels(
            webhook, decision.kind or "?", decision.reason.value, str(decision.allowed).lower()
        )
    counter.inc()
    timer = _TIMERS.get(webhook)
    if timer is None:
        timer = _TIMERS[webhook] = LATENCY.labels(webhook)
    timer.observe(latency)
    which = settings.ALLOT_ADMISSION_LOG_LINES
    if which == "all" or (which == "denied" and not decision.allowed):
        _log_line(webhook, inner, decision, latency)
    if not inner.get("dryRun"):
        STATE.record(
            decision_row(
                webhook=webhook,
                request=inner,
                allowed=decision.allowed,
                reason=decision.reason.value,
                message=decision.message,
                unit=decision.unit,
                latency_ms=latency * 1000,
            )
        )


def _log_line(webhook: str, inner: dict[str, Any], decision: Decision, latency: float) -> None:
    LINES.add(
        {
            "event": "admission",
            "webhook": webhook,
            "uid": inner["uid"],
            "kind": decision.kind,
            "namespace": inner.get("namespace"),
            "allowed": decision.allowed,
            "reason": decision.reason.value,
            "dry_run": bool(inner.get("dryRun")),
            "ms": round(latency * 1000, 3),
        }
    )


def _decide(inner: dict[str, Any], webhook: str) -> Decision:
    """The policy's decision; while no policy is loaded, exempt namespaces and deletions are still
    let through and everything else is denied as ``policy_unavailable`` (never as malformed)."""
    exempt = str(inner.get("namespace") or "") in settings.ALLOT_ADMISSION_EXEMPT_NAMESPACES
    try:
        policy = STATE.current()
    except PolicyUnavailable as exc:
        if exempt or inner.get("operation") in ("DELETE", "CONNECT"):
            return Decision(True, Reason.NOT_CHECKED)
        return Decision(
            False,
            Reason.POLICY_UNAVAILABLE,
            f"Allot's policy is not loaded yet ({exc}): workloads cannot be judged until its database answers; "
            f"try again in a minute, or ask the platform team",
        )
    return decide(policy, inner, mutate=webhook == "mutate")


@csrf_exempt
def validate(request: HttpRequest) -> HttpResponse:
    return _serve(request, "validate")


@csrf_exempt
def mutate(request: HttpRequest) -> HttpResponse:
    return _serve(request, "mutate")


@csrf_exempt
def noop(request: HttpRequest) -> HttpResponse:
    """The same stack with no policy: parse, authenticate, echo the uid, allow. For benchmarks."""
    review, error = _read_review(request)
    if error is not None:
        return error
    assert review is not None
    body = {"apiVersion": API_VERSION, "kind": KIND, "response": {"uid": review["request"]["uid"], "allowed": True}}
    return _Answer(body)


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics; with several workers set PROMETHEUS_MULTIPROC_DIR (prometheus_client's
    multiprocess mode) so every worker's counts are summed."""
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Readiness is /admission/readyz."""
    policy = STATE.policy
    return JsonResponse({"ok": True, "policy_revision": policy.revision if policy else None})


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 only once this worker has a policy (the first call tries to load it) **and** no other
    worker of the pod has published that it has none (admission.workers), else 503 with the cause, so no
    API-server call is routed to a pod where any worker could only answer policy_unavailable."""
    try:
        policy = STATE.current()
    except PolicyUnavailable as exc:
        return JsonResponse({"ready": False, "why": f"no policy loaded: {exc}"}, status=503)
    stuck = workers.unready()
    if stuck:
        why = "; ".join(f"worker {w['pid']}: {w.get('error') or 'no policy loaded yet'}" for w in stuck)
        return JsonResponse({"ready": False, "why": f"not every worker can decide: {why}"}, status=503)
    revisions = sorted({w["revision"] for w in workers.workers()} | {policy.revision})
    answer: dict[str, Any] = {
        "ready": True,
        "policy_revision": policy.revision,
        "cluster": policy.cluster,
        "worker_revisions": revisions,
    }
    # a decision log that cannot be written is said, not made a reason to stop deciding: every decision is
    # still answered, and the ones the log refused are in the spill file (admission.runtime.spill)
    failing = {w["pid"]: w["log_error"] for w in workers.unlogged()}
    if STATE.log_error:
        failing[os.getpid()] = STATE.log_error
    if failing or STATE.spilled:
        answer["decision_log"] = {
            "failing": [f"worker {pid}: {why}" for pid, why in sorted(failing.items())],
            "spilled_here": STATE.spilled,
            "spill_file": settings.ALLOT_ADMISSION_SPILL_FILE,
        }
    return JsonResponse(answer)


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """The webhook deployment has no portal pages: a plain JSON 404."""
    return JsonResponse({"detail": "not found: this deployment serves /admission/k8s/validate and /mutate"}, status=404)
