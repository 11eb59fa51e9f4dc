"""CPU kernels of TF's colour adjustments: ``AdjustSaturation`` and
``AdjustHue`` on float RGB images ``[..., 3]``.

Both go through HSV exactly as TF's kernels do (``core/kernels/image/
adjust_hsv_gpu.cu.h`` / ``adjust_saturation_op.cc``): hue in [0, 1) from
the largest channel, saturation ``range / max`` (0 for black), value the
largest channel; saturation is scaled and clamped to [0, 1], hue shifted by
``delta`` modulo 1; then back to RGB by TF's six-sector rule. Vectorized
over all pixels.
"""
from __future__ import annotations

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["rgb_to_hsv", "hsv_to_rgb", "adjust_hsv"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def rgb_to_hsv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = np.maximum(np.maximum(r, g), b)
    rng = v - np.minimum(np.minimum(r, g), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(v > 0, rng / np.where(v > 0, v, 1), 0).astype(np.float32)
        norm = np.float32(1.0) / (np.float32(6.0) * rng)
        h = np.where(r == v, norm * (g - b),
                     np.where(g == v, norm * (b - r) + np.float32(2.0 / 6.0),
                              norm * (r - g) + np.float32(4.0 / 6.0)))
    h = np.where(rng <= 0, np.float32(0), h)
    h = np.where(h < 0, h + np.float32(1), h).astype(np.float32)
    return h, s, v


def hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    c = s * v
    m = v - c
    dh = h * np.float32(6)
    category = dh.astype(np.int64)   # truncation, as TF's static_cast<int>
    fmodu = np.mod(dh, np.float32(2))
    x = c * (1 - np.abs(fmodu - 1))
    zero = np.zeros_like(c)
    table_r = [c, x, zero, zero, x, c]
    table_g = [x, c, c, x, zero, zero]
    table_b = [zero, zero, x, c, c, x]
    choice = np.clip(category, 0, 6)
    valid = (category >= 0) & (category <= 5)
    r = np.where(valid, np.choose(np.minimum(choice, 5), table_r), 0)
    g = np.where(valid, np.choose(np.minimum(choice, 5), table_g), 0)
    b = np.where(valid, np.choose(np.minimum(choice, 5), table_b), 0)
    return np.stack([r + m, g + m, b + m], axis=-1)


def adjust_hsv(images: np.ndarray, hue_delta: float = 0.0, saturation_scale: float = 1.0,
               op: str = "AdjustHue") -> np.ndarray:
    """Shift hue by ``hue_delta`` and scale saturation by ``saturation_scale``."""
    x = np.asarray(images)
    if x.ndim < 1 or x.shape[-1] != 3:
        raise KernelError(f"{op}: input must have 3 channels (RGB) in its last dimension, got "
                          f"shape {list(x.shape)}")
    if x.dtype.kind != "f":
        raise KernelError(f"{op} takes float images, got {x.dtype}; convert_image_dtype first")
    work = x.astype(np.float32, copy=False)
    h, s, v = rgb_to_hsv(work)
    if hue_delta:
        h = np.mod(h + np.float32(hue_delta), np.float32(1))
    if saturation_scale != 1.0:
        s = np.clip(s * np.float32(saturation_scale), 0, 1)
    return hsv_to_rgb(h, s, v).astype(x.dtype)


@KERNELS("AdjustHue", CPU)
def adjust_hue(inputs: list, attrs: dict) -> list:
    delta = float(np.asarray(inputs[1]))
    return [adjust_hsv(np.asarray(inputs[0]), hue_delta=delta, op="AdjustHue")]


@KERNELS("AdjustSaturation", CPU)
def adjust_saturation(inputs: list, attrs: dict) -> list:
    scale = float(np.asarray(inputs[1]))
    return [adjust_hsv(np.asarray(inputs[0]), saturation_scale=scale, op="AdjustSaturation")]
