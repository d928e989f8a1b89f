#!/usr/bin/env bash
# GPU check of the stall sweep below ptxas (issue 35), from the repository root on a GPU
# machine (H200, sm_90):
#   OUT=<empty folder> PYTHONPATH=src bash scripts/check_below_ptxas.sh
# Runs the instructions suite on 20 single-SASS variants (plus the companion references the plan
# adds) into $OUT/hp.db, at most 150 s (about 40 s expected: 35 s of it compiling), then prints
# every latency_hw record: variant, value, ptxas's stall, the -O3 latency, the sweep
# (stall:ok|wrong|error:cycles per instance), opcode, scoreboards and flags, the patched SASS
# with its control bits; then the audit's check of them and the study's conclusion.
# Log: $OUT/check_below_ptxas.log.
set -uo pipefail
OUT=${OUT:-/tmp/check_below_ptxas}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PYTHON:-python3}
DB="$OUT/hp.db"
rm -f "$DB" "$DB-wal" "$DB-shm"
VARIANTS=(fma.rn.f32 add.f32 mul.f32 fma.rn.f64 add.f64 mad.lo.s32 add.s32 lop3.b32 shf.l.wrap.b32
          min.s32 max.f32 fma.rn.f16x2 prmt.b32 popc.b32 ex2.approx.ftz.f32 mul.hi.u32 cvt.rn.f32.s32
          mad.lo.s16 sub.u16 and.pred selp.b32)
{
  echo "== run (timeout 150 s): ${VARIANTS[*]}"
  timeout 150 "$PY" -m gpudissect run --suite instructions --db "$DB" --new --no-selfcheck "${VARIANTS[@]}" 2>&1 | tail -n 12
  echo "== run exit: ${PIPESTATUS[0]} (124: timed out)"
  echo "== latency_hw records"
  "$PY" scripts/check_below_ptxas.py "$DB"
} 2>&1 | tee "$OUT/check_below_ptxas.log"
