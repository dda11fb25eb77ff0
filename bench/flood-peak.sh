#!/usr/bin/env bash
# The peak resident memory of the built service (dist/server.js) during a 500-connection login
# flood at full argon2 cost, sampled every 50 ms: the by-hand measurement behind bench/RESULTS.md's
# "login flood's memory" lines. Extra node flags go in $1 (e.g. --max-semi-space-size=4).
#   npm run build && bash bench/flood-peak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(mktemp -d /tmp/portcullis-flood-XXXXXX)
port=${PORT:-4300}
DATA_DIR=$data PORT=$port LOG_LEVEL=warn REQUIRE_EMAIL_VERIFICATION=false RATE_LIMIT_LOGIN_PER_IP=1000000000 \
  node ${1:-} dist/server.js 2>/dev/null &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data"' EXIT
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; do sleep 0.05; done
api=http://127.0.0.1:$port/api/v1
body='{"email":"flood@example.com","password":"a benchmark passphrase"}'
curl -s -XPOST -H 'content-type: application/json' -d '{"email":"flood@example.com","password":"a benchmark passphrase","full_name":"F"}' "$api/auth/register" >/dev/null
echo "idle RSS $(awk '/VmRSS/ {print int($2/1024)}' /proc/$pid/status) MB"
( peak=0; for _ in $(seq 1 160); do r=$(awk '/VmRSS/ {print $2}' /proc/$pid/status); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.05; done; echo "peak RSS $((peak / 1024)) MB" ) &
npx autocannon -c 500 -d 7 -m POST -H 'content-type: application/json' -b "$body" "$api/auth/login" 2>&1 | grep -E 'requests in|2xx'
wait %2
