"""Which contract terms and tier rules a Kueue cluster enforces, and how — or why it cannot."""

from __future__ import annotations

from collections.abc import Sequence

from ..coverage import CoverageLine, How
from ..durations import format_duration
from ..snapshot import OrgSnapshot

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


def kueue_coverage(
    snapshot: OrgSnapshot, *, sharing: str = "classic", shared: Sequence[str] = ()
) -> list[CoverageLine]:
    """``shared``: the names of the cluster's shared flavors (MIG, MPS, time-slicing)."""
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
