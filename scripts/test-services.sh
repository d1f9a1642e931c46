#!/usr/bin/env bash
# Make sure what the test suite talks to is there: PostgreSQL on 127.0.0.1:5432 and, for the
# browser test, Debian's Chromium, and for the protocol tests, the protocols' own npm clients. Safe to run again; does nothing when all is in place.
set -euo pipefail

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null; then
    echo "starting PostgreSQL..."
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  for _ in $(seq 1 30); do
    pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && break
    sleep 1
  done
  pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2; exit 1; }
fi

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium for the browser test..."
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "the browser test needs /usr/bin/chromium (apt-get install chromium)" >&2
    exit 1
  fi
fi

# The protocols' npm clients (@ag-ui/client, ai): installed from the lock file, then used offline.
JS=tests/protocols/js
if [ ! -f "$JS/node_modules/.package-lock.json" ] || ! cmp -s "$JS/package-lock.json" "$JS/node_modules/.lock-installed"; then
  command -v npm >/dev/null || { echo "the protocol tests need Node.js 20+ and npm" >&2; exit 1; }
  echo "installing the protocols' npm clients..."
  npm ci --prefix "$JS" --no-audit --no-fund --loglevel=error >/dev/null
  cp "$JS/package-lock.json" "$JS/node_modules/.lock-installed"
fi
