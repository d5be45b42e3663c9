"""Benchmark the Slurm translator and a real sync (needs the local stack: deploy/slurm/local-slurm.sh).

    python bench/slurm.py

1. plan_s: compile a 10,000-account tree and plan its sync against an empty cluster — no sacctmgr call.
2. sync_demo_s: a real sync of a demo-sized tree (19 accounts, members, QOS) to cluster 'lab'.
3. sync_300_s: a real sync of a 300-account tree (from the state left by step 2), sacctmgr_calls.
4. load_300_s: the same 300 accounts as a dump, `sacctmgr load`-ed into a fresh cluster, after the
   QOS script — so the two ways of loading compare on one machine.
The bench cleans up after itself (its accounts are Allot's, so an empty sync deletes them).
It takes a while: each sacctmgr call costs about half a second against the local slurmdbd and a
sync issues about three per account (measured: demo 53 s for 98 calls; the 300-account sync did not
finish within 10 minutes), so run it in the background. Batching accounts that share settings into
one sacctmgr call is the next step.
Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from quotas.policy import Resource, UnitKind  # noqa: E402
from quotas.policy.builder import TreeBuilder  # noqa: E402
from quotas.policy.slurm.diff import plan_slurm  # noqa: E402
from quotas.policy.slurm.render import qos_script, render_dump  # noqa: E402
from quotas.policy.slurm.translate import SlurmFlavor, SlurmTarget, compile_slurm  # noqa: E402

FLAVOR = "lab/a100"


def tree(accounts: int, prefix: str) -> tuple[TreeBuilder, SlurmTarget]:
    """1 organisation, departments of 20 teams, projects under teams, up to ``accounts`` units."""
    b = TreeBuilder()
    b.flavor(FLAVOR, 10**9)
    org = b.unit(f"{prefix}org", UnitKind.ORGANISATION, weight=100)
    g = {org: 10**8}
    teams, d = [], 0
    while len(b.units) < accounts:
        dept = b.unit(f"{prefix}d{d}", UnitKind.DEPARTMENT, org, weight=1 + d % 5)
        g[dept] = g[org] // 1000
        d += 1
        for t in range(20):
            if len(b.units) >= accounts:
                break
            team = b.unit(f"{prefix}d{d}t{t}", UnitKind.TEAM, dept, weight=1 + t % 3)
            g[team] = g[dept] // 40
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
    elapsed = time.perf_counter() - start
    print(f"planned {len(commands)} sacctmgr commands for {len(state.accounts)} accounts in {elapsed:.3f} s")
    return elapsed


def django_sync(accounts: int, prefix: str) -> tuple[float, int]:
    """A real sync through the service, on a throwaway SQLite database."""
    import django

    from quotas import services
    from quotas.integrations.slurm import Sacctmgr
    from quotas.models import ClusterKind, OrgUnit
    from quotas.services.sync import slurm_sync

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
    runner = Sacctmgr()
    start = time.perf_counter()
    run = slurm_sync(actor=None, reason="bench", cluster=cluster, runner=runner)
    elapsed = time.perf_counter() - start
    assert run.status in ("applied", "in_sync"), run.message
    again = slurm_sync(actor=None, reason="bench: second", cluster=cluster, runner=Sacctmgr())
    assert again.status == "in_sync", again.message
    print(
        f"synced {accounts} accounts for real in {elapsed:.1f} s with {runner.calls} sacctmgr calls "
        f"({run.counts}); a second sync: {again.status}"
    )
    org = created[min(created)]
    services.org_unit_archive(actor=None, reason="bench cleanup", unit=org)
    slurm_sync(actor=None, reason="bench cleanup", cluster=cluster, runner=Sacctmgr())  # deletes our accounts
    django.db.connections.close_all()
    return elapsed, runner.calls


def load_dump(accounts: int, prefix: str) -> float:
    b, target = tree(accounts, prefix)
    state = compile_slurm(b.build(), SlurmTarget("benchload", target.flavors, members=target.members))
    work = Path(tempfile.mkdtemp(prefix="allot-slurm-"))
    (work / "qos.sh").write_text(qos_script(state))
    (work / "dump.cfg").write_text(render_dump(state))
    subprocess.run(["sacctmgr", "-i", "add", "cluster", "benchload"], capture_output=True, check=False)
    start = time.perf_counter()
    subprocess.run(["sh", str(work / "qos.sh")], capture_output=True, check=True)
    loaded = subprocess.run(["sacctmgr", "-i", "load", f"file={work / 'dump.cfg'}"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if loaded.returncode != 0:
        raise RuntimeError(f"sacctmgr load failed: {loaded.stdout}{loaded.stderr}")
    print(f"sacctmgr load of the same {accounts} accounts into a fresh cluster: {elapsed:.1f} s")
    subprocess.run(["sacctmgr", "-i", "delete", "cluster", "benchload"], capture_output=True, check=False)
    for account in reversed(state.accounts):
        subprocess.run(
            ["sacctmgr", "-i", "delete", "account", "where", f"name={account.name}"], capture_output=True, check=False
        )
    for qos in state.qos:
        subprocess.run(["sacctmgr", "-i", "delete", "qos", qos.name], capture_output=True, check=False)
    return elapsed


def main() -> None:
    plan_s = plan_only()
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
    demo_s, _ = django_sync(19, "bd")
    sync_300_s, calls = django_sync(300, "bt")
    load_300_s = load_dump(300, "bl")
    print(
        f"plan_s={plan_s:.3f} sync_demo_s={demo_s:.1f} sync_300_s={sync_300_s:.1f} sacctmgr_calls={calls} "
        f"load_300_s={load_300_s:.1f}"
    )


if __name__ == "__main__":
    main()
