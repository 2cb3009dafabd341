"""Target finding: measure the system instead of guessing targets."""

from mlharness.tune.latency import latency_target_ms, probe_latency_ms
from mlharness.tune.offline import offline_target_qps, probe_offline_qps

__all__ = ["latency_target_ms", "offline_target_qps", "probe_latency_ms", "probe_offline_qps"]
