# The two commands: `make demo` (embedded default, no services) and `make test`
# (PostgreSQL + Redis, started here when installed but stopped).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/geo_collect
TEST_REDIS_URL ?= redis://127.0.0.1:6379/5
# A DATABASE_URL makes the settings production-strict (geo_collect/settings.py): the test and
# bench processes bring a throwaway key and plain HTTP on loopback.
LOCAL_ENV := DJANGO_SECRET_KEY=local-test-key-not-for-production GEO_ALLOW_HTTP=1

.PHONY: demo test lint services bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt dataforseo-client
	touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

services:
	bash scripts/ensure_services.sh
	bash scripts/ensure_chromium.sh

# The suite runs on TEST_WORKERS pytest-xdist workers (tests/xdist_worker_env.py gives each its
# own test database and Redis database); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP) services
	$(LOCAL_ENV) DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports
	$(LOCAL_ENV) $(PY) manage.py spectacular --validate --fail-on-warn --file /dev/null
	$(PY) scripts/audit_dependencies.py

# Every benchmark with its reference, one table (bench/run_all.py, docs/capacity.md). In a
# throw-away database <name>_bench. BENCH_ARGS="--only plan" for one; sizes: GEO_BENCH_*.
bench: $(STAMP) services
	$(LOCAL_ENV) DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf var

# Chaos run (bench/chaos.py): its own database geo_chaos and its own redis-server, the simulator
# with faults, four workers and the dispatcher; kills, failpoints, a Redis restart, then the
# invariants. CHAOS_ARGS="--seed 7 --strict" to replay or to fail on samples left for review.
.PHONY: chaos
chaos: $(STAMP) services
	$(LOCAL_ENV) DATABASE_URL=$(TEST_DATABASE_URL) $(PY) bench/chaos.py $(CHAOS_ARGS)

# Fault runs (bench/faults.py): each fault of issue 30's table on a fresh run of its own, with
# a PostgreSQL cluster, redis-server, S3 server and simulator private to the harness (it restarts
# and stops them); the run must finish by itself with nothing lost. As root (PostgreSQL runs as
# the postgres user, the full-disk scenario mounts a tmpfs). FAULTS_ARGS="--only pg_down --seed 7".
.PHONY: faults
faults: $(STAMP) services
	bash scripts/ensure_faketime.sh
	$(LOCAL_ENV) $(PY) bench/faults.py $(FAULTS_ARGS)
