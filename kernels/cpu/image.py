"""CPU kernels of TF's image and parsing ops that the input pipelines use:
``AdjustContrastv2`` (``dt.image.adjust_contrast``, the math of
``random_contrast``) and ``DecodeRaw`` (a record's bytes as numbers).

The rest of ``dt.image`` is built of general ops, as TF builds it (crops
are slices, flips reverses, brightness an add, standardization a few
reductions), so it needs no kernel of its own here.
"""
from __future__ import annotations

import numpy as np

from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__: list[str] = []

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


@KERNELS("AdjustContrastv2", CPU)
def adjust_contrast_v2(inputs: list, attrs: dict) -> list:
    """``(x - mean) * factor + mean``, the mean of each channel of each image
    (over height and width: dimensions -3 and -2), as TF's kernel."""
    x, factor = np.asarray(inputs[0]), np.asarray(inputs[1])
    if x.ndim < 3 or x.dtype.kind != "f":
        raise KernelError(f"AdjustContrastv2 takes float images of rank >= 3 "
                          f"([..., height, width, channels]), got {x.dtype} {list(x.shape)}")
    if factor.ndim != 0:
        raise KernelError(f"AdjustContrastv2: contrast_factor must be a scalar, got shape "
                          f"{list(factor.shape)}")
    work = x.astype(np.float32, copy=False) if x.dtype == np.float16 else x
    mean = work.mean(axis=(-3, -2), keepdims=True, dtype=work.dtype)
    out = (work - mean) * work.dtype.type(factor) + mean
    return [out.astype(x.dtype, copy=False)]


@KERNELS("DecodeRaw", CPU)
def decode_raw(inputs: list, attrs: dict) -> list:
    """Each string of the input as a vector of ``out_type`` (its bytes read in
    the byte order ``little_endian`` says): shape ``input.shape + [n]``."""
    raw = np.asarray(inputs[0], dtype=object)
    want = as_dtype(attrs.get("out_type") or "uint8")
    if want.kind not in "iuf" and want != np.bool_:
        raise KernelError(f"DecodeRaw: out_type must be a number type, got {want}")
    order = "<" if attrs.get("little_endian", True) else ">"
    dtype = want.newbyteorder(order) if want.itemsize > 1 else want
    flat = [bytes(b, "latin-1") if isinstance(b, str) else bytes(b) for b in raw.reshape(-1)]
    sizes = {len(b) for b in flat}
    if len(sizes) > 1:
        raise KernelError(f"DecodeRaw: every string must have the same length, got lengths "
                          f"{sorted(sizes)}; decode records of one size at a time")
    size = sizes.pop() if sizes else 0
    if size % want.itemsize:
        raise KernelError(f"DecodeRaw: a string of {size} bytes is not a whole number of "
                          f"{want} values ({want.itemsize} bytes each)")
    n = size // want.itemsize
    out = np.frombuffer(b"".join(flat), dtype=dtype).astype(want)   # (a copy of its own)
    return [out.reshape(raw.shape + (n,))]
