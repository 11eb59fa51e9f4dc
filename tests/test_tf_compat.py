"""TensorFlow 1.x compatibility of ``dt.errors``: TF's constructor signatures and attributes
beside distrib's own, with the wire format and pickling unchanged."""
from __future__ import annotations

import copy
import pickle

import pytest

import distrib as dt
from distrib import errors

SUBCLASSES = [errors.CancelledError, errors.UnknownError, errors.InvalidArgumentError,
              errors.DeadlineExceededError, errors.NotFoundError, errors.AlreadyExistsError,
              errors.PermissionDeniedError, errors.ResourceExhaustedError,
              errors.FailedPreconditionError, errors.AbortedError, errors.OutOfRangeError,
              errors.UnimplementedError, errors.InternalError, errors.UnavailableError,
              errors.DataLossError, errors.UnauthenticatedError]


@pytest.mark.parametrize("cls", SUBCLASSES)
def test_tf_positional_signature_node_def_op_message(cls):
    # tf.errors.NotFoundError(None, None, "msg") and friends
    e = cls(None, None, "msg")
    assert e.message == "msg" and str(e) == "msg"
    assert e.op is None and e.node_def is None and e.task is None
    assert e.error_code == cls.code
    kw = cls(node_def={"name": "w"}, op="w", message="gone")
    assert kw.node_def == {"name": "w"} and kw.op == "w" and kw.message == "gone"


def test_tf_op_error_takes_an_error_code():
    e = dt.errors.OpError(None, None, "not here", 5)
    assert (e.message, e.error_code, e.op, e.node_def) == ("not here", 5, None, None)
    assert dt.errors.OpError(None, None, "x", error_code=14).error_code == 14
    assert dt.errors.OpError("ours").error_code == dt.errors.OpError.code
    assert copy.deepcopy(e).error_code == 5 and pickle.loads(pickle.dumps(e)).error_code == 5
    # as in TF, a subclass has its own code and takes none
    with pytest.raises(TypeError, match="fixed error code"):
        dt.errors.NotFoundError(None, None, "m", error_code=3)
    with pytest.raises(TypeError, match="got 4 positional"):
        dt.errors.NotFoundError(None, None, "m", 3)


def test_an_operation_as_op_is_kept_and_named_on_the_wire():
    g = dt.Graph()
    with g.as_default():
        c = dt.constant(1.0, name="c")
    e = dt.errors.InvalidArgumentError(None, c.op, "bad value")
    assert e.op is c.op and e.op_name == "c" and str(e) == "bad value [op 'c']"
    wire = errors.to_wire(e, task="/job:w/task:0")
    assert wire == {"type": "InvalidArgumentError", "message": "bad value",
                    "task": "/job:w/task:0", "op": "c"}
    back = errors.from_wire(wire)
    assert type(back) is dt.errors.InvalidArgumentError and back.op == "c"


def test_distrib_signature_and_wire_format_are_unchanged():
    e = dt.errors.NotFoundError("x missing", task="/job:ps/task:0", op="w")
    assert (e.message, e.task, e.op, e.node_def) == ("x missing", "/job:ps/task:0", "w", None)
    assert str(e) == "x missing [op 'w', on /job:ps/task:0]" and e.error_code == 5
    wire = errors.to_wire(e)
    assert wire == {"type": "NotFoundError", "message": "x missing", "task": "/job:ps/task:0",
                    "op": "w"}
    back = errors.from_wire(wire)
    assert type(back) is dt.errors.NotFoundError and str(back) == str(e)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
    assert errors.to_wire(KeyError("k"))["type"] == "UnknownError"


def test_wrong_arity_is_a_type_error_that_shows_both_forms():
    with pytest.raises(TypeError, match=r"\(node_def, op, message\)"):
        dt.errors.NotFoundError("a", "b")
    with pytest.raises(TypeError, match="needs a message"):
        dt.errors.NotFoundError()
