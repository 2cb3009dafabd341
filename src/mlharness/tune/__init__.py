"""Target finding: measure the system instead of guessing targets."""

from mlharness.tune.offline import offline_target_qps, probe_offline_qps

__all__ = ["offline_target_qps", "probe_offline_qps"]
