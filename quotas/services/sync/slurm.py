"""Slurm: accounts, user associations and QOS through sacctmgr (see :func:`slurm_sync`)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from quotas.integrations.slurm import Sacctmgr, SlurmError
from quotas.models import (
    Cluster,
    DriftPolicy,
    SyncMode,
    SyncOutcome,
    SyncRun,
    SyncStatus,
)
from quotas.policy.slurm.batch import Step as SlurmStep
from quotas.policy.slurm.batch import batch as slurm_batch
from quotas.policy.slurm.diff import Command as SlurmCommand
from quotas.policy.slurm.diff import plan_slurm
from quotas.policy.slurm.holdback import check_tres, hold_back
from quotas.policy.slurm.translate import compile_slurm
from quotas.selectors import org_snapshot, policy_revision, slurm_target

from ..audit import Actor, require_reason
from ..budget_sync import budget_notes, slurm_resets
from .run import RunRecord, record_run


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
    run = RunRecord(
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
    return record_run(run, actor)


def _plan_slurm(desired: Any, runner: Sacctmgr) -> tuple[list[SlurmCommand], list[Any]]:
    accounts, users, qos, descriptions, elsewhere = runner.read_state(desired.cluster)
    return plan_slurm(desired, accounts, users, qos, descriptions=descriptions, elsewhere=elsewhere)


def _call_text(step: SlurmStep) -> str:
    return "sacctmgr -i " + " ".join(step.argv if not step.load else ("load", "file=<the partial dump below>"))


def _report_slurm_plan(run: RunRecord, steps: list[SlurmStep], *, drift: bool) -> None:
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


def _apply_slurm(run: RunRecord, runner: Sacctmgr, steps: list[SlurmStep]) -> None:
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
