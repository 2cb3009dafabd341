"""The v6.1 submission checker's compliance check on one scenario directory, run in the referee's
Python: ``python llm_checker_compliance.py TOOLS_SUBMISSION SCENARIO_DIR BENCHMARK SCENARIO``.

Builds what the checker's loader would hand ``ComplianceCheck`` for that directory (the
``TEST0X`` verdict files read as lines, as ``load_single_log(..., "AccuracyResult")`` does) and
prints one JSON line: the check's verdict, the tests it required and the errors it logged (the
directory written ``<dir>``).
"""

import json
import logging
import os
import sys

tools, scenario_dir, benchmark, scenario = sys.argv[1:5]
sys.path.insert(0, tools)

from submission_checker.checks.compliance_check import ComplianceCheck  # noqa: E402
from submission_checker.configuration.configuration import Config  # noqa: E402
from submission_checker.loader import SubmissionLogs  # noqa: E402


class Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.errors = []

    def emit(self, record):
        if record.levelno >= logging.ERROR:
            self.errors.append(record.getMessage())


log = logging.getLogger("checker")
log.setLevel(logging.INFO)
handler = Collect()
log.addHandler(handler)


def lines(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.readlines()


data = {"division": "closed", "benchmark": benchmark, "scenario": scenario, "model_mapping": {},
        "compliance_path": scenario_dir, "is_endpoints_submission": False}
for test, name in (("TEST06", "verify_accuracy.txt"), ("TEST07", "verify_accuracy.txt"),
                   ("TEST09", "verify_output_len.txt")):
    data[f"{test}_acc_path"] = os.path.join(scenario_dir, test, name)
    data[f"{test}_acc_result"] = lines(data[f"{test}_acc_path"])
check = ComplianceCheck(log, scenario_dir, Config("v6.1", {}),
                        SubmissionLogs(None, None, None, None, {}, None, None, data))
passed = bool(check())
errors = [e.replace(scenario_dir, "<dir>") for e in handler.errors]
print(json.dumps({"passed": passed, "tests": check.test_list, "errors": errors}))
