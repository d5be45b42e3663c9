"""Readiness across a webhook pod's worker processes (issue #40.2).

A kubelet probe reaches one gunicorn worker, but the API server's calls reach all of them: a pod is ready
only when **every** worker can decide. Each worker publishes its state — the policy revision it decides
with, or why it has none — as one small file per process in ALLOT_ADMISSION_STATE_DIR (an emptyDir in the
pod); gunicorn's master removes a worker's file when the worker exits (deploy/gunicorn.conf.py). The
readiness endpoint answers 200 only if the answering worker has a policy and no live worker has published
that it has none. With the directory unset (one process: development, tests) a worker speaks for itself.

The master loads the policy once before it forks (``preload``), so every worker starts able to decide; each
then refreshes on its own when the revision moves, at most ALLOT_ADMISSION_REFRESH_SECONDS apart, which is
the documented bound on how long two workers may judge by different revisions.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from django.conf import settings


def state_dir() -> Path | None:
    folder = settings.ALLOT_ADMISSION_STATE_DIR
    return Path(folder) if folder else None


def publish(revision: int | None, error: str = "", *, pid: int | None = None, log_error: str = "") -> None:
    """Record this worker's state (atomically: written aside, then renamed); ``log_error``: why its decision
    log cannot be written now ("" when it can)."""
    folder = state_dir()
    if folder is None:
        return
    pid = pid or os.getpid()
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{pid}.tmp"
        partial.write_text(json.dumps({"pid": pid, "revision": revision, "error": error, "log_error": log_error}))
        partial.replace(folder / f"{pid}.json")


def forget(pid: int) -> None:
    """A worker exited: its state no longer speaks for the pod (gunicorn's child_exit hook)."""
    folder = state_dir()
    if folder is not None:
        with contextlib.suppress(OSError):
            (folder / f"{pid}.json").unlink()


def workers() -> list[dict[str, Any]]:
    """The published state of every live worker (files of processes that no longer run are skipped)."""
    folder = state_dir()
    if folder is None or not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            state = json.loads(path.read_text())
            pid = int(state["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(pid):
            found.append(state)
    return found


def unready() -> list[dict[str, Any]]:
    """Live workers that published that they cannot decide."""
    return [w for w in workers() if w.get("revision") is None]


def unlogged() -> list[dict[str, Any]]:
    """Live workers that published that they cannot write their decision log."""
    return [w for w in workers() if w.get("log_error")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
