"""``model.save(path)`` and ``dt.keras.models.load_model(path)``: a whole model in
one folder (TF 2.x's ``model.save("folder")``), in a format of distrib's own.

    path/
      config.json          the model's Keras config and compile() arguments (JSON)
      metadata.json        format and distrib version, date, config.json's checksum
      variables/variables  weights and optimizer state: a dt.train.Checkpoint file

``config.json`` is Keras 3's: ``{"module", "class_name", "config",
"registered_name", "compile_config"}``, where ``config`` is the model's
``get_config()`` and ``compile_config`` the optimizer (class and
hyper-parameters), loss and metrics as ``compile`` got them (names stay names).
The variables file is written by ``dt.train.Checkpoint`` with the model as its
root, so its keys are TF's SavedModel ones
(``layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``,
``optimizer/iter/...``, each slot under its variable) and it is readable by
``dt.train.load_checkpoint``; one file format for every checkpoint. A path
ending in ``.keras`` gets the same three entries in a zip file, as Keras 3's
``.keras`` is a zip (its weights are HDF5 there, a checkpoint here).

Why it is built so:

* **No code in the file.** JSON only, never pickle: a user's class or function
  is saved by name and must be given back to ``load_model`` through
  ``custom_objects`` or ``@register_keras_serializable`` (``serialization.py``).
* **Never half a model.** Everything is written into a hidden folder beside
  ``path`` (``.<name>.saving-<id>``), ``metadata.json`` last, then renamed to
  ``path``; an existing model is moved aside first and deleted only once the
  new one is in place, so a crash leaves the old model or the new one (or,
  between the two renames, the old one under ``.<name>.previous-<id>``, which
  ``load_model``'s error names). A ``.keras`` file is replaced with one
  ``os.replace``. A torn variables file is a ``DataLossError`` (its
  checksums), a changed ``config.json`` too (its checksum in the metadata).
* **Any strategy, either way.** The checkpoint keys are object paths, so a
  model saved under MirroredStrategy loads under no strategy, another
  strategy or another number of replicas: ``load_model`` makes the model in
  the strategy scope open when it is called. Optimizer state whose variables
  do not exist yet (slots, made by the first train step) is restored when
  they are made, so ``fit`` continues as if never interrupted.
* **Every worker writes, the chief first** (TF's collective save). Under a
  multi-worker strategy every worker calls ``save`` and runs the
  checkpoint's read step (its collectives line up); the chief commits its
  model, then every worker meets in one small step, then a non-chief commits
  its own copy to the path it was given (the tutorial's temporary
  ``workertemp_<id>`` folder, which it then deletes), unless that path is the
  chief's very path (``distrib.train.checkpoints.worker_saves``). So ``save`` returns on
  every worker only once the chief's model is whole, and ``load_model`` of
  the chief's path right after it works everywhere.

TF 2.x's rule for ``include_optimizer=False`` holds: no compile arguments are
saved, so the loaded model is not compiled (a warning says so).
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import glob
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import uuid
import weakref
import zipfile
from typing import Any, Iterator

from distrib.errors import (
    AlreadyExistsError,
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    UnimplementedError,
)
from distrib.keras import layers as layers_mod
from distrib.keras import losses as losses_mod
from distrib.keras import metrics as metrics_mod
from distrib.keras import optimizers as optimizers_mod
from distrib.keras import serialization
from distrib.train.checkpoints import trackable
from distrib.train.checkpoints.object_checkpoint import Checkpoint

logger = logging.getLogger(__name__)

__all__ = ["save_model", "load_model", "model_from_config", "model_from_json",
           "model_to_json", "compile_config", "compile_arguments", "FORMAT", "FORMAT_VERSION"]

FORMAT = "distrib.keras.model"
FORMAT_VERSION = 1
CONFIG = "config.json"
METADATA = "metadata.json"
VARIABLES = os.path.join("variables", "variables")

# model -> the Checkpoint that restored it: kept while the model lives, so values whose
# variables are made later (a layer built on first call, optimizer slots) still find them
_RESTORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _distrib_version() -> str:
    try:
        return importlib.metadata.version("distrib")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _ModelRoot:
    """The model as a checkpoint's root: its children (``layer_with_weights-0`` ...),
    without ``optimizer`` when the optimizer is not saved or restored."""

    def __init__(self, model: Any, with_optimizer: bool) -> None:
        self._model = weakref.ref(model)   # held weakly: a restore is kept per model
        self._with_optimizer = with_optimizer

    def trackable_children(self) -> dict[str, Any]:
        model = self._model()
        out = trackable.children(model) if model is not None else {}
        if not self._with_optimizer:
            out.pop("optimizer", None)
        return out

    def defer_restore(self, name: str, restoration: Any) -> bool:
        model = self._model()
        return model is not None and bool(model.defer_restore(name, restoration))


# -- configs -----------------------------------------------------------------------------

def compile_config(optimizer: Any, loss: Any, metrics: Any, loss_weights: Any = None
                   ) -> dict[str, Any]:
    """Keras 3's ``compile_config``: ``compile``'s arguments as JSON values (a list or a
    dict by output name kept as one)."""
    if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
        metrics = [metrics]
    return {"optimizer": optimizers_mod.serialize(optimizer),
            "loss": _nest_map(losses_mod.serialize, loss, saved=False),
            "metrics": _nest_map(metrics_mod.serialize, list(metrics or [])
                                 if not isinstance(metrics, dict) else metrics, saved=False),
            "loss_weights": loss_weights, "weighted_metrics": None, "run_eagerly": None,
            "steps_per_execution": None, "jit_compile": None}


def compile_arguments(config: dict[str, Any], custom_objects: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """``compile``'s keyword arguments from a ``compile_config``."""
    def loss(c: Any) -> Any:
        return losses_mod.deserialize(c, custom_objects)

    def metric(c: Any) -> Any:
        return metrics_mod.deserialize(c, custom_objects)
    return {"optimizer": optimizers_mod.deserialize(config["optimizer"], custom_objects),
            "loss": _nest_map(loss, config["loss"], saved=True),
            "metrics": _nest_map(metric, config.get("metrics") or [], saved=True),
            "loss_weights": config.get("loss_weights")}


def _nest_map(fn: Any, value: Any, saved: bool) -> Any:
    """``fn`` on each loss or metric of a list or a dict by output name (``saved``: a
    dict with ``class_name`` is one saved object, not a dict of outputs)."""
    if isinstance(value, dict) and not (saved and "class_name" in value):
        return {k: None if v is None else _nest_map(fn, v, saved) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [None if v is None else _nest_map(fn, v, saved) for v in value]
    return fn(value)


def _model_entry(model: Any, include_optimizer: bool) -> dict[str, Any]:
    entry = serialization.serialize_keras_object(model)
    entry["compile_config"] = None
    if include_optimizer:
        try:
            entry["compile_config"] = model.get_compile_config()
        except TypeError as exc:
            raise TypeError(f"{exc}; save with include_optimizer=False to leave the "
                            "optimizer and compile() arguments out") from None
    return entry


def model_to_json(model: Any, **kwargs: Any) -> str:
    """``model.to_json()``: the model's Keras config as a JSON string."""
    entry = serialization.serialize_keras_object(model)
    entry.update(keras_version=_distrib_version(), backend="distrib")
    return json.dumps(entry, **kwargs)


def model_from_config(config: dict[str, Any], custom_objects: dict[str, Any] | None = None
                      ) -> Any:
    """The model (uncompiled, built when it was) of Keras' dict ``config``, made in the
    strategy scope open now."""
    model = layers_mod.deserialize(config, custom_objects)
    if not callable(getattr(model, "compile", None)):
        raise ValueError(f"the config describes a {type(model).__name__}, not a model; make "
                         "it with dt.keras.layers.deserialize")
    return model


def model_from_json(json_string: str, custom_objects: dict[str, Any] | None = None) -> Any:
    """``dt.keras.models.model_from_json``: the model of ``model.to_json()``'s string."""
    return model_from_config(json.loads(json_string), custom_objects)


# -- save --------------------------------------------------------------------------------

async def save_model(model: Any, filepath: Any, overwrite: bool = True,
                     include_optimizer: bool = True, save_format: str | None = None,
                     signatures: Any = None, options: Any = None, save_traces: bool = True
                     ) -> str:
    """Save ``model`` whole to the folder ``filepath`` (a zip file when it ends in
    ``.keras``) in this worker's turn (module header); returns the path."""
    path = os.path.abspath(os.fspath(filepath))
    zipped = path.endswith(".keras") or save_format == "keras"
    if save_format not in (None, "tf", "keras"):
        raise UnimplementedError(f"save_format={save_format!r} is not supported by dt.keras: "
                                 "a model is saved as a folder ('tf') or a .keras zip file")
    if signatures is not None:
        raise UnimplementedError("model.save(signatures=...) is not supported by dt.keras: "
                                 "a saved model holds its config and state, no traced graphs")
    entry = _model_entry(model, include_optimizer and getattr(model, "optimizer", None)
                         is not None)
    config_bytes = json.dumps(entry, indent=2).encode()
    ckpt = Checkpoint(root=_ModelRoot(model, include_optimizer))
    with model.function_scope():
        snapshot = await ckpt.snapshot()

    def write() -> None:
        _check_target(path, overwrite, zipped)
        staging = _staging_name(path, "saving")
        try:
            snapshot.write_file(os.path.join(staging, VARIABLES))
            metadata = {"format": FORMAT, "format_version": FORMAT_VERSION,
                        "distrib_version": _distrib_version(),
                        "date_saved": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                        "include_optimizer": bool(include_optimizer),
                        "config_sha256": hashlib.sha256(config_bytes).hexdigest(),
                        "keras_reference": "TF 2.x model.save(folder); Keras 3 config.json"}
            _write_file(os.path.join(staging, CONFIG), config_bytes)
            _write_file(os.path.join(staging, METADATA),
                        json.dumps(metadata, indent=2).encode())
            if zipped:
                _commit_zip(staging, path)
            else:
                _commit_folder(staging, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("saved model %s to %s", getattr(model, "name", "?"), path)

    async def write_off_loop() -> None:
        await asyncio.to_thread(write)
    await snapshot.write_in_turn(path, write_off_loop)
    return path


def _check_target(path: str, overwrite: bool, zipped: bool) -> None:
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise AlreadyExistsError(f"{path} exists and overwrite=False: pass overwrite=True to "
                                 "replace it, or choose another path")
    if zipped:
        if os.path.isdir(path):
            raise AlreadyExistsError(f"{path} is a folder; a .keras model is one file: "
                                     "remove the folder or choose another path")
        return
    if os.path.isdir(path) and (not os.listdir(path) or
                                os.path.exists(os.path.join(path, METADATA))):
        return
    raise AlreadyExistsError(f"{path} exists and is not a model saved by model.save (no "
                             f"{METADATA} in it); it is left alone: remove it or choose "
                             "another path")


def _staging_name(path: str, what: str) -> str:
    parent, base = os.path.split(path)
    return os.path.join(parent, f".{base}.{what}-{uuid.uuid4().hex[:12]}")


def _write_file(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit_folder(staging: str, path: str) -> None:
    """Rename the complete ``staging`` folder to ``path``; an old model is moved aside
    first and deleted only after (module header)."""
    previous = None
    if os.path.lexists(path):
        previous = _staging_name(path, "previous")
        os.rename(path, previous)
    try:
        os.rename(staging, path)
    except BaseException:
        if previous is not None:
            os.rename(previous, path)
        raise
    _fsync_dir(os.path.dirname(path))
    if previous is not None:
        shutil.rmtree(previous, ignore_errors=True)


def _commit_zip(staging: str, path: str) -> None:
    partial = _staging_name(path, "zip")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name in (VARIABLES, CONFIG, METADATA):   # the metadata last, as in a folder
                archive.write(os.path.join(staging, name), name.replace(os.sep, "/"))
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    _fsync_dir(os.path.dirname(path))


# -- load --------------------------------------------------------------------------------

async def load_model(filepath: Any, custom_objects: dict[str, Any] | None = None,
                     compile: bool = True, options: Any = None, safe_mode: bool = True
                     ) -> Any:
    """The model saved at ``filepath``, made in the strategy scope open now, its weights
    restored and (``compile=True``) compiled with its optimizer's state."""
    path = os.path.abspath(os.fspath(filepath))
    with _opened(path) as folder:
        metadata = _read_metadata(folder, path)
        entry = _read_config(folder, path, metadata)
        variables = os.path.join(folder, VARIABLES)
        if not os.path.exists(variables):
            raise NotFoundError(f"the saved model {path} has no {VARIABLES.replace(os.sep, '/')}"
                                ": it is incomplete; save the model again")
        with serialization.CustomObjectScope(custom_objects):
            model = model_from_config(entry, custom_objects)
            compiled = False
            if compile and entry.get("compile_config"):
                model.compile_from_config(entry["compile_config"], custom_objects)
                compiled = True
            elif compile:
                logger.warning("No training configuration found in save file %s, so the model "
                               "was *not* compiled. Compile it manually.", path)
        await _restore(model, variables, compiled, path)
    return model


async def _restore(model: Any, variables: str, with_optimizer: bool, path: str) -> None:
    ckpt = Checkpoint(root=_ModelRoot(model, with_optimizer))
    with model.function_scope():
        status = await ckpt.read(variables)
    _RESTORES[model] = ckpt
    status.expect_partial()   # slots wait for the first train step; or not compiled
    try:
        status.assert_existing_objects_matched()
    except AssertionError as exc:
        raise InvalidArgumentError(f"the weights saved in {path} do not match the model its "
                                   f"config makes: {exc}") from None


@contextlib.contextmanager
def _opened(path: str) -> Iterator[str]:
    """The folder holding the saved model at ``path`` (a .keras zip, unpacked)."""
    if not os.path.lexists(path):
        raise NotFoundError(f"No file or directory found at {path}" + _interrupted(path))
    if os.path.isdir(path):
        yield path
        return
    if not zipfile.is_zipfile(path):
        raise NotFoundError(f"{path} is not a model saved by model.save: neither a folder nor "
                            "a .keras zip file (a file written by save_weights is loaded "
                            "with model.load_weights)")
    with tempfile.TemporaryDirectory(prefix="dt-keras-") as folder:
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
                for name in (CONFIG, METADATA, VARIABLES.replace(os.sep, "/")):
                    if name in names:
                        archive.extract(name, folder)
        except (zipfile.BadZipFile, OSError) as exc:
            raise DataLossError(f"the saved model {path} is corrupt: {exc}") from None
        yield folder


def _interrupted(path: str) -> str:
    parent, base = os.path.split(path)
    left = sorted(glob.glob(os.path.join(parent, f".{glob.escape(base)}.previous-*")))
    if not left:
        return ""
    return (f" (a save into it was interrupted: {left[-1]} holds the model saved before; "
            "rename it to the path to use it)")


def _read_json(file: str, path: str) -> tuple[bytes, Any]:
    with open(file, "rb") as f:
        data = f.read()
    try:
        return data, json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataLossError(f"{os.path.basename(file)} of the saved model {path} is not valid "
                            f"JSON ({exc}): the file is corrupt") from None


def _read_metadata(folder: str, path: str) -> dict[str, Any]:
    file = os.path.join(folder, METADATA)
    if not os.path.exists(file):
        raise NotFoundError(f"{path} is not a model saved by model.save: it has no {METADATA} "
                            "(a folder of dt.train.Checkpoint or save_weights files is read "
                            "with Checkpoint.restore or model.load_weights)")
    _, metadata = _read_json(file, path)
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise InvalidArgumentError(f"{path} is not a model saved by dt.keras' model.save: its "
                                   f"{METADATA} does not name the format {FORMAT!r}")
    version = metadata.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise UnimplementedError(f"{path} was saved in format version {version!r} by distrib "
                                 f"{metadata.get('distrib_version')}; this distrib "
                                 f"({_distrib_version()}) reads versions up to "
                                 f"{FORMAT_VERSION}: load it with a newer distrib")
    return metadata


def _read_config(folder: str, path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    file = os.path.join(folder, CONFIG)
    if not os.path.exists(file):
        raise NotFoundError(f"the saved model {path} has no {CONFIG}: it is incomplete; save "
                            "the model again")
    data, entry = _read_json(file, path)
    want = metadata.get("config_sha256")
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise DataLossError(f"{CONFIG} of the saved model {path} does not match the checksum "
                            f"in its {METADATA}: the file is corrupt or was edited")
    if not isinstance(entry, dict):
        raise DataLossError(f"{CONFIG} of the saved model {path} holds no model config")
    return entry
