"""gunicorn's settings for the web process, one copy for the Procfile and geo-web.service
(`--config deploy/gunicorn.conf.py`). Each can be changed by its environment variable.

Without `timeout` a worker that stops answering (a request stuck on a lock, a huge upload)
holds its slot for gunicorn's default 30 s with nothing saying so in the units; here it is set,
and so is how long a stopping worker may finish its requests. Long work does not belong in a
request: statement imports and exports run as background tasks."""

import os

bind = os.environ.get("GEO_WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GEO_WEB_WORKERS", "3"))
# A worker silent this long (seconds) is killed and replaced; its request answers 502.
timeout = int(os.environ.get("GEO_WEB_TIMEOUT_SECONDS", "60"))
# On a restart or shutdown, a worker finishes the requests it holds within this long.
graceful_timeout = int(os.environ.get("GEO_WEB_GRACEFUL_TIMEOUT_SECONDS", "30"))
# Idle keep-alive connections from the proxy in front are closed after this long.
keepalive = int(os.environ.get("GEO_WEB_KEEPALIVE_SECONDS", "5"))
accesslog = "-"
