"""Keras' ``Embedding`` and ``GlobalAveragePooling1D`` (issue 41 item 5): rows
of the table, the mask of ``mask_zero`` honoured by the pooling (numpy
references), a sparse gradient, configs, and a model trained by ``fit``."""
from __future__ import annotations

import numpy as np

import distrib as dt

keras = dt.keras


def test_embedding_rows_mask_and_masked_mean():
    ids = np.array([[3, 1, 0, 0], [2, 2, 2, 5]], np.int32)
    with dt.Graph().as_default():
        emb = keras.layers.Embedding(6, 3, mask_zero=True,
                                     embeddings_initializer=keras.initializers.Constant(0.0))
        out = emb(ids)
        assert out.shape.as_list() == [2, 4, 3]
        pooled = keras.layers.GlobalAveragePooling1D()(out)
        table = np.arange(18, dtype=np.float32).reshape(6, 3)
        with dt.SyncSession() as sess:
            sess.run(emb.embeddings.initializer)
            sess.run(emb.embeddings.assign(table))
            got, got_mask, got_pooled = sess.run([out, out._keras_mask, pooled])
    np.testing.assert_array_equal(got, table[ids])
    np.testing.assert_array_equal(got_mask, ids != 0)
    want = np.stack([table[[3, 1]].mean(0), table[[2, 2, 2, 5]].mean(0)])
    np.testing.assert_allclose(got_pooled, want, rtol=1e-6)


def test_masked_mean_of_sequences_of_unknown_length():
    """Padded batches whose length is known only when fed (Input(shape=(None,))):
    the masked mean, either data format (a reshape of the mask to [-1, None, 1] failed)."""
    table = np.arange(18, dtype=np.float32).reshape(6, 3)
    ids = np.array([[3, 1, 0], [2, 5, 4]], np.int32)
    with dt.Graph().as_default():
        x = dt.placeholder(dt.int32, [None, None])
        emb = keras.layers.Embedding(6, 3, mask_zero=True,
                                     embeddings_initializer=keras.initializers.Constant(table))
        rows = emb(x)
        last = keras.layers.GlobalAveragePooling1D()(rows)
        first = keras.layers.GlobalAveragePooling1D(data_format="channels_first")(
            dt.transpose(rows, [0, 2, 1]), mask=emb.compute_mask(x))
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            got = sess.run([last, first], {x: ids})
    want = np.stack([table[[3, 1]].mean(0), table[[2, 5, 4]].mean(0)])
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_embedding_gradient_is_sparse_and_config_round_trips():
    with dt.Graph().as_default():
        emb = keras.layers.Embedding(100, 8, name="emb")
        with dt.GradientTape() as tape:
            loss = dt.reduce_sum(emb(np.array([[1, 7]], np.int64)))
        (g,) = tape.gradient(loss, emb.trainable_weights)
        assert isinstance(g, dt.IndexedSlices)
        config = emb.get_config()
        again = keras.layers.Embedding.from_config(config)
    assert config["input_dim"] == 100 and config["output_dim"] == 8
    assert config["embeddings_initializer"]["class_name"] == "RandomUniform"
    assert again.output_dim == 8 and not again.mask_zero


async def test_a_bag_of_words_model_learns_with_sparse_updates():
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, size=(512, 6)).astype(np.int32)
    x[rng.random((512, 6)) < 0.3] = 0                  # padding
    y = (np.isin(x, np.arange(1, 10)).any(axis=1)).astype(np.float32)   # a "good" word present
    with dt.Graph().as_default():
        model = keras.Sequential([keras.layers.Embedding(50, 8, mask_zero=True),
                                  keras.layers.GlobalAveragePooling1D(),
                                  keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                      metrics=["accuracy"])
        history = await model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    acc = history.history["accuracy"]
    assert acc[-1] > 0.85 and acc[-1] > acc[0], acc


# -- the lookup layers: Keras' documented examples, in numpy and in a graph --------------
VOCAB = ["a", "b", "c", "d"]


def both(layer, data):
    """The layer on numpy values (a dataset's map) and on a graph tensor: equal."""
    eager = np.asarray(layer(np.array(data, dtype=object if isinstance(np.ravel(data)[0], str)
                                      else None)))
    with dt.Graph().as_default():
        t = dt.constant(np.array(data))
        (graph,) = dt.SyncSession().run([layer(t)])
    graph = np.asarray(graph)
    if graph.dtype.kind in "SO":
        graph = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v)(graph)
    np.testing.assert_array_equal(eager.astype(graph.dtype) if graph.dtype.kind != "O"
                                  else eager, graph)
    return eager


def test_string_lookup_matches_keras_documentation():
    data = [["a", "c", "d"], ["d", "z", "b"]]
    np.testing.assert_array_equal(both(keras.layers.StringLookup(vocabulary=VOCAB), data),
                                  [[1, 3, 4], [4, 0, 2]])
    two = keras.layers.StringLookup(vocabulary=VOCAB, num_oov_indices=2)
    np.testing.assert_array_equal(both(two, [["a", "c", "d"], ["m", "z", "b"]]),
                                  [[2, 4, 5], [0, 1, 3]])   # m, z: FarmHash buckets 0, 1
    masked = keras.layers.StringLookup(vocabulary=VOCAB, mask_token="")
    np.testing.assert_array_equal(both(masked, [["a", "c", "d"], ["d", "", "b"]]),
                                  [[2, 4, 5], [5, 0, 3]])
    one_hot = keras.layers.StringLookup(vocabulary=VOCAB, output_mode="one_hot")
    np.testing.assert_array_equal(both(one_hot, ["a", "b", "c", "d", "z"]),
                                  np.eye(5)[[1, 2, 3, 4, 0]])
    multi = [["a", "c", "d", "d"], ["d", "z", "b", "z"]]
    np.testing.assert_array_equal(
        both(keras.layers.StringLookup(vocabulary=VOCAB, output_mode="multi_hot"), multi),
        [[0, 1, 0, 1, 1], [1, 0, 1, 0, 1]])
    np.testing.assert_array_equal(
        both(keras.layers.StringLookup(vocabulary=VOCAB, output_mode="count"), multi),
        [[0, 1, 0, 1, 2], [2, 0, 1, 0, 1]])
    inverse = keras.layers.StringLookup(vocabulary=VOCAB, invert=True)
    np.testing.assert_array_equal(both(inverse, [[1, 3, 4], [4, 0, 2]]),
                                  [["a", "c", "d"], ["d", "[UNK]", "b"]])


def test_string_lookup_adapt_orders_by_frequency_as_keras():
    layer = keras.layers.StringLookup()
    layer.adapt(np.array([["a", "c", "d"], ["d", "z", "b"]]))
    assert layer.get_vocabulary() == ["[UNK]", "d", "z", "c", "b", "a"]
    assert layer.vocabulary_size() == 6


def test_integer_lookup_hashing_and_category_encoding_match_keras_documentation():
    vocab = [12, 36, 1138, 42]
    np.testing.assert_array_equal(
        both(keras.layers.IntegerLookup(vocabulary=vocab), [[12, 1138, 42], [42, 1000, 36]]),
        [[1, 3, 4], [4, 0, 2]])
    np.testing.assert_array_equal(
        both(keras.layers.IntegerLookup(vocabulary=vocab, num_oov_indices=2),
             [[12, 1138, 42], [37, 1000, 36]]), [[2, 4, 5], [1, 0, 3]])
    np.testing.assert_array_equal(
        both(keras.layers.Hashing(num_bins=3), [["A"], ["B"], ["C"], ["D"], ["E"]]),
        [[1], [0], [1], [1], [2]])
    np.testing.assert_array_equal(
        both(keras.layers.Hashing(num_bins=3, mask_value=""), [["A"], ["B"], [""], ["C"], ["D"]]),
        [[1], [1], [0], [2], [2]])
    np.testing.assert_array_equal(
        both(keras.layers.CategoryEncoding(num_tokens=4, output_mode="one_hot"), [3, 2, 0, 1]),
        np.eye(4)[[3, 2, 0, 1]])
    np.testing.assert_array_equal(
        both(keras.layers.CategoryEncoding(num_tokens=4),
             [[0, 1], [0, 0], [1, 2], [3, 1]]),
        [[1, 1, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0], [0, 1, 0, 1]])


def test_lookup_layers_run_in_a_datasets_map():
    lookup = keras.layers.StringLookup(vocabulary=VOCAB)
    ds = dt.data.Dataset.from_tensor_slices(np.array(["a", "z", "d", "c"])).batch(2).map(lookup)
    got = [np.asarray(b).tolist() for b in ds.as_numpy_iterator()]
    assert got == [[1, 0], [4, 3]]


def test_fingerprint64_matches_published_values_of_every_length_branch():
    """Hashing's and the OOV buckets' FarmHash Fingerprint64 (TF's to_hash_bucket_fast):
    TF's fingerprint_test (short), Guava's FarmHashFingerprint64Test (4, 32 and 256
    bytes: the 17-32 and the over-64 branches) and Airship's (29 and 50 bytes: 17-32
    and 33-64), so a string of any length lands in TF's bucket."""
    from kernels.cpu.hashing import fingerprint64, hash_bucket
    published = {b"Hello": 15404698994557526151, b"World": 18308117990299812472,
                 b"test": 8581389452482819506, b"test" * 8: -4196240717365766262 % 2 ** 64,
                 b"test" * 64: 3500507768004279527,
                 b"dXB@tDQ-v5<H]rq2Pcc*s>nC-[Mdy": 8365906589669344754,
                 b"F7479877-4690-4A44-AFC9-8FE987EA512F:some_other_id": 6862335115798125349}
    for s, want in published.items():
        assert fingerprint64(s) == want, s
    np.testing.assert_array_equal(hash_bucket(["a", "b", "c"], 10), [9, 2, 2])  # TF's op test
