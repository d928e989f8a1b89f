"""What the SASS of each cluster kernel's timed region must hold (found by compiling the PTX
with ptxas for sm_90 and reading it, then fixed here as checks): ``ld/st/atom/red
.shared::cluster`` become generic ``LD.E``/``ST.E``/``ATOM.E.ADD`` through the shared window
(``S2R SR_SWINHI`` and two ``MOV`` form the 64-bit address), ``mapa`` one ``PRMT`` (the rank
into the address's top byte), ``barrier.cluster.arrive``/``wait`` ``UCGABAR_ARV``/
``UCGABAR_WAIT`` (the default arrive with ``MEMBAR.ALL.GPU``, ``ERRBAR``, ``CGAERRBAR`` before
it; ptxas also emits the ``BAR.SYNC`` path of a launch without clusters behind a branch).
A region that holds anything else, or not one instance per PTX instruction, is flagged."""

from __future__ import annotations

import re
from collections import Counter

from gpudissect.kernel.build import Built

# kernel-name prefix -> (SASS that counts one per PTX instance, SASS the region may hold besides)
RULES: dict[str, tuple[str, str]] = {
    "dsm_chase": (r"^LD\.E$", r"^(MOV|S2R)$"),
    "sm_chase": (r"^LDS(\.U32)?$", r"^$"),
    "dsm_ld": (r"^LD\.E(\.64|\.128)?$", r"^(MOV|S2R|R2UR|LOP3\.LUT)$"),
    "dsm_st": (r"^ST\.E(\.64|\.128)?$", r"^(MOV|S2R|R2UR)$"),
    "dsm_atomlat": (r"^ATOM\.E\.ADD", r"^(MOV|S2R)$"),
    "dsm_atom": (r"^ATOM\.E\.ADD", r"^(MOV|S2R|R2UR|LOP3\.LUT|IMAD\.MOV\.U32|HFMA2\.MMA)$"),
    "dsm_red": (r"^ATOM\.E\.ADD", r"^(MOV|S2R|R2UR|IMAD\.MOV\.U32|HFMA2\.MMA)$"),
    "mapa": (r"^PRMT$", r"^$"),
    "cbar": (r"^UCGABAR_ARV$", r"^(UCGABAR_WAIT|MEMBAR\.ALL\.GPU|ERRBAR|CGAERRBAR|CCTL\.IVALL|BRA|NOP|"
                               r"BAR\.SYNC\.DEFER_BLOCKING|LDC|ISETP\.EQ\.U32\.AND)$"),
}


def rule_for(name: str) -> tuple[str, str] | None:
    for prefix in sorted(RULES, key=len, reverse=True):
        if name.startswith(prefix):
            return RULES[prefix]
    return None


def check_region(b: Built) -> list[str]:
    """``sass:`` flags for the timed region of ``b`` (none for a kernel without one)."""
    rule = rule_for(b.name)
    if rule is None:
        return []
    want, allowed = (re.compile(x) for x in rule)
    ops = Counter(i.full for i in b.region)
    n = sum(c for op, c in ops.items() if want.match(op))
    extra = {op: c for op, c in ops.items() if not want.match(op) and not allowed.match(op)}
    out = []
    if n != b.kernel.meta["ptx_ops"]:
        out.append(f"sass: {b.name}: {n} instances of {rule[0]} in the timed region for "
                   f"{b.kernel.meta['ptx_ops']} PTX instructions")
    if b.name.startswith("cbar") and ops.get("UCGABAR_WAIT", 0) != b.kernel.meta["ptx_ops"]:
        out.append(f"sass: {b.name}: {ops.get('UCGABAR_WAIT', 0)} UCGABAR_WAIT for {b.kernel.meta['ptx_ops']} waits")
    if extra:
        out.append(f"sass: {b.name}: the timed region holds {extra} besides the work")
    if b.spills:
        out.append(f"sass: {b.name}: spills (LDL/STL)")
    return out
