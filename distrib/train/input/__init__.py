"""TF1's queue-based input (``dt.train.string_input_producer``, ``batch``,
``shuffle_batch``, ``QueueRunner``, ``start_queue_runners``): a wing of
``dt.train`` after ``sessions`` (its runners stop with a ``Coordinator``)."""
