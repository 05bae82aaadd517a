# inferplane: `make test` is the test command (README). Everything it needs is built from the
# Go module proxy on first use; nothing is downloaded from anywhere else.

GO       ?= go
BIN      := bin/inferplane
KUBEBIN   = $(shell hack/kubebin.sh)

.PHONY: all build test vet unit kubebin bench bench-generator bench-webhook bench-xds bench-keys \
        generate verify-generate clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/inferplane

# The real kube-apiserver and etcd the e2e tests run: built once into .cache/kubebin.
kubebin:
	@hack/kubebin.sh

vet:
	$(GO) vet ./...

# vet, unit tests and the e2e tests against the real API server, then a check that no
# kube-apiserver or etcd outlived the tests.
test: vet
	@dir=$$(hack/kubebin.sh) && \
	INFERPLANE_KUBEBIN=$$dir INFERPLANE_REQUIRE_KUBE=1 $(GO) test -count=1 -timeout 30m ./...
	@hack/check-strays.sh

# Unit tests only; tests that need the API server say SKIPPED when its binaries are absent.
unit:
	$(GO) test -count=1 ./...

# Benchmarks, each printed with its ratio against the baseline a user would reach for instead.
bench: bench-generator bench-webhook bench-xds bench-keys

bench-generator:
	@echo "bench-generator: not built yet"

bench-webhook:
	@echo "bench-webhook: not built yet"

bench-xds:
	@echo "bench-xds: not built yet"

bench-keys:
	@echo "bench-keys: not built yet"

# Regenerates deepcopy functions and CRDs from api/v1alpha1 with the pinned controller-gen.
CONTROLLER_GEN := .cache/bin/controller-gen
$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o ../../$(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

generate: $(CONTROLLER_GEN)
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd

clean:
	rm -rf bin out
