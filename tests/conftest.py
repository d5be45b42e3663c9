"""Shared test fixtures. Server-backed tests are marked (postgres, redis); see pyproject markers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.kube_cluster import assets_problem as kube_assets_problem

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """``tests/fixtures``: real captured outputs (see its README for where each came from)."""
    return FIXTURES


def _database_vendor() -> str:
    from django.db import connection

    return connection.vendor


def _slurm_answers() -> bool:
    import shutil
    import subprocess

    if not shutil.which("sacctmgr"):
        return False
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], capture_output=True, timeout=20, check=False
    )
    return done.returncode == 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Server-backed tests need their server. Where it is absent they are skipped with the reason,
    unless ALLOT_REQUIRE_SERVERS=1 (set by .ci/run), where its absence fails the run."""
    if os.environ.get("ALLOT_REQUIRE_SERVERS") == "1":
        return
    have = {
        "postgres": os.environ.get("DATABASE_URL", "").startswith("postgres"),
        "redis": bool(os.environ.get("REDIS_URL")),
        "browser": Path(os.environ.get("ALLOT_CHROMIUM", "/usr/bin/chromium")).exists(),
        "slurm": _slurm_answers(),
        "kubectl": shutil.which("kubectl") is not None,
        "prometheus": shutil.which("prometheus") is not None,
        "kube": kube_assets_problem() is None,
        "netns": os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("nginx") is not None,
    }
    how = {
        "postgres": "set DATABASE_URL",
        "redis": "set REDIS_URL",
        "browser": "apt-get install chromium",
        "slurm": "start it with deploy/slurm/local-slurm.sh",
        "kubectl": "install kubectl (it renders deploy/kubernetes with kubectl kustomize)",
        "prometheus": "apt-get install prometheus",
        "kube": kube_assets_problem() or "",
        "netns": "run as root with iproute2 and nginx (apt-get install nginx)",
    }
    for item in items:
        for marker, present in have.items():
            if item.get_closest_marker(marker) and not present:
                item.add_marker(pytest.mark.skip(reason=f"needs {marker}: {how[marker]}"))


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Tests sign in with throwaway passwords: skip the deliberate slowness of PBKDF2."""
    from django.conf import settings
    from django.test import override_settings

    if not settings.configured:  # pure-core runs (-p no:django)
        yield
        return
    # and no enforcement queued by every committed edit (the tests of it turn it on where they need it)
    with override_settings(
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"], ALLOT_ENFORCE_ON_CHANGE=False
    ):
        yield


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache, as its database starts empty: what one test cached (a
    plan under a usage version) is never served to another that wrote the same tree."""
    from django.conf import settings

    if settings.configured:
        from django.core.cache import cache

        cache.clear()
    yield


@pytest.fixture(autouse=True)
def _decision_lines():
    """The webhook's refusal lines a test made are written to its own captured stderr when it ends (shown with
    its failure), not all at once when the run exits (admission.lines writes what waits at exit)."""
    yield
    from admission.lines import LINES

    LINES.flush()


@pytest.fixture
def admin_user(db):
    from tests.factories import AdminFactory

    return AdminFactory(username="platform-admin")


@pytest.fixture
def second_admin(db):
    """Another platform admin: who approves a change request another asked for (four eyes)."""
    from tests.factories import AdminFactory

    return AdminFactory(username="second-admin")


@pytest.fixture
def org(db, admin_user):
    """A small tree built through the services:

    acme (GPU 100) → research (60, burst 20) → nlp (30, b10) → llm (20, b10)
                                             → vision (20, b10)
                   → ops (30)
    on flavor west/a100: 120 devices, 10 headroom, 10 reserved → 100 reclaimable.
    """
    from quotas import services
    from quotas.models import ClusterKind
    from quotas.policy import Resource

    def q(unit, g, b=0, lend=0):
        return services.QuotaChange(unit.pk, flavor.pk, Resource.GPU, g, b, lend)

    actor, why = admin_user, "test fixture"
    cluster = services.cluster_set(actor=actor, reason=why, name="west", kind=ClusterKind.KUBERNETES)
    slurm = services.cluster_set(actor=actor, reason=why, name="lab", kind=ClusterKind.SLURM)
    flavor = services.flavor_set(
        actor=actor,
        reason=why,
        cluster=cluster,
        name="a100",
        accelerator_model="A100",
        device_memory_gb=80,
        physical_devices=120,
        headroom_devices=10,
    )
    services.reservation_set(actor=actor, reason=why, flavor=flavor, name="serving", devices=10)
    contract = services.contract_set(
        actor=actor,
        reason=why,
        name="standard",
        reclaim_within=900,
        grace_period=120,
        min_run_window=300,
        checkpoint_every=900,
        measured_exit=60,
    )
    acme = services.org_unit_create(
        actor=actor, reason=why, parent=None, kind="organisation", slug="acme", contract=contract
    )
    research = services.org_unit_create(actor=actor, reason=why, parent=acme, kind="department", slug="research")
    nlp = services.org_unit_create(actor=actor, reason=why, parent=research, kind="team", slug="nlp")
    vision = services.org_unit_create(actor=actor, reason=why, parent=research, kind="team", slug="vision")
    llm = services.org_unit_create(actor=actor, reason=why, parent=nlp, kind="project", slug="llm")
    ops = services.org_unit_create(actor=actor, reason=why, parent=acme, kind="department", slug="ops")
    services.quota_set_bulk(actor=actor, reason=why, changes=[q(acme, 100)])
    services.quota_set_bulk(actor=actor, reason=why, changes=[q(research, 60, 20, 60), q(ops, 30)])
    services.quota_set_bulk(actor=actor, reason=why, changes=[q(nlp, 30, 10, 15), q(vision, 20, 10, 10)])
    services.quota_set_bulk(actor=actor, reason=why, changes=[q(llm, 20, 10)])
    return type(
        "Org",
        (),
        {
            "cluster": cluster,
            "slurm": slurm,
            "flavor": flavor,
            "contract": contract,
            "acme": acme,
            "research": research,
            "nlp": nlp,
            "vision": vision,
            "llm": llm,
            "ops": ops,
            "admin": actor,
        },
    )


@pytest.fixture(scope="session")
def crd_schemas():
    """The real Kueue CRDs bundled in quotas/kueue_crds."""
    import yaml

    from quotas.kueue_crds import CRD_DIR
    from quotas.policy.kueue.schema import CrdSchemas

    return CrdSchemas(yaml.safe_load(f.read_text()) for f in sorted(CRD_DIR.glob("kueue.x-k8s.io_*.yaml")))


@pytest.fixture
def demo(db):
    """The demo organisation (as `./dev run` loads it); returns its Kubernetes cluster."""
    from django.core.management import call_command

    from quotas.models import Cluster

    call_command("allot_demo")
    return Cluster.objects.get(name="k8s-west")


@pytest.fixture
def dcgm_exporter():
    """An exporter serving real dcgm-exporter series with the values a test sets (tests/dcgm_prometheus.py)."""
    from tests.dcgm_prometheus import Exporter

    exporter = Exporter()
    yield exporter
    exporter.close()


@pytest.fixture
def prometheus(dcgm_exporter):
    """Debian's Prometheus on loopback, scraping ``dcgm_exporter`` every second; a new one (and an
    empty database) per test, so what one test served never shows in another's answers."""
    from tests.dcgm_prometheus import PrometheusServer

    server = PrometheusServer(dcgm_exporter)
    yield server
    server.close()


@pytest.fixture(scope="session")
def kube_plane(tmp_path_factory):
    """A real control plane (etcd, kube-apiserver, kube-controller-manager, Kueue) for the whole session
    (tests/kube_cluster.py); tests marked ``kube`` take a namespace and queue names of their own."""
    from tests.kube_cluster import start_for_session

    problem = kube_assets_problem()
    if problem:
        pytest.fail(problem) if os.environ.get("ALLOT_REQUIRE_SERVERS") == "1" else pytest.skip(problem)
    plane = start_for_session(tmp_path_factory.mktemp("kube"))
    yield plane
    plane.stop()
