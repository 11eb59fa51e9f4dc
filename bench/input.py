"""Input from files (issue 40, item 5): images/s of the two anchors pipelines,
through dt.data and through TF1's queue runners, and the CIFAR-10 trainer's
examples/s fed from files against fed from memory.

Pipelines (the issue's, per image as the tutorials write them):
- ``cifar``: CIFAR's binary records (``FixedLengthRecordDataset``, 3073 bytes)
  -> ``decode_raw`` -> label and [32, 32, 3] image -> ``random_crop`` 24 ->
  ``random_flip_left_right`` -> ``random_brightness(63)`` ->
  ``random_contrast(0.2, 1.8)`` -> ``per_image_standardization`` -> batch 128;
- ``jpeg``: TFRecord files of ``tf.train.Example`` holding 256x256 JPEGs (q 90)
  -> ``parse_single_example`` -> ``decode_jpeg`` -> ``random_crop`` 224 ->
  ``random_flip_left_right`` -> ``convert_image_dtype(float32)`` -> batch 64.

Rows: ``<pipeline>-data`` (``map(num_parallel_calls=AUTOTUNE)``, the fused
map-and-batch, ``prefetch``), ``<pipeline>-data-1`` (a sequential map),
``<pipeline>-queue`` (the same ops in a graph, TF1's readers, queue runners and
``batch``, through a session with no target). ``trainer-*``: cifar10.py's
model and train op at batch 128 (``memory``: one fixed batch fed each step;
``data``: batches of the ``cifar`` dt.data pipeline fed each step;
``queue``: the tutorial's ``distorted_inputs`` through queue runners).
``*-queue-each``: the same with the queue runners' ops run once per record
(``distrib.train.input.vectorize`` off: the baseline of the vectorized rows).
``imagenet-data``: ResNet's official ImageNet ``input_fn`` for training
(examples/imagenet/imagenet_preprocessing.py, batch 64; see imagenet_row),
beside ``jpeg-data``'s figure.

Each figure is the median over ``--rounds`` windows of ``--seconds``, rows
taking turns, each after ``--warm`` seconds of the same row (threads
started, AUTOTUNE's first measurements of threads, none and processes). ``cpu ms/img`` is the process's CPU time (every thread) per
image: on a machine shared with other work it is the steadier figure. The
reference column is tf.data 2.21 on the issue's 2-core VM (AUTOTUNE): CIFAR
20,900 images/s, JPEG 2,060 (targets: >= 1.0x and >= 0.8x); the trainer fed
from files should be within 5% of fed from memory. Never asserts.

    python bench/input.py [--rounds 3] [--seconds 3] [--warm 2] [--only cifar-data,jpeg-data] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "cifar10"))

import distrib as dt  # noqa: E402

REFERENCE = {"cifar": 20900.0, "jpeg": 2060.0}
TARGET = {"cifar": 1.0, "jpeg": 0.8}
CIFAR_BATCH, JPEG_BATCH = 128, 64
JPEG_FEATURES = {"image/encoded": dt.io.FixedLenFeature([], dt.string),
                 "image/class/label": dt.io.FixedLenFeature([], dt.int64)}


# -- data ------------------------------------------------------------------------------
def make_cifar(root: str, per_file: int) -> list[str]:
    import make_data
    folder = os.path.join(root, "cifar-10-batches-bin")
    os.makedirs(folder, exist_ok=True)
    make_data.write_generated_set(folder, per_file)
    return [os.path.join(folder, f"data_batch_{i}.bin") for i in range(1, 6)]


def make_jpeg(root: str, files: int, per_file: int) -> list[str]:
    from kernels.cpu.image_codec import encode_jpeg_value
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:256, 0:256]
    base = np.stack([(x + y) / 2, x, 255 - y], -1)
    names = []
    for f in range(files):
        name = os.path.join(root, f"train-{f:05d}.tfrecord")
        with dt.io.TFRecordWriter(name) as w:
            for i in range(per_file):
                img = np.clip(base + rng.normal(0, 12, base.shape) + (i % 64), 0, 255)
                data = encode_jpeg_value(img.astype(np.uint8), 90)
                w.write(dt.train.Example(features=dt.train.Features(feature={
                    "image/encoded": dt.train.Feature(bytes_list=dt.train.BytesList(value=[data])),
                    "image/class/label": dt.train.Feature(
                        int64_list=dt.train.Int64List(value=[i % 1000]))})).SerializeToString())
        names.append(name)
    return names


# -- the pipelines ------------------------------------------------------------------------
def cifar_parse(record: Any) -> Any:
    raw = dt.io.decode_raw(record, dt.uint8)
    label = raw[0].astype(np.int32)
    image = raw[1:].reshape(3, 32, 32).transpose(1, 2, 0).astype(np.float32)
    image = dt.image.random_crop(image, [24, 24, 3])
    image = dt.image.random_flip_left_right(image)
    image = dt.image.random_brightness(image, max_delta=63)
    image = dt.image.random_contrast(image, lower=0.2, upper=1.8)
    return dt.image.per_image_standardization(image), label


def jpeg_parse(record: Any) -> Any:
    features = dt.io.parse_single_example(record, JPEG_FEATURES)
    image = dt.io.decode_jpeg(features["image/encoded"], channels=3)
    image = dt.image.random_crop(image, [224, 224, 3])
    image = dt.image.random_flip_left_right(image)
    return dt.image.convert_image_dtype(image, dt.float32), features["image/class/label"]


def cifar_dataset(files: list[str], calls: Any) -> Any:
    return (dt.data.FixedLengthRecordDataset(files, 3073).repeat()
            .map(cifar_parse, num_parallel_calls=calls).batch(CIFAR_BATCH).prefetch(2))


def jpeg_dataset(files: list[str], calls: Any) -> Any:
    return (dt.data.TFRecordDataset(files).repeat()
            .map(jpeg_parse, num_parallel_calls=calls).batch(JPEG_BATCH).prefetch(2))


class Meter:
    """Counts images over a window: wall and this process's CPU time."""

    def __init__(self, seconds: float, warm: float = 2.0) -> None:
        self.seconds = seconds
        self.warm = warm

    def run(self, step: Callable[[], int]) -> tuple[float, float]:
        start = time.perf_counter()   # warm: threads started, AUTOTUNE's first measurements
        step()
        while time.perf_counter() - start < self.warm:
            step()
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < self.seconds:
            n += step()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return n / wall, cpu / n * 1e3


def dataset_row(make: Callable[[], Any], meter: Meter) -> tuple[float, float]:
    it = iter(make())
    try:
        return meter.run(lambda: len(next(it)[1]))
    finally:
        it.close()


def queue_row(kind: str, files: list[str], meter: Meter) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        g = dt.Graph()
        with g.as_default():
            names = dt.train.string_input_producer(files)
            if kind == "cifar":
                _, value = dt.FixedLengthRecordReader(3073).read(names)
                raw = dt.io.decode_raw(value, dt.uint8)
                label = dt.cast(dt.strided_slice(raw, [0], [1]), dt.int32)
                image = dt.cast(dt.transpose(dt.reshape(dt.strided_slice(raw, [1], [3073]),
                                                        [3, 32, 32]), [1, 2, 0]), dt.float32)
                image = dt.image.random_crop(image, [24, 24, 3])
                image = dt.image.random_flip_left_right(image)
                image = dt.image.random_brightness(image, max_delta=63)
                image = dt.image.random_contrast(image, lower=0.2, upper=1.8)
                image = dt.image.per_image_standardization(image)
                label = dt.reshape(label, [1])
                batch = CIFAR_BATCH
            else:
                _, value = dt.TFRecordReader().read(names)
                image, label = jpeg_graph(value)
                batch = JPEG_BATCH
            images, labels = dt.train.batch([image, label], batch, num_threads=2,
                                            capacity=4 * batch)
            async with dt.Session() as sess:
                dt.train.start_queue_runners(sess=sess)
                loop = asyncio.get_running_loop()

                def step() -> int:
                    return len(asyncio.run_coroutine_threadsafe(
                        sess.run(labels), loop).result())
                return await asyncio.to_thread(meter.run, step)
    return asyncio.run(main())


def jpeg_graph(value: Any) -> tuple[Any, Any]:
    features = dt.io.parse_single_example(value, JPEG_FEATURES)
    image = dt.io.decode_jpeg(features["image/encoded"], channels=3)
    image = dt.reshape(image, [256, 256, 3])   # the files' size: random_crop needs it known
    image = dt.image.random_crop(image, [224, 224, 3])
    image = dt.image.random_flip_left_right(image)
    return dt.image.convert_image_dtype(image, dt.float32), features["image/class/label"]


# -- the trainer ---------------------------------------------------------------------------
def trainer_row(kind: str, data_root: str, files: list[str], meter: Meter) -> tuple[float, float]:
    import cifar10
    import cifar10_input
    cifar10.FLAGS(["bench", f"--data_dir={data_root}", f"--batch_size={CIFAR_BATCH}"])
    cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 2000   # the queues' fill, not 20,000

    async def main() -> tuple[float, float]:
        g = dt.Graph()
        with g.as_default():
            global_step = dt.train.get_or_create_global_step()
            feed: dict = {}
            if kind == "queue":
                images, labels = cifar10.distorted_inputs()
            else:
                images = dt.placeholder(dt.float32, [CIFAR_BATCH, 24, 24, 3])
                labels = dt.placeholder(dt.int32, [CIFAR_BATCH])
            train_op = cifar10.train(cifar10.loss(cifar10.inference(images), labels),
                                     global_step)
            it = None
            if kind == "data":
                it = iter(cifar_dataset(files, dt.data.AUTOTUNE))
            elif kind == "memory":
                rng = np.random.default_rng(0)
                feed = {images: rng.standard_normal((CIFAR_BATCH, 24, 24, 3), np.float32),
                        labels: rng.integers(0, 10, CIFAR_BATCH).astype(np.int32)}
            async with dt.Session() as sess:
                await sess.run(dt.global_variables_initializer())
                if kind == "queue":
                    dt.train.start_queue_runners(sess=sess)
                loop = asyncio.get_running_loop()

                def step() -> int:
                    fed = feed
                    if it is not None:
                        x, y = next(it)
                        fed = {images: x, labels: y}
                    asyncio.run_coroutine_threadsafe(sess.run(train_op, fed), loop).result()
                    return CIFAR_BATCH
                try:
                    return await asyncio.to_thread(meter.run, step)
                finally:
                    if it is not None:
                        it.close()
    return asyncio.run(main())


# -- ResNet's ImageNet input (examples/imagenet) ------------------------------------------
_IMAGENET_CHILD = r"""
import importlib.util, json, sys
root, seconds, warm = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
spec = importlib.util.spec_from_file_location("bench_input", sys.argv[4])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from examples.imagenet import imagenet_preprocessing as ip
from examples.imagenet.make_data import write_shards
files, _ = write_shards(root, "train", num_files=4, per_file=64, size=(200, 400), seed=1)
make = lambda: ip.input_fn(True, root, bench.JPEG_BATCH, filenames=files)
print("ROW " + json.dumps(bench.dataset_row(make, bench.Meter(seconds, warm))))
"""


def imagenet_row(root: str, meter: Meter) -> tuple[float, float]:
    """``imagenet-data``: the official ResNet ``input_fn`` for training (parse ->
    ``sample_distorted_bounding_box`` -> ``decode_and_crop_jpeg`` -> flip ->
    TF1 bilinear resize 224 -> mean subtraction -> batch 64) on Examples of
    200-400 px JPEGs with boxes as ``build_imagenet_data.py`` writes them; in a
    child process, as the port turns eager execution on (a TF2 program)."""
    import subprocess
    out = subprocess.run([sys.executable, "-c", _IMAGENET_CHILD, os.path.join(root, "imagenet"),
                          str(meter.seconds), str(meter.warm), os.path.abspath(__file__)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    line = [x for x in out.stdout.splitlines() if x.startswith("ROW ")]
    if out.returncode != 0 or not line:
        raise RuntimeError(f"the imagenet-data row failed: {out.stderr[-2000:]}")
    rate, cpu = json.loads(line[-1][4:])
    return rate, cpu


# -- the table -------------------------------------------------------------------------------
ROWS = ["cifar-data", "cifar-data-1", "cifar-queue", "cifar-queue-each", "jpeg-data",
        "jpeg-data-1", "jpeg-queue", "trainer-memory", "trainer-data", "trainer-queue",
        "trainer-queue-each", "imagenet-data"]


def measure(name: str, env: dict, meter: Meter) -> tuple[float, float]:
    from distrib.train.input import vectorize
    if name.endswith("-each"):   # the queue runners' ops once per record (not vectorized)
        vectorize.ENABLED = False
        try:
            return measure(name[:-len("-each")], env, meter)
        finally:
            vectorize.ENABLED = True
    kind, _, how = name.partition("-")
    if kind == "imagenet":
        return imagenet_row(env["root"], meter)
    if kind == "trainer":
        return trainer_row(how, env["root"], env["cifar"], meter)
    files = env[kind]
    if how == "queue":
        return queue_row(kind, files, meter)
    calls = None if how == "data-1" else dt.data.AUTOTUNE
    make = (lambda: cifar_dataset(files, calls)) if kind == "cifar" else \
        (lambda: jpeg_dataset(files, calls))
    return dataset_row(make, meter)


def report(rows: list[dict]) -> None:
    print(f"{'row':<16} {'images/s':>9} {'cpu ms/img':>10}  {'vs':<28}")
    by = {r["name"]: r for r in rows}
    for r in rows:
        kind = r["name"].split("-")[0]
        if kind in REFERENCE:
            ratio = r["images_per_s"] / REFERENCE[kind]
            vs = f"{ratio:.2f}x tf.data {REFERENCE[kind]:,.0f} (target {TARGET[kind]}x)"
        elif kind == "imagenet":
            vs = (f"{r['images_per_s'] / by['jpeg-data']['images_per_s']:.2f}x jpeg-data"
                  if "jpeg-data" in by else "no tf.data figure: run with jpeg-data")
        elif r["name"] != "trainer-memory" and "trainer-memory" in by:
            base = by["trainer-memory"]["images_per_s"]
            vs = f"{r['images_per_s'] / base - 1:+.1%} vs trainer-memory (target >= -5%)"
        else:
            vs = "baseline (fixed fed batch)"
        print(f"{r['name']:<16} {r['images_per_s']:>9.0f} {r['cpu_ms_per_image']:>10.3f}  {vs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warm", type=float, default=2.0)
    ap.add_argument("--only", help="comma-separated rows (" + ",".join(ROWS) + ")")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else ROWS
    unknown = sorted(set(names) - set(ROWS))
    if unknown:
        ap.error(f"unknown rows {unknown}; rows are {ROWS}")
    with tempfile.TemporaryDirectory(prefix="dt-bench-input-") as root:
        env = {"root": root, "cifar": make_cifar(root, 1000),
               "jpeg": make_jpeg(root, 4, 128)}
        meter = Meter(args.seconds, args.warm)
        figures: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for _ in range(args.rounds):
            for name in names:
                figures[name].append(measure(name, env, meter))
    rows = [{"name": n, "images_per_s": statistics.median(f[0] for f in figures[n]),
             "cpu_ms_per_image": statistics.median(f[1] for f in figures[n]),
             "rounds": [list(f) for f in figures[n]]} for n in names]
    print(f"input pipelines, {os.cpu_count()} cores, load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())} (median of {args.rounds} x "
          f"{args.seconds:g} s)")
    report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "reference": REFERENCE, "targets": TARGET}, f, indent=1)


if __name__ == "__main__":
    main()
