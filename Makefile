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
# the referees that cannot share that Python, each .venv-referee-NAME from
# tests/referee-NAME-requirements.txt (`make referee-NAME`): kits19 (3D-UNet: pandas<2 and an older
# SciPy beside numpy 2), yolo (ultralytics on the torch/torchvision pair that loads), whisper
# (speech2text/'s accuracy script imports openai-whisper, which imports torch), endpoints
# (MLCommons' endpoints client, qwen3-vl's v6.1 reference, and the qwen3-vl scorer's imports: the
# client needs Python >= 3.12 and transformers 5; tests/endpoints_referee.py)
REFEREE_NAMES := kits19 yolo whisper endpoints
# the first Python 3.12 that runs (a pyenv shim without 3.12 selected does not)
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 \
	/usr/bin/python3.12 /usr/local/bin/python3.12; do $$p -c '' 2>/dev/null && { echo $$p; break; }; done)
# beside the pinned inference checkout (MLPERF_INFERENCE_DIR, as tests/referee.py reads it)
ENDPOINTS_SRC ?= $(if $(MLPERF_INFERENCE_DIR),$(MLPERF_INFERENCE_DIR)/../endpoints,../shared/official/endpoints)
REFEREE_STAMPS := $(REFEREE_STAMP) $(foreach n,$(REFEREE_NAMES),.venv-referee-$(n)/.installed)
# openai-whisper without its triton requirement (a GPU compiler, never imported on the way to its
# normaliser): installed apart, with --no-deps, in the test venv and whisper's referee
OPENAI_WHISPER := openai-whisper==20250625
# Installs skip byte-compiling (half the base install, 3/4 of the extras'): Python writes the
# bytecode of what is imported once, on first use. So PYTHONDONTWRITEBYTECODE (set by some
# containers) is unexported: with it, every process would compile from source again. The tests
# keep theirs under the venv (PYTHONPYCACHEPREFIX below), never beside ../shared's sources.
# The venv's own pip (23.2 with Python 3.11) installs editable pyproject packages: no upgrade.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = pip install --quiet --no-compile

.PHONY: demo test venv referee $(addprefix referee-,$(REFEREE_NAMES)) clean bench

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
	$(BIN)/$(PIP_INSTALL) -e '.[dev,report,ray,power,openvino,torch,llm,3d-unet,whisper]'
	$(BIN)/$(PIP_INSTALL) --no-deps $(OPENAI_WHISPER)
	touch $(STAMP)

venv: $(STAMP)

$(REFEREE_STAMP): tests/referee-requirements.txt
	test -x $(REFEREE)/bin/python || $(PYTHON) -m venv $(REFEREE)
	$(REFEREE)/bin/$(PIP_INSTALL) -r tests/referee-requirements.txt
	touch $(REFEREE_STAMP)

referee: $(REFEREE_STAMP)

.venv-referee-%/.installed: tests/referee-%-requirements.txt
	test -x .venv-referee-$*/bin/python || $(PYTHON) -m venv .venv-referee-$*
	.venv-referee-$*/bin/$(PIP_INSTALL) -r $<
	touch $@

# whisper's also takes openai-whisper apart (see OPENAI_WHISPER)
.venv-referee-whisper/.installed: tests/referee-whisper-requirements.txt
	test -x .venv-referee-whisper/bin/python || $(PYTHON) -m venv .venv-referee-whisper
	.venv-referee-whisper/bin/$(PIP_INSTALL) -r $<
	.venv-referee-whisper/bin/$(PIP_INSTALL) --no-deps $(OPENAI_WHISPER)
	touch $@

# endpoints': Python 3.12, the client installed from a copy of the pinned folder (a build must not
# write into it)
# without the pinned client (a clone that is not beside ../shared) nothing is built: the tests
# that need it say so (skipped; failed under CI=true), as for the other referees' scripts
.venv-referee-endpoints/.installed: tests/referee-endpoints-requirements.txt
	@if [ ! -d $(ENDPOINTS_SRC) ]; then \
	  echo "note: no endpoints client at $(ENDPOINTS_SRC) (set MLPERF_INFERENCE_DIR): its referee is not built" >&2; \
	elif [ -z "$(PYTHON312)" ]; then \
	  echo "the endpoints referee needs Python 3.12: give PYTHON312=PATH" >&2; exit 1; \
	else \
	  set -e; test -x .venv-referee-endpoints/bin/python || $(PYTHON312) -m venv .venv-referee-endpoints; \
	  tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cp -r $(ENDPOINTS_SRC) "$$tmp/endpoints"; \
	  .venv-referee-endpoints/bin/$(PIP_INSTALL) "$$tmp/endpoints" -r $<; touch $@; \
	fi

$(addprefix referee-,$(REFEREE_NAMES)): referee-%: .venv-referee-%/.installed

demo: $(BASE_STAMP)
	$(BIN)/mlharness demo

# four workers, a module per worker, the slowest handed out first (tests/conftest.py): many tests
# wait (on LoadGen's clock, the power server's pauses, stall timeouts), so more workers than
# cores keep them busy (2026-12-05 idle, venvs built: 15:11 with three, 14:04 with four)
TEST_WORKERS ?= 4

test: export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
# it installs every extra: a test that finds one missing fails instead of skipping (conftest.py)
test: export MLHARNESS_REQUIRE_EXTRAS := 1
test:
	@# the environments are independent: built side by side
	$(MAKE) --no-print-directory -j3 $(STAMP) $(REFEREE_STAMPS)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(REFEREE) $(addprefix .venv-referee-,$(REFEREE_NAMES)) runs build .pytest_cache
