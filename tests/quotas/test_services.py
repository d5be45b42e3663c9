"""Services on a real database: validated by the core, atomic, audited in the same transaction."""

import pytest

from quotas import services
from quotas.errors import InputError, StaleVersionError
from quotas.models import AuditEvent, NamespaceBinding, OrgUnit, Quota
from quotas.policy import Resource, ViolationCode
from quotas.policy.invariants import validate_tree
from quotas.policy.violations import PolicyViolationError
from quotas.selectors import org_snapshot

pytestmark = pytest.mark.django_db
GPU = Resource.GPU


def quota(unit, org):
    return Quota.objects.get(unit=unit, flavor=org.flavor, resource=GPU.value)


def set_gpu(org, unit, **kwargs):
    return services.quota_set(
        actor=org.admin, reason="test", unit_id=unit.pk, flavor_id=org.flavor.pk, resource=GPU, **kwargs
    )


def test_fixture_tree_is_valid_and_fully_audited(org):
    assert validate_tree(org_snapshot()) == []
    assert AuditEvent.objects.filter(action="quota_set").count() == 6
    assert AuditEvent.objects.filter(action="org_unit_create").count() == 6


def test_quota_set_writes_the_row_and_its_audit_row(org):
    before = quota(org.vision, org)
    row = set_gpu(org, org.vision, guarantee=25, expected_version=before.version)
    assert (row.guarantee, row.burst, row.version) == (25, 10, before.version + 1)
    assert quota(org.vision, org).updated_at > before.updated_at
    event = AuditEvent.objects.filter(action="quota_set").latest("id")
    assert event.before is not None and event.after is not None
    assert event.before["guarantee"] == 20 and event.after["guarantee"] == 25
    assert event.actor == org.admin and event.reason == "test"
    assert event.unit_path == "acme/research/vision"
    assert event.object_id == str(row.pk)


def test_a_violation_saves_nothing_and_audits_nothing(org):
    events = AuditEvent.objects.count()
    with pytest.raises(PolicyViolationError) as info:
        set_gpu(org, org.vision, guarantee=35)  # 30 + 35 > 60
    [v] = info.value.violations
    assert v.code is ViolationCode.CHILDREN_EXCEED_GUARANTEE and (v.limit, v.actual) == (60, 65)
    assert quota(org.vision, org).guarantee == 20
    assert AuditEvent.objects.count() == events


def test_bulk_is_all_or_nothing(org):
    changes = [
        services.QuotaChange(org.nlp.pk, org.flavor.pk, GPU, 25),  # fine alone
        services.QuotaChange(org.ops.pk, org.flavor.pk, GPU, 45),
    ]  # 60 + 45 > 100
    with pytest.raises(PolicyViolationError):
        services.quota_set_bulk(actor=org.admin, reason="test", changes=changes)
    assert quota(org.nlp, org).guarantee == 30


def test_bulk_moves_guarantee_between_siblings(org):
    rows = services.quota_set_bulk(
        actor=org.admin,
        reason="rebalance",
        changes=[
            services.QuotaChange(org.nlp.pk, org.flavor.pk, GPU, 35, 5),
            services.QuotaChange(org.vision.pk, org.flavor.pk, GPU, 25, 5),
        ],
    )
    assert [r.guarantee for r in rows] == [35, 25]
    assert AuditEvent.objects.filter(reason="rebalance").count() == 2


def test_stale_version_is_refused_with_the_current_values(org):
    row = quota(org.vision, org)
    set_gpu(org, org.vision, guarantee=21, expected_version=row.version)
    with pytest.raises(StaleVersionError) as info:
        set_gpu(org, org.vision, guarantee=22, expected_version=row.version)
    assert info.value.current == {"guarantee": 21, "burst": 10, "lendable": 10, "version": row.version + 1}
    assert quota(org.vision, org).guarantee == 21


def test_double_submit_writes_once(org):
    set_gpu(org, org.vision, guarantee=22)
    events = AuditEvent.objects.count()
    row = set_gpu(org, org.vision, guarantee=22)
    assert row.guarantee == 22 and AuditEvent.objects.count() == events


def test_new_quota_with_version_zero_and_unknowns(org):
    row = services.quota_set(
        actor=org.admin,
        reason="t",
        unit_id=org.acme.pk,
        flavor_id=org.flavor.pk,
        resource=Resource.CPU,
        guarantee=64_000,
        expected_version=0,
    )
    assert row.version == 1 and row.pk
    with pytest.raises(StaleVersionError):
        services.quota_set(
            actor=org.admin,
            reason="t",
            unit_id=org.acme.pk,
            flavor_id=org.flavor.pk,
            resource=Resource.CPU,
            guarantee=1,
            expected_version=0,
        )
    with pytest.raises(InputError) as info:
        services.quota_set(actor=org.admin, reason="t", unit_id=org.ops.pk, flavor_id=999, resource=GPU, guarantee=1)
    assert "flavor" in info.value.errors
    with pytest.raises(InputError) as info:
        services.quota_set(actor=org.admin, reason="t", unit_id=999, flavor_id=org.flavor.pk, resource=GPU)
    assert "unit" in info.value.errors


def test_reason_is_required(org):
    with pytest.raises(InputError) as info:
        services.quota_set(
            actor=org.admin, reason="  ", unit_id=org.vision.pk, flavor_id=org.flavor.pk, resource=GPU, guarantee=1
        )
    assert "reason" in info.value.errors


def test_top_level_guarantee_above_reclaimable_capacity(org):
    with pytest.raises(PolicyViolationError) as info:
        set_gpu(org, org.acme, guarantee=101)
    assert info.value.violations[0].code is ViolationCode.GUARANTEES_EXCEED_CAPACITY


def test_reservation_that_would_break_promised_guarantees_is_refused(org):
    with pytest.raises(PolicyViolationError) as info:
        services.reservation_set(actor=org.admin, reason="t", flavor=org.flavor, name="serving", devices=11)
    assert info.value.violations[0].limit == 99
    assert org.flavor.reservations.get(name="serving").devices == 10
    with pytest.raises(PolicyViolationError):
        services.flavor_set(actor=org.admin, reason="t", cluster=org.cluster, name="a100", physical_devices=119)


def test_move_refuses_cycles_and_ceilings_above_the_new_parent(org):
    with pytest.raises(PolicyViolationError) as info:
        services.org_unit_move(actor=org.admin, reason="t", unit=org.research, new_parent=org.llm)
    assert info.value.violations[0].code is ViolationCode.CYCLE
    with pytest.raises(PolicyViolationError) as info:
        services.org_unit_move(actor=org.admin, reason="t", unit=org.nlp, new_parent=org.ops)
    [v] = info.value.violations  # nlp's ceiling 40 > ops' ceiling 30
    assert (v.code, v.unit, v.limit, v.actual) == (ViolationCode.CEILING_ABOVE_PARENT, "acme/ops/nlp", 30, 40)
    assert OrgUnit.objects.get(pk=org.nlp.pk).path == "acme/research/nlp"
    services.org_unit_move(actor=org.admin, reason="t", unit=org.vision, new_parent=org.ops)  # 20/30 fits
    assert OrgUnit.objects.get(pk=org.vision.pk).path == "acme/ops/vision"


def test_move_rewrites_the_subtree_paths(org):
    services.quota_set_bulk(
        actor=org.admin, reason="make room", changes=[services.QuotaChange(org.ops.pk, org.flavor.pk, GPU, 30, 10)]
    )
    services.org_unit_move(actor=org.admin, reason="reorg", unit=org.nlp, new_parent=org.ops)
    assert OrgUnit.objects.get(pk=org.llm.pk).path == "acme/ops/nlp/llm"
    assert OrgUnit.objects.get(pk=org.llm.pk).depth == 3
    event = AuditEvent.objects.get(action="org_unit_move")
    assert event.before is not None and event.after is not None
    assert (event.before["path"], event.after["path"]) == ("acme/research/nlp", "acme/ops/nlp")
    assert validate_tree(org_snapshot()) == []


def test_archive_releases_namespaces_and_quotas(org):
    services.namespace_bind(actor=org.admin, reason="t", unit=org.llm, cluster=org.cluster, namespace="llm")
    count = services.org_unit_archive(actor=org.admin, reason="project ended", unit=org.nlp)
    assert count == 2
    assert not NamespaceBinding.objects.exists()
    snapshot = org_snapshot()
    assert org.nlp.pk not in snapshot.units and org.llm.pk not in snapshot.units
    set_gpu(org, org.vision, guarantee=60)  # nlp's 30 no longer counts
    event = AuditEvent.objects.get(action="org_unit_archive")
    assert event.after is not None
    assert event.after["released_namespaces"] == ["west/llm"]


def test_create_refuses_bad_kind_slug_and_duplicates(org):
    with pytest.raises(PolicyViolationError):
        services.org_unit_create(actor=org.admin, reason="t", parent=org.llm, kind="team", slug="x")
    with pytest.raises(InputError) as info:
        services.org_unit_create(actor=org.admin, reason="t", parent=org.ops, kind="team", slug="Bad Slug")
    assert "slug" in info.value.errors
    with pytest.raises(InputError):
        services.org_unit_create(actor=org.admin, reason="t", parent=org.research, kind="team", slug="nlp")
    with pytest.raises(InputError) as info:
        services.org_unit_create(actor=org.admin, reason="t", parent=org.ops, kind="team", slug="ok", weight=0)
    assert "weight" in info.value.errors


def test_namespace_belongs_to_one_unit(org):
    services.namespace_bind(actor=org.admin, reason="t", unit=org.nlp, cluster=org.cluster, namespace="shared")
    with pytest.raises(InputError) as info:
        services.namespace_bind(actor=org.admin, reason="t", unit=org.vision, cluster=org.cluster, namespace="shared")
    assert "acme/research/nlp" in info.value.errors["namespace"][0]
    with pytest.raises(InputError):
        services.namespace_bind(actor=org.admin, reason="t", unit=org.vision, cluster=org.slurm, namespace="v")


def test_infeasible_contract_is_refused(org):
    with pytest.raises(PolicyViolationError) as info:
        services.contract_set(actor=org.admin, reason="t", name="standard", reclaim_within=200)
    assert info.value.violations[0].code is ViolationCode.CONTRACT_INFEASIBLE
    org.contract.refresh_from_db()
    assert org.contract.reclaim_within == 900


def test_tier_inconsistent_with_a_contract_in_use(org):
    with pytest.raises(PolicyViolationError) as info:
        services.tier_set(
            actor=org.admin,
            reason="t",
            name="P2",
            display_name="Interactive",
            priority=1000,
            preemptible=True,
            max_runtime=60,
        )  # contract's min run window is 300 s
    assert info.value.violations[0].code is ViolationCode.TIER_INCONSISTENT
    services.tier_set(
        actor=org.admin, reason="t", name="P3", display_name="Batch", priority=100, preemptible=True, opportunistic=True
    )
    with pytest.raises(InputError) as err:
        services.tier_set(actor=org.admin, reason="t", name="P4", display_name="Dup", priority=100)
    assert "priority" in err.value.errors


def test_audit_rows_are_append_only(org):
    event = AuditEvent.objects.latest("id")
    event.reason = "rewritten"
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        event.delete()
    with pytest.raises(TypeError):
        AuditEvent.objects.all().update(reason="x")
    with pytest.raises(TypeError):
        AuditEvent.objects.all().delete()


def test_a_slurm_dump_whose_limits_break_the_invariants_imports_nothing(org, tmp_path):
    from django.core.management import CommandError, call_command

    from quotas.models import ClusterKind, OrgUnit

    cluster = services.cluster_set(
        actor=org.admin, reason="t", name="slurm-b", kind=ClusterKind.SLURM, connection_ref="slurm:b"
    )
    services.flavor_set(
        actor=org.admin, reason="t", cluster=cluster, name="a100", accelerator_model="A100",
        device_memory_gb=80, physical_devices=8,
    )  # fmt: skip
    dump, qos = tmp_path / "b.cfg", tmp_path / "qos.psv"
    dump.write_text(
        "Cluster - 'b'\nParent - 'root'\nAccount - 'globex':Description='organisation globex':Fairshare=1\n"
        "Parent - 'globex'\nAccount - 'ml':Description='team globex/ml':Fairshare=2\n"
        "Parent - 'ml'\nUser - 'ann':DefaultAccount='ml'\n"
    )
    qos.write_text(
        "Name|Descr|Priority|GraceTime|Preempt|PreemptExemptTime|PreemptMode|UsageFactor|GrpTRES|MaxWall|Flags\n"
        "burst-ml|x|10|00:01:00||00:05:00|requeue|0.500000|gres/gpu:a100=100||\n"
        "guar-ml|x|1000|00:00:00|burst-ml||cluster|1.000000|gres/gpu:a100=4||\n"
    )
    args = ["allot_import_slurm", "--cluster", "slurm-b", "--from-dump", str(dump), "--qos-file", str(qos)]
    with pytest.raises(CommandError, match="the Slurm limits break Allot's invariants; nothing was imported") as info:
        call_command(*args)
    assert "\n  - globex/ml slurm-b/a100" in str(info.value) and "above globex's ceiling" in str(info.value)
    assert not OrgUnit.objects.filter(path__startswith="globex").exists()
    qos.write_text("\n".join(x for x in qos.read_text().splitlines() if not x.startswith("burst-ml")) + "\n")
    call_command(*args)
    ml = OrgUnit.objects.get(path="globex/ml")
    assert ml.kind == "team" and ml.memberships.get().slurm_username == "ann"
    with pytest.raises(CommandError, match="cannot read"):
        call_command("allot_import_slurm", "--cluster", "slurm-b", "--from-dump", str(tmp_path / "missing.cfg"))


def test_a_slurm_username_already_a_member_is_refused_naming_it_and_nothing_is_written(org):
    from django.contrib.auth.models import User

    services.membership_add(actor=org.admin, reason="t", unit=org.nlp, slurm_username="alice")
    again = services.membership_add(actor=org.admin, reason="t", unit=org.nlp, slurm_username="alice")
    assert again.user is None  # the same membership again: idempotent
    person = User.objects.create_user("alice-portal")
    before = AuditEvent.objects.count()
    with pytest.raises(InputError) as refused:
        services.membership_add(actor=org.admin, reason="t", unit=org.nlp, user=person, slurm_username="alice")
    assert list(refused.value.errors) == ["slurm_username"]
    assert f"alice is already a member of {org.nlp.path} without a portal user" in str(refused.value)
    assert AuditEvent.objects.count() == before
    services.membership_add(actor=org.admin, reason="t", unit=org.nlp, user=person)  # without the username: fine
