# Two commands on a fresh machine: `make demo` and `make test`. Each creates .venv if needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the demo needs only the package; the tests also need every extra (torch, openvino+nncf, ray, ...)
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# the official scripts' own Python (tests/referee.py): what they import, apart from ours
REFEREE := .venv-referee
REFEREE_STAMP := $(REFEREE)/.installed
# the 3D-UNet scripts' own Python: pandas<2 and an older SciPy, which the shared referee's numpy 2
# cannot hold (tests/referee-kits19-requirements.txt)
REFEREE_KITS19 := .venv-referee-kits19
REFEREE_KITS19_STAMP := $(REFEREE_KITS19)/.installed
# Installs skip byte-compiling (half the base install, 3/4 of the extras'): Python writes the
# bytecode of what is imported once, on first use. So PYTHONDONTWRITEBYTECODE (set by some
# containers) is unexported: with it, every process would compile from source again. The tests
# keep theirs under the venv (PYTHONPYCACHEPREFIX below), never beside ../shared's sources.
# The venv's own pip (23.2 with Python 3.11) installs editable pyproject packages: no upgrade.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = pip install --quiet --no-compile

.PHONY: demo test venv referee referee-kits19 clean bench

$(BASE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP_INSTALL) -e .
	touch $(BASE_STAMP)

# the extras take about 2.5 GB in the venv, and pip unpacks wheels on the side: a full disk
# otherwise shows only as pip's "No space left on device" (a warning: pip may still fit)
NEED_KB := 3500000
$(STAMP): $(BASE_STAMP)
	@free=$$(df -Pk . | awk 'NR==2 {print $$4}'); [ "$${free:-0}" -ge $(NEED_KB) ] || echo \
	  "warning: $$(( $${free:-0} / 1024 )) MB free here; the test environment needs about 3.5 GB" >&2
	$(BIN)/$(PIP_INSTALL) -e '.[dev,report,ray,power,openvino,torch,llm,3d-unet]'
	touch $(STAMP)

venv: $(STAMP)

$(REFEREE_STAMP): tests/referee-requirements.txt
	test -x $(REFEREE)/bin/python || $(PYTHON) -m venv $(REFEREE)
	$(REFEREE)/bin/$(PIP_INSTALL) -r tests/referee-requirements.txt
	touch $(REFEREE_STAMP)

referee: $(REFEREE_STAMP)

$(REFEREE_KITS19_STAMP): tests/referee-kits19-requirements.txt
	test -x $(REFEREE_KITS19)/bin/python || $(PYTHON) -m venv $(REFEREE_KITS19)
	$(REFEREE_KITS19)/bin/$(PIP_INSTALL) -r tests/referee-kits19-requirements.txt
	touch $(REFEREE_KITS19_STAMP)

referee-kits19: $(REFEREE_KITS19_STAMP)

demo: $(BASE_STAMP)
	$(BIN)/mlharness demo

# three workers, a module per worker, the slowest handed out first (tests/conftest.py): many tests
# wait (on LoadGen's clock, the power server's pauses, stall timeouts), so a third worker on two
# cores keeps them busy: 8:07 instead of 9:21 here
TEST_WORKERS ?= 3

test: export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
# it installs every extra: a test that finds one missing fails instead of skipping (conftest.py)
test: export MLHARNESS_REQUIRE_EXTRAS := 1
test:
	@# the environments are independent: built side by side
	$(MAKE) --no-print-directory -j3 $(STAMP) $(REFEREE_STAMP) $(REFEREE_KITS19_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(REFEREE) $(REFEREE_KITS19) runs build .pytest_cache
