"""Conversions between NumPy arrays / torch tensors and the flat ``uint8`` arrays of the
native module.

Input: a C-contiguous CPU array or tensor is viewed as ``uint8`` in place (no copy); anything
else (non-contiguous, big-endian, on a GPU) is first copied to a contiguous little-endian CPU
array. Output: the native module hands a ``uint8`` array that owns the decoded bytes; it is
viewed as the tensor's dtype and shape (``np.ndarray.view`` / ``torch.from_numpy(...).view``),
never copied again.
"""

from __future__ import annotations

import numbers
import operator
import sys
from typing import Any

import numpy as np

try:  # optional: a real bfloat16 dtype for NumPy
    import ml_dtypes as _ml_dtypes

    _NP_BF16: Any = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    _NP_BF16 = None

MAX_STEP = 2**64 - 1

# Strata dtype name -> NumPy dtype (little-endian). bf16 is handled apart.
_NP_OF = {
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "f64": np.dtype("<f8"),
    "i8": np.dtype("i1"),
    "u8": np.dtype("u1"),
    "i16": np.dtype("<i2"),
    "u16": np.dtype("<u2"),
    "i32": np.dtype("<i4"),
    "u32": np.dtype("<u4"),
    "i64": np.dtype("<i8"),
    "u64": np.dtype("<u8"),
    "bool": np.dtype("?"),
    "c64": np.dtype("<c8"),
}
_NAME_OF_NP = {(d.kind, d.itemsize): n for n, d in _NP_OF.items()}

# The 8-bit floats: Strata name -> ml_dtypes type name (NumPy has none; without ml_dtypes they
# come back as uint8 bits and cannot be saved from NumPy) and torch dtype name.
_FP8 = {
    "f8_e4m3": ("float8_e4m3fn", "float8_e4m3fn"),
    "f8_e5m2": ("float8_e5m2", "float8_e5m2"),
    "f8_e8m0": ("float8_e8m0fnu", "float8_e8m0fnu"),
    "f8_e4m3fnuz": ("float8_e4m3fnuz", "float8_e4m3fnuz"),
    "f8_e5m2fnuz": ("float8_e5m2fnuz", "float8_e5m2fnuz"),
}
# The packed sub-byte floats (safetensors' F4, F6_E2M3, F6_E3M2): Strata name -> bytes per
# element. One element is a packed group (two FP4 values in a byte, four FP6 values in three
# bytes), so the last dimension counts groups. NumPy has no such dtype: an F4 pair comes back
# as one uint8 (torch: float4_e2m1fn_x2, the same layout), an F6 group as three uint8 in an
# extra last axis of length 3 (torch has no FP6 dtype: uint8 there too).
_PACKED = {"f4_e2m1_x2": 1, "f6_e2m3_x4": 3, "f6_e3m2_x4": 3}

_NP_FP8: dict[str, Any] = {}
if _ml_dtypes is not None:
    for _name, (_ml, _) in _FP8.items():
        if hasattr(_ml_dtypes, _ml):
            _NP_FP8[_name] = np.dtype(getattr(_ml_dtypes, _ml))
_NAME_OF_FP8 = {d: n for n, d in _NP_FP8.items()}


def check_step(step: Any, what: str = "step") -> int:
    """An int in 0..2**64-1, or TypeError / ValueError (bool, float and str are refused)."""
    if isinstance(step, bool) or not isinstance(step, (numbers.Integral, np.integer)):
        raise TypeError(f"{what} must be an int, not {type(step).__name__}")
    step = operator.index(step)
    if step < 0 or step > MAX_STEP:
        raise ValueError(f"{what} must be in 0..2**64-1, got {step}")
    return step


def check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(
            f"tensor names must be str, got {type(name).__name__} {name!r} "
            "(nested dicts: flatten them first, e.g. strata.flatten)"
        )
    return name


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _np_name(dtype: np.dtype) -> str:
    if _NP_BF16 is not None and dtype == _NP_BF16:
        return "bf16"
    if dtype in _NAME_OF_FP8:
        return _NAME_OF_FP8[dtype]
    if dtype.kind in "fiubc":
        name = _NAME_OF_NP.get((dtype.kind, dtype.itemsize))
        if name is not None:
            return name
    raise TypeError(
        f"unsupported dtype {dtype} (Strata stores f32, f16, bf16, f64, i8..i64, u8..u64, bool, "
        "complex64, and ml_dtypes' 8-bit floats)"
    )


def to_bytes(x: Any) -> tuple[str, list[int], np.ndarray]:
    """(dtype name, shape, flat uint8 array) of an array or tensor; no copy for a contiguous
    little-endian CPU input."""
    if is_torch_tensor(x):
        return _torch_to_bytes(x)
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple, numbers.Number)):
            x = np.asarray(x)
        else:
            raise TypeError(f"expected a numpy array or torch tensor, got {type(x).__name__}")
    name = _np_name(x.dtype)
    shape = list(x.shape)  # before ascontiguousarray, which makes 0-d arrays 1-d
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    x = np.ascontiguousarray(x)
    return name, shape, x.reshape(-1).view(np.uint8)


_TORCH_NAMES: dict[Any, str] = {}


def _torch_names() -> dict[Any, str]:
    if not _TORCH_NAMES:
        torch = _torch()
        pairs = {
            "float32": "f32",
            "float16": "f16",
            "bfloat16": "bf16",
            "float64": "f64",
            "int8": "i8",
            "uint8": "u8",
            "int16": "i16",
            "uint16": "u16",
            "int32": "i32",
            "uint32": "u32",
            "int64": "i64",
            "uint64": "u64",
            "bool": "bool",
            "complex64": "c64",
        }
        pairs.update({torch_name: name for name, (_, torch_name) in _FP8.items()})
        pairs["float4_e2m1fn_x2"] = "f4_e2m1_x2"
        for attr, name in pairs.items():
            dt = getattr(torch, attr, None)
            if dt is not None:
                _TORCH_NAMES[dt] = name
    return _TORCH_NAMES


def _torch_to_bytes(t: Any) -> tuple[str, list[int], np.ndarray]:
    torch = _torch()
    name = _torch_names().get(t.dtype)
    if name is None:
        raise TypeError(
            f"unsupported dtype {t.dtype} (Strata stores float32/16/64, bfloat16, int8..64, "
            "uint8..64, bool, complex64, the float8 types, float4_e2m1fn_x2)"
        )
    if t.layout != torch.strided:
        raise TypeError(f"unsupported tensor layout {t.layout} (only dense tensors)")
    t = t.detach()
    if t.device.type == "meta":
        raise TypeError("a tensor on the meta device has no data to store")
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    shape = list(t.shape)
    if t.is_complex():
        t = torch.view_as_real(t)  # (..., 2) float32: the same bytes, viewable as uint8
    flat = t.reshape(-1).view(torch.uint8)
    return name, shape, flat.numpy()


def snapshot(x: Any) -> Any:
    """A private copy of `x` on the CPU (for saves that run after the call returns)."""
    if is_torch_tensor(x):
        return x.detach().to("cpu", copy=True).contiguous()
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True, order="C")
    return x


def from_bytes(dtype: str, shape: Any, data: np.ndarray, framework: str) -> Any:
    """The tensor of `data` (a flat uint8 array that owns its bytes), viewed, not copied."""
    shape = tuple(int(d) for d in shape)
    if _PACKED.get(dtype) == 3:
        # An FP6 group: its three bytes on an extra last axis, in NumPy and torch alike.
        shape, dtype = shape + (3,), "u8"
    if framework in ("pt", "torch"):
        torch = _torch()
        if torch is None:
            import torch  # noqa: F811 - imported on demand
        tdt = _torch_dtype(dtype)
        if data.size == 0:
            return torch.empty(shape, dtype=tdt)
        if tdt == torch.complex64:
            return torch.view_as_complex(torch.from_numpy(data).view(torch.float32).reshape(shape + (2,)))
        return torch.from_numpy(data).view(tdt).reshape(shape)
    if framework in ("np", "numpy"):
        if dtype == "bf16":
            np_dt = _NP_BF16 if _NP_BF16 is not None else np.dtype("<u2")
        elif dtype in _FP8:
            np_dt = _NP_FP8.get(dtype, np.dtype("u1"))
        elif dtype in _PACKED:
            np_dt = np.dtype("u1")
        else:
            np_dt = _NP_OF[dtype]
        return data.view(np_dt).reshape(shape)
    raise ValueError(f"unknown framework {framework!r} (use 'np' or 'pt')")


def _torch_dtype(dtype: str) -> Any:
    for k, v in _torch_names().items():
        if v == dtype:
            return k
    raise TypeError(f"torch has no dtype for Strata's {dtype}")


def check_framework(framework: str) -> str:
    if framework not in ("np", "numpy", "pt", "torch"):
        raise ValueError(f"unknown framework {framework!r} (use 'np' or 'pt')")
    return framework
