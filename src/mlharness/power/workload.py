"""The workload the official power client runs (twice: ranging, then testing).

``python -m mlharness.power.workload PLAN.json`` runs one mlharness performance run whose
LoadGen logs go under the plan's ``loadgen_dir`` (the client's ``-L``), in a new directory
named after the phase (``ranging`` on the first call, ``testing`` on the second). It prints a
heartbeat line every few seconds (mlharness watches the client's output for stalls) and exits
0 when the run completed (VALID or INVALID: both are measured runs), 3 when it failed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from mlharness.errors import HarnessError
from mlharness.runner import execute
from mlharness.spec import RunSpec

HEARTBEAT_S = 5.0


def phase_label(loadgen_dir: Path, benchmark: str) -> str:
    """``ranging`` for the first workload of a session, ``testing`` after it."""
    done = list((loadgen_dir / benchmark).glob("*-ranging-*")) if loadgen_dir.is_dir() else []
    return "testing" if done else "ranging"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan: dict[str, Any] = json.loads(Path(args[0]).read_text())
    loadgen_dir = Path(plan["loadgen_dir"])
    spec_data = dict(plan["spec"])
    label = phase_label(loadgen_dir, spec_data["benchmark"])
    spec_data.update(output_dir=str(loadgen_dir), label=label)
    settle = float(plan.get("settle_s") or 0)
    if settle > 0:
        print(f"mlharness workload: settling {settle:.0f} s before the {label} run", flush=True)
        time.sleep(settle)
    last = [0.0]

    def beat(event: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= HEARTBEAT_S:
            last[0] = now
            print(f"mlharness workload ({label}): {event.phase} {event.done} "
                  f"{event.elapsed_s:.0f}s", flush=True)

    print(f"mlharness workload: {label} run starting", flush=True)
    try:
        record = execute(RunSpec.from_mapping(spec_data), beat)
    except HarnessError as exc:
        print(f"mlharness workload: error: {exc.message} ({exc.hint})", flush=True)
        return 2
    # one half of a power measurement, not a result by itself (record.py probe_reason)
    record.record.purpose = f"power-{label}"
    record.record.save(record.run_dir)
    verdict = (record.data.get("result") or {}).get("valid")
    print(f"mlharness workload: {label} run {record.status} (valid={verdict}) in "
          f"{record.run_dir}", flush=True)
    return 0 if record.status == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
