#!/usr/bin/env bash
# GPU check of issue 33's sustained headlines (task hS), from the repo root on a GPU machine:
#   export PYTHONUNBUFFERED=1 PYTHONPATH=src; OUT=<empty folder> bash scripts/check_hS.sh
# Runs only what the change touches, small sweeps (about 60-90 s): the tensor suite on
# wgmma.f32.bf16 and mma.sync.m16n8k16.f32.f16.f32 (burst sweep, then each sustained 3 x 200 ms with
# the SM clock measured in the sustained kernel and NVML sampled), and the memory suite's L2 and
# DRAM read bandwidth (burst sweep, then a ~150 ms sustained run of the best configuration).
# Prints the key quantities (sustained and burst, with clocks, power, throttle reasons) and the
# sustained records' clock evidence. Log: $OUT/check_hS.log.
set -uo pipefail
OUT=${OUT:-/tmp/check_hS}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PYTHON:-python3}
DB="$OUT/check_hS.db"
rm -f "$DB"
timeout 150 "$PY" scripts/check_hS.py "$DB" 2>&1 | tee "$OUT/check_hS.log"
