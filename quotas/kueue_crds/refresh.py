"""Refresh the bundled Kueue CRDs from a Kueue checkout or a release manifest.

    python -m quotas.kueue_crds.refresh ~/src/kueue/config/components/crd/bases --commit <sha> --version v0.x.y
    python -m quotas.kueue_crds.refresh manifests.yaml --version v0.x.y    # a release's manifests.yaml

Keeps only the CRDs Allot compiles to (KINDS), writes them unchanged, and records the source in
VERSION. Run the test suite afterwards: the golden files and the validation tests say what changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from quotas.kueue_crds import CRD_DIR, KINDS


def _documents(source: Path) -> dict[str, str]:
    """kind plural -> YAML text of its CRD, from a folder of CRD files or one multi-document file."""
    found: dict[str, str] = {}
    texts = [p.read_text() for p in sorted(source.glob("kueue.x-k8s.io_*.yaml"))] if source.is_dir() else None
    if texts is None:
        texts = [doc for doc in source.read_text().split("\n---") if doc.strip()]
    for text in texts:
        doc = yaml.safe_load(text)
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec") or {}
        if spec.get("group") == "kueue.x-k8s.io" and spec.get("names", {}).get("plural") in KINDS:
            found[spec["names"]["plural"]] = _normalised(text)
    return found


def _normalised(text: str) -> str:
    """One document as controller-gen writes it: a leading ``---`` line, the body, one newline."""
    body = text.strip()
    while body.startswith("---"):
        body = body[3:].strip()
    return f"---\n{body}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="config/components/crd/bases of a Kueue checkout, or manifests.yaml")
    parser.add_argument("--version", required=True, help="Kueue version or git describe of the source")
    parser.add_argument("--commit", default="", help="Kueue commit of the source, if known")
    parser.add_argument("--into", type=Path, default=CRD_DIR, help="where to write them (default: the bundled folder)")
    args = parser.parse_args(argv)
    found = _documents(args.source)
    missing = sorted(set(KINDS) - set(found))
    if missing:
        print(f"{args.source}: no CRD for {', '.join(missing)}; nothing was changed", file=sys.stderr)
        return 1
    for plural, text in found.items():
        (args.into / f"kueue.x-k8s.io_{plural}.yaml").write_text(text)
    (args.into / "VERSION").write_text(f"version: {args.version}\ncommit: {args.commit or 'unknown'}\n")
    print(
        f"wrote {len(found)} CRDs to {args.into}; update KUEUE_VERSION/KUEUE_COMMIT in __init__.py and run ./dev test"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
