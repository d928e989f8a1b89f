"""Register banks below ptxas (behaviour suite, ``banks:ffma``): a free run of registers, banks from
the pairs' costs, and the probe end to end on a stand-in GPU with planted banks (index mod 4) that
reads the patched source fields of the cubin it is given."""

from __future__ import annotations

import numpy as np
import pytest

from gpudissect.arch.target import make_target
from gpudissect.bench.contract import Context
from gpudissect.bench.runner import run
from gpudissect.device.device import FakeDevice, KernelRun
from gpudissect.kernel.control import decode_word, kernel_words
from gpudissect.kernel.patch import RZ, registers
from gpudissect.store.db import Store
from gpudissect.suites import get_suite
from gpudissect.suites.behaviour import analyse as an
from gpudissect.suites.behaviour.kernels import REPS, ROW


def test_free_registers_avoid_the_writes_and_sample_every_residue():
    dests = {3, 5, 6, 7, 8, 9, 11, 13, 15, 20, 21, 22, 23, 29}
    assert an.free_registers(dests, 32, 2) == [0, 1, 2, 4, 10, 17, 19, 27]
    assert an.free_registers(dests, 32) == [0, 1, 2, 4, 10, 12, 14, 17, 19, 25, 27, 31]
    assert an.free_registers(set(range(30)), 32) == []  # every residue lacks registers
    # within R0..R29 residue 3 keeps two (19, 27): enough, the others three
    assert an.free_registers(dests, 30) == [0, 1, 2, 4, 10, 12, 14, 17, 19, 25, 27]
    assert an.free_registers(dests | {27}, 30) == []
    assert an.free_registers(set(), 8, 2, 4) == list(range(8))


def test_banks_are_the_groups_joined_by_costly_pairs():
    regs = list(range(10, 18))
    cost = {(a, b): 1.0 + (a != b and a % 4 == b % 4) for a in regs for b in regs}
    g = an.bank_groups(cost)
    assert g["banks"] == 4 and g["rule"] == "bank = register index mod 4" and g["conflict_cycles"] == 1.0
    cost2 = {(a, b): 1.0 + (a != b and a % 2 == b % 2) for a in regs for b in regs}
    assert an.bank_groups(cost2)["rule"] == "bank = register index mod 2"
    assert an.bank_groups({(a, b): 1.0 for a in regs for b in regs})["banks"] == len(regs)  # no conflict seen


class BankGPU(FakeDevice):
    """Each FFMA whose source fields read two or three distinct registers of one bank (index mod 4,
    RZ and reused slots free) costs one cycle more per extra read of that bank."""

    def launch(self, cubin, kernel, grid, block, args, smem=0, launches=1, cluster=None):
        self.calls += 1
        n, cycles = 0, 0
        for _off, lo, hi in kernel_words(cubin)[kernel]:
            if (lo & 0xFFF) != 0x223:  # FFMA R, R, R, R (sm_90 opcode bits of the register form)
                continue
            regs, reuse = registers(lo, hi), decode_word(lo, hi).reuse
            reads = [r for k, r in enumerate((regs["ra"], regs["rb"], regs["rc"])) if r != RZ and not reuse >> k & 1]
            banks = [r % 4 for r in dict.fromkeys(reads)]
            n += 1
            cycles += 1 + max([banks.count(b) - 1 for b in banks] or [0])
        rows = np.zeros((1, ROW), np.uint64)
        for r in range(REPS):
            rows[0, 2 * r], rows[0, 2 * r + 1] = 1000 * (r + 1), 1000 * (r + 1) + 20 + cycles
        return KernelRun({"times": rows.reshape(-1), "wid": np.zeros(1, np.uint64)}, [1e-3], [1e-5])


def test_the_probe_recovers_planted_banks_and_the_reuse_saving(tmp_path):
    dev = BankGPU(sm_count=4)
    store = Store(tmp_path / "b.db")
    rid = run(get_suite("behaviour"), Context(dev, store, make_target("sm_90")), ["banks:ffma"], resume=True).run_id
    r = next(x for x in store.results(rid) if x["variant"] == "banks:ffma")
    f = r["fit"]
    assert r["value"] == 4.0 and f["rule"] == "bank = register index mod 4", f
    assert f["base_cycles"] == pytest.approx(1.0) and f["conflict_cycles"] == pytest.approx(1.0)
    reuse = f["reuse_same_bank"]
    assert reuse["none"] == pytest.approx(3.0) and reuse["a"] == pytest.approx(2.0) and reuse["a+b"] == pytest.approx(1.0)
    s = store.get_meta(f"summary:{rid}")
    assert s["banks"]["rule"] == "bank = register index mod 4"
    assert any(c.startswith("register banks (FFMA sources patched") for c in s["conclusions"])


def test_patched_sources_stay_within_the_registers_the_kernel_names(tmp_path):
    """cuobjdump's count is the allocation: reading R31 of a 32-register kernel that never named it
    faulted on an H200 (illegal instruction); the run of registers stays within what the SASS names."""
    from gpudissect.kernel.build import build_module
    from gpudissect.kernel.ptx import ptx_header
    from gpudissect.suites.behaviour import suite as bs
    from gpudissect.suites.behaviour.kernels import order_kernel

    t = make_target("sm_90")
    ks = [order_kernel(ptx_header(t.ptx_isa, t.arch), bs.BANK_CHAINS, n, registers=True) for n in bs.BANK_LENGTHS]
    built = build_module(ks, t.arch, 3)
    named = min(bs.highest_register(built[k.name]) for k in ks)
    assert named < min(built[k.name].regs for k in ks) - 1  # the case that faulted: allocation above the named
    store = Store(tmp_path / "b.db")
    rid = run(get_suite("behaviour"), Context(BankGPU(sm_count=4), store, t), ["banks:ffma"], resume=True).run_id
    r = next(x for x in store.results(rid) if x["variant"] == "banks:ffma")
    assert max(r["params"]["registers"]) <= named


def test_the_timing_reference_tables_banks_reuse_and_fetch_levels_from_the_summary():
    from gpudissect.suites.behaviour.view import banks_lines

    beh = {"banks": {"banks": 2, "groups": [[0, 2], [1, 3]], "rule": "bank = register index mod 2", "base_cycles": 1.0,
                     "conflict_cycles": 1.0, "reuse_same_bank": {"none": 3.0, "a": 2.0}, "reuse_registers": [0, 2, 4]},
           "icache": {"icache:1w": {"levels": [{"cpi": 1.0, "from_bytes": 4096, "to_bytes": 16384, "next_bytes": 32768},
                                               {"cpi": 2.5, "from_bytes": 32768, "to_bytes": 65536, "next_bytes": None}]}}}
    L = banks_lines(beh, "sm_90")
    assert "| two registers in one bank (the dearest pair) | 2 |" in L
    assert "| three registers in one bank (R0, R2, R4), reuse flag on slot a | 2 |" in L
    assert any("holds but does not apply" in x for x in L)  # sm_90's predict.toml: apply = false
    assert "| icache:1w | 2 | 32 KiB | 64 KiB | - | 2.5 |" in L
    assert banks_lines({}) == []
