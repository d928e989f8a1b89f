"""The GPU's platform as a run records it (``DeviceInfo.platform``: ECC, power limits,
persistence, MIG, confidential computing, PCIe link, NVLink, host, maximum clocks), read out:
in one line for the report's provenance, and what differs between two sets' platforms."""

from __future__ import annotations

from gpudissect.report.present.fmt import fmt_num

# key -> (what it is called, how its value reads)
FIELDS: dict[str, tuple[str, str]] = {
    "host": ("host", "{}"),
    "driver": ("driver", "{}"),
    "ecc": ("ECC", "{}"),
    "power_limit_w": ("power limit", "{} W"),
    "power_limit_default_w": ("default power limit", "{} W"),
    "power_limit_enforced_w": ("enforced power limit", "{} W"),
    "persistence": ("persistence mode", "{}"),
    "mig": ("MIG", "{}"),
    "cc": ("confidential computing", "{}"),
    "pcie_gen": ("PCIe generation", "Gen {}"),
    "pcie_width": ("PCIe width", "x{}"),
    "pcie_gen_max": ("PCIe generation (max)", "Gen {}"),
    "pcie_width_max": ("PCIe width (max)", "x{}"),
    "nvlink_active_links": ("NVLink links active", "{}"),
    "sm_max_mhz": ("max SM clock", "{} MHz"),
    "mem_max_mhz": ("max memory clock", "{} MHz"),
}


def field_text(key: str, value) -> str:
    return FIELDS[key][1].format(fmt_num(value)) if key in FIELDS else fmt_num(value)


def platform_text(p: dict | None) -> str:
    """A platform record in one line ('-' where none was recorded)."""
    if not p:
        return "-"
    parts = [f"{FIELDS[k][0]} {field_text(k, p[k])}" for k in FIELDS if p.get(k) is not None]
    return ("fake GPU: " if p.get("fake") else "") + "; ".join(parts)


def platform_differences(a: dict | None, b: dict | None) -> list[str]:
    """What differs between two platform records, each as '<what> <a> vs <b>' (a field that one
    of them lacks is not known there: not a difference)."""
    if not a or not b:
        return []
    return [f"{FIELDS[k][0]} {field_text(k, a[k])} vs {field_text(k, b[k])}" for k in FIELDS
            if a.get(k) is not None and b.get(k) is not None and a[k] != b[k]]
