"""The machine a run trained on, as results.json records it (``machine``): the CPU's model, its
widest x86 vector extension and the CPUs this process may use. Times differ between machines (the
same GCL step ran 4.7 times longer on a 2-core AVX2 machine than on a 2-core AVX-512 one:
docs/performance.md), so a time is read beside the machine that measured it; the suite's
``--dry-run`` says when the runs it estimates from ran on another machine."""
from __future__ import annotations

import os
import platform
from collections import Counter

#: x86 vector extensions from the widest down (the flags /proc/cpuinfo lists).
ISA_FLAGS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"))


def parse_cpuinfo(text: str) -> tuple[str | None, str | None]:
    """``(model name, widest vector extension)`` of the first processor in /proc/cpuinfo's ``text``
    (each None when it says nothing of it; ARM's lists no model name)."""
    model, flags = None, None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip() or None
        elif key in ("flags", "Features") and flags is None:
            flags = set(value.split())
    isa = next((name for flag, name in ISA_FLAGS if flags and flag in flags), None)
    return model, isa


def cpu_count() -> int | None:
    """The CPUs this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def describe(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """``{"cpu", "isa", "cpus"}`` of this machine (``cpu``: the model name, else the architecture)."""
    try:
        with open(cpuinfo) as handle:
            model, isa = parse_cpuinfo(handle.read())
    except OSError:
        model, isa = None, None
    return {"cpu": model or platform.machine() or None, "isa": isa, "cpus": cpu_count()}


def label(machine) -> str:
    """One machine in words: ``AMD EPYC (avx2, 2 CPUs)``; ``an unrecorded machine`` for None."""
    if not isinstance(machine, dict):
        return "an unrecorded machine"
    details = ", ".join(part for part in (machine.get("isa"),
                                          machine.get("cpus") and f"{machine['cpus']} CPUs") if part)
    return f"{machine.get('cpu') or 'a CPU'}" + (f" ({details})" if details else "")


def where(records) -> str:
    """Where the runs of ``records`` (results.json ``machine`` entries, None where a run has none)
    ran: ``1 run on AMD EPYC (avx2, 2 CPUs), 3 runs on an unrecorded machine``."""
    counts = Counter(label(m) for m in records)
    return ", ".join(f"{n} {'run' if n == 1 else 'runs'} on {name}" for name, n in sorted(counts.items()))


def mixed(records) -> str:
    """``""`` when ``records`` are all of one recorded machine, else :func:`where` they ran: for a
    table of times to say that they do not compare."""
    records = list(records)
    one = len({label(m) for m in records}) == 1 and all(isinstance(m, dict) for m in records)
    return "" if one else where(records)
