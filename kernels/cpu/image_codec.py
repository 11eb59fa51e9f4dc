"""CPU kernels of TF's image codecs: ``DecodeJpeg``, ``DecodePng``,
``DecodeImage``, ``EncodeJpeg``, ``EncodePng``, and the same work on
Python values (``decode_*_value``), which a data pipeline's map calls
directly.

JPEG goes through libjpeg-turbo by way of ``simplejpeg`` (measured 1.7x
Pillow's decode of a 256x256 JPEG on the development machine, and it frees
the GIL, so a parallel map's threads decode at once); PNG, GIF and BMP, and
the JPEG options simplejpeg lacks (``ratio``), through Pillow. Both are
imported on first use. TF's attrs and rules: ``channels`` 0 keeps the
file's (1 for a grey JPEG, else 3; PNG 1-4), 1 makes grey, 3 RGB, 4 RGBA;
``dct_method="INTEGER_FAST"`` and ``fancy_upscaling=False`` take the faster
paths; a PNG decoded as ``uint16`` from 8-bit data is scaled by 257;
bytes that are not an image of the expected kind are a ``KernelError``
in TF's words ("Invalid JPEG data or crop window", "Unknown image file
format").
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np

from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["decode_jpeg_value", "decode_png_value", "decode_image_value", "encode_jpeg_value",
           "encode_png_value", "image_format"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_JPEG, _PNG, _GIF, _BMP = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"BM"
_DCT_METHODS = ("", "INTEGER_FAST", "INTEGER_ACCURATE")


def image_format(data: bytes) -> str:
    """``"jpeg"``, ``"png"``, ``"gif"``, ``"bmp"`` by the file's magic, else ``""``."""
    for magic, name in ((_JPEG, "jpeg"), (_PNG, "png"), (_GIF, "gif"), (_BMP, "bmp")):
        if data[:len(magic)] == magic:
            return name
    return ""


def string_bytes(value: Any) -> bytes:
    v = np.asarray(value, dtype=object)
    if v.ndim != 0:
        raise KernelError(f"contents must be a scalar string, got shape {list(v.shape)}")
    item = v.item()
    return item.encode("latin-1") if isinstance(item, str) else bytes(item)


def _channels(image: np.ndarray, channels: int) -> np.ndarray:
    """An [h, w, c] array with ``channels`` channels (0: as it is)."""
    have = image.shape[-1]
    if channels in (0, have):
        return image
    if channels == 1:
        rgb = image[..., :3].astype(np.float32)
        grey = rgb @ np.array([0.299, 0.587, 0.114], np.float32) if have >= 3 else rgb[..., 0]
        return np.rint(grey)[..., None].astype(image.dtype)
    if channels == 3:
        return np.repeat(image, 3, axis=-1) if have == 1 else image[..., :3]
    if channels == 4:
        base = np.repeat(image[..., :1], 3, axis=-1) if have < 3 else image[..., :3]
        alpha = image[..., 3:4] if have == 4 else np.full(image.shape[:-1] + (1,),
                                                          np.iinfo(image.dtype).max, image.dtype)
        return np.concatenate([base, alpha], axis=-1)
    raise KernelError(f"channels must be 0, 1, 3 or 4, got {channels}")


def _pillow_array(data: bytes, what: str, ratio: int = 1) -> np.ndarray:
    from PIL import Image
    try:
        with Image.open(io.BytesIO(data)) as im:
            if ratio > 1:
                im.draft(im.mode, (im.size[0] // ratio, im.size[1] // ratio))
            if im.mode in ("P", "PA", "CMYK", "YCbCr", "1"):
                im = im.convert("RGBA" if "A" in im.mode or "transparency" in im.info else "RGB")
            elif im.mode in ("I;16", "I;16B", "I;16L", "I"):
                return np.asarray(im, dtype=np.uint16)[..., None] if im.mode != "I" else \
                    np.asarray(im).astype(np.uint16)[..., None]
            arr = np.asarray(im)
    except Exception as e:   # Pillow raises many kinds for bad bytes
        raise KernelError(f"{what}: {e}") from None
    return arr[..., None] if arr.ndim == 2 else arr


def decode_jpeg_value(data: bytes, channels: int = 0, ratio: int = 1,
                      fancy_upscaling: bool = True, dct_method: str = "") -> np.ndarray:
    """A JPEG's pixels: uint8 [height, width, channels] (see the module header)."""
    if channels not in (0, 1, 3):
        raise KernelError("JPEG does not support 4 channels" if channels == 4 else
                          f"`channels` must be 0, 1, 3 or 4 but got {channels}")
    if dct_method not in _DCT_METHODS:
        raise KernelError("dct_method must be one of {'', 'INTEGER_FAST', 'INTEGER_ACCURATE'}")
    if image_format(data) != "jpeg":
        raise KernelError("Invalid JPEG data or crop window, data size "
                          f"{len(data)} (not a JPEG: it does not start with FF D8 FF)")
    if ratio not in (1, 2, 4, 8):
        raise KernelError(f"ratio must be 1, 2, 4 or 8, got {ratio}")
    if ratio == 1:
        import simplejpeg
        try:
            _, _, colorspace, _ = simplejpeg.decode_jpeg_header(data)
            grey = channels == 1 or (channels == 0 and colorspace.lower() == "gray")
            # TF's default ("") is libjpeg's fast integer DCT, as "INTEGER_FAST"
            out = simplejpeg.decode_jpeg(data, colorspace="GRAY" if grey else "RGB",
                                         fastdct=dct_method != "INTEGER_ACCURATE",
                                         fastupsample=not fancy_upscaling, strict=False)
            return out if out.ndim == 3 else out[..., None]
        except (ValueError, OSError):
            pass   # a JPEG libjpeg-turbo refuses (CMYK, arithmetic coding): Pillow's turn
    arr = _pillow_array(data, "Invalid JPEG data or crop window", ratio)
    return _channels(arr, channels if channels else (1 if arr.shape[-1] == 1 else 3))


def decode_png_value(data: bytes, channels: int = 0, dtype: Any = np.uint8) -> np.ndarray:
    """A PNG's pixels: [height, width, channels] of uint8 or uint16."""
    want = np.dtype(dtype)
    if want not in (np.uint8, np.uint16):
        raise KernelError(f"DecodePng: dtype must be uint8 or uint16, got {want}")
    arr = _pillow_array(data, "Invalid PNG data")
    arr = _channels(arr, channels)
    if arr.dtype == want:
        return arr
    if want == np.uint16:
        return arr.astype(np.uint16) * 257
    return (arr >> 8).astype(np.uint8)


def decode_image_value(data: bytes, channels: int = 0, dtype: Any = np.uint8,
                       expand_animations: bool = True) -> np.ndarray:
    """Any of JPEG, PNG, GIF, BMP by its magic: [h, w, c] (a GIF [frames, h, w, 3]
    when ``expand_animations``), as uint8, uint16 or float32 by TF's scales: 8-bit
    pixels times 256 as uint16 (a PNG's by 257, libpng's widening), over 255 as
    float32 (a PNG's, read as 16 bits, over 65535)."""
    want = np.dtype(dtype)
    if want not in (np.uint8, np.uint16, np.float32):
        raise KernelError(f"`dtype` for `DecodeImage` must be unit8, unit16, float but got: "
                          f"{want}")
    if channels not in (0, 1, 3, 4):
        raise KernelError(f"`channels` must be 0, 1, 3 or 4 but got {channels}")
    kind = image_format(data)
    if kind == "png":
        out = decode_png_value(data, channels, np.uint8 if want == np.uint8 else np.uint16)
        return out if want != np.float32 else out.astype(np.float32) * np.float32(1 / 65535)
    if kind == "jpeg":
        out = decode_jpeg_value(data, channels)
    elif kind == "gif":
        if channels not in (0, 3):
            raise KernelError(f"channels must be 0 or 3 for GIF, got {channels}")
        from PIL import Image, ImageSequence
        try:
            with Image.open(io.BytesIO(data)) as im:
                frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)]
        except Exception as e:   # Pillow raises many kinds for bad bytes
            raise KernelError(f"Invalid GIF data (size {len(data)}), {e}") from None
        out = np.stack(frames) if expand_animations else frames[0]
    elif kind == "bmp":
        if channels == 1:
            raise KernelError(f"`channels` must be 0, 3 or 4 for BMP, but got {channels}")
        out = _channels(_pillow_array(data, "Invalid BMP data"), channels)
    else:
        raise KernelError("Unknown image file format. One of JPEG, PNG, GIF, BMP required.")
    if want == np.uint16:
        return out.astype(np.uint16) * np.uint16(256)
    if want == np.float32:
        return out.astype(np.float32) * np.float32(1 / 255)
    return out


def encode_jpeg_value(image: np.ndarray, quality: int = 95, chroma_downsampling: bool = True,
                      fmt: str = "") -> bytes:
    """An [h, w, 1 or 3] uint8 image as JPEG bytes."""
    image = np.ascontiguousarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise KernelError(f"EncodeJpeg takes a uint8 image [height, width, 1 or 3], got "
                          f"{image.dtype} {list(image.shape)}")
    import simplejpeg
    grey = image.shape[-1] == 1 or fmt == "grayscale"
    return simplejpeg.encode_jpeg(image[..., :1] if grey else image, quality=int(quality),
                                  colorspace="GRAY" if grey else "RGB",
                                  colorsubsampling="420" if chroma_downsampling else "444")


def encode_png_value(image: np.ndarray, compression: int = -1) -> bytes:
    """An [h, w, 1-4] uint8 or uint16 image as PNG bytes (compression -1: zlib's 6)."""
    if image.ndim != 3 or image.shape[-1] not in (1, 2, 3, 4) or \
            image.dtype not in (np.uint8, np.uint16):
        raise KernelError(f"EncodePng takes a uint8 or uint16 image [height, width, 1-4], got "
                          f"{image.dtype} {list(image.shape)}")
    from PIL import Image
    c = image.shape[-1]
    if image.dtype == np.uint16:
        if c != 1:
            raise KernelError("EncodePng: 16-bit images are encoded here with 1 channel only")
        im = Image.fromarray(np.ascontiguousarray(image[..., 0].astype("<u2")))
    else:   # Pillow takes L, LA, RGB, RGBA from the shape
        im = Image.fromarray(np.ascontiguousarray(image[..., 0] if c == 1 else image))
    out = io.BytesIO()
    im.save(out, format="PNG", compress_level=6 if compression < 0 else int(compression))
    return out.getvalue()


def _obj(data: bytes) -> np.ndarray:
    return np.array(data, dtype=object)


@KERNELS("DecodeJpeg", CPU)
def decode_jpeg(inputs: list, attrs: dict) -> list:
    return [decode_jpeg_value(string_bytes(inputs[0]), int(attrs.get("channels") or 0),
                              int(attrs.get("ratio") or 1),
                              bool(attrs.get("fancy_upscaling", True)),
                              str(attrs.get("dct_method") or ""))]


@KERNELS("DecodePng", CPU)
def decode_png(inputs: list, attrs: dict) -> list:
    return [decode_png_value(string_bytes(inputs[0]), int(attrs.get("channels") or 0),
                             as_dtype(attrs.get("dtype") or "uint8"))]


@KERNELS("DecodeImage", CPU)
def decode_image(inputs: list, attrs: dict) -> list:
    return [decode_image_value(string_bytes(inputs[0]), int(attrs.get("channels") or 0),
                               as_dtype(attrs.get("dtype") or "uint8"),
                               bool(attrs.get("expand_animations", True)))]


@KERNELS("EncodeJpeg", CPU)
def encode_jpeg(inputs: list, attrs: dict) -> list:
    return [_obj(encode_jpeg_value(np.asarray(inputs[0]), int(attrs.get("quality", 95)),
                                   bool(attrs.get("chroma_downsampling", True)),
                                   str(attrs.get("format") or "")))]


@KERNELS("EncodePng", CPU)
def encode_png(inputs: list, attrs: dict) -> list:
    return [_obj(encode_png_value(np.asarray(inputs[0]), int(attrs.get("compression", -1))))]
