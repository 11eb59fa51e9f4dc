"""A small generated set in CIFAR-10's binary format, for when ``--data_dir``
has no real CIFAR-10 files (this machine cannot download them).

The format is the real one (https://www.cs.toronto.edu/~kriz/cifar.html,
"binary version"): ``data_batch_1.bin`` .. ``data_batch_5.bin`` and
``test_batch.bin``, each a run of records of 1 label byte (0..9) and 3072
image bytes, the red, green and blue planes of a 32x32 image in turn (row
major). The real files hold 10,000 records each; these hold
``records_per_file`` (default 500). Each class has its own colour and
stripe pattern under noise, so a model trained on the set can learn it.

    python examples/cifar10/make_data.py --data_dir /tmp/cifar10_data/cifar-10-batches-bin
"""
from __future__ import annotations

import argparse
import logging
import os

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["FILES", "LABEL_BYTES", "IMAGE_BYTES", "RECORD_BYTES", "has_data",
           "write_generated_set", "ensure_data"]

FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
LABEL_BYTES = 1
IMAGE_BYTES = 32 * 32 * 3
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES


def has_data(data_dir: str) -> bool:
    """Whether ``data_dir`` holds every file of the binary set."""
    return all(os.path.exists(os.path.join(data_dir, f)) for f in FILES)


def _images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[n, 3, 32, 32] uint8: a colour and stripes per class, plus noise."""
    n = len(labels)
    colours = np.random.default_rng(1234).integers(40, 216, size=(10, 3))
    rows = np.arange(32)[:, None]
    cols = np.arange(32)[None, :]
    out = np.empty((n, 3, 32, 32), np.float32)
    for i, label in enumerate(labels):
        period = 2 + int(label)
        stripes = ((rows + (cols if label % 2 else 0)) // period) % 2 * 40.0 - 20.0
        out[i] = colours[label][:, None, None] + stripes[None]
    out += rng.normal(0.0, 12.0, size=out.shape)
    return np.clip(out, 0, 255).astype(np.uint8)


def write_generated_set(data_dir: str, records_per_file: int = 500, seed: int = 0) -> list[str]:
    """Write the six files of a generated set into ``data_dir``; their paths."""
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for name in FILES:
        labels = rng.integers(0, 10, size=records_per_file).astype(np.uint8)
        images = _images(labels, rng).reshape(records_per_file, IMAGE_BYTES)
        records = np.concatenate([labels[:, None], images], axis=1)
        path = os.path.join(data_dir, name)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(records.tobytes())
        os.replace(tmp, path)
        paths.append(path)
    logger.info("wrote a generated CIFAR-10 set of %d records per file to %s",
                records_per_file, data_dir)
    return paths


def ensure_data(data_dir: str, records_per_file: int = 500) -> bool:
    """Generate the set in ``data_dir`` unless the real files are there;
    True when it generated one."""
    if has_data(data_dir):
        return False
    write_generated_set(data_dir, records_per_file)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="/tmp/cifar10_data/cifar-10-batches-bin")
    parser.add_argument("--records_per_file", type=int, default=500)
    parser.add_argument("--force", action="store_true", help="write even over real files")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.force:
        write_generated_set(args.data_dir, args.records_per_file)
    elif not ensure_data(args.data_dir, args.records_per_file):
        logger.info("%s already holds the CIFAR-10 binary files", args.data_dir)


if __name__ == "__main__":
    main()
