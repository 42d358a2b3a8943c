#!/usr/bin/env bash
# Set up and run the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh test
exec .venv/bin/python -m pytest "$@"
