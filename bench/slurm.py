"""Benchmark the Slurm translator and a real sync (needs the local stack: deploy/slurm/local-slurm.sh).

    python bench/slurm.py          (or ./dev bench; about two minutes)

1. plan_s: compile a 10,000-account tree and plan its sync against an empty cluster, folded into
   sacctmgr calls — no sacctmgr call is made.
2. sync_demo_s: a real sync of the demo organisation (manage.py allot_demo, cluster slurm-lab →
   the local stack's cluster 'lab') from a cluster with none of Allot's objects; then a second sync
   must write nothing.
3. sync_300_s: a real sync of a 300-account tree (team guarantees vary over eight sizes),
   sacctmgr_calls counts its calls (reads included); its four reads (before, and again to prove
   convergence) are made at once. sync_300_serial_s: the same sync with the reads one after the other
   (Sacctmgr(concurrency=1)), as before. Writes are always one at a time: concurrent sacctmgr writes
   deadlock slurmdbd's database (see quotas/integrations/slurm.py).
4. load_300_s: the same 300 accounts as a dump `sacctmgr load`-ed into a fresh cluster after the
   QOS script (one sacctmgr call per QOS, as a site loading by hand would run it), so the two ways
   compare on one machine; load_only_s is the `load` call alone. sync_to_load = sync_300_s /
   load_300_s (the goal: at most 1.2).
The bench owns cluster 'lab' of the local stack while it runs: it starts by syncing an empty tree,
which deletes every account and QOS Allot created there (never the site's own), and cleans up
after itself the same way. Each sacctmgr write costs about 0.35 s against the local slurmdbd.
Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quotas.policy import Resource, UnitKind  # noqa: E402
from quotas.policy.builder import TreeBuilder  # noqa: E402
from quotas.policy.slurm.batch import batch  # noqa: E402
from quotas.policy.slurm.diff import plan_slurm  # noqa: E402
from quotas.policy.slurm.render import qos_script, render_dump  # noqa: E402
from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, compile_slurm  # noqa: E402

FLAVOR = "lab/a100"


def tree(accounts: int, prefix: str) -> tuple[TreeBuilder, SlurmTarget]:
    """1 organisation, departments of 20 teams, up to ``accounts`` units; team guarantees vary over
    eight sizes (as real trees do), 50 teams have a member."""
    b = TreeBuilder()
    b.flavor(FLAVOR, 10**9)
    org = b.unit(f"{prefix}org", UnitKind.ORGANISATION, weight=100)
    g = {org: 10**8}
    teams, d = [], 0
    while len(b.units) < accounts:
        dept = b.unit(f"{prefix}d{d}", UnitKind.DEPARTMENT, org, weight=1 + d % 5)
        g[dept] = 1000
        d += 1
        for t in range(20):
            if len(b.units) >= accounts:
                break
            team = b.unit(f"{prefix}d{d}t{t}", UnitKind.TEAM, dept, weight=1 + t % 3)
            g[team] = 8 * (1 + t % 8)
            teams.append(team)
    members = {team: (f"u{team % 50}",) for team in teams[:50]}
    for uid, guarantee in g.items():
        b.quota(uid, FLAVOR, Resource.GPU, guarantee, guarantee // 10)
    return b, SlurmTarget("lab", (SlurmFlavor(FLAVOR, "a100"),), members=members)


def plan_only() -> float:
    b, target = tree(10_000, "p")
    start = time.perf_counter()
    state = compile_slurm(b.build(), target)
    commands, _ = plan_slurm(state, [], [], [], descriptions={})
    steps = batch(commands, state.cluster)
    elapsed = time.perf_counter() - start
    print(
        f"planned {len(commands)} object changes in {len(steps)} sacctmgr calls for {len(state.accounts)} "
        f"accounts in {elapsed:.3f} s"
    )
    return elapsed


def _sync(cluster: object, reason: str, concurrency: int = 8) -> tuple[float, int, object]:
    from quotas.integrations.slurm import Sacctmgr
    from quotas.services.sync import slurm_sync

    runner = Sacctmgr(concurrency=concurrency)
    start = time.perf_counter()
    run = slurm_sync(actor=None, reason=reason, cluster=cluster, runner=runner)
    elapsed = time.perf_counter() - start
    if run.status not in ("applied", "in_sync"):
        raise RuntimeError(f"{reason}: {run.status}: {run.message}")
    return elapsed, runner.calls, run


def _archive_all() -> None:
    from quotas import services
    from quotas.models import OrgUnit

    for root in OrgUnit.objects.filter(parent=None, archived_at=None):
        services.org_unit_archive(actor=None, reason="bench cleanup", unit=root)


def clean_cluster() -> None:
    """Sync an empty tree: deletes every account, user association and QOS Allot created in 'lab'."""
    from quotas import services
    from quotas.models import ClusterKind

    _archive_all()
    cluster = services.cluster_set(
        actor=None, reason="bench", name="bench-clean", kind=ClusterKind.SLURM, connection_ref="slurm:lab"
    )
    _sync(cluster, "bench: start from nothing of Allot's")


def demo_sync() -> float:
    """The demo organisation (manage.py allot_demo), from a cluster with none of Allot's objects."""
    from django.core.management import call_command

    from quotas.models import Cluster

    clean_cluster()
    call_command("allot_demo", verbosity=0)
    cluster = Cluster.objects.get(name="slurm-lab")
    elapsed, calls, run = _sync(cluster, "bench: demo")
    again, _, second = _sync(cluster, "bench: second")
    print(
        f"synced the demo organisation for real in {elapsed:.1f} s with {calls} sacctmgr calls ({run.counts}); "
        f"a second sync: {second.status} in {again:.1f} s"
    )
    clean_cluster()
    return elapsed


def tree_sync(accounts: int, prefix: str, concurrency: int = 8) -> tuple[float, int]:
    """A real sync of the generated tree through the services, from a cluster with none of Allot's objects."""
    from quotas import services
    from quotas.models import ClusterKind, OrgUnit

    b, target = tree(accounts, prefix)
    cluster = services.cluster_set(
        actor=None, reason="bench", name=f"bench-{prefix}", kind=ClusterKind.SLURM, connection_ref="slurm:lab"
    )
    flavor = services.flavor_set(
        actor=None,
        reason="bench",
        cluster=cluster,
        name="a100",
        accelerator_model="A100",
        device_memory_gb=80,
        physical_devices=10**9,
    )
    created: dict[int, OrgUnit] = {}
    for uid, unit in sorted(b.units.items()):
        created[uid] = services.org_unit_create(
            actor=None,
            reason="bench",
            parent=created.get(unit.parent_id),
            kind=unit.kind.value,
            slug=unit.slug,
            weight=unit.weight,
        )
    for level in sorted({u.path.count("/") for u in b.units.values()}):
        changes = [
            services.QuotaChange(created[uid].pk, flavor.pk, Resource.GPU, q.guarantee, q.burst, 0)
            for (uid, _, _), q in b.quotas.items()
            if b.units[uid].path.count("/") == level
        ]
        services.quota_set_bulk(actor=None, reason="bench", changes=changes)
    for uid, users in target.members.items():
        for user in users:
            services.membership_add(actor=None, reason="bench", unit=created[uid], slurm_username=user)
    elapsed, calls, run = _sync(cluster, "bench", concurrency)
    again, _, second = _sync(cluster, "bench: second", concurrency)
    print(
        f"synced {accounts} accounts for real in {elapsed:.1f} s with {calls} sacctmgr calls, up to "
        f"{concurrency} reads at once ({run.counts}); a second sync: {second.status} in {again:.1f} s"
    )
    clean_cluster()
    return elapsed, calls


def load_dump(accounts: int, prefix: str) -> tuple[float, float]:
    """The QOS script, then ``sacctmgr load`` of the dump, into a fresh cluster 'benchload'."""
    b, target = tree(accounts, prefix)
    state = compile_slurm(b.build(), SlurmTarget("benchload", target.flavors, members=target.members))
    work = Path(tempfile.mkdtemp(prefix="allot-slurm-"))
    (work / "qos.sh").write_text(qos_script(state))
    (work / "dump.cfg").write_text(render_dump(state))
    subprocess.run(["sacctmgr", "-i", "add", "cluster", "benchload"], capture_output=True, check=False)
    start = time.perf_counter()
    subprocess.run(["sh", str(work / "qos.sh")], capture_output=True, check=True)
    middle = time.perf_counter()
    loaded = subprocess.run(["sacctmgr", "-i", "load", f"file={work / 'dump.cfg'}"], capture_output=True, text=True)
    end = time.perf_counter()
    if loaded.returncode != 0:
        raise RuntimeError(f"sacctmgr load failed: {loaded.stdout}{loaded.stderr}")
    print(
        f"QOS script ({len(state.qos)} QOS) + sacctmgr load of the same {accounts} accounts into a fresh cluster: "
        f"{end - start:.1f} s (the load alone {end - middle:.1f} s)"
    )
    subprocess.run(["sacctmgr", "-i", "delete", "cluster", "benchload"], capture_output=True, check=False)
    names = [a.name for a in state.accounts]
    subprocess.run(
        ["sacctmgr", "-i", "delete", "account", "where", f"name={','.join(names)}"], capture_output=True, check=False
    )
    qos = [q.name for q in state.qos]
    subprocess.run(
        ["sacctmgr", "-i", "delete", "qos", "where", f"name={','.join(qos)}"], capture_output=True, check=False
    )
    return end - start, end - middle


def main() -> None:
    plan_s = plan_only()
    reachable = (
        subprocess.run(["sacctmgr", "-n", "show", "cluster", "lab"], capture_output=True, text=True)
        if (shutil.which("sacctmgr"))
        else None
    )
    if reachable is None or reachable.returncode != 0 or "lab" not in reachable.stdout:
        print("no local Slurm (cluster 'lab'): start it with `bash deploy/slurm/local-slurm.sh start` (as root)")
        print(f"plan_s={plan_s:.3f}")
        return
    work = tempfile.mkdtemp(prefix="allot-bench-db-")
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        ALLOT_SECRET_KEY="bench-only",
        ALLOT_VAR_DIR=work,
        DATABASE_URL=f"sqlite:///{work}/bench.sqlite3",
        ALLOT_LOG_LEVEL="WARNING",
    )
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    demo_s = demo_sync()
    serial_s, _ = tree_sync(300, "bs", concurrency=1)
    sync_300_s, calls = tree_sync(300, "bt")
    load_300_s, load_only_s = load_dump(300, "bl")
    print(
        f"plan_s={plan_s:.3f} sync_demo_s={demo_s:.1f} sync_300_serial_s={serial_s:.1f} sync_300_s={sync_300_s:.1f} "
        f"sacctmgr_calls={calls} load_300_s={load_300_s:.1f} load_only_s={load_only_s:.1f} "
        f"sync_to_load={sync_300_s / load_300_s:.2f}"
    )


if __name__ == "__main__":
    main()
