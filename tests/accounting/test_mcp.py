"""The read-only MCP server (issue #44.5): an assistant's session over Streamable HTTP with a person's token gets
the API's own answers as tools, under that person's read rules."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.accounting.test_waiting_api import records

pytestmark = pytest.mark.django_db


def rpc(client, token, method, params=None, ident=1):
    body = {"jsonrpc": "2.0", "method": method, **({"id": ident} if ident is not None else {})}
    if params is not None:
        body["params"] = params
    headers = {"HTTP_AUTHORIZATION": f"Token {token}", "HTTP_ACCEPT": "application/json, text/event-stream"}
    return client.post("/api/v1/mcp/", json.dumps(body), content_type="application/json", **headers)


def test_an_assistant_lists_the_tools_and_calls_them_as_its_person(demo, client, settings):
    unit, _ = records(demo)
    token = Token.objects.create(user=User.objects.get(username="lead-speech")).key
    hello = rpc(client, token, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                              "clientInfo": {"name": "test", "version": "1"}})  # fmt: skip
    assert hello.status_code == 200
    result = hello.json()["result"]
    assert result["protocolVersion"] == "2025-06-18" and result["capabilities"]["tools"] == {"listChanged": False}
    assert rpc(client, token, "notifications/initialized", ident=None).status_code == 202
    tools = rpc(client, token, "tools/list").json()["result"]["tools"]
    assert [t["name"] for t in tools] == [
        "explain_workload", "explain_slurm_job", "unit_waiting", "reclaim_slo", "showback", "plan"
    ]  # fmt: skip
    assert all(t["annotations"]["readOnlyHint"] for t in tools)

    called = rpc(client, token, "tools/call", {"name": "explain_workload", "arguments": {
        "cluster": "k8s-west", "namespace": "speech", "name": "job/second"}}).json()["result"]  # fmt: skip
    assert called["isError"] is False
    api = client.get("/api/v1/waiting/k8s-west/speech/job/second/", HTTP_AUTHORIZATION=f"Token {token}").json()
    assert called["structuredContent"]["causes"] == api["causes"]  # the API's own answer
    assert json.loads(called["content"][0]["text"])["workload"] == "speech/job-second-2"
    listed = rpc(client, token, "tools/call", {"name": "unit_waiting", "arguments": {"unit": unit.path}}).json()
    assert [w["workload"] for w in listed["result"]["structuredContent"]["waiting"]] == ["speech/job-second-2"]

    # another lead, under lead visibility: the tool says what the API says (404), as an error result
    settings.ALLOT_SHOWBACK_VISIBILITY = "leads"
    other = Token.objects.create(user=User.objects.get(username="lead-nlp")).key
    hidden = rpc(client, other, "tools/call", {"name": "explain_workload", "arguments": {
        "cluster": "k8s-west", "namespace": "speech", "name": "job/second"}}).json()["result"]  # fmt: skip
    assert hidden["isError"] is True and "you may read" in hidden["content"][0]["text"]
    bad = rpc(client, token, "tools/call", {"name": "showback", "arguments": {"month": "2026-13"}}).json()["result"]
    assert bad["isError"] is True and "month" in bad["structuredContent"]


def test_protocol_errors_name_what_is_wrong(demo, client):
    token = Token.objects.create(user=User.objects.get(username="lead-speech")).key
    unknown = rpc(client, token, "tools/call", {"name": "delete_everything", "arguments": {}}).json()
    assert unknown["error"]["code"] == -32602 and "explain_workload" in unknown["error"]["message"]
    missing = rpc(client, token, "tools/call", {"name": "unit_waiting", "arguments": {}}).json()
    assert missing["error"]["code"] == -32602 and "missing unit" in missing["error"]["message"]
    assert rpc(client, token, "resources/list").json()["error"]["code"] == -32601
    assert rpc(client, token, "ping").json()["result"] == {}
    old = rpc(client, token, "initialize", {"protocolVersion": "2023-01-01"}).json()["result"]
    assert old["protocolVersion"] == "2025-06-18"  # not one it speaks: it offers its newest
    batch = client.post(
        "/api/v1/mcp/",
        json.dumps([{"jsonrpc": "2.0", "id": 7, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"}]),
        content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}",
    )  # fmt: skip
    assert batch.json() == [{"jsonrpc": "2.0", "id": 7, "result": {}}]
    anonymous = client.post("/api/v1/mcp/", "{}", content_type="application/json")
    assert anonymous.status_code in (401, 403)
