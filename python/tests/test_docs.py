"""Every ```python block of README.md and docs/python.md runs (the documentation cannot drift)."""
from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCKS = [(f"{name}:{i}", code) for name in ("README.md", "docs/python.md")
          for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), re.S), 1)]


def test_there_are_blocks():
    assert any(n.startswith("README.md") for n, _ in BLOCKS) and any(n.startswith("docs") for n, _ in BLOCKS)


@pytest.mark.parametrize("name,code", BLOCKS, ids=[n for n, _ in BLOCKS])
def test_block_runs(name, code):
    exec(compile(code, name, "exec"), {"__name__": "__doc_block__"})
