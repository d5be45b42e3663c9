"""One batch of sacct's runs written: each job folded with the runs recorded earlier for it, upserted as one
``WorkloadRecord`` with one ``Allocation`` per run (``accounting.services.ingest`` reads sacct, batches its
lines and keeps the watermark; this module writes what a batch holds). On PostgreSQL a batch is COPYed into a
staging table and upserted in one statement; elsewhere Django's upsert does the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from django.db import connection

from accounting.models import Allocation, SourceRun, WorkloadRecord
from accounting.policy.sacct import SLURM_STATES, EndState, LineProblem, SacctRun, SlurmJob, fold_runs
from quotas.models import Cluster, OrgUnit, ResourceFlavor
from quotas.policy.slurm.slices import gres_types

KEEP_PROBLEMS = 100
RECORD_FIELDS = [
    "job_id",
    "unit",
    "account",
    "owner",
    "project",
    "tier",
    "flavor",
    "flavor_name",
    "devices",
    "equivalents",
    "resources",
    "borrowed",
    "submitted_at",
    "admitted_at",
    "ended_at",
    "state",
    "exit_code",
    "evictions",
    "held_seconds",
    "billing",
    "source_run",
]


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: {"lines": 0, "jobs": 0, "problems": 0})
    problems: list[dict[str, object]] = field(default_factory=list)
    unresolved: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    """Job ids this ingest has written: only these, and jobs recorded before it, can have runs stored."""
    history: bool = True

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def problem(self, found: LineProblem) -> None:
        self.add("problems")
        if len(self.problems) < KEEP_PROBLEMS:
            self.problems.append({"line": found.line, "text": found.text, "error": found.error})


@dataclass(frozen=True)
class Maps:
    units: dict[str, int]
    flavors: dict[str, ResourceFlavor]
    types: dict[str, tuple[ResourceFlavor, Fraction]]
    """GPU type → its flavor and weight in GPU-equivalents: a flavor's name at 1, each MIG profile's
    ``<flavor>_<profile>`` at its weight (quotas.policy.slurm.slices)."""
    shared: frozenset[int] = frozenset()
    """The shared flavors' ids: their jobs' slices are weighed."""


def batch_maps(cluster: Cluster) -> Maps:
    """Account name → unit (its Slurm account, else its slug, as the Slurm translator names accounts),
    flavor name → flavor, GPU type → flavor and weight. One query each."""
    units: dict[str, int] = {}
    for uid, slug, account in OrgUnit.objects.filter(archived_at__isnull=True).values_list(
        "id", "slug", "slurm_account"
    ):
        units.setdefault(account or slug, uid)
    flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    sharing = {f.pk: f.sharing_spec for f in flavors.values()}
    types = {
        gres: (f, weight)
        for f in flavors.values()
        for gres, weight in gres_types(f.name, [(p.name, p.weight) for p in sharing[f.pk].profiles])
    }
    return Maps(units, flavors, types, frozenset(pk for pk, spec in sharing.items() if spec.shared))


def _known_runs(cluster: Cluster, job_ids: set[str]) -> list[SacctRun]:
    """The runs of these jobs recorded earlier (by an earlier batch or ingest), so a job whose runs
    arrive apart — a requeue hours later, outside this window — is folded whole."""
    rows = Allocation.objects.filter(record__cluster=cluster, record__job_id__in=job_ids).values_list(
        "record__job_id", "run_key", "raw_state", "submitted_at", "start", "end", "record__account",
        "record__owner", "record__tier", "record__flavor_name", "devices", "record__exit_code", "record__resources",
    )  # fmt: skip
    return [
        SacctRun(
            job_id=job_id,
            cluster=cluster.name,
            account=account,
            user=owner,
            qos=qos,
            partition="",
            state=SLURM_STATES.get(raw_state.split(" ")[0], EndState.FINISHED),
            raw_state=raw_state,
            submit=submitted,
            start=start,
            end=end,
            gpus=_gpus(resources) or {flavor or None: devices},
            exit_code=exit_code,
            run_key=run_key,
        )
        for (job_id, run_key, raw_state, submitted, start, end, account, owner, qos, flavor, devices, exit_code,
             resources) in rows
    ]  # fmt: skip


def _gpus(resources: dict[str, Any]) -> dict[str | None, int]:
    """A record's GPUs per type as sacct said them (``gpu``: untyped), from its resources."""
    return {(None if k == "gpu" else k): int(v) for k, v in (resources or {}).items() if isinstance(v, int)}


def _record(run_id: int, cluster_id: int, maps: Maps, job: SlurmJob, tally: Tally) -> dict[str, Any]:
    """The record's fields (column names), its unit and flavor resolved; what cannot be is counted."""
    unit = maps.units.get(job.account)
    if unit is None:
        tally.add("unresolved_account")
        tally.unresolved.add(job.account)
    typed = [t for t in job.gpus if t is not None]
    flavor_name = typed[0] if typed else ""
    flavor = maps.types[flavor_name][0] if flavor_name in maps.types else None
    if flavor is None and not typed and job.gpus and len(maps.flavors) == 1:
        flavor = next(iter(maps.flavors.values()))  # untyped GPUs on a one-flavor cluster
    if job.gpus and flavor is None:
        tally.add("unresolved_flavor")
    devices = sum(job.gpus.values())
    equivalents = None
    if flavor is not None and flavor.pk in maps.shared:  # MIG slices: each type at its profile's weight
        if typed:
            total = Fraction(0)
            for gpu_type, n in job.gpus.items():
                found = maps.types.get(gpu_type or "")
                if found is not None and found[0] is flavor:
                    total += n * found[1]
            equivalents = float(total)
        else:  # no profile said: each GPU counted whole (sacct types a MIG slice wherever gres.conf does)
            tally.add("untyped_on_shared_flavor")
    return {
        "cluster_id": cluster_id,
        "scheduler_id": job.key,
        "job_id": job.job_id,
        "unit_id": unit,
        "account": job.account,
        "owner": job.user,
        "project": job.account,
        "tier": job.qos,
        "flavor_id": flavor.pk if flavor else None,
        "flavor_name": flavor_name,
        "devices": devices,
        "equivalents": equivalents,
        "resources": {str(k or "gpu"): v for k, v in job.gpus.items()},
        "borrowed": devices if job.qos.startswith("burst-") else 0,
        "submitted_at": job.submitted,
        "admitted_at": job.started,
        "ended_at": job.ended,
        "state": job.state.value,
        "exit_code": job.exit_code,
        "evictions": [{"reason": e.reason, "at": e.at.isoformat() if e.at else None} for e in job.evictions],
        "held_seconds": job.held_seconds,
        "billing": job.billing,
        "source_run_id": run_id,
    }


ALLOCATION_COLUMNS = (
    "record_id", "unit_id", "flavor_id", "devices", "equivalents", "borrowed", "start", "end", "run_key", "raw_state",
    "submitted_at",
)  # fmt: skip


def write_batch(run: SourceRun, cluster: Cluster, maps: Maps, runs: list[SacctRun], tally: Tally) -> None:
    """Fold one batch of runs with the runs recorded earlier for the same jobs, upsert the records and
    replace their allocations (a run read again — a corrected record — wins over the stored one)."""
    keys = {r.run_key for r in runs}
    job_ids = {r.job_id for r in runs}
    stored = job_ids if tally.history else job_ids & tally.written  # a first ingest asks only about its own
    known = [r for r in _known_runs(cluster, stored) if r.run_key not in keys] if stored else []
    jobs = list(fold_runs([*known, *runs]).values())
    records = [_record(run.pk, cluster.pk, maps, job, tally) for job in jobs]
    write = _write_postgres if connection.vendor == "postgresql" else _write_orm
    ids = write(records)
    allocations = [
        (ids[job.key], record["unit_id"], record["flavor_id"], record["devices"], record["equivalents"],
         record["borrowed"], part.start, part.end, part.run_key, part.raw_state, part.submit)
        for job, record in zip(jobs, records, strict=True)
        if record["devices"]
        for part in job.runs
        if part.start
    ]  # fmt: skip
    _replace_allocations(list(ids.values()), allocations)
    tally.add("jobs", len(jobs))
    tally.add("allocations", len(allocations))
    tally.written |= job_ids


def _write_orm(records: list[dict[str, Any]]) -> dict[str, int]:
    """Any database: Django's upsert. Returns scheduler id → record id."""
    WorkloadRecord.objects.bulk_create(
        [WorkloadRecord(**r) for r in records],
        update_conflicts=True,
        unique_fields=["cluster", "scheduler_id"],
        update_fields=RECORD_FIELDS,
    )
    cluster = records[0]["cluster_id"]
    found = WorkloadRecord.objects.filter(cluster_id=cluster, scheduler_id__in=[r["scheduler_id"] for r in records])
    return dict(found.values_list("scheduler_id", "id"))


RECORD_COLUMNS = (
    "cluster_id", "scheduler_id", "job_id", "unit_id", "account", "owner", "project", "tier", "flavor_id",
    "flavor_name", "devices", "equivalents", "resources", "borrowed", "submitted_at", "admitted_at", "ended_at",
    "state", "exit_code", "evictions", "held_seconds", "billing", "source_run_id",
)  # fmt: skip
RESOURCES_AT, EVICTIONS_AT = RECORD_COLUMNS.index("resources"), RECORD_COLUMNS.index("evictions")
UPSERT = """
INSERT INTO accounting_workloadrecord ({columns}, updated_at)
SELECT {columns}, now() FROM allot_stage_records
ON CONFLICT (cluster_id, scheduler_id) DO UPDATE SET {updates}, updated_at = now()
RETURNING scheduler_id, id
"""


def _write_postgres(records: list[dict[str, Any]]) -> dict[str, int]:
    """PostgreSQL: COPY the batch into a staging table, then one INSERT … ON CONFLICT: the same upsert
    as the ORM's, without building a statement per row (a month of a large site is a million lines)."""
    columns = ", ".join(RECORD_COLUMNS)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in RECORD_COLUMNS if c not in ("cluster_id", "scheduler_id"))
    resources: dict[tuple[tuple[str, int], ...], str] = {}  # a handful of distinct GPU mixes
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS allot_stage_records ON COMMIT DROP AS "
            f"SELECT {columns} FROM accounting_workloadrecord WITH NO DATA"
        )
        cursor.execute("TRUNCATE allot_stage_records")
        with cursor.cursor.copy(f"COPY allot_stage_records ({columns}) FROM STDIN") as copy:  # type: ignore[attr-defined]
            for record in records:
                row = [record[c] for c in RECORD_COLUMNS]
                mix = tuple(record["resources"].items())
                row[RESOURCES_AT] = resources.get(mix) or resources.setdefault(mix, json.dumps(record["resources"]))
                row[EVICTIONS_AT] = json.dumps(record["evictions"]) if record["evictions"] else "[]"
                copy.write_row(row)
        cursor.execute(UPSERT.format(columns=columns, updates=updates))
        return dict(cursor.fetchall())


def _replace_allocations(record_ids: list[int], rows: list[tuple[Any, ...]]) -> None:
    if connection.vendor != "postgresql":
        Allocation.objects.filter(record_id__in=record_ids).delete()
        Allocation.objects.bulk_create([Allocation(**dict(zip(ALLOCATION_COLUMNS, row, strict=True))) for row in rows])
        return
    columns = ", ".join(f'"{c}"' for c in ALLOCATION_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM accounting_allocation WHERE record_id = ANY(%s)", [record_ids])
        with cursor.cursor.copy(f"COPY accounting_allocation ({columns}) FROM STDIN") as copy:  # type: ignore[attr-defined]
            for row in rows:
                copy.write_row(row)
