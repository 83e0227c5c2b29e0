# gpusampler: the two commands a new user needs are `make serve` and `make test`.
BUILD_DIR ?= build
PRESET ?= release
JOBS ?= $(shell nproc)
PYTHON ?= /usr/bin/python3
ADDRESS ?= 0.0.0.0:50051
METRICS_ADDRESS ?= 0.0.0.0:9464
SERVE_ARGS ?=

.PHONY: all deps configure build test test-cpp test-python test-deploy test-container bench serve \
  clean format format-check

all: build

deps:
	bash deploy/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake --preset $(PRESET)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build format-check
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	@if [ -d tests/python ]; then \
	  PYTHONPATH=$(CURDIR)/client/python GPUSAMPLER_BUILD_DIR=$(CURDIR)/$(BUILD_DIR) \
	    $(PYTHON) -m pytest -q tests/python; \
	fi

# The deploy/ checks: Kubernetes manifests (kustomize + kubernetes-validate), and the
# Prometheus rules and Grafana dashboard against a real Prometheus scraping a loaded server.
test-deploy: build
	bash deploy/k8s/test.sh
	BUILD_DIR=$(BUILD_DIR) bash deploy/prometheus/test.sh

# Builds the container image with podman and proves it (needs root; docs/operations.md).
test-container:
	nice -n 19 bash deploy/container/test.sh

bench: build
	bash bench/compare.sh

serve: build
	$(BUILD_DIR)/bin/gpusampler-server --device auto --address $(ADDRESS) \
	  --metrics-address $(METRICS_ADDRESS) $(SERVE_ARGS)

# Every C++ and CUDA file git tracks (proto/ included), in the repository's .clang-format style.
CXX_SOURCES = git ls-files -- '*.cc' '*.hpp' '*.h' '*.cu' '*.cuh'

format:
	$(CXX_SOURCES) | xargs clang-format -i

format-check:
	@$(CXX_SOURCES) | xargs clang-format --dry-run -Werror || \
	  { echo "format-check: run 'make format'" >&2; exit 1; }

clean:
	rm -rf $(BUILD_DIR)
