"""Celery tasks of the quotas app: take ids, load, call one function, idempotent."""

from __future__ import annotations

import logging

from celery import shared_task

from quotas.policy.invariants import validate_tree
from quotas.selectors import org_snapshot

log = logging.getLogger(__name__)


@shared_task(name="quotas.tasks.policy_check")
def policy_check() -> dict[str, int]:
    """Validate the whole tree (hourly, from beat). Services refuse bad edits, so violations here
    mean something changed outside Allot (e.g. a database restore) and are logged as errors."""
    snapshot = org_snapshot()
    problems = validate_tree(snapshot)
    for problem in problems:
        log.error("policy violation %s: %s", problem.code, problem.message)
    return {"units": len(snapshot.units), "quotas": len(snapshot.quotas), "violations": len(problems)}
