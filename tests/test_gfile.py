"""``dt.io.gfile``: TF's ``tf.io.gfile`` on local paths, with TF's errors (the
multi-worker tutorials make a non-chief's temporary folder with ``makedirs``
and delete it with ``rmtree``)."""
from __future__ import annotations

import pytest

import distrib as dt
from distrib.errors import AlreadyExistsError, NotFoundError, UnimplementedError

gfile = dt.io.gfile


def test_the_tutorials_temporary_folder_is_made_and_deleted(tmp_path) -> None:
    temp = tmp_path / "workertemp_1" / "ckpt"
    gfile.makedirs(str(temp))
    gfile.makedirs(str(temp))                    # no error when it exists (TF)
    with gfile.GFile(str(temp / "f"), "w") as f:
        f.write("x")
    assert gfile.exists(str(temp / "f")) and gfile.isdir(str(temp))
    assert gfile.listdir(str(temp)) == ["f"] and gfile.glob(str(temp / "*")) == [str(temp / "f")]
    gfile.rmtree(str(tmp_path / "workertemp_1"))
    assert not gfile.exists(str(tmp_path / "workertemp_1"))
    with pytest.raises(NotFoundError, match="rmtree"):     # TF's DeleteRecursively
        gfile.rmtree(str(tmp_path / "workertemp_1"))


def test_tf_errors_for_missing_and_existing_paths(tmp_path) -> None:
    with pytest.raises(NotFoundError):
        gfile.remove(str(tmp_path / "nothing"))
    with pytest.raises(NotFoundError):
        gfile.listdir(str(tmp_path / "nothing"))
    with pytest.raises(NotFoundError):
        gfile.GFile(str(tmp_path / "nothing"), "r")
    gfile.mkdir(str(tmp_path / "a"))
    with pytest.raises(AlreadyExistsError):
        gfile.mkdir(str(tmp_path / "a"))
    (tmp_path / "s").write_text("1")
    (tmp_path / "t").write_text("2")
    with pytest.raises(AlreadyExistsError):
        gfile.rename(str(tmp_path / "s"), str(tmp_path / "t"))
    gfile.copy(str(tmp_path / "s"), str(tmp_path / "t"), overwrite=True)
    assert (tmp_path / "t").read_text() == "1"
    with pytest.raises(UnimplementedError, match="gs"):
        gfile.exists("gs://bucket/x")
