#!/usr/bin/env bash
# libfaketime moves one worker's wall clock in the clock scenarios of `make faults`
# (bench/faults.py). Install Debian's package where it is missing and we may (root with apt).
set -uo pipefail
found() { ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; }
found && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's libfaketime" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime >/dev/null 2>&1 \
    || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime >/dev/null)
fi
found || { echo "libfaketime is missing: the clock scenarios cannot run" >&2; exit 1; }
