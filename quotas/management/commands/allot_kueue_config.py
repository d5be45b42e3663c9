from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas.models import Cluster, ClusterKind
from quotas.policy.kueue import render_yaml
from quotas.policy.kueue.config import KueueConfigError, kueue_configuration
from quotas.selectors import shared_profiles


class Command(BaseCommand):
    help = (
        "Print the part of Kueue's Configuration a Kubernetes cluster needs for what Allot compiles onto it "
        "(labels Kueue copies and promotes onto its metrics; fair sharing and admission fair sharing by the "
        "cluster's sharing mode). Merge it into the kueue-manager-config ConfigMap and restart Kueue."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="a Kubernetes cluster, e.g. k8s-west")
        parser.add_argument(
            "--config-version",
            choices=("v1beta2", "v1beta1"),
            default="v1beta2",
            help="the Configuration version the cluster's Kueue reads: v1beta2 (v0.15 and newer, the default) or "
            "v1beta1 (v0.13, v0.14)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {options['cluster']!r}")
        if cluster.kind != ClusterKind.KUBERNETES:
            raise CommandError(f"{cluster.name} is a {cluster.kind} cluster: Kueue runs on Kubernetes clusters")
        try:
            config = kueue_configuration(
                cluster.kueue_sharing,
                cluster.fairshare_half_life,
                version=options["config_version"],
                profiles=shared_profiles(cluster),
            )
        except KueueConfigError as exc:
            raise CommandError(f"{cluster.name}: {exc}") from exc
        self.stdout.write(f"# Kueue configuration for {cluster.name} (sharing: {cluster.kueue_sharing})\n")
        self.stdout.write(render_yaml([config]))
