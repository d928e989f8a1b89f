#!/usr/bin/env bash
# GPU check of the stall sweep below ptxas (issue 35), the rate regions of at least 32 per chain and
# the throughput peaks of the variants they concerned: from the repository root on a GPU machine,
# PYTHONPATH=src; prints every latency_hw record (stall:cycles per instance, x = wrong values) and any
# throughput point over its pipe limit. About 35 s on an H200.
export PYTHONUNBUFFERED=1 PYTHONPATH=src
G="python3 -m gpudissect"
W=/tmp/w; mkdir -p $W
timeout 200 $G run --suite instructions --db $W/i.db --new --no-selfcheck fma.rn.f32 add.f32 mul.f32 fma.rn.f64 add.f64 mad.lo.s32 add.s32 lop3.b32 shf.l.wrap.b32 min.s32 max.f32 fma.rn.f16x2 mad.lo.s16 sub.u16 prmt.b32 popc.b32 ex2.approx.ftz.f32 mul.hi.u32 xor.b32 cvt.rn.f32.s32 fma.rn.bf16x2 min.u16x2 2>&1 | tail -3
python3 - <<'P'
from gpudissect.store.db import Store
s=Store('/tmp/w/i.db'); rid=max(r['id'] for r in s.runs())
rs=list(s.results(rid))
for r in rs:
    if r['measure']=='latency_hw':
        p=r['params'] or {}
        sw=' '.join(f"{d['stall']}:{d.get('cycles_per_instance')}{'' if d.get('correct') else 'x'}" for d in p.get('sweep') or [])
        print(f"HW {r['variant']:22s} hw={r['value']} ptxas={p.get('ptxas_stall')} o3={p.get('latency_o3')} sb={p.get('scoreboard')} | {sw} | {[f[:60] for f in r['flags']]}")
for r in rs:
    if r['measure'] in ('throughput',) and any(f.startswith('exceeds-limit') for f in r['flags'] or []):
        print('EXCEEDS', r['variant'], r['params'].get('chains'), r['params'].get('warps'), r['params'].get('lengths'), r['value'])
for r in rs:
    if r['measure']=='throughput_peak' and r['variant'] in ('mad.lo.s16','sub.u16','fma.rn.f32','mad.lo.s32'):
        print('PEAK', r['variant'], r['value'], r['flags'])

P
