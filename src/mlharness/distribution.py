"""Where a run's samples execute, a section of the RunSpec: in the run's own process (``local``),
on ``mlharness serve`` nodes over the network (``remote``), or on Ray actors (``ray``). The
runtime that executes them is the RunSpec's ``backend`` in every case (for ``remote``, each node
names its own). TOML: ``[run.distribution]``; flags: ``--distribute KIND`` (else the options
tell it: ``--endpoint`` means nodes, ``--replicas`` or ``--ray-address`` Ray), ``--endpoint``,
``--token-file``, ``--failover``, ``--request-timeout``, ``--ray-address``, ``--replicas``,
``--max-restarts``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from mlharness.flags import WHERE, Flag, declared
from mlharness.options import RuleError
from mlharness.redact import scrub

#: a batch not answered in time counts as a stalled replica: with the runner's 10 s failure
#: grace, a stalled node ends the run within 30 s
DEFAULT_REQUEST_TIMEOUT_S = 15.0
REMOTE_KEYS = ("endpoints", "token_file")
RAY_KEYS = ("ray_address", "replicas", "max_restarts", "replica_cpus", "replica_gpus")
POOL_KEYS = ("failover", "request_timeout")
#: names the keys had as --backend-option of the old remote/ray backends
LEGACY_NAMES = {"request_timeout_s": "request_timeout"}


class Distribution(BaseModel):
    """``kind`` and its options; a key that does not apply to the kind is refused."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    kind: Annotated[Literal["local", "remote", "ray"], Flag(
        "{default}, remote (serve nodes) or ray (actors); --endpoint implies remote, --replicas "
        "or --ray-address imply ray (with --backend openai, --endpoint names the LLM servers)",
        "KIND", WHERE, name="--distribute", closed=True)] = "local"
    endpoints: Annotated[list[str], Flag(
        "remote: an `mlharness serve` node, http://HOST:PORT (repeat per node)", "URL", WHERE,
        name="--endpoint")] = Field(default_factory=list)
    failover: Annotated[StrictBool, Flag(
        "remote/ray: re-issue a lost node's samples to the others (recorded in run.json) "
        "instead of failing the run", group=WHERE)] = False
    request_timeout: Annotated[float, Field(gt=0, strict=False), Flag(
        "remote/ray: a batch not answered in S seconds means the node stalled "
        "(default {default})", "S", WHERE)] = DEFAULT_REQUEST_TIMEOUT_S
    #: the token itself is never recorded
    token_file: Annotated[Path | None, Flag(
        "remote: file holding the nodes' token (default: $MLHARNESS_NODE_TOKEN); the token is "
        "never written to the run", "PATH", WHERE)] = None
    ray_address: Annotated[str | None, Flag(
        "ray: 'auto', HOST:PORT or ray://HOST:PORT (default: a local Ray)", "ADDR", WHERE)] = None
    replicas: Annotated[int, Field(ge=1), Flag(
        "ray: actors, each running --backend (default {default})", "N", WHERE)] = 1
    max_restarts: Annotated[int, Field(ge=0), Flag(
        "ray: restart a killed actor up to N times (default {default}: fail fast)", "N",
        WHERE)] = 0
    replica_cpus: Annotated[float, Field(gt=0, strict=False), Flag(
        "ray: CPUs each actor takes (default {default})", "N", WHERE)] = 1.0
    replica_gpus: Annotated[float, Field(ge=0, strict=False), Flag(
        "ray: GPUs each actor takes (default {default}; 1: a device each)", "N", WHERE)] = 0.0

    @model_validator(mode="before")
    @classmethod
    def _kind_from_keys(cls, data: Any) -> Any:
        """Without ``kind``, the keys tell it: endpoints mean nodes, Ray's keys mean Ray."""
        if not isinstance(data, dict):
            return data
        data = {LEGACY_NAMES.get(k, k): v for k, v in data.items()}
        if "kind" not in data:
            if any(k in data for k in REMOTE_KEYS):
                data["kind"] = "remote"
            elif any(k in data for k in RAY_KEYS):
                data["kind"] = "ray"
        return data

    @field_validator("endpoints", mode="before")
    @classmethod
    def _url_list(cls, value: Any) -> Any:
        value = [e for e in value.split(",") if e] if isinstance(value, str) else value
        if isinstance(value, list):
            for url in value:
                if isinstance(url, str):
                    check_endpoint(url)
        return value

    @field_validator("token_file", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        return Path(value).expanduser() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Distribution:
        given = self._given()
        foreign = {"local": (*REMOTE_KEYS, *RAY_KEYS, *POOL_KEYS), "remote": RAY_KEYS,
                   "ray": REMOTE_KEYS}[self.kind]
        wrong = [k for k in foreign if k in given]
        if wrong:
            needs = "remote" if wrong[0] in REMOTE_KEYS else (
                "ray" if wrong[0] in RAY_KEYS else "remote or ray")
            raise RuleError(f"{FLAGS[wrong[0]]} applies to a {needs} run, not a {self.kind} one",
                            f"give {FLAGS[wrong[0]]} only with --distribute {needs}"
                            if needs != "remote or ray" else
                            "use it with --endpoint (serve nodes) or --replicas (Ray actors)")
        if self.kind == "remote" and not self.endpoints:
            raise RuleError("a remote run needs at least one --endpoint",
                            "start nodes with `mlharness serve`, then pass --endpoint "
                            "http://HOST:PORT for each")
        for url in self.endpoints if self.kind == "remote" else ():
            check_endpoint(url, port_needed=True)
        if len(set(self.endpoints)) != len(self.endpoints):
            raise RuleError("the same --endpoint is given twice", "list each node once")
        return self

    def _given(self) -> set[str]:
        """The options not at their default (a record lists every key; only these count)."""
        return {k for k, f in type(self).model_fields.items()
                if k != "kind" and getattr(self, k) != f.get_default(call_default_factory=True)}

    @property
    def local(self) -> bool:
        return self.kind == "local"


def check_endpoint(url: str, port_needed: bool = False) -> str:
    """``url`` when it is ``http://HOST[:PORT][/path]`` (``HOST:PORT`` alone is taken as http)
    with a port in 1..65535 (``port_needed``: given); RuleError otherwise, before anything
    runs. The message masks credentials in the URL (``mlharness.redact``)."""
    shown = scrub(url.strip())
    hint = "e.g. --endpoint http://127.0.0.1:8000 (IPv6: http://[::1]:8000)"
    text = url.strip()
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL", ...
        raise RuleError(f"--endpoint {shown!r} is not a URL ({exc})", hint) from None
    if parts.scheme != "http":
        raise RuleError(f"--endpoint {shown!r} is not http://HOST:PORT ({parts.scheme or 'no'} "
                        "scheme; https is not supported: put a TLS proxy in front)", hint)
    if not parts.hostname:
        raise RuleError(f"--endpoint {shown!r} names no host", hint)
    if port == 0 or (port_needed and port is None):
        raise RuleError(f"--endpoint {shown!r} needs a port from 1 to 65535", hint)
    return text


#: each key's flag, for messages (from the declarations above)
FLAGS = {d.field: d.option for d in declared(Distribution)}
