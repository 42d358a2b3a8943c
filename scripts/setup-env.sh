#!/usr/bin/env bash
# Prepare .venv with kvtop installed: checks (and, as root, installs) the system packages the
# build needs, creates the virtual environment, installs the package. Usage: setup-env.sh [EXTRAS]
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"

if ! command -v "$python" >/dev/null 2>&1; then
  echo "kvtop setup: $python not found. Install Python 3.10 or newer (apt-get install python3)." >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "kvtop setup: kvtop needs Python 3.10 or newer; $python is $("$python" -V 2>&1)." >&2
  exit 1
fi

# What the build needs, checked by capability rather than by package name:
# systemd-python compiles against libsystemd (pkg-config, gcc, Python headers); venv needs ensurepip.
missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists libsystemd 2>/dev/null || missing+=(libsystemd-dev)
"$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
"$python" - <<'PY' 2>/dev/null || missing+=(python3-dev)
import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PY

# The tests also use real systemd parts: journal files written by systemd-journal-remote and a
# private systemd-journald (tests that need them skip, saying why, when they are absent).
if [ "$extras" = test ]; then
  [ -x /lib/systemd/systemd-journal-remote ] || missing+=(systemd-journal-remote)
  [ -x /lib/systemd/systemd-journald ] || missing+=(systemd)
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "kvtop setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "kvtop setup: missing system packages: ${missing[*]}." >&2
    echo "Install them first, e.g.: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
# Reinstall only when pyproject.toml or the extras changed (a no-op install still costs seconds).
stamp=".venv/.kvtop-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${extras}"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  spec="."
  [ -n "$extras" ] && spec=".[${extras}]"
  echo "kvtop setup: installing kvtop${extras:+ with [$extras]} into .venv" >&2
  # pip's chatter goes to a log, shown only when the install fails.
  if ! .venv/bin/python -m pip install -e "$spec" >.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "kvtop setup: pip install failed (log above, also in .venv/pip-install.log)." >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
