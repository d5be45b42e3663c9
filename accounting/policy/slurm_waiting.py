"""Why a Slurm job waits (issue #44): ``squeue``'s one reason (``QOSGrpGRES``, ``MaxGRESPerAccount``,
``AssocGrpGRES``, ``Priority``, ``Resources``…) read against Allot's mapping of the tree onto Slurm — a unit's
guarantee is QOS ``guar-<account>`` (its residual beyond its children), its burst QOS ``burst-<account>``
(quotas/policy/slurm/translate.py) — and the live queue, in the same terms as a Kueue Workload's
(accounting.policy.waiting): the scheduler's reason first, in Allot's words with the jobs named, then what
the tree and the queue say, and the ways out (another QOS where it has room, a smaller request, waiting
for named work). Pure: squeue's text and the org snapshot in, an ``Explanation`` out.

Slurm shows "only the reason that was encountered" (its squeue man page); the ranks here follow it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, tzinfo

from accounting.policy.kueue_ask import Ask
from accounting.policy.waiting import Cause, Explanation, Holding, LiveView, Pending, WayOut, explain
from quotas.policy.snapshot import OrgSnapshot

FORMAT = "%i|%j|%u|%a|%q|%T|%r|%b|%D|%V|%Q"
"""``squeue -h -o FORMAT``, the form read before :data:`FIELDS` (still parsed): id, name, user, account, QOS, state,
reason, tres-per-node (``%b``: N/A for ``--gpus``, ``--gpus-per-task`` and ``--gpus-per-socket``), nodes, submit
time, priority."""
FIELDS = (
    "JobID", "UserName", "Account", "QOS", "State", "Reason", "tres-per-job", "tres-per-task", "tres-per-socket",
    "tres-per-node", "NumNodes", "NumTasks", "Sockets", "SubmitTime", "PriorityLong", "Name",
)  # fmt: skip
"""``squeue -h -O "JobID:|,…"``: every field a GPU request can be in (``--gpus`` is tres-per-job, ``--gpus-per-task``
tres-per-task, ``--gpus-per-socket`` tres-per-socket, ``--gres``/``--gpus-per-node`` tres-per-node), with the counts
they multiply by, the submit time and the multifactor priority (the order the scheduler takes pending jobs in);
the name last, since it may hold the separator."""
PER_NODE = re.compile(r"gres[:/]gpu(?::([A-Za-z][\w.-]*))?[:=](\d+)")
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD")


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    name: str
    user: str
    account: str
    qos: str
    state: str
    reason: str
    gpu_type: str | None
    per_node: int
    nodes: int
    submitted: datetime | None
    priority: int | None = None
    gpus: int | None = None
    """Every GPU the job asks for, counted as job_submit.lua counts them (per job, per task × tasks, per socket ×
    sockets × nodes, per node × nodes); None: read from tres-per-node alone (the older squeue form)."""

    @property
    def devices(self) -> int:
        return self.per_node * self.nodes if self.gpus is None else self.gpus


def _submitted(text: str, zone: tzinfo) -> datetime | None:
    try:
        submitted = datetime.fromisoformat(text) if text not in ("", "N/A", "Unknown") else None
    except ValueError:
        return None
    if submitted is not None and submitted.tzinfo is None:
        submitted = submitted.replace(tzinfo=zone)  # squeue prints local time (ALLOT_SLURM_TIMEZONE)
    return submitted


def _count(text: str) -> int:
    """A count squeue prints (``*`` or N/A where unset: 1)."""
    return max(1, int(text)) if text.isdigit() else 1


def _fields(line: str, zone: tzinfo) -> QueuedJob | None:
    """One line of ``squeue -h -O`` with :data:`FIELDS`, each ended by ``|``; the GPUs counted as job_submit.lua
    counts them (the first typed form names the type)."""
    parts = line.split("|")
    if len(parts) < len(FIELDS) + 1 or not parts[0][:1].isdigit():
        return None
    head = dict(zip(FIELDS[:-1], parts[: len(FIELDS) - 1], strict=True))
    name = "|".join(parts[len(FIELDS) - 1 : -1])
    nodes, tasks, sockets = _count(head["NumNodes"]), _count(head["NumTasks"]), _count(head["Sockets"])
    times = {"tres-per-job": 1, "tres-per-task": tasks, "tres-per-socket": sockets * nodes, "tres-per-node": nodes}
    gpus, gpu_type = 0, None
    for field, factor in times.items():
        for match in PER_NODE.finditer(head[field]):
            gpus += int(match.group(2)) * factor
            gpu_type = gpu_type or match.group(1)
    return QueuedJob(
        head["JobID"], name, head["UserName"], head["Account"], head["QOS"], head["State"], head["Reason"], gpu_type,
        -(-gpus // nodes), nodes, _submitted(head["SubmitTime"], zone),
        int(head["PriorityLong"]) if head["PriorityLong"].isdigit() else None, gpus,
    )  # fmt: skip


def parse_squeue(text: str, zone: tzinfo = UTC) -> list[QueuedJob]:
    """Lines of ``squeue -h -O`` with :data:`FIELDS` (each field ended by ``|``), or of the older ``squeue -h -o
    FORMAT`` (``-M`` adds ``CLUSTER:`` lines, a header starts ``JobID``: both skipped; there the first 8 fields are
    enough, then one node, submit time and priority unknown). Jobs without GPUs are kept with 0 devices."""
    found = []
    for line in text.splitlines():
        if line.count("|") >= len(FIELDS):
            job = _fields(line.strip(), zone)
            if job is not None:
                found.append(job)
            continue
        parts = [*line.strip().split("|"), "", "", ""]
        if len(parts) < 11 or not parts[0][:1].isdigit():
            continue
        match = PER_NODE.search(parts[7])
        nodes = max(1, int(parts[8])) if parts[8].isdigit() else 1
        found.append(
            QueuedJob(
                parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6],
                match.group(1) if match else None, int(match.group(2)) if match else 0, nodes,
                _submitted(parts[9], zone), int(parts[10]) if parts[10].isdigit() else None,
            )
        )  # fmt: skip
    return found


@dataclass(frozen=True)
class SlurmMaps:
    cluster: str
    units: Mapping[str, int]
    """Account → unit id."""
    paths: Mapping[int, str]
    flavors: Mapping[str, str]
    """GRES type → flavor key; an untyped request goes to ``default_flavor``."""
    default_flavor: str
    qos_prefix: str = ""

    def flavor(self, job: QueuedJob) -> str:
        return self.flavors.get(job.gpu_type or "", self.default_flavor) if job.gpu_type else self.default_flavor

    def borrowing(self, job: QueuedJob) -> bool:
        """A burst QOS: Allot's ``burst-<account>``, or a site's shared ``burst``."""
        return job.qos == f"{self.qos_prefix}burst" or job.qos.startswith(f"{self.qos_prefix}burst-")


def slurm_view(jobs: list[QueuedJob], maps: SlurmMaps, observed_at: datetime | None) -> LiveView:
    holding, pending = [], []
    for job in jobs:
        unit = maps.units.get(job.account)
        if job.state == "RUNNING" and job.devices:
            borrowed = job.devices if maps.borrowing(job) else 0
            holding.append(
                Holding(
                    f"job {job.job_id} ({job.name})",
                    unit,
                    maps.paths.get(unit or 0, ""),
                    job.user,
                    job.qos,
                    maps.flavor(job),
                    job.devices,
                    borrowed,
                )
            )
        elif job.state in WAITING:
            pending.append(pending_of(job, maps))
    return LiveView(
        maps.cluster, observed_at, tuple(dict.fromkeys(maps.flavors.values())), tuple(holding), tuple(pending)
    )


def pending_of(job: QueuedJob, maps: SlurmMaps) -> Pending:
    ask = Ask(pods=job.nodes, per_pod=job.per_node, devices=job.devices, job=f"job/{job.job_id}", reason=job.reason)
    flavor = maps.flavor(job)
    return Pending(
        f"job {job.job_id} ({job.name})",
        maps.units.get(job.account),
        job.user,
        job.qos,
        job.qos,
        job.submitted,
        ask,
        (flavor,) if job.gpu_type or flavor else None,
    )


def explain_slurm(
    snapshot: OrgSnapshot,
    view: LiveView,
    job: QueuedJob,
    maps: SlurmMaps,
    *,
    now: datetime,
    queue: Sequence[QueuedJob] = (),
) -> Explanation:
    """``queue``: squeue's jobs (with their priorities), to name the ones ranked above a job pending for
    ``Priority``."""
    target = pending_of(job, maps)
    base = explain(snapshot, view, target, now=now)
    flavor = maps.flavor(job)
    mine = [h for h in view.holding if h.unit_id == target.unit_id and h.flavor == flavor]
    in_qos = [h for h in mine if h.tier == job.qos]
    reclaim = next((c for c in base.causes if c.code == "reclaim"), None)
    account = job.account
    burst = f"{maps.qos_prefix}burst-{account}"
    room = base.room.get(flavor, {})
    reason = job.reason
    said: Cause | None = None
    ways: list[WayOut] = []
    if reason == "QOSGrpGRES" and not maps.borrowing(job):
        said = Cause(
            "guarantee-qos",
            f"its guarantee QOS {job.qos} is full: {_named(in_qos)} hold it",
            (f"Slurm: {reason} (the GrpTRES of {job.qos}: what {account} guarantees beyond its children)",),
            88,
        )
        if room.get("room", 0) >= job.devices:
            ways.append(
                WayOut(
                    "other-qos", f"submit it with --qos={burst}: it may borrow {room['room']} now", job.devices, flavor
                )
            )
    elif reason in ("QOSGrpGRES", "MaxGRESPerAccount") and maps.borrowing(job):
        said = Cause(
            "borrowing-limit",
            f"its burst QOS {job.qos} is at its cap: {_named(in_qos)} borrow it",
            (f"Slurm: {reason}",),
            88,
        )
    elif "Minutes" in reason and reason.startswith(("QOSGrp", "AssocGrp")):
        said = Cause(
            "budget",
            f"the GPU-hour budget on {job.qos} is spent ({reason})",
            ("until the period resets, or a budget raise",),
            95,
        )
    elif reason.startswith(("AssocGrp", "AssocMax")):
        said = Cause(
            "association-limit",
            f"a limit on account {account} or an account above it: {reason}",
            (
                f"Slurm: {reason}. Allot sets no limit on accounts (its GPU limits are the QOS guar-/burst-, "
                "which take precedence over an account's GPU limit): a limit set in Slurm outside Allot — "
                f"sacctmgr show assoc where account={account} format=Account,User,GrpTRES,GrpJobs,MaxTRES,MaxJobs "
                "names it",
                f"its running jobs on account {account}: {_named(mine)}",
            ),
            86,
        )
        if mine:
            ways.append(WayOut("wait-finish", f"wait for its running jobs to finish: {_named(mine)}", job.devices))
        ways.append(WayOut("ask", "ask the Slurm administrators to lift or remove the account's limit", None))
    elif reason == "Resources" and reclaim is not None:  # inside its guarantee, lent: Slurm preempts for it
        said = replace(
            reclaim,
            title=f"{reclaim.title}: Slurm preempts the borrowers' burst jobs once their grace time is over",
            evidence=(*reclaim.evidence, f"Slurm: {reason}"),
            rank=max(reclaim.rank, 70),
        )
    elif reason == "Resources":
        others = [h for h in view.holding if h.flavor == flavor]
        said = Cause(
            "flavor-full", f"no free GPUs on {flavor} for it now: {_named(others)} hold them", (f"Slurm: {reason}",), 70
        )
    elif reason == "Priority":
        ahead = _ranked_above(job, [j for j in queue if j.state in WAITING and maps.flavor(j) == flavor])
        said = Cause(
            "queue",
            f"{len(ahead)} pending jobs on {flavor} rank above it"
            + (f" (its priority {job.priority})" if job.priority is not None else ""),
            (
                ", ".join(_ranked_name(j) for j in ahead[:5])
                + (f" and {len(ahead) - 5} more" if len(ahead) > 5 else ""),
                f"sprio -l -j {job.job_id} shows its factors (fair-share, QOS, age)",
            ),
            60,
        )
        if ahead:
            needed = sum(j.devices for j in ahead)
            ways.append(
                WayOut("wait-queue", f"wait for the {len(ahead)} ranked above it ({needed} GPUs) to start", job.devices)
            )
    elif reason not in ("", "None"):
        said = Cause("scheduler", f"Slurm holds it: {reason}", (), 50)
    causes = [c for c in base.causes if c.code not in ("scheduling",) and (said is None or c.code != said.code)]
    if said is not None:
        causes.insert(0, said)
    return replace(
        base, causes=tuple(causes), ways_out=tuple(ways) + base.ways_out, scheduler_says=f"{job.state} ({reason})"
    )


def _ranked_above(job: QueuedJob, pending: list[QueuedJob]) -> list[QueuedJob]:
    """The pending jobs the scheduler takes before ``job``: a higher priority (squeue's ``%Q``), or an equal
    one submitted earlier; without priorities, the older ones."""
    far = datetime.max.replace(tzinfo=UTC)

    def rank(j: QueuedJob) -> tuple[int, datetime, int]:
        return (-(j.priority or 0), j.submitted or far, int(j.job_id) if j.job_id.isdigit() else 0)

    return sorted((j for j in pending if j.job_id != job.job_id and rank(j) < rank(job)), key=rank)


def _ranked_name(job: QueuedJob) -> str:
    priority = f"priority {job.priority}" if job.priority is not None else "priority unknown"
    return f"job {job.job_id} ({job.name}) ({job.devices} GPUs, {job.account}, {priority})"


def _named(items: list[Holding]) -> str:
    shown = ", ".join(f"{h.name} ({h.devices} GPUs, {h.owner})" for h in items[:4])
    return shown + (f" and {len(items) - 4} more" if len(items) > 4 else "") if shown else "no running job of its own"
