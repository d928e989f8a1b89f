#!/bin/bash
# Tensor suite on the device machine (issue 5 run of 2026-11-23); resumable: the DB lives in
# .devdb/ (carried back in on a second call), a killed run continues with the same command.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
Q="nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv"
LIMIT=${1:-480}
$Q >> $OUT/tensor-smi.csv
if [ -z "$SKIP_TESTS" ]; then
  timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_faults_gpu.py tests/test_per_sass.py 2>&1 | tee $OUT/gpu-pytest2.log | tail -3
fi
mkdir -p .devdb
timeout $LIMIT python3 -m gpudissect run --suite tensor --db .devdb/t.db --jobs 16 2>&1 | tee -a $OUT/tensor.log | grep -v "^\s*$" | tail -60
$Q >> $OUT/tensor-smi.csv
python3 -m gpudissect export $OUT/tensor.json --format suite --suite tensor --db .devdb/t.db 2>&1 | tail -1
python3 -m gpudissect export $OUT/tensor-layouts.json --format layouts --suite tensor --db .devdb/t.db 2>&1 | tail -1
gzip -c .devdb/t.db > $OUT/tensor.db.gz
