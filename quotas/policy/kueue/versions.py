"""Which Kueue a cluster serves, read from its own CRDs before anything is compiled for it. Pure.

Allot compiles ``kueue.x-k8s.io/v1beta2`` (Kueue v0.15 and newer) and writes it as the cluster serves
it: a cluster whose CRDs serve only ``v1beta1`` (Kueue v0.13 and v0.14) gets the same objects in v1beta1
(quotas.policy.kueue.convert; the run says what differs). A cluster serving neither (no Kueue, or one
older than v1beta1's ClusterQueue and Cohort) is refused with what to do before anything is sent. A
server older than the bundled CRDs may lack optional fields Allot can compile (admission fair sharing's
``admissionScope``, a LocalQueue's ``fairSharing``): those are left out of the objects for that cluster,
and the run says which, so nothing is sent that its Kueue drops or refuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .convert import DIFFERENCES, SUPPORTED

VERSION = "v1beta2"
WRITTEN = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")
OPTIONAL: Mapping[str, tuple[str, ...]] = {
    "ClusterQueue": ("admissionScope", "fairSharing"),
    "Cohort": ("fairSharing",),
    "LocalQueue": ("fairSharing", "stopPolicy"),
}
"""Per kind, the ``spec`` fields Allot compiles that a cluster's Kueue may not serve yet."""


@dataclass(frozen=True)
class ServedKueue:
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per kind, the versions the cluster serves."""
    spec_fields: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per kind, the ``spec`` properties of the schema Allot writes (WorkloadPriorityClass: its top level)."""

    @property
    def version(self) -> str | None:
        """The version Allot writes to this cluster: the newest it speaks that every kind it writes is served in."""
        return next((v for v in SUPPORTED if all(v in self.versions.get(k, ()) for k in WRITTEN)), None)

    def note(self) -> str | None:
        """What the run should say about writing in an older version, or None."""
        version = self.version
        if version in DIFFERENCES:
            return (
                f"this cluster serves kueue.x-k8s.io/{version} (Kueue v0.14 or older): objects written as "
                f"{version} — {DIFFERENCES[version]}"
            )
        return None


def served_kueue(crds: Iterable[Mapping[str, Any]]) -> ServedKueue:
    """What a cluster's Kueue CRDs (``apiextensions.k8s.io/v1`` objects) serve."""
    versions: dict[str, tuple[str, ...]] = {}
    fields: dict[str, frozenset[str]] = {}
    for crd in crds:
        spec = crd.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind", ""))
        served = [v for v in spec.get("versions") or () if v.get("served")]
        versions[kind] = tuple(str(v.get("name")) for v in served)
        for wanted in SUPPORTED:
            v = next((v for v in served if v.get("name") == wanted), None)
            if v is not None:
                schema = ((v.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}
                props = (schema.get("spec") or {}).get("properties") if "spec" in schema else schema
                fields[kind] = frozenset(props or ())
                break
    return ServedKueue(versions, fields)


def version_problem(served: ServedKueue, cluster: str) -> str | None:
    """Why Allot's objects cannot go to this cluster at all, with what to do; None when they can."""
    if not any(served.versions.values()):
        return f"{cluster} serves no Kueue CRDs: install Kueue v0.13 or newer before syncing; nothing was sent"
    if served.version is not None:
        return None
    missing = [kind for kind in WRITTEN if not set(SUPPORTED) & set(served.versions.get(kind, ()))]
    found = sorted({v for kind in WRITTEN for v in served.versions.get(kind, ())})
    return (
        f"{cluster} does not serve {', '.join(missing) or 'every kind Allot writes'} in one version Allot speaks "
        f"({' or '.join(SUPPORTED)}; it serves {', '.join(found)}): upgrade Kueue to v0.13 or newer, then sync "
        "again; nothing was sent"
    )


def fit_objects(objects: Sequence[dict[str, Any]], served: ServedKueue) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects without the optional fields the cluster's v1beta2 schema lacks, and a note per field
    left out (how many objects it was on)."""
    dropped: dict[tuple[str, str], int] = {}
    fitted = []
    for obj in objects:
        kind = str(obj.get("kind"))
        known = served.spec_fields.get(kind)
        spec = obj.get("spec")
        lacking = [
            f
            for f in OPTIONAL.get(kind, ())
            if known is not None and isinstance(spec, dict) and f in spec and f not in known
        ]
        if not lacking:
            fitted.append(obj)
            continue
        fitted.append({**obj, "spec": {k: v for k, v in spec.items() if k not in lacking}})  # type: ignore[union-attr]
        for name in lacking:
            dropped[(kind, name)] = dropped.get((kind, name), 0) + 1
    notes = [
        f"left out {kind} spec.{name} on {count} object(s): this cluster's Kueue does not serve it "
        f"(newer Kueue versions do; upgrade it to have it enforced)"
        for (kind, name), count in sorted(dropped.items())
    ]
    return fitted, notes
