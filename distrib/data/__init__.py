"""``dt.data``: input pipelines of numpy elements, in the model of ``tf.data``.

Re-exports only. ``Dataset`` (dataset_ops.py) is the facade; the pipeline's
stages live in pipeline.py (sources, zip, concatenate), transforms.py (batch,
shuffle, repeat, shard, map ...) and iterators.py (iteration and prefetch);
``Options`` in options.py; the file readers (``TFRecordDataset`` ...) in
file_datasets.py over readers.py; the parallel map (threads, or forked
workers under AUTOTUNE) in parallel_map.py and process_map.py; interleave,
flat_map in interleave.py; cache and padded_batch in cache.py; an
iterator's checkpointed position in iterator_state.py; the split of a
dataset between workers and replicas for the strategies in
distribute_input.py.
"""
from __future__ import annotations

from distrib.data import experimental
from distrib.data.dataset_ops import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset
from distrib.data.distribute_input import auto_shard, batch_sizes_for_worker, rebatch_and_shard
from distrib.data.file_datasets import FixedLengthRecordDataset, TextLineDataset, TFRecordDataset
from distrib.data.iterators import AUTOTUNE, AsyncDatasetIterator, DatasetIterator
from distrib.data.options import AutoShardPolicy, DistributeOptions, Options, ThreadingOptions
from distrib.data.structure import TensorSpec

__all__ = ["Dataset", "Options", "DistributeOptions", "ThreadingOptions", "AutoShardPolicy",
           "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "TensorSpec",
           "DatasetIterator", "AsyncDatasetIterator", "experimental", "rebatch_and_shard",
           "auto_shard", "batch_sizes_for_worker", "TFRecordDataset", "FixedLengthRecordDataset",
           "TextLineDataset"]
