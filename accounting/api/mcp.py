"""A read-only MCP server (issue #44.5): the answers of the API — why a workload or a Slurm job waits, a unit's
waiting work, the reclaim SLO, showback, the governance plan — as Model Context Protocol tools for assistants.

Transport: MCP's Streamable HTTP, one endpoint, ``POST /api/v1/mcp/`` with a JSON-RPC 2.0 message (or a
batch) and a JSON answer (``initialize``, ``ping``, ``tools/list``, ``tools/call``; a notification gets 202 and
no body). Stateless: no session id. Each tool is the API's own GET, called inside the same request with the
caller's credentials (its token or session), so it answers exactly what the API answers to that caller:
the same read rules, the same 400 naming the field, the same 404."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.core.handlers.wsgi import WSGIRequest
from django.urls import Resolver404, resolve
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from quotas.errors import control_character

BATCH_MAX = 20
"""Messages in one batch at most: each tool call is an API request, and a batch holds one worker thread."""
BATCH_SECONDS = 10.0
"""A batch stops taking calls after this long (well inside gunicorn's timeout); the calls left are answered with
an error saying to send them again."""
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
"""The MCP revisions this server speaks, newest first: it answers a client in its own, else the newest."""
KEPT = ("HTTP_", "SERVER_", "REMOTE_")
"""What the inner GET keeps of the MCP request's environment: its headers (the token), host and client."""
PERIOD = {
    "month": {"type": "string", "description": "YYYY-MM (UTC)", "pattern": r"^\d{4}-\d{2}$"},
    "day": {"type": "string", "description": "YYYY-MM-DD (UTC), instead of a month"},
    "within": {"type": "string", "description": "A unit path: it and everything below (e.g. acme/research)"},
}


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    properties: Mapping[str, Any]
    required: tuple[str, ...]
    path: Callable[[Mapping[str, str]], tuple[str, dict[str, str]]]
    """Arguments → the API path and its query."""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": {
                "type": "object", "properties": dict(self.properties), "required": list(self.required),
                "additionalProperties": False,
            },
            "annotations": {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                            "openWorldHint": False},
        }  # fmt: skip


def _q(value: str) -> str:
    return quote(value, safe="")


def _picked(args: Mapping[str, str], *names: str) -> dict[str, str]:
    return {n: args[n] for n in names if args.get(n)}


TOOLS = (
    Tool(
        "explain_workload", "Why a Kubernetes workload waits",
        "Ranked causes in Allot's terms (who holds its unit's guarantee, a borrowing limit, a lent guarantee being "
        "reclaimed and by when, a spent budget, a pin, the queue ahead) and what would make it run.",
        {"cluster": {"type": "string"}, "namespace": {"type": "string"},
         "name": {"type": "string", "description": "The job as kind/name (job/train), or the Workload's name"}},
        ("cluster", "namespace", "name"),
        lambda a: (f"/api/v1/waiting/{_q(a['cluster'])}/{_q(a['namespace'])}/{quote(a['name'])}/", {}),
    ),
    Tool(
        "explain_slurm_job", "Why a Slurm job waits",
        "squeue's reason in Allot's terms (the QOS that holds it and the jobs holding it) and what would make it run.",
        {"cluster": {"type": "string"}, "job": {"type": "string", "description": "The job id"}},
        ("cluster", "job"),
        lambda a: (f"/api/v1/waiting/{_q(a['cluster'])}/{_q(a['job'])}/", {}),
    ),
    Tool(
        "unit_waiting", "A unit's waiting work",
        "Each waiting workload of a unit and its subtree, oldest first, with its causes and ways out.",
        {"unit": {"type": "string", "description": "A unit path, e.g. acme/research/nlp"}}, ("unit",),
        lambda a: ("/api/v1/waiting/", _picked(a, "unit")),
    ),
    Tool(
        "reclaim_slo", "Promises kept",
        "Per contract, lender and flavor: reclaims, p50/p95 from the ask to the admission, the share within the "
        "promise, the asks no borrower was preempted for.",
        PERIOD, (), lambda a: ("/api/v1/reclaim-slo/", _picked(a, "month", "day", "within")),
    ),
    Tool(
        "showback", "Showback",
        "Device-hours and costs per unit and flavor for a month or a day, adding up to the fleet.",
        PERIOD, (), lambda a: ("/api/v1/showback/", _picked(a, "month", "day", "within")),
    ),
    Tool(
        "plan", "The governance plan",
        "One feasible set of quota changes for a subtree from a month's demand, with its evidence.",
        {"unit": {"type": "string", "description": "An organisation, department or team path"},
         "month": PERIOD["month"]},
        ("unit", "month"), lambda a: ("/api/v1/plans/", _picked(a, "unit", "month")),
    ),
)  # fmt: skip
BY_NAME = {t.name: t for t in TOOLS}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("allot")
    except PackageNotFoundError:
        return "unknown"


def _error(ident: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _call(request: Request, tool: Tool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's API GET, inside this request, as its caller. Its arguments pass the API's input rule first
    (the inner GET does not go through the middleware): no control character, a NUL byte included."""
    if not isinstance(args, Mapping):
        raise ValueError(f"{tool.name}: arguments must be an object, got {type(args).__name__}")
    for name, value in args.items():
        bad = control_character(value) if isinstance(value, str) else None
        if bad:
            raise ValueError(f"{tool.name}: argument {name} contains the control character {bad}: remove it")
    missing = [n for n in tool.required if not isinstance(args.get(n), str) or not args.get(n)]
    unknown = sorted(set(args) - set(tool.properties))
    if missing or unknown or any(not isinstance(v, str) for v in args.values()):
        problem = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}" if unknown else ""
        raise ValueError(
            f"{tool.name}: {problem or 'every argument is a string'}; it takes {', '.join(tool.properties)}"
        )
    path, query = tool.path(args)
    kept = {k: v for k, v in request.META.items() if k.startswith(KEPT) or k == "wsgi.url_scheme"}
    environ = {
        **kept,
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": urlencode(query), "wsgi.input": io.BytesIO(b""),
        "SCRIPT_NAME": "",
    }  # fmt: skip
    inner = WSGIRequest(environ)
    inner.user = request._request.user
    inner.session = getattr(request._request, "session", None)  # type: ignore[assignment]
    try:
        match = resolve(path)
    except Resolver404:
        return {"status": 404, "data": {"detail": f"no such resource: {path}"}}
    answer = match.func(inner, *match.args, **match.kwargs)
    data = getattr(answer, "data", None)
    if data is None:
        data = json.loads(answer.render().content or b"null") if hasattr(answer, "render") else None
    return {"status": answer.status_code, "data": json.loads(json.dumps(data, default=str))}


def _handle(request: Request, message: Any) -> dict[str, Any] | None:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return _error(message.get("id") if isinstance(message, dict) else None, -32600, "not a JSON-RPC 2.0 request")
    ident, method, params = message.get("id"), message["method"], message.get("params")
    if "id" not in message:  # a notification (notifications/initialized…): nothing to answer
        return None
    if ident is not None and not isinstance(ident, (str, int)):
        return _error(None, -32600, "id must be a string or a number")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return _error(ident, -32602, f"params must be an object, got {type(params).__name__}")
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "allot", "title": "Allot", "version": _version()},
            "instructions": "Read-only answers about GPU quotas, waiting work and promises, under your own read rules.",
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [t.as_json() for t in TOOLS]}
    elif method == "tools/call":
        tool = BY_NAME.get(str(params.get("name")))
        if tool is None:
            return _error(ident, -32602, f"unknown tool {params.get('name')!r}: {', '.join(BY_NAME)}")
        try:
            called = _call(request, tool, params.get("arguments") or {})
        except ValueError as exc:
            return _error(ident, -32602, str(exc))
        text = json.dumps(called["data"], indent=1)
        result = {
            "content": [{"type": "text", "text": text}],
            "structuredContent": called["data"] if isinstance(called["data"], dict) else {"result": called["data"]},
            "isError": called["status"] >= 400,
        }
    else:
        return _error(ident, -32601, f"method {method!r} is not served: initialize, ping, tools/list, tools/call")
    return {"jsonrpc": "2.0", "id": ident, "result": result}


@extend_schema(
    operation_id="mcp",
    request=OpenApiTypes.OBJECT,
    responses={200: OpenApiTypes.OBJECT, 202: None},
    summary="MCP (Streamable HTTP): the API's answers as read-only tools for assistants",
)
@api_view(["POST"])
@authentication_classes([TokenAuthentication, SessionAuthentication])  # a token first: 401 with a challenge
@permission_classes([IsAuthenticated])
def mcp_view(request: Request) -> Response:
    """One JSON-RPC 2.0 message or a batch (at most 20, answered within about 10 s; the calls left are answered
    with an error to send them again): initialize, ping, tools/list, tools/call (explain_workload,
    explain_slurm_job, unit_waiting, reclaim_slo, showback, plan). Without credentials: 401 (Token)."""
    body = request.data
    if isinstance(body, list):
        if not body:
            return Response(_error(None, -32600, "an empty batch"))
        if len(body) > BATCH_MAX:
            return Response(_error(None, -32600, f"a batch of {len(body)}: send at most {BATCH_MAX} at once"))
        answers, started = [], time.monotonic()
        for message in body:
            if time.monotonic() - started > BATCH_SECONDS:
                if isinstance(message, dict) and "id" in message:  # a notification is answered by nothing
                    late = f"not answered: the batch took over {BATCH_SECONDS:.0f} s; send it again"
                    answers.append(_error(message["id"], -32000, late))
                continue
            answer = _handle(request, message)
            if answer is not None:
                answers.append(answer)
        return Response(answers) if answers else Response(status=202)
    answer = _handle(request, body)
    return Response(answer) if answer is not None else Response(status=202)
