"""Checkpoint file format, state file, latest_checkpoint fallback and rotation."""
from __future__ import annotations

import os

import numpy as np
import pytest

from distrib.errors import DataLossError, InvalidArgumentError, NotFoundError
from distrib.train.checkpoints.file_format import (
    checkpoint_exists,
    list_checkpoint_tensors,
    read_checkpoint,
    write_checkpoint,
)
from distrib.train.checkpoints.state_file import (
    CheckpointRotation,
    CheckpointState,
    get_checkpoint_state,
    latest_checkpoint,
    update_checkpoint_state,
)

ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {f"v/{d}": (rng.standard_normal((3, 4)) * 10).astype(d) for d in ALL_DTYPES}
    out["scalar"] = np.array(7.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 5), dtype=np.float64)
    out["empty_int"] = np.array([], dtype=np.int32)
    out["big_endian"] = np.arange(5, dtype=">i4")
    out["strided"] = np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2]
    out["unicode"] = np.array(["a", "héllo"], dtype="<U5")
    out["strings"] = np.array([["x", "yz"], ["", "한국"]], dtype=object)
    out["bytes_obj"] = np.array([b"\x00\xff", b""], dtype=object)
    return out


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_round_trip_of_all_dtypes_scalars_and_empty(tmp_path) -> None:
    want = _tensors()
    path = write_checkpoint(str(tmp_path / "model"), want)
    assert path == str(tmp_path / "model")
    got = read_checkpoint(path)
    _assert_same(got, want)
    got["v/float32"][0, 0] = 1.0  # restored arrays are writable


def test_global_step_names_the_file(tmp_path) -> None:
    path = write_checkpoint(str(tmp_path / "ckpt" / "model"), {"w": np.ones(2)}, global_step=np.int64(1000))
    assert path == str(tmp_path / "ckpt" / "model-1000")
    assert os.path.exists(path)
    with pytest.raises(InvalidArgumentError, match="global_step"):
        write_checkpoint(str(tmp_path / "m"), {}, global_step="7")  # type: ignore[arg-type]


def test_read_a_subset_and_missing_key(tmp_path) -> None:
    path = write_checkpoint(str(tmp_path / "m"), {"a": np.ones(2), "b": np.zeros(3)})
    assert list(read_checkpoint(path, ["b"])) == ["b"]
    with pytest.raises(NotFoundError, match=r"\['c'\] not found.*\['a', 'b'\]"):
        read_checkpoint(path, ["c"])


def test_list_checkpoint_tensors(tmp_path) -> None:
    path = write_checkpoint(str(tmp_path / "m"), {"w": np.zeros((2, 3), np.float32),
                                                   "s": np.array(["q"], dtype=object)})
    assert list_checkpoint_tensors(path) == {"w": (np.dtype(np.float32), (2, 3)),
                                             "s": (np.dtype(object), (1,))}


def test_write_leaves_no_temp_files_and_overwrites_atomically(tmp_path) -> None:
    write_checkpoint(str(tmp_path / "m"), {"w": np.ones(3)})
    write_checkpoint(str(tmp_path / "m"), {"w": np.full(3, 2.0)})
    assert sorted(os.listdir(tmp_path)) == ["m"]
    np.testing.assert_array_equal(read_checkpoint(str(tmp_path / "m"))["w"], [2.0, 2.0, 2.0])


def test_failed_write_leaves_old_file_and_no_temp(tmp_path) -> None:
    write_checkpoint(str(tmp_path / "m"), {"w": np.ones(3)})
    with pytest.raises(InvalidArgumentError, match="non-string"):
        write_checkpoint(str(tmp_path / "m"), {"w": np.array([object()], dtype=object)})
    assert sorted(os.listdir(tmp_path)) == ["m"]
    np.testing.assert_array_equal(read_checkpoint(str(tmp_path / "m"))["w"], np.ones(3))


def test_structured_dtypes_are_refused(tmp_path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot hold"):
        write_checkpoint(str(tmp_path / "m"), {"r": np.zeros(2, dtype=[("a", "<f4")])})


def _flip(path: str, offset: int) -> None:
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x40
    open(path, "wb").write(bytes(data))


def test_corrupted_tensor_byte_is_data_loss_naming_file_and_tensor(tmp_path) -> None:
    path = write_checkpoint(str(tmp_path / "m"), {"w": np.arange(100, dtype=np.float32)})
    _flip(path, os.path.getsize(path) - 10)
    with pytest.raises(DataLossError, match=r"'.*m'.*checksum mismatch in tensor 'w'"):
        read_checkpoint(path)
    # the header is intact: listing still works, and latest_checkpoint would pick it
    assert checkpoint_exists(path)


def test_corrupted_header_byte_is_data_loss(tmp_path) -> None:
    path = write_checkpoint(str(tmp_path / "m"), {"w": np.arange(10)})
    _flip(path, 30)
    with pytest.raises(DataLossError, match="header checksum"):
        read_checkpoint(path)
    with pytest.raises(DataLossError):
        list_checkpoint_tensors(path)


@pytest.mark.parametrize("keep", [5, 25, 200])
def test_truncated_file_is_data_loss(tmp_path, keep: int) -> None:
    path = write_checkpoint(str(tmp_path / "m"), {"w": np.arange(100, dtype=np.float64)})
    data = open(path, "rb").read()
    open(path, "wb").write(data[:keep])
    with pytest.raises(DataLossError, match=str(tmp_path / "m")):
        read_checkpoint(path)


def test_not_a_checkpoint_and_missing_file(tmp_path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello, this is not a checkpoint at all")
    with pytest.raises(DataLossError, match="not a distrib checkpoint"):
        read_checkpoint(str(other))
    with pytest.raises(NotFoundError, match="does not exist"):
        read_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(NotFoundError, match="folder"):
        read_checkpoint(str(tmp_path))


def test_state_file_is_tf_format_with_relative_paths(tmp_path) -> None:
    paths = [write_checkpoint(str(tmp_path / "model"), {"w": np.ones(1)}, global_step=s) for s in (1, 2)]
    update_checkpoint_state(str(tmp_path), paths[1], paths)
    text = (tmp_path / "checkpoint").read_text()
    assert text == ('model_checkpoint_path: "model-2"\n'
                    'all_model_checkpoint_paths: "model-1"\n'
                    'all_model_checkpoint_paths: "model-2"\n')
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-1", "model-2"]
    assert get_checkpoint_state(str(tmp_path)) == CheckpointState(paths[1], tuple(paths))


def test_state_appends_latest_like_tf_and_keeps_outside_paths_absolute(tmp_path) -> None:
    outside = str(tmp_path / "elsewhere" / "m-3")
    update_checkpoint_state(str(tmp_path / "ckpt"), outside, [str(tmp_path / "ckpt" / "m-1")])
    state = get_checkpoint_state(str(tmp_path / "ckpt"))
    assert state is not None
    assert state.model_checkpoint_path == outside
    assert state.all_model_checkpoint_paths == (str(tmp_path / "ckpt" / "m-1"), outside)


def test_state_file_refuses_to_name_itself_as_the_checkpoint(tmp_path) -> None:
    # TF: "Save path ... conflicts with path used for checkpoint state"; the
    # state file would replace the very checkpoint it names
    ckpt = write_checkpoint(str(tmp_path / "checkpoint"), {"x": np.ones(2)})
    with pytest.raises(InvalidArgumentError, match="conflicts with"):
        update_checkpoint_state(str(tmp_path), ckpt)
    with pytest.raises(InvalidArgumentError, match="conflicts with"):
        update_checkpoint_state(str(tmp_path), str(tmp_path / "mine"), latest_filename="mine")
    np.testing.assert_array_equal(read_checkpoint(ckpt)["x"], np.ones(2))   # left intact
    update_checkpoint_state(str(tmp_path), ckpt, latest_filename="state")   # another name: fine
    assert get_checkpoint_state(str(tmp_path), "state").model_checkpoint_path == ckpt


def test_relative_checkpoint_dir_gives_paths_under_it(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_checkpoint("ckpt/model", {"w": np.ones(1)}, global_step=5)
    update_checkpoint_state("ckpt", path)
    assert latest_checkpoint("ckpt") == os.path.join("ckpt", "model-5")


def test_no_or_bad_state_file_gives_none(tmp_path, caplog) -> None:
    assert latest_checkpoint(str(tmp_path)) is None
    (tmp_path / "checkpoint").write_text("garbage without colon\n")
    assert get_checkpoint_state(str(tmp_path)) is None
    assert "checkpoint state ignored" in caplog.text


def test_latest_checkpoint_falls_back_past_a_bad_newest(tmp_path, caplog) -> None:
    paths = [write_checkpoint(str(tmp_path / "model"), {"w": np.full(4, s)}, global_step=s) for s in (1, 2, 3)]
    update_checkpoint_state(str(tmp_path), paths[-1], paths)
    assert latest_checkpoint(str(tmp_path)) == paths[2]
    open(paths[2], "r+b").truncate(30)             # newest truncated
    assert latest_checkpoint(str(tmp_path)) == paths[1]
    assert "skipping checkpoint" in caplog.text and paths[2] in caplog.text
    os.remove(paths[1])                            # next one gone
    assert latest_checkpoint(str(tmp_path)) == paths[0]
    np.testing.assert_array_equal(read_checkpoint(latest_checkpoint(str(tmp_path)))["w"], np.full(4, 1))
    os.remove(paths[0])
    assert latest_checkpoint(str(tmp_path)) is None


def _save(tmp_path, rotation: CheckpointRotation, step: int, stamp: float = 0.0) -> tuple[str, list[str]]:
    path = write_checkpoint(str(tmp_path / "model"), {"w": np.ones(1)}, global_step=step)
    return path, rotation.record(path, timestamp=stamp)


def test_rotation_keeps_the_newest_max_to_keep(tmp_path) -> None:
    rotation = CheckpointRotation(max_to_keep=2, now=0.0)
    deleted = [_save(tmp_path, rotation, step)[1] for step in range(1, 5)]
    assert deleted == [[], [], [str(tmp_path / "model-1")], [str(tmp_path / "model-2")]]
    assert rotation.paths == [str(tmp_path / "model-3"), str(tmp_path / "model-4")]
    assert sorted(os.listdir(tmp_path)) == ["model-3", "model-4"]


def test_rotation_resaving_a_path_moves_it_to_newest(tmp_path) -> None:
    rotation = CheckpointRotation(max_to_keep=2, now=0.0)
    for step in (1, 2, 1, 3):
        _save(tmp_path, rotation, step)
    assert rotation.paths == [str(tmp_path / "model-1"), str(tmp_path / "model-3")]
    assert sorted(os.listdir(tmp_path)) == ["model-1", "model-3"]


@pytest.mark.parametrize("max_to_keep", [None, 0])
def test_rotation_none_or_zero_keeps_everything(tmp_path, max_to_keep) -> None:
    rotation = CheckpointRotation(max_to_keep=max_to_keep)
    for step in range(6):
        assert _save(tmp_path, rotation, step)[1] == []
    assert len(os.listdir(tmp_path)) == 6


def test_rotation_keep_every_n_hours_preserves_old_ones(tmp_path) -> None:
    rotation = CheckpointRotation(max_to_keep=1, keep_checkpoint_every_n_hours=1.0, now=0.0)
    hour = 3600.0
    _save(tmp_path, rotation, 1, stamp=0.5 * hour)
    _save(tmp_path, rotation, 2, stamp=1.5 * hour)   # model-1 is before the first hour: deleted
    _save(tmp_path, rotation, 3, stamp=1.7 * hour)   # model-2 passed the 1 h mark: kept for good
    _save(tmp_path, rotation, 4, stamp=1.9 * hour)   # model-3 before the 2 h mark: deleted
    assert sorted(os.listdir(tmp_path)) == ["model-2", "model-4"]


def test_rotation_recover_takes_over_existing_files(tmp_path) -> None:
    first = CheckpointRotation(max_to_keep=2)
    paths = [_save(tmp_path, first, step)[0] for step in (1, 2)]
    second = CheckpointRotation(max_to_keep=2)
    second.recover(paths + [str(tmp_path / "gone")])
    assert second.paths == paths
    _save(tmp_path, second, 3)
    assert sorted(os.listdir(tmp_path)) == ["model-2", "model-3"]


def test_every_single_byte_flip_is_detected(tmp_path) -> None:
    tensors = {"a": np.arange(6, dtype=np.int16), "s": np.array(["xy"], dtype=object), "z": np.array(1.0)}
    path = write_checkpoint(str(tmp_path / "m"), tensors, global_step=3)
    original = open(path, "rb").read()
    for offset in range(len(original)):
        _flip(path, offset)
        with pytest.raises(DataLossError):
            read_checkpoint(path)
        open(path, "wb").write(original)
    assert set(read_checkpoint(path)) == {"a", "s", "z"}


def test_state_file_written_by_tensorflow_reads(tmp_path) -> None:
    # TF 1.14+ adds numeric timestamp fields; they are skipped, not a reason
    # to ignore the whole state file
    path = write_checkpoint(str(tmp_path / "model.ckpt"), {"w": np.ones(2)}, global_step=5)
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-5"\n'
        'all_model_checkpoint_paths: "model.ckpt-5"\n'
        "all_model_checkpoint_timestamps: 1700000000.123\n"
        "last_preserved_timestamp: 1699999000.5\n")
    assert latest_checkpoint(str(tmp_path)) == path
    assert get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == (path,)
