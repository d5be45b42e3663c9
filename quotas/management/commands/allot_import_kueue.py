from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from quotas import services
from quotas.errors import InputError
from quotas.integrations.kubernetes import PLURALS, ClusterCallError, KueueClient, api_client_for
from quotas.models import Cluster, ClusterKind
from quotas.policy.kueue.importer import read_kueue
from quotas.policy.kueue.multikueue import FLEET_KINDS, read_fleets
from quotas.policy.kueue.target import LABEL_CLUSTER
from quotas.policy.violations import PolicyViolationError
from quotas.services.kueue_import import kueue_import


class Command(BaseCommand):
    help = (
        "Build units, flavors, quotas and namespace bindings from existing Kueue objects: a directory of "
        "YAML files or a live cluster. All or nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--from-dir", type=Path, help="directory of Kueue v1beta2 YAML (*.yaml, *.yml)")
        source.add_argument("--from-cluster", action="store_true", help="read the objects from --cluster itself")
        parser.add_argument("--cluster", required=True, help="the Allot cluster to import into (created if new)")
        parser.add_argument("--connection-ref", default="", help="for a new cluster: kubeconfig:/path, in-cluster …")
        parser.add_argument("--reason", default="adopted from an existing Kueue setup")
        parser.add_argument(
            "--fleet",
            action="store_true",
            help="the cluster is a MultiKueue manager: set up its fleet from its MultiKueueConfig and "
            "MultiKueueClusters (the workers must be Allot clusters already; import the tree from a worker)",
        )
        parser.add_argument(
            "--accept-notes",
            action="store_true",
            help="import although some settings cannot be carried over (each is listed as a note first)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            cluster = services.cluster_set(
                actor=None,
                reason=options["reason"],
                name=options["cluster"],
                kind=ClusterKind.KUBERNETES,
                connection_ref=options["connection_ref"],
            )
        objects = self._from_dir(options["from_dir"]) if options["from_dir"] else self._from_cluster(cluster)
        if options["fleet"]:
            self._fleet(cluster, objects, options["reason"])
            return
        losses = read_kueue(objects).losses
        if losses and not options["accept_notes"]:
            for loss in losses:
                self.stdout.write(f"would change: {loss}")
            raise CommandError(
                f"{len(losses)} setting(s) above would change meaning or be lost on import; nothing was imported. "
                f"Read them, then run again with --accept-notes (or change the objects first)."
            )
        try:
            result = kueue_import(actor=None, reason=options["reason"], cluster=cluster, objects=objects)
        except InputError as exc:
            raise CommandError(str(exc)) from exc
        except PolicyViolationError as exc:
            raise CommandError(
                f"the objects break Allot's invariants; nothing was imported:\n{exc.as_lines()}"
            ) from exc
        for note in result.notes:
            self.stdout.write(f"note: {note}")
        self.stdout.write(
            f"imported {result.units} units, {result.quotas} quotas, {result.flavors} flavors, "
            f"{result.namespaces} namespaces into {cluster.name}"
        )

    def _from_dir(self, directory: Path) -> list[dict[str, Any]]:
        if not directory.is_dir():
            raise CommandError(f"{directory} is not a directory")
        objects = []
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            try:
                objects += [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
            except yaml.YAMLError as exc:
                raise CommandError(f"{path}: not valid YAML: {exc}") from exc
        return objects

    def _fleet(self, cluster: Cluster, objects: list[dict[str, Any]], reason: str) -> None:
        fleets, notes = read_fleets(objects, cluster.name)
        for note in notes:
            self.stdout.write(f"note: {note}")
        if not fleets:
            raise CommandError(f"{cluster.name} has no MultiKueueConfig: it is not a MultiKueue manager")
        known = {c.name: c for c in Cluster.objects.all()}
        for fleet in fleets:
            missing = [w.cluster for w in fleet.workers if w.cluster not in known]
            if missing:
                raise CommandError(
                    f"fleet {fleet.name} lists {', '.join(missing)}, not clusters of Allot's yet: add each (or import "
                    "its tree with allot_import_kueue --cluster <worker> --from-cluster), then run this again"
                )
            try:
                workers = [(known[w.cluster], w.kubeconfig_secret) for w in fleet.workers]
                automated = fleet.quota_automation
                services.fleet_set(
                    actor=None,
                    reason=reason,
                    name=fleet.name,
                    manager=cluster,
                    workers=workers,
                    quota_automation=automated,
                )
            except InputError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(
                f"fleet {fleet.name}: manager {cluster.name}, workers {', '.join(w.cluster for w in fleet.workers)}"
            )

    def _from_cluster(self, cluster: Cluster) -> list[dict[str, Any]]:
        try:
            client = KueueClient(api_client_for(cluster.connection_ref))
            objects = [obj for kind in PLURALS if kind not in FLEET_KINDS for obj in client.list_all(kind)]
        except (ValueError, ClusterCallError) as exc:
            raise CommandError(f"cannot read {cluster.name}: {exc}") from exc
        for kind in FLEET_KINDS:  # only a MultiKueue manager serves these
            try:
                objects += client.list_all(kind)
            except ClusterCallError:
                break
        # objects Allot compiled for another of its clusters on this API server are that cluster's, not a site's
        others = [o for o in objects if _compiled_for(o) not in (None, cluster.name)]
        if others:
            names = sorted({str(_compiled_for(o)) for o in others})
            self.stdout.write(
                f"left out {len(others)} object(s) Allot compiled for {', '.join(names)} on the same API server"
            )
        return [o for o in objects if _compiled_for(o) in (None, cluster.name)]


def _compiled_for(obj: dict[str, Any]) -> str | None:
    """The Allot cluster an object was compiled for (its allot.dev/cluster label), or None."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CLUSTER)
    return str(value) if value else None
