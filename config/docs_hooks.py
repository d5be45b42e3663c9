"""MkDocs hooks (mkdocs.yml ``hooks:``): the pages generated from the code, so they cannot drift.

- ``reference/configuration.md`` from the settings' own ``env_*`` calls (config/settings_doc.py);
- ``reference/api.md`` from the OpenAPI schema (config/api_doc.py);
- ``index.md`` from README.md and ``contributing.md`` from CONTRIBUTING.md, their ``docs/…`` links made
  relative to the site;
- ``screenshots/*.png`` from the browser tests' output (artifacts/screenshots/, written by
  tests/portal/test_browser*.py on every run). A screenshot a guide shows that the tests did not make
  stops the build when DOCS_REQUIRE_SCREENSHOTS=1 (``./dev test`` after the browser tests ran);
  otherwise (``./dev docs`` on a fresh checkout) a placeholder says how to make it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "artifacts" / "screenshots"
SHOT_LINK = re.compile(r"screenshots/([a-z0-9-]+\.png)")
PLACEHOLDER = "{name}: made by the browser tests (./dev test with Debian's chromium)"


def placeholder_png(text: str) -> bytes:
    """A real PNG saying how the picture is made (an SVG served as ``.png`` showed as a broken image)."""
    from io import BytesIO

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (760, 80), "#eeeeee")
    ImageDraw.Draw(image).text((16, 32), text, fill="#333333")
    out = BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("ALLOT_SECRET_KEY", "docs-build-only-not-a-secret")
    import django

    django.setup()


def _site_links(markdown: str) -> str:
    """README/CONTRIBUTING links into docs/ become site-relative (``docs/x.md`` → ``x.md``), and the
    link to CONTRIBUTING.md its page."""
    return re.sub(r"\]\(docs/", "](", markdown).replace("](CONTRIBUTING.md)", "](contributing.md)")


def _generated(config: Any, path: str, content: str | bytes) -> File:
    return File.generated(config, path, content=content)


def on_files(files: Files, config: Any) -> Files:
    from config.settings_doc import UndocumentedSetting, configuration_markdown

    try:
        files.append(_generated(config, "reference/configuration.md", configuration_markdown()))
    except UndocumentedSetting as exc:
        raise PluginError(f"configuration reference: {exc}") from exc
    _django()
    from config.api_doc import api_markdown

    files.append(_generated(config, "reference/api.md", api_markdown()))
    files.append(_generated(config, "index.md", _site_links((ROOT / "README.md").read_text())))
    files.append(_generated(config, "contributing.md", _site_links((ROOT / "CONTRIBUTING.md").read_text())))

    docs = Path(config["docs_dir"])
    wanted = sorted({name for md in docs.rglob("*.md") for name in SHOT_LINK.findall(md.read_text())})
    missing = [name for name in wanted if not (SHOTS / name).is_file()]
    if missing and os.environ.get("DOCS_REQUIRE_SCREENSHOTS") == "1":
        raise PluginError(
            f"screenshots the guides show but no browser test made: {', '.join(missing)} "
            "(each is written by a test in tests/portal/test_browser*.py through Session.shot)"
        )
    for name in wanted:
        source = SHOTS / name
        if source.is_file():
            files.append(_generated(config, f"screenshots/{name}", source.read_bytes()))
        else:
            files.append(_generated(config, f"screenshots/{name}", placeholder_png(PLACEHOLDER.format(name=name))))
    return files
