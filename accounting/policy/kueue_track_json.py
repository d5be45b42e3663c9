"""A Workload's track as stored with its record: JSON out (``track_to_json``) and back (``track_from_json``),
every time in ISO 8601. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from accounting.policy.kueue import KueueEviction, Run, WorkloadError, WorkloadTrack, parse_time
from accounting.policy.kueue_ask import ask_from_json, ask_to_json
from accounting.policy.sacct import EndState


def track_to_json(track: WorkloadTrack) -> dict[str, Any]:
    """The track as stored with its record (JSON), read back by ``track_from_json``."""

    def time(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "uid": track.uid,
        "namespace": track.namespace,
        "name": track.name,
        "created": time(track.created),
        "queue": track.queue,
        "cluster_queue": track.cluster_queue,
        "owner": track.owner,
        "project": track.project,
        "tier": track.tier,
        "flavor": track.flavor,
        "devices": track.devices,
        "resources": dict(track.resources),
        "runs": [
            {
                "start": time(r.start),
                "end": time(r.end),
                "flavor": r.flavor,
                "devices": r.devices,
                "ended_by": r.ended_by,
                "reconstructed": r.reconstructed,
            }
            for r in track.runs
        ],
        "evictions": [{"reason": e.reason, "at": time(e.at), "message": e.message} for e in track.evictions],
        "state": track.state.value,
        "ended": time(track.ended),
        "resource_version": track.resource_version,
        "quota_reserved": track.quota_reserved,
        "notes": list(track.notes),
        "ask": ask_to_json(track.ask),
    }


def _required_time(value: object, where: str) -> datetime:
    found = parse_time(value)
    if found is None:
        raise WorkloadError(f"{where} is missing")
    return found


def track_from_json(data: Mapping[str, Any]) -> WorkloadTrack:
    runs = tuple(
        Run(
            start=_required_time(r.get("start"), "runs[].start"),
            end=parse_time(r.get("end")),
            flavor=str(r.get("flavor") or ""),
            devices=int(r.get("devices") or 0),
            ended_by=str(r.get("ended_by") or ""),
            reconstructed=bool(r.get("reconstructed")),
        )
        for r in data.get("runs") or []
    )
    return WorkloadTrack(
        uid=str(data["uid"]),
        namespace=str(data.get("namespace") or ""),
        name=str(data.get("name") or ""),
        created=parse_time(data.get("created")),
        queue=str(data.get("queue") or ""),
        cluster_queue=str(data.get("cluster_queue") or ""),
        owner=str(data.get("owner") or ""),
        project=str(data.get("project") or ""),
        tier=str(data.get("tier") or ""),
        flavor=str(data.get("flavor") or ""),
        devices=int(data.get("devices") or 0),
        resources={str(k): str(v) for k, v in (data.get("resources") or {}).items()},
        runs=runs,
        evictions=tuple(
            KueueEviction(str(e.get("reason") or ""), parse_time(e.get("at")), str(e.get("message") or ""))
            for e in data.get("evictions") or []
        ),
        state=EndState(data.get("state") or EndState.PENDING.value),
        ended=parse_time(data.get("ended")),
        resource_version=str(data.get("resource_version") or ""),
        quota_reserved=bool(data.get("quota_reserved")),
        notes=tuple(str(n) for n in data.get("notes") or []),
        ask=ask_from_json(data.get("ask")),
    )
