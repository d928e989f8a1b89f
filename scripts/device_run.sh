#!/bin/bash
# Every suite on the device machine, one GPU, one run (data/h100/, data/h200/): run from the
# repository root with OUT set (the device tool sets it). Phase 1: the instruction suite; phase 2
# (the next call, on the same machine): memory, behaviour, the Hopper suites (cluster, async,
# sync) and the GPU tests; phase 3: tensor and the predictor's validation (with this run's
# tables); phase 4: fleet mode through a local Ray instance. Phase 2 first finishes the
# instruction suite where phase 1's call ran out of time (the runner resumes), then packs it;
# GPU_TESTS=1 adds the GPU tests to phase 2. Phase 3's validation measures the corpus of public
# kernels (corpus/README.md) when the call carries it (the device tool's carry: ["corpus"]).
# Each suite has its own store in /tmp (kept between the calls); what comes back under $OUT:
# <suite>.json.xz (the suite document, xz -9e), the store packed for shipping (<suite>.db.xz,
# store/pack.py; several packs as one tar: at most 8 files come back per call), the run log, nvidia-smi readings and the
# wall time of each phase.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
Q="nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv"
G="python3 -m gpudissect"
suite() {  # suite name, time limit (s), extra arguments
    $Q >> $OUT/nvidia-smi.csv
    /usr/bin/time -f "$1: wall %e s" timeout "$2" $G run --suite "$1" --db /tmp/$1.db "${@:3}" 2>&1 | tee -a $OUT/run.log
    $Q | tail -1 >> $OUT/nvidia-smi.csv
    $G export $OUT/$1.json.xz --format suite --suite "$1" --db /tmp/$1.db 2>&1 | tee -a $OUT/run.log
    mkdir -p /tmp/gd-data && cp $OUT/$1.json.xz /tmp/gd-data/  # this run's tables, for phase 3
}
pack() {  # the stores, packed after the timed suites (xz is slow; it runs beside nothing)
    for s in "$@"; do python3 -m gpudissect.store.pack /tmp/$s.db $OUT/$s.db.xz 2>&1 | tee -a $OUT/run.log; done
}
case "$1" in
  1) start=$(date +%s)  # what a call's limit cuts short, phase 2 resumes (the same store)
     suite instructions 560
     echo "phase 1 (instructions): $(( $(date +%s) - start )) s" | tee -a $OUT/run.log ;;
  2) start=$(date +%s)
     # the rest of phase 1, if its call's limit cut it short (a finished run is not run again):
     # then this call packs it and ends; phase 2 again runs the other suites
     unfinished=0
     [ -f /tmp/instructions.db ] && unfinished=$(python3 -c "from gpudissect.store.db import Store
print(sum(r['finished'] is None for r in Store('/tmp/instructions.db').runs()))" 2>/dev/null || echo 0)
     if [ "$unfinished" != 0 ]; then
         suite instructions 480; pack instructions && touch /tmp/instructions.packed
         echo "phase 2: the instruction suite finished and packed; call phase 2 again for the others" | tee -a $OUT/run.log
         exit 0
     fi
     [ -f /tmp/instructions.db ] && [ ! -f /tmp/instructions.packed ] && pack instructions && touch /tmp/instructions.packed
     suite memory 150; suite behaviour 90; suite cluster 90; suite async 90; suite sync 90
     echo "phase 2 (the rest of the instructions, memory, behaviour, cluster, async, sync): $(( $(date +%s) - start )) s" \
         | tee -a $OUT/run.log
     pack memory behaviour cluster async sync
     (cd $OUT && tar cf stores.tar memory.db.xz behaviour.db.xz cluster.db.xz async.db.xz sync.db.xz \
         && rm -f memory.db.xz behaviour.db.xz cluster.db.xz async.db.xz sync.db.xz)
     if [ -n "$GPU_TESTS" ]; then  # in the log: at most 8 files come back per call
         echo "== GPU tests" >> $OUT/run.log
         timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/ 2>&1 | tail -5 | tee -a $OUT/run.log
     fi ;;
  3) start=$(date +%s)
     TABLES=/tmp/gd-data; [ -f $TABLES/instructions.json.xz ] || TABLES=data/h100  # phases 1-2 of this run
     suite tensor 400
     echo "phase 3 (tensor): $(( $(date +%s) - start )) s" | tee -a $OUT/run.log
     $G export $OUT/tensor-layouts.json.xz --format layouts --suite tensor --db /tmp/tensor.db 2>&1 | tail -1
     cp $OUT/tensor.json.xz $TABLES/ 2>/dev/null
     # NO_VALIDATION=1: the set keeps a validation measured elsewhere (its analysis is redone with
     # this run's tables without a GPU: predict --validate --measured F --data DIR)
     [ -z "$NO_VALIDATION" ] && /usr/bin/time -f "predict validation: wall %e s" timeout 480 $G predict --validate \
         --data $TABLES -o $OUT/predict-validation.json.xz --figure $OUT/predict-validation.png 2>&1 | tail -30 \
         | tee -a $OUT/run.log
     pack tensor ;;
  4) # fleet mode end to end through a local Ray instance on this machine; the device image has no
     # Ray: a trimmed Ray (.fleetwheels/ray-min.tar.xz, scripts/fleet_wheels.sh) and the wheels of
     # what it needs beside it travel in the carried folder .fleetwheels
     R=/tmp/rayenv; mkdir -p $R && tar xJf .fleetwheels/ray-min.tar.xz -C $R \
         && python3 -m pip install -q --no-deps --target $R .fleetwheels/*.whl 2>&1 | tail -2
     export PYTHONPATH=src:$R RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1
     /usr/bin/time -f "fleet: wall %e s" timeout 420 $G fleet --db /tmp/fleet.db --json $OUT/fleet.json \
         --report $OUT/fleet-report.html 2>&1 | tail -40 | tee $OUT/fleet.log ;;
esac
