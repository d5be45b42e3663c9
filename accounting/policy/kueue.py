"""Following Kueue Workloads as they change: each observation of a Workload object folded into what is
known of it so far. Pure: dicts in, a ``WorkloadTrack`` out.

Why a track and not the object alone: a Workload keeps only the *last* transition of each condition,
and some Kueue versions drop what was admitted when it ends (v0.15.0–v0.15.2 set ``QuotaReserved`` and
``Admitted`` to False with reason ``Finished`` and remove ``status.admission``). So every run — from
``Admitted=True`` to the eviction, the end or the deletion that closed it — and every eviction is
recorded as it is seen, and what was admitted (flavor, devices) is remembered from the last
observation that showed it. Conditions read (kueue.x-k8s.io v1beta1 and v1beta2 alike):

* ``Admitted=True`` — a run starts at its lastTransitionTime (quota reserved *and* admission checks
  passed; a reservation alone holds quota, not devices);
* ``Evicted=True`` — an eviction, with its reason (``Preempted``, ``PodsReadyTimeout``,
  ``Deactivated``…), message and time; the run it interrupted ends then;
* ``Finished=True`` — the end: ``Succeeded`` or ``Failed``. Earlier releases leave ``Admitted=True``
  beside it (historical); ``Finished`` wins;
* ``status.schedulingStats.evictions`` — counts per reason: evictions that happened between two
  observations (a watch that dropped) are added from it, their time unknown.

When a first observation shows a Workload that already ran and stopped, its run is rebuilt from
``accumulatedPastExecutionTimeSeconds`` (v1beta1 spells it ``accumulatedPastExexcutionTimeSeconds``)
and marked ``reconstructed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from accounting.policy.equivalents import is_slice, workload_slices
from accounting.policy.kueue_ask import Ask, ask_of
from accounting.policy.sacct import EndState
from quotas.policy.quantity import parse_decimal_quantity
from quotas.policy.sharing import EQUIVALENTS

MULTIKUEUE_ORIGIN = "kueue.x-k8s.io/multikueue-origin"
"""The label MultiKueue puts on the Workloads it creates in a worker cluster (its value: the manager's
``multiKueue.origin``): such a Workload is the manager's copy, and its use is charged once, on the manager."""


LABEL_OWNER = "allot.dev/owner"
LABEL_PROJECT = "allot.dev/project"
LABEL_TIER = "allot.dev/tier"
EVICTED_STATES = {"Preempted": EndState.PREEMPTED}
"""Eviction reasons with their own end state while the Workload waits; any other reason is 'evicted'."""


class WorkloadError(ValueError):
    """An object that is not a Workload Allot can read: the message names the field."""


@dataclass(frozen=True)
class Condition:
    status: bool
    reason: str
    message: str
    at: datetime | None


@dataclass(frozen=True)
class Run:
    """One admitted interval: [start, end), end empty while it runs."""

    start: datetime
    end: datetime | None
    flavor: str
    devices: int
    ended_by: str = ""
    """What closed it: ``Finished``, an eviction reason, ``Deleted``, ``NoReservation``…"""
    reconstructed: bool = False


@dataclass(frozen=True)
class KueueEviction:
    reason: str
    at: datetime | None
    message: str = ""


@dataclass(frozen=True)
class WorkloadTrack:
    uid: str
    namespace: str
    name: str
    created: datetime | None
    queue: str = ""
    cluster_queue: str = ""
    owner: str = ""
    project: str = ""
    tier: str = ""
    flavor: str = ""
    devices: int = 0
    resources: Mapping[str, str] = field(default_factory=dict)
    runs: tuple[Run, ...] = ()
    evictions: tuple[KueueEviction, ...] = ()
    state: EndState = EndState.PENDING
    ended: datetime | None = None
    resource_version: str = ""
    quota_reserved: bool = False
    """QuotaReserved=True at the last observation (a Workload evicted with it still True holds quota
    while nothing runs: Kueue's stuck-reservation failure mode)."""
    notes: tuple[str, ...] = ()
    """What could not be known for sure (e.g. a run rebuilt from accumulated time)."""
    ask: Ask = field(default_factory=Ask)
    """What it asks for and Kueue's word on its wait (accounting.policy.kueue_ask)."""

    @property
    def admitted(self) -> datetime | None:
        return self.runs[0].start if self.runs else None

    @property
    def held_seconds(self) -> int:
        return int(sum(((r.end - r.start).total_seconds() for r in self.runs if r.end), 0.0))


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise WorkloadError(f"{value!r} is not an RFC 3339 time") from exc


def conditions(obj: Mapping[str, Any]) -> dict[str, Condition]:
    found: dict[str, Condition] = {}
    for raw in (obj.get("status") or {}).get("conditions") or []:
        if not isinstance(raw, Mapping) or not raw.get("type"):
            continue
        found[str(raw["type"])] = Condition(
            status=str(raw.get("status")) == "True",
            reason=str(raw.get("reason") or ""),
            message=str(raw.get("message") or ""),
            at=parse_time(raw.get("lastTransitionTime")),
        )
    return found


def admitted_devices(
    obj: Mapping[str, Any], accelerators: Mapping[str, str | None]
) -> tuple[str, int, dict[str, str]] | None:
    """(flavor of the accelerators, device count, every resource's total) from ``status.admission``;
    None when the object shows no admission. Several accelerator flavors: the one with most devices.
    Slices of a shared flavor (Kueue counts them in the currency ``EQUIVALENTS`` its transformation makes
    of them, or as themselves without one) count one device each, as the pod sets ask for them; their
    totals per resource are among the resources (accounting.policy.equivalents weighs them)."""
    admission = (obj.get("status") or {}).get("admission")
    if not isinstance(admission, Mapping):
        return None
    per_flavor: dict[str, int] = {}
    totals: dict[str, Decimal] = {}
    shared = ""
    for assignment in admission.get("podSetAssignments") or []:
        flavors = assignment.get("flavors") or {}
        for resource, quantity in (assignment.get("resourceUsage") or {}).items():
            try:
                amount = parse_decimal_quantity(str(quantity))
            except ValueError as exc:
                raise WorkloadError(f"status.admission podSetAssignments resourceUsage {resource}: {exc}") from exc
            totals[resource] = totals.get(resource, Decimal(0)) + amount
            if resource == EQUIVALENTS or is_slice(resource):
                shared = shared or str(flavors.get(resource) or "")
            elif resource in accelerators:
                flavor = accelerators[resource] or str(flavors.get(resource) or "")
                per_flavor[flavor] = per_flavor.get(flavor, 0) + int(amount)
    if shared:
        slices = workload_slices(obj)
        per_flavor[shared] = per_flavor.get(shared, 0) + sum(slices.values())
        totals.update((resource, Decimal(n)) for resource, n in slices.items())
    flavor = max(per_flavor, key=lambda f: per_flavor[f]) if per_flavor else ""
    return flavor, sum(per_flavor.values()), {k: format(v.normalize(), "f") for k, v in sorted(totals.items())}


def _accumulated(obj: Mapping[str, Any]) -> int:
    status = obj.get("status") or {}
    value = status.get("accumulatedPastExecutionTimeSeconds", status.get("accumulatedPastExexcutionTimeSeconds"))
    return int(value) if isinstance(value, int) and value > 0 else 0


def _stats_evictions(obj: Mapping[str, Any]) -> list[str]:
    reasons: list[str] = []
    for entry in ((obj.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []:
        count = entry.get("count")
        reasons += [str(entry.get("reason") or "Unknown")] * (count if isinstance(count, int) and count > 0 else 0)
    return reasons


def observe(
    previous: WorkloadTrack | None,
    obj: Mapping[str, Any],
    *,
    accelerators: Mapping[str, str | None],
    seen_at: datetime,
    deleted: bool = False,
) -> WorkloadTrack:
    """Fold one observation of a Workload (an object from a list or a watch event) into its track.
    ``deleted``: the watch said DELETED (a run still open ends at ``seen_at``, the Workload is gone)."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        raise WorkloadError("metadata.uid is missing: not a stored Workload")
    spec = obj.get("spec") or {}
    labels = meta.get("labels") or {}
    cond = conditions(obj)
    track = previous or WorkloadTrack(
        uid=uid, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), created=None
    )
    notes = list(track.notes)
    assigned = admitted_devices(obj, accelerators)
    flavor, devices, resources = (track.flavor, track.devices, dict(track.resources))
    if assigned is not None:
        flavor, devices, resources = assigned
    admission = (obj.get("status") or {}).get("admission") or {}
    admitted, finished, evicted = cond.get("Admitted"), cond.get("Finished"), cond.get("Evicted")
    is_finished = bool(finished and finished.status)
    since = admitted.at if admitted and admitted.status else None
    evicted_since = bool(evicted and evicted.status and evicted.at and since and evicted.at >= since)
    holding = since is not None and not is_finished and not evicted_since and not deleted

    evictions = list(track.evictions)
    if evicted and evicted.status and not any(e.at == evicted.at and e.reason == evicted.reason for e in evictions):
        evictions.append(KueueEviction(evicted.reason, evicted.at, evicted.message))
    missed = _stats_evictions(obj)
    for reason in missed[len(evictions) :]:
        evictions.append(KueueEviction(reason, None, "counted by schedulingStats; its time was not seen"))

    runs = list(track.runs)
    open_run = runs[-1] if runs and runs[-1].end is None else None
    if open_run and (not holding or (since and since > open_run.start)):
        if is_finished and finished and finished.at:
            end, by = finished.at, "Finished"
        elif evicted and evicted.status and evicted.at and evicted.at >= open_run.start:
            end, by = evicted.at, evicted.reason
        elif deleted:
            end, by = seen_at, "Deleted"
        elif since and since > open_run.start:
            end, by = since, "readmitted"  # the eviction between was not seen: ends by the new admission
            notes.append(f"a run ended unseen before {since.isoformat()}")
        elif admitted and not admitted.status and admitted.at:
            end, by = admitted.at, admitted.reason or "NoReservation"
        else:
            end, by = seen_at, "unseen"
        runs[-1] = replace(open_run, end=max(end, open_run.start), ended_by=by)
    if holding and since and (not runs or runs[-1].end is not None) and not any(r.start == since for r in runs):
        runs.append(Run(start=since, end=None, flavor=flavor, devices=devices))
    if not runs and not holding:
        runs += _reconstructed(obj, cond, flavor, devices, since, notes)

    state = _state(cond, holding, runs, evictions, deleted, spec)
    ended = None
    if is_finished and finished:
        ended = finished.at
    elif state in (EndState.CANCELLED, EndState.EVICTED):
        ended = runs[-1].end if runs else seen_at
    return WorkloadTrack(
        uid=uid,
        namespace=track.namespace or str(meta.get("namespace") or ""),
        name=track.name or str(meta.get("name") or ""),
        created=parse_time(meta.get("creationTimestamp")) or track.created,
        queue=str(spec.get("queueName") or track.queue),
        cluster_queue=str(admission.get("clusterQueue") or track.cluster_queue),
        owner=str(labels.get(LABEL_OWNER) or track.owner),
        project=str(labels.get(LABEL_PROJECT) or track.project),
        tier=str(labels.get(LABEL_TIER) or _priority_class(spec) or track.tier),
        flavor=flavor,
        devices=devices,
        resources=resources,
        runs=tuple(runs),
        evictions=tuple(evictions),
        state=state,
        ended=ended,
        resource_version=str(meta.get("resourceVersion") or track.resource_version),
        quota_reserved=bool(cond.get("QuotaReserved") and cond["QuotaReserved"].status)
        and not is_finished
        and not deleted,
        notes=tuple(dict.fromkeys(notes)),
        ask=ask_of(obj, accelerators, at=(cond["QuotaReserved"].at if "QuotaReserved" in cond else None)),
    )


def _priority_class(spec: Mapping[str, Any]) -> str:
    """The Workload's priority class: v1beta2's ``spec.priorityClassRef.name`` (a
    WorkloadPriorityClass), v1beta1's ``spec.priorityClassName``; the service maps it to its tier."""
    ref = spec.get("priorityClassRef")
    if isinstance(ref, Mapping) and ref.get("name"):
        return str(ref["name"])
    return str(spec.get("priorityClassName") or "")


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Workload's controller ownerReference (the job Kueue made it for), if it has one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("name") and ref.get("apiVersion"):
            return ref
    return None


def _reconstructed(
    obj: Mapping[str, Any],
    cond: Mapping[str, Condition],
    flavor: str,
    devices: int,
    since: datetime | None,
    notes: list[str],
) -> list[Run]:
    """The run of a Workload first seen after it stopped: from the historical ``Admitted=True`` to its
    end when the object still shows both, else the accumulated execution time before its end."""
    finished, evicted = cond.get("Finished"), cond.get("Evicted")
    stop = finished if finished and finished.status else evicted if evicted and evicted.status else None
    if stop is None or stop.at is None:
        return []
    by = "Finished" if stop is finished else stop.reason
    if since and since <= stop.at:
        return [Run(start=since, end=stop.at, flavor=flavor, devices=devices, ended_by=by)]
    seconds = _accumulated(obj)
    if not seconds:
        return []
    notes.append(f"run rebuilt from {seconds} s of accumulated execution time")
    start = stop.at - timedelta(seconds=seconds)
    return [Run(start=start, end=stop.at, flavor=flavor, devices=devices, ended_by=by, reconstructed=True)]


def _state(
    cond: Mapping[str, Condition],
    holding: bool,
    runs: list[Run],
    evictions: list[KueueEviction],
    deleted: bool,
    spec: Mapping[str, Any],
) -> EndState:
    finished = cond.get("Finished")
    if finished and finished.status:
        return EndState.FAILED if finished.reason == "Failed" else EndState.FINISHED
    if holding:
        return EndState.RUNNING
    if deleted:
        return EndState.CANCELLED
    if spec.get("active") is False:
        return EndState.EVICTED
    if evictions:
        requeued = cond.get("Requeued")
        last = evictions[-1].reason
        if last in EVICTED_STATES:
            return EVICTED_STATES[last]
        return EndState.REQUEUED if requeued and requeued.status else EndState.EVICTED
    return EndState.PENDING
