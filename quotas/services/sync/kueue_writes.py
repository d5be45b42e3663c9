"""A Kueue sync's writes: the server-side dry run of every create and update (steps 4 of
``quotas.services.sync.kueue``), then the writes in the plan's order (step 5), each object's outcome recorded on
the run with the API server's words and what to do about them.
"""

from __future__ import annotations

from quotas.integrations.kubernetes import ClusterCallError, KueueClient
from quotas.models import SyncMode, SyncOutcome, SyncStatus
from quotas.policy.kueue.diff import Action, ObjectPlan

from .run import RunRecord


def dry_run(run: RunRecord, client: KueueClient, plans: list[ObjectPlan], *, force: bool) -> list[ObjectPlan] | None:
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


def _advice(run: RunRecord, plan: ObjectPlan, error: ClusterCallError) -> str:
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
    # 409: a field Allot applies was changed out of band (a person's kubectl edit) — drift, with the server's
    # words and how to correct it; "conflict" is for another controller setting the quota (owners.py)
    return {409: SyncOutcome.DRIFT, 422: SyncOutcome.INVALID}.get(error.status, SyncOutcome.ERROR)


def apply_plans(run: RunRecord, client: KueueClient, plans: list[ObjectPlan], *, force: bool) -> None:
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
    failed = run.count(
        SyncOutcome.CONFLICT, SyncOutcome.DRIFT, SyncOutcome.INVALID, SyncOutcome.ERROR, SyncOutcome.NOT_OURS
    )
    written = run.count(SyncOutcome.CREATED, SyncOutcome.UPDATED, SyncOutcome.DELETED)
    if failed:
        run.run.status = SyncStatus.PARTIAL
        run.run.message = f"{failed} object(s) failed, {written} written; the next sync retries them"
    else:
        run.run.status = SyncStatus.APPLIED if written else SyncStatus.IN_SYNC
        run.run.message = f"{written} object(s) written" if written else "in sync: nothing to write"
