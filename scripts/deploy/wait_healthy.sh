#!/usr/bin/env bash
# wait_healthy.sh URL [TIMEOUT_S]: poll URL until it answers 2xx; exit 1 with a message after TIMEOUT_S
# (default 120). Used as ExecStartPost= in the systemd units so a unit is "started" only once healthy,
# and units ordered After= it start only then.
. "$(dirname "$0")/../lib/help.sh" && show_help_if_asked "$0" "${1:-}"  # --help: the header above, nothing started
set -u
url=${1:?usage: wait_healthy.sh URL [TIMEOUT_S]}
timeout=${2:-120}
deadline=$((SECONDS + timeout))
while ((SECONDS < deadline)); do
  code=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "$url" 2>/dev/null) || true
  [[ ${code:-000} == 2* ]] && exit 0
  sleep 1
done
echo "wait_healthy: $url did not answer 2xx within ${timeout}s (last HTTP ${code:-000})" >&2
exit 1
