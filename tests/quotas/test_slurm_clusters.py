"""Two Slurm clusters in one slurmdbd, one Allot database: QOS are shared by every cluster of a
slurmdbd, so each sync must change only what belongs to the cluster it syncs. Syncing either cluster
leaves the other's associations, users and QOS exactly as they were (the text sacctmgr prints for
them is compared byte for byte)."""

from __future__ import annotations

import pytest

from quotas import services
from quotas.integrations.slurm import ASSOC_FORMAT, QOS_FORMAT
from quotas.models import ClusterKind, SyncObject, SyncOutcome
from quotas.policy import Resource
from quotas.services.sync import cluster_sync
from tests.quotas.test_slurm_sync import WRITES, _sh
from tests.quotas.test_slurm_sync import lab as lab  # the fixture

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def _seen(cluster: str) -> str:
    """Everything of ``cluster`` a sync could touch, as sacctmgr prints it: its associations, its
    users' default accounts, and every QOS its associations list or that names it as owner."""
    fields = f"format={','.join(ASSOC_FORMAT)}"
    assoc = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={cluster}", fields)
    users = _sh("sacctmgr", "-n", "-P", "show", "user", "withassoc", "where", f"cluster={cluster}",
                "format=User,DefaultAccount,Account")  # fmt: skip
    qos = _sh("sacctmgr", "-n", "-P", "show", "qos", f"format={','.join(QOS_FORMAT)}")
    assert assoc.returncode == users.returncode == qos.returncode == 0
    used = {n for line in assoc.stdout.splitlines() for n in line.split("|")[5].split(",") if n}
    mine = [
        line for line in qos.stdout.splitlines()
        if line.split("|")[0] in used or line.split("|")[1].startswith(f"allot@{cluster}:")
    ]  # fmt: skip
    return "\n".join([assoc.stdout, users.stdout, *sorted(mine)])


@pytest.fixture
def two(lab):
    """``lab`` (the fixture tree) and a second Allot cluster ``other`` in the same slurmdbd, with no
    quota yet. Afterwards the second cluster's associations and QOS are removed again."""
    if "other" not in _sh("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster").stdout.split():
        assert _sh("sacctmgr", "-i", "add", "cluster", "other").returncode == 0
    other = services.cluster_set(
        actor=lab.admin, reason="t", name="slurm-other", kind=ClusterKind.SLURM, connection_ref="slurm:other"
    )
    lab.other = other
    lab.other_flavor = services.flavor_set(
        actor=lab.admin, reason="t", cluster=other, name="h100", accelerator_model="H100", device_memory_gb=80,
        physical_devices=8,
    )  # fmt: skip
    yield lab
    accounts = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", "cluster=other", "format=Account").stdout.split()
    names = sorted(set(accounts) - {"root"})
    if names:
        _sh("sacctmgr", "-i", "delete", "account", "where", f"name={','.join(names)}", "cluster=other")
    qos = _sh("sacctmgr", "-n", "-P", "show", "qos", "format=Name,Description").stdout.splitlines()
    theirs = [line.split("|")[0] for line in qos if line.split("|")[1].startswith("allot@other:")]
    if theirs:
        _sh("sacctmgr", "-i", "delete", "qos", "where", f"name={','.join(theirs)}")


def _give_other_quota(org):
    def q(unit, g, b=0):
        return services.QuotaChange(unit.pk, org.other_flavor.pk, Resource.GPU, g, b, 0)

    for level in ([q(org.acme, 6, 2)], [q(org.research, 4, 2)], [q(org.nlp, 3, 1)]):
        services.quota_set_bulk(actor=org.admin, reason="t", changes=level)


def test_syncing_either_cluster_leaves_the_other_byte_for_byte_unchanged(two):
    first = cluster_sync(actor=two.admin, reason="lab", cluster=two.slurm)
    assert first.status in ("applied", "in_sync"), first.message
    lab_before = _seen("lab")
    assert "allot@lab: guaranteed gpus" in lab_before

    empty = cluster_sync(actor=two.admin, reason="other, empty", cluster=two.other)  # only members, no quota
    assert empty.status in ("applied", "in_sync", "partial"), empty.message
    assert not SyncObject.objects.filter(run=empty, kind="qos", outcome=SyncOutcome.DELETED).exists()
    assert _seen("lab") == lab_before, "an empty second cluster deleted or changed the first one's objects"

    two.other = services.cluster_set(actor=two.admin, reason="t", name="slurm-other", slurm_qos_prefix="o-")
    _give_other_quota(two)
    second = cluster_sync(actor=two.admin, reason="other", cluster=two.other)
    assert second.status == "applied", second.message
    assert _seen("lab") == lab_before
    other_after = _seen("other")
    assert "o-guar-nlp|allot@other: guaranteed gpus" in other_after and "gres/gpu:h100=3" in other_after

    again = cluster_sync(actor=two.admin, reason="other again", cluster=two.other)
    assert not SyncObject.objects.filter(run=again, outcome__in=WRITES).exists(), "default accounts are per cluster"
    lab_again = cluster_sync(actor=two.admin, reason="lab again", cluster=two.slurm)
    assert not SyncObject.objects.filter(run=lab_again, outcome__in=WRITES).exists()
    assert _seen("other") == other_after and _seen("lab") == lab_before


def test_a_second_cluster_without_a_prefix_is_refused_with_the_fix_and_changes_nothing_of_the_first(two):
    cluster_sync(actor=two.admin, reason="lab", cluster=two.slurm)
    lab_before = _seen("lab")
    _give_other_quota(two)
    run = cluster_sync(actor=two.admin, reason="other", cluster=two.other)
    refused = SyncObject.objects.filter(run=run, kind="qos", outcome=SyncOutcome.NOT_OURS)
    assert {o.name for o in refused} >= {"guar-nlp", "burst-nlp", "guar-research"}
    message = refused.get(name="guar-nlp").message
    assert "belongs to Allot's cluster lab" in message and "QOS prefix" in message
    assert _seen("lab") == lab_before
    held = SyncObject.objects.filter(run=run, kind="account", outcome=SyncOutcome.INVALID)
    assert {"nlp", "research"} <= {o.name for o in held}, "no account is given another cluster's QOS"
    assert "guar-nlp" not in _seen("other")


def test_importing_a_hand_made_site_lists_what_it_cannot_carry_and_imports_only_once_accepted(two):
    """Issue #24.7 on the real slurmdbd: accounts made by hand with their own limits, a site QOS named
    like Allot's and a site 'tier' QOS. Nothing is imported until the operator accepts the list; then
    the tree comes in, and the first sync writes no QOS that no account uses."""
    from django.core.management import CommandError, call_command

    from quotas.models import OrgUnit

    site = [
        ("add", "qos", "guar-astro", "Description=hand-made by the admins", "GrpTRES=gres/gpu:h100=3"),
        ("add", "qos", "tier-debug", "Description=debug queue", "MaxWall=30"),
        ("add", "qos", "long", "Description=long jobs", "MaxTRESPerUser=gres/gpu=2", "MaxWall=2880"),
        ("add", "account", "astro", "cluster=other", "Description=astronomy", "Fairshare=10", "Priority=7",
         "GrpTRES=gres/gpu:h100=4", "MaxJobs=20", "QOS=guar-astro,tier-debug,long", "DefaultQOS=guar-astro"),
        ("add", "account", "survey", "cluster=other", "parent=astro", "Description=survey", "MaxTRES=gres/gpu:h100=2"),
        ("add", "user", "ann", "account=survey", "cluster=other", "MaxJobs=3"),
        ("add", "user", "ann", "account=survey", "cluster=other", "partition=gpu", "Priority=9"),
    ]  # fmt: skip
    try:
        for argv in site:
            done = _sh("sacctmgr", "-i", *argv)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        import io

        out = io.StringIO()
        with pytest.raises(CommandError, match="nothing was imported"):
            call_command("allot_import_slurm", "--cluster", "slurm-other", stdout=out)
        listed = out.getvalue()
        assert "account astro: GrpTRES=gres/gpu:h100=4 is not carried over" in listed
        assert "account astro: MaxJobs=20" in listed and "account survey: MaxTRES=gres/gpu:h100=2" in listed
        assert "user ann in survey: MaxJobs=3" in listed
        assert "QOS guar-astro: named like Allot's" in listed and "QOS tier-debug: named like Allot's" in listed
        # issue #41: partition associations, association priorities, what a site QOS limits
        assert "user ann in survey: the association for partition gpu is not carried over" in listed
        assert "user ann in survey: Priority=9 is not carried over" in listed
        assert "account astro: Priority=7 is not carried over" in listed
        assert "account survey: Priority" not in listed and "user ann in survey: Priority=7" not in listed  # astro's
        assert "QOS long: the site's own" in listed
        assert "its MaxTRESPerUser=gres/gpu=2, MaxWall=2880 min will no longer limit the jobs of astro" in listed
        assert not OrgUnit.objects.filter(slug="astro").exists()

        call_command("allot_import_slurm", "--cluster", "slurm-other", "--accept-notes", stdout=io.StringIO())
        astro = OrgUnit.objects.get(slug="astro", archived_at__isnull=True)
        assert OrgUnit.objects.filter(parent=astro, slug="survey").exists()
        run = cluster_sync(actor=two.admin, reason="after import", cluster=two.other)
        created = {o.name for o in SyncObject.objects.filter(run=run, kind="qos", outcome=SyncOutcome.CREATED)}
        listed_qos = {
            n
            for line in _sh(
                "sacctmgr", "-n", "-P", "show", "assoc", "where", "cluster=other", "format=QOS"
            ).stdout.split()
            for n in line.split(",")
        }
        assert created <= listed_qos, f"QOS no account can use: {created - listed_qos}"
        assert "tier-debug" not in {o.name for o in SyncObject.objects.filter(run=run, outcome__in=WRITES)}
    finally:
        # the partition association first: sacctmgr refuses to remove a default account's associations at once
        _sh("sacctmgr", "-i", "delete", "user", "where", "name=ann", "account=survey", "partition=gpu", "cluster=other")
        _sh("sacctmgr", "-i", "delete", "user", "where", "name=ann", "cluster=other")
        _sh("sacctmgr", "-i", "delete", "account", "where", "name=survey,astro", "cluster=other")
        _sh("sacctmgr", "-i", "delete", "qos", "where", "name=guar-astro,tier-debug,long")


SITE = [
    ("add", "qos", "site-long", "Description=long jobs", "MaxWall=2880"),
    ("add", "account", "physics", "cluster=site", "Description=physics department", "Organization=uni"),
    ("add", "account", "hep", "cluster=site", "parent=physics", "Description=particle physics", "Organization=uni"),
    ("add", "account", "astro", "cluster=site", "Description=astronomy", "Organization=uni", "QOS=normal,site-long"),
    ("add", "user", "alice", "account=hep", "cluster=site", "DefaultAccount=hep"),
    ("add", "user", "erin", "account=astro", "cluster=site", "DefaultAccount=astro"),
]  # fmt: skip
SITE_ACCOUNTS = ("physics", "hep", "astro")


def _site_seen(cluster: str) -> str:
    """The site's own records on ``cluster``: its accounts' associations, their global account records
    (Description and Organization are one record for every cluster) and every user's default account."""
    fields = f"format={','.join(ASSOC_FORMAT)}"
    names = ",".join(SITE_ACCOUNTS)
    assoc = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={cluster}", f"account={names}", fields)
    records = _sh("sacctmgr", "-n", "-P", "show", "account", f"names={names}", "format=Account,Descr,Org")
    return "\n".join([assoc.stdout, records.stdout])


def _defaults(cluster: str) -> dict[str, str]:
    """Each user with an association on ``cluster`` → its default account there."""
    where = ("where", f"cluster={cluster}", "format=User,DefaultAccount")
    users = _sh("sacctmgr", "-n", "-P", "show", "user", "withassoc", *where)
    return dict(line.split("|")[:2] for line in users.stdout.splitlines() if line.split("|")[1])


def test_a_hand_made_site_and_two_allot_clusters_in_one_slurmdbd_leave_each_other_byte_for_byte(two):
    """Issue #41: after a hand-made site is imported, no other cluster's sync creates the site's accounts
    (memberships are per cluster: the import's hold on the site only), no sync writes a global account
    record the site owns, and every user's default account stays what it was on every cluster."""
    import io

    from django.core.management import call_command

    from quotas.models import Membership

    if "site" not in _sh("sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster").stdout.split():
        assert _sh("sacctmgr", "-i", "add", "cluster", "site").returncode == 0
    try:
        for argv in SITE:
            done = _sh("sacctmgr", "-i", *argv)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        two.other = services.cluster_set(actor=two.admin, reason="t", name="slurm-other", slurm_qos_prefix="o-")
        _give_other_quota(two)
        for cluster in (two.slurm, two.other):
            assert cluster_sync(actor=two.admin, reason="before", cluster=cluster).status in ("applied", "in_sync")
        before = {name: _seen(name) for name in ("lab", "other")}
        site_before = _site_seen("site")
        defaults = {name: _defaults(name) for name in ("lab", "other", "site")}
        assert defaults["site"]["alice"] == "hep" and defaults["lab"]["alice"] == "nlp"

        site = services.cluster_set(
            actor=two.admin, reason="t", name="slurm-site", kind=ClusterKind.SLURM, connection_ref="slurm:site",
            slurm_qos_prefix="s-",
        )  # fmt: skip
        services.flavor_set(
            actor=two.admin, reason="t", cluster=site, name="h100", accelerator_model="H100", device_memory_gb=80,
            physical_devices=8,
        )  # fmt: skip
        call_command("allot_import_slurm", "--cluster", "slurm-site", "--accept-notes", stdout=io.StringIO())
        imported = Membership.objects.filter(unit__slug__in=SITE_ACCOUNTS)
        assert {(m.unit.slug, m.slurm_username, m.slurm_cluster_id) for m in imported} == {
            ("hep", "alice", site.pk),
            ("astro", "erin", site.pk),
        }, "the site's members are members on the site only"

        for cluster in (two.slurm, two.other, site):
            run = cluster_sync(actor=two.admin, reason="after the import", cluster=cluster)
            assert run.status in ("applied", "in_sync", "partial"), run.message
            if cluster != site:  # the site's units are not wanted there at all (not merely refused as not ours)
                refused = SyncObject.objects.filter(run=run, outcome=SyncOutcome.NOT_OURS).values_list(
                    "name", flat=True
                )
                assert not set(refused) & set(SITE_ACCOUNTS), (cluster.name, sorted(refused))
            for name in ("lab", "other"):
                assert _seen(name) == before[name], f"syncing {cluster.name} changed {name}"
            assert _site_seen("site") == site_before, f"syncing {cluster.name} changed the site's own records"
        for name, had in defaults.items():  # a user new on a cluster gets one; none that had one loses it
            now = _defaults(name)
            assert {user: now.get(user) for user in had} == had, f"default accounts changed on {name}"
        for name in ("lab", "other"):
            listed = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={name}", "format=Account").stdout
            assert not set(listed.split()) & set(SITE_ACCOUNTS), f"the site's accounts were created on {name}"
        for cluster in (two.slurm, two.other, site):  # and it converges: nothing more to write anywhere
            run = cluster_sync(actor=two.admin, reason="again", cluster=cluster)
            assert not SyncObject.objects.filter(run=run, outcome__in=WRITES).exists(), cluster.name
    finally:
        _clear("site")
        qos = _sh("sacctmgr", "-n", "-P", "show", "qos", "format=Name,Description").stdout.splitlines()
        theirs = [line.split("|")[0] for line in qos if line.split("|")[1].startswith("allot@site:")]
        _sh("sacctmgr", "-i", "delete", "qos", "where", f"name={','.join([*theirs, 'site-long'])}")


def _clear(cluster: str) -> None:
    """Remove every association of ``cluster`` but root's. sacctmgr refuses to remove a user's default
    account together with their other associations ("You can not remove the default account of a
    user"), so each user's other associations go first, one at a time."""
    defaults = _defaults(cluster)
    rows = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={cluster}", "format=Account,User").stdout
    pairs = [line.split("|")[:2] for line in rows.splitlines()]
    for account, user in sorted(pairs, key=lambda p: p[0] == defaults.get(p[1])):  # defaults last
        if user and user != "root":
            _sh("sacctmgr", "-i", "delete", "user", "where", f"name={user}", f"account={account}", f"cluster={cluster}")
    accounts = sorted({account for account, _ in pairs} - {"root"})
    if accounts:
        _sh("sacctmgr", "-i", "delete", "account", "where", f"name={','.join(accounts)}", f"cluster={cluster}")
    left = _sh("sacctmgr", "-n", "-P", "show", "assoc", "where", f"cluster={cluster}", "format=Account").stdout.split()
    assert set(left) <= {"root"}, f"{cluster} still holds {left}"
