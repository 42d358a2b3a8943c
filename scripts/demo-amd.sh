#!/usr/bin/env bash
# kvtop on two simulated AMD GPUs read through AMD's own amdsmi binding: a real public boot
# (Qwen3.5-27B AWQ, TP 2, on two Radeon AI PRO R9700, tests/fixtures/real-boots) replayed from
# its log, the GPUs served by the test suite's fake libamd_smi.so (tests/support/fake_amdsmi:
# built with gcc, the amdsmi binding from the test extra), two real processes titled as SGLang's
# schedulers holding the memory the log says. Arguments go to kvtop (--once for one report).
# Without a terminal it prints the one-shot report. q quits; the processes and files go with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh test
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
for rank in 0 1; do
  bash -c "exec -a sglang::scheduler_TP$rank sleep 86400" &
  pids+=("$!")
done
.venv/bin/python - "$dir" "${pids[@]}" <<'PY'
import sys
from tests.support.fake_amdsmi import GIB, build_fake_amdsmi, write_state

where, *pids = sys.argv[1:]
build_fake_amdsmi(where)
total = 32 * GIB  # the R9700's 32 GiB; the log leaves 4.49 GiB free after startup
gpus = {
    i: {
        "name": "AMD Radeon AI PRO R9700",
        "uuid": f"{i:02x}ab9700-0000-1000-80b4-00000000000{i}",
        "bus_id": f"0000:{0x03 + i * 0x40:02x}:00.0",
        "mem_total": total,
        "mem_used": total - int(4.49 * GIB),
        "util_gpu": 35 + i,
        "util_mem": 20,
        "temp": 58 + i,
        "power_mw": 210000 + i * 4000,
        "power_limit_mw": 300000,
    }
    for i in range(2)
}
procs = {i: [(int(pid), int(27.0 * GIB))] for i, pid in enumerate(pids)}
write_state(f"{where}/state", gpus, procs=procs, driver="6.14.0")
PY
export ROCM_PATH="$dir" FAKE_AMDSMI_FILE="$dir/state"
log=tests/fixtures/real-boots/qwen3.5-27b-awq-r9700-tp2-fp8kv/boot.log
if [[ -t 0 && -t 1 ]] || [[ " $* " == *" --once "* ]]; then
  .venv/bin/kvtop --log-file "$log" --no-metrics "$@"
else
  echo "kvtop AMD demo: no terminal here, so the one-shot report." >&2
  .venv/bin/kvtop --once --log-file "$log" --no-metrics "$@"
fi
