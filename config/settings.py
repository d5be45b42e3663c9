"""Allot settings. Every value comes from the environment through config.env; the reference
(docs/reference/configuration.md) is generated from these calls by config/settings_doc.py.

Embedded defaults (SQLite, tasks run in-process) make a first run need no other server. Set
DATABASE_URL and REDIS_URL for PostgreSQL and a real Celery broker.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from accounting.policy.findings import Thresholds
from accounting.policy.plan_model import Settings as PlanSettings
from admission.policy.model import DEFAULT_CONTROLLERS
from config.env import env_bool, env_float, env_int, env_list, env_str
from quotas.kueue_crds import CRD_DIR as BUNDLED_KUEUE_CRDS

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(
    env_str(
        "ALLOT_VAR_DIR",
        str(BASE_DIR / "var"),
        help="Where the SQLite file and the collected static files live.",
        shown="var/ in the checkout",
    )
)

# --- core -----------------------------------------------------------------------------------
DEBUG = env_bool("ALLOT_DEBUG", False, help="Django's debug mode (./dev run sets it).")
_DEV_KEY = "allot-development-only-key-not-secret"
SECRET_KEY = env_str(
    "ALLOT_SECRET_KEY",
    _DEV_KEY if DEBUG else None,
    help="Django's secret key; generate one with python -c 'import secrets; print(secrets.token_urlsafe(50))'.",
    shown="required unless ALLOT_DEBUG",
)
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "ALLOT_SECRET_KEY must be set when ALLOT_DEBUG is off (generate one with "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`)"
    )
ALLOWED_HOSTS = env_list(
    "ALLOT_ALLOWED_HOSTS",
    ["127.0.0.1", "localhost", "testserver"],
    help="Host names this deployment answers to, comma-separated.",
)
CSRF_TRUSTED_ORIGINS = env_list(
    "ALLOT_CSRF_TRUSTED_ORIGINS",
    [],
    help="Origins trusted for form posts behind a proxy, e.g. https://allot.example.org.",
)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_htmx",
    "django_tables2",
    "axes",
    "quotas",
    "admission",
    "accounting",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files served by the app itself (collectstatic)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "quotas.middleware.InputRuleMiddleware",  # no NUL byte in a path, query or form field (400, not a 500)
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: it answers a locked-out sign-in
]

# --- security: sign-in throttling, Content-Security-Policy, HTTPS (ALLOT_LOGIN_*, ALLOT_HTTPS*) ----
# django-axes: after ALLOT_LOGIN_FAILURE_LIMIT failed sign-ins of one username from one address, that
# pair is locked out for ALLOT_LOGIN_LOCKOUT_MINUTES; each lockout and each unlock is in the audit
# trail; a platform admin unlocks with POST /api/v1/lockouts/unlock/ or `manage.py allot_unlock_login`.
AXES_FAILURE_LIMIT = env_int(
    "ALLOT_LOGIN_FAILURE_LIMIT",
    5,
    help=(
        "django-axes: failed sign-ins of one username from one address before that pair is paused"
        " (429, a page that says why; audited). Lift one with POST /api/v1/lockouts/unlock/ or "
        "manage.py allot_unlock_login."
    ),
)
AXES_COOLOFF_TIME = timedelta(
    minutes=env_int("ALLOT_LOGIN_LOCKOUT_MINUTES", 15, help="How long a paused sign-in stays paused.")
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# The portal loads nothing from another origin: scripts only from itself (no inline script), styles
# from itself plus inline style attributes (the charts), images from itself and data: URLs.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "worker-src": ["'self'", "blob:"],  # ReDoc's search runs in a worker
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Behind TLS (ALLOT_HTTPS, on by default when ALLOT_DEBUG is off): secure cookies, HSTS, redirect to
# https (not for /healthz and the webhooks' probes); ALLOT_HTTPS_PROXY_HEADER trusts a proxy's
# X-Forwarded-Proto when TLS ends there.
ALLOT_HTTPS = env_bool(
    "ALLOT_HTTPS",
    not DEBUG,
    help=(
        "Served over TLS: Secure cookies, HSTS and a redirect to https (never for /healthz or "
        "/admission/). manage.py check --deploy passes with no warning on the defaults."
    ),
    shown="true unless ALLOT_DEBUG",
)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = ALLOT_HTTPS
SECURE_SSL_REDIRECT = ALLOT_HTTPS and env_bool(
    "ALLOT_HTTPS_REDIRECT", True, help="Redirect plain http to https (with ALLOT_HTTPS)."
)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^admission/"]
SECURE_HSTS_SECONDS = (
    env_int("ALLOT_HSTS_SECONDS", 31_536_000, help="HSTS max-age (with ALLOT_HTTPS).") if ALLOT_HTTPS else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = ALLOT_HTTPS
# "preload" in the header only allows submitting the domain to the browsers' preload list (nothing is
# submitted by it); ALLOT_HSTS_PRELOAD=false drops it
SECURE_HSTS_PRELOAD = ALLOT_HTTPS and env_bool(
    "ALLOT_HSTS_PRELOAD", True, help="Ask browsers to preload HSTS (with ALLOT_HTTPS); false drops it."
)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool("ALLOT_HTTPS_PROXY_HEADER", False, help="Trust X-Forwarded-Proto from the TLS-terminating proxy."):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "quotas.portal.context.portal",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        env_str(
            "DATABASE_URL",
            f"sqlite:///{VAR_DIR / 'allot.sqlite3'}",
            help="The database, e.g. postgres://allot@db:5432/allot.",
            shown="SQLite at ALLOT_VAR_DIR/allot.sqlite3",
        ),
        conn_max_age=60,
    ),
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL: readers (the live check) never wait for a writer (a save); IMMEDIATE: a transaction takes the
    # write lock when it begins, so two at once queue (timeout) instead of failing "database is locked"
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "quotas:start"  # a lead lands on their unit(s)
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise also serves straight from the apps' static folders: the portal's htmx, the API docs and the
# admin work with debug off however the app is started (the image runs collectstatic as well).
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["quotas.api.permissions.ReadAuthenticatedWriteAdmin"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PARSER_CLASSES": [  # DRF's own three, the JSON one behind a size and nesting bound
        "quotas.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "quotas.api.pagination.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "quotas.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Allot API",
    "DESCRIPTION": "Quota and admission governance for shared GPU fleets. Quantities are in base "
    "units (devices, millicores, bytes) and accept Kubernetes quantity syntax on input.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "ClusterKindEnum": "quotas.models.ClusterKind",
        "UnitKindEnum": ["organisation", "department", "team", "project"],
        "SyncStatusEnum": "quotas.models.SyncStatus",
        "ChangeRequestStatusEnum": "quotas.models.ChangeRequestStatus",
    },
}

# --- Celery (ALLOT_CELERY_*) ----------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "", help="Celery's broker and result backend; empty: tasks run in-process.")
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = REDIS_URL or "cache+memory://"
# Without a broker, tasks run in-process at enqueue time (the embedded demo default).
CELERY_TASK_ALWAYS_EAGER = env_bool(
    "ALLOT_CELERY_EAGER",
    not REDIS_URL,
    help="Run tasks in the process that starts them.",
    shown="true without REDIS_URL",
)
# Edits reach the clusters by themselves: on commit of a policy change, every enabled cluster is synced
# (Slurm: the job_submit snapshot published too) after a short debounce. On by default with a broker;
# off in the demo (tasks in-process, clusters it cannot reach), where `manage.py allot_sync` does it.
ALLOT_ENFORCE_ON_CHANGE = env_bool(
    "ALLOT_ENFORCE_ON_CHANGE",
    bool(REDIS_URL),
    help="Sync every cluster when a policy change commits (after the debounce below).",
    shown="on with REDIS_URL",
)
ALLOT_ENFORCE_DELAY_SECONDS = env_int(
    "ALLOT_ENFORCE_DELAY_SECONDS", 10, help="Edits within this many seconds are enforced as one run."
)
ALLOT_ENFORCE_LOCK_SECONDS = env_int(
    "ALLOT_ENFORCE_LOCK_SECONDS", 900, help="The longest one enforcement run may hold its cluster's lock."
)
ALLOT_ENFORCE_LEASE_SECONDS = env_int(
    "ALLOT_ENFORCE_LEASE_SECONDS",
    30,
    help=(
        "How long a cluster's enforcement lock outlives its holder: a live run renews it every third of this, "
        "so a worker killed mid-run frees its cluster within this many seconds (a waiting run then goes ahead)."
    ),
)
# where each Slurm cluster's job_submit snapshot is written ({cluster}: its name; "" = not published)
ALLOT_SLURM_POLICY_OUT = env_str(
    "ALLOT_SLURM_POLICY_OUT",
    "",
    help=(
        "Where each Slurm cluster's job_submit snapshot is written on every enforced change "
        "({cluster}: its name, required while more than one Slurm cluster is enabled, else the snapshot is "
        "not written and the enforcement run says why); empty: not published."
    ),
)


def _cache_url(redis_url: str) -> str:
    """REDIS_URL's server, the next database number: ``cache.clear()`` must never empty the broker's."""
    base, _, db = redis_url.rstrip("/").rpartition("/")
    if redis_url.count("/") >= 3 and db.isascii() and db.isdigit():
        return f"{base}/{int(db) + 1}"
    return redis_url.rstrip("/") + "/1"


# The cache coordinates processes (enforcement's debounce marks and per-cluster locks), so in
# production it must be one store shared by the web, worker and beat processes of every machine.
ALLOT_CACHE_URL = env_str(
    "ALLOT_CACHE_URL",
    _cache_url(REDIS_URL) if REDIS_URL else "",
    help=(
        "The cache every process shares (enforcement's debounce marks and locks), in its own "
        "Redis database so clearing it never empties the broker's. Without it the cache is per "
        "process and ALLOT_ENFORCE_ON_CHANGE refuses to start."
    ),
    shown="REDIS_URL's server, the next database (…/0 → …/1); none without REDIS_URL",
)
if ALLOT_CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": ALLOT_CACHE_URL,
            "KEY_PREFIX": "allot",
        }
    }
elif ALLOT_ENFORCE_ON_CHANGE:
    raise ImproperlyConfigured(
        "ALLOT_ENFORCE_ON_CHANGE is on but no shared cache is configured: each process would keep its own "
        "debounce marks and locks, and edits would be lost between the web and the worker. Set REDIS_URL "
        "(or ALLOT_CACHE_URL=redis://host:6379/1), or turn ALLOT_ENFORCE_ON_CHANGE off"
    )
else:  # the embedded demo: one process, tasks in-process
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "allot"}}
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_STORE_EAGER_RESULT = True  # in-process tasks report their state too (a review build's progress)
# A task is acknowledged when it finishes, and requeued when its worker dies mid-task (OOM kill, node
# loss): every task is idempotent (a sync or an ingest run twice writes the result once), so
# redelivery never doubles work. The hard time limit stays below the broker's visibility timeout,
# so a slow task is never handed to a second worker while the first still runs.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("ALLOT_CELERY_SOFT_TIME_LIMIT", 600, help="A task's soft time limit, in seconds.")
CELERY_TASK_TIME_LIMIT = env_int(
    "ALLOT_CELERY_TIME_LIMIT",
    900,
    help="A task's hard time limit, in seconds; must stay below ALLOT_CELERY_VISIBILITY_TIMEOUT.",
)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int(
        "ALLOT_CELERY_VISIBILITY_TIMEOUT",
        3600,
        help="An unacknowledged task goes to another worker after this many seconds.",
    )
}
if CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] <= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        "ALLOT_CELERY_TIME_LIMIT must be below ALLOT_CELERY_VISIBILITY_TIMEOUT, or a slow task would run twice"
    )
ALLOT_BEAT_LOCK_SECONDS = env_int("ALLOT_BEAT_LOCK_SECONDS", 60, help="Expiry of the beat singleton lock in Redis.")
CELERY_TIMEZONE = "UTC"

# --- policy (ALLOT_POLICY_*) ----------------------------------------------------------------
ALLOT_POLICY_SCHEDULING_PASS_SECONDS = env_int(
    "ALLOT_POLICY_SCHEDULING_PASS_SECONDS",
    10,
    help="One scheduling pass, counted in contract feasibility (reclaim within N minutes).",
)

# --- Kubernetes (ALLOT_KUBERNETES_*) ----------------------------------------------------------
ALLOT_KUBERNETES_ENABLED = env_bool("ALLOT_KUBERNETES_ENABLED", True, help="Off switch for every Kubernetes sync.")
# Kueue CRDs to validate against before any apply: the bundled ones (quotas/kueue_crds/README.md), a
# folder of your own, or "cluster" to read them from each cluster's API server.
ALLOT_KUBERNETES_CRD_DIR = env_str(
    "ALLOT_KUBERNETES_CRD_DIR",
    str(BUNDLED_KUEUE_CRDS),
    help="The Kueue CRDs objects are validated against: a folder, or cluster to read each cluster's own.",
    shown="the bundled CRDs (quotas/kueue_crds/)",
)

# --- Slurm (ALLOT_SLURM_*) --------------------------------------------------------------------

# --- usage accounting (ALLOT_USAGE_*) -----------------------------------------------------------
ALLOT_USAGE_SLURM_OVERLAP_SECONDS = env_int(
    "ALLOT_USAGE_SLURM_OVERLAP_SECONDS", 3600, help="How far back each sacct ingest re-reads, for late records."
)
ALLOT_USAGE_SLURM_LOOKBACK_SECONDS = env_int(
    "ALLOT_USAGE_SLURM_LOOKBACK_SECONDS", 86400, help="How far back a Slurm cluster's first ingest reads."
)
# connections that rebuild a whole month of rollups side by side (PostgreSQL; each takes a share of the units)
ALLOT_USAGE_ROLLUP_WORKERS = env_int(
    "ALLOT_USAGE_ROLLUP_WORKERS", 2, help="Connections that rebuild a whole month of rollups side by side (PostgreSQL)."
)
ALLOT_KUEUE_CONFIG_MAP = env_str(
    "ALLOT_KUEUE_CONFIG_MAP",
    "kueue-system/kueue-manager-config",
    help="Where each Kueue cluster keeps Kueue's own configuration (namespace/name of its ConfigMap, key "
    "controller_manager_config.yaml): a sync reads it to say whether Kueue counts shared flavors' slices by weight.",
)
ALLOT_SLURM_TIMEZONE = env_str("ALLOT_SLURM_TIMEZONE", "UTC", help="The zone sacct prints its times in.")
ALLOT_METRICS_TOKEN = env_str(
    "ALLOT_METRICS_TOKEN",
    "",
    help="The bearer token Prometheus sends to GET /metrics/usage; empty: signed-in users only.",
)
ALLOT_SLURM_SACCT = env_str("ALLOT_SLURM_SACCT", "sacct", help="The sacct binary (a path where it is not on PATH).")
ALLOT_SLURM_SCONTROL = env_str(
    "ALLOT_SLURM_SCONTROL", "scontrol", help="The scontrol binary the hourly node sample (fragmentation index) runs."
)
ALLOT_SLURM_SQUEUE = env_str(
    "ALLOT_SLURM_SQUEUE", "squeue", help="The squeue binary: pending jobs' GPU shapes for the fragmentation index."
)
ALLOT_SLURM_QUEUE_SECONDS = env_int(
    "ALLOT_SLURM_QUEUE_SECONDS",
    10,
    help="Why a Slurm job waits: squeue is read again when the shared copy is older than this (seconds).",
)

# DCGM through Prometheus: which Prometheus holds each cluster's dcgm-exporter series ("cluster=url" pairs)
ALLOT_DCGM_PROMETHEUS = dict(pair.split("=", 1) for pair in env_list("ALLOT_DCGM_PROMETHEUS", []) if "=" in pair)
if len(ALLOT_DCGM_PROMETHEUS) != len(
    env_list(
        "ALLOT_DCGM_PROMETHEUS",
        [],
        help="cluster=url pairs: the Prometheus holding each cluster's dcgm-exporter series; empty: no DCGM source.",
    )
):
    raise ImproperlyConfigured("ALLOT_DCGM_PROMETHEUS: give cluster=url pairs, e.g. k8s-west=http://prometheus:9090")
ALLOT_DCGM_METRICS = env_list(
    "ALLOT_DCGM_METRICS",
    ["DCGM_FI_PROF_GR_ENGINE_ACTIVE:1", "DCGM_FI_DEV_GPU_UTIL:0.01"],
    help="Activity metrics in preference order, each with the scale that makes it a 0–1 ratio.",
)
# device memory in use (MiB), in preference order: dcgm-exporter 2.x+ and 1.x names (accounting.policy.dcgm MEMORY_DOC)
ALLOT_DCGM_MEMORY_METRICS = env_list(
    "ALLOT_DCGM_MEMORY_METRICS",
    ["DCGM_FI_DEV_FB_USED", "dcgm_fb_used"],
    help=(
        "Device memory in use (MiB), in preference order: each workload's hourly peak, for the "
        "over-specification finding."
    ),
)
ALLOT_PROGRESS_METRIC = env_str(
    "ALLOT_PROGRESS_METRIC",
    "allot_progress_steps_total",
    help="The step counter workloads report (measured productive device-hours).",
)
ALLOT_PROGRESS_RATE_METRIC = env_str(
    "ALLOT_PROGRESS_RATE_METRIC",
    "allot_progress_fault_free_steps_per_second",
    help="The fault-free step rate workloads report.",
)
ALLOT_DCGM_SCRAPE_SECONDS = env_int(
    "ALLOT_DCGM_SCRAPE_SECONDS", 30, help="The exporter's scrape interval (samples × interval = time covered)."
)
ALLOT_DCGM_TIMEOUT_SECONDS = env_int("ALLOT_DCGM_TIMEOUT_SECONDS", 30, help="The timeout of each PromQL query.")
ALLOT_USAGE_DCGM_OVERLAP_SECONDS = env_int(
    "ALLOT_USAGE_DCGM_OVERLAP_SECONDS", 7200, help="How many hours each DCGM read goes back over."
)
ALLOT_USAGE_DCGM_LOOKBACK_SECONDS = env_int(
    "ALLOT_USAGE_DCGM_LOOKBACK_SECONDS", 86400, help="How far back a cluster's first DCGM read goes."
)
# Showback: how each organisation charges what no unit holds or is promised (not_shared | guarantee | use):
# "acme=guarantee,not_shared" — org=rule pairs, a bare rule the default.
ALLOT_SHOWBACK_SHARED_COST = [
    tuple(p.split("=", 1)) if "=" in p else ("", p)
    for p in env_list(
        "ALLOT_SHOWBACK_SHARED_COST",
        ["not_shared"],
        help=(
            "How shared cost (idle capacity) is charged, per organisation: org=rule pairs and a "
            "default rule; rules: not_shared, guarantee, use."
        ),
    )
]
for _org, _rule in ALLOT_SHOWBACK_SHARED_COST:
    if _rule not in ("not_shared", "guarantee", "use"):
        raise ImproperlyConfigured(
            f"ALLOT_SHOWBACK_SHARED_COST: {_rule!r} for {_org or 'the default'} is not not_shared, guarantee or use"
        )
ALLOT_BACKTESTS_AT_ONCE = env_int(
    "ALLOT_BACKTESTS_AT_ONCE",
    2,
    help="How many backtests (POST /api/v1/backtest/, the what-if panel) run at once on the whole instance; "
    "each person runs one at a time. More wait: the API answers 429 with Retry-After. About one per core "
    "the web servers may spend on them.",
)
ALLOT_REQUESTS_SECOND_PERSON = env_bool(
    "ALLOT_REQUESTS_SECOND_PERSON",
    True,
    help="A change request is approved by someone other than who asked (four eyes): on by default; off only "
    "where one person runs the platform alone. Withdrawing your own request (reject) is always allowed.",
)
ALLOT_SHOWBACK_VISIBILITY = env_str(
    "ALLOT_SHOWBACK_VISIBILITY",
    "everyone",
    help="Who reads costs and findings: everyone, or leads (a lead reads their subtree; platform admins all).",
)
if ALLOT_SHOWBACK_VISIBILITY not in ("everyone", "leads"):
    raise ImproperlyConfigured("ALLOT_SHOWBACK_VISIBILITY: use everyone or leads")


# Findings: each detector threshold as ALLOT_FINDINGS_<NAME> (accounting/policy/findings.py Thresholds; the
# defaults come from real tools), and how long a dismissed finding stays quiet.
def _finding_defaults() -> dict[str, object]:
    return asdict(Thresholds())


ALLOT_FINDINGS_THRESHOLDS = {
    name: (float if isinstance(default, float) else int)(os.environ[f"ALLOT_FINDINGS_{name.upper()}"])
    for name, default in _finding_defaults().items()
    if f"ALLOT_FINDINGS_{name.upper()}" in os.environ
}
ALLOT_FINDINGS_OPERATOR_EMAILS = env_list(
    "ALLOT_FINDINGS_OPERATOR_EMAILS",
    [],
    help="Who is told of fleet-wide findings, which belong to no unit (fragmentation, a stranded pool): the fleet's "
    "operators' addresses; empty: they are only in a platform admin's findings inbox.",
)
ALLOT_FINDINGS_SNOOZE_DAYS = env_int("ALLOT_FINDINGS_SNOOZE_DAYS", 30, help="How long a dismissed finding stays quiet.")
# The governance plan (accounting/policy/planner.py Settings): how far one cycle may move a guarantee —
# ALLOT_PLAN_MAX_MOVE_SHARE of it (default 0.5) or ALLOT_PLAN_MAX_MOVE_MIN devices (default 8, one node),
# whichever is more: a guarantee is a promise people planned against, so it changes by steps they can
# follow — and how often a device must be needed to be guaranteed (ALLOT_PLAN_MIN_NEED_SHARE, default
# 0.05: the guarantee covers the 95th percentile of need; rarer peaks borrow).
ALLOT_PLAN = {
    "max_move_share": env_float(
        "ALLOT_PLAN_MAX_MOVE_SHARE",
        0.5,
        help=(
            "The governance plan moves a guarantee by at most this share of itself in one cycle "
            "(or ALLOT_PLAN_MAX_MOVE_MIN devices, whichever is more)."
        ),
    ),
    "max_move_min": env_int(
        "ALLOT_PLAN_MAX_MOVE_MIN",
        8,
        help="The governance plan may always move a guarantee by this many devices (one node).",
    ),
    "min_need_share": env_float(
        "ALLOT_PLAN_MIN_NEED_SHARE",
        0.05,
        help=(
            "A device is guaranteed when needed in at least this share of the period (0.05: the "
            "95th percentile of need; rarer peaks borrow)."
        ),
    ),
}
_plan_problems = PlanSettings(**ALLOT_PLAN).problems()  # type: ignore[arg-type]  # floats and ints as typed
if _plan_problems:
    raise ImproperlyConfigured("ALLOT_PLAN_*: " + "; ".join(_plan_problems))
# GPU-hour budgets (quotas/policy/budgets.py): the burn rate behind the forecast is the spend of the last
# ALLOT_BUDGET_TRAILING_HOURS (default 72, 1-744); the evaluation runs after each hourly rollup.
ALLOT_BUDGET_TRAILING_HOURS = env_int(
    "ALLOT_BUDGET_TRAILING_HOURS",
    72,
    help="The hours behind a GPU-hour budget's burn rate and forecast (hours with telemetry count), 1–744.",
)
if not 1 <= ALLOT_BUDGET_TRAILING_HOURS <= 744:
    raise ImproperlyConfigured(
        f"ALLOT_BUDGET_TRAILING_HOURS={ALLOT_BUDGET_TRAILING_HOURS} is outside 1-744: "
        "give the hours behind the burn rate"
    )
# Monthly governance reviews: beat builds last month's on the 1st; their files are kept in the database.
# How often beat runs each periodic task (ALLOT_*_SECONDS) is read in config/celery.py.

# --- single sign-on (ALLOT_OIDC_*), off by default ---------------------------------------------
ALLOT_OIDC_ENABLED = env_bool(
    "ALLOT_OIDC_ENABLED",
    False,
    help="Single sign-on through OpenID Connect; then the ALLOT_OIDC_* endpoints and client are required.",
)
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
if ALLOT_OIDC_ENABLED:
    INSTALLED_APPS.append("mozilla_django_oidc")
    AUTHENTICATION_BACKENDS.insert(1, "mozilla_django_oidc.auth.OIDCAuthenticationBackend")
    OIDC_RP_CLIENT_ID = env_str(
        "ALLOT_OIDC_CLIENT_ID", required=True, help="The OIDC client id.", shown="required with ALLOT_OIDC_ENABLED"
    )
    OIDC_RP_CLIENT_SECRET = env_str(
        "ALLOT_OIDC_CLIENT_SECRET",
        required=True,
        help="The OIDC client secret.",
        shown="required with ALLOT_OIDC_ENABLED",
    )
    OIDC_OP_AUTHORIZATION_ENDPOINT = env_str(
        "ALLOT_OIDC_AUTHORIZATION_ENDPOINT",
        required=True,
        help="The provider's authorization endpoint.",
        shown="required with ALLOT_OIDC_ENABLED",
    )
    OIDC_OP_TOKEN_ENDPOINT = env_str(
        "ALLOT_OIDC_TOKEN_ENDPOINT",
        required=True,
        help="The provider's token endpoint.",
        shown="required with ALLOT_OIDC_ENABLED",
    )
    OIDC_OP_USER_ENDPOINT = env_str(
        "ALLOT_OIDC_USER_ENDPOINT",
        required=True,
        help="The provider's userinfo endpoint.",
        shown="required with ALLOT_OIDC_ENABLED",
    )
    OIDC_OP_JWKS_ENDPOINT = env_str(
        "ALLOT_OIDC_JWKS_ENDPOINT",
        required=True,
        help="The provider's JWKS endpoint.",
        shown="required with ALLOT_OIDC_ENABLED",
    )
    OIDC_RP_SIGN_ALGO = env_str("ALLOT_OIDC_SIGN_ALGO", "RS256", help="The ID token's signing algorithm.")
    OIDC_RP_SCOPES = env_str("ALLOT_OIDC_SCOPES", "openid email profile", help="The scopes asked for.")
    LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/"

# --- admission webhooks (ALLOT_ADMISSION_*) ----------------------------------------------------
ALLOT_ADMISSION_CLUSTER = env_str(
    "ALLOT_ADMISSION_CLUSTER", "", help="The cluster a webhook deployment serves.", shown="the only Kubernetes cluster"
)
ALLOT_ADMISSION_AUTH = env_str(
    "ALLOT_ADMISSION_AUTH", "token", help="How clusters authenticate to the webhook: token, client-cert or none."
)
ALLOT_ADMISSION_TOKEN = env_str(
    "ALLOT_ADMISSION_TOKEN",
    "",
    help="The bearer token clusters send (ALLOT_ADMISSION_AUTH=token); empty: every call refused.",
)
ALLOT_ADMISSION_CLIENT_CERT_HEADER = env_str(
    "ALLOT_ADMISSION_CLIENT_CERT_HEADER",
    "X-Client-Verify",
    help="With client-cert: the header the TLS proxy sets when the client certificate verified (value SUCCESS).",
)
ALLOT_ADMISSION_REFRESH_SECONDS = env_int(
    "ALLOT_ADMISSION_REFRESH_SECONDS", 5, help="How often each webhook process checks the policy revision."
)
ALLOT_ADMISSION_MAX_BODY_BYTES = env_int(
    "ALLOT_ADMISSION_MAX_BODY_BYTES",
    3 * 1024 * 1024,
    help="Larger AdmissionReviews are denied as too_large.",
    shown="3145728 (3 MiB)",
)
ALLOT_ADMISSION_EXEMPT_NAMESPACES = env_list(
    "ALLOT_ADMISSION_EXEMPT_NAMESPACES", ["kube-system", "allot-system"], help="Namespaces never checked."
)
ALLOT_ADMISSION_STATE_DIR = env_str(
    "ALLOT_ADMISSION_STATE_DIR",
    "",
    help=(
        "A directory the webhook's worker processes share (an emptyDir): each publishes whether it can decide, "
        "and readiness is false while any cannot. Empty: each process speaks for itself (development)."
    ),
)
ALLOT_ADMISSION_UNGOVERNED_GPU = env_str(
    "ALLOT_ADMISSION_UNGOVERNED_GPU",
    "deny",
    help=(
        "A GPU request in a namespace no team holds, where the webhook is sent one: deny (refused, saying to "
        "bind the namespace) or allow (admitted with a warning). Anything asking for no accelerator there is "
        "never blocked; the shipped webhooks are sent only namespaces labelled allot.dev/governed=true."
    ),
)
if ALLOT_ADMISSION_UNGOVERNED_GPU not in ("deny", "allow"):
    raise ImproperlyConfigured(f"ALLOT_ADMISSION_UNGOVERNED_GPU={ALLOT_ADMISSION_UNGOVERNED_GPU!r}: use deny or allow")
ALLOT_ADMISSION_LOG_KEEP = env_int("ALLOT_ADMISSION_LOG_KEEP", 100_000, help="Decision-log rows kept.")
ALLOT_ADMISSION_SPILL_FILE = env_str(
    "ALLOT_ADMISSION_SPILL_FILE",
    str(VAR_DIR / "admission-unlogged.jsonl"),
    help=(
        "Where a webhook process appends, as JSON lines, the decisions its decision log refused to store (never "
        "dropped silently); the readiness answer and allot_admission_decisions_unlogged_total count them."
    ),
    shown="ALLOT_VAR_DIR/admission-unlogged.jsonl",
)
ALLOT_ADMISSION_LOG_LINES = env_str(
    "ALLOT_ADMISSION_LOG_LINES",
    "denied",
    help=(
        "Which admission decisions also write a JSON line to the webhook's log: denied (refusals only, as "
        "Gatekeeper logs denies), all, or none. The decision log and the metrics keep every decision either way."
    ),
)
if ALLOT_ADMISSION_LOG_LINES not in ("denied", "all", "none"):
    raise ImproperlyConfigured(f"ALLOT_ADMISSION_LOG_LINES={ALLOT_ADMISSION_LOG_LINES!r}: use denied, all or none")
ALLOT_ADMISSION_BACKGROUND = env_bool(
    "ALLOT_ADMISSION_BACKGROUND",
    True,
    help=(
        "Each webhook process refreshes its policy and writes its decision log from a background "
        "thread (off: on the request, for tests)."
    ),
)
# Accelerator resources beyond nvidia.com/gpu, counted as devices of a flavor: "amd.com/gpu=mi300x,...".
# Any other accelerator resource (amd.com/, nvidia.com/mig-*, habana.ai/, ...) and DRA claims are refused.
ALLOT_ADMISSION_ACCELERATORS = env_list(
    "ALLOT_ADMISSION_ACCELERATORS",
    [],
    help=(
        "Other accelerator resources counted as a flavor's devices: amd.com/gpu=mi300x,…; any "
        "other accelerator resource is refused."
    ),
)
for _pair in ALLOT_ADMISSION_ACCELERATORS:
    if _pair.count("=") != 1 or not all(_pair.split("=")):
        raise ImproperlyConfigured(
            f"ALLOT_ADMISSION_ACCELERATORS: {_pair!r} is not resource=flavor (e.g. amd.com/gpu=mi300x)"
        )
# Extended resources counted as devices, each with the flavor it belongs to (None: where it lands); the
# admission webhook and the Kueue usage source read this one map.
ALLOT_ACCELERATORS: dict[str, str | None] = {
    "nvidia.com/gpu": None,
    **{p.split("=", 1)[0]: p.split("=", 1)[1] for p in ALLOT_ADMISSION_ACCELERATORS},
}
# Controllers whose objects with a controller ownerReference are judged as part of their owner.
ALLOT_ADMISSION_CONTROLLERS = env_list(
    "ALLOT_ADMISSION_CONTROLLERS",
    sorted(DEFAULT_CONTROLLERS),
    help="Identities whose owned objects are judged as part of their owner.",
    shown="the Job controller, Kueue, JobSet, training-operator and KubeRay service accounts",
)
if ALLOT_ADMISSION_AUTH not in ("token", "client-cert", "none"):
    raise ImproperlyConfigured("ALLOT_ADMISSION_AUTH must be token, client-cert or none")
if env_bool("ALLOT_WEBHOOK_ONLY", False, help="The webhook deployment: only /admission/, no middleware."):
    # the webhook deployment: same code, only the admission endpoints and the smallest middleware stack
    ROOT_URLCONF = "config.urls_admission"
    MIDDLEWARE = []

# --- mail (ALLOT_MAIL_*) --------------------------------------------------------------------
EMAIL_BACKEND = env_str(
    "ALLOT_MAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend" if DEBUG else "quotas.mail.UnsentBackend",
    help="Django's mail backend for notifications and password links, e.g. "
    "django.core.mail.backends.smtp.EmailBackend (with EMAIL_HOST…). Unset: printed to the console in debug "
    "only; otherwise nothing is sent nor written (a one-time link in a log is anyone's).",
    shown="console in debug, else none",
)
ALLOT_MAIL_CONFIGURED = EMAIL_BACKEND not in (
    "django.core.mail.backends.console.EmailBackend",
    "django.core.mail.backends.dummy.EmailBackend",
    "quotas.mail.UnsentBackend",
)
"""Mail reaches people: only then is the self-service password reset (a link by mail) offered."""
# Messages (the one-time link an admin is shown, among others) live in the session, not in a cookie
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
DEFAULT_FROM_EMAIL = env_str("ALLOT_MAIL_FROM", "allot@localhost", help="The notifications' sender.")
# Where people reach the portal: the links in mails
ALLOT_PORTAL_URL = env_str(
    "ALLOT_PORTAL_URL", "http://127.0.0.1:8000", help="The portal's address, for the links in mails."
)
# The currency flavors' prices (per device-hour) are in: shown beside every cost and amount at stake.
ALLOT_CURRENCY = env_str(
    "ALLOT_CURRENCY", "USD", help="The currency of the flavors' prices, shown beside every cost and amount at stake."
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("ALLOT_LOG_LEVEL", "INFO", help="The root log level.")},
    # the review's PDF: WeasyPrint logs a line per page laid out, fontTools per font subset
    "loggers": {name: {"level": "WARNING"} for name in ("weasyprint", "weasyprint.progress", "fontTools", "axes")},
}
