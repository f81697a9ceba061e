#!/usr/bin/env bash
# Debian's Chromium renders evidence pages and drives the browser tests. Install it where it is
# missing and we may (root with apt); never download a browser build of a test tool.
# GEO_CHROMIUM_PATH names the binary to check (default: `chromium` on PATH), as in
# evidence/screenshots.py. In CI (CI=true) a missing Chromium is a failure, not a skip.
set -uo pipefail

chromium_path() {
  if [ -n "${GEO_CHROMIUM_PATH:-}" ]; then
    [ -x "$GEO_CHROMIUM_PATH" ] && echo "$GEO_CHROMIUM_PATH"
  else
    command -v chromium || command -v chromium-browser
  fi
}
# A CJK font too: Chinese answers would otherwise photograph as empty boxes.
has_cjk_font() { fc-list 2>/dev/null | grep -qi "wenquanyi\|wqy"; }
works() { "$1" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1; }

binary=$(chromium_path)
if [ -z "$binary" ] || ! has_cjk_font; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium, chromium-driver and a CJK font" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      chromium chromium-driver fonts-wqy-microhei >/dev/null) \
      || echo "apt-get could not install chromium" >&2
  fi
  binary=$(chromium_path)
fi

wanted="${GEO_CHROMIUM_PATH:-chromium}"
if [ -n "$binary" ] && works "$binary"; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "FAILED: Chromium ($wanted) is missing or does not start, and could not be installed;" \
    "the browser and screenshot tests cannot run in CI without it" >&2
  exit 1
fi
echo "Chromium ($wanted) is missing and cannot be installed here; browser checks will skip" >&2
exit 0
