"""Benchmark the Kueue translator and diff.

    python bench/kueue.py

Workload: a 3-level cohort tree (1 organisation, 20 departments, 400 teams, all Cohorts) over
10,000 project ClusterQueues, 4 flavors × 3 resources, a namespace and LocalQueue per project, 4
tiers: compiled from scratch (compile_s); then diffed against an identical actual set as a server
returns it — defaults, resourceVersions and managedFields added (diff_s); then validated against
the real CRD schemas, CEL and webhook rules (validate_s, against the bundled quotas/kueue_crds).
Then a MultiKueue fleet of 1 manager + 10 workers over 2,000 project ClusterQueues (Kueue's own
large-scale test size), 4 flavors on every worker: every cluster's objects compiled (fleet_compile_s),
diffed (fleet_diff_s) and validated (fleet_validate_s), within the single-cluster targets above.
Prints the figures; the LAST line is key=value pairs.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from quotas.kueue_crds import CRD_DIR
from quotas.policy import Resource, UnitKind
from quotas.policy.builder import TreeBuilder
from quotas.policy.kueue import KueueFlavor, KueueTarget, compile_kueue, object_key
from quotas.policy.kueue.diff import Action, plan_sync
from quotas.policy.kueue.multikueue import Fleet, Worker, compile_fleet
from quotas.policy.kueue.schema import CrdSchemas
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.snapshot import Tier

FLAVORS = ("west/a100-80gb", "west/a100-40gb", "west/v100-32gb", "west/h100-80gb")
RESOURCES = ((Resource.GPU, 1), (Resource.CPU, 12_000), (Resource.MEMORY, 128 * 2**30))
QUEUES, DEPTS, TEAMS_PER_DEPT = 10_000, 20, 20


def build() -> tuple[TreeBuilder, KueueTarget]:
    b = TreeBuilder()
    for key in FLAVORS:
        b.flavor(key, 2_000_000)
    org = b.unit("acme", UnitKind.ORGANISATION)
    g = {org: 1_600_000}
    teams = []
    for d in range(DEPTS):
        dept = b.unit(f"d{d}", UnitKind.DEPARTMENT, org)
        g[dept] = g[org] // DEPTS
        for t in range(TEAMS_PER_DEPT):
            team = b.unit(f"t{t}", UnitKind.TEAM, dept, weight=1 + t % 3)
            g[team] = g[dept] // TEAMS_PER_DEPT
            teams.append(team)
    namespaces = {}
    per_team = QUEUES // len(teams)
    for i in range(QUEUES):
        project = b.unit(f"p{i}", UnitKind.PROJECT, teams[i % len(teams)])
        g[project] = g[teams[i % len(teams)]] // (per_team + 1)
        namespaces[project] = (f"ns-{i}",)
    for uid, guarantee in g.items():
        for key in FLAVORS:
            for resource, scale in RESOURCES:
                b.quota(uid, key, resource, guarantee * scale, guarantee * scale // 4, guarantee * scale // 2)
    for i, name in enumerate(("P0", "P1", "P2", "P3")):
        b.tiers[name] = Tier(name, 10 ** (5 - i), i == 3, display_name=name)
    flavors = tuple(
        KueueFlavor(k, k.split("/")[1], {"pool": k.split("/")[1]}, billing_weight=i) for i, k in enumerate(FLAVORS)
    )
    return b, KueueTarget("west", flavors, namespaces, revision=1)


def as_returned(obj: dict) -> dict:
    back = copy.deepcopy(obj)
    back["metadata"].update(uid="00000000-0000-0000-0000-000000000000", resourceVersion="1", generation=1)
    if back["kind"] == "ClusterQueue":
        back["spec"]["stopPolicy"] = "None"
    back["metadata"]["managedFields"] = [
        {"manager": "allot", "operation": "Apply", "fieldsV1": {"f:spec": {f"f:{k}": {} for k in obj.get("spec", {})}}}
    ]
    return back


WORKERS, FLEET_QUEUES = 10, 2_000


def build_fleet() -> tuple[TreeBuilder, Fleet, KueueTarget, dict[str, KueueTarget]]:
    b = TreeBuilder()
    names = [f"w{i}" for i in range(WORKERS)]
    keys = [f"{w}/{f.split('/')[1]}" for w in names for f in FLAVORS]
    for key in keys:
        b.flavor(key, 200_000)
    org = b.unit("acme", UnitKind.ORGANISATION)
    g = {org: 160_000}
    teams = []
    for d in range(DEPTS):
        dept = b.unit(f"d{d}", UnitKind.DEPARTMENT, org)
        g[dept] = g[org] // DEPTS
        for t in range(5):
            team = b.unit(f"t{t}", UnitKind.TEAM, dept, weight=1 + t % 3)
            g[team] = g[dept] // 5
            teams.append(team)
    namespaces = {}
    for i in range(FLEET_QUEUES):
        project = b.unit(f"p{i}", UnitKind.PROJECT, teams[i % len(teams)])
        g[project] = g[teams[i % len(teams)]] // (FLEET_QUEUES // len(teams) + 1)
        namespaces[project] = (f"ns-{i}",)
    for uid, guarantee in g.items():
        for key in keys:
            b.quota(uid, key, Resource.GPU, guarantee, guarantee // 4, guarantee // 2)
    workers = {
        w: KueueTarget(w, tuple(KueueFlavor(f"{w}/{f.split('/')[1]}", f.split("/")[1]) for f in FLAVORS), revision=1)
        for w in names
    }
    fleet = Fleet("region", "hub", tuple(Worker(w, f"{w}-kubeconfig") for w in names))
    return b, fleet, KueueTarget("hub", (), namespaces, revision=1), workers


def bench_fleet(schemas: CrdSchemas) -> str:
    b, fleet, manager, workers = build_fleet()
    snapshot = b.build()
    start = time.perf_counter()
    compiled = compile_fleet(snapshot, fleet, manager, workers)
    compile_s = time.perf_counter() - start
    objects = sum(len(v) for v in compiled.values())
    queues = sum(o["kind"] == "ClusterQueue" for v in compiled.values() for o in v)
    print(
        f"fleet: compiled {objects} objects ({queues} ClusterQueues on {len(compiled)} clusters) in {compile_s:.3f} s"
    )
    start = time.perf_counter()
    for objs in compiled.values():
        plans = plan_sync(objs, {object_key(o): as_returned(o) for o in objs})
        assert all(p.action is Action.UNCHANGED for p in plans)
    diff_s = time.perf_counter() - start
    start = time.perf_counter()
    for objs in compiled.values():
        assert validate_objects(objs, schemas) == []
    validate_s = time.perf_counter() - start
    print(f"fleet: diffed in {diff_s:.3f} s, validated in {validate_s:.3f} s")
    figures = f" fleet_compile_s={compile_s:.3f} fleet_diff_s={diff_s:.3f} fleet_validate_s={validate_s:.3f}"
    return figures + f" fleet_cluster_queues={queues}"


def main() -> None:
    b, target = build()
    snapshot = b.build()
    start = time.perf_counter()
    objects = compile_kueue(snapshot, target)
    compile_s = time.perf_counter() - start
    queues = sum(o["kind"] == "ClusterQueue" for o in objects)
    print(f"compiled {len(objects)} objects ({queues} ClusterQueues) in {compile_s:.3f} s")
    actual = {object_key(o): as_returned(o) for o in objects}
    start = time.perf_counter()
    plans = plan_sync(objects, actual)
    diff_s = time.perf_counter() - start
    unchanged = sum(p.action is Action.UNCHANGED for p in plans)
    assert unchanged == len(objects), "an identical set must diff clean"
    print(f"diffed against an identical actual set in {diff_s:.3f} s ({unchanged} unchanged)")
    figures = f"compile_s={compile_s:.3f} diff_s={diff_s:.3f} objects={len(objects)} cluster_queues={queues}"
    schemas = CrdSchemas(yaml.safe_load(f.read_text()) for f in sorted(CRD_DIR.glob("kueue.x-k8s.io_*.yaml")))
    start = time.perf_counter()
    problems = validate_objects(objects, schemas)
    validate_s = time.perf_counter() - start
    assert problems == [], problems[:3]
    print(f"validated against the CRD schemas, CEL and webhook rules in {validate_s:.3f} s")
    figures += f" validate_s={validate_s:.3f}"
    # a sync of an unchanged cluster, as quotas.services.sync.kueue runs it: compile, plan, then validate only
    # what would be written (nothing) plus the cross-object webhook rules; the API server's list not counted
    start = time.perf_counter()
    again = compile_kueue(snapshot, target)
    planned = plan_sync(again, actual)
    written = {p.key for p in planned if p.action in (Action.CREATE, Action.UPDATE)}
    assert validate_objects(again, schemas, actual, written=written) == [] and not written
    nochange_s = time.perf_counter() - start
    print(f"an unchanged cluster's sync (compile + plan + validate what changes) in {nochange_s:.3f} s")
    figures += f" nochange_sync_s={nochange_s:.3f}"
    figures += bench_fleet(schemas)
    print(figures)


if __name__ == "__main__":
    main()
