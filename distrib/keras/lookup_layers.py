"""Keras' preprocessing lookup layers the parameter-server tutorial uses:
``StringLookup``, ``IntegerLookup``, ``Hashing``, ``CategoryEncoding``
(Keras 2's arguments, defaults, index layout and OOV rules).

Index layout of a lookup (Keras' ``IndexLookup``): the mask token first
(index 0) when ``mask_token`` is set, then ``num_oov_indices`` OOV indices,
then the vocabulary. A token outside the vocabulary goes to an OOV index:
the one when there is one, else its bucket (strings: FarmHash
``to_hash_bucket_fast``, as TF; integers: the value modulo the OOV count).
``invert=True`` maps indices back to tokens (OOV indices to ``oov_token``).
``adapt(data)`` takes the vocabulary from data: by frequency, ties broken
as Keras' ``lexsort`` does (the larger token first).

Each layer works on graph tensors (ops: ``LookupTableFindV2`` on a static
table, ``StringToHashBucketFast``, ``DenseBincount``, ``OneHot``) and on numpy
or Python values, computed at once in numpy, which is what a dataset's
``map`` hands it (``dt.data`` runs in the client, on numpy values): one layer
serves the per-worker dataset and the model.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from distrib.framework import dtypes
from distrib.framework.graph import Tensor
from distrib.keras.base_layer import Layer
from distrib.ops import array_extra_ops, slicing_ops
from distrib.ops import math_ops as ops
from kernels.cpu import hashing

__all__ = ["StringLookup", "IntegerLookup", "Hashing", "CategoryEncoding"]

_MODES = ("int", "one_hot", "multi_hot", "count")


def _is_graph(x: Any) -> bool:
    return isinstance(x, Tensor) or hasattr(x, "_as_tensor")


def _encode(idx: Any, depth: int, mode: str, graph: bool) -> Any:
    """Indices as one_hot / multi_hot / count rows of ``depth`` (Keras' output modes)."""
    if mode == "int":
        return idx
    if not graph:
        a = np.asarray(idx)
        if mode == "one_hot":
            return np.eye(depth, dtype=np.float32)[a]
        rows = a.reshape(1, -1) if a.ndim <= 1 else a.reshape(a.shape[0], -1)
        out = np.zeros((rows.shape[0], depth), np.float32)
        np.add.at(out, (np.arange(rows.shape[0])[:, None].repeat(rows.shape[1], 1), rows), 1.0)
        out = (out > 0).astype(np.float32) if mode == "multi_hot" else out
        return out if a.ndim > 1 else out[0]
    if mode == "one_hot":
        return array_extra_ops.one_hot(idx, depth)
    size = ops.constant(depth, dtype=dtypes.int32, name="size")
    return ops.op_output("DenseBincount", [idx, size], {"binary_output": mode == "multi_hot"},
                         "bincount")


class _IndexLookup(Layer):
    """What ``StringLookup`` and ``IntegerLookup`` share."""

    _string = True

    def __init__(self, max_tokens: int | None, num_oov_indices: int, mask_token: Any,
                 oov_token: Any, vocabulary: Any, invert: bool, output_mode: str,
                 sparse: bool, pad_to_max_tokens: bool, **kwargs: Any) -> None:
        kwargs.pop("idf_weights", None)
        super().__init__(**kwargs)
        if output_mode not in _MODES:
            raise ValueError(f"`output_mode` must be one of {_MODES} (tf_idf is not supported "
                             f"by dt.keras); got {output_mode!r}")
        if invert and output_mode != "int":
            raise ValueError("`output_mode` must be 'int' when `invert` is true")
        if int(num_oov_indices) < 0:
            raise ValueError(f"`num_oov_indices` must be >= 0, got {num_oov_indices}")
        if sparse:
            raise NotImplementedError("sparse=True outputs are not supported by dt.keras")
        self.max_tokens, self.num_oov_indices = max_tokens, int(num_oov_indices)
        self.mask_token, self.oov_token = mask_token, oov_token
        self.invert, self.output_mode = bool(invert), output_mode
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self._vocab: list[Any] = []
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    # -- the vocabulary -------------------------------------------------------------------
    def _key(self, token: Any) -> Any:
        if self._string:
            return token.decode("utf-8") if isinstance(token, bytes) else str(token)
        return int(token)

    def set_vocabulary(self, vocabulary: Sequence[Any]) -> None:
        vocab = [self._key(t) for t in (np.asarray(vocabulary).reshape(-1).tolist()
                                        if not isinstance(vocabulary, str) else [vocabulary])]
        if len(set(vocab)) != len(vocab):
            raise ValueError("The passed vocabulary has at least one repeated term.")
        if self.mask_token is not None and self._key(self.mask_token) in vocab:
            raise ValueError(f"Found reserved mask token {self.mask_token!r} in the vocabulary")
        self._vocab = vocab

    def adapt(self, data: Any, batch_size: Any = None, steps: Any = None) -> None:
        """The vocabulary from ``data`` (an array, a list, or a dataset of them)."""
        counts: Counter = Counter()
        items = data if not hasattr(data, "as_numpy_iterator") else data.as_numpy_iterator()
        for chunk in ([items] if isinstance(items, (np.ndarray, list)) else items):
            counts.update(self._key(t) for t in np.asarray(chunk).reshape(-1).tolist())
        if self.mask_token is not None:
            counts.pop(self._key(self.mask_token), None)
        tokens = list(counts)
        order = np.lexsort((np.asarray(tokens, dtype=object if self._string else np.int64),
                            np.asarray([counts[t] for t in tokens])))[::-1]
        vocab = [tokens[i] for i in order]
        limit = None if self.max_tokens is None else \
            self.max_tokens - self.num_oov_indices - (self.mask_token is not None)
        self._vocab = vocab[:limit] if limit is not None else vocab

    def _oov_start(self) -> int:
        return 1 if self.mask_token is not None else 0

    def _first(self) -> int:
        return self._oov_start() + self.num_oov_indices

    def vocabulary_size(self) -> int:
        size = self._first() + len(self._vocab)
        return max(size, self.max_tokens or 0) if self.pad_to_max_tokens else size

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[Any]:
        if not include_special_tokens:
            return list(self._vocab)
        special = ([self.mask_token] if self.mask_token is not None else []) + \
            [self.oov_token] * self.num_oov_indices
        return special + list(self._vocab)

    # -- looking up -----------------------------------------------------------------------
    def _table(self) -> tuple[list[Any], list[int]]:
        keys, values = list(self._vocab), list(range(self._first(), self._first() + len(self._vocab)))
        if self.mask_token is not None:
            keys.append(self._key(self.mask_token))
            values.append(0)
        return keys, values

    def _oov(self, tokens: Any, graph: bool) -> Any:
        n, start = self.num_oov_indices, self._oov_start()
        if self._string:
            if graph:
                h = ops.op_output("StringToHashBucketFast", [tokens], {"num_buckets": n},
                                  "oov_bucket")
                return ops.add(h, ops.constant(start, dtype=dtypes.int64))
            return hashing.hash_bucket(tokens, n) + start
        if graph:
            return ops.add(ops.op_output("FloorMod", [ops.cast(tokens, dtypes.int64),
                                                      ops.constant(n, dtype=dtypes.int64)],
                                         None, "oov_bucket"),
                           ops.constant(start, dtype=dtypes.int64))
        return np.mod(np.asarray(tokens, np.int64), n) + start

    def _lookup_numpy(self, x: Any) -> np.ndarray:
        arr = np.asarray(x, dtype=object if self._string else None)
        keys, values = self._table()
        table = dict(zip(keys, values))
        flat = [table.get(self._key(t), -1) for t in arr.reshape(-1).tolist()]
        out = np.asarray(flat, np.int64).reshape(arr.shape)
        missing = out < 0
        if missing.any():
            if self.num_oov_indices == 0:
                bad = arr.reshape(-1)[np.flatnonzero(missing.reshape(-1))[0]]
                raise ValueError(f"{type(self).__name__}: {bad!r} is not in the vocabulary "
                                 "and num_oov_indices=0")
            out[missing] = self._oov(arr[missing], graph=False) if self.num_oov_indices > 1 \
                else self._oov_start()
        return out

    def _invert_numpy(self, x: Any) -> np.ndarray:
        vocab = self.get_vocabulary()
        arr = np.asarray(x, np.int64)
        return np.asarray([vocab[i] if 0 <= i < len(vocab) else self.oov_token
                           for i in arr.reshape(-1).tolist()], dtype=object).reshape(arr.shape)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_graph(inputs):
            return super().__call__(inputs, *args, **kwargs)
        if self.invert:
            return self._invert_numpy(inputs)
        idx = self._lookup_numpy(inputs)
        return _encode(idx, self.vocabulary_size(), self.output_mode, graph=False)

    def _cast_input(self, inputs: Any) -> Any:   # strings and ids keep their dtype
        return ops.convert_to_tensor(inputs)

    def call(self, inputs: Any) -> Any:
        if self.invert:
            vocab = self.get_vocabulary()
            attrs = {"table_keys": list(range(len(vocab))), "table_values": vocab,
                     "value_dtype": "string" if self._string else "int64"}
            default = ops.constant(self.oov_token, dtype=dtypes.string if self._string
                                   else dtypes.int64)
            keys = ops.cast(inputs, dtypes.int64)
            return ops.op_output("LookupTableFindV2", [keys, default], attrs, "invert")
        keys, values = self._table()
        attrs = {"table_keys": keys, "table_values": values, "value_dtype": "int64"}
        miss = ops.constant(-1, dtype=dtypes.int64)
        idx = ops.op_output("LookupTableFindV2", [inputs, miss], attrs, "lookup")
        if self.num_oov_indices == 1 or self.num_oov_indices == 0:
            fill = ops.constant(self._oov_start(), dtype=dtypes.int64)
        else:
            fill = self._oov(inputs, graph=True)
        idx = slicing_ops.where_v2(ops.less(idx, miss + 1), fill + ops.zeros_like(idx), idx)
        return _encode(idx, self.vocabulary_size(), self.output_mode, graph=True)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_tokens": self.max_tokens,
                "num_oov_indices": self.num_oov_indices, "mask_token": self.mask_token,
                "oov_token": self.oov_token, "vocabulary": list(self._vocab) or None,
                "invert": self.invert, "output_mode": self.output_mode,
                "sparse": False, "pad_to_max_tokens": self.pad_to_max_tokens}


class StringLookup(_IndexLookup):
    """``StringLookup(max_tokens=None, num_oov_indices=1, mask_token=None,
    oov_token='[UNK]', vocabulary=None, idf_weights=None, encoding='utf-8',
    invert=False, output_mode='int', sparse=False, pad_to_max_tokens=False)``."""

    _string = True

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: Any = None, oov_token: str = "[UNK]", vocabulary: Any = None,
                 idf_weights: Any = None, encoding: str = "utf-8", invert: bool = False,
                 output_mode: str = "int", sparse: bool = False, pad_to_max_tokens: bool = False,
                 **kwargs: Any) -> None:
        self.encoding = encoding
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary, invert,
                         output_mode, sparse, pad_to_max_tokens, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "encoding": self.encoding}


class IntegerLookup(_IndexLookup):
    """``IntegerLookup(max_tokens=None, num_oov_indices=1, mask_token=None, oov_token=-1,
    vocabulary=None, vocabulary_dtype='int64', idf_weights=None, invert=False,
    output_mode='int', sparse=False, pad_to_max_tokens=False)``."""

    _string = False

    def __init__(self, max_tokens: int | None = None, num_oov_indices: int = 1,
                 mask_token: Any = None, oov_token: int = -1, vocabulary: Any = None,
                 vocabulary_dtype: str = "int64", idf_weights: Any = None, invert: bool = False,
                 output_mode: str = "int", sparse: bool = False, pad_to_max_tokens: bool = False,
                 **kwargs: Any) -> None:
        self.vocabulary_dtype = vocabulary_dtype
        super().__init__(max_tokens, num_oov_indices, mask_token, oov_token, vocabulary, invert,
                         output_mode, sparse, pad_to_max_tokens, **kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocabulary_dtype": self.vocabulary_dtype}


class Hashing(Layer):
    """``Hashing(num_bins, mask_value=None, salt=None, output_mode='int', sparse=False)``:
    FarmHash of each value (numbers as their strings) into ``num_bins`` bins; with
    ``mask_value`` the mask goes to bin 0 and the rest to ``1 + hash % (num_bins - 1)``."""

    def __init__(self, num_bins: int, mask_value: Any = None, salt: Any = None,
                 output_mode: str = "int", sparse: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if int(num_bins) < 1 or (mask_value is not None and int(num_bins) < 2):
            raise ValueError(f"`num_bins` must be >= 1 (>= 2 with a mask_value), got {num_bins}")
        if salt is not None:
            raise NotImplementedError("Hashing(salt=...) (SipHash buckets) is not supported by "
                                      "dt.keras; leave salt None")
        if output_mode not in _MODES or sparse:
            raise ValueError(f"`output_mode` must be one of {_MODES} (dense); got {output_mode!r}")
        self.num_bins, self.mask_value = int(num_bins), mask_value
        self.output_mode = output_mode

    def _bins(self) -> int:
        return self.num_bins - (self.mask_value is not None)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_graph(inputs):
            return super().__call__(inputs, *args, **kwargs)
        arr = np.asarray(inputs)
        text = arr.astype(object) if arr.dtype.kind in "OUS" else \
            np.vectorize(str, otypes=[object])(arr)
        out = hashing.hash_bucket(text, self._bins())
        if self.mask_value is not None:
            out = np.where(arr == self.mask_value, 0, out + 1)
        return _encode(out, self.num_bins, self.output_mode, graph=False)

    def _cast_input(self, inputs: Any) -> Any:
        return ops.convert_to_tensor(inputs)

    def call(self, inputs: Any) -> Any:
        if inputs.dtype != dtypes.string:
            raise ValueError("dt.keras Hashing of a numeric tensor in a graph needs it as "
                             "strings first; call the layer on numpy values (a dataset's map) "
                             "or pass strings")
        out = ops.op_output("StringToHashBucketFast", [inputs], {"num_buckets": self._bins()},
                            "hash")
        if self.mask_value is not None:
            masked = ops.equal(inputs, ops.constant(self.mask_value, dtype=dtypes.string))
            out = slicing_ops.where_v2(masked, ops.zeros_like(out),
                                       ops.add(out, ops.constant(1, dtype=dtypes.int64)))
        return _encode(out, self.num_bins, self.output_mode, graph=True)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_bins": self.num_bins,
                "mask_value": self.mask_value, "salt": None, "output_mode": self.output_mode,
                "sparse": False}


class CategoryEncoding(Layer):
    """``CategoryEncoding(num_tokens=None, output_mode='multi_hot', sparse=False)``: integer
    ids in ``[0, num_tokens)`` as one_hot, multi_hot or count rows."""

    def __init__(self, num_tokens: int | None = None, output_mode: str = "multi_hot",
                 sparse: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if output_mode not in ("one_hot", "multi_hot", "count"):
            raise ValueError(f"Unknown arg for output_mode: {output_mode}")
        if num_tokens is None or int(num_tokens) < 1:
            raise ValueError(f"`num_tokens` must be >= 1, got {num_tokens}")
        if sparse:
            raise NotImplementedError("sparse=True outputs are not supported by dt.keras")
        self.num_tokens, self.output_mode = int(num_tokens), output_mode

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_graph(inputs):
            return super().__call__(inputs, *args, **kwargs)
        arr = np.asarray(inputs, np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_tokens):
            raise ValueError(f"Input values must be in the range 0 <= values < num_tokens "
                             f"with num_tokens={self.num_tokens}")
        return _encode(arr, self.num_tokens, self.output_mode, graph=False)

    def _cast_input(self, inputs: Any) -> Any:
        return ops.convert_to_tensor(inputs)

    def call(self, inputs: Any) -> Any:
        return _encode(inputs, self.num_tokens, self.output_mode, graph=True)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "num_tokens": self.num_tokens,
                "output_mode": self.output_mode, "sparse": False}
