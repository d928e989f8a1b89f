#!/bin/bash
# scripts/bench_run.py on the device machine, across calls of at most 600 s (issue 36): the run of
# every suite (full, then --quick) takes longer than one call, so it runs in the background from a
# copy of the tree outside the working tree (each call lays the tree anew) in a session of its own
# (setsid: a call's time limit kills the call's process group, and a job left in it dies with it).
#   start [S]  copy the tree, start the benchmark, follow it for S seconds (default 540)
#   wait [S]   follow it for S seconds more (at once, with exit 3, where the job is gone)
# Either call ends by bringing back what there is: the runs tables so far, the logs, the JSON, and
# once the job is done, set.tar: the full run as a shipped set (data/<gpu>/: a packed store and a
# document per suite, the tensor layouts, the log and nvidia-smi's readings).
# Issue the calls back to back: the machine is given back after 30 s idle, and the job with it.
# COMMIT names the commit (the copy has no .git).
B=/tmp/gd-bench; W=/tmp/gd-tree
Q="nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv"
if [ "$1" = start ]; then
    rm -rf $W $B; mkdir -p $W $B; cp -a . $W/
    $Q > $B/nvidia-smi.csv
    # the DONE mark is made inside the new session: a subshell around it stays in the call's
    # process group and dies with the call, so a later call would wait for a mark never made
    # after both runs (nothing timed beside it): the full run's store as a shipped set, a store
    # and a document per suite (scripts/split_store.py, export, store/pack.py) in one tar
    (cd $W && GPUDISSECT_COMMIT=$COMMIT setsid nohup bash -c \
        "PYTHONPATH=src python3 scripts/bench_run.py --out $B > $B/bench.out 2>&1; bash scripts/bench_run_device.sh set >> $B/bench.out 2>&1; touch $B/DONE" \
        < /dev/null > /dev/null 2>&1 &)
fi
if [ "$1" = set ]; then  # run by the job above, in the copy of the tree
    [ -f $B/full-runs.json ] || { echo "no finished full run: no set"; exit 0; }
    S=$B/set; rm -rf $S; mkdir -p $S
    PYTHONPATH=src python3 scripts/split_store.py $B/full.db $S/db
    for db in $S/db/*.db; do
        s=$(basename $db .db)
        PYTHONPATH=src python3 -m gpudissect export $S/$s.json.xz --format suite --suite $s --db $db | tail -1
        PYTHONPATH=src python3 -m gpudissect.store.pack $db $S/$s.db.xz
    done
    PYTHONPATH=src python3 -m gpudissect export $S/tensor-layouts.json.xz --format layouts --suite tensor --db $S/db/tensor.db | tail -1
    gzip -c $B/full.log > $S/run.log.gz; cp $B/nvidia-smi.csv $S/
    (cd $S && tar cf $B/set.tar *.json.xz *.db.xz run.log.gz nvidia-smi.csv)
    exit 0
fi
if [ "$1" = wait ] && [ ! -d $B ]; then  # the machine was given back between the calls: the job died with it
    echo "no benchmark on this machine (a fresh one: the job died with the machine it ran on); start it again"; exit 3
fi
end=$(( $(date +%s) + ${2:-540} ))
while [ ! -f $B/DONE ] && [ "$(date +%s)" -lt $end ]; do sleep 5; done
echo "--- $(date -u) done: $([ -f $B/DONE ] && echo yes || echo no)"
cat $B/bench.out
for f in $B/full.log $B/quick.log; do [ -f $f ] && { echo "== $f"; grep -A1 -E "^run [0-9]" $f | tail -24; }; done
# done or not, what there is comes back with every call (a machine lost between calls keeps what
# the last call brought): the runs tables so far, the logs, and once the full run is done, the comparison
(cd $W && PYTHONPATH=src python3 scripts/bench_run.py --out $B --snapshot)
$Q,noheader >> $B/nvidia-smi.csv
[ -f $B/full-runs.json ] && [ ! -f $B/compare-h200.json ] && (cd $W && PYTHONPATH=src python3 scripts/compare_runs.py $B/full.db data/h200 --json $B/compare-h200.json | head -30)
for p in full quick; do  # the runs table: the finished run's, else what it has timed so far
    if [ -f $B/$p-runs.json ]; then cp $B/$p-runs.json $OUT/; else cp $B/$p-runs-sofar.json $OUT/ 2>/dev/null; fi
done
cp $B/run-*.json $B/compare-h200.json $B/nvidia-smi.csv $B/set.tar $OUT/ 2>/dev/null  # at most 8 files in all
for p in full quick; do [ -f $B/$p.log ] && gzip -c $B/$p.log > $OUT/run-$p.log.gz; done
exit 0
