"""Which contract terms and tier rules a Kueue cluster enforces, and how — or why it cannot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..coverage import CoverageLine, How
from ..durations import format_duration
from ..quantity import parse_decimal_quantity
from ..sharing import EQUIVALENTS, GPU, MICRO
from ..snapshot import OrgSnapshot
from .target import ANNOTATION_UNIT

__all__ = ["CoverageLine", "How", "kueue_coverage"]


RECLAIM_MEANS = {
    "Any": "lent devices are taken back from every borrower, whatever its tier, when the owner asks within "
    "its guarantee",
    "LowerPriority": "lent devices are taken back only from borrowers of a lower tier: borrowers of the owner's "
    "tier or above keep them until they finish (the contract spares them; the guarantee is not promised back)",
    "Never": "lent devices are never taken back: they return only when borrowers finish (no reclaim promise)",
}
"""What each reclaimWithinCohort does to a guarantee (Kueue's ClusterQueue preemption semantics)."""


def _sharing_lines(sharing: str) -> list[CoverageLine]:
    """What Kueue does with the fair-share weights, by the cluster's sharing mode."""
    if sharing == "classic":
        return [
            CoverageLine(
                "quota",
                "fair-share weight",
                "per unit",
                How.NOT_ENFORCED,
                "classic preemption: Kueue ignores fairSharing.weight; unused quota goes first come, first served "
                "(set the cluster's sharing to fair or admission, and Kueue's configuration with it)",
            )
        ]
    lines = [
        CoverageLine(
            "quota",
            "fair-share weight",
            "per unit",
            How.KUEUE,
            "fairSharing.weight on each ClusterQueue and Cohort: borrowing and preemption by weighted share "
            "(weight 0: an infinite share, always last to borrow); needs fairSharing in Kueue's configuration",
        )
    ]
    if sharing == "admission":
        lines.append(
            CoverageLine(
                "quota",
                "fair-share half-life",
                "per cluster",
                How.KUEUE,
                "admissionScope UsageBasedAdmissionFairSharing on each ClusterQueue, each LocalQueue's weight, "
                "admissionFairSharing.usageHalfLifeTime in Kueue's configuration: queues take turns by decayed usage",
            )
        )
    return lines


OWN_WORK = (
    "its own ClusterQueue's nominalQuota is this part of its guarantee, the part its children do not hold: its own "
    "work there is never a reclaim's victim (Kueue preempts only queues above their nominal quota); beyond it, it "
    "borrows its children's idle guarantees, which a reclaim may take back — work run in a child's queue keeps "
    "that child's guarantee"
)


def own_work_lines(objects: Iterable[Mapping[str, Any]]) -> list[CoverageLine]:
    """For each unit with children that runs work of its own (a ClusterQueue named like its Cohort), per flavor:
    which part of its guarantee Kueue protects there (the queue's nominal quota) and up to what it borrows."""
    cohorts = {o["metadata"]["name"] for o in objects if o.get("kind") == "Cohort"}
    lines = []
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj.get("kind") != "ClusterQueue" or name not in cohorts:
            continue
        path = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_UNIT, name)
        for group in obj["spec"].get("resourceGroups") or ():
            for flavor in group.get("flavors") or ():
                for entry in flavor.get("resources") or ():
                    if entry["name"] not in (GPU, EQUIVALENTS):
                        continue
                    scale = MICRO if entry["name"] == EQUIVALENTS else 1
                    nominal = parse_decimal_quantity(str(entry.get("nominalQuota", 0))) / scale
                    borrowing = parse_decimal_quantity(str(entry.get("borrowingLimit", 0))) / scale
                    if not nominal and not borrowing:
                        continue
                    unit = "GPU-equivalents" if scale != 1 else "GPUs"
                    lines.append(
                        CoverageLine(
                            f"unit {path}",
                            f"own work on {flavor['name']}",
                            f"{nominal:g} {unit} protected, up to {nominal + borrowing:g} with borrowing",
                            How.KUEUE,
                            OWN_WORK,
                        )
                    )
    return lines


def kueue_coverage(
    snapshot: OrgSnapshot,
    *,
    sharing: str = "classic",
    shared: Sequence[str] = (),
    objects: Iterable[Mapping[str, Any]] = (),
) -> list[CoverageLine]:
    """``shared``: the names of the cluster's shared flavors (MIG, MPS, time-slicing); ``objects``: the cluster's
    compiled objects, for what each unit with children and work of its own has protected there."""
    lines = [
        CoverageLine(
            "quota",
            "guarantee",
            "per unit, flavor, resource",
            How.KUEUE,
            "ClusterQueue nominalQuota; reclaimed by preemption (preemption.reclaimWithinCohort)",
        ),
        CoverageLine(
            "quota",
            "burst",
            "per unit, flavor, resource",
            How.KUEUE,
            "borrowingLimit on the ClusterQueue (and on the Cohorts above it for the subtree)",
        ),
        CoverageLine("quota", "lendable", "per unit, flavor, resource", How.KUEUE, "lendingLimit"),
        *_sharing_lines(sharing),
        *own_work_lines(list(objects)),
        CoverageLine(
            "quota",
            "namespace binding",
            "per namespace",
            How.KUEUE,
            "LocalQueue per namespace; ClusterQueue namespaceSelector admits only bound namespaces",
        ),
    ]
    for flavor in sorted(shared):
        lines += [
            CoverageLine(
                f"flavor {flavor}",
                "slices by weight",
                "per unit, in GPU-equivalents",
                How.CONFIG,
                "the queues cover allot.dev/gpu-equivalent-millionths; Kueue's resources.transformations (the "
                "cluster's kueue-config) turn each slice into its weight — without them slices never fit",
            ),
            CoverageLine(
                f"flavor {flavor}",
                "slices it offers",
                "per pod",
                How.WEBHOOK,
                "a profile the flavor does not offer is refused with those it does; an unpinned slice is pinned to "
                "the flavor's nodes (one currency for every shared flavor)",
            ),
        ]
    for name in sorted(snapshot.contracts):
        c = snapshot.contracts[name]
        subject = f"contract {name}"
        lines += [
            CoverageLine(
                subject,
                "reclaim_within",
                format_duration(c.reclaim_within_s),
                How.MONITORED,
                "Kueue has no reclaim deadline: Allot measures reclaim times and reports contracts not honoured",
            ),
            CoverageLine(
                subject,
                "grace_period",
                format_duration(c.grace_period_s),
                How.WEBHOOK,
                "not in Kueue's API: the mutating webhook sets terminationGracePeriodSeconds on opportunistic pods",
            ),
            CoverageLine(
                subject,
                "min_run_window",
                format_duration(c.min_run_window_s),
                How.MONITORED,
                "not expressible in Kueue today (open proposal): preemptions before it are reported",
            ),
            CoverageLine(
                subject,
                "checkpoint_every",
                format_duration(c.checkpoint_every_s) if c.checkpoint_every_s else "not required",
                How.WEBHOOK,
                "the validating webhook requires opportunistic work to declare a cadence within it",
            ),
            CoverageLine(
                subject,
                "preemption",
                f"reclaimWithinCohort={c.reclaim_within_cohort}, withinClusterQueue={c.within_cluster_queue}",
                How.KUEUE if c.reclaim_within_cohort == "Any" else How.NOT_ENFORCED,
                "ClusterQueue spec.preemption: " + RECLAIM_MEANS.get(c.reclaim_within_cohort, "as Kueue defines it"),
            ),
        ]
    for name in sorted(snapshot.tiers):
        t = snapshot.tiers[name]
        subject = f"tier {name}"
        lines.append(
            CoverageLine(
                subject,
                "priority",
                str(t.priority),
                How.KUEUE,
                f"WorkloadPriorityClass allot-{name.lower()}; the webhook sets it from the tier",
            )
        )
        if t.max_runtime_s is not None:
            lines.append(
                CoverageLine(
                    subject,
                    "max runtime",
                    format_duration(t.max_runtime_s),
                    How.WEBHOOK,
                    "the webhook requires activeDeadlineSeconds or kueue.x-k8s.io/max-exec-time-seconds within it",
                )
            )
        if t.preemptible:
            lines.append(
                CoverageLine(
                    subject,
                    "preemptible",
                    "yes",
                    How.KUEUE,
                    "lower priority value: preempted first when guarantees are reclaimed",
                )
            )
    return lines
