"""The configuration reference, generated from the settings module itself so it cannot drift.

Every ``env_*("NAME", default, help=…)`` call in config/settings.py and config/celery.py is one row
(read from their source, so settings read only on some paths — single sign-on, HTTPS — are listed
too); the detectors' thresholds, read as ``ALLOT_FINDINGS_<NAME>``, are rows from the fields of
``accounting.policy.findings.Thresholds`` and their docstrings. A call without a help text, or a
threshold without a docstring, is an error: the docs build (``mkdocs build --strict``) fails on it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (ROOT / "config" / "settings.py", ROOT / "config" / "celery.py")
THRESHOLDS = ROOT / "accounting" / "policy" / "findings.py"
KINDS = {
    "env_str": "text",
    "env_bool": "true / false",
    "env_int": "whole number",
    "env_float": "number",
    "env_list": "comma-separated",
}
GROUPS = (  # (prefix, heading), first match wins; the order of the reference
    ("ALLOT_ADMISSION_", "Admission webhooks"),
    ("ALLOT_WEBHOOK_", "Admission webhooks"),
    ("ALLOT_KUBERNETES_", "Kueue clusters"),
    ("ALLOT_SLURM_", "Slurm clusters"),
    ("ALLOT_ENFORCE_", "Enforcement"),
    ("ALLOT_POLICY_", "Enforcement"),
    ("ALLOT_USAGE_", "Usage accounting"),
    ("ALLOT_DCGM_", "Usage accounting"),
    ("ALLOT_PROGRESS_", "Usage accounting"),
    ("ALLOT_METRICS_", "Usage accounting"),
    ("ALLOT_SHOWBACK_", "Showback, findings, plan and budgets"),
    ("ALLOT_FINDINGS_", "Showback, findings, plan and budgets"),
    ("ALLOT_PLAN_", "Showback, findings, plan and budgets"),
    ("ALLOT_BUDGET_", "Showback, findings, plan and budgets"),
    ("ALLOT_CURRENCY", "Showback, findings, plan and budgets"),
    ("ALLOT_CELERY_", "Processes: database, broker, cache, tasks"),
    ("ALLOT_BEAT_", "Processes: database, broker, cache, tasks"),
    ("ALLOT_CACHE_", "Processes: database, broker, cache, tasks"),
    ("DATABASE_URL", "Processes: database, broker, cache, tasks"),
    ("REDIS_URL", "Processes: database, broker, cache, tasks"),
    ("ALLOT_OIDC_", "Sign-in and security"),
    ("ALLOT_LOGIN_", "Sign-in and security"),
    ("ALLOT_HTTPS", "Sign-in and security"),
    ("ALLOT_HSTS_", "Sign-in and security"),
    ("ALLOT_ALLOWED_HOSTS", "Sign-in and security"),
    ("ALLOT_CSRF_", "Sign-in and security"),
    ("ALLOT_SECRET_KEY", "Sign-in and security"),
    ("ALLOT_MAIL_", "Mail"),
    ("ALLOT_PORTAL_URL", "Mail"),
    ("ALLOT_NGINX_", "Container and test harness (read outside Python)"),
    ("", "General"),
)


class UndocumentedSetting(ValueError):
    """A setting read without a help text: say which, and where."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str
    default: str
    help: str
    where: str

    @property
    def group(self) -> str:
        return next(heading for prefix, heading in GROUPS if self.name.startswith(prefix))


def _default(call: ast.Call, source: str, keywords: dict[str, ast.expr]) -> str:
    if "shown" in keywords:
        return str(ast.literal_eval(keywords["shown"]))
    if "required" in keywords and ast.literal_eval(keywords["required"]):
        return "required"
    if len(call.args) < 2:
        return "empty"
    node = call.args[1]
    try:
        value = ast.literal_eval(node)
    except ValueError:  # computed from other settings without a ``shown``: print the expression
        return f"`{ast.get_source_segment(source, node)}`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, list):
        return f"`{','.join(value)}`" if value else "empty"
    if value in ("", None):
        return "empty"
    return f"`{value}`"


def declared_settings(sources: tuple[Path, ...] = SOURCES) -> list[Setting]:
    """Every variable an ``env_*`` call reads, once (the call with the help text), in source order."""
    found: dict[str, Setting] = {}
    for path in sources:
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in KINDS):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant):
                raise UndocumentedSetting(f"{path.name}:{node.lineno}: give the variable's name as a literal")
            name = str(node.args[0].value)
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            text = str(ast.literal_eval(keywords["help"])) if "help" in keywords else ""
            if name in found and not text:
                continue  # read again (a check beside the setting): the first call documents it
            if not text:
                raise UndocumentedSetting(
                    f"{name} ({path.name}:{node.lineno}) has no help text: add help=… to its {node.func.id} call"
                )
            default = _default(node, source, keywords)
            found[name] = Setting(name, KINDS[node.func.id], default, text, f"{path.name}:{node.lineno}")
    return sorted(found.values(), key=lambda s: (s.where.split(":")[0], int(s.where.split(":")[1])))


def threshold_settings(path: Path = THRESHOLDS) -> list[Setting]:
    """``ALLOT_FINDINGS_<FIELD>`` for each field of Thresholds, with its default and its docstring."""
    source = path.read_text()
    tree = ast.parse(source)
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Thresholds"]
    rows = []
    body = cls.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        doc = after.value.value if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) else None
        name = f"ALLOT_FINDINGS_{node.target.id.upper()}"
        if not isinstance(doc, str):
            raise UndocumentedSetting(
                f"{name}: Thresholds.{node.target.id} ({path.name}:{node.lineno}) has no docstring"
            )
        kind = "number" if isinstance(ast.literal_eval(node.value), float) else "whole number"  # type: ignore[arg-type]
        default = f"`{ast.literal_eval(node.value)}`"  # type: ignore[arg-type]
        rows.append(Setting(name, kind, default, " ".join(doc.split()), f"{path.name}:{node.lineno}"))
    return rows


OUTSIDE_PYTHON = (  # read by the container's entrypoint, the webhook's nginx, a manifest, the test harness
    Setting(
        "ALLOT_APP_DIR", "text", "`/app`", "Where the image holds Allot (entrypoint).", "deploy/container/entrypoint.sh"
    ),
    Setting(
        "ALLOT_ROLE_FILE",
        "text",
        "`/tmp/allot-role`",
        "Where the entrypoint writes the container's role (its probes read it).",
        "deploy/container/entrypoint.sh",
    ),
    Setting(
        "ALLOT_MIGRATION_WAIT_SECONDS",
        "whole number",
        "`600`",
        "How long the web, worker and beat roles wait for the migrate job's schema before giving up.",
        "deploy/container/entrypoint.sh",
    ),
    Setting(
        "ALLOT_ENTRYPOINT_DRY_RUN",
        "0 / 1",
        "`0`",
        "Print the role's command instead of running it (the tests).",
        "deploy/container/entrypoint.sh",
    ),
    Setting(
        "ALLOT_NGINX_LISTEN",
        "text",
        "`8443 ssl`",
        "The webhook's nginx listen directive.",
        "deploy/kubernetes/base/nginx-webhook.conf.template",
    ),
    Setting(
        "ALLOT_NGINX_UPSTREAM",
        "text",
        "`127.0.0.1:8000`",
        "Where the webhook's nginx sends reviews (the gunicorn workers).",
        "deploy/kubernetes/base/nginx-webhook.conf.template",
    ),
    Setting(
        "ALLOT_NGINX_TLS_INCLUDE",
        "text",
        "`/etc/nginx/allot/tls.conf`",
        "The nginx file with the webhook's certificate.",
        "deploy/kubernetes/base/nginx-webhook.conf.template",
    ),
    Setting(
        "ALLOT_WATCH_CLUSTER",
        "text",
        "`k8s-west`",
        "The cluster a usage-watcher Deployment follows (one per cluster).",
        "deploy/kubernetes/base/usage-watcher.yaml",
    ),
    Setting(
        "ALLOT_URL",
        "a URL",
        "unset",
        "Where `kubectl allot why` and `allot-why` (on a researcher's machine) find Allot, e.g. https://allot.example.org.",
        "accounting/why.py",
    ),
    Setting(
        "ALLOT_TOKEN",
        "text",
        "unset",
        "The researcher's own API token for `kubectl allot why` and `allot-why`: they show what its owner may read.",
        "accounting/why.py",
    ),
    Setting(
        "ALLOT_CLUSTER",
        "text",
        "unset (give `--cluster`)",
        "The cluster's name in Allot for `kubectl allot why` and `allot-why`.",
        "accounting/why.py",
    ),
    Setting(
        "ALLOT_CHROMIUM",
        "text",
        "`/usr/bin/chromium`",
        "The Chromium the browser tests drive (never a downloaded one).",
        "tests/conftest.py",
    ),
    Setting(
        "ALLOT_REQUIRE_SERVERS",
        "0 / 1",
        "`0`",
        "A test that needs a missing server fails instead of skipping (.ci/run sets 1).",
        "tests/conftest.py",
    ),
    Setting(
        "ALLOT_KUBE_ASSETS",
        "a folder",
        "unset (the tests marked kube are skipped, saying how to get the assets)",
        "The real control plane for the tests marked kube: kube-apiserver.xz, kube-controller-manager.xz, kueue.xz "
        "and kueue-v*/crds (etcd comes from Debian's etcd-server). .ci/run points it at the workplace's kube-assets.",
        "tests/kube_cluster.py",
    ),
    Setting(
        "ALLOT_TEST_KUEUE_SHARING",
        "fair / classic",
        "`fair`",
        "How the test control plane's Kueue shares unused quota: its fairSharing configuration on or off.",
        "tests/kube_cluster.py",
    ),
)


def all_settings() -> list[Setting]:
    return declared_settings() + threshold_settings() + list(OUTSIDE_PYTHON)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration_markdown() -> str:
    """The reference page: a table per group, each row's name, kind, default and meaning."""
    rows = all_settings()
    groups: dict[str, list[Setting]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    out = [
        "# Configuration",
        "",
        "Every setting comes from the environment, read only by `config/env.py`. This page is generated",
        "from the settings module's own calls (`config/settings_doc.py`), so it lists exactly what Allot",
        f"reads: {len(rows)} variables. Values that are lists are comma-separated.",
        "",
    ]
    order = list(dict.fromkeys(heading for _, heading in GROUPS))
    for heading in order:
        if heading not in groups:
            continue
        out += [f"## {heading}", "", "| variable | kind | default | meaning |", "| --- | --- | --- | --- |"]
        for s in groups[heading]:
            out.append(f"| `{s.name}` | {s.kind} | {_cell(s.default)} | {_cell(s.help)} |")
        out.append("")
    return "\n".join(out)
