#!/bin/bash
# Memory suite + GPU tests on the device machine (issue 4 / 8 runs of 2026-11-23).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
Q="nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv"
$Q > $OUT/memory-smi-before.csv
timeout 300 python3 -m gpudissect run --suite memory --db /tmp/mem.db --new 2>&1 | tee $OUT/memory.log
$Q > $OUT/memory-smi-after.csv
python3 -m gpudissect export $OUT/memory.json --format suite --suite memory --db /tmp/mem.db 2>&1 | tail -2
gzip -c /tmp/mem.db > $OUT/memory.db.gz
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py tests/test_faults_gpu.py tests/test_memory_tex.py tests/test_per_sass.py 2>&1 | tee $OUT/gpu-pytest.log
$Q >> $OUT/gpu-pytest-smi.csv
