"""A Ray run: N Ray actors, each holding the task (dataset) and a runtime backend.

The engine hands batches of sample indices to the least busy actor (``pool.py``); LoadGen's
sample loads go to every actor. An actor that dies is reported and fails the run, or with
``max_restarts`` Ray restarts it (its model is loaded again and the samples it misses are loaded
on first use) and retries the batch; each restart is recorded in run.json. Options (the run's
``distribution`` section): ``ray_address`` (None: a local Ray of the run's own, see
:func:`start_local_ray`), ``replicas``, ``max_restarts``, ``replica_cpus`` (default 1),
``replica_gpus`` (default 0; 1 gives each actor its own device), ``failover``,
``request_timeout``. Each actor runs the run's ``--backend`` with its ``--backend-option``s.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlharness.backends import prepare_process, process_env
from mlharness.distributed.pool import PoolBackend, ReplicaDown, ReplicaPool
from mlharness.distribution import Distribution
from mlharness.errors import ConfigError
from mlharness.serve.node import Node
from mlharness.spec import RunSpec

READY_TIMEOUT_S = 300.0  # actors load their model; a cluster without room never gets there
LOAD_TIMEOUT_S = 600.0


class MlharnessReplica:
    """What runs inside each Ray actor (wrapped by ``ray.remote`` in :func:`_actor_class`)."""

    def __init__(self, spec_data: dict[str, Any], name: str) -> None:
        spec = RunSpec.model_validate(spec_data)
        prepare_process(spec.backend)  # late (Ray's threads run), but notes the runtime env
        self.node = Node(spec, name)
        self.node.prepare()

    def info(self) -> dict[str, Any]:
        return self.node.describe()

    def load(self, indices: list[int]) -> int:
        self.node.load(indices)
        return os.getpid()

    def unload(self, indices: list[int]) -> int:
        self.node.unload(indices)
        return os.getpid()

    def run(self, indices: list[int]) -> tuple[int, list[bytes]]:
        return os.getpid(), self.node.predict(indices)


def _actor_class(ray: Any) -> Any:
    return ray.remote(MlharnessReplica)


#: a run's own Ray lives in a folder of this prefix under /tmp (short: Ray's socket paths)
RAY_FOLDER_PREFIX = "mlh-ray-"


def ray_folder_root() -> str:
    """Where a run's own Ray folders are made (/tmp where there is one)."""
    return "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def own_ray_folder() -> str:
    """A folder for a Ray of this run's own, with its auth token, set in the environment.

    Called before Ray is imported (Ray reads its auth settings then): ``RAY_AUTH_TOKEN_PATH``
    points at a token made here, so neither ``~/.ray/auth_token`` nor ``$RAY_AUTH_TOKEN`` is
    read or written. The folder is short (under ``/tmp``): Ray's socket paths must fit 107
    bytes. The caller removes it."""
    # the process id in the name: the parent finds it even when Ray had made nothing in it yet
    folder = tempfile.mkdtemp(prefix=f"{RAY_FOLDER_PREFIX}{os.getpid()}-",
                              dir=ray_folder_root())
    token = Path(folder) / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
                      RAY_USAGE_STATS_ENABLED="0")
    return folder


def remove_own_ray_folder_of(pid: int) -> None:
    """Remove what a run's worker ``pid`` left of its own Ray's folder when it was killed
    (a stall, a crash) before it could: the folder's name holds the worker's process id
    (:func:`own_ray_folder`), whether or not Ray had made its session there yet."""
    for folder in Path(ray_folder_root()).glob(f"{RAY_FOLDER_PREFIX}{pid}-*"):
        shutil.rmtree(folder, ignore_errors=True)


def start_local_ray(ray: Any, folder: str) -> None:
    """Start a Ray of this run's own in ``folder`` (see :func:`own_ray_folder`):
    ``address="local"`` never joins the cluster ``/tmp/ray/ray_current_cluster`` or
    ``$RAY_ADDRESS`` point at, and the session lives in ``folder``, not ``/tmp/ray``."""
    try:  # Ray imported before the environment was set: let it read the auth settings again
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")
    except Exception:  # noqa: BLE001 - a Ray without it reads them at import only
        pass
    ray.init(address="local", _temp_dir=folder, include_dashboard=False,
             logging_level=logging.WARNING, log_to_driver=False)


class RayReplica:
    """One actor as a pool replica; notices restarts by the actor's process id."""

    def __init__(self, ray: Any, actor: Any, name: str, timeout_s: float,
                 pool: ReplicaPool | None = None) -> None:
        self.ray = ray
        self.actor = actor
        self.name = name
        self.timeout_s = timeout_s
        self.pool = pool
        self.pid: int | None = None
        self.info: dict[str, Any] = {}

    def _get(self, ref: Any, timeout: float) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return self.ray.get(ref, timeout=timeout)
        except GetTimeoutError as exc:
            self.ray.cancel(ref, force=False)
            raise ReplicaDown(f"no answer within {timeout:g} s (stalled)") from exc
        except RayActorError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "actor died"
            raise ReplicaDown(f"{type(exc).__name__}: {first[:300]}") from exc

    def _seen(self, pid: int) -> None:
        if self.pid is not None and pid != self.pid and self.pool is not None:
            self.pool.event(self.name, "restarted", f"actor process {self.pid} -> {pid}")
        self.pid = pid

    def ready(self, timeout: float) -> dict[str, Any]:
        self.info = self._get(self.actor.info.remote(), timeout)
        self.pid = self.info.get("pid")
        return self.info

    def run(self, indices: list[int]) -> list[bytes]:
        pid, payloads = self._get(self.actor.run.remote(indices), self.timeout_s)
        self._seen(pid)
        return payloads

    def load(self, indices: list[int]) -> None:
        self._seen(self._get(self.actor.load.remote(indices), LOAD_TIMEOUT_S))

    def unload(self, indices: list[int]) -> None:
        self._seen(self._get(self.actor.unload.remote(indices), LOAD_TIMEOUT_S))

    def close(self) -> None:
        self.ray.kill(self.actor, no_restart=True)


class RayBackend(PoolBackend):
    """``--replicas N [--ray-address ADDR] [--max-restarts K]``: actors, each running the run's
    ``--backend`` on a node of its own."""

    #: its sut_name stays None: LoadGen and the engine stay in this process (not the network
    #: division)
    name = "ray"

    def __init__(self) -> None:
        super().__init__()
        self.replicas: list[RayReplica] = []
        self.settings: dict[str, Any] = {}
        self._ray: Any = None
        self._local_dir: str | None = None  # the run's own Ray's folder (no --ray-address)

    def open(self, spec: RunSpec, model: Path | None = None) -> None:
        """Start ``spec.distribution.replicas`` actors, each a local run of ``spec`` (its backend,
        ``model``, dataset) on a Ray node, and wait until they are ready."""
        opts = spec.distribution
        address = opts.ray_address
        replica = spec.replace(distribution=Distribution(),
                               **({"model": Path(model)} if model is not None else {}))
        spec_data = replica.to_dict()
        if not address and "ray" not in sys.modules:
            self._local_dir = own_ray_folder()  # before Ray is imported: it reads auth settings
        try:
            import ray
        except ImportError as exc:
            self.close()
            raise ConfigError("a Ray run needs Ray", hint="pip install 'mlharness[ray]'") from exc
        self._ray = ray
        # Ray's driver prints worker deaths to stdout; in a run's child stdout must stay clean
        # (the parent prints --json there), so this process's stdout goes to stderr
        sys.stdout.flush()
        os.dup2(2, 1)
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    self._local_dir = self._local_dir or own_ray_folder()
                    start_local_ray(ray, self._local_dir)
            except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError and others
                self.close()
                raise ConfigError(f"cannot connect to Ray at {address or 'a new local cluster'}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                  hint="start it with `ray start --head` or drop --ray-address "
                                       "for a local one") from exc
        try:
            self._start_actors(ray, opts, spec_data)
        except BaseException:
            self.close()  # a local Ray of the run's own goes with the run
            raise
        self.settings = {**opts.model_dump(mode="json", exclude={"endpoints", "token_file"}),
                         "replica_backend": spec.backend, "ray": ray.__version__}

    def _start_actors(self, ray: Any, opts: Distribution, spec_data: dict[str, Any]) -> None:
        replicas, restarts = opts.replicas, opts.max_restarts
        cpus, gpus = opts.replica_cpus, opts.replica_gpus
        resources = ray.cluster_resources()
        for kind, each in (("CPU", cpus), ("GPU", gpus)):
            have = float(resources.get(kind, 0))
            if have < replicas * each:
                raise ConfigError(f"{replicas} replicas x {each:g} {kind} need "
                                  f"{replicas * each:g} {kind}s; the Ray cluster has {have:g}",
                                  hint=f"use fewer --replicas, a smaller --replica-{kind.lower()}s, "
                                       "or add Ray nodes")
        env = process_env(str(spec_data["backend"]))  # OpenVINO: MALLOC_ARENA_MAX=1
        actor_cls = _actor_class(ray).options(num_cpus=cpus, num_gpus=gpus,
                                              max_restarts=restarts, max_task_retries=restarts,
                                              **({"runtime_env": {"env_vars": env}} if env else {}))
        self.pool = None
        self.replicas = [RayReplica(ray, actor_cls.remote(spec_data, f"replica-{k}"),
                                    f"replica-{k}", opts.request_timeout)
                         for k in range(replicas)]
        self.pool = ReplicaPool(self.replicas, opts.failover, "replica")
        for r in self.replicas:
            r.pool = self.pool
            try:
                r.ready(READY_TIMEOUT_S)
            except ReplicaDown as exc:
                raise ConfigError(f"Ray {r.name} did not start: {exc}",
                                  hint=f"each replica needs {cpus:g} CPU(s); check `ray status` "
                                       "and the model/dataset paths on every Ray node") from exc
        self._start(self.pool, self.replicas[0].info)

    def close(self) -> None:
        super().close()
        if self._ray is not None and self._ray.is_initialized():
            # disconnect before the interpreter exits: exiting with Ray's threads still
            # attached to a cluster that just lost a worker can crash the process
            self._ray.shutdown()
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            if os.environ.get("RAY_AUTH_TOKEN_PATH", "").startswith(self._local_dir):
                for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
                    os.environ.pop(name, None)
            self._local_dir = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.settings,
                "actors": [{"replica": r.name, **r.info} for r in self.replicas]}


