#!/usr/bin/env bash
# Debian packages the tests drive for real: Chromium + ChromeDriver (dashboard
# test) and iproute2 (emulated-network testbed). Installed when running as root
# and missing; otherwise the tests that need them skip and say why.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
{ command -v ip >/dev/null && command -v tc >/dev/null; } || missing+=(iproute2)
[ "${#missing[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "note: ${missing[*]} not installed; the tests that need them will be skipped" >&2
fi
