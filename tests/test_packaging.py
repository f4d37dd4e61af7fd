"""Every optional extra in pyproject.toml is imported by something: no extra promises a feature that
is not built (a ``vllm`` or ``ray`` extra that nothing imports once suggested engines that do not exist)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _imports() -> set[str]:
    found = set()
    for folder in ("src", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            found.update(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", path.read_text(), re.MULTILINE))
    return found


# distributions whose import name is not their name
IMPORT_NAMES = {"openenv_core": "openenv"}


def test_every_extra_is_imported_somewhere() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    imported = _imports()
    unused = {}
    for extra, requirements in extras.items():
        if extra == "dev":  # the test tools, not a feature
            continue
        for requirement in requirements:
            module = re.split(r"[<>=!\[ ;]", requirement, maxsplit=1)[0].replace("-", "_")
            module = IMPORT_NAMES.get(module, module)
            if module not in imported:
                unused.setdefault(extra, []).append(module)
    assert not unused, f"extras that nothing in src/ or benchmarks/ imports: {unused}"
