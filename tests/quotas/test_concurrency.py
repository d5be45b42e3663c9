"""On real PostgreSQL: concurrent transactions raising sibling guarantees can never together break
"Σ children ≤ parent" (services lock the parent path in a fixed order)."""

import threading

import pytest
from django.db import connection, connections

from quotas import services
from quotas.models import Quota
from quotas.policy import Resource
from quotas.policy.invariants import validate_tree
from quotas.policy.violations import PolicyViolationError
from quotas.selectors import org_snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
GPU = Resource.GPU


def _race(jobs):
    """Run each job in its own thread and connection, released together; collect outcomes."""
    barrier = threading.Barrier(len(jobs))
    outcomes: list[str] = []
    lock = threading.Lock()

    def run(job):
        try:
            barrier.wait()
            job()
            result = "ok"
        except PolicyViolationError:
            result = "refused"
        except Exception as exc:  # any other error (a deadlock, say) is a failure of the design
            result = f"error: {exc!r}"
        finally:
            connections.close_all()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


def test_concurrent_sibling_raises_never_exceed_the_parent(org):
    assert connection.vendor == "postgresql"
    teams = [
        services.org_unit_create(actor=org.admin, reason="t", parent=org.research, kind="team", slug=f"t{i}")
        for i in range(12)
    ]
    # research: guarantee 60, nlp 30 + vision 20 → 10 left. Twelve teams each ask for 4 at once.

    def raise_to_4(team):
        return lambda: services.quota_set(
            actor=org.admin, reason="race", unit_id=team.pk, flavor_id=org.flavor.pk, resource=GPU, guarantee=4
        )

    outcomes = _race([raise_to_4(team) for team in teams])
    assert sorted(outcomes) == ["ok"] * 2 + ["refused"] * 10, outcomes
    total = sum(
        Quota.objects.filter(unit__parent=org.research, flavor=org.flavor, resource=GPU.value).values_list(
            "guarantee", flat=True
        )
    )
    assert total == 58  # 30 + 20 + 2 × 4 ≤ 60
    assert validate_tree(org_snapshot()) == []


def test_concurrent_child_raise_and_parent_cut_cannot_both_win(org):
    # nlp has 30 with llm at 20. One transaction raises llm to 30, another cuts nlp to 20:
    # each is valid alone, together they are not.
    def raise_child():
        services.quota_set(
            actor=org.admin,
            reason="race",
            unit_id=org.llm.pk,
            flavor_id=org.flavor.pk,
            resource=GPU,
            guarantee=30,
            burst=0,
        )

    def cut_parent():
        services.quota_set(
            actor=org.admin,
            reason="race",
            unit_id=org.nlp.pk,
            flavor_id=org.flavor.pk,
            resource=GPU,
            guarantee=20,
            burst=0,
            lendable=0,
        )

    for _ in range(5):
        outcomes = _race([raise_child, cut_parent])
        assert not any(o.startswith("error") for o in outcomes), outcomes
        assert validate_tree(org_snapshot()) == []
        services.quota_set_bulk(
            actor=org.admin, reason="reset", changes=[services.QuotaChange(org.llm.pk, org.flavor.pk, GPU, 20, 10, 0)]
        )
        services.quota_set_bulk(
            actor=org.admin, reason="reset", changes=[services.QuotaChange(org.nlp.pk, org.flavor.pk, GPU, 30, 10, 15)]
        )


def test_audit_table_refuses_update_and_delete_in_the_database(org):
    with connection.cursor() as cursor:
        for statement in ("UPDATE quotas_auditevent SET reason = 'x'", "DELETE FROM quotas_auditevent"):
            with pytest.raises(Exception, match="append-only"):
                cursor.execute(statement)
