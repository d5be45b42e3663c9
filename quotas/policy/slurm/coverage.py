"""Which quota terms, contract terms and tier rules a Slurm cluster enforces, and how — or why it cannot.

The same report as :func:`quotas.policy.kueue.coverage.kueue_coverage`, for the objects
:func:`.translate.compile_slurm` writes and the snapshot ``job_submit.lua`` reads. Where the cluster's
subtree ceilings are permissive, every subtree that may hold more than its ceiling is one line.
"""

from __future__ import annotations

from ..contracts import check_promises
from ..coverage import CoverageLine, How
from ..durations import format_duration
from ..snapshot import OrgSnapshot
from .model import SlurmState
from .overcommit import subtree_overcommit
from .translate import SlurmTarget


def slurm_coverage(snapshot: OrgSnapshot, state: SlurmState, target: SlurmTarget) -> list[CoverageLine]:
    flavors = {f.key for f in target.flavors}
    if target.strict:
        subtree = CoverageLine(
            "quota",
            "subtree ceiling",
            "strict",
            How.SLURM,
            "Slurm's QOS limits do not nest, so each parent's burst is split among the burst QOS of its "
            "subtree when compiling: no subtree can hold more than its ceiling, and a unit cannot borrow "
            "the part of its parent's burst given to a sibling",
        )
    else:
        subtree = CoverageLine(
            "quota",
            "subtree ceiling",
            "permissive",
            How.NOT_ENFORCED,
            "every unit's burst QOS holds its whole burst, and Slurm's QOS limits do not nest: a subtree may "
            "hold up to the sum of its QOS (listed below where that is above its ceiling)",
        )
    lines = [
        CoverageLine(
            "quota",
            "guarantee",
            "per unit and GPU type",
            How.SLURM,
            "QOS guar-<account> GrpTRES=gres/gpu:<type> (the part its children do not hold), and gres/gpu "
            "(untyped) at their total; reclaimed by preemption: every guarantee QOS lists every burst QOS in Preempt=",
        ),
        CoverageLine(
            "quota",
            "burst",
            "per unit and GPU type",
            How.SLURM,
            "QOS burst-<account> GrpTRES=gres/gpu:<type> and gres/gpu at their total, low priority, "
            "PreemptMode=requeue",
        ),
        subtree,
        CoverageLine(
            "quota",
            "per-job ceiling",
            "per account and GPU type",
            How.JOB_SUBMIT,
            "job_submit.lua refuses a job asking for more GPUs than its account can ever hold (every "
            "--gres / --gpus* form counted), accounts Allot does not know and QOS the account may not use",
        ),
        CoverageLine(
            "quota",
            "lendable",
            "per unit and GPU type",
            How.NOT_ENFORCED,
            "Slurm has no lending limit: burst QOS borrow any idle GPU of the partition",
        ),
        CoverageLine(
            "quota",
            "fair-share weight",
            "per unit",
            How.SLURM,
            "Fairshare= on each account (priority/multifactor); it orders the queue, it caps nothing",
        ),
    ]
    for flavor in sorted((f for f in target.flavors if f.profiles), key=lambda f: f.gpu_type):
        types = ", ".join(g for g, _ in flavor.types)
        lines += [
            CoverageLine(
                f"flavor {flavor.gpu_type}",
                "MIG slices, each profile",
                types,
                How.SLURM,
                "each profile is a GPU type of its own: the guarantee and burst QOS hold it to the whole slices the "
                "unit's GPU-equivalents hold of that profile alone; TRESBillingWeights charge each its weight",
            ),
            CoverageLine(
                f"flavor {flavor.gpu_type}",
                "MIG slices, by weight",
                "per job",
                How.JOB_SUBMIT,
                "job_submit.lua adds a job's slices up by weight against its account's GPU-equivalents; Slurm has "
                "no GRES counted by weight, so jobs of different profiles running together are not held to the "
                "equivalents by anything (each profile only to its own limit)",
            ),
        ]
    lines += [
        CoverageLine(
            f"unit {o.path}",
            "subtree ceiling",
            f"its QOS add up to {o.usable} {o.gpu_type.upper()} GPUs, ceiling {o.ceiling}",
            How.NOT_ENFORCED,
            "permissive subtree ceilings: the subtree may hold up to its QOS' sum",
        )
        for o in ([] if target.strict else subtree_overcommit(snapshot, state, target))
    ]
    contract_at = {u.path: u.contract for u in snapshot.units.values()}  # a violation names where the contract is set
    broken = {(v.unit, v.flavor): v for v in check_promises(snapshot) if v.flavor in flavors}
    for name in sorted(snapshot.contracts):
        c = snapshot.contracts[name]
        subject = f"contract {name}"
        promise = [v for v in broken.values() if contract_at.get(v.unit or "") == name]
        lines.append(
            CoverageLine(
                subject,
                "promise vs worst-case borrower",
                "holds" if not promise else f"broken on {len(promise)} unit(s) × flavor",
                How.SLURM if not promise else How.NOT_ENFORCED,
                "the owner waits as long as the borrower's protection (its min run window + grace + exit + a "
                "scheduling pass): "
                + ("every borrower yields within the promise" if not promise else promise[0].message),
            )
        )
        lines += [
            CoverageLine(
                subject,
                "reclaim_within",
                format_duration(c.reclaim_within_s),
                How.MONITORED,
                "Slurm preempts at its next scheduling pass (sched_interval) after the grace time: Allot "
                "measures reclaim times and reports contracts not honoured",
            ),
            CoverageLine(
                subject,
                "grace_period",
                format_duration(c.grace_period_s),
                How.SLURM,
                "GraceTime on the burst QOS (preempted jobs get SIGTERM, then SIGKILL after it)",
            ),
            CoverageLine(
                subject,
                "min_run_window",
                format_duration(c.min_run_window_s),
                How.SLURM,
                "PreemptExemptTime on the burst QOS",
            ),
            CoverageLine(
                subject,
                "checkpoint_every",
                format_duration(c.checkpoint_every_s) if c.checkpoint_every_s else "not required",
                How.NOT_ENFORCED,
                "a batch script cannot declare a checkpoint cadence to Slurm",
            ),
        ]
    max_wall = {q.name: q.max_wall_min for q in state.qos if q.max_wall_min}
    for name in sorted(snapshot.tiers):
        t = snapshot.tiers[name]
        subject = f"tier {name}"
        if t.max_runtime_s is not None:
            qos = f"tier-{name.lower()}"
            lines.append(
                CoverageLine(
                    subject,
                    "max runtime",
                    format_duration(t.max_runtime_s),
                    How.SLURM if qos in max_wall else How.NOT_ENFORCED,
                    f"QOS {qos} MaxWall={max_wall.get(qos)} min with Flags=DenyOnLimit (refused at submission); "
                    "job_submit.lua also caps interactive jobs' time limit",
                )
            )
        lines.append(
            CoverageLine(
                subject,
                "priority",
                str(t.priority),
                How.NOT_ENFORCED,
                "Slurm orders by QOS (guarantee before burst) and fair-share, not by Allot's tiers",
            )
        )
    return lines
