#!/usr/bin/env bash
# GPU check of issue 33 (a), (b), (c) (task hB), from the repo root on a GPU machine:
#   export PYTHONUNBUFFERED=1 PYTHONPATH=src; OUT=<empty folder> bash scripts/check_hB.sh
# Runs only what the change touches (about 90 s in all, each step time-boxed):
#  (a) async: the TMA bulk DRAM-read streams, the plain-load baseline bw:ld.v4:dram (ILP x CTAs/SM
#      sweep) and cp.async.cg16, in one run;
#  (b) instructions: fma.rn.f32 alone (--quick, no selfcheck), whose read-read study compares the
#      read-read and its control only where their SASS shows one register-bank / reuse pattern;
#  (c) behaviour: the pipe pairs with fma.rn.f64 and the solos they need.
# Then prints the figures to judge (scripts/check_hB.py). Log: $OUT/check_hB.log.
set -uo pipefail
OUT=${OUT:-/tmp/check_hB}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PYTHON:-python3}
W=$(mktemp -d)
{
  echo "== (a) async"
  timeout 30 "$PY" -m gpudissect run --suite async --db "$W/a.db" --new \
    'bw:tma.bulk:dram:*' 'bw:ld.v4:dram' 'bw:cp.async.cg16:dram' 2>&1 | tail -5
  echo "== (b) instructions fma.rn.f32"
  timeout 38 "$PY" -m gpudissect run --suite instructions --db "$W/i.db" --new --quick --no-selfcheck \
    fma.rn.f32 2>&1 | tail -5
  echo "== (c) behaviour pipes with fma.rn.f64"
  timeout 20 "$PY" -m gpudissect run --suite behaviour --db "$W/b.db" --new 'pipes:*fma.rn.f64*' 2>&1 | tail -5
  "$PY" scripts/check_hB.py "$W"
} 2>&1 | tee "$OUT/check_hB.log"
