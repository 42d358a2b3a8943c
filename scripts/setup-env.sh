#!/usr/bin/env bash
# Prepare .venv with kvtop installed: checks (and, as root, installs) the system packages the
# build needs, creates the virtual environment, installs the package. Usage: setup-env.sh [EXTRAS]
# Says on stderr what it is doing, one numbered step at a time; silent when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
begun=$SECONDS

# Reinstall only when pyproject.toml changed or more extras are wanted (a no-op install still
# costs seconds): the stamp holds pyproject.toml's hash and the extras installed with it, and
# an environment set up for the tests ("test") serves the demo ("") as it is.
stamp=".venv/.kvtop-installed"
hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have="$(cat "$stamp" 2>/dev/null || true)"
install=1
if [ "${have%% *}" = "$hash" ] && { [ -z "$extras" ] || [ "${have#* }" = "$extras" ]; }; then
  install=0
fi
venv=0
[ -x .venv/bin/python ] || venv=1

# On a ready environment none of this runs (the demo starts sooner): only a build needs it.
missing=()
if [ "$venv" = 1 ] || [ "$install" = 1 ]; then
  if ! command -v "$python" >/dev/null 2>&1; then
    echo "kvtop setup: $python not found. Install Python 3.10 or newer (apt-get install python3)." >&2
    exit 1
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "kvtop setup: kvtop needs Python 3.10 or newer; $python is $("$python" -V 2>&1)." >&2
    exit 1
  fi

  # What the build needs, checked by capability rather than by package name:
  # systemd-python compiles against libsystemd (pkg-config, gcc, Python headers); venv needs
  # ensurepip. docs/install.md's "System packages" table lists each package added here
  # (tests/process/test_setup_scripts.py checks it).
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  pkg-config --exists libsystemd 2>/dev/null || missing+=(libsystemd-dev)
  "$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
  "$python" - <<'PY' 2>/dev/null || missing+=(python3-dev)
import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PY
fi

# The tests also use real systemd parts: journal files written by systemd-journal-remote and a
# private systemd-journald (tests that need them skip, saying why, when they are absent).
if [ "$extras" = test ]; then
  [ -x /lib/systemd/systemd-journal-remote ] || missing+=(systemd-journal-remote)
  [ -x /lib/systemd/systemd-journald ] || missing+=(systemd)
  command -v tmux >/dev/null 2>&1 || missing+=(tmux)
  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
fi

if [ ${#missing[@]} -gt 0 ] && ! { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }; then
  echo "kvtop setup: missing system packages: ${missing[*]}." >&2
  echo "Install them first, e.g.: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

steps=$(( (${#missing[@]} > 0) + venv + install ))
step=0
say() { # one numbered step on stderr: what is done now and about how long it takes
  step=$((step + 1))
  echo "kvtop setup [$step/$steps]: $*" >&2
}

if [ ${#missing[@]} -gt 0 ]; then
  say "installing system packages with apt-get: ${missing[*]} (apt-get update first; about a minute)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$venv" = 1 ]; then
  say "creating the environment .venv with $python -m venv (about 5 s)"
  "$python" -m venv .venv
fi

if [ "$install" = 1 ]; then
  spec="."
  [ -n "$extras" ] && spec=".[${extras}]"
  say "installing kvtop${extras:+ with [$extras]} and its dependencies into .venv (under a minute the first time; pip's output: .venv/pip-install.log)"
  # pip's chatter goes to the log, summarised on stderr; the log is shown only when pip fails.
  status=0
  .venv/bin/python scripts/pip_progress.py .venv/pip-install.log "kvtop setup [$step/$steps]" \
    -- install -e "$spec" || status=$?
  if [ "$status" = 130 ]; then # Ctrl-C: pip_progress said so; no stamp, so the next run redoes it
    exit 130
  elif [ "$status" != 0 ]; then
    cat .venv/pip-install.log >&2
    echo "kvtop setup: pip install failed (log above, also in .venv/pip-install.log)." >&2
    exit 1
  fi
  echo "$hash $extras" >"$stamp"
fi

if [ "$steps" -gt 0 ]; then
  echo "kvtop setup: ready in $((SECONDS - begun)) s. kvtop is .venv/bin/kvtop; to have it on PATH: source .venv/bin/activate (this shell) or pipx install . (every shell, see docs/install.md)." >&2
fi
