"""The ``strata`` command line, driven from Python: import, compact, age, export, stats, log.

``strata stats --json`` and ``strata age --json`` are read as JSON. ``strata log`` prints text only,
so its two tables (checkpoints; the versions of one tensor) are parsed here with strict patterns:
a line that does not match raises :class:`CliOutputError` rather than being skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class CliError(Exception):
    """A ``strata`` command failed: the command and what it printed."""


class CliOutputError(Exception):
    """A ``strata`` command printed something this module cannot read."""


def default_binary() -> Path:
    """``target/release/strata`` of this repository (``cargo build --release -p strata-cli``)."""
    return ROOT / "target" / "release" / "strata"


def build(binary: Path) -> None:
    """Builds the CLI when ``binary`` is this repository's release binary and it is missing."""
    if binary == default_binary():
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "strata-cli", "--bin", "strata"],
                       cwd=ROOT, check=True)
    if not binary.exists():
        raise FileNotFoundError(f"no strata binary at {binary}")


@dataclass
class Strata:
    """One ``strata`` binary."""

    binary: Path

    def run(self, *args: str | os.PathLike[str]) -> tuple[str, float]:
        """stdout and wall seconds of ``strata -q ARGS``; raises :class:`CliError` on failure."""
        cmd = [str(self.binary), "-q", *map(str, args)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if p.returncode != 0:
            raise CliError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout, secs

    def stats(self, store: Path) -> dict:
        """``strata stats --json``."""
        return json.loads(self.run("stats", store, "--json")[0])

    def age(self, store: Path, args: list[str]) -> tuple[dict, float]:
        """``strata age STORE --json ARGS``: the report and the command's wall seconds."""
        out, secs = self.run("age", store, "--json", *args)
        return json.loads(out), secs

    def export(self, store: Path, step: int, out: Path) -> None:
        """``strata export STORE --step STEP -o OUT``."""
        self.run("export", store, "--step", str(step), "-o", out)

    def checkpoints(self, store: Path) -> list[dict]:
        """``strata log STORE``: per checkpoint, step, tensors, raw and stored bytes, and the
        worst error of its aged versions (None when it holds none)."""
        rows = []
        lines = self.run("log", store)[0].splitlines()
        if lines and lines[0].strip() == "no checkpoints":
            return rows
        for line in lines[1:]:
            m = _CHECKPOINT_ROW.fullmatch(line)
            if m is None:
                raise CliOutputError(f"strata log {store}: unexpected line {line!r}")
            aged = _AGED_NOTE.search(m["notes"] or "")
            rows.append({"step": int(m["step"]), "tensors": int(m["tensors"]), "raw_bytes": int(m["raw"]),
                         "stored_bytes": int(m["stored"]), "aged_rel_error": float(aged[1]) if aged else None})
        return rows

    def versions(self, store: Path, tensor: str) -> list[dict]:
        """``strata log STORE TENSOR``: per version, step, raw and stored bytes, whether aged."""
        rows = []
        for line in self.run("log", store, tensor)[0].splitlines()[1:]:
            m = _VERSION_ROW.fullmatch(line)
            if m is None:
                raise CliOutputError(f"strata log {store} {tensor}: unexpected line {line!r}")
            rows.append({"step": int(m["step"]), "raw_bytes": int(m["raw"]), "stored_bytes": int(m["stored"]),
                         "aged": ", aged (rel. error" in m["encoding"]})
        return rows


_CHECKPOINT_ROW = re.compile(r"\s*(?P<step>\d+)\s+(?P<tensors>\d+)\s+(?P<raw>\d+)\s+(?P<stored>\d+)"
                             r"(?:\s+(?P<notes>.*))?")
_AGED_NOTE = re.compile(r"\(aged, rel\. error <= ([0-9.eE+-]+)\)")
_VERSION_ROW = re.compile(r"\s*(?P<step>\d+)\s+(?P<dtype>\S+)\s+(?P<shape>\[[^\]]*\])\s+(?P<raw>\d+)\s+"
                          r"(?P<stored>\d+)\s+(?P<encoding>.+)")
