"""Kubernetes: Kueue objects, in order, each step refusing to go on if the previous one failed:

0. read the Kueue the cluster serves from its own CRDs (quotas.policy.kueue.versions): a cluster that
   serves only v1beta1 (Kueue v0.13, v0.14) gets its objects in v1beta1 (the client converts at the
   edge, the run says what differs), one serving neither is refused with what to do, and optional
   fields an older server lacks are left out of its objects (the run says which);
1. compile the tree for the cluster and read Allot's objects from it (label selector);
2. plan: create / update / unchanged / delete on the fields Allot owns;
3. validate every object the plan would write against the CRD schemas and CEL rules, and the whole
   set against Kueue's webhook rules — a single problem and nothing is applied ("never
   half-validated"); unchanged objects are not validated again (an unchanged 10,000-queue cluster);
4. server-side dry run of every create and update — the API server's own 422s and 409s stop the
   sync before any write;
5. apply in dependency order, then delete Allot's stale objects in reverse order.

An object with one of our names that exists without Allot's label is never touched (``not_ours``).
A second sync of an unchanged tree writes nothing. Drift checks report out-of-band edits field by
field and, when the cluster's policy is ``correct``, re-apply with ``force`` to take ownership back.

Not one database transaction: the work is remote calls, and holding database locks across them
would block quota edits. The run and its per-object outcomes are recorded atomically at the end."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.utils import timezone

from quotas.errors import InputError
from quotas.integrations.demo_cluster import kueue_client_for
from quotas.integrations.kubernetes import ClusterCallError, KueueClient
from quotas.models import (
    Cluster,
    DriftPolicy,
    SyncMode,
    SyncOutcome,
    SyncRun,
    SyncStatus,
)
from quotas.policy.kueue import compile_kueue, object_key
from quotas.policy.kueue.convert import to_version
from quotas.policy.kueue.diff import Action, ObjectPlan, plan_sync
from quotas.policy.kueue.multikueue import FLEET_KINDS, compile_fleet
from quotas.policy.kueue.owners import quota_conflicts
from quotas.policy.kueue.schema import CrdSchemas
from quotas.policy.kueue.target import APPLY_ORDER, LABEL_CLUSTER, LABEL_MANAGED_BY, NAMESPACE_LABEL, CompileError
from quotas.policy.kueue.usage import queue_usage
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.kueue.versions import ServedKueue, fit_objects, served_kueue, version_problem
from quotas.selectors import fleet_targets, kueue_target, org_snapshot

from ..audit import Actor, require_reason
from ..budget_sync import budget_notes
from .kueue_writes import apply_plans, dry_run
from .run import RunRecord, record_run
from .slices import slices_note


@lru_cache(maxsize=4)
def _schemas_from_dir(directory: str) -> CrdSchemas:
    files = sorted(Path(directory).glob("kueue.x-k8s.io_*.yaml"))
    return CrdSchemas(yaml.safe_load(f.read_text()) for f in files if "workloads" not in f.name)


def crd_schemas(client: KueueClient) -> CrdSchemas:
    """The CRDs to validate against: ALLOT_KUBERNETES_CRD_DIR (the bundled ones by default), or the
    cluster's own when it is ``cluster``."""
    directory = settings.ALLOT_KUBERNETES_CRD_DIR
    return CrdSchemas(client.read_crds()) if directory == "cluster" else _schemas_from_dir(directory)


def kueue_sync(
    *, actor: Actor, reason: str, cluster: Cluster, mode: str = SyncMode.APPLY, client: KueueClient | None = None
) -> SyncRun:
    """Sync a Kubernetes cluster's Kueue objects (the steps in this module's docstring)."""
    reason = require_reason(reason)
    if not cluster.enabled or not settings.ALLOT_KUBERNETES_ENABLED:
        raise InputError(
            "cluster",
            f"syncing {cluster.name} is switched off",
            "enable the cluster (and, for Kubernetes, ALLOT_KUBERNETES_ENABLED) first",
        )
    run = RunRecord(
        SyncRun(
            cluster=cluster,
            mode=mode,
            started_at=timezone.now(),
            reason=reason,
            actor_name=getattr(actor, "username", "") or "system",
        )
    )
    try:
        _sync(run, cluster, mode, client or kueue_client_for(cluster.connection_ref))
    except ValueError as exc:  # a connection_ref we cannot use
        run.run.status, run.run.message = SyncStatus.FAILED, str(exc)
    except ClusterCallError as exc:
        run.run.status = SyncStatus.FAILED
        run.run.message = f"{cluster.name}: {exc}"
    return record_run(run, actor)


def _sync(run: RunRecord, cluster: Cluster, mode: str, client: KueueClient) -> None:
    target = kueue_target(cluster)
    run.run.revision = target.revision
    served = _served(run, client)
    if served is not None:
        refused = version_problem(served, cluster.name)
        if refused or served.version is None:
            run.run.status, run.run.message = SyncStatus.FAILED, refused or "no Kueue version to write"
            return
        client.use_version(served.version)
    snapshot = org_snapshot()
    fleet = fleet_targets(cluster)
    try:
        desired = compile_fleet(snapshot, *fleet)[cluster.name] if fleet else compile_kueue(snapshot, target)
    except CompileError as exc:
        run.run.status, run.run.message = SyncStatus.INVALID, str(exc)
        return
    if served is not None:
        desired, left_out = fit_objects(desired, served)
        run.notes.extend(left_out)
        older = served.note()
        if older:
            run.notes.append(older)
    if target.at is not None:
        run.notes.extend(budget_notes(snapshot, cluster, target.at))
    shared = [f for f in sorted(target.flavors, key=lambda f: f.name) if f.sharing.shared]
    if shared:
        run.notes.append(slices_note(cluster, client, shared))
    desired = _keep_foreign_local_queues(run, client, desired)
    manages = fleet is not None and fleet[0].manager == cluster.name
    kinds = APPLY_ORDER + FLEET_KINDS if manages else APPLY_ORDER  # only a manager serves MultiKueue's kinds
    listed = [obj for kind in kinds for obj in client.list_managed(kind)]
    actual = {object_key(obj): obj for obj in listed if _cluster_label(obj) in (cluster.name, None)}
    others = sorted({str(_cluster_label(obj)) for obj in listed if _cluster_label(obj) not in (cluster.name, None)})
    if others:
        run.notes.append(f"objects Allot compiled for {', '.join(others)} are on this API server too: left alone")
    run.usage = queue_usage(actual.values())
    planned = plan_sync(desired, actual)
    written = {plan.key for plan in planned if plan.action in (Action.CREATE, Action.UPDATE)}
    schemas = crd_schemas(client)
    if schemas.serves(desired):
        problems = validate_objects(desired, schemas, actual, written=written)
    else:  # the cluster's own CRDs (ALLOT_KUBERNETES_CRD_DIR=cluster) of an older Kueue: check what is sent
        old = {key: to_version(obj, client.version) for key, obj in actual.items()}
        problems = validate_objects([to_version(o, client.version) for o in desired], schemas, old, written=written)
    if problems:
        for problem in problems:
            run.add(
                (problem.kind, problem.namespace, problem.name),
                SyncOutcome.INVALID,
                message=f"{problem.field}: {problem.message} ({problem.source})",
            )
        run.run.status = SyncStatus.INVALID
        run.run.message = f"{len(problems)} problem(s) in the compiled objects; nothing was applied"
        return
    plans = _without_conflicts(run, planned, actual.values())
    plans = _skip_not_ours(run, client, plans)
    drift = mode == SyncMode.DRIFT_CHECK
    force = drift and cluster.drift_policy == DriftPolicy.CORRECT
    if drift and not force:
        _report_drift(run, plans)
        return
    passed = dry_run(run, client, plans, force=force)
    if passed is None:
        return
    apply_plans(run, client, passed, force=force)
    _govern_namespaces(run, client, cluster.name, {ns for found in target.namespaces.values() for ns in found})


def _govern_namespaces(run: RunRecord, client: KueueClient, cluster: str, bound: set[str]) -> None:
    """Label each bound namespace ``allot.dev/governed=true`` (the admission webhooks are sent only those) and
    take the label off namespaces no longer bound. A namespace that does not exist or a role without
    namespace rights is a note, never a failed sync: the queues are what the run is about."""
    try:
        labelled = client.governed_namespaces(cluster)
    except ClusterCallError as exc:
        run.notes.append(
            f"could not read namespaces ({exc.status}): bound namespaces were not labelled allot.dev/governed "
            "(Allot's role needs get, list and patch on namespaces, deploy/kubernetes/base/rbac.yaml)"
        )
        return
    changed, missing = [], []
    for name, governed in [
        *((n, True) for n in sorted(bound - labelled)),
        *((n, False) for n in sorted(labelled - bound)),
    ]:
        try:
            client.govern_namespace(name, cluster, governed=governed)
            changed.append(name if governed else f"{name} (no longer bound)")
        except ClusterCallError as exc:
            if exc.status != 404:
                run.notes.append(f"could not label namespace {name}: {exc}")
            else:
                missing.append(name)
    if changed:
        run.notes.append(f"admission governs {', '.join(changed)}: allot.dev/governed set or removed")
    if missing:
        run.notes.append(f"bound namespace(s) {', '.join(missing)} do not exist yet: labelled when created and synced")


def _served(run: RunRecord, client: KueueClient) -> ServedKueue | None:
    """The Kueue the cluster serves, from its own CRDs; None (and a note) when they cannot be read."""
    try:
        return served_kueue(client.read_crds())
    except ClusterCallError as exc:
        run.notes.append(
            f"could not read the cluster's Kueue CRDs ({exc.status}): its Kueue version was not checked "
            "(Allot's role needs get on customresourcedefinitions, deploy/kubernetes/base/rbac.yaml)"
        )
        return None


def _keep_foreign_local_queues(
    run: RunRecord, client: KueueClient, desired: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A LocalQueue Allot does not own that points at one of Allot's ClusterQueues (left by an import,
    or made by hand) keeps working: its namespace stays in the queue's namespaceSelector, and the
    run says so (issue #15.7: the next sync stripped it, and that namespace lost its queue)."""
    queues = {o["metadata"]["name"]: o for o in desired if o.get("kind") == "ClusterQueue"}
    extra: dict[str, set[str]] = {}
    for lq in client.list_all("LocalQueue"):
        meta = lq.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL_MANAGED_BY) == "allot":
            continue
        target = str((lq.get("spec") or {}).get("clusterQueue") or "")
        if target in queues and meta.get("namespace"):
            extra.setdefault(target, set()).add(str(meta["namespace"]))
    out = []
    for obj in desired:
        name = obj["metadata"]["name"]
        if obj.get("kind") == "ClusterQueue" and name in extra:
            spec = dict(obj["spec"])
            current = ((spec.get("namespaceSelector") or {}).get("matchExpressions") or [{}])[0].get("values") or []
            values = sorted({*current, *extra[name]})
            spec["namespaceSelector"] = {
                "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "In", "values": values}]
            }
            obj = {**obj, "spec": spec}
            run.notes.append(
                f"ClusterQueue {name} keeps namespace(s) {', '.join(sorted(extra[name]))} of LocalQueues Allot does "
                f"not own: bind them to the unit in Allot to make them Allot's"
            )
        out.append(obj)
    return out


def _cluster_label(obj: Mapping[str, Any]) -> str | None:
    """Which of Allot's clusters an object was compiled for (issue #15.3: another cluster's objects
    on the same API server — two clusters of one installation sharing it — are never ours to delete)."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CLUSTER)
    return str(value) if value else None


def _without_conflicts(run: RunRecord, plans: list[ObjectPlan], actual: Any) -> list[ObjectPlan]:
    """Leave alone, as conflicts with what to do, the queues whose quota another controller sets
    (quotas.policy.kueue.owners): forcing Allot's values back on every sync would only fight it."""
    conflicts = {c.key: c for c in quota_conflicts(actual)}
    for conflict in conflicts.values():
        run.add(conflict.key, SyncOutcome.CONFLICT, message=conflict.message)
    if conflicts:
        who = sorted({c.who for c in conflicts.values()})
        run.notes.append(f"{len(conflicts)} queue(s) whose quota {' and '.join(who)} also sets: left alone, see each")
    return [plan for plan in plans if plan.key not in conflicts]


def _skip_not_ours(run: RunRecord, client: KueueClient, plans: list[ObjectPlan]) -> list[ObjectPlan]:
    """Leave alone objects with Allot's names that are not Allot's, and never point a LocalQueue at
    such a ClusterQueue (issue #15.4: it would hand a namespace a foreign queue's quota)."""
    kept = []
    foreign_queues: set[str] = set()
    for plan in plans:
        target = ((plan.desired or {}).get("spec") or {}).get("clusterQueue") if plan.kind == "LocalQueue" else None
        if target in foreign_queues and plan.action in (Action.CREATE, Action.UPDATE):
            run.add(
                plan.key,
                SyncOutcome.NOT_OURS,
                message=f"points at ClusterQueue {target}, which is not Allot's: not applied, so namespace "
                f"{plan.namespace} gets no foreign quota — rename the unit or hand the ClusterQueue over",
            )
            continue
        if plan.action is Action.CREATE:
            existing = client.get(plan.kind, plan.name, plan.namespace)
            if existing is not None:
                other = _cluster_label(existing)
                if other and other != run.run.cluster.name:
                    message = (
                        f"Allot compiled it for its cluster {other}, which shares this API server; left alone — "
                        f"two of Allot's clusters on one API server need unit names of their own (or one cluster)"
                    )
                else:
                    managers = sorted({m.get("manager", "?") for m in existing["metadata"].get("managedFields") or []})
                    message = (
                        f"exists without app.kubernetes.io/managed-by=allot (written by "
                        f"{', '.join(managers) or 'nobody'}); left alone — rename the unit or hand the "
                        f"object over by labelling it"
                    )
                run.add(plan.key, SyncOutcome.NOT_OURS, message=message)
                if plan.kind == "ClusterQueue":
                    foreign_queues.add(plan.name)
                continue
        kept.append(plan)
    return kept


def _report_drift(run: RunRecord, plans: list[ObjectPlan]) -> None:
    for plan in plans:
        if plan.action is Action.UNCHANGED:
            run.add(plan.key, SyncOutcome.UNCHANGED)
        else:
            message = {
                Action.CREATE: "missing on the cluster",
                Action.DELETE: "on the cluster but no longer desired",
                Action.UPDATE: "changed on the cluster",
            }[plan.action]
            run.add(plan.key, SyncOutcome.DRIFT, changes=plan.changes, message=message)
    drifted = run.count(SyncOutcome.DRIFT)
    run.run.status = SyncStatus.DRIFT if drifted else SyncStatus.IN_SYNC
    run.run.message = f"{drifted} object(s) differ from the policy" if drifted else "in sync"
