"""Reads every tensor of aged checkpoints back and compares it with its exact value (for
test_training_state.py and python/benches/resume_aged.py): the role the drop-ins' names give
it (ADR 0027), what the store reports (fidelity) and what it holds (negatives, non-finite
values, zeros, each element's relative error).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import strata

#: Second moments: read back >= 0, every element within the budget of the preset.
SECOND_MOMENT_BUDGET = 0.5


def expected_role(name: str, tensor: torch.Tensor) -> str:
    """The role ADR 0027 gives a tensor the drop-ins name ``name``: the last path component
    of optimizer state, counters by name, integer, bool and scalar tensors and RNG / scheduler
    paths as state, the rest (model weights) as weights. A chunk of a sharded tensor
    (``strata.dcp``'s ``<fqn>@<offsets>``) has the role of its tensor."""
    fqn, at, offsets = name.rpartition("@")
    if at and offsets.replace(",", "").isdigit():
        name = fqn
    parts = [p for p in name.replace(".", "/").replace(":", "/").split("/") if p]
    last = parts[-1] if parts else ""
    if last == "step":
        return "counter"
    if not tensor.is_floating_point() or tensor.numel() <= 1:
        return "state"
    if {"rng_state", "lr_scheduler", "loops", "callbacks"} & set(parts):
        return "state"
    if last == "exp_avg_sq":
        return "second-moment"
    if last == "exp_avg":
        return "first-moment"
    return "weight"


@dataclasses.dataclass
class Row:
    """One tensor of one aged checkpoint, read back."""

    step: int
    name: str
    role: str
    ndim: int
    #: Bytes of the tensor: one of at most 32 is stored in its record, exact (ADR 0029).
    nbytes: int
    fidelity: dict[str, Any]
    #: Bit-exact equal to the value saved.
    same_bits: bool
    #: Elements read back below zero where the saved value was not.
    negatives: int
    #: Elements read back NaN or infinite where the saved value was finite.
    nonfinite: int
    #: Zeros read back exactly where the saved value was zero, and nowhere else.
    zeros_kept: bool
    #: The largest relative error of an element whose saved value is not zero.
    max_elem_rel: float
    #: ||read - saved|| / ||saved|| (0 for a zero tensor).
    rel_error: float


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, to compare bit for bit (NaN payloads and -0.0 included)."""
    return t.contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def audit(store: str, exact: dict[int, dict[str, torch.Tensor]]) -> list[Row]:
    """Every tensor of every checkpoint in ``exact`` (step -> name -> the saved tensor), read
    back from ``store`` with its fidelity."""
    rows = []
    with strata.open_read_only(store) as st:
        for step, saved in exact.items():
            assert sorted(st.keys(step)) == sorted(saved), step
            for name, want in saved.items():
                got, fidelity = st.get(name, step, framework="pt", with_fidelity=True)
                assert got.dtype == want.dtype and got.shape == want.shape, (step, name)
                rows.append(_row(step, name, want, got, fidelity))
    return rows


def _row(step: int, name: str, want: torch.Tensor, got: torch.Tensor,
         fidelity: dict[str, Any]) -> Row:
    same = torch.equal(_bits(got), _bits(want))
    if not want.is_floating_point():
        return Row(step, name, expected_role(name, want), want.dim(), _nbytes(want), fidelity,
                   same, 0, 0, True, 0.0, 0.0)
    w, g = want.double(), got.double()
    nonzero = w != 0
    err = (g - w).abs()
    elem = (err[nonzero] / w[nonzero].abs()).max().item() if nonzero.any() else 0.0
    norm = torch.linalg.vector_norm(w).item()
    return Row(
        step, name, expected_role(name, want), want.dim(), _nbytes(want), fidelity, same,
        negatives=int(((g < 0) & (w >= 0)).sum()),
        nonfinite=int((~torch.isfinite(g) & torch.isfinite(w)).sum()),
        zeros_kept=bool(torch.equal(g == 0, w == 0)),
        max_elem_rel=elem,
        rel_error=torch.linalg.vector_norm(g - w).item() / norm if norm else 0.0,
    )


def snapshot(store: str) -> dict[int, dict[str, torch.Tensor]]:
    """Every checkpoint of ``store``, as saved (read before aging: bit-exact)."""
    with strata.open_read_only(store) as st:
        return {s: st.load_checkpoint(s, framework="pt") for s in st.steps()}
