"""Hostile input on every surface is a 4xx naming the problem: JSON nested past any real body on the API's write
endpoints, the MCP endpoint's JSON-RPC shapes, NUL bytes and batch sizes, and what the command-line tools print
of cluster text or send over plain HTTP."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token

from accounting import why
from accounting.api.mcp import BATCH_MAX
from quotas.api.parsers import MAX_DEPTH, too_deep

pytestmark = pytest.mark.django_db


def test_depth_is_counted_outside_strings():
    assert not too_deep(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert too_deep(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert not too_deep(json.dumps({"reason": "[" * 5000}).encode())  # brackets in a string are text
    assert not too_deep(json.dumps([[1], [2]] * 400).encode())  # many brackets, shallow
    assert too_deep(b'{"a": "\\"[", "b": ' + b"[" * 70 + b"]" * 70 + b"}")  # an escaped quote stays in its string


@pytest.mark.parametrize("path", ["/api/v1/quotas/bulk/", "/api/v1/change-requests/", "/api/v1/units/"])
def test_deeply_nested_json_is_a_400_on_json_write_endpoints(demo, client, path):
    client.force_login(User.objects.get(username="admin"))
    answer = client.post(path, "[" * 5000 + "]" * 5000, content_type="application/json")
    assert answer.status_code == 400, answer.content[:300]
    assert f"more than {MAX_DEPTH} deep" in answer.json()["detail"]


def mcp(client, body, token):
    return client.post(
        "/api/v1/mcp/", body if isinstance(body, str) else json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
    )  # fmt: skip


@pytest.fixture
def token(demo):
    return Token.objects.create(user=User.objects.get(username="viewer")).key


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ("explain", "params must be an object, got str"),
        (["explain_workload"], "params must be an object, got list"),
        ({"name": "unit_waiting", "arguments": ["acme"]}, "arguments must be an object, got list"),
        (
            {"name": "unit_waiting", "arguments": {"unit": "acme\x00"}},
            "argument unit contains the control character U+0000",
        ),
        ({"name": "unit_waiting", "arguments": {"unit": "acme\x1b[2J"}}, "control character U+001B"),
    ],
)
def test_mcp_shapes_and_control_characters_are_json_rpc_errors(client, token, params, fragment):
    answer = mcp(client, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, token)
    assert answer.status_code == 200
    error = answer.json()["error"]
    assert error["code"] == -32602 and fragment in error["message"]


def test_an_mcp_batch_is_bounded(client, token):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    answer = mcp(client, [ping] * (BATCH_MAX + 1), token).json()
    assert answer["error"]["code"] == -32600 and f"send at most {BATCH_MAX}" in answer["error"]["message"]
    assert len(mcp(client, [ping] * BATCH_MAX, token).json()) == BATCH_MAX
    assert mcp(client, [], token).json()["error"]["message"] == "an empty batch"


def test_mcp_without_credentials_is_a_401_with_a_challenge(client):
    answer = client.post("/api/v1/mcp/", "{}", content_type="application/json")
    assert answer.status_code == 401 and answer["WWW-Authenticate"].startswith("Token")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0", 2]), "id": JSON, "method": st.sampled_from(
        ["initialize", "ping", "tools/list", "tools/call", "nope"]) | st.text(max_size=6)},
    optional={"params": JSON | st.fixed_dictionaries({"name": st.sampled_from(["unit_waiting", "plan", "showback"]),
                                                      "arguments": JSON})},
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=MESSAGE | st.lists(MESSAGE, max_size=3) | JSON)
def test_fuzz_the_mcp_endpoint_never_answers_a_5xx(client, token, body):
    answer = mcp(client, body, token)
    assert answer.status_code < 500, (body, answer.content[:300])


def test_the_cli_strips_control_characters_from_what_a_cluster_wrote():
    data = {
        "workload": "ns/job-\x1b[2Jx", "job": "Job/x\r", "unit": "acme", "state": "pending", "devices": 1,
        "age_seconds": 3, "causes": [{"title": "over \u202eceiling", "evidence": ["\x07bell"]}],
        "scheduler_says": "Pending: \x1b]0;owned\x07",
    }  # fmt: skip
    out = why.printable(why.render(data))
    assert "\x1b" not in out and "\r" not in out and "\x07" not in out and "\u202e" not in out
    assert "ns/job-[2Jx (Job/x) of acme" in out and "\n" in out


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("https://allot.example.org", False),
        ("http://127.0.0.1:8000", False),
        ("http://localhost:8000", False),
        ("http://[::1]:8000", False),
        ("http://allot.example.org", True),
        ("http://10.0.0.5", True),
        ("ftp://allot.example.org", True),
    ],
)
def test_the_token_goes_over_plain_http_only_to_this_machine(url, refused):
    assert (why.plain_http_refused(url) is not None) is refused


def test_the_cli_refuses_plain_http_unless_told_and_its_help_names_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("ALLOT_URL", "http://allot.example.org")
    monkeypatch.setenv("ALLOT_TOKEN", "secret")
    assert why.slurm_main(["42", "--cluster", "c"]) == 2
    assert "use https://, or --allow-http" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        why.kubectl_main(["--help"])
    shown = capsys.readouterr().out
    assert "ALLOT_URL" in shown and "ALLOT_TOKEN" in shown and "issue" not in shown and "``" not in shown


def test_a_body_over_the_upload_limit_is_a_400_read_no_further(demo, client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client.force_login(User.objects.get(username="admin"))
    answer = client.post("/api/v1/units/", json.dumps({"reason": "x" * 20_000}), content_type="application/json")
    assert answer.status_code == 400 and "larger than 10000 bytes" in answer.json()["detail"]
