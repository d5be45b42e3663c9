"""Give the demo's simulated Kubernetes cluster (k8s-west, ``connection_ref`` ``demo:k8s-west``) a sync and
drift history: ``./dev run`` runs it after loading the demo; once (a cluster with runs is left alone)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from quotas.demo import demo_cluster_history


class Command(BaseCommand):
    help = (
        "Sync the demo's simulated Kubernetes cluster, edit one of its queues as a person would, then check "
        "drift and dry-run, so the Clusters page shows a history. Does nothing once the cluster has runs."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        done = demo_cluster_history()
        for line in done or [
            "k8s-west already has a sync history (or is not the demo's simulated cluster): left alone"
        ]:
            self.stdout.write(line)
