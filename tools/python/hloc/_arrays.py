"""numpy arrays to and from the native module's ``(element type, dims, bytes)``.

The element type is the HLO name (``f32``, ``bf16``, ``f8e4m3fn``, ``s4``); the bytes are
little-endian, row-major, one element per byte for the sub-byte types (signed ones as
sign-extended ``int8``). ``bfloat16``, the fp8 types and the sub-byte types are
``ml_dtypes``' (imported only when such an array is met).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# numpy dtype name -> HLO element type, for the types stored whole bytes at a time.
_NUMPY_TO_HLO: dict[str, str] = {
    "bool": "pred",
    "int8": "s8",
    "int16": "s16",
    "int32": "s32",
    "int64": "s64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
    "float8_e5m2": "f8e5m2",
    "float8_e4m3": "f8e4m3",
    "float8_e4m3fn": "f8e4m3fn",
    "float8_e4m3b11fnuz": "f8e4m3b11fnuz",
    "float8_e3m4": "f8e3m4",
    "float8_e5m2fnuz": "f8e5m2fnuz",
    "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e8m0fnu": "f8e8m0fnu",
}
_HLO_TO_NUMPY: dict[str, str] = {v: k for k, v in _NUMPY_TO_HLO.items()}

# ml_dtypes' sub-byte types (one element per byte, the value in the low bits) -> HLO type
# and the numpy type of the native module's one-byte storage.
_SUB_BYTE: dict[str, tuple[str, str]] = {
    "int4": ("s4", "int8"),
    "int2": ("s2", "int8"),
    "int1": ("s1", "int8"),
    "uint4": ("u4", "uint8"),
    "uint2": ("u2", "uint8"),
    "uint1": ("u1", "uint8"),
    "float4_e2m1fn": ("f4e2m1fn", "uint8"),
}
_SUB_BYTE_HLO: dict[str, tuple[str, str]] = {h: (n, s) for n, (h, s) in _SUB_BYTE.items()}


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - ml_dtypes is a dependency of the package
        raise ImportError(
            "hloc needs ml_dtypes for bfloat16, fp8 and sub-byte arrays: pip install ml_dtypes"
        ) from e
    return ml_dtypes


def to_native(i: int, array: Any) -> tuple[str, list[int], bytes]:
    """Input ``p{i}`` as the native module takes it."""
    a = np.asarray(array)
    name = a.dtype.name
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    # `tobytes` writes C order whatever the layout (np.ascontiguousarray would make a
    # scalar 1-D).
    dims = [int(d) for d in a.shape]
    if name in _NUMPY_TO_HLO:
        return _NUMPY_TO_HLO[name], dims, a.tobytes()
    if name in _SUB_BYTE:
        hlo, storage = _SUB_BYTE[name]
        if hlo == "f4e2m1fn":
            return hlo, dims, a.view(np.uint8).tobytes()
        return hlo, dims, a.astype(storage).tobytes()
    # The native module names the problem, with the position of the array.
    return name, dims, a.tobytes()


def from_native(elem: str, dims: list[int], data: bytearray) -> np.ndarray:
    """An output of the native module as a numpy array (writable, owning ``data``)."""
    shape = tuple(dims)
    if elem in _SUB_BYTE_HLO:
        name, storage = _SUB_BYTE_HLO[elem]
        ml = _ml_dtypes()
        raw = np.frombuffer(data, dtype=storage).reshape(shape)
        target = getattr(ml, name, None)
        if target is None:  # an older ml_dtypes without int1/uint1: the storage values
            return raw
        return raw.view(target) if elem == "f4e2m1fn" else raw.astype(target)
    numpy_name = _HLO_TO_NUMPY.get(elem)
    if numpy_name is None:
        raise TypeError(f"hloc: no numpy dtype for the HLO element type `{elem}`")
    if _needs_ml_dtypes(numpy_name):
        dtype = np.dtype(getattr(_ml_dtypes(), numpy_name))
    else:
        dtype = np.dtype(numpy_name)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _needs_ml_dtypes(name: str) -> bool:
    return name == "bfloat16" or name.startswith("float8_")
