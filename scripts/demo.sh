#!/usr/bin/env bash
# Set up and run kvtop's embedded demo: 8 simulated GPUs, a Kimi-K2.5 TP8 EAGLE-3 startup replayed
# in SGLang's log format through the real parser, then a changing load. q quits.
# Without a terminal (a pipe, CI) it prints the demo's one-shot report instead.
# What it is doing goes to stderr (the set-up's steps, then "starting"); stdout is kvtop's alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
if [[ -t 0 && -t 1 ]]; then
  echo "kvtop demo: starting the live view (a recorded startup replays for about 20 s, then a changing load; q quits)" >&2
  exec .venv/bin/kvtop --demo "$@"
fi
echo "kvtop demo: no terminal here, so the one-shot report (run in a terminal for the live view)." >&2
exec .venv/bin/kvtop --once --demo "$@"
