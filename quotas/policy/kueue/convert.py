"""Kueue objects in the API version a cluster serves. Pure.

Allot compiles, diffs, imports and shows ``kueue.x-k8s.io/v1beta2`` (Kueue v0.15 and newer). Many
production clusters still serve only ``v1beta1`` (Kueue v0.13 and v0.14, Red Hat's build of Kueue among
them). For the kinds Allot writes, the two differ in few places, converted here at the edge — on the way
to such a cluster and back from it — so the rest of Allot sees one form:

* a ClusterQueue's ``spec.cohortName`` (v1beta2) is ``spec.cohort`` (v1beta1);
* ``spec.flavorFungibility``: v1beta2's ``MayStopSearch`` is v1beta1's ``Borrow`` (``whenCanBorrow``) and
  ``Preempt`` (``whenCanPreempt``); ``TryNextFlavor`` is the same in both;
* every other field Allot writes (Cohort, LocalQueue, ResourceFlavor, WorkloadPriorityClass specs,
  preemption, fair sharing, stopPolicy) is spelled the same.

Workloads are read in either version as they come (accounting.policy.kueue reads both spellings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP = "kueue.x-k8s.io"
NEWEST = "v1beta2"
OLDER = "v1beta1"
SUPPORTED = (NEWEST, OLDER)
DIFFERENCES = {
    OLDER: "ClusterQueue spec.cohortName is written as spec.cohort, and flavorFungibility MayStopSearch as "
    "Borrow (whenCanBorrow) / Preempt (whenCanPreempt)",
}
"""What differs in the objects Allot writes, per older version (said in each sync run's notes)."""

_OUT = {"whenCanBorrow": ("MayStopSearch", "Borrow"), "whenCanPreempt": ("MayStopSearch", "Preempt")}


def to_version(obj: Mapping[str, Any], version: str) -> dict[str, Any]:
    """``obj`` (v1beta2 form) as ``version`` spells it; objects of other groups pass unchanged."""
    if version == NEWEST or not str(obj.get("apiVersion", "")).startswith(f"{GROUP}/"):
        return dict(obj)
    out = {**obj, "apiVersion": f"{GROUP}/{version}"}
    spec = obj.get("spec")
    if obj.get("kind") == "ClusterQueue" and isinstance(spec, Mapping):
        new = {k: v for k, v in spec.items() if k != "cohortName"}
        if "cohortName" in spec:
            new["cohort"] = spec["cohortName"]
        fungibility = spec.get("flavorFungibility")
        if isinstance(fungibility, Mapping):
            new["flavorFungibility"] = {
                k: (_OUT[k][1] if k in _OUT and v == _OUT[k][0] else v) for k, v in fungibility.items()
            }
        out["spec"] = new
    return out


def from_version(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Kueue object read from a cluster, in the v1beta2 form Allot works with."""
    api_version = str(obj.get("apiVersion", ""))
    if not api_version.startswith(f"{GROUP}/") or api_version == f"{GROUP}/{NEWEST}":
        return dict(obj)
    out = {**obj, "apiVersion": f"{GROUP}/{NEWEST}"}
    spec = obj.get("spec")
    if obj.get("kind") == "ClusterQueue" and isinstance(spec, Mapping):
        new = {k: v for k, v in spec.items() if k != "cohort"}
        if "cohort" in spec:
            new["cohortName"] = spec["cohort"]
        fungibility = spec.get("flavorFungibility")
        if isinstance(fungibility, Mapping):
            new["flavorFungibility"] = {
                k: (_OUT[k][0] if k in _OUT and v == _OUT[k][1] else v) for k, v in fungibility.items()
            }
        out["spec"] = new
        meta = obj.get("metadata")
        if isinstance(meta, Mapping) and meta.get("managedFields"):
            out["metadata"] = {**meta, "managedFields": [_renamed_cohort(e) for e in meta["managedFields"]]}
    return out


def _renamed_cohort(entry: Any) -> Any:
    """A managedFields entry with v1beta1's ``f:spec.f:cohort`` as v1beta2's ``f:cohortName``, so what
    Allot owned on the server is read under the name it compiles."""
    fields = entry.get("fieldsV1") if isinstance(entry, Mapping) else None
    spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
    if not isinstance(spec, Mapping) or "f:cohort" not in spec:
        return entry
    renamed = {("f:cohortName" if k == "f:cohort" else k): v for k, v in spec.items()}
    return {**entry, "fieldsV1": {**fields, "f:spec": renamed}}  # type: ignore[dict-item]


def preferred(served: tuple[str, ...] | list[str]) -> str | None:
    """The version Allot speaks to a group serving ``served``: the newest it knows; None if neither."""
    return next((v for v in SUPPORTED if v in served), None)
