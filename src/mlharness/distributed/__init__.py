"""A run on several replicas: `mlharness serve` nodes over the network (``remote.py``) or Ray
actors (``ray_replicas.py``), each holding the dataset and a runtime backend, fed through one pool
(``pool.py``: least outstanding work, failover). The run selects them as ``--backend remote`` /
``--backend ray``; the replicas themselves run the ordinary runtime backends."""
