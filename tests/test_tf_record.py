"""Files and records (issue 40 item 1): TFRecord framing checked against bytes
built by hand to TF's format with an independent CRC32C (RFC 3720's test
vectors), GZIP/ZLIB files that are plain zlib/gzip streams, damaged and
truncated files as DataLossError naming the file and offset;
``dt.train.Example`` against an Example's wire format written out by hand;
``parse_single_example`` / ``parse_example`` (dense, defaults, sparse, TF's
errors) in a dataset function and in a graph; FixedLengthRecordDataset,
TextLineDataset, list_files, read_file; TF1's TFRecordReader and
WholeFileReader through a queue."""
from __future__ import annotations

import asyncio
import gzip
import os
import struct
import zlib

import numpy as np
import pytest

import distrib as dt
from distrib.errors import DataLossError, InvalidArgumentError, OutOfRangeError


def _b(x) -> bytes:
    """A string element's bytes (a 0-d object array from a reader, bytes from a slice)."""
    return x.item() if isinstance(x, np.ndarray) else x


# -- an independent CRC32C (bit by bit, Castagnoli's polynomial reflected) --------
def crc32c_reference(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c_reference(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def hand_frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


def test_crc32c_matches_rfc3720_vectors_and_tfs_mask():
    from distrib.io.tf_record import masked_crc
    # RFC 3720 B.4 (TF's crc32c_test StandardResults)
    assert crc32c_reference(bytes(32)) == 0x8A9136AA
    assert crc32c_reference(b"\xff" * 32) == 0x62A8AB43
    assert crc32c_reference(bytes(range(32))) == 0x46DD794E
    assert crc32c_reference(bytes(range(31, -1, -1))) == 0x113FDB5C
    for data in (b"", b"a", b"hello world", bytes(range(256)) * 3):
        assert masked_crc(data) == masked(data)


def test_a_file_framed_by_hand_reads_back_and_ours_writes_the_same_bytes(tmp_path):
    records = [b"", b"abc", bytes(range(256)) * 4, b"\x00\x00trailing zeros\x00\x00"]
    hand = tmp_path / "hand.tfrecord"
    hand.write_bytes(b"".join(hand_frame(r) for r in records))
    got = [_b(x) for x in dt.data.TFRecordDataset(str(hand))]
    assert got == records
    ours = tmp_path / "ours.tfrecord"
    with dt.io.TFRecordWriter(str(ours)) as w:
        for r in records:
            w.write(r)
    assert ours.read_bytes() == hand.read_bytes()
    assert list(dt.io.tf_record_iterator(str(ours))) == records


@pytest.mark.parametrize("kind", ["ZLIB", "GZIP"])
def test_compressed_files_are_plain_streams_both_ways(tmp_path, kind):
    records = [f"record {i}".encode() * (i + 1) for i in range(20)]
    framed = b"".join(hand_frame(r) for r in records)
    ours = tmp_path / "ours"
    with dt.io.TFRecordWriter(str(ours), dt.io.TFRecordOptions(compression_type=kind)) as w:
        for r in records:
            w.write(r)
    raw = ours.read_bytes()
    assert (zlib.decompress(raw) if kind == "ZLIB" else gzip.decompress(raw)) == framed
    theirs = tmp_path / "theirs"
    theirs.write_bytes(zlib.compress(framed) if kind == "ZLIB" else gzip.compress(framed))
    ds = dt.data.TFRecordDataset([str(theirs)], compression_type=kind)
    assert [_b(x) for x in ds] == records
    with pytest.raises(DataLossError):   # read without saying it is compressed
        list(dt.data.TFRecordDataset(str(theirs)))


def test_a_damaged_record_is_data_loss_naming_the_file_and_offset(tmp_path):
    records = [b"first", b"second record", b"third"]
    path = tmp_path / "bad.tfrecord"
    blob = bytearray(b"".join(hand_frame(r) for r in records))
    second = 16 + len(records[0])
    blob[second + 12 + 2] ^= 0x01   # a byte of the second record's data
    path.write_bytes(bytes(blob))
    it = iter(dt.data.TFRecordDataset(str(path)))
    assert _b(next(it)) == b"first"
    with pytest.raises(DataLossError, match=rf"bad.tfrecord.*corrupted record at {second}"):
        next(it)
    blob = bytearray(b"".join(hand_frame(r) for r in records))
    blob[second + 3] ^= 0x10   # the second record's length
    path.write_bytes(bytes(blob))
    with pytest.raises(DataLossError, match=rf"at {second}.*length"):
        list(dt.data.TFRecordDataset(str(path)))
    path.write_bytes(b"".join(hand_frame(r) for r in records)[:-3])
    with pytest.raises(DataLossError, match=r"truncated record at \d+"):
        list(dt.data.TFRecordDataset(str(path)))


# -- tf.train.Example ------------------------------------------------------------
def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2), lengths under 128."""
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def hand_example(label: int, data: bytes, weights: list[float]) -> bytes:
    """An Example as TF's protobuf writes it, field by field (feature.proto)."""
    int64_list = _ld(1, bytes([label]))                              # packed varints
    bytes_list = _ld(1, data)
    float_list = _ld(1, struct.pack(f"<{len(weights)}f", *weights))  # packed floats
    entries = [(b"data", _ld(1, bytes_list)), (b"label", _ld(3, int64_list)),
               (b"weights", _ld(2, float_list))]
    features = b"".join(_ld(1, _ld(1, key) + _ld(2, feature)) for key, feature in entries)
    return _ld(1, features)


def test_example_has_tfs_wire_format_both_ways():
    wire = hand_example(7, b"\x00img\x00", [0.5, -2.0])
    ex = dt.train.Example.FromString(wire)
    feature = ex.features.feature
    assert list(feature["label"].int64_list.value) == [7]
    assert list(feature["data"].bytes_list.value) == [b"\x00img\x00"]
    assert list(feature["weights"].float_list.value) == [0.5, -2.0]
    ours = dt.train.Example(features=dt.train.Features(feature={
        "label": dt.train.Feature(int64_list=dt.train.Int64List(value=[7]))}))
    assert ours.SerializeToString() == _ld(1, _ld(1, _ld(1, b"label") + _ld(2, _ld(3, _ld(1, b"\x07")))))
    assert dt.train.Int64List(value=[-1]).SerializeToString() == b"\n\n" + b"\xff" * 9 + b"\x01"


FEATURES = {"label": dt.io.FixedLenFeature([], dt.int64),
            "data": dt.io.FixedLenFeature([], dt.string),
            "weights": dt.io.VarLenFeature(dt.float32),
            "extra": dt.io.FixedLenFeature([2], dt.float32, default_value=[1.0, 2.0])}


def test_parse_single_example_in_a_dataset_function():
    wire = hand_example(3, b"xy", [1.5, 2.5, 3.5])
    ds = dt.data.Dataset.from_tensor_slices(np.array([wire], dtype=object))
    (out,) = list(ds.map(lambda r: dt.io.parse_single_example(r, FEATURES)))
    assert out["label"] == 3 and out["label"].dtype == np.int64
    assert out["data"] == b"xy"
    np.testing.assert_array_equal(out["extra"], [1.0, 2.0])
    sp = out["weights"]
    np.testing.assert_array_equal(sp.indices, [[0], [1], [2]])
    np.testing.assert_array_equal(sp.values, np.float32([1.5, 2.5, 3.5]))
    np.testing.assert_array_equal(sp.dense_shape, [3])


def test_parse_example_batches_as_tfs_parser():
    batch = np.array([hand_example(1, b"a", [1.0, 2.0]), hand_example(2, b"b", []),
                      hand_example(3, b"c", [3.0])], dtype=object)
    ds = dt.data.Dataset.from_tensors(batch).map(lambda b: dt.io.parse_example(b, FEATURES))
    (out,) = list(ds)
    np.testing.assert_array_equal(out["label"], [1, 2, 3])
    assert list(out["data"]) == [b"a", b"b", b"c"]
    np.testing.assert_array_equal(out["extra"], [[1.0, 2.0]] * 3)
    sp = out["weights"]   # TF's layout: [batch, longest] with row-major indices
    np.testing.assert_array_equal(sp.indices, [[0, 0], [0, 1], [2, 0]])
    np.testing.assert_array_equal(sp.values, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(sp.dense_shape, [3, 2])


def test_parse_errors_are_tfs():
    wire = hand_example(3, b"xy", [1.0])

    def run(spec):
        return list(dt.data.Dataset.from_tensors(np.array(wire, dtype=object))
                    .map(lambda r: dt.io.parse_single_example(r, spec)))
    with pytest.raises(InvalidArgumentError, match="Feature: missing .* is required"):
        run({"missing": dt.io.FixedLenFeature([], dt.int64)})
    with pytest.raises(InvalidArgumentError, match="Key: label.*Number of int64 values"):
        run({"label": dt.io.FixedLenFeature([2], dt.int64)})
    with pytest.raises(InvalidArgumentError, match="Key: label.*Data types don't match"):
        run({"label": dt.io.FixedLenFeature([], dt.float32)})
    with pytest.raises(InvalidArgumentError, match="Could not parse example input"):
        list(dt.data.Dataset.from_tensors(np.array(b"\x0a\x05ab", dtype=object))
             .map(lambda r: dt.io.parse_single_example(r, FEATURES)))


def test_parse_single_example_in_a_graph():
    g = dt.Graph()
    with g.as_default():
        serialized = dt.placeholder(dt.string, [])
        out = dt.io.parse_single_example(serialized, FEATURES)
        assert out["label"].shape.as_list() == [] and out["extra"].shape.as_list() == [2]
        assert isinstance(out["weights"], dt.SparseTensor)
        sess = dt.SyncSession(graph=g)
        try:
            got = sess.run([out["label"], out["data"], out["weights"].indices,
                            out["weights"].values, out["weights"].dense_shape, out["extra"]],
                           {serialized: hand_example(9, b"q", [4.0, 5.0])})
        finally:
            sess.close()
    assert got[0] == 9 and got[1] == b"q"
    np.testing.assert_array_equal(got[2], [[0], [1]])
    np.testing.assert_array_equal(got[3], [4.0, 5.0])
    np.testing.assert_array_equal(got[4], [2])
    np.testing.assert_array_equal(got[5], [1.0, 2.0])


# -- the other readers ------------------------------------------------------------
def test_fixed_length_records_skip_header_and_footer_as_tfs(tmp_path):
    # TF's readers_test: files of a 5-byte header, 3 records of 3 bytes, a 2-byte footer
    names = []
    for i in range(2):
        path = tmp_path / f"fixed_length_record.{i}.txt"
        body = b"".join(bytes([ord("0") + i * 3 + j]) * 3 for j in range(3))
        path.write_bytes(b"H" * 5 + body + b"F" * 2)
        names.append(str(path))
    ds = dt.data.FixedLengthRecordDataset(names, 3, header_bytes=5, footer_bytes=2)
    assert [_b(x) for x in ds] == [b"000", b"111", b"222", b"333", b"444", b"555"]
    bad = dt.data.FixedLengthRecordDataset(names, 4, header_bytes=5, footer_bytes=2)
    with pytest.raises(InvalidArgumentError, match=r'Excluding the header \(5 bytes\) and footer '
                       r'\(2 bytes\), input file ".*fixed_length_record.0.txt" has body length 9 '
                       r"bytes, which is not an exact multiple of the record length \(4 bytes\)"):
        list(bad)
    raw = dt.data.FixedLengthRecordDataset(names[0], 3, 5, 2).map(
        lambda r: dt.io.decode_raw(r, dt.uint8))
    np.testing.assert_array_equal(next(iter(raw)), [48, 48, 48])


def test_text_lines_drop_their_endings_and_gzip_reads(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_bytes(b"one\ntwo\r\n\nlast")
    assert [_b(x) for x in dt.data.TextLineDataset(str(plain))] == [b"one", b"two", b"", b"last"]
    packed = tmp_path / "b.txt.gz"
    packed.write_bytes(gzip.compress(b"x\ny\n"))
    assert [_b(x) for x in dt.data.TextLineDataset(str(packed), "GZIP")] == [b"x", b"y"]


def test_list_files_and_read_file(tmp_path):
    for name in ("b.rec", "a.rec", "c.txt"):
        (tmp_path / name).write_bytes(name.encode())
    pattern = str(tmp_path / "*.rec")
    fixed = [_b(x) for x in dt.data.Dataset.list_files(pattern, shuffle=False)]
    assert fixed == [str(tmp_path / "a.rec").encode(), str(tmp_path / "b.rec").encode()]
    shuffled = dt.data.Dataset.list_files(pattern, seed=3)
    assert sorted(_b(x) for x in shuffled) == fixed
    with pytest.raises(InvalidArgumentError, match="No files matched pattern"):
        dt.data.Dataset.list_files(str(tmp_path / "*.none"))
    contents = dt.data.Dataset.list_files(pattern, shuffle=False).map(dt.io.read_file)
    assert [_b(x) for x in contents] == [b"a.rec", b"b.rec"]


def test_tfrecord_and_whole_file_readers_through_a_queue(tmp_path):
    names = []
    for i in range(2):
        path = str(tmp_path / f"r{i}.tfrecord")
        with dt.io.TFRecordWriter(path) as w:
            for j in range(3):
                w.write(f"{i}-{j}".encode())
        names.append(path)

    async def main():
        g = dt.Graph()
        with g.as_default():
            files = dt.train.string_input_producer(names, num_epochs=1, shuffle=False)
            key, value = dt.TFRecordReader().read(files)
            whole = dt.train.string_input_producer(names, num_epochs=1, shuffle=False)
            wkey, wvalue = dt.WholeFileReader().read(whole)
            async with dt.Session() as sess:
                await sess.run(dt.local_variables_initializer())
                dt.train.start_queue_runners(sess=sess)
                records = [await sess.run([key, value]) for _ in range(6)]
                with pytest.raises(OutOfRangeError):
                    await sess.run(value)
                files_read = [await sess.run([wkey, wvalue]) for _ in range(2)]
        return records, files_read

    records, files_read = asyncio.run(main())
    offsets = [0, 16 + 3, 2 * (16 + 3)]
    assert [(k.decode(), v) for k, v in records] == [
        (f"{names[i]}:{offsets[j]}", f"{i}-{j}".encode()) for i in range(2) for j in range(3)]
    assert [k.decode() for k, _ in files_read] == names
    assert files_read[0][1] == open(names[0], "rb").read()


def test_nothing_left_open(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    with dt.io.TFRecordWriter(path) as w:
        w.write(b"1")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        list(dt.data.TFRecordDataset(path))
    assert len(os.listdir("/proc/self/fd")) <= before


def test_fixed_length_files_are_read_in_pieces_and_bad_bodies_are_tfs_errors(tmp_path,
                                                                              monkeypatch):
    """An uncompressed file was read whole into memory (a multi-GB file of records
    needed that much); a compressed file whose body is not whole records is TF's
    DataLossError (InvalidArgumentError only for an uncompressed one), and a file
    shorter than its header and footer is an error, not an empty file."""
    from distrib.data import readers
    from distrib.io import tf_record
    rng = np.random.default_rng(0)
    records = [rng.integers(0, 256, 3073, dtype=np.uint8).tobytes() for _ in range(200)]
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(b"".join(records))
    reads = []
    real_open = tf_record.open_read

    def spying_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        real_read = f.read
        f.read = lambda n=-1: (reads.append(n), real_read(n))[1]   # type: ignore[method-assign]
        return f
    monkeypatch.setattr(readers.tf_record, "open_read", spying_open)
    got = [_b(x) for x in dt.data.FixedLengthRecordDataset(str(path), 3073)]
    assert got == records
    assert reads and max(reads) <= 256 * 1024 and -1 not in reads
    monkeypatch.undo()
    gz = tmp_path / "short.bin.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"H" * 5 + b"x" * 10 + b"F" * 2)
    with pytest.raises(dt.errors.DataLossError, match="not an exact multiple of the record"):
        list(dt.data.FixedLengthRecordDataset(str(gz), 3, header_bytes=5, footer_bytes=2,
                                              compression_type="GZIP"))
    tiny = tmp_path / "tiny.bin"
    tiny.write_bytes(b"HH")
    with pytest.raises(InvalidArgumentError, match="fewer than its header"):
        list(dt.data.FixedLengthRecordDataset(str(tiny), 3, header_bytes=5))


def test_a_gzip_file_read_is_closed_not_left_to_the_collector(tmp_path):
    """Reading a GZIP TFRecord file closed the gzip stream but not the file under
    it (GzipFile leaves a given file open): each read left an open file to the
    garbage collector (a ResourceWarning; an fd held while anything kept it)."""
    import gc
    import warnings
    path = str(tmp_path / "x.tfrecord.gz")
    with dt.io.TFRecordWriter(path, dt.io.TFRecordOptions("GZIP")) as w:
        w.write(b"one")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        assert [_b(x) for x in dt.data.TFRecordDataset(path, "GZIP")] == [b"one"]
        assert [_b(x) for x in dt.data.TextLineDataset(path, "GZIP")]
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_zlib_file_is_inflated_a_buffer_at_a_time(tmp_path, monkeypatch):
    """A ZLIB file's reader inflated each 256 KiB read whole (a compressible file:
    tens of MB at once) and sliced that remainder again on every read, quadratic
    in the ratio; it now inflates at most a buffer's worth at a time. The bytes
    read are the same, and a file cut short is still a truncated record."""
    from distrib.io import tf_record
    path = str(tmp_path / "zeros.tfrecord.z")
    records = [bytes([i]) * 100_000 for i in range(60)]
    with dt.io.TFRecordWriter(path, "ZLIB") as w:
        for r in records:
            w.write(r)
    largest = [0]
    real = tf_record._ZlibReader.readinto

    def watched(self, buffer):
        got = real(self, buffer)
        largest[0] = max(largest[0], len(self._pending))
        return got
    monkeypatch.setattr(tf_record._ZlibReader, "readinto", watched)
    assert [_b(x) for x in dt.data.TFRecordDataset(path, "ZLIB")] == records
    assert largest[0] <= 2 * tf_record._READ_BUFFER   # was the rest of a 6 MB inflate
    data = open(path, "rb").read()
    cut = str(tmp_path / "cut.tfrecord.z")
    with open(cut, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(DataLossError, match="truncated record|cannot decompress"):
        list(dt.data.TFRecordDataset(cut, "ZLIB"))


def test_parallel_reads_take_tfs_interleave_order(tmp_path):
    """num_parallel_reads=N is TF's interleave of the files with cycle_length N and
    block_length 1: a file that ends leaves its slot to the next file when the
    turn comes back to it (the records of files of 1, 3 and 3 records: A0 B0
    B1 C0 B2 C1 C2); the reader appended the next file at the end of its list
    (A0 B0 B1 B2 C0 C1 C2)."""
    names = []
    for name, count in (("a", 1), ("b", 3), ("c", 3)):
        path = str(tmp_path / f"{name}.tfrecord")
        with dt.io.TFRecordWriter(path) as w:
            for i in range(count):
                w.write(f"{name.upper()}{i}")
        names.append(path)
    got = [_b(x).decode() for x in dt.data.TFRecordDataset(names, num_parallel_reads=2)]
    assert got == ["A0", "B0", "B1", "C0", "B2", "C1", "C2"]
    ring = dt.data.Dataset.from_tensor_slices(names).interleave(
        dt.data.TFRecordDataset, cycle_length=2, block_length=1)
    assert [_b(x).decode() for x in ring] == got
