"""keep_freed_memory: large tensors come from malloc's heap and their memory is kept for reuse."""

import ctypes
import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, json, sys
import torch
from rlvr.runtime import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory()
before = libc.mallinfo2()
block = torch.ones(16_000_000)  # 64 MB: above glibc's largest mmap threshold
during = libc.mallinfo2()
del block
after = libc.mallinfo2()
print(json.dumps({"applied": applied, "mmapped_growth": during.hblkhd - before.hblkhd,
                  "heap_growth": during.arena - before.arena, "free_kept": after.fordblks}))
"""


def _probe(env_value: str | None) -> dict:
    env = dict(os.environ)
    env.pop("RLVR_KEEP_FREED_MEMORY", None)
    if env_value is not None:
        env["RLVR_KEEP_FREED_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has_mallinfo2() -> bool:
    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _has_mallinfo2(), reason="glibc >= 2.33 only")


def test_large_blocks_come_from_the_heap_and_stay_after_free():
    result = _probe(None)
    assert result["applied"] is True
    assert result["mmapped_growth"] < 1 << 20  # not a fresh mmap...
    assert result["heap_growth"] >= 64_000_000  # ...but heap memory
    assert result["free_kept"] >= 64_000_000  # and still there, for the next step, once freed


def test_opt_out_leaves_glibc_defaults():
    result = _probe("0")
    assert result["applied"] is False
    assert result["mmapped_growth"] >= 64_000_000
