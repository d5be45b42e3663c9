"""The documentation site works where GPU fleets live (issue #42): no page asks Google Fonts for
anything (air-gapped sites), and every picture a guide shows is a real PNG, on a fresh checkout too
(the placeholder was an SVG served as `.png`: a broken image in every browser)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from config.docs_hooks import placeholder_png

REPO = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_placeholder_is_a_png_saying_how_the_picture_is_made():
    assert placeholder_png("unit-page.png: made by the browser tests").startswith(PNG)


def test_the_built_site_fetches_nothing_from_google_and_every_picture_is_a_png(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("DOCS_REQUIRE_SCREENSHOTS", None)
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)], cwd=REPO, env=env, check=True
    )
    pages = list(site.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page
    pictures = list((site / "screenshots").glob("*.png"))
    assert pictures and all(p.read_bytes().startswith(PNG) for p in pictures)
