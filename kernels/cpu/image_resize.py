"""CPU kernels of TF's resize ops: ``ResizeBilinear``, ``ResizeNearestNeighbor``,
``ResizeArea`` (and ``ResizeBilinearGrad``, ``ResizeNearestNeighborGrad``),
on ``[batch, height, width, channels]`` images, the output size an attr.

TF's index rules (``core/kernels/image/resize_*_op.cc``), kept exactly:

- scale per axis: ``(in - 1) / (out - 1)`` with ``align_corners`` (and
  out > 1), else ``in / out``;
- bilinear: the source coordinate is ``(i + 0.5) * scale - 0.5`` with
  ``half_pixel_centers`` (TF2's ``tf.image.resize``), else ``i * scale``
  (TF1's ``resize_images``); it reads rows ``max(floor(c), 0)`` and
  ``min(ceil(c), in - 1)`` weighted by ``c - floor(c)``, along x first
  (top and bottom), then y; the output is float32;
- nearest: ``floor((i + 0.5) * scale)`` with ``half_pixel_centers``,
  ``round(i * scale)`` with ``align_corners``, else ``floor(i * scale)``,
  clamped to the image; the output keeps the input's dtype;
- area: each output pixel the mean of the input box
  ``[i * scale, (i + 1) * scale)`` per axis, partial pixels weighted by how
  much of them the box covers; float32.

Each is separable, so a resize is two gathers (or two small matrix
products, for area) over the whole batch: numpy's loops, no Python loop
per pixel. Bilinear of uint8 or float32 images runs as a numba loop once
compiled (:mod:`kernels.cpu.resize_jit`; the same bits, 10x less time).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu.jit_loader import BackgroundJit
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["resize_value"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

# the bilinear resize of one image as a numba loop (the numpy path below until it
# is compiled, off the caller's thread: see jit_loader)
_JIT = BackgroundJit("kernels.cpu.resize_jit")


def _scale(n_in: int, n_out: int, align_corners: bool) -> float:
    if align_corners and n_out > 1:
        return (n_in - 1) / (n_out - 1)
    return n_in / n_out


def _bilinear_axis(n_in: int, n_out: int, align: bool, half: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scale = np.float32(_scale(n_in, n_out, align))   # TF computes the coordinates in float
    i = np.arange(n_out, dtype=np.float32)
    coord = ((i + np.float32(0.5)) * scale - np.float32(0.5)) if half else i * scale
    floor = np.floor(coord)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(coord), n_in - 1).astype(np.int64)
    return lower, upper, (coord - floor).astype(np.float32)


def _nearest_axis(n_in: int, n_out: int, align: bool, half: bool) -> np.ndarray:
    scale = np.float32(_scale(n_in, n_out, align))
    i = np.arange(n_out, dtype=np.float32)
    coord = (i + np.float32(0.5)) * scale if half else i * scale
    idx = np.floor(coord + np.float32(0.5)) if align else np.floor(coord)   # roundf: half away
    idx = np.minimum(idx.astype(np.int64), n_in - 1)
    return np.maximum(idx, 0)


def _area_matrix(n_in: int, n_out: int, align: bool) -> np.ndarray:
    """[n_out, n_in]: the share of each input pixel in each output pixel's box."""
    scale = _scale(n_in, n_out, align)
    weights = np.zeros((n_out, n_in), np.float64)
    for o in range(n_out):
        start, end = o * scale, (o + 1) * scale
        first, last = int(np.floor(start)), int(np.ceil(end))
        for i in range(first, last):
            share = min(i + 1, end) - max(i, start)
            if share > 0:
                weights[o, min(i, n_in - 1)] += share
    return (weights / scale).astype(np.float32)


def _check(images: np.ndarray, size: Any, op: str) -> tuple[int, int]:
    if images.ndim != 4:
        raise KernelError(f"{op}: images must be 4-D [batch, height, width, channels], got "
                          f"shape {list(images.shape)}")
    h, w = (int(s) for s in size)
    if h <= 0 or w <= 0:
        raise KernelError(f"{op}: the output size must be positive, got {[h, w]}")
    if images.shape[1] == 0 or images.shape[2] == 0:
        raise KernelError(f"{op}: input image must be of non-zero size, got "
                          f"{list(images.shape)}")
    return h, w


def resize_value(images: np.ndarray, size: Any, method: str, align_corners: bool = False,
                 half_pixel_centers: bool = False) -> np.ndarray:
    """Resize ``[batch, h, w, c]`` images to ``size`` by ``method`` (``"bilinear"``,
    ``"nearest"``, ``"area"``), TF's rules (see the module header)."""
    op = {"bilinear": "ResizeBilinear", "nearest": "ResizeNearestNeighbor",
          "area": "ResizeArea"}[method]
    out_h, out_w = _check(images, size, op)
    if align_corners and half_pixel_centers:
        raise KernelError(f"{op}: if half_pixel_centers is True, align_corners must be False")
    in_h, in_w = images.shape[1], images.shape[2]
    if method == "nearest":
        ys = _nearest_axis(in_h, out_h, align_corners, half_pixel_centers)
        xs = _nearest_axis(in_w, out_w, align_corners, half_pixel_centers)
        return np.ascontiguousarray(images[:, ys][:, :, xs])
    x = images.astype(np.float32, copy=False) if method == "area" else images
    if method == "area":
        wy = _area_matrix(in_h, out_h, align_corners)
        wx = _area_matrix(in_w, out_w, align_corners)
        rows = np.einsum("oh,bhwc->bowc", wy, x, optimize=True)
        return np.einsum("pw,bowc->bopc", wx, rows, optimize=True).astype(np.float32)
    y_lo, y_hi, y_lerp = _bilinear_axis(in_h, out_h, align_corners, half_pixel_centers)
    x_lo, x_hi, x_lerp = _bilinear_axis(in_w, out_w, align_corners, half_pixel_centers)
    jit = _JIT.ready(np.float32) if images.dtype in (np.uint8, np.float32) else None
    if jit is not None:   # compiled: each pixel read where it lies (resize_jit's header)
        out = np.empty((images.shape[0], out_h, out_w, images.shape[3]), np.float32)
        for b in range(images.shape[0]):
            jit.bilinear(np.ascontiguousarray(images[b]), y_lo, y_hi, y_lerp, x_lo, x_hi,
                         x_lerp, out[b])
        return out
    x = images.astype(np.float32, copy=False)
    xl = x_lerp[None, None, :, None]
    top_rows, bottom_rows = x[:, y_lo], x[:, y_hi]
    top = top_rows[:, :, x_lo] + (top_rows[:, :, x_hi] - top_rows[:, :, x_lo]) * xl
    bottom = bottom_rows[:, :, x_lo] + (bottom_rows[:, :, x_hi] - bottom_rows[:, :, x_lo]) * xl
    return (top + (bottom - top) * y_lerp[None, :, None, None]).astype(np.float32)


def _attrs(attrs: dict) -> tuple[bool, bool]:
    return bool(attrs.get("align_corners", False)), bool(attrs.get("half_pixel_centers", False))


@KERNELS("ResizeBilinear", CPU)
def resize_bilinear(inputs: list, attrs: dict) -> list:
    return [resize_value(np.asarray(inputs[0]), attrs["size"], "bilinear", *_attrs(attrs))]


@KERNELS("ResizeNearestNeighbor", CPU)
def resize_nearest(inputs: list, attrs: dict) -> list:
    return [resize_value(np.asarray(inputs[0]), attrs["size"], "nearest", *_attrs(attrs))]


@KERNELS("ResizeArea", CPU)
def resize_area(inputs: list, attrs: dict) -> list:
    return [resize_value(np.asarray(inputs[0]), attrs["size"], "area",
                         bool(attrs.get("align_corners", False)))]


@KERNELS("ResizeBilinearGrad", CPU)
def resize_bilinear_grad(inputs: list, attrs: dict) -> list:
    """The gradient of ResizeBilinear for its images: each output's gradient
    spread back over the four pixels it read, by their weights (TF's)."""
    grads, original = np.asarray(inputs[0], np.float32), np.asarray(inputs[1])
    align, half = _attrs(attrs)
    b, in_h, in_w, c = original.shape
    out_h, out_w = grads.shape[1], grads.shape[2]
    y_lo, y_hi, y_lerp = _bilinear_axis(in_h, out_h, align, half)
    x_lo, x_hi, x_lerp = _bilinear_axis(in_w, out_w, align, half)
    # along y: rows of the gradient into input rows
    rows = np.zeros((b, in_h, out_w, c), np.float32)
    np.add.at(rows, (slice(None), y_lo), grads * (1 - y_lerp)[None, :, None, None])
    np.add.at(rows, (slice(None), y_hi), grads * y_lerp[None, :, None, None])
    out = np.zeros((b, in_h, in_w, c), np.float32)
    np.add.at(out, (slice(None), slice(None), x_lo), rows * (1 - x_lerp)[None, None, :, None])
    np.add.at(out, (slice(None), slice(None), x_hi), rows * x_lerp[None, None, :, None])
    return [out.astype(original.dtype, copy=False)]


@KERNELS("ResizeNearestNeighborGrad", CPU)
def resize_nearest_grad(inputs: list, attrs: dict) -> list:
    """The gradient of ResizeNearestNeighbor: each output's gradient added to
    the pixel it copied."""
    grads, original = np.asarray(inputs[0]), np.asarray(inputs[1])
    align, half = _attrs(attrs)
    b, in_h, in_w, c = original.shape
    ys = _nearest_axis(in_h, grads.shape[1], align, half)
    xs = _nearest_axis(in_w, grads.shape[2], align, half)
    rows = np.zeros((b, in_h, grads.shape[2], c), grads.dtype)
    np.add.at(rows, (slice(None), ys), grads)
    out = np.zeros((b, in_h, in_w, c), grads.dtype)
    np.add.at(out, (slice(None), slice(None), xs), rows)
    return [out]
