"""Every ```python block of the top-level README.md runs, as a reader would paste it: in a
fresh folder, with the real packages (torch, transformers, lightning), top to bottom.

A block that imports a package this venv lacks is skipped with the package named (`-rs`
prints it); python/ci.sh's venv has them all. The Rust snippets run as doctests
(`cargo test --doc -p strata`), the command-line ones in cli/tests/readme.rs."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")


def python_blocks(path):
    """(first line number, code) of each ```python block of `path`."""
    with open(path) as f:
        text = f.read()
    blocks = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        blocks.append((text.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return blocks


BLOCKS = python_blocks(README)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2, "the README's Python section lost its snippets"


# The packages strata's optional modules need.
NEEDS = {"strata.hf": "transformers", "strata.lightning": "lightning", "strata.dcp": "torch",
         "strata.torch": "torch"}


def imported(code):
    """The modules `code` imports."""
    names = re.findall(r"^(?:import|from) ([\w., ]+?)(?: import .*)?$", code, re.M)
    return {m.strip() for n in names for m in n.split(",")}


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_readme_python_block_runs(line, code, tmp_path, monkeypatch):
    for module in sorted(imported(code)):
        package = NEEDS.get(module, module.split(".")[0])
        if package != "strata":
            pytest.importorskip(package, reason=f"README.md:{line} needs {package}")
    monkeypatch.chdir(tmp_path)
    # Padded so that a traceback names the README's own line numbers.
    source = "\n" * (line - 1) + code
    exec(compile(source, README, "exec"), {"__name__": "__readme__"})
