"""One line of a cluster's coverage report: a contract term or tier rule, and whether and how the
cluster enforces it (Kueue: :mod:`.kueue.coverage`; Slurm: :mod:`.slurm.coverage`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class How(StrEnum):
    KUEUE = "enforced_by_kueue"
    WEBHOOK = "enforced_by_allot_webhook"
    """Needs Allot's admission webhooks installed on the cluster (deploy/)."""
    CONFIG = "depends_on_kueue_configuration"
    MONITORED = "monitored_not_enforced"
    SLURM = "enforced_by_slurm"
    JOB_SUBMIT = "enforced_by_allot_job_submit"
    """Needs Allot's job_submit.lua and its policy snapshot installed on the controller (deploy/slurm/)."""
    NOT_ENFORCED = "not_enforced"


@dataclass(frozen=True, slots=True)
class CoverageLine:
    subject: str
    """A contract, a tier, or the quota model itself."""
    term: str
    value: str
    how: How
    mechanism: str

    def as_dict(self) -> dict[str, str]:
        data = asdict(self)
        data["how"] = self.how.value
        return data
