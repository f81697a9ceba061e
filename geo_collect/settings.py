"""Settings, driven by the environment.

With no environment at all this is the embedded default: SQLite, a filesystem broker
(geo_collect/broker.py), local file storage and the in-project platform simulator.
`DATABASE_URL`, `REDIS_URL` and `S3_*` switch to PostgreSQL, Redis and S3-compatible storage.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

# Plain data, no Django: the one declaration of every platform.
from connectors.platforms import PLATFORMS, VENDORS, default_models, default_token_prices

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GEO_VAR_DIR", BASE_DIR / "var"))

# A DATABASE_URL means a real deployment: it refuses to start unsafe (docs/decisions.md,
# "Production settings"). GEO_ALLOW_HTTP=1 relaxes only the HTTPS settings, for local HTTP.
PRODUCTION = bool(os.environ.get("DATABASE_URL"))
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. DATABASE_URL is set, so this is a production "
            "deployment, and it will not start with a publicly known key. Set DJANGO_SECRET_KEY "
            "to a long random value, e.g. the output of: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
    SECRET_KEY = "embedded-default-not-for-production"  # noqa: S105  (never with DATABASE_URL)
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
CSRF_TRUSTED_ORIGINS = [
    o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o
]

_HTTPS = PRODUCTION and os.environ.get("GEO_ALLOW_HTTP", "0") != "1"
SECURE_SSL_REDIRECT = _HTTPS
SESSION_COOKIE_SECURE = _HTTPS
CSRF_COOKIE_SECURE = _HTTPS
SECURE_HSTS_SECONDS = int(os.environ.get("GEO_HSTS_SECONDS", "31536000")) if _HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _HTTPS
SECURE_HSTS_PRELOAD = _HTTPS and os.environ.get("GEO_HSTS_PRELOAD", "1") == "1"
if os.environ.get("GEO_BEHIND_TLS_PROXY", "0") == "1":  # the proxy terminates TLS
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Health checks come from the supervisor or load balancer over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# Every process writes its metrics to one folder (prometheus_client multiprocess mode); it
# must be set before prometheus_client is imported, so it is set here.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# /metrics answers only a request bearing this token; unset, /metrics answers 404.
GEO_METRICS_TOKEN = os.environ.get("GEO_METRICS_TOKEN", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc as local static files (no CDN)
    "axes",  # console login throttling and lock-out (AUTHENTICATION_BACKENDS below)
    "tenancy",
    "sampling",
    "evidence",
    "analysis",
    "billing",
    "pipeline",
    "monitoring",
    "alerts",
    "console",
    "ops",
    "api",
    # Not production: the platform simulator and the demo that runs the product against it
    # (their commands `simulator` and `demo`). No production module imports them
    # (pyproject.toml, import-linter).
    "simulator",
    "demo",
]

MIDDLEWARE = [
    # Outermost: the request id on every response and log line, NUL bytes refused, the API's
    # errors in JSON even when Django answers them (api/middleware.py).
    "api.middleware.RequestEdgeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The console's static files (admin CSS/JS) in every mode, DEBUG=0 included.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before the CSRF check, which reads the whole body: a statement over its limit is a 413
    # from its Content-Length alone.
    "console.upload_limit.UploadLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "console.csp.ConsoleCspMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]


# --- Authentication (docs/decisions.md, "Console logins are throttled") ---------------------
# django-axes counts failed console logins per username and client address, in the database
# (PostgreSQL in production); AXES_FAILURE_LIMIT failures within AXES_COOLOFF_TIME lock that
# pair out (429, even for the right password) until the window has passed; a success resets
# the count. The first backend only refuses locked-out logins; the second checks passwords.
AUTHENTICATION_BACKENDS = [
    "console.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = int(os.environ.get("GEO_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("GEO_LOGIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Successful logins are Django's `last_login` already; only failures are kept (and expire).
AXES_DISABLE_ACCESS_LOG = True
AXES_LOCKOUT_TEMPLATE = "console/locked_out.html"
# The client address: REMOTE_ADDR, or behind GEO_TRUSTED_PROXIES proxies (nginx, a load
# balancer) the address the outermost one saw, counted from the right of X-Forwarded-For, so a
# client cannot choose its own address by sending the header (console/login_throttle.py).
GEO_TRUSTED_PROXIES = int(os.environ.get("GEO_TRUSTED_PROXIES", "0"))
AXES_CLIENT_IP_CALLABLE = "console.login_throttle.client_address"
# Passwords chosen in the console, `grant_role --password-env` and interactive
# `createsuperuser` are checked against these.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": int(os.environ.get("GEO_PASSWORD_MIN_LENGTH", "12"))},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# API tokens (api/auth.py): the default and the longest lifetime, in days.
GEO_API_TOKEN_DAYS = int(os.environ.get("GEO_API_TOKEN_DAYS", "90"))
GEO_API_TOKEN_MAX_DAYS = int(os.environ.get("GEO_API_TOKEN_MAX_DAYS", "365"))

# The console's Content-Security-Policy (console/csp.py): scripts from this origin only;
# inline styles allowed (the templates' <style> blocks and style="width: …" bars); frames only
# of this origin (the run report's preview); forms post only here.
GEO_CONSOLE_PREFIX = "/admin/"
GEO_CONSOLE_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'self'",
    ]
)

ROOT_URLCONF = "geo_collect.urls"
WSGI_APPLICATION = "geo_collect.wsgi.application"

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
            ],
        },
    },
]


def _celery_worker() -> bool:
    """Whether this process is a Celery worker (`celery ... worker`, `python -m celery ...`)."""
    program = Path(sys.argv[0]) if sys.argv else Path()
    return "worker" in sys.argv[1:] and "celery" in (program.name, program.parent.name)


# A Celery worker's threads share a small pool of PostgreSQL connections instead of keeping
# one each (Django's pooling, OPTIONS["pool"], with psycopg_pool): a thread gives its connection
# back before every upstream call and after every task, so a worker of 80 threads needs a
# handful, not 80 (docs/decisions.md).
# 0: one connection per thread, kept for CELERY_DB_REUSE_MAX tasks.
GEO_WORKER_DB_POOL = int(os.environ.get("GEO_WORKER_DB_POOL", "8")) if _celery_worker() else 0


# The statements every step runs (its lock, reads and writes: sampling/plainsql.py) are
# prepared on their PostgreSQL connection, parsed and planned once per connection instead of
# on every execution (docs/decisions.md, "Step statements prepared for real"). 0 behind a
# transaction pooler that does not carry prepared statements (PgBouncer before 1.21, or
# without max_prepared_statements).
GEO_DB_PREPARED_STATEMENTS = os.environ.get("GEO_DB_PREPARED_STATEMENTS", "1") != "0"
# Django hands psycopg `prepare_threshold=None`, with which psycopg prepares nothing, even a
# statement executed with `prepare=True`; a threshold lets those be prepared. Django's own
# queries are unaffected: its client-side cursors are never prepared.
_PREPARE_THRESHOLD = 5


def _dispatcher_process() -> bool:
    """Whether this process is the dispatcher (`manage.py dispatcher`)."""
    return sys.argv[1:2] == ["dispatcher"]


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL")
    if url:
        database: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=60))
        if _dispatcher_process() and database["ENGINE"] == "django.db.backends.postgresql":
            # A transaction a stopped dispatcher left open ends (PostgreSQL ends the session)
            # after the leader lease, so its lock on the leader row cannot hold up a takeover.
            lease_ms = int(float(os.environ.get("GEO_LEADER_LEASE_SECONDS", "15")) * 1000)
            options = dict(database.get("OPTIONS") or {})
            idle_limit = f"-c idle_in_transaction_session_timeout={lease_ms}"
            options["options"] = f"{options.get('options', '')} {idle_limit}".strip()
            database["OPTIONS"] = options
        if GEO_DB_PREPARED_STATEMENTS and database["ENGINE"] == "django.db.backends.postgresql":
            options = dict(database.get("OPTIONS") or {})
            options.setdefault("prepare_threshold", _PREPARE_THRESHOLD)
            database["OPTIONS"] = options
        if GEO_WORKER_DB_POOL and database["ENGINE"] == "django.db.backends.postgresql":
            timeout = float(os.environ.get("GEO_WORKER_DB_POOL_TIMEOUT", "60"))
            database["CONN_MAX_AGE"] = 0  # the pool keeps the connections
            # Each checkout is checked (psycopg_pool's check_connection, one empty round trip):
            # a connection the server dropped in a restart is replaced, not handed to a step.
            database["CONN_HEALTH_CHECKS"] = True
            options = dict(database.get("OPTIONS") or {})
            options["pool"] = {"min_size": 1, "max_size": GEO_WORKER_DB_POOL, "timeout": timeout}
            database["OPTIONS"] = options
        return database
    # Embedded default. Several processes (dispatcher, workers) share one file, so WAL mode,
    # IMMEDIATE transactions (writers queue instead of failing on upgrade) and a busy timeout.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("GEO_SQLITE_PATH", str(VAR_DIR / "geo.sqlite3")),
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves the admin's CSS/JS straight from the installed apps (no collectstatic step
# needed; `manage.py collectstatic` still works and is then used).
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on a missing root
MEDIA_ROOT = VAR_DIR / "media"


def _storages() -> dict[str, Any]:
    bucket = os.environ.get("S3_BUCKET")
    default: dict[str, Any]
    if bucket:
        default = {
            # Private bucket, conditional PUTs: an existing object is never overwritten.
            "BACKEND": "evidence.storage.EvidenceS3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": os.environ.get("S3_ENDPOINT_URL") or None,
                "region_name": os.environ.get("S3_REGION", "us-east-1"),
                "access_key": os.environ.get("S3_ACCESS_KEY_ID"),
                "secret_key": os.environ.get("S3_SECRET_ACCESS_KEY"),
                "default_acl": "private",
                "querystring_auth": True,
                "querystring_expire": 300,
                "file_overwrite": False,
                "signature_version": "s3v4",
                "addressing_style": os.environ.get("S3_ADDRESSING_STYLE", "auto"),
            },
        }
    else:
        default = {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(MEDIA_ROOT)},
        }
    return {
        "default": default,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    }


STORAGES = _storages()

# --- Celery -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT = "geo_collect.broker_redis:Transport"  # one client per channel
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        # Unacknowledged messages come back after this long if their worker vanished.
        "visibility_timeout": int(os.environ.get("GEO_VISIBILITY_TIMEOUT", "300")),
    }
else:
    for sub in ("out", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "geofs://localhost"  # geo_collect/broker.py: atomic filesystem messages
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "out"),
        "data_folder_out": str(BROKER_DIR / "out"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Celery's Django fixup closes the database connection around every task unless this is set,
# so CONN_MAX_AGE never took effect in workers: one PostgreSQL session per task. A worker
# thread keeps its connection for this many tasks (docs/decisions.md, connection reuse).
CELERY_DB_REUSE_MAX = int(os.environ.get("GEO_CELERY_DB_REUSE_MAX", "1000"))
if DATABASES["default"].get("OPTIONS", {}).get("pool"):
    CELERY_DB_REUSE_MAX = 0  # closing gives the connection back to the pool after each task

# --- Execution ----------------------------------------------------------------------------
GEO_LEASE_SECONDS = int(os.environ.get("GEO_LEASE_SECONDS", "120"))
GEO_MAX_SUBMIT_ATTEMPTS = int(os.environ.get("GEO_MAX_SUBMIT_ATTEMPTS", "5"))
GEO_MAX_PLAN_SAMPLES = int(os.environ.get("GEO_MAX_PLAN_SAMPLES", "2000000"))
GEO_MAX_QUESTION_CHARS = int(os.environ.get("GEO_MAX_QUESTION_CHARS", "2000"))
GEO_DEFAULT_SUBMISSION_LIMIT = int(os.environ.get("GEO_DEFAULT_SUBMISSION_LIMIT", "100"))
# Where connectors send requests. Unset: each platform's real endpoint. The demo and the tests
# point this at the simulator, which serves every platform under /<platform>/.
GEO_UPSTREAM_BASE_URL = os.environ.get("GEO_UPSTREAM_BASE_URL", "")

# JSON lines by default (geo_collect/logs.py): the sample context on every line about a sample,
# configured secrets redacted. GEO_LOG_FORMAT=text for a terminal.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "geo_collect.logs.JsonFormatter"},
        "text": {
            "()": "geo_collect.logs.TextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": os.environ.get("GEO_LOG_FORMAT", "json"),
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("GEO_LOG_LEVEL", "WARNING")},
    # The pool logs every failed reconnection while the database is down; the outage is logged
    # once when it starts and once when it ends instead (geo_collect/db_outage.py).
    "filters": {"pool_outage": {"()": "geo_collect.db_outage.PoolErrorsAsOutage"}},
    # urllib3 logs each request's path at DEBUG: a Slack incoming webhook's path is its secret
    # (alerts/delivery.py), so that logger never goes below INFO, whatever GEO_LOG_LEVEL says.
    "loggers": {
        "psycopg.pool": {"filters": ["pool_outage"]},
        "urllib3.connectionpool": {"level": "INFO"},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "api.schema.ApiAutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["api.filters.StrictFilterBackend"],
    "EXCEPTION_HANDLER": "api.errors.handle",
    # The views take JSON (statements: multipart, on their view); a form body is a 415, not a
    # misread request.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_METADATA_CLASS": "api.metadata.ApiMetadata",
    # `?format=` is the report's own parameter (json|csv|xlsx), not content negotiation.
    "URL_FORMAT_OVERRIDE": None,
    # Per API token (api/throttling.py); e.g. GEO_API_THROTTLE_RATE=120/minute.
    "DEFAULT_THROTTLE_RATES": {"api": os.environ.get("GEO_API_THROTTLE_RATE", "1200/minute")},
}
# The API throttle counts in this cache (api/throttling.py): Redis when configured, so every
# gunicorn worker and host shares one count; a process's memory otherwise (embedded mode).
CACHES: dict[str, dict[str, Any]] = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "geo",
        }
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
# Request bodies of API calls above this are refused with a 413 (statements have their own
# limit, GEO_STATEMENT_MAX_BYTES).
# A provider statement's file over this is refused with a 413 before its body is read (the
# console and the API check Content-Length: billing/imports.py); imports run in a worker.
GEO_STATEMENT_MAX_BYTES = int(os.environ.get("GEO_STATEMENT_MAX_BYTES", str(16 * 1024 * 1024)))
# A running statement import whose progress has not moved for this long (its worker died) is
# taken over when its outbox message is published again.
GEO_STATEMENT_IMPORT_STALE_SECONDS = float(
    os.environ.get("GEO_STATEMENT_IMPORT_STALE_SECONDS", "120")
)
GEO_API_MAX_BODY_BYTES = int(os.environ.get("GEO_API_MAX_BODY_BYTES", str(1024 * 1024)))
# Outgoing webhooks (api/webhooks.py): attempts, the first retry's delay (doubling), timeout.
GEO_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("GEO_WEBHOOK_MAX_ATTEMPTS", "8"))
GEO_WEBHOOK_BACKOFF_SECONDS = float(os.environ.get("GEO_WEBHOOK_BACKOFF_SECONDS", "30"))
GEO_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("GEO_WEBHOOK_TIMEOUT_SECONDS", "10"))
# A delivery still pending this long past its due time (its broker message was lost) is sent
# again by the dispatcher's sweep (api/webhooks.py `sweep_stuck_deliveries`).
GEO_WEBHOOK_SWEEP_SECONDS = float(os.environ.get("GEO_WEBHOOK_SWEEP_SECONDS", "300"))
# A receiver refuses a signature whose timestamp is further than this from its clock.
GEO_WEBHOOK_TOLERANCE_SECONDS = int(os.environ.get("GEO_WEBHOOK_TOLERANCE_SECONDS", "300"))
# Alerts (alerts/delivery.py): attempts per delivery, the first retry's delay (doubling, at
# most an hour), the Slack post's timeout, the stuck-delivery sweep's grace, how often the
# digest sweep looks for due digests; the console's address for links in messages.
GEO_ALERT_MAX_ATTEMPTS = int(os.environ.get("GEO_ALERT_MAX_ATTEMPTS", "8"))
GEO_ALERT_BACKOFF_SECONDS = float(os.environ.get("GEO_ALERT_BACKOFF_SECONDS", "30"))
GEO_ALERT_TIMEOUT_SECONDS = float(os.environ.get("GEO_ALERT_TIMEOUT_SECONDS", "10"))
GEO_ALERT_SWEEP_SECONDS = float(os.environ.get("GEO_ALERT_SWEEP_SECONDS", "300"))
GEO_ALERT_DIGEST_EVERY_SECONDS = float(os.environ.get("GEO_ALERT_DIGEST_EVERY_SECONDS", "300"))
GEO_CONSOLE_BASE_URL = os.environ.get("GEO_CONSOLE_BASE_URL", "")
# Email (Django's framework): SMTP to EMAIL_HOST:EMAIL_PORT; the password only from the env.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("EMAIL_USE_TLS", "0") == "1"
EMAIL_TIMEOUT = int(os.environ.get("EMAIL_TIMEOUT", "10"))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "alerts@geo-collect.invalid")
# Outbound requests to customer-given URLs (connectors/outbound.py) reach public addresses
# only, except these CIDRs and host names (comma-separated), for tests and private
# deployments; plain http:// only to them. The cloud metadata endpoints are refused even here.
GEO_OUTBOUND_ALLOW = [
    entry.strip() for entry in os.environ.get("GEO_OUTBOUND_ALLOW", "").split(",") if entry.strip()
]
# {host name: [addresses]} answered before DNS (as curl --resolve), still checked; tests.
GEO_OUTBOUND_RESOLVE: dict[str, list[str]] = {}
SPECTACULAR_SETTINGS = {
    "TITLE": "geo-collect API",
    "DESCRIPTION": (
        "Campaigns, previews and launches, run status, samples, reports and finance, scoped "
        "to the caller's tenants and roles like the console. Authenticate with "
        "`Authorization: Bearer <token>` (`manage.py api_token USERNAME`)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "api.schema.add_headers",  # X-Request-ID and X-RateLimit-* (api/schema.py)
    ],
}

# Model per platform: configuration, overridable with GEO_<PLATFORM>_MODEL. Never an alias map
# in code; the vendors retire names on their own schedule.
GEO_PLATFORM_MODELS: dict[str, str] = default_models()  # connectors/platforms.py

# Per-platform connection settings, GEO_<PLATFORM>_<NAME> (platform key upper-cased): API_KEY,
# BASE_URL, MODEL, TIMEOUT (seconds), EGRESS ("direct,http://proxy:3128": attempts alternate
# between these paths), EXTRA (a JSON object of adapter options, e.g. Doubao's bot_id) and
# CALLBACK_URL. VENDOR: which collection vendor serves a consumer surface (chatgpt_web, ...;
# connectors/platforms.py `vendors`), or, named, serves a model platform instead of its own
# API (GEO_OPENAI_VENDOR=dataforseo: DataForSEO's LLM Responses); a vendor's own
# GEO_<VENDOR>_* (GEO_DATAFORSEO_API_KEY, _BASE_URL) apply to every platform it serves unless a
# surface says otherwise (a model platform's own API_KEY / BASE_URL are never the vendor's).
# Kept as given; connectors/registry.py turns them into a ConnectorConfig.
# UNCERTAIN_REASK_SECONDS: what happens to a request whose outcome the platform cannot confirm
# (no lookup: the direct APIs): unset, it is parked for a person (the default); a number of
# seconds, it is asked again as a new attempt that long after the uncertain one started, whose
# outcome and upstream cost stay unknown (flagged in reconciliation).
PLATFORM_SETTING_NAMES = ("API_KEY", "BASE_URL", "MODEL", "TIMEOUT", "EGRESS", "EXTRA",
                          "CALLBACK_URL", "MAX_RESPONSE_BYTES", "MAX_RESPONSE_SECONDS",
                          "UNCERTAIN_REASK_SECONDS", "VENDOR")  # fmt: skip


def platform_settings(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """{platform: {NAME: value}} for the GEO_<PLATFORM>_<NAME> variables set in `environ`."""
    found: dict[str, dict[str, str]] = {}
    for platform in [*PLATFORMS, *VENDORS]:
        prefix = f"GEO_{platform.upper()}_"
        given = {name: environ[prefix + name] for name in PLATFORM_SETTING_NAMES
                 if prefix + name in environ}  # fmt: skip
        if given:
            found[platform] = given
    return found


GEO_PLATFORMS = platform_settings(os.environ)
# What a model's tokens cost us, per model: minor units of `currency` per million tokens.
# Defaults: each platform's default model at its declared price (connectors/platforms.py, the
# vendors' list prices when it was written); override the whole table with GEO_MODEL_PRICES
# (JSON of the same shape). Used to cost every direct-API attempt (billing/costs.py); a model
# missing here is recorded with its tokens and no cost.
GEO_MODEL_PRICES: dict[str, dict[str, Any]] = (
    json.loads(os.environ.get("GEO_MODEL_PRICES", "null")) or default_token_prices()
)

# A schedule slot handled later than this after its time was missed (the dispatcher was
# down); the campaign's missed-slot policy decides (pipeline/schedules.py).
GEO_SCHEDULE_GRACE_SECONDS = int(os.environ.get("GEO_SCHEDULE_GRACE_SECONDS", "900"))

# Admission control. Concurrency caps count leased samples per platform and group: upstream
# calls (submit/verify/poll), evidence (provider evidence, screenshots) and analysis are
# capped separately so screenshots never take the answer-collection slots.
GEO_PLATFORM_CONCURRENCY = int(os.environ.get("GEO_PLATFORM_CONCURRENCY", "16"))
GEO_EVIDENCE_CONCURRENCY = int(os.environ.get("GEO_EVIDENCE_CONCURRENCY", "4"))
GEO_ANALYSIS_CONCURRENCY = int(os.environ.get("GEO_ANALYSIS_CONCURRENCY", "16"))
# A collected answer is analysed in the step that collected it, in the same fenced write, when
# the analyser is local (the rule analyser): no analysis step, claim or message of its own
# (docs/decisions.md). 0: every answer goes to the analysis queue as its own step.
GEO_ANALYSE_INLINE = os.environ.get("GEO_ANALYSE_INLINE", "1") != "0"
# The dispatcher's bookkeeping (posting queued charges and attempt costs, finishing runs whose
# end went unnoticed) runs at most this often, not every tick: charges post in bigger batches
# and the claims of a busy tick are not held up by it. So do its looks for what is due after
# minutes: leases run out, schedule slots, outbox rows published and never completed.
GEO_DISPATCH_BOOKKEEPING_SECONDS = float(os.environ.get("GEO_DISPATCH_BOOKKEEPING_SECONDS", "1"))
# An outbox message published but not completed by its consumer this long after (the broker
# forgot it: restarted empty) is published again by the relay (pipeline/dispatch.py); a
# finished run still holding money with no run-finished event younger than this is settled by
# the dispatcher's sweep (pipeline/runs.py `settle_held_runs`). As long as the broker's
# visibility timeout by default, so a consumer killed mid-task is redelivered by the broker
# first.
GEO_OUTBOX_REDELIVER_SECONDS = float(os.environ.get("GEO_OUTBOX_REDELIVER_SECONDS", "300"))
# A busy dispatcher starts a tick at most this often (seconds), so the slots that free up in
# between are claimed in one tick: a tick costs about ten statements however much it claims.
# The price is at most this long before a freed slot is used again.
GEO_DISPATCH_MIN_TICK_SECONDS = float(os.environ.get("GEO_DISPATCH_MIN_TICK_SECONDS", "0.05"))
# One tick's claims for one queue travel in messages of up to this many steps
# (`pipeline.execute_steps`): the worker runs each as its own step, on threads of its own, and
# pays for a message's delivery and task bookkeeping once for all of them (docs/decisions.md,
# "Several claims in one step message"). 1: a message per claim.
GEO_STEPS_PER_MESSAGE = int(os.environ.get("GEO_STEPS_PER_MESSAGE", "16"))
# A worker's threads for the steps of a message beyond its first, which runs on the thread
# Celery gave the message; created as needed, up to this many.
GEO_WORKER_STEP_THREADS = int(os.environ.get("GEO_WORKER_STEP_THREADS", "256"))
# How many of a worker's threads process read answers at once (keeping, evidence rows,
# analysis; not the evidence store's uploads): pipeline/step_context.py `answer_work`. Half
# the default connection pool (GEO_WORKER_DB_POOL), so that steps starting meanwhile find a
# connection. 0: no bound.
GEO_WORKER_ANSWER_THREADS = int(os.environ.get("GEO_WORKER_ANSWER_THREADS", "4"))
# The active dispatcher holds a leader lease (pipeline/leadership.py) for this long past its
# last tick (database time); a standby looks every GEO_LEADER_CHECK_SECONDS and takes over once
# it has run out (at once when the holder's PostgreSQL session is gone). A stopped or cut-off
# leader is replaced within lease + check (17 s by default).
GEO_LEADER_LEASE_SECONDS = float(os.environ.get("GEO_LEADER_LEASE_SECONDS", "15"))
GEO_LEADER_CHECK_SECONDS = float(os.environ.get("GEO_LEADER_CHECK_SECONDS", "2"))
# A process that loses the database (a restart, an outage) closes the broken connection and
# tries again after a backoff doubling from the first to the second figure (seconds); it logs
# once when the outage starts and once when it ends (geo_collect/db_outage.py).
GEO_DB_RETRY_MIN_SECONDS = float(os.environ.get("GEO_DB_RETRY_MIN_SECONDS", "0.5"))
GEO_DB_RETRY_MAX_SECONDS = float(os.environ.get("GEO_DB_RETRY_MAX_SECONDS", "10"))
# Requests per second per platform and operation (submit / poll / screenshot), e.g.
# GEO_RATE_LIMITS='{"openai": {"submit": 5, "poll": 20}}'; others get the default rate.
GEO_RATE_LIMITS: dict[str, dict[str, float]] = json.loads(os.environ.get("GEO_RATE_LIMITS", "{}"))
GEO_DEFAULT_RATE_LIMIT = float(os.environ.get("GEO_DEFAULT_RATE_LIMIT", "50"))
# Alongside the per-platform rates: upstream calls per second over all platforms and tenants,
# and the default per tenant (Tenant.max_calls_per_second overrides it). 0: not limited.
GEO_GLOBAL_RATE_LIMIT = float(os.environ.get("GEO_GLOBAL_RATE_LIMIT", "0"))
GEO_TENANT_RATE_LIMIT = float(os.environ.get("GEO_TENANT_RATE_LIMIT", "0"))
# A step claimed this many times without finishing is parked with its reason (poison message).
GEO_MAX_STEP_CLAIMS = int(os.environ.get("GEO_MAX_STEP_CLAIMS", "8"))
# An accepted task is polled through failed polls for this long after its acceptance.
GEO_POLL_DEADLINE_SECONDS = float(os.environ.get("GEO_POLL_DEADLINE_SECONDS", "3600"))
# A circuit per platform and egress (pipeline/circuits.py): it opens after this many
# connection failures (nothing reached the platform) within the window, with no answer
# between; stays open for the cooldown (doubling on every reopen, up to the maximum), then
# lets this many probe steps through (half-open), and closes once they reach the platform.
GEO_CIRCUIT_FAILURES = int(os.environ.get("GEO_CIRCUIT_FAILURES", "5"))
GEO_CIRCUIT_WINDOW_SECONDS = float(os.environ.get("GEO_CIRCUIT_WINDOW_SECONDS", "30"))
GEO_CIRCUIT_OPEN_SECONDS = float(os.environ.get("GEO_CIRCUIT_OPEN_SECONDS", "5"))
GEO_CIRCUIT_MAX_OPEN_SECONDS = float(os.environ.get("GEO_CIRCUIT_MAX_OPEN_SECONDS", "60"))
GEO_CIRCUIT_PROBES = int(os.environ.get("GEO_CIRCUIT_PROBES", "1"))
# How often the dispatcher reads the open circuits (one statement).
GEO_CIRCUIT_REFRESH_SECONDS = float(os.environ.get("GEO_CIRCUIT_REFRESH_SECONDS", "1"))
# Shared secret of the collection provider's signed callbacks (POST /callbacks/collector/).
GEO_COLLECTOR_CALLBACK_SECRET = os.environ.get("GEO_COLLECTOR_CALLBACK_SECRET", "")

# The ledger chain's HMAC key and the checkpoints' signing key (billing/ledger_chain.py,
# billing/checkpoints.py): kept out of the database so that someone who can write the ledger's
# tables cannot recompute the chain. Empty: derived from DJANGO_SECRET_KEY under a label of its
# own; set it explicitly in production so that rotating DJANGO_SECRET_KEY leaves it alone.
GEO_LEDGER_CHAIN_KEY = os.environ.get("GEO_LEDGER_CHAIN_KEY", "")
# A signed checkpoint of the chain's head goes to the evidence store on every top-up, every
# run's settlement and at most this often from the dispatcher; check_ledger reports entries
# older than twice this that no checkpoint covers.
GEO_LEDGER_CHECKPOINT_MINUTES = float(os.environ.get("GEO_LEDGER_CHECKPOINT_MINUTES", "5"))
# Evidence downloads: presigned URLs (S3) live this long, issued after the tenant/role check.
GEO_EVIDENCE_URL_SECONDS = int(os.environ.get("GEO_EVIDENCE_URL_SECONDS", "60"))
# Evidence pages of direct-API answers are photographed with Debian's Chromium.
GEO_CHROMIUM_PATH = os.environ.get("GEO_CHROMIUM_PATH", "")  # empty: chromium on PATH
GEO_SCREENSHOT_TIMEOUT_SECONDS = float(os.environ.get("GEO_SCREENSHOT_TIMEOUT_SECONDS", "30"))
GEO_THUMBNAIL_WIDTH = int(os.environ.get("GEO_THUMBNAIL_WIDTH", "320"))
