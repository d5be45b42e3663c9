from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounting.services.kueue import kueue_client, usage_watch_kueue
from accounting.services.kueue_queues import queues_follow
from quotas.models import Cluster, ClusterKind


class Command(BaseCommand):
    help = (
        "Follow a Kubernetes cluster's Kueue Workloads and record each condition transition as it happens, and "
        "keep its ClusterQueues' status (GPUs used and borrowed, pending and admitted counts) in the shared cache "
        "(list, then watch from the list's resourceVersion; relists on 410 Gone; resumes from the last "
        "stored resourceVersion after a restart). Runs until SIGTERM or Ctrl-C. The usage-watcher "
        "Deployment runs one per cluster; beat's periodic resync covers a cluster without one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="The Kubernetes cluster's name in Allot.")
        parser.add_argument(
            "--timeout-seconds",
            type=int,
            default=300,
            help="How long each watch call lasts before it is opened again (default 300).",
        )
        parser.add_argument("--watches", type=int, default=None, help="Stop after this many watch calls (tests).")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            names = ", ".join(Cluster.objects.filter(kind=ClusterKind.KUBERNETES).values_list("name", flat=True))
            raise CommandError(
                f"--cluster {options['cluster']!r}: no such cluster; Kubernetes clusters: {names or 'none'}"
            )
        if cluster.kind != ClusterKind.KUBERNETES:
            raise CommandError(f"--cluster {cluster.name!r} is a {cluster.kind} cluster; give a Kubernetes one")
        if options["timeout_seconds"] < 1:
            raise CommandError("--timeout-seconds must be 1 or more")
        stopping = False

        def stop(*_args: object) -> None:
            nonlocal stopping
            stopping = True
            self.stdout.write("stopping: what was read is stored with its resourceVersion, then it exits")

        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(f"watching Workloads and ClusterQueues on {cluster.name} ({cluster.connection_ref})")
        # the ClusterQueues' own figures for the waiting answers, on a thread beside the Workload watch
        try:
            client = kueue_client(cluster)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        threading.Thread(
            target=queues_follow,
            kwargs={"cluster": cluster, "client": client, "stop": lambda: stopping},
            name="allot-clusterqueue-watch",
            daemon=True,
        ).start()
        try:
            runs = usage_watch_kueue(
                cluster=cluster,
                stop=lambda: stopping,
                timeout_seconds=options["timeout_seconds"],
                max_watches=options["watches"],
                progress=self.stdout.write,
            )
        except KeyboardInterrupt:
            self.stdout.write("interrupted: the next start resumes from the last stored resourceVersion")
            return
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            stopping = True  # the ClusterQueue thread ends with the Workload watch
        if runs and runs[-1].status == "failed":
            raise CommandError(runs[-1].message)
