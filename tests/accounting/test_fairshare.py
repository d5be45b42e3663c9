"""Fair-share of a Slurm cluster from ingested jobs (issue #16.8), without a Slurm: the numbers are
checked by hand here; tests/accounting/test_slurm_usage.py checks them against a real sshare."""

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from accounting.models import WorkloadRecord
from accounting.services.fairshare import slurm_fairshare
from quotas import services
from quotas.models import ClusterKind
from quotas.policy import Resource

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def lab(org):
    cluster = services.cluster_set(
        actor=org.admin, reason="t", name="slurm-lab", kind=ClusterKind.SLURM, connection_ref="slurm:lab"
    )
    flavor = services.flavor_set(
        actor=org.admin,
        reason="t",
        cluster=cluster,
        name="a100",
        accelerator_model="A100",
        device_memory_gb=80,
        physical_devices=8,
    )
    for level in (
        [(org.acme, 8, 0)],
        [(org.research, 6, 2), (org.ops, 2, 0)],
        [(org.nlp, 4, 2), (org.vision, 1, 1)],
        [(org.llm, 2, 1)],
    ):
        services.quota_set_bulk(
            actor=org.admin,
            reason="t",
            changes=[services.QuotaChange(u.pk, flavor.pk, Resource.GPU, g, b, 0) for u, g, b in level],
        )
    for unit, user in ((org.nlp, "alice"), (org.nlp, "dave"), (org.vision, "bob")):
        services.membership_add(actor=org.admin, reason="t", unit=unit, slurm_username=user)
    org.slurm = cluster
    return org


def job(cluster, n, account, user, qos, billing, seconds, ended):
    return WorkloadRecord.objects.create(
        cluster=cluster,
        scheduler_id=f"{n}@x",
        job_id=str(n),
        account=account,
        owner=user,
        tier=qos,
        state="finished",
        admitted_at=ended - timedelta(seconds=seconds),
        ended_at=ended,
        held_seconds=seconds,
        billing=billing,
    )


def test_usage_is_billing_seconds_decayed_with_burst_at_half_and_the_tree_is_slurms(lab):
    just = NOW - timedelta(seconds=1)
    job(lab.slurm, 1, "nlp", "alice", "guar-nlp", 22, 600, just)
    job(lab.slurm, 2, "nlp", "dave", "burst-nlp", 22, 600, just)  # borrowed: counts half
    job(lab.slurm, 3, "vision", "bob", "guar-vision", 12, 1000, NOW - timedelta(days=7))  # a half-life ago
    report = slurm_fairshare(cluster=lab.slurm, now=NOW)
    lines = {(line.account, line.user): line for line in report.lines}
    assert report.jobs == 3 and report.half_life_s == 7 * 86400
    alice, dave, bob = lines[("nlp", "alice")], lines[("nlp", "dave")], lines[("vision", "bob")]
    assert alice.usage == pytest.approx(22 * 600, rel=1e-3)
    assert dave.usage == pytest.approx(22 * 600 * 0.5, rel=1e-3)
    assert bob.usage == pytest.approx(12 * 1000 * 0.5, rel=1e-3)
    nlp = lines[("nlp", "")]
    assert nlp.usage == pytest.approx(alice.usage + dave.usage)
    assert alice.effective_usage == pytest.approx(2 / 3, rel=1e-3)
    # nlp's members sit beside its child account llm (Fairshare 1 each): 1 / (1 + 1 + 1)
    assert alice.norm_shares == pytest.approx(1 / 3) and lines[("llm", "")].norm_shares == pytest.approx(1 / 3)
    # four user associations (alice, dave, bob, and Slurm's root user, unused and first)
    factors = {key[1]: line.factor for key, line in lines.items() if key[1] and line.factor is not None}
    assert len(factors) == 4
    assert factors["root"] == 1.0 and sorted(factors.values()) == [0.25, 0.5, 0.75, 1.0]
    # vision used less than nlp for the same shares: bob ranks before nlp's members; dave used less than alice
    assert factors["bob"] > factors["dave"] > factors["alice"]
    assert nlp.factor == factors["dave"] and lines[("llm", "")].factor is None  # no members
    assert lines[("llm", "")].level_fs is None  # unused: infinite
    assert lines[("nlp", "")].unit_path == "acme/research/nlp"


def test_since_counts_only_jobs_started_after_a_usage_reset_and_the_api(lab):
    job(lab.slurm, 1, "nlp", "alice", "guar-nlp", 10, 100, NOW - timedelta(hours=2))
    job(lab.slurm, 2, "vision", "bob", "guar-vision", 10, 100, NOW - timedelta(minutes=5))
    report = slurm_fairshare(cluster=lab.slurm, now=NOW, since=NOW - timedelta(hours=1))
    lines = {(line.account, line.user): line for line in report.lines}
    assert report.jobs == 1 and lines[("nlp", "alice")].usage == 0 and lines[("vision", "bob")].usage > 0
    client = APIClient()
    client.force_authenticate(User.objects.get(username=lab.admin.username))
    body = client.get("/api/v1/fairshare/", {"cluster": "slurm-lab"}).json()
    assert body["jobs"] == 2 and {(r["account"], r["user"]) for r in body["lines"]} >= {("nlp", "alice"), ("nlp", "")}
    assert client.get("/api/v1/fairshare/", {"cluster": "west"}).status_code == 400  # a Kubernetes cluster
    missing = client.get("/api/v1/fairshare/")
    assert missing.status_code == 400 and "cluster" in missing.json()
