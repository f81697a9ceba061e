#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on loopback; start them where installed but stopped.
set -euo pipefail

pg_up() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

if ! pg_up; then
  echo "PostgreSQL is not answering; starting it" >&2
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL did not start on 127.0.0.1:5432" >&2; exit 1; }
fi

# The broker-loss test starts its own redis-server: the binary is a dependency, not optional.
if ! command -v redis-server >/dev/null; then
  echo "redis-server is not installed; installing Debian's redis-server" >&2
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  fi
  command -v redis-server >/dev/null || { echo "redis-server could not be installed" >&2; exit 1; }
fi

if ! redis_up; then
  echo "Redis is not answering; starting it" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_up && break; sleep 1; done
  redis_up || { echo "Redis did not start on 127.0.0.1:6379" >&2; exit 1; }
fi
