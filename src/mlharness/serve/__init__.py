"""One SUT node on the network: ``mlharness serve`` (server side).

The LoadGen side (``distributed/remote.py``) and the node speak HTTP/1.1 with binary bodies
(``protocol/wire.py``); the node holds the dataset and the backend, and answers batches of sample indices
with responses already in the task's encoding.
"""

#: default largest batch a node takes (``mlharness serve --max-batch``); larger requests get 413
DEFAULT_MAX_BATCH = 4096
