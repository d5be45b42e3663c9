"""The client path, against exchanges captured from a real kube-apiserver with the Kueue CRDs.

Every request the official client sends through our adapter must be exactly the request the real
server received, and every response the real server gave must be understood.
"""

import json

import pytest

from quotas.integrations.kubernetes import ClusterCallError, KueueClient, api_client_for
from tests.kube_replay import ReplayServer


@pytest.fixture
def api(fixtures):
    return fixtures / "k8s-api"


def client_for(server):
    # the captured exchanges are a v1beta2 server's and hold no discovery call: the version is given
    return KueueClient(api_client_for(f"url:{server.url}"), version="v1beta2")


def body_of(api, name):
    return json.loads(next(api.glob(f"{name}*")).read_text())["request"]["body"]


@pytest.mark.parametrize("name", ["02a", "02b", "02c", "02d", "02e", "02g", "02h", "03e"])
def test_server_side_apply_sends_what_the_real_server_got(api, name):
    with ReplayServer.of(api, name) as server:
        returned = client_for(server).apply(body_of(api, name))
    assert server.mismatches == []
    assert returned["metadata"]["name"] == body_of(api, name)["metadata"]["name"]
    assert returned["metadata"]["managedFields"][0]["manager"] == "allot"


def test_dry_run_apply(api):
    with ReplayServer.of(api, "04a") as server:
        returned = client_for(server).apply(body_of(api, "04a"), dry_run=True)
    assert server.mismatches == []
    assert returned["metadata"]["resourceVersion"] == "707"  # nothing stored


def test_conflict_is_reported_with_the_servers_words_then_forced(api):
    with ReplayServer.of(api, "05c", "05d") as server:
        client = client_for(server)
        with pytest.raises(ClusterCallError) as info:
            client.apply(body_of(api, "05c"))
        forced = client.apply(body_of(api, "05d"), force=True)
    assert server.mismatches == []
    assert (info.value.status, info.value.reason) == (409, "Conflict")
    assert 'conflict with "kubectl-edit"' in info.value.message
    assert info.value.causes[0]["field"] == ".spec.resourceGroups"
    assert [m["manager"] for m in forced["metadata"]["managedFields"]] == ["allot"]


@pytest.mark.parametrize("name", ["06a", "06b", "06c"])
def test_invalid_objects_come_back_as_422_with_causes(api, name):
    with ReplayServer.of(api, name) as server, pytest.raises(ClusterCallError) as info:
        client_for(server).apply(body_of(api, name))
    assert server.mismatches == []
    assert info.value.status == 422 and info.value.reason == "Invalid"
    assert info.value.causes and info.value.causes[0]["message"].startswith("Invalid value")


def test_listing_managed_objects(api):
    with ReplayServer.of(api, "07a", "07e") as server:
        client = client_for(server)
        queues = client.list_managed("ClusterQueue")
        local = client.list_managed("LocalQueue")
    assert server.mismatches == []
    assert [q["metadata"]["name"] for q in queues] == ["fixture-cq-team-a"]
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in local] == [
        ("fixture-team-a", "fixture-lq-team-a")
    ]


def test_delete_and_delete_again(api):
    with ReplayServer.of(api, "08a", "08b") as server:
        client = client_for(server)
        assert client.delete("ClusterQueue", "fixture-cq-team-a") is True
        assert client.delete("ClusterQueue", "fixture-cq-team-a") is False
    assert server.mismatches == []


@pytest.mark.parametrize(("name", "status", "reason"), [("09a", 403, "Forbidden"), ("09b", 401, "Unauthorized")])
def test_unauthorised_calls_say_so(api, name, status, reason):
    with ReplayServer.of(api, name) as server, pytest.raises(ClusterCallError) as info:
        client_for(server).list_managed("ClusterQueue")
    assert (info.value.status, info.value.reason) == (status, reason)
    assert info.value.message == json.loads(next(api.glob(f"{name}*")).read_text())["response"]["body"]["message"]


def test_an_unreachable_cluster():
    client = KueueClient(api_client_for("url:http://127.0.0.1:9"))
    with pytest.raises(ClusterCallError) as info:
        client.list_managed("Cohort")
    assert info.value.reason == "Unreachable" and info.value.status == 0


def test_connection_ref_forms_are_named_when_wrong(tmp_path):
    with pytest.raises(ValueError, match="kubeconfig:/path"):
        api_client_for("ssh:west")
    with pytest.raises(ValueError, match="readable kubeconfig"):
        api_client_for(f"kubeconfig:{tmp_path / 'missing.yaml'}")
    with pytest.raises(ValueError, match="in-cluster"):
        api_client_for("in-cluster")  # no service account here


def test_the_client_speaks_the_newest_version_the_cluster_serves_and_names_none(crd_schemas):
    """API discovery decides the version (v1beta1 on a Kueue v0.13: tests/quotas/test_kube_real.py); a cluster
    serving no kueue.x-k8s.io version Allot speaks is an error that says what to install."""
    from tests.kube_fake import FakeKueueServer

    with FakeKueueServer(crd_schemas) as server:
        assert KueueClient(api_client_for(f"url:{server.url}")).version == "v1beta2"
    with (
        FakeKueueServer(crd_schemas, crds=[]) as server,
        pytest.raises(ClusterCallError, match=r"serves kueue.x-k8s.io in no version.*install Kueue v0.13"),
    ):
        _ = KueueClient(api_client_for(f"url:{server.url}")).version
