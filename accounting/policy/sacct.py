"""Reading ``sacct --parsable2 --noheader --allocations --duplicates`` output: one job allocation per
line, a requeued job once per run. Pure: text in, records and line problems out.

Allot asks for the fields in ``FIELDS`` (``sacct -o`` takes them in that order). GPUs come from
``AllocTRES`` (``gres/gpu:<type>=N`` when typed, else ``gres/gpu=N``: never both counted); a job that
never started has none. Times are the controller's local time; the caller says which zone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from enum import StrEnum
from functools import cached_property

FIELDS = (
    "JobIDRaw",
    "DBIndex",
    "Cluster",
    "Account",
    "User",
    "QOS",
    "Partition",
    "State",
    "Submit",
    "Start",
    "End",
    "AllocTRES",
    "ExitCode",
)
SACCT_FORMAT = ",".join(FIELDS)
GPU_TRES = re.compile(r"^gres/gpu(?::(?P<type>[^=]+))?=(?P<count>\d+)$")


class EndState(StrEnum):
    """How a workload ended (or where it is), the same words for Slurm and Kueue."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    EVICTED = "evicted"


SLURM_STATES = {
    "PENDING": EndState.PENDING,
    "REQUEUED": EndState.REQUEUED,
    "REQUEUE_FED": EndState.REQUEUED,
    "REQUEUE_HOLD": EndState.REQUEUED,
    "RUNNING": EndState.RUNNING,
    "SUSPENDED": EndState.RUNNING,
    "COMPLETING": EndState.RUNNING,
    "COMPLETED": EndState.FINISHED,
    "FAILED": EndState.FAILED,
    "OUT_OF_MEMORY": EndState.FAILED,
    "NODE_FAIL": EndState.FAILED,
    "BOOT_FAIL": EndState.FAILED,
    "DEADLINE": EndState.FAILED,
    "CANCELLED": EndState.CANCELLED,
    "TIMEOUT": EndState.TIMEOUT,
    "PREEMPTED": EndState.PREEMPTED,
}


@dataclass(frozen=True, slots=True)
class LineProblem:
    """A line that could not be read: kept with its number and the reason, never silently dropped."""

    line: int
    text: str
    error: str


@dataclass(frozen=True, slots=True)
class SacctRun:
    """One line: one run of one job (a requeued job has one per run)."""

    job_id: str
    cluster: str
    account: str
    user: str
    qos: str
    partition: str
    state: EndState
    raw_state: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    gpus: Mapping[str | None, int]
    exit_code: str
    run_key: str = ""
    """slurmdbd's own index of this run (DBIndex): a run read twice is the same run."""
    billing: float = 0.0
    """The run's billing TRES per second (``billing=`` in AllocTRES): what fair-share usage counts."""


@dataclass(frozen=True)
class Eviction:
    reason: str
    at: datetime | None


@dataclass(frozen=True)
class SlurmJob:
    """Every run of one job folded into one workload: first submit, first start, last end, the final
    state, each earlier run that was preempted or requeued as an eviction, the GPUs it held."""

    job_id: str
    cluster: str
    account: str
    user: str
    qos: str
    partition: str
    state: EndState
    submitted: datetime | None
    started: datetime | None
    ended: datetime | None
    gpus: Mapping[str | None, int]
    exit_code: str
    evictions: tuple[Eviction, ...] = field(default_factory=tuple)
    held_seconds: int = 0
    """Seconds it held its GPUs, over all runs (a requeued run's time counts: it held them)."""
    runs: tuple[SacctRun, ...] = ()
    """Every run, in the order they ran."""
    billing: float = 0.0
    """Billing TRES per second while it ran (its last run that had any)."""

    @cached_property
    def key(self) -> str:
        """The job's identity: its id and when it was first submitted (ids repeat after a reset)."""
        first = self.runs[0].submit if self.runs else self.submitted
        return f"{self.job_id}@{first.isoformat(timespec='seconds')[:19]}" if first else self.job_id


def gpus_from_tres(tres: str) -> dict[str | None, int]:
    """GPUs in a TRES string: ``{type: n}`` when typed counts are present, else ``{None: n}``."""
    if "gres/gpu" not in tres:
        return {}
    typed: dict[str | None, int] = {}
    untyped = 0
    for part in tres.split(","):
        found = GPU_TRES.match(part.strip())
        if found is None:
            continue
        if found["type"]:
            typed[found["type"]] = typed.get(found["type"], 0) + int(found["count"])
        else:
            untyped += int(found["count"])
    if typed:
        return typed
    return {None: untyped} if untyped else {}


def billing_from_tres(tres: str) -> float:
    """The ``billing=`` of a TRES string; without one (no TRESBillingWeights), Slurm bills the CPUs."""
    cpus = 0.0
    for part in tres.split(","):
        name, _, value = part.strip().partition("=")
        if name == "billing":
            return float(value or 0)
        if name == "cpu":
            cpus = float(value or 0)
    return cpus


_UNIT = {"k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2, "p": 1024.0**3}


def parse_billing_weights(text: str) -> dict[str, float]:
    """A partition's ``TRESBillingWeights`` (``CPU=1.0,Mem=0.25G,GRES/gpu=10.0``) → weight per unit
    of each TRES as AllocTRES counts it (lowercase names; memory per MB: a ``G`` suffix on a weight
    means per GB, so ``0.25G`` is 0.25/1024 per MB, as slurm.conf(5) says). Raises ValueError naming
    the item that is not ``TRES=weight``."""
    found: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, _, weight = item.strip().partition("=")
        suffix = weight[-1:].lower()
        try:
            value = float(weight[:-1]) / _UNIT[suffix] if suffix in _UNIT else float(weight)
        except ValueError:
            raise ValueError(f"TRESBillingWeights item {item!r} is not TRES=weight (e.g. CPU=1.0, Mem=0.25G)") from None
        found[name.lower()] = value
    return found


def _amount(name: str, value: str) -> float:
    """A TRES count as AllocTRES prints it; memory (``1000M``, ``4G``) in MB."""
    suffix = value[-1:].lower()
    if suffix in _UNIT and name == "mem":
        return float(value[:-1]) * _UNIT[suffix]
    return float(value)


def billing_weighted(tres: str, weights: Mapping[str, float]) -> float:
    """What slurmctld bills a job per second: the sum of its allocated TRES × their weights (the
    default; ``PriorityFlags=MAX_TRES`` is not modelled). sacct prints ``billing=`` rounded to a whole
    number (21 for 21.244), which is what fair-share would count wrongly without this."""
    total = 0.0
    for part in tres.split(","):
        name, _, value = part.strip().partition("=")
        weight = weights.get(name.lower())
        if weight and value:
            total += _amount(name.lower(), value) * weight
    return total


def _time(value: str, zone: tzinfo) -> datetime | None:
    if value in ("", "Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(value).replace(tzinfo=zone)


def parse_sacct(
    lines: Iterable[str],
    *,
    zone: tzinfo,
    fields: tuple[str, ...] = FIELDS,
    cluster: str | None = None,
    weights: Mapping[str, Mapping[str, float]] | None = None,
) -> Iterator[SacctRun | LineProblem]:
    """Each line as a run, or as a LineProblem saying what is wrong with it. Blank lines are skipped.
    ``cluster`` names the cluster of every run (whatever sacct's Cluster column says). A field missing
    from ``fields`` reads as empty (``JobIDRaw`` falls back to ``JobID``). ``weights``: each
    partition's TRESBillingWeights (:func:`parse_billing_weights`); a run on a partition listed there
    is billed as slurmctld bills it (:func:`billing_weighted`), others by sacct's rounded ``billing=``."""
    weights = weights or {}
    width = len(fields)
    index = {name: i for i, name in enumerate(fields)}
    index.setdefault("JobIDRaw", index.get("JobID", width))

    def at(name: str) -> int:  # a missing field reads the empty string appended to each line's parts
        return index.get(name, width)

    job_at, db_at, cluster_at, account_at, user_at, qos_at, partition_at = (
        at(n) for n in ("JobIDRaw", "DBIndex", "Cluster", "Account", "User", "QOS", "Partition")
    )
    state_at, submit_at, start_at, end_at, tres_at, exit_at = (
        at(n) for n in ("State", "Submit", "Start", "End", "AllocTRES", "ExitCode")
    )
    tres_seen: dict[str, tuple[Mapping[str | None, int], float]] = {}  # a month has a few hundred distinct TRES
    for number, raw in enumerate(lines, 1):
        text = raw.rstrip("\n")
        if not text or text.isspace():
            continue
        parts = text.split("|")
        if len(parts) != width:
            yield LineProblem(number, text[:500], f"{len(parts)} fields, expected {width} ({','.join(fields)})")
            continue
        parts.append("")
        raw_state = parts[state_at]
        state = SLURM_STATES.get(raw_state.split(" ", 1)[0])
        if state is None:
            yield LineProblem(number, text[:500], f"unknown job state {raw_state!r}")
            continue
        try:
            submit, start, end = _time(parts[submit_at], zone), _time(parts[start_at], zone), _time(parts[end_at], zone)
        except ValueError as exc:
            yield LineProblem(number, text[:500], f"a time is not ISO 8601: {exc}")
            continue
        if start and end and end < start:
            yield LineProblem(number, text[:500], f"ends ({end:%Y-%m-%dT%H:%M:%S}) before it starts: clock skew?")
            continue
        tres, partition = parts[tres_at], parts[partition_at]
        seen = tres_seen.get(tres + "|" + partition)
        if seen is None:
            weighted = weights.get(partition.split(",", 1)[0])
            billed = billing_weighted(tres, weighted) if weighted else billing_from_tres(tres)
            seen = tres_seen[tres + "|" + partition] = (gpus_from_tres(tres), billed)
        gpus, billing = seen
        job_id = parts[job_at]
        yield SacctRun(
            job_id=job_id,
            cluster=cluster if cluster is not None else parts[cluster_at],
            account=parts[account_at],
            user=parts[user_at],
            qos=parts[qos_at],
            partition=parts[partition_at],
            state=state,
            raw_state=raw_state,
            submit=submit,
            start=start,
            end=end,
            gpus=gpus,
            exit_code=parts[exit_at],
            run_key=parts[db_at] or f"{job_id}@{parts[submit_at]}",
            billing=billing,
        )


def fold_runs(runs: Iterable[SacctRun]) -> dict[tuple[str, str], SlurmJob]:
    """Fold runs into jobs, keyed by (cluster, job key). sacct lists a requeued job's runs apart, each
    with its own submit time (the requeue), and a controller whose state was reset hands out job ids
    again: so the runs of one id are sorted by when they ran, and a run continues the job before it
    only when that one was evicted (preempted or requeued) and the run was submitted when it ended.
    The job key is ``<JobIDRaw>@<first submit>``; a run read twice counts once."""
    grouped: dict[tuple[str, str], dict[str, SacctRun]] = {}
    for run in runs:
        grouped.setdefault((run.cluster, run.job_id), {})[run.run_key] = run
    jobs: dict[tuple[str, str], SlurmJob] = {}
    for (cluster, _), parts in grouped.items():
        chains = [list(parts.values())] if len(parts) == 1 else _chains(sorted(parts.values(), key=_order))
        for chain in chains:
            job = _fold(chain)
            jobs[(cluster, job.key)] = job
    return jobs


REQUEUE_TOLERANCE_S = 120


def _chains(runs: list[SacctRun]) -> Iterator[list[SacctRun]]:
    chain: list[SacctRun] = []
    for run in runs:
        if chain and not _continues(chain[-1], run):
            yield chain
            chain = []
        chain.append(run)
    if chain:
        yield chain


def _continues(before: SacctRun, run: SacctRun) -> bool:
    if before.state not in (EndState.PREEMPTED, EndState.REQUEUED) or before.end is None or run.submit is None:
        return False
    return abs((run.submit - before.end).total_seconds()) <= REQUEUE_TOLERANCE_S


def _order(run: SacctRun) -> tuple[datetime, datetime]:
    never = datetime.max.replace(tzinfo=run.submit.tzinfo if run.submit else None)
    submit = run.submit or run.start or never
    return (submit, run.start or never)


def _fold(runs: list[SacctRun]) -> SlurmJob:
    last = runs[-1]
    if len(runs) == 1:  # most jobs ran once: the same fold without the passes over a list
        evictions: tuple[Eviction, ...] = (
            (Eviction(last.raw_state, last.end),) if last.state is EndState.PREEMPTED else ()
        )
        held = int((last.end - last.start).total_seconds()) if last.start and last.end else 0
        gpus, started, billing = last.gpus, last.start, last.billing
    else:
        evictions = tuple(
            Eviction(r.raw_state, r.end) for r in runs[:-1] if r.state in (EndState.PREEMPTED, EndState.REQUEUED)
        )
        held = sum(int((r.end - r.start).total_seconds()) for r in runs if r.start and r.end)
        gpus = next((r.gpus for r in runs if r.gpus), {})
        started = min((r.start for r in runs if r.start), default=None)
        billing = next((r.billing for r in reversed(runs) if r.billing), 0.0)
    return SlurmJob(
        job_id=last.job_id,
        cluster=last.cluster,
        account=last.account,
        user=last.user,
        qos=last.qos,
        partition=last.partition,
        state=last.state,
        submitted=runs[0].submit,
        started=started,
        ended=last.end if last.state not in (EndState.PENDING, EndState.RUNNING) else None,
        gpus=gpus,
        exit_code=last.exit_code,
        evictions=evictions,
        held_seconds=held,
        runs=tuple(runs),
        billing=billing,
    )
