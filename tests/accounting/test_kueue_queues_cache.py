"""The ClusterQueues' status in the shared cache (accounting.services.kueue_queues): a queue that does not change
keeps its figures, shown as current, for as long as its watcher keeps saying so — not old, and not dropped."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from accounting.services import kueue_queues
from quotas.models import Cluster


def test_a_quiet_queue_is_current_as_of_the_watchers_last_word_and_stays_cached():
    cluster = Cluster(pk=424242, name="quiet")
    long_ago = timezone.now() - timedelta(minutes=50)
    cq = {"metadata": {"name": "q"}, "status": {"pendingWorkloads": 1}}
    kueue_queues._store(cluster, [cq], long_ago)
    status, at = kueue_queues.cached_queue(cluster, "q")
    assert status is not None and status.pending == 1 and at == long_ago  # the watcher has said nothing since
    kueue_queues._alive(cluster, {"q"})  # a watch (re)opened with every change applied: nothing changed
    status, at = kueue_queues.cached_queue(cluster, "q")
    assert status is not None and status.pending == 1
    assert at is not None and (timezone.now() - at).total_seconds() < 5
    assert kueue_queues.cached_queue(cluster, "other") == (None, None)
