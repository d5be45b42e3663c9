"""The ClusterQueues' status in the live view (issue #44.1): Kueue's own figures for each queue — GPUs used
and borrowed per flavor, Workloads pending and admitted — kept in the shared cache, one key per queue, so
that every web process answers from the same copy and no question sends a request to the API server.

* ``queues_resync`` lists every ClusterQueue (beat's Kueue resync runs it beside the Workload resync);
* ``queues_follow`` (run by ``allot_watch_kueue`` on a thread beside the Workload watch) lists, then
  watches from the list's resourceVersion, writing each changed queue as its event arrives; a dropped
  watch is opened again, an expired resourceVersion (410) answered by a new list.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from accounting.policy.kueue_queues import QueueStatus, from_json, queue_status, to_json
from quotas.integrations.kubernetes import ClusterCallError, KueueClient
from quotas.models import Cluster

log = logging.getLogger("allot.kueue")
KEEP_SECONDS = 3600
"""How long a queue's status stays in the cache without being written again: a watcher that stopped leaves
old figures behind for at most this long (each answer shows their age)."""


def _key(cluster: Cluster, name: str) -> str:
    return f"allot:cq:{cluster.pk}:{name}"


def _seen_key(cluster: Cluster) -> str:
    return f"allot:cq-seen:{cluster.pk}"


def _alive(cluster: Cluster, names: set[str]) -> None:
    """The watch is open (or ended at its timeout) with every change up to now applied: what is cached is
    current as of now. Said once per watch call, so a queue that never changes is neither shown as old nor
    dropped from the cache while its watcher runs."""
    cache.set(_seen_key(cluster), timezone.now().isoformat(), timeout=KEEP_SECONDS)
    for name in names:
        cache.touch(_key(cluster, name), timeout=KEEP_SECONDS)


def _store(cluster: Cluster, items: list[dict[str, Any]], at: datetime) -> int:
    found = {_key(cluster, s.name): {**to_json(s), "at": at.isoformat()} for s in map(queue_status, items) if s.name}
    cache.set_many(found, timeout=KEEP_SECONDS)
    return len(found)


def queues_resync(*, cluster: Cluster, client: KueueClient) -> tuple[int, str]:
    """Every ClusterQueue's status into the cache; returns how many and the list's resourceVersion."""
    items, version = client.list_pages("clusterqueues")
    return _store(cluster, items, timezone.now()), version


def queues_follow(
    *, cluster: Cluster, client: KueueClient, stop: Callable[[], bool], timeout_seconds: int = 300
) -> None:
    """List, then watch ClusterQueues until ``stop()``, keeping each one's status in the cache."""
    cursor = ""
    names: set[str] = set()
    while not stop():
        try:
            if not cursor:
                items, cursor = client.list_pages("clusterqueues")
                _store(cluster, items, timezone.now())
                names = {str((i.get("metadata") or {}).get("name") or "") for i in items} - {""}
            opened = time.monotonic()
            _alive(cluster, names)
            for kind, obj in client.watch("clusterqueues", cursor, timeout_seconds=timeout_seconds):
                cursor = str((obj.get("metadata") or {}).get("resourceVersion") or cursor)
                name = str((obj.get("metadata") or {}).get("name") or "")
                if kind in ("ADDED", "MODIFIED"):
                    _store(cluster, [obj], timezone.now())
                    names.add(name)
                elif kind == "DELETED":
                    cache.delete(_key(cluster, name))
                    names.discard(name)
                if stop():
                    return
            _alive(cluster, names)  # the server ended the watch at its timeout: nothing changed unseen
            if time.monotonic() - opened < 1:
                time.sleep(1)  # a watch the server ended at once: not again in a tight loop
        except ClusterCallError as exc:
            if exc.status == 410:
                cursor = ""  # the resourceVersion is gone: list again
                continue
            log.warning("ClusterQueue watch on %s: %s; again shortly", cluster.name, exc)
            time.sleep(2)


def cached_queue(cluster: Cluster, name: str) -> tuple[QueueStatus | None, datetime | None]:
    """The ClusterQueue's last status and as of when it is known current (its last change read, or the
    watcher's last word that nothing changed since, whichever is later); (None, None) when none is cached."""
    data = cache.get(_key(cluster, name)) if name else None
    if not data:
        return None, None
    seen = cache.get(_seen_key(cluster))
    at = datetime.fromisoformat(data["at"])
    return from_json(data), max(at, datetime.fromisoformat(seen)) if seen else at
