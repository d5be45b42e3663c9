"""The validation rules. Each check reads a ``Review`` and returns the denials it finds (empty: fine).

Every denial says which rule, the numbers, and what to do. ``decide`` runs them in order; the first
denial is the answer, and an UPDATE compares the whole list with the old object's (see decide.py).
The review and decision types are in .review, the device checks in .device_checks."""

from __future__ import annotations

from quotas.policy.durations import DurationError, format_duration, parse_duration
from quotas.policy.labels import LABEL_CONTRACT, LABEL_OWNER, LABEL_PROJECT, LABEL_TIER

from .device_checks import devices, may_use
from .model import ANNOTATION_CHECKPOINT, LABEL_MAX_EXEC
from .review import KUBERNETES_DEFAULT_GRACE_S, MAX_WARNING, RUNTIME_FIELDS, Check, Decision, Reason, Review


def _said(value: object) -> str:
    """A field's value in a message: ``'x'``, or ``missing`` (never Python's ``None``)."""
    return "missing" if value is None or value == "" else repr(value)


def labels(r: Review) -> list[Decision]:
    rule, lab = r.rule, r.labels
    missing = [k for k in (LABEL_OWNER, LABEL_PROJECT, LABEL_TIER) if not lab.get(k)]  # a Workload's too
    if rule.contract and not lab.get(LABEL_CONTRACT):
        missing.append(LABEL_CONTRACT)
    found = []
    if missing:  # reported with every other label problem, so an UPDATE is judged violation by violation
        found.append(
            r.deny(
                Reason.MISSING_LABEL,
                f"label {', '.join(missing)} missing: every workload in {rule.namespace} "
                f"says who owns it, its project, tier and contract "
                f"(e.g. {LABEL_TIER}={rule.default_tier or 'P3'}, {LABEL_CONTRACT}={rule.contract or 'none'})",
            )
        )
    owner, project, tier = lab.get(LABEL_OWNER), lab.get(LABEL_PROJECT), r.tier_name()
    if owner and rule.owners and owner not in rule.owners:
        found.append(
            r.deny(
                Reason.UNKNOWN_OWNER,
                f"owner {owner!r} is not a member of {rule.unit_path}: ask "
                f"{rule.lead or 'its lead'} to add you in Allot",
            )
        )
    if project and project not in rule.projects:
        known = ", ".join(sorted(p for p in rule.projects if "/" not in p))
        found.append(
            r.deny(
                Reason.UNKNOWN_PROJECT,
                f"project {project!r} is not {rule.unit_path} or one of its projects; use one of: {known}",
            )
        )
    if tier and tier not in rule.tiers:
        allowed = ", ".join(sorted(rule.tiers)) or "none"
        found.append(
            r.deny(
                Reason.TIER_NOT_ALLOWED,
                f"tier {tier!r} is not allowed for {rule.unit_path}; allowed: {allowed}"
                + (f" (to allow another, ask {rule.lead})" if rule.lead else ""),
            )
        )
    contract = lab.get(LABEL_CONTRACT)
    if rule.contract and contract and contract != rule.contract:
        found.append(
            r.deny(
                Reason.WRONG_CONTRACT,
                f"contract {contract!r} does not apply to {rule.unit_path}: set {LABEL_CONTRACT}={rule.contract}",
            )
        )
    return found


def queue_and_priority(r: Review) -> list[Decision]:
    rule, tier = r.rule, r.tier()
    found = []
    queue = r.queue()
    if queue != rule.queue:
        field_name = "spec.queueName" if r.is_workload else "label kueue.x-k8s.io/queue-name"
        found.append(
            r.deny(
                Reason.WRONG_QUEUE,
                f"{field_name} is {_said(queue)}; workloads in {rule.namespace} go to LocalQueue {rule.queue!r}",
            )
        )
    if tier is None:
        return found
    cls = r.priority_class()
    if cls != tier.priority_class:
        field_name = (
            "spec.priorityClassName"
            if r.is_v1beta1_workload
            else "spec.priorityClassRef"
            if r.is_workload
            else "label kueue.x-k8s.io/priority-class"
        )
        found.append(
            r.deny(
                Reason.WRONG_PRIORITY_CLASS,
                f"{field_name} is {_said(cls)}; tier {tier.name} runs at {tier.priority_class!r}",
            )
        )
    priority = r.spec.get("priority") if r.is_workload else None
    if isinstance(priority, int) and priority > tier.priority:
        found.append(
            r.deny(
                Reason.WRONG_PRIORITY_CLASS,
                f"spec.priority {priority} is above tier {tier.name}'s {tier.priority}: "
                f"remove it (Kueue sets it from the priority class)",
            )
        )
    return found


def runtime(r: Review) -> list[Decision]:
    tier = r.tier()
    if tier is None or tier.max_runtime_s is None:
        return []
    value = r.runtime_s()
    limit = format_duration(tier.max_runtime_s)
    if value is None or value <= 0:
        own = RUNTIME_FIELDS.get(r.kind)
        where = (
            own
            if r.is_workload
            else (f"{own} or label {LABEL_MAX_EXEC}" if own else f"label {LABEL_MAX_EXEC} ({r.kind} has no field)")
        )
        return [
            r.deny(
                Reason.RUNTIME_REQUIRED,
                f"tier {tier.name} is limited to {limit}: set {where} (seconds, at most {tier.max_runtime_s})",
            )
        ]
    if value > tier.max_runtime_s:
        return [
            r.deny(
                Reason.RUNTIME_TOO_LONG,
                f"runtime {format_duration(value)} is above tier {tier.name}'s limit of {limit}: "
                f"shorten it or use a batch tier",
            )
        ]
    return []


def opportunistic(r: Review) -> list[Decision]:
    tier, rule = r.tier(), r.rule
    if tier is None or not tier.opportunistic:
        return []
    # every violation is found, none hides another: an UPDATE that mends one is judged on what is left, and the
    # grace period it did not change is no new violation (decide compares the lists)
    found = []
    raw = r.checkpoint()
    example = format_duration(rule.checkpoint_every_s or 900)
    every: int | None = None
    if raw is None:
        found.append(
            r.deny(
                Reason.CHECKPOINT_REQUIRED,
                f"tier {tier.name} runs on borrowed GPUs and can be reclaimed: declare how often it checkpoints "
                f"with annotation (or label) {ANNOTATION_CHECKPOINT}, e.g. {ANNOTATION_CHECKPOINT}={example}",
            )
        )
    else:
        try:
            every = parse_duration(raw)
        except DurationError:
            found.append(
                r.deny(
                    Reason.CHECKPOINT_REQUIRED,
                    f"{ANNOTATION_CHECKPOINT}={raw!r} is not a duration: write e.g. {example}",
                )
            )
    if every is not None and rule.checkpoint_every_s and (every <= 0 or every > rule.checkpoint_every_s):
        said = (
            f"{ANNOTATION_CHECKPOINT}={raw!r} says it never checkpoints"
            if every <= 0
            else f"checkpoints every {format_duration(every)}"
        )
        found.append(
            r.deny(
                Reason.CHECKPOINT_TOO_SLOW,
                f"{said}, but contract {rule.contract} needs at least every "
                f"{format_duration(rule.checkpoint_every_s)}: checkpoint that often and say so "
                f"(e.g. {ANNOTATION_CHECKPOINT}={format_duration(rule.checkpoint_every_s)})",
            )
        )
    if rule.grace_period_s is not None:
        for podset in r.sets:
            grace = podset.spec.get("terminationGracePeriodSeconds")
            chosen = isinstance(grace, int) and grace != KUBERNETES_DEFAULT_GRACE_S  # 30: the API server's default
            if not chosen and grace != rule.grace_period_s:
                # what the mutating webhook sets (it may not have run: its failurePolicy is Ignore)
                found.append(
                    r.deny(
                        Reason.GRACE_REQUIRED,
                        f"{podset.name}: terminationGracePeriodSeconds is "
                        f"{'unset' if grace is None else f'the API server default {grace}'}, but contract "
                        f"{rule.contract} gives opportunistic pods {rule.grace_period_s}: set "
                        f"terminationGracePeriodSeconds: {rule.grace_period_s} (Allot's mutating webhook sets it "
                        f"when it runs)",
                    )
                )
            if chosen and isinstance(grace, int) and grace > rule.grace_period_s:
                found.append(
                    r.deny(
                        Reason.GRACE_TOO_LONG,
                        f"{podset.name}: terminationGracePeriodSeconds {grace} is above contract {rule.contract}'s "
                        f"grace period of {rule.grace_period_s}: set it to at most {rule.grace_period_s} "
                        f"(or leave it out: Allot's mutating webhook then sets the contract's)",
                    )
                )
    return found


def budgets(r: Review) -> list[Decision]:
    """A spent ``deny`` budget (or a ``hold`` that spares a tier) over the unit refuses new workloads of
    its tiers that ask for devices which may land on its flavor; running ones are never touched."""
    tier = r.tier_name() or r.rule.default_tier
    found = []
    for budget in r.rule.budgets:
        if budget.stops and tier in budget.tiers and may_use(r, budget.flavor):
            found.append(
                r.deny(
                    Reason.BUDGET_SPENT,
                    f"{budget.unit_path} has spent its {budget.period} {budget.flavor} budget "
                    f"({budget.spent_h:,.0f} of {budget.allowance_h:,.0f} device-hours): new {tier} workloads "
                    f"asking for {budget.flavor} GPUs are refused until {budget.resets}, when it resets, or until "
                    "it is raised in Allot (a lead above can approve a change request)",
                )
            )
    return found


def budget_warnings(r: Review) -> list[str]:
    """An admission warning for each budget over the unit past its warn threshold that this workload
    would spend (admitted: a warning, not a denial)."""
    tier = r.tier_name() or r.rule.default_tier
    return [
        (
            f"{b.unit_path} spent {b.percent:.0f}% of its {b.flavor} budget "
            f"({b.spent_h:,.0f}/{b.allowance_h:,.0f} GPU-h; resets {b.resets})"
        )[:MAX_WARNING]
        for b in r.rule.budgets
        if b.warn and tier in b.tiers and may_use(r, b.flavor)
    ]


FULL: tuple[Check, ...] = (labels, queue_and_priority, devices, runtime, opportunistic, budgets)


OWNED: tuple[Check, ...] = (devices,)
