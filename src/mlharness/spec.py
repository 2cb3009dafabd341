"""RunSpec: the validated description of one run, built once at the edge (CLI flags / TOML).

One name per setting, declared once on its field with its flag (``Flag``: help, metavar, group;
type and default are the field's): a TOML key is its flag without the dashes
(``--target-latency`` -> ``target_latency``, ``--set`` -> ``[run.set]``), except the switches
named by what they change (``--valid``/``--test`` -> ``valid = true/false``, ``--no-length-sort``
-> ``length_sort = false``) and the distribution section's ``--distribute`` (``kind``) and
``--endpoint`` (``endpoints``). Units are in the help of each flag (latencies and durations in
ms, the stall timeout in s).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator,
                      model_validator)

from mlharness.errors import ConfigError
from mlharness.files import read_toml
from mlharness.options import RuleError, config_error
from mlharness.distribution import (LEGACY_NAMES, POOL_KEYS, RAY_KEYS, REMOTE_KEYS,
                                    Distribution)
from mlharness.flags import HOW, LOADGEN, WHAT, Flag, user_conf_owners
from mlharness.loadgen.settings import (MAX_COUNT, MAX_DURATION_MS, EffectiveSettings, TestConfig,
                                        check_user_conf_key, effective_settings)
from mlharness.rules.loader import DEFAULT_ROUND
from mlharness.tasks import BENCHMARKS, benchmark_rules
from mlharness.names import (DEFAULT_MODE, DEFAULT_PRECISION, DEFAULT_SCENARIO, Mode, Precision,
                             Scenario)

AUTO = "auto"  # a target measured by short probe runs before the run (mlharness.tune)
#: the backends that were distribution, and their --backend-option keys (distribution.py)
LEGACY_POOL_BACKENDS = ("remote", "ray")
LEGACY_POOL_OPTIONS = (*REMOTE_KEYS, *RAY_KEYS, *POOL_KEYS, "replica_backend", *LEGACY_NAMES)
#: LoadGen schedules every query of a run up front (``qps x duration`` entries): beyond this a
#: target exhausts memory inside LoadGen before the first sample is issued
MAX_TARGET_QPS = 10_000_000.0
#: an engine's threads (workers, instances, a runtime's threads) are OS threads started before
#: the test, each with its own stack: beyond this, starting them stalls the run
MAX_THREADS = 1024
#: the engine (and its warm-up) stacks a whole batch into one array: beyond this no runtime
#: gains, and filling one stalls the run
MAX_BATCH_SIZE = 65536
#: the largest value of each bounded setting, and why (LoadGen's types: loadgen/test_settings.h;
#: the memory LoadGen builds from min_query_count is checked against the machine by
#: mlharness.tune.resolve_targets, before anything runs)
LIMITS: dict[str, tuple[int, str]] = {
    "min_query_count": (MAX_COUNT, "LoadGen keeps counts as uint64_t"),
    "max_query_count": (MAX_COUNT, "LoadGen keeps counts as uint64_t"),
    "performance_sample_count": (MAX_COUNT, "LoadGen keeps counts as uint64_t"),
    "min_duration": (MAX_DURATION_MS, "LoadGen turns ms into int64 nanoseconds"),
    "target_latency": (MAX_DURATION_MS, "LoadGen turns ms into int64 nanoseconds"),
    "server_latency": (MAX_DURATION_MS, "LoadGen turns ms into int64 nanoseconds"),
    "batch_size": (MAX_BATCH_SIZE, "a batch is stacked into one array in memory"),
    "workers": (MAX_THREADS, "each worker is a thread started before the test"),
    "instances": (MAX_THREADS, "each instance is a thread started before the test"),
    "threads": (MAX_THREADS, "a runtime starts each thread before the test"),
    "threads_per_instance": (MAX_THREADS, "a runtime starts each thread before the test"),
}
#: old names (mlharness-run/1 records, earlier TOML files) -> the one name each setting has now
RENAMED = {
    "short": "valid", "target_latency_ms": "target_latency",
    "server_latency_ms": "server_latency", "min_duration_ms": "min_duration",
    "stall_timeout_s": "stall_timeout", "enable_trace": "trace",
    "user_conf_extra": "set", "backend_options": "backend_option",
}

#: the backend whose --endpoint URLs are LLM servers (backends/openai.py)
OPENAI_BACKEND = "openai"

PositiveFloat = Annotated[float, Field(gt=0)]
Target = PositiveFloat | Literal["auto"]  # a number, or AUTO: measured first
PositiveInt = Annotated[int, Field(ge=1, strict=True)]
NonNegativeInt = Annotated[int, Field(ge=0, strict=True)]


class RunSpec(BaseModel):
    """One run. Field names are the TOML keys and the flags' dests; each setting's flag is
    declared on its field (mlharness.flags), the fields without one are set by mlharness."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              validate_assignment=True)

    # ---- what to run
    benchmark: Annotated[str, Flag(
        ", ".join(BENCHMARKS) + ", or module:factory (a task of your own)", "NAME", WHAT,
        "-b")]
    scenario: Annotated[Scenario, Flag(
        "SingleStream, MultiStream, Server or Offline (default {default}); Interactive for the "
        "LLMs and the VLM", "NAME", WHAT, "-s")] = DEFAULT_SCENARIO
    #: `run`'s own: tune and compliance run performance
    mode: Annotated[Mode, Field(strict=False), Flag(
        "performance or accuracy (default {default})", closed=True, shared=False,
        user_conf="mode")] = DEFAULT_MODE
    model: Annotated[Path | None, Flag(
        "model file (the demo ships its own)", "PATH", WHAT, "-m")] = None
    dataset: Annotated[Path | None, Flag("dataset folder or file", "PATH", WHAT, "-d")] = None
    vocab: Annotated[Path | None, Flag("vocab.txt (BERT)", "PATH", WHAT)] = None
    backend: Annotated[str, Flag(
        "the runtime: {default} (default), openvino, pytorch, noop, or module:Class (remote and "
        "ray: see --distribute); for the LLMs openai (servers at --endpoint) or hf "
        "(transformers, --model DIR)", "NAME", WHAT)] = "onnxruntime"
    cache_dir: Annotated[Path | None, Flag(
        "where pre-processed data is cached", "DIR", WHAT)] = None
    max_samples: Annotated[PositiveInt | None, Flag(
        "use only the first N dataset samples (not valid for submission)", "N", WHAT)] = None
    #: a named SUT configuration (``suts/NAME.toml`` or a path) whose targets and engine
    #: settings the run uses where no flag gives them (mlharness.tune.resolve_targets)
    sut: Annotated[str | None, Flag(
        "SUT configuration (suts/NAME.toml or a path) with the targets and engine settings "
        "`mlharness tune` measured; flags override it", "NAME|PATH", WHAT)] = None

    # ---- LoadGen settings
    valid: Annotated[StrictBool, Flag(
        "full-length run under the round's rules (600 s, minimum counts)", group=LOADGEN,
        default_flag="--test", default_help="short run: 2 s minimum, small query counts")] = False
    target_qps: Annotated[Target | None, Flag(
        "Server target QPS / Offline expected QPS, or 'auto' (measured by short probe runs "
        "first; the default of a --test run)", "QPS", LOADGEN, user_conf="target_qps")] = None
    target_latency: Annotated[Target | None, Flag(
        "SingleStream/MultiStream expected latency in ms (a hint: too high and LoadGen runs out "
        "of queries), or 'auto' (measured first)", "MS", LOADGEN,
        user_conf="target_latency")] = None
    server_latency: Annotated[PositiveFloat | None, Flag(
        "Server latency bound in ms (open division only)", "MS", LOADGEN,
        user_conf="target_latency")] = None
    min_duration: Annotated[NonNegativeInt | None, Flag(
        "minimum test duration (--test: 2000, --valid: 600000)", "MS", LOADGEN,
        user_conf="min_duration")] = None
    min_query_count: Annotated[PositiveInt | None, Flag(
        "", "N", LOADGEN, user_conf="min_query_count")] = None
    max_query_count: Annotated[PositiveInt | None, Flag(
        "", "N", LOADGEN, user_conf="max_query_count")] = None
    performance_sample_count: Annotated[PositiveInt | None, Flag(
        "", "N", LOADGEN, user_conf="performance_sample_count_override")] = None
    set: Annotated[dict[str, int | float], Flag(
        "another user.conf key LoadGen reads (e.g. max_async_queries=1); keys with their own "
        "flag are refused", "KEY=VALUE", LOADGEN)] = Field(default_factory=dict)
    #: the round whose seeds LoadGen uses (None: LoadGen's own); `run`, `tune` and `compliance`
    #: each say what else it means to them
    round: Annotated[str | None, Flag(
        "round whose rules a --valid run must meet and whose seeds LoadGen uses (default "
        f"{DEFAULT_ROUND}: the installed LoadGen's own seeds; v2.1 ... v4.1: docs/rounds.md)",
        "ROUND", shared=False)] = None

    # ---- how to run it
    batch_size: Annotated[PositiveInt | None, Flag(
        "largest batch (Offline default 32; not for SingleStream)", "N", HOW)] = None
    workers: Annotated[PositiveInt, Flag(
        "worker threads feeding the backend (default {default}; remote/ray: 2 per node)", "N",
        HOW)] = 1
    threads: Annotated[PositiveInt | None, Flag("runtime intra-op threads", "N", HOW)] = None
    #: several backend instances, each with its own worker thread and pinned cores
    instances: Annotated[PositiveInt, Flag(
        "backend instances, each with its own worker and pinned block of cores, kept inside a "
        "NUMA node where it fits, a thread per physical core first (default {default})", "N",
        HOW)] = 1
    threads_per_instance: Annotated[PositiveInt | None, Flag(
        "threads of each instance (default: the cores / instances)", "M", HOW)] = None
    precision: Annotated[Precision, Field(strict=False), Flag(
        "fp32, bf16 or int8 (default {default}), never changed silently", "P",
        HOW)] = DEFAULT_PRECISION
    device: Annotated[str, Flag("cpu or cuda (default {default})", "D", HOW)] = "cpu"
    length_sort: Annotated[StrictBool, Flag(
        "do not sort Offline samples by length before batching", group=HOW,
        name="--no-length-sort")] = True
    #: untimed batches per worker before LoadGen starts (performance mode; 0: none)
    warmup: Annotated[NonNegativeInt, Flag(
        "untimed batches per worker before LoadGen starts, so first-call costs (kernel JIT, "
        "memory pools) stay out of the measurement (performance runs; default {default}, 0: "
        "none)", "N", HOW)] = 1
    task_option: Annotated[dict[str, Any], Flag(  # checked by the task's model
        "benchmark setting, e.g. label_offset=0 or preprocessing=my.toml (unknown keys are "
        "refused with the valid ones)", "KEY=VALUE", HOW)] = Field(default_factory=dict)
    backend_option: Annotated[dict[str, Any], Flag(  # checked by the backend's model
        "backend setting, e.g. graph_optimization=basic", "KEY=VALUE",
        HOW)] = Field(default_factory=dict)
    output_dir: Annotated[Path, Flag(
        "where run directories go (default {default}/)", "DIR", HOW)] = Path("runs")
    stall_timeout: Annotated[PositiveFloat, Flag(
        "end the run if nothing completes for this many seconds (default {default})", "S",
        HOW)] = 60.0
    trace: Annotated[StrictBool, Flag("write LoadGen's mlperf_log_trace.json", group=HOW)] = False

    # ---- where the samples run: this process, serve nodes or Ray actors (distribution.py)
    distribution: Distribution = Field(default_factory=Distribution)

    # ---- set by mlharness itself, not flags
    audit_config: Path | None = None  # compliance audits
    label: str | None = None  # run directory name part instead of the mode (e.g. TEST01)
    purpose: str | None = None  # why the run exists (e.g. a tuning probe); None = a real run
    #: the user.conf keys that configuration supplies for this benchmark x scenario (filled in by
    #: resolve_targets; the effective settings record them with the source "sut-config")
    sut_conf: dict[str, int | float] = Field(default_factory=dict)
    #: the targets among target_qps / target_latency that probe runs measured (filled in by
    #: resolve_targets; the effective settings record their source as "measured")
    measured: list[Literal["target_qps", "target_latency"]] = Field(default_factory=list)

    # ---- validation -------------------------------------------------------------------------

    @field_validator("scenario", mode="before")
    @classmethod
    def _scenario(cls, value: Any) -> Any:
        found = Scenario.parse(value)
        if found is None:
            raise ValueError(f"unknown scenario {value!r}; choose one of: " + ", ".join(Scenario))
        return found

    @field_validator("model", "dataset", "vocab", "cache_dir", "audit_config", "output_dir",
                     mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        if isinstance(value, (str, Path)):
            return Path(value).expanduser()
        return value

    @field_validator("target_qps", "target_latency", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        return value

    @field_validator("set", mode="before")
    @classmethod
    def _set(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("expected a table of user.conf KEY = number")
        owners = user_conf_owners(cls)
        return {str(k): check_user_conf_key(str(k), v, owners) for k, v in value.items()}

    @field_validator("label")
    @classmethod
    def _label(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"label {value!r} is not a plain name (letters, digits, . _ -)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _legacy_distribution(cls, data: Any) -> Any:
        """``--backend remote|ray`` with their ``--backend-option`` keys (earlier TOML files and
        run records) as the distribution section they mean; the backend becomes the runtime
        each replica runs (``replica_backend``, default onnxruntime)."""
        if not isinstance(data, dict) or data.get("backend") not in LEGACY_POOL_BACKENDS:
            return data
        data = dict(data)
        kind = data.pop("backend")
        options = dict(data.get("backend_option") or {})
        section = dict(data.get("distribution") or {})
        section.setdefault("kind", kind)
        for key in [k for k in options if k in LEGACY_POOL_OPTIONS]:
            value = options.pop(key)
            if key == "replica_backend":
                data["backend"] = value
            else:
                section.setdefault(key, value)
        data["backend_option"], data["distribution"] = options, section
        return data

    @model_validator(mode="before")
    @classmethod
    def _server_endpoints(cls, data: Any) -> Any:
        """``--backend openai --endpoint URL``: the URLs are the LLM servers the backend talks
        to (its ``endpoints`` option, with ``failover``), not ``mlharness serve`` nodes."""
        if not isinstance(data, dict) or data.get("backend") != OPENAI_BACKEND:
            return data
        section = data.get("distribution")
        if not isinstance(section, dict) or section.get("kind", "remote") != "remote" \
                or not section.get("endpoints"):
            return data
        data, section = dict(data), dict(section)
        options = dict(data.get("backend_option") or {})
        options.setdefault("endpoints", section.pop("endpoints"))
        if "failover" in section:
            options.setdefault("failover", section.pop("failover"))
        section.pop("kind", None)
        if section:
            raise ConfigError("--backend openai takes --endpoint and --failover only: "
                              + ", ".join(sorted(section)) + " apply to serve nodes",
                              "drop them; the LLM servers are the --endpoint URLs")
        data["backend_option"], data["distribution"] = options, {}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> RunSpec:
        check_consistency(self)
        return self

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> RunSpec:
        """Build from TOML/CLI data; every problem becomes a ConfigError naming the key."""
        if "benchmark" not in data:
            raise ConfigError("no benchmark given",
                              hint="pass --benchmark or set benchmark in the TOML")
        return cls(**data)

    def __init__(self, **data: Any) -> None:
        renamed = sorted(k for k in data if k in RENAMED)
        if renamed:
            old = renamed[0]
            raise ConfigError(f"setting {old!r} was renamed to {RENAMED[old]!r}",
                              hint="one name per setting: the TOML key is the flag without dashes"
                                   + (" (valid = true for --valid)" if old == "short" else ""))
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error(exc, type(self)) from None

    def replace(self, **changes: Any) -> RunSpec:
        """A validated copy with ``changes``."""
        return type(self)(**{**self.model_dump(exclude_defaults=False), **changes})

    # ---- views ------------------------------------------------------------------------------

    @property
    def short(self) -> bool:
        """A --test run (the default): shorter than the round's rules allow."""
        return not self.valid

    def test_config(self, loadgen_model: str, sut: dict[str, Any] | None = None) -> TestConfig:
        """The LoadGen side of this spec; ``sut`` is a named SUT configuration's user.conf keys
        (default: those :func:`mlharness.tune.resolve_targets` put in ``sut_conf``)."""
        qps, latency = self.target_qps, self.target_latency
        if qps == AUTO or latency == AUTO:
            raise ConfigError("a target is still 'auto' when the run starts",
                              hint="resolve it first: mlharness.tune.resolve_targets(spec)")
        assert not isinstance(qps, str) and not isinstance(latency, str)
        return TestConfig(
            model=loadgen_model, scenario=self.scenario.loadgen, mode=self.mode, short=self.short,
            target_qps=qps, target_latency_ms=latency,
            server_latency_ms=self.server_latency, min_duration_ms=self.min_duration,
            min_query_count=self.min_query_count, max_query_count=self.max_query_count,
            performance_sample_count=self.performance_sample_count,
            extra=dict(self.set), enable_trace=self.trace,
            sut=dict(self.sut_conf if sut is None else sut),
            measured=tuple("target_qps" if name == "target_qps" else "target_latency"
                           for name in self.measured),
            rules=_rules_user_conf(self.benchmark, str(self.scenario), self.round),
        )

    def settings(self, loadgen_model: str, sut: dict[str, Any] | None = None,
                 conf: dict[str, str] | None = None,
                 samples: int | None = None) -> EffectiveSettings:
        """The effective LoadGen settings of this run: user.conf, the preflight, progress and
        run.json all read this one result (precedence: ``loadgen.settings``). ``samples``: the
        task's performance sample count, which a short LLM run's sample set never exceeds."""
        config = self.test_config(loadgen_model, sut)
        config.dataset_samples = samples
        return effective_settings(config, conf)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _rules_user_conf(benchmark: str, scenario: str, round: str | None) -> dict[str, Any]:
    """The round's user.conf keys of ``benchmark`` in ``scenario`` (its rules' ``user_conf``
    table: what mlperf.conf lacks for it)."""
    bench = benchmark_rules(benchmark, round)
    return dict(bench.user_conf.get(scenario, {})) if bench is not None else {}


def check_consistency(spec: RunSpec) -> None:
    """Rules between fields (raise ValueError; the model turns it into a ConfigError)."""
    s = spec.scenario
    if spec.target_latency is not None and not s.latency_metric:
        raise RuleError(f"--target-latency applies to SingleStream/MultiStream, not {s}",
                    "use --target-qps for Server and Offline")
    if spec.server_latency is not None and s.loadgen != "Server":
        raise RuleError("--server-latency applies to the Server scenario only",
                    "drop it or use --scenario Server")
    if s == Scenario.INTERACTIVE:
        bench = benchmark_rules(spec.benchmark, spec.round)
        if bench is None or bench.interactive_loadgen_model is None:
            raise RuleError(f"{spec.benchmark} has no Interactive scenario",
                            "Interactive is an LLM scenario (e.g. -b llama3.1-8b); use Server")
    if spec.target_qps is not None and not s.qps_target:
        raise RuleError(f"--target-qps applies to Server/Offline, not {s}",
                    "use --target-latency for SingleStream and MultiStream")
    if isinstance(spec.target_qps, float) and spec.target_qps > MAX_TARGET_QPS:
        raise RuleError(f"--target-qps {spec.target_qps:g} is above {MAX_TARGET_QPS:g}",
                    "LoadGen schedules qps x duration queries up front and runs out of memory; "
                    "measure first (--target-qps auto, or mlharness tune)")
    for name, (limit, why) in LIMITS.items():
        value = getattr(spec, name)
        if isinstance(value, (int, float)) and value > limit:
            raise RuleError(f"--{name.replace('_', '-')} {value} is above {limit}: {why}",
                            f"give at most {limit}")
    if spec.mode == "accuracy" and (spec.min_duration or spec.min_query_count):
        raise RuleError("accuracy mode runs every sample once; duration/query counts do not apply",
                    "drop --min-duration/--min-query-count or use --mode performance")
    if spec.batch_size is not None and s == "SingleStream":
        raise RuleError("--batch-size does not apply to SingleStream (one sample per query)",
                    "drop --batch-size, or use MultiStream/Server/Offline")
    if spec.min_query_count and spec.max_query_count and spec.max_query_count < spec.min_query_count:
        raise RuleError(f"--max-query-count {spec.max_query_count} is below --min-query-count "
                    f"{spec.min_query_count}", "raise --max-query-count or drop it")


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run TOML file (keys as in RunSpec; ``[run]`` table or top level)."""
    data = read_toml(path, "config file", hint_missing="check the --config path")
    data = data.get("run", data)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: 'run' must be a table of settings",
                          hint="write [run] on its own line, then one 'key = value' per line")
    return {k.replace("-", "_"): v for k, v in data.items()}
