"""Problems found in Kueue objects before any apply, located down to the field."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class Source(StrEnum):
    SCHEMA = "schema"
    """The CRD's openAPIV3Schema (types, enums, required, patterns, bounds, unknown fields)."""
    CEL = "cel"
    """The CRD's x-kubernetes-validations rules."""
    WEBHOOK = "webhook"
    """Rules only Kueue's validating webhook enforces."""


@dataclass(frozen=True, slots=True)
class ObjectProblem:
    kind: str
    name: str
    field: str
    message: str
    source: Source
    namespace: str = ""

    def __str__(self) -> str:
        where = f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"
        return f"{where}: {self.field}: {self.message} ({self.source})"

    def as_dict(self) -> dict[str, str]:
        data = asdict(self)
        data["source"] = self.source.value
        return data
