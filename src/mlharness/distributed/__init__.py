"""A run on several replicas: `mlharness serve` nodes over the network (``remote.py``) or Ray
actors (``ray_replicas.py``), each holding the dataset and a runtime backend, fed through one pool
(``pool.py``: least outstanding work, failover). The run's ``distribution`` section chooses
(``--endpoint`` / ``--replicas``); the replicas run the ordinary runtime backends."""

from __future__ import annotations

from mlharness.backends import check_signature
from mlharness.distributed.pool import PoolBackend
from mlharness.distributed.ray_replicas import RayBackend
from mlharness.distributed.remote import RemoteBackend
from mlharness.spec import RunSpec
from mlharness.sut.assemble import PhaseHook, model_of, task_options, tensor_task
from mlharness.tasks import TensorTask, create_task


def build_pool(spec: RunSpec, phase: PhaseHook | None = None
               ) -> tuple[TensorTask, PoolBackend]:
    """The task (here for LoadGen's sample counts and the inputs the model must take) and the
    pool of ``spec``'s replicas, connected and ready; ``phase(name)`` hears the steps."""
    say: PhaseHook = phase or (lambda name, allowance_s=0.0: None)
    say("loading the dataset")
    task = tensor_task(create_task(spec.benchmark, task_options(spec)))
    pool: PoolBackend
    if spec.distribution.kind == "remote":
        say("connecting to the nodes")
        pool = RemoteBackend()
    else:
        say("starting the Ray replicas")
        pool = RayBackend()
    model = model_of(spec, task)
    pool.open(spec, model)
    try:
        check_signature(task.model_inputs, pool.inputs, str(model), spec.batch_size)
    except BaseException:
        pool.close()
        raise
    return task, pool
