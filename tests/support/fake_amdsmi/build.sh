#!/usr/bin/env bash
# Build the fake libamd_smi.so into OUTDIR/lib (the layout ROCM_PATH=OUTDIR finds), with
# OUTDIR/lib/librocm-core.so beside it for the binding's ROCm version lookup.
# Usage: build.sh OUTDIR   (PYTHON: the interpreter whose amdsmi package names the stubs)
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: build.sh OUTDIR" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
mkdir -p "$out/lib"
"${PYTHON:-python3}" "$here/stubs.py" >"$out/lib/fake_amdsmi_stubs.h"
gcc -shared -fPIC -O2 -Wall -Wl,-soname,libamd_smi.so -I"$out/lib" \
  -o "$out/lib/libamd_smi.so.tmp" "$here/fake_amdsmi.c" -lpthread
mv "$out/lib/libamd_smi.so.tmp" "$out/lib/libamd_smi.so"
ln -sf libamd_smi.so "$out/lib/librocm-core.so"
