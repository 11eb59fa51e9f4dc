"""``dt.io.decode_jpeg``, ``decode_png``, ``decode_image``, ``encode_jpeg``,
``encode_png`` (also ``dt.image.*``, as TF has them in both): TF's
``image_ops`` codecs, with TF's arguments and defaults.

In a graph each adds its op (``DecodeJpeg`` ...; kernels in
``kernels/cpu/image_codec.py``); in a dataset function (see
:mod:`distrib.ops.value_mode`) it decodes or encodes the value at once with
the same code. ``decode_image(dtype=float32)`` scales to [0, 1] as TF's
(``convert_image_dtype``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.ops import math_ops as ops
from distrib.ops import value_mode

__all__ = ["decode_jpeg", "decode_png", "decode_image", "encode_jpeg", "encode_png",
           "is_jpeg"]


def _now(*inputs: Any) -> bool:
    return value_mode.values_now(*inputs)


def call_kernel(fn: Any, *args: Any) -> Any:
    from kernels.registry import KernelError
    try:
        return fn(*args)
    except KernelError as e:
        raise InvalidArgumentError(str(e)) from None


def string_bytes(contents: Any) -> bytes:
    v = value_mode.as_value(contents)
    if np.ndim(v) != 0:
        raise InvalidArgumentError(f"contents must be a scalar string, got shape {np.shape(v)}")
    item = v.item() if isinstance(v, np.ndarray) else v
    return item.encode("latin-1") if isinstance(item, str) else bytes(item)


def _string(contents: Any) -> Any:
    return ops.convert_to_tensor(contents, dtype=dtypes.string)


def decode_jpeg(contents: Any, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
                try_recover_truncated: bool = False, acceptable_fraction: float = 1,
                dct_method: str = "", name: str | None = None) -> Any:
    """A JPEG's pixels as uint8 ``[height, width, channels]`` (TF's)."""
    if _now(contents):
        from kernels.cpu.image_codec import decode_jpeg_value
        return call_kernel(decode_jpeg_value, string_bytes(contents), int(channels), int(ratio),
                     bool(fancy_upscaling), str(dct_method))
    attrs = {"channels": int(channels), "ratio": int(ratio),
             "fancy_upscaling": bool(fancy_upscaling), "dct_method": str(dct_method),
             "try_recover_truncated": bool(try_recover_truncated),
             "acceptable_fraction": float(acceptable_fraction)}
    return ops.op_output("DecodeJpeg", [_string(contents)], attrs, name or "DecodeJpeg")


def decode_png(contents: Any, channels: int = 0, dtype: Any = dtypes.uint8,
               name: str | None = None) -> Any:
    """A PNG's pixels as ``[height, width, channels]`` uint8 or uint16 (TF's)."""
    want = dtypes.as_dtype(dtype)
    if _now(contents):
        from kernels.cpu.image_codec import decode_png_value
        return call_kernel(decode_png_value, string_bytes(contents), int(channels), want.as_numpy_dtype)
    return ops.op_output("DecodePng", [_string(contents)],
                         {"channels": int(channels), "dtype": want}, name or "DecodePng")


def decode_image(contents: Any, channels: int | None = None, dtype: Any = dtypes.uint8,
                 name: str | None = None, expand_animations: bool = True) -> Any:
    """JPEG, PNG, GIF or BMP by the bytes' format (TF's ``decode_image``): uint8,
    uint16 or float32 by the kernel's scales; another ``dtype`` decoded as
    uint16 and converted (``convert_image_dtype``), as TF's."""
    want = dtypes.as_dtype(dtype)
    raw = want if want in (dtypes.uint8, dtypes.uint16, dtypes.float32) else dtypes.uint16
    if _now(contents):
        from kernels.cpu.image_codec import decode_image_value
        out = call_kernel(decode_image_value, string_bytes(contents), int(channels or 0),
                    raw.as_numpy_dtype, bool(expand_animations))
        if want != raw:
            from distrib.ops.image_values import convert_image_dtype_value
            out = convert_image_dtype_value(out, want.as_numpy_dtype)
        return out
    out = ops.op_output("DecodeImage", [_string(contents)],
                        {"channels": int(channels or 0), "dtype": raw,
                         "expand_animations": bool(expand_animations)}, name or "decode_image")
    if want != raw:
        from distrib.ops.image_adjust import convert_image_dtype
        out = convert_image_dtype(out, want)
    return out


def encode_jpeg(image: Any, format: str = "", quality: int = 95,  # noqa: A002 - TF's name
                progressive: bool = False, optimize_size: bool = False,
                chroma_downsampling: bool = True, density_unit: str = "in",
                x_density: int = 300, y_density: int = 300, xmp_metadata: str = "",
                name: str | None = None) -> Any:
    """A uint8 image ``[height, width, 1 or 3]`` as JPEG bytes (TF's)."""
    if not 0 <= int(quality) <= 100:
        raise InvalidArgumentError(f"quality must be in [0, 100], got {quality}")
    if _now(image):
        from kernels.cpu.image_codec import encode_jpeg_value
        return np.array(call_kernel(encode_jpeg_value, np.asarray(image), int(quality),
                              bool(chroma_downsampling), str(format)), dtype=object)
    x = ops.convert_to_tensor(image, dtype=dtypes.uint8)
    return ops.op_output("EncodeJpeg", [x], {"quality": int(quality), "format": str(format),
                                             "chroma_downsampling": bool(chroma_downsampling)},
                         name or "EncodeJpeg")


def encode_png(image: Any, compression: int = -1, name: str | None = None) -> Any:
    """A uint8 or uint16 image ``[height, width, channels]`` as PNG bytes (TF's)."""
    if _now(image):
        from kernels.cpu.image_codec import encode_png_value
        return np.array(call_kernel(encode_png_value, np.asarray(image), int(compression)),
                        dtype=object)
    x = ops.convert_operand(image)
    return ops.op_output("EncodePng", [x], {"compression": int(compression)},
                         name or "EncodePng")


def is_jpeg(contents: Any, name: str | None = None) -> Any:
    """Whether the bytes start as a JPEG does (TF's ``is_jpeg``; values only here)."""
    from kernels.cpu.image_codec import image_format
    return np.bool_(image_format(string_bytes(contents)) == "jpeg")
