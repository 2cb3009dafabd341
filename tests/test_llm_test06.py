"""TEST06 verification equals compliance/TEST06/run_verification.py on good and tampered logs."""

from __future__ import annotations

import json

import llm_fixtures as fx
import pytest
import referee

from mlharness.errors import DatasetError
from mlharness.llm import test06

SCRIPT = "compliance/TEST06/run_verification.py"
EOS = 2  # the official script's default --eos_token_id
GOOD = {0: [17, 40, 41, EOS], 1: [9, 9, 12], 2: [33, EOS], 3: [EOS, EOS], 4: [5] * 40 + [EOS]}


def _log(tmp_path, name, outputs=GOOD, **kw):
    d = tmp_path / name
    d.mkdir()
    fx.token_log(d / "mlperf_log_accuracy.json", outputs, dtype="int32", **kw)
    return d


def _official(run_dir, scenario, *extra):
    out = run_dir / "out"
    proc = referee.run(SCRIPT, "-c", str(run_dir), "-o", str(out), "-s", scenario, *extra)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return (out / "TEST06" / "verify_accuracy.txt").read_text()


def _ours(run_dir, scenario, eos=EOS):
    return test06.verify_log(run_dir / "mlperf_log_accuracy.json", scenario, eos)


def _tampered(tmp_path, name, edit, first_token=True):
    d = _log(tmp_path, name, first_token=first_token)
    path = d / "mlperf_log_accuracy.json"
    entries = json.loads(path.read_text())
    edit(entries)
    path.write_text(json.dumps(entries))
    return d


CASES = {
    "good": lambda e: None,
    "two_eos": lambda e: e[1].update(data=fx.hexs([9, 9, 12, EOS, EOS]), token_count=5),
    "count": lambda e: e[2].update(token_count=7),
    "first": lambda e: e[0].update(token_data=fx.hexs([18])),
    "no_first": lambda e: e[4].pop("token_data"),
}


@referee.official(SCRIPT, python=True)
@pytest.mark.parametrize("scenario", ["Server", "Offline"])
@pytest.mark.parametrize("case", list(CASES))
def test_verdicts_equal_the_official_script(tmp_path, case, scenario):
    run_dir = _tampered(tmp_path, case, CASES[case])
    ours = _ours(run_dir, scenario)
    assert ours.verify_accuracy_txt() == _official(run_dir, scenario)
    assert ours.passed == (case == "good" or (scenario == "Offline" and case in ("first",
                                                                                  "no_first")))
    assert bool(ours.problems) == (not ours.passed)


def test_problems_name_the_sample(tmp_path):
    r = _ours(_tampered(tmp_path, "a", CASES["two_eos"]), "Server")
    assert r.eos is False and r.problems == [
        "qsl_idx 1: output ends in 2 EOS tokens (2); at most one is allowed"]
    r = _ours(_tampered(tmp_path, "b", CASES["count"]), "Interactive")
    assert r.problems == ["qsl_idx 2: reported n_tokens 7 but the output has 2 tokens"]
    r = _ours(_tampered(tmp_path, "c", CASES["first"]), "Server")
    assert r.problems == ["qsl_idx 0: the first token(s) reported, [18], are not the output's "
                          "first 1: [17]"]
    r = _ours(_tampered(tmp_path, "d", lambda e: e[3].pop("token_count")), "Offline")
    assert r.sample_length is False and "reported n_tokens None" in r.problems[0]
    d = _tampered(tmp_path, "e", lambda e: e[0].update(data="ABC"))
    r = _ours(d, "Offline")
    assert not r.passed and "not int32 hex" in r.problems[0]
    (tmp_path / "f.json").write_text("{}")
    with pytest.raises(DatasetError, match="not a JSON list"):
        test06.verify_log(tmp_path / "f.json", "Offline", EOS)


@referee.official(SCRIPT, python=True)
def test_official_eos_flag_quirk(tmp_path):
    """On the command line the EOS id is a string and the official EOS check always passes;
    ours takes an int and still catches a doubled EOS."""
    run_dir = _tampered(tmp_path, "q", CASES["two_eos"])
    assert "EOS check pass: True" in _official(run_dir, "Offline", "-e", str(EOS))
    assert _ours(run_dir, "Offline").eos is False
