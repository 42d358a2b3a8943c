#!/usr/bin/env bash
# Set up and run kvtop on its embedded demo (an 8-GPU Kimi-K2.5 TP8 EAGLE-3 startup log).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
exec .venv/bin/kvtop --once --demo "$@"
