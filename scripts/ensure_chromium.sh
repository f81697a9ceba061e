#!/usr/bin/env bash
# Debian's Chromium renders evidence pages and drives the browser tests. Install it where it is
# missing and we may (root with apt); never download a browser build of a test tool.
set -uo pipefail
# A CJK font too: Chinese answers would otherwise photograph as empty boxes.
command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -qi "wenquanyi\|wqy" && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium and a CJK font" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null) \
    || echo "chromium could not be installed; browser checks will be skipped and say why" >&2
else
  echo "chromium is missing and cannot be installed here; browser checks will be skipped" >&2
fi
exit 0
