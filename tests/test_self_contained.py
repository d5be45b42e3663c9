"""The repository is self-contained: nothing in it reads data from outside the checkout."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKPLACE = "shared"  # the workplace's folder beside the checkout (named once, so this guard reads nothing there)
OUTSIDE = re.compile(
    rf"\.\./{WORKPLACE}|parent\s*/\s*\"{WORKPLACE}\"|\"{WORKPLACE}\"\s*/\s*\"reference\"|ALLOT_{WORKPLACE.upper()}_DIR"
)


def test_no_tracked_file_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        if name == "tests/test_self_contained.py" or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        offenders += [
            f"{name}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE.search(line) and not (name == ".ci/run" and CONTROL_PLANE.search(line))
        ]
    assert offenders == [], f"these lines read or link outside the repository: {offenders}"


KUBE_ASSETS = f"../{WORKPLACE}/kube-assets"
CONTROL_PLANE = re.compile(rf"ALLOT_KUBE_ASSETS|{re.escape(KUBE_ASSETS)}")
"""The one exception: .ci/run points the control-plane setting at the workplace's kube-assets (its binaries
are not the repository's to carry); nothing else in .ci/run, and nothing elsewhere, may look outside."""


def test_only_ci_points_the_control_plane_setting_outside_and_at_kube_assets_only():
    text = (REPO / ".ci" / "run").read_text()
    outside = [line for line in text.splitlines() if OUTSIDE.search(line)]
    assert outside and all(KUBE_ASSETS in line for line in outside), outside


def test_the_bundled_crds_are_installed_as_package_data():
    from django.conf import settings

    from quotas.kueue_crds import CRD_DIR, KINDS

    assert str(CRD_DIR) == settings.ALLOT_KUBERNETES_CRD_DIR
    assert sorted(p.name for p in CRD_DIR.glob("kueue.x-k8s.io_*.yaml")) == [f"kueue.x-k8s.io_{k}.yaml" for k in KINDS]


def test_refreshing_the_crds_from_a_release_manifest_keeps_the_kinds_allot_writes(tmp_path):
    from quotas.kueue_crds import CRD_DIR, KINDS
    from quotas.kueue_crds.refresh import main

    bundled = {k: (CRD_DIR / f"kueue.x-k8s.io_{k}.yaml").read_text() for k in KINDS}
    manifest = tmp_path / "manifests.yaml"
    service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: kueue-webhook-service\n"
    manifest.write_text("---\n" + "\n---\n".join([service, *bundled.values()]))
    out = tmp_path / "crds"
    out.mkdir()
    assert main([str(manifest), "--version", "v9.9.9", "--into", str(out)]) == 0
    assert {k: (out / f"kueue.x-k8s.io_{k}.yaml").read_text() for k in KINDS} == bundled
    assert "version: v9.9.9" in (out / "VERSION").read_text()

    partial = tmp_path / "partial.yaml"
    partial.write_text(bundled["cohorts"])
    assert main([str(partial), "--version", "v9.9.9", "--into", str(tmp_path / "crds")]) == 1  # nothing half-written
