"""Target finding: measure the system instead of guessing targets.

``probe`` (one short measurement run), ``latency`` (SingleStream/MultiStream), ``offline``,
``server`` (bracketing search), ``grid`` (engine settings), ``scenario`` (dispatch),
``sutconfig`` (named SUT files) and ``resolve`` (the one place a run's targets come from).
"""

from mlharness.tune.offline import offline_target_qps, probe_offline_qps
from mlharness.tune.probe import Point
from mlharness.tune.resolve import apply_sut, resolve_targets
from mlharness.tune.scenario import Tuned, tune_scenario
from mlharness.tune.server import ServerSearch, search_server_qps
from mlharness.tune.sutconfig import SutConfig, SutEntry, load_sut, save_sut, sut_path

__all__ = ["Point", "ServerSearch", "SutConfig", "SutEntry", "Tuned", "apply_sut",
           "load_sut", "offline_target_qps", "probe_offline_qps", "resolve_targets",
           "save_sut", "search_server_qps", "sut_path", "tune_scenario"]
