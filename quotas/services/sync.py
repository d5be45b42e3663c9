"""Keep each cluster in sync with the tree: Kueue objects on Kubernetes (below), accounts, user
associations and QOS on Slurm (:func:`slurm_sync`). One entry point, :func:`cluster_sync`, for both.

Kubernetes, in order, each step refusing to go on if the previous one failed:

1. compile the tree for the cluster and read Allot's objects from it (label selector);
2. validate every desired object against the CRD schemas, CEL rules and Kueue's webhook rules —
   a single problem and nothing is applied ("never half-validated");
3. plan: create / update / unchanged / delete on the fields Allot owns;
4. server-side dry run of every create and update — the API server's own 422s and 409s stop the
   sync before any write;
5. apply in dependency order, then delete Allot's stale objects in reverse order.

An object with one of our names that exists without Allot's label is never touched (``not_ours``).
A second sync of an unchanged tree writes nothing. Drift checks report out-of-band edits field by
field and, when the cluster's policy is ``correct``, re-apply with ``force`` to take ownership back.

Not one database transaction: the work is remote calls, and holding database locks across them
would block quota edits. The run and its per-object outcomes are recorded atomically at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from quotas.errors import InputError
from quotas.integrations.kubernetes import ClusterCallError, KueueClient, api_client_for
from quotas.integrations.slurm import Sacctmgr, SlurmError
from quotas.models import (
    Cluster,
    ClusterKind,
    DriftPolicy,
    OrgUnit,
    QueueUsage,
    SyncMode,
    SyncObject,
    SyncOutcome,
    SyncRun,
    SyncStatus,
)
from quotas.policy.kueue import compile_kueue, object_key
from quotas.policy.kueue.diff import Action, ObjectPlan, plan_sync
from quotas.policy.kueue.schema import CrdSchemas
from quotas.policy.kueue.translate import APPLY_ORDER, LABEL_CLUSTER, LABEL_MANAGED_BY, NAMESPACE_LABEL, CompileError
from quotas.policy.kueue.usage import QueueUsage as QueueUsageLine
from quotas.policy.kueue.usage import queue_usage
from quotas.policy.kueue.validate import validate_objects
from quotas.policy.slurm.diff import Command as SlurmCommand
from quotas.policy.slurm.diff import Step as SlurmStep
from quotas.policy.slurm.diff import batch as slurm_batch
from quotas.policy.slurm.diff import check_tres, hold_back, plan_slurm
from quotas.policy.slurm.translate import compile_slurm
from quotas.selectors import kueue_target, org_snapshot, policy_revision, slurm_target

from .audit import Actor, audit_event, audit_write, require_reason
from .budget_sync import budget_notes, slurm_resets

Key = tuple[str, str, str]


@lru_cache(maxsize=4)
def _schemas_from_dir(directory: str) -> CrdSchemas:
    files = sorted(Path(directory).glob("kueue.x-k8s.io_*.yaml"))
    return CrdSchemas(yaml.safe_load(f.read_text()) for f in files if "workloads" not in f.name)


def crd_schemas(client: KueueClient) -> CrdSchemas:
    """The CRDs to validate against: ALLOT_KUBERNETES_CRD_DIR (the bundled ones by default), or the
    cluster's own when it is ``cluster``."""
    directory = settings.ALLOT_KUBERNETES_CRD_DIR
    return CrdSchemas(client.read_crds()) if directory == "cluster" else _schemas_from_dir(directory)


class _Run:
    """Collects outcomes; written once at the end."""

    def __init__(self, run: SyncRun) -> None:
        self.run = run
        self.objects: list[SyncObject] = []
        self.usage: list[QueueUsageLine] | None = None
        self.notes: list[str] = []

    def add(
        self,
        key: Key,
        outcome: SyncOutcome,
        *,
        changes: Any = (),
        message: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        kind, namespace, name = key
        self.objects.append(
            SyncObject(
                run=self.run,
                kind=kind,
                namespace=namespace,
                name=name,
                outcome=outcome,
                changes=[c.as_dict() for c in changes],
                message=message,
                details=dict(details or {}),
            )
        )

    def count(self, *outcomes: SyncOutcome) -> int:
        return sum(o.outcome in outcomes for o in self.objects)


def cluster_sync(
    *, actor: Actor, reason: str, cluster: Cluster, mode: str = SyncMode.APPLY, client: KueueClient | None = None
) -> SyncRun:
    """Sync ``cluster`` (see the module docstring). Returns the recorded :class:`SyncRun`.

    Raises InputError for a reason missing, a cluster that is disabled;
    every problem with the cluster itself is recorded in the run, not raised.
    """
    reason = require_reason(reason)
    if cluster.kind == ClusterKind.SLURM and cluster.enabled:
        return slurm_sync(actor=actor, reason=reason, cluster=cluster, mode=mode)
    if not cluster.enabled or not settings.ALLOT_KUBERNETES_ENABLED:
        raise InputError(
            "cluster",
            f"syncing {cluster.name} is switched off",
            "enable the cluster (and, for Kubernetes, ALLOT_KUBERNETES_ENABLED) first",
        )
    run = _Run(
        SyncRun(
            cluster=cluster,
            mode=mode,
            started_at=timezone.now(),
            reason=reason,
            actor_name=getattr(actor, "username", "") or "system",
        )
    )
    try:
        _sync(run, cluster, mode, client or KueueClient(api_client_for(cluster.connection_ref)))
    except ValueError as exc:  # a connection_ref we cannot use
        run.run.status, run.run.message = SyncStatus.FAILED, str(exc)
    except ClusterCallError as exc:
        run.run.status = SyncStatus.FAILED
        run.run.message = f"{cluster.name}: {exc}"
    return _record(run, actor)


def _sync(run: _Run, cluster: Cluster, mode: str, client: KueueClient) -> None:
    target = kueue_target(cluster)
    run.run.revision = target.revision
    snapshot = org_snapshot()
    try:
        desired = compile_kueue(snapshot, target)
    except CompileError as exc:
        run.run.status, run.run.message = SyncStatus.INVALID, str(exc)
        return
    if target.at is not None:
        run.notes.extend(budget_notes(snapshot, cluster, target.at))
    desired = _keep_foreign_local_queues(run, client, desired)
    listed = [obj for kind in APPLY_ORDER for obj in client.list_managed(kind)]
    actual = {object_key(obj): obj for obj in listed if _cluster_label(obj) in (cluster.name, None)}
    others = sorted({str(_cluster_label(obj)) for obj in listed if _cluster_label(obj) not in (cluster.name, None)})
    if others:
        run.notes.append(f"objects Allot compiled for {', '.join(others)} are on this API server too: left alone")
    run.usage = queue_usage(actual.values())
    problems = validate_objects(desired, crd_schemas(client), actual)
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
    plans = plan_sync(desired, actual)
    plans = _skip_not_ours(run, client, plans)
    drift = mode == SyncMode.DRIFT_CHECK
    force = drift and cluster.drift_policy == DriftPolicy.CORRECT
    if drift and not force:
        _report_drift(run, plans)
        return
    passed = _dry_run(run, client, plans, force=force)
    if passed is None:
        return
    _apply(run, client, passed, force=force)


def _keep_foreign_local_queues(run: _Run, client: KueueClient, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _skip_not_ours(run: _Run, client: KueueClient, plans: list[ObjectPlan]) -> list[ObjectPlan]:
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
                managers = sorted({m.get("manager", "?") for m in existing["metadata"].get("managedFields") or []})
                run.add(
                    plan.key,
                    SyncOutcome.NOT_OURS,
                    message=f"exists without app.kubernetes.io/managed-by=allot (managed by "
                    f"{', '.join(managers) or 'nobody'}); left alone — rename the unit or hand the "
                    f"object over by labelling it",
                )
                if plan.kind == "ClusterQueue":
                    foreign_queues.add(plan.name)
                continue
        kept.append(plan)
    return kept


def _report_drift(run: _Run, plans: list[ObjectPlan]) -> None:
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


def _dry_run(run: _Run, client: KueueClient, plans: list[ObjectPlan], *, force: bool) -> list[ObjectPlan] | None:
    """Server-side dry run of every write. In a dry-run sync it records every outcome and returns
    None. Otherwise it records the objects the server refused — each with what refused it and what to
    do — and returns the plans to apply: one refused object (an out-of-band edit, a flavor Kueue
    rejects) never blocks the unrelated others."""
    results: list[tuple[ObjectPlan, ClusterCallError | None]] = []
    for plan in plans:
        error = None
        if plan.action in (Action.CREATE, Action.UPDATE):
            assert plan.desired is not None
            try:
                client.apply(plan.desired, dry_run=True, force=force)
            except ClusterCallError as exc:
                if exc.status == 0:
                    raise  # the cluster is unreachable: nothing else would get through either
                error = exc
        results.append((plan, error))
    refused = [(plan, error) for plan, error in results if error is not None]
    for plan, error in refused:
        run.add(plan.key, _error_outcome(error), changes=plan.changes, message=_advice(run, plan, error),
                details=error.as_dict())  # fmt: skip
    if run.run.mode != SyncMode.DRY_RUN:
        return [plan for plan, error in results if error is None]
    would = {
        Action.CREATE: SyncOutcome.WOULD_CREATE,
        Action.UPDATE: SyncOutcome.WOULD_UPDATE,
        Action.DELETE: SyncOutcome.WOULD_DELETE,
        Action.UNCHANGED: SyncOutcome.UNCHANGED,
    }
    for plan, error in results:
        if error is None:
            run.add(plan.key, would[plan.action], changes=plan.changes)
    changes = run.count(SyncOutcome.WOULD_CREATE, SyncOutcome.WOULD_UPDATE, SyncOutcome.WOULD_DELETE)
    if refused:
        run.run.status = SyncStatus.PARTIAL
        run.run.message = f"{len(refused)} object(s) the API server would refuse (see each); {changes} would change"
    else:
        run.run.status = SyncStatus.WOULD_CHANGE if changes else SyncStatus.IN_SYNC
        run.run.message = f"{changes} object(s) would change" if changes else "in sync"
    return None


def _advice(run: _Run, plan: ObjectPlan, error: ClusterCallError) -> str:
    """The server's words, and what the operator can do about them."""
    cluster = run.run.cluster.name
    if error.status == 409:
        fields = ", ".join(sorted({str(c.get("field", "?")) for c in error.causes})) or "a field"
        managers = sorted(
            {m.split('"')[1] for m in (str(c.get("message", "")) for c in error.causes) if m.count('"') >= 2}
        )
        who = ", ".join(managers) or "another field manager"
        return (
            f"{error}. {fields} of {plan.kind} {plan.name} was changed by {who} outside Allot, so Allot will not "
            f"overwrite it. To make Allot's value win, set the cluster's drift policy to correct "
            f"(PATCH /api/v1/clusters/{cluster}/ with drift_policy=correct) and run "
            f"`manage.py allot_sync --cluster {cluster} --drift`: Allot takes the field over. To keep the edit, "
            f"make the same change in Allot so both agree. The other objects of this sync were applied."
        )
    if error.status == 422:
        return f"{error}. Kueue refuses this object as compiled: fix the input named above; the others were applied."
    if error.status == 404 and plan.namespace:
        return (
            f"namespace {plan.namespace} does not exist on {cluster}: create it (Allot does not create namespaces), "
            f"or remove the binding; the other objects were applied."
        )
    return str(error)


def _error_outcome(error: ClusterCallError) -> SyncOutcome:
    return {409: SyncOutcome.CONFLICT, 422: SyncOutcome.INVALID}.get(error.status, SyncOutcome.ERROR)


def _apply(run: _Run, client: KueueClient, plans: list[ObjectPlan], *, force: bool) -> None:
    done = {Action.CREATE: SyncOutcome.CREATED, Action.UPDATE: SyncOutcome.UPDATED, Action.DELETE: SyncOutcome.DELETED}
    for plan in plans:
        if plan.action is Action.UNCHANGED:
            run.add(plan.key, SyncOutcome.UNCHANGED)
            continue
        try:
            if plan.action is Action.DELETE:
                client.delete(plan.kind, plan.name, plan.namespace)
            else:
                assert plan.desired is not None
                client.apply(plan.desired, force=force)
        except ClusterCallError as exc:
            run.add(plan.key, _error_outcome(exc), changes=plan.changes, message=str(exc), details=exc.as_dict())
            continue
        run.add(plan.key, done[plan.action], changes=plan.changes)
    failed = run.count(SyncOutcome.CONFLICT, SyncOutcome.INVALID, SyncOutcome.ERROR, SyncOutcome.NOT_OURS)
    written = run.count(SyncOutcome.CREATED, SyncOutcome.UPDATED, SyncOutcome.DELETED)
    if failed:
        run.run.status = SyncStatus.PARTIAL
        run.run.message = f"{failed} object(s) failed, {written} written; the next sync retries them"
    else:
        run.run.status = SyncStatus.APPLIED if written else SyncStatus.IN_SYNC
        run.run.message = f"{written} object(s) written" if written else "in sync: nothing to write"


def _record_usage(cluster: Cluster, usage: list[QueueUsageLine], at: Any) -> None:
    """Replace the cluster's usage with what this read saw: two statements, whatever the size."""
    units = dict(
        OrgUnit.objects.filter(path__in={u.unit_path for u in usage}, archived_at__isnull=True).values_list(
            "path", "pk"
        )
    )
    QueueUsage.objects.filter(cluster=cluster).delete()
    QueueUsage.objects.bulk_create(
        [
            QueueUsage(
                cluster=cluster,
                unit_id=units.get(u.unit_path),
                queue=u.queue,
                flavor=u.flavor,
                resource=u.resource.value,
                total=u.total,
                borrowed=u.borrowed,
                observed_at=at,
            )
            for u in usage
        ],
        batch_size=1000,
    )


def slurm_sync(
    *, actor: Actor, reason: str, cluster: Cluster, mode: str = SyncMode.APPLY, runner: Sacctmgr | None = None
) -> SyncRun:
    """Read with ``sacctmgr -n -P show``, plan per object, fold the plan into as few ``sacctmgr -i``
    calls as possible (see quotas/policy/slurm/diff.py), apply them in dependency order, read again
    and prove convergence. Each call, its exit code and output are recorded on the objects it
    covered; a failed batched call is retried object by object; a delete refused because jobs are
    running is ``blocked`` and retried by the next sync, never forced. Objects Allot did not create
    are never changed; names Slurm would store differently are reported and left out.

    ``drift_check`` reports the plan field by field (``drift``), or applies it when the cluster's
    drift policy is ``correct``."""
    reason = require_reason(reason)
    run = _Run(
        SyncRun(
            cluster=cluster,
            mode=mode,
            started_at=timezone.now(),
            reason=reason,
            actor_name=getattr(actor, "username", "") or "system",
            revision=policy_revision(),  # the policy it compiles: the history links each change to it
        )
    )
    runner = runner or Sacctmgr()
    try:
        snapshot, target = org_snapshot(), slurm_target(cluster)
        desired = compile_slurm(snapshot, target)
        run.notes.extend(budget_notes(snapshot, cluster, timezone.now()))
        for problem in desired.problems:
            run.add((problem.kind, "", problem.name), SyncOutcome.INVALID, message=problem.message)
        commands, refusals = _plan_slurm(desired, runner)
        for refusal in refusals:
            run.add((refusal.kind, "", refusal.name), SyncOutcome.NOT_OURS, message=refusal.message)
        foreign = {r.name: r.message for r in refusals if r.kind == "qos"}
        commands, waiting = hold_back(desired, commands, foreign, "which are not this cluster's to write")
        for problem in waiting:
            run.add((problem.kind, "", problem.name), SyncOutcome.INVALID, message=problem.message)
        if any(c.kind == "qos" and c.action != "delete" for c in commands):
            commands, waiting = check_tres(desired, commands, runner.read_tres())
            for problem in waiting:
                run.add((problem.kind, "", problem.name), SyncOutcome.INVALID, message=problem.message)
        steps = slurm_batch(commands, desired.cluster)
        drift = mode == SyncMode.DRIFT_CHECK and cluster.drift_policy != DriftPolicy.CORRECT
        if drift or mode == SyncMode.DRY_RUN:
            _report_slurm_plan(run, steps, drift=drift)
        else:
            _apply_slurm(run, runner, steps)
            run.notes.extend(slurm_resets(cluster, snapshot, target, desired, runner))
            left, _ = _plan_slurm(desired, runner)
            skipped = {(o.kind, o.name) for o in run.objects if o.outcome == SyncOutcome.INVALID}
            left = [c for c in left if (c.kind, c.name) not in skipped]
            if left and run.run.status != SyncStatus.PARTIAL:
                run.run.status = SyncStatus.PARTIAL
                run.run.message = f"{len(left)} change(s) still differ after applying: " + "; ".join(
                    c.kind + " " + c.name for c in left[:5]
                )
        invalid = run.count(SyncOutcome.INVALID)
        if invalid and run.run.status in (SyncStatus.APPLIED, SyncStatus.IN_SYNC):
            run.run.status = SyncStatus.PARTIAL
            run.run.message += f"; {invalid} object(s) left out: see the invalid ones"
        run.run.counts = {"sacctmgr_calls": runner.calls, "planned_calls": len(steps)}
    except (ValueError, SlurmError) as exc:
        run.run.status, run.run.message = SyncStatus.FAILED, str(exc)
    return _record(run, actor)


def _plan_slurm(desired: Any, runner: Sacctmgr) -> tuple[list[SlurmCommand], list[Any]]:
    accounts, users, qos, descriptions, elsewhere = runner.read_state(desired.cluster)
    return plan_slurm(desired, accounts, users, qos, descriptions=descriptions, elsewhere=elsewhere)


def _call_text(step: SlurmStep) -> str:
    return "sacctmgr -i " + " ".join(step.argv if not step.load else ("load", "file=<the partial dump below>"))


def _report_slurm_plan(run: _Run, steps: list[SlurmStep], *, drift: bool) -> None:
    would = {"add": SyncOutcome.WOULD_CREATE, "modify": SyncOutcome.WOULD_UPDATE, "delete": SyncOutcome.WOULD_DELETE}
    missing = {"add": "missing on the cluster", "modify": "changed on the cluster", "delete": "no longer desired"}
    planned = 0
    for step in steps:
        for command in step.commands:
            planned += 1
            head = missing[command.action] if drift else f"{command.action} {command.kind}"
            run.add(
                (command.kind, "", command.name),
                SyncOutcome.DRIFT if drift else would[command.action],
                changes=command.changes,
                message=f"{head}: {command.summary or command.name} — by {_call_text(step)}",
                details={"file": step.load} if step.load and command is step.commands[0] else None,
            )
    if drift:
        run.run.status = SyncStatus.DRIFT if planned else SyncStatus.IN_SYNC
        run.run.message = f"{planned} object(s) differ from the policy" if planned else "in sync"
    else:
        run.run.status = SyncStatus.WOULD_CHANGE if planned else SyncStatus.IN_SYNC
        run.run.message = f"{planned} object(s) would change in {len(steps)} sacctmgr call(s)" if planned else "in sync"


JOBS_ACTIVE = ("job(s) active", "jobs running", "running jobs")


def _apply_slurm(run: _Run, runner: Sacctmgr, steps: list[SlurmStep]) -> None:
    done = {"add": SyncOutcome.CREATED, "modify": SyncOutcome.UPDATED, "delete": SyncOutcome.DELETED}
    failed = blocked = written = 0
    calls = runner.calls
    held: set[str] = set()

    def record(command: SlurmCommand, step: SlurmStep, result: Any, first: bool) -> None:
        nonlocal failed, blocked, written
        text = f"{_call_text(step)} → rc={result.returncode}: {result.output[:2000]}"
        details: dict[str, Any] = {"returncode": result.returncode, "objects_in_call": len(step.commands)}
        if first and step.load:
            details["file"] = step.load
        if result.returncode == 0:
            written += 1
            run.add(
                (command.kind, "", command.name),
                done[command.action],
                changes=command.changes,
                message=text,
                details=details,
            )
        elif command.action == "delete" and any(m in result.output.lower() for m in JOBS_ACTIVE):
            blocked += 1
            held.add(command.name.split("@")[-1])
            run.add((command.kind, "", command.name), SyncOutcome.BLOCKED, message=text, details=details)
        elif command.kind == "qos" and command.action == "delete" and any(f"A = {a} " in result.output for a in held):
            blocked += 1  # still the QOS of an account whose delete waits for its jobs
            run.add(
                (command.kind, "", command.name),
                SyncOutcome.BLOCKED,
                message=f"waits for the account(s) blocked by running jobs; {text}",
                details=details,
            )
        else:
            failed += 1
            run.add((command.kind, "", command.name), SyncOutcome.ERROR, message=text, details=details)

    for step in steps:
        result = runner.load(step.load) if step.load else runner.write(step.argv)
        if result.returncode == 0 or len(step.commands) == 1:
            for i, command in enumerate(step.commands):
                record(command, step, result, i == 0)
            continue
        for command in step.commands:  # one object per call, so each gets its own outcome
            single = SlurmStep(command.argv, (command,))
            record(command, single, runner.write(command.argv), True)
    if failed or blocked:
        run.run.status = SyncStatus.PARTIAL
        parts = [f"{written} object(s) written"]
        if failed:
            parts.append(f"{failed} failed")
        if blocked:
            parts.append(f"{blocked} delete(s) blocked by running jobs")
        run.run.message = ", ".join(parts) + "; the next sync retries them"
    else:
        run.run.status = SyncStatus.APPLIED if written else SyncStatus.IN_SYNC
        run.run.message = (
            f"{written} object(s) written in {runner.calls - calls} sacctmgr call(s)"
            if written
            else "in sync: nothing to write"
        )


@transaction.atomic
def _record(run: _Run, actor: Actor) -> SyncRun:
    record = run.run
    record.finished_at = timezone.now()
    if run.notes:
        record.message = "; ".join([record.message, *run.notes]) if record.message else "; ".join(run.notes)
    counts: dict[str, int] = {}
    for obj in run.objects:
        counts[obj.outcome] = counts.get(obj.outcome, 0) + 1
    record.counts = {**dict(sorted(counts.items())), **record.counts}
    record.save()
    SyncObject.objects.bulk_create(run.objects, batch_size=1000)
    if run.usage is not None:
        _record_usage(record.cluster, run.usage, record.started_at)
    if run.count(SyncOutcome.CREATED, SyncOutcome.UPDATED, SyncOutcome.DELETED):
        audit_write(
            [
                audit_event(
                    actor=actor,
                    action="cluster_sync",
                    obj_type="cluster",
                    obj_id=record.cluster_id,
                    obj_repr=record.cluster.name,
                    before=None,
                    after={"run": record.pk, "status": record.status, "counts": record.counts},
                    reason=record.reason,
                )
            ]
        )
    return record
