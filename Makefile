# inferplane: `make test` is the test command (README). Everything it needs is built from the
# Go module proxy on first use; nothing is downloaded from anywhere else.

GO       ?= go
BIN      := bin/inferplane

.PHONY: all build demo image guest-image test test-guest test-argocd vet fmt unit kubebin testbins bench bench-generator bench-webhook bench-xds \
        bench-keys bench-recipes bench-api bench-api-designs bench-meter bench-console bench-logs console console-screenshots generate verify-generate clean

all: build

# The build's version (hack/version.sh, internal/version): the release tag vX.Y.Z when HEAD is
# exactly at one and the tree is clean, else dev-<commit>[-dirty]; `make build VERSION=v1.2.3`
# stamps a release version of your choosing. `inferplane version` prints it.
VERSION ?=

build:
	$(GO) build -ldflags "$$(VERSION='$(VERSION)' hack/version.sh)" -o $(BIN) ./cmd/inferplane

# The local world README's walkthrough runs against, until Ctrl-C (hack/demo): a real
# kube-apiserver and etcd for the host and tenant clusters, the real gateway (bin/inferplane xds
# serve), the real product API (api serve) and Dex, and stand-ins for what cannot run here
# (Envoy, Argo CD, KubeVirt, the GPU VMs' model servers), all on 127.0.0.1. It writes
# .demo/customer.env and .demo/env. Needs make build first.
demo:
	@test -x $(BIN) || { echo "make demo: $(BIN) is the gateway and the product API it runs: make build first" >&2; exit 2; }
	@$(GO) build -o bin/demo ./hack/demo
	@kube=$$(hack/kubebin.sh) && dex=$$(hack/gitopsbin.sh dex) && \
		INFERPLANE_KUBEBIN=$$kube INFERPLANE_DEX=$$dex exec bin/demo --inferplane $(BIN)

# inferplane's OCI image, without a container engine (hack/image, go-containerregistry): the
# static binary (CGO_ENABLED=0) on an empty base plus CA certificates, user 65532, no shell,
# tagged ghcr.io/inferplane/inferplane:<version>, written to IMAGE_TAR as an OCI layout and a
# docker archive in one tar (docs/image.md: loading and pushing it).
IMAGE_TAR    ?= bin/inferplane-image.tar
IMAGE_ARCH   ?= $(shell $(GO) env GOARCH)
IMAGE_BINARY ?= bin/image/inferplane-linux-$(IMAGE_ARCH)

image:
	@set -e; v() { VERSION='$(VERSION)' hack/version.sh "$$1"; }; mkdir -p "$$(dirname '$(IMAGE_BINARY)')"; \
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags "-s -w $$(v ldflags)" -o '$(IMAGE_BINARY)' ./cmd/inferplane; \
	$(GO) -C hack/image run . --binary '$(abspath $(IMAGE_BINARY))' --out '$(abspath $(IMAGE_TAR))' --arch $(IMAGE_ARCH) \
		--version "$$(v version)" --revision "$$(v commit)" --created "$$(v date)"

# The replica VMs' guest disk from Debian packages (hack/guest, docs/guest.md): debootstrap,
# the packages hack/guest/debian.lock pins, the agent (make image's static binary), GRUB; as a
# KubeVirt containerDisk tagged ghcr.io/inferplane/gpu-guest:<version>, the image generate
# renders, written to GUEST_IMAGE_TAR like make image's. Root, and only Debian's archive and the
# Go module proxy; the root folder is cached in $INFERPLANE_CACHE/guest, keyed on the recipe.
# GUEST_LOCK=update takes the archive's current versions and rewrites the lock.
GUEST_IMAGE_DISK ?= bin/guest/gpu-guest.qcow2
GUEST_IMAGE_TAR  ?= bin/gpu-guest-image.tar
GUEST_LOCK       ?= locked

guest-image:
	@$(MAKE) --no-print-directory image IMAGE_ARCH=amd64 IMAGE_BINARY=bin/image/inferplane-linux-amd64 IMAGE_TAR=bin/inferplane-image.tar > /dev/null
	@hack/guest/image.sh bin/image/inferplane-linux-amd64 '$(GUEST_IMAGE_DISK)' '$(GUEST_IMAGE_TAR)' '$(GUEST_LOCK)'

# The real kube-apiserver and etcd the e2e tests run: built once into .cache/kubebin.
kubebin:
	@hack/kubebin.sh

# Everything the e2e tests run, built once into .cache (hack/testbins.sh): kube-apiserver and
# etcd, and for the GitOps tests Argo CD, kustomize, KubeVirt's VM validation and
# kube-controller-manager (hack/gitopsbin.sh).
testbins:
	@hack/testbins.sh

# A file gofmt would change fails vet and test (named, with the command that fixes it).
fmt:
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path './.cache/*' -not -path './out/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change these files (run gofmt -w on them):" >&2; \
	echo "$$unformatted" >&2; exit 1; fi

vet: fmt
	$(GO) vet ./...

# vet (among the builds of the tests' binaries, once kube-apiserver has compiled the k8s.io
# packages both need), unit tests and the e2e tests against the real API server, the real
# Argo CD and Dex, and the console's in Debian's Chromium, then a check that no test process
# outlived the tests. The Debian packages the tests use are installed first when missing
# (hack/debpkg.sh: as root, once; one line each).
test: fmt
	@hack/redis.sh > /dev/null
	@hack/chromium.sh > /dev/null
	@hack/debpkg.sh shellcheck shellcheck > /dev/null
	@hack/guesttools.sh check > /dev/null
	@bins=$$(mktemp) && trap 'rm -f "$$bins"' EXIT && \
	hack/testbins.sh $(GO) vet ./... > $$bins && \
	env $$(cat $$bins) INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_REQUIRE_GITOPS=1 INFERPLANE_REQUIRE_DEX=1 INFERPLANE_REQUIRE_REDIS=1 \
		INFERPLANE_REQUIRE_BROWSER=1 INFERPLANE_REQUIRE_SHELLCHECK=1 INFERPLANE_REQUIRE_GUEST=1 $(GO) test -count=1 -timeout 45m ./...
	@hack/check-strays.sh

# The guest's boot test (e2e/guest, docs/guest.md): builds the guest image as make guest-image
# does but without its GPU driver layer (cached in $INFERPLANE_CACHE/guest) and boots a rendered
# job's cloud-init in QEMU, under TCG where KVM does not work. Apart from make test for its time;
# .ci/run runs it after make test, the image's root built meanwhile (docs/guest.md#in-ci).
test-guest:
	@hack/guesttools.sh check vm image > /dev/null
	INFERPLANE_REQUIRE_GUEST=1 INFERPLANE_GUEST_BOOT=1 $(GO) test -count=1 -timeout 150m -v -run 'TestGuestBoots' ./e2e/guest/
	@hack/check-strays.sh

# Only the GitOps tests: Argo CD syncing generated repositories (e2e/argocd) and KubeVirt's own
# validation of every generated VM (e2e/kubevirtcheck).
test-argocd:
	@bins=$$(mktemp) && trap 'rm -f $$bins' EXIT && hack/testbins.sh > $$bins && \
	env $$(cat $$bins) INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_REQUIRE_GITOPS=1 \
		$(GO) test -count=1 -timeout 30m -v ./e2e/argocd/ ./e2e/kubevirtcheck/
	@hack/check-strays.sh

# Unit tests only; tests that need the API server say SKIPPED when its binaries are absent.
unit:
	$(GO) test -count=1 ./...

# Benchmarks, each printed with its ratio against the baseline a user would reach for instead.
bench: bench-generator bench-webhook bench-xds bench-keys bench-recipes bench-console bench-api bench-logs bench-meter

# The console's page budget (docs/console.md): the jobs page loaded cold in Chromium 20 times,
# JavaScript and CSS transferred and the first render, each with its ratio to the issue's
# budget (150 KB, 300 ms), and where the first render's time goes; then the server's part of
# it on the demo's path (the console over the product API in process), 2,000 pages.
bench-console:
	@hack/chromium.sh > /dev/null
	INFERPLANE_REQUIRE_BROWSER=1 $(GO) test ./console/e2e/ -run '^$$' -bench 'JobsPage' -benchtime 20x -count 1 -timeout 30m
	$(GO) test ./console/apibackend/ -run '^$$' -bench 'JobsPageServer' -benchtime 2000x -count 1 -benchmem
	@echo "bench-console: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# The web console on the bundled examples, on this machine (hack/console-demo.sh): api serve
# with the development sign-in at http://127.0.0.1:8080 (CONSOLE_LISTEN=host:port for another).
console:
	@hack/console-demo.sh

# The console's screenshots in docs/console/, taken by its browser tests (docs/console.md).
console-screenshots:
	@hack/chromium.sh > /dev/null
	@bins=$$(mktemp) && trap 'rm -f $$bins' EXIT && hack/testbins.sh > $$bins && \
	env $$(cat $$bins) INFERPLANE_REQUIRE_DEX=1 INFERPLANE_REQUIRE_BROWSER=1 INFERPLANE_SCREENSHOTS=$(CURDIR)/docs/console \
		$(GO) test -count=1 -timeout 30m -run 'TestConsole$$|TestConsoleOnProductAPI|TestConsoleDemo' ./console/e2e/

# 1,000 tenants x 5 jobs rendered by generator/render and by Helm's engine (same objects,
# checked on a sample first), in one run; prints both times and the ratio. Helm lives in the
# hack/bench module only: it never reaches inferplane's own build. Then one job's change
# (`jobs create` on a checkout) at 200, 2,000 and 20,000 tenants x 10 jobs: flat, since only
# its tenant is read (the 20,000-tenant fixture is built once into $INFERPLANE_CACHE/bench-api).
bench-generator:
	cd hack/bench && $(GO) test -count=1 ./ && $(GO) run ./report
	cd hack/bench && $(GO) test ./ -run '^$$' -bench . -benchtime 2s -benchmem | $(GO) run ./ratio RenderTenant=HelmTenant
	$(GO) test ./cmd/inferplane/ -run '^$$' -bench 'BenchmarkJobsCreateOnCheckout' -benchtime 5x -count 1 -timeout 30m
	@echo "bench-generator: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# Recipes (docs/recipes.md): `recipe show` and `recipe list` on the bundled corpus (173 recipes)
# as whole processes beside the floor of any inferplane process (`recipe --help`), then their
# work (one recipe parsed and derived; what a listing reads) against the whole tree parsed.
bench-recipes:
	cd hack/bench && $(GO) run ./recipecmds -repo ../..
	$(GO) test ./generator/recipe/ -run '^$$' -bench 'Show|List|LoadDir|Derive' -benchmem -count 1 | \
		(cd hack/bench && $(GO) run ./ratio Show=ShowWholeTree List=LoadDir)

# Admission webhook (docs/webhook.md): the handler (decode, decide, encode) as Go benchmarks with
# p50/p99, then the load run through the real API server: dry-run creates of a guarded VM, 50
# workers (and 1) for 30s each, without a webhook, with a no-op webhook (the floor of any webhook
# on the machine) and with ours, plus a run that interleaves guarded and unlabelled VMs; prints
# p50/p99/errors and the latency each webhook adds.
bench-webhook:
	$(GO) test -run '^$$' -bench 'BenchmarkHandler' -benchtime 20000x -count 1 -benchmem ./webhook/
	@dir=$$(hack/kubebin.sh) && INFERPLANE_KUBEBIN=$$dir INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_WEBHOOK_LOAD=1 \
		$(GO) test -count=1 -timeout 20m -run '^TestLoadThroughAPIServer$$' -v ./webhook/e2e/
	@echo "bench-webhook: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# xDS server (docs/xds.md): 10,000 endpoints over 2,000 jobs, 100 ADS sessions over loopback gRPC;
# one replica's health flips, and the time until all 100 sessions have the new endpoints is
# measured (p50/p99 over 300 flips), with the server's heap and RSS (it runs in its own
# process). Delta and state of the world; the same fleet in 100 tenant clusters, each watched
# over HTTP from a stub of its API server (a health flip, and a VMI's Ready flip through its
# cluster's watch), side by side with one cluster; and the baselines a user would reach for
# instead (go-control-plane's snapshot cache for everything, and its LinearCache for endpoints).
bench-xds:
	$(GO) test ./xds/bench/ -run '^$$' -bench 'BenchmarkHealthFlip' -benchtime 1x -count 1 -timeout 30m
	@echo "bench-xds: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# API keys and usage (docs/keys.md): the check with 100,000 keys (p50/p99, and the ratio to a
# per-request bbolt lookup), Check over loopback gRPC paced at 2,000/s (p50/p99, beside gRPC's
# own health check paced the same way: the floor of any gRPC call on the machine), access-log
# ingestion over a real gRPC stream (entries/s, and the ratio to the generated-types decoder),
# and the Lua usage filter's cost per response (gopher-lua here; LuaJIT, Envoy's runtime,
# when luajit is installed). Limits (a real redis-server, hack/redis.sh): the check with limits
# against without (p50/p99, a key far from its limits and one whose every check is a round trip
# to Redis), and the counting cost per access-log entry.
bench-keys:
	@hack/redis.sh > /dev/null
	$(GO) test -run '^$$' -bench 'Verify100k|CheckGRPCPaced2000|CheckLimits' -benchtime 20000x -count 1 ./auth/extauthz/
	$(GO) test -run '^$$' -bench 'CountEntry' -benchtime 50000x -count 1 ./auth/limits/
	$(GO) test -run '^$$' -bench 'IngestGRPC' -benchtime 500000x -count 1 ./usage/
	$(GO) test -run '^$$' -bench 'UsageScript' -count 1 ./usage/envoylua/
	@if command -v luajit >/dev/null 2>&1; then luajit usage/envoylua/testdata/bench.lua usage/envoylua; \
	else echo "bench-keys: luajit is not installed (apt-get install luajit): the LuaJIT figures for the usage filter were not measured"; fi
	@echo "bench-keys: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# The meter (docs/business.md): 10,000 VMIs' transitions (Running, then Succeeded: the time
# per transition and the meter's memory per VMI), then the usage query of one tenant among
# 2,000 over a month of records (4,320,000: p50/p99 and the index's memory) beside summing the
# same records without the index, with the ratio.
bench-meter:
	$(GO) test ./metering/ -run '^$$' -bench 'MeterTransitions10k' -benchtime 5x -count 1
	$(GO) test ./metering/ -run '^$$' -bench 'UsageQuery' -benchtime 200x -count 1 -timeout 30m | \
		(cd hack/bench && $(GO) run ./ratio UsageQueryMonth=UsageQueryScanMonth)
	@echo "bench-meter: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# Product API (docs/api.md, docs/design.md): job creates until both pushes are done, from 8
# clients at once through 1 and 3 replicas at 200, 2,000 and 20,000 tenants x 10 jobs (creates
# per second, p50/p99, pushes, CPU a create), then the ratios on the last lines (3 replicas / 1;
# p99 at 20,000 / 200); GET jobs of a tenant with 50 jobs from the watch caches beside reading
# the clusters per request (real API servers). The fleets are built once into
# $INFERPLANE_CACHE/bench-api.
bench-api:
	@bins=$$(mktemp) && trap 'rm -f $$bins' EXIT && hack/testbins.sh > $$bins && \
	for t in GetJobs Creates; do \
		env $$(cat $$bins) INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_BENCH_API=1 $(GO) test -count=1 -timeout 60m -run "^TestBench$$t\$$" -v ./productapi/bench/ \
			| grep -E '^(bench-api:|ok|FAIL|--- |panic)' || exit 1; \
	done
	@echo "bench-api: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# Jobs' logs (docs/logs.md): a line appended to a VM's console until `inferplane jobs logs -f`
# prints it, p50/p99 over 300 paced lines (goal p99 < 1 s), beside client-go's follow of the pod
# through the same kube-apiserver (kubectl's path) and `kubectl logs -f` when installed; the
# product API process's heap, RSS and goroutines idle, with 100 follows open on a quiet VM, and
# with 100 follows while the VM prints 10,000 lines a second. A real kube-apiserver, the kubelet
# stand-in (e2e/kubeletstandin), the API in a process of its own.
bench-logs:
	@kube=$$(hack/kubebin.sh) && INFERPLANE_KUBEBIN=$$kube INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_BENCH_LOGS=1 \
		$(GO) test -count=1 -timeout 30m -run '^TestBenchLogs$$' -v ./cmd/inferplane/ | grep -E '^(bench-logs:|ok|FAIL|--- |panic)'
	@echo "bench-logs: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# The write designs of docs/design.md side by side (productapi/bench TestBenchWriteDesigns):
# every replica pushing its own writes (one write a push, or group commit, checked again on a
# new head or carried over) and writes handed to the replica that pushed last, through 1 and 3
# replicas at 2,000 tenants x 10 jobs.
bench-api-designs:
	@bins=$$(mktemp) && trap 'rm -f $$bins' EXIT && hack/testbins.sh > $$bins && \
	env $$(cat $$bins) INFERPLANE_REQUIRE_KUBE=1 INFERPLANE_BENCH_API_DESIGNS=1 $(GO) test -count=1 -timeout 60m -run '^TestBenchWriteDesigns$$' -v ./productapi/bench/ \
		| grep -E '^(bench-api:|ok|FAIL|--- |panic)'
	@echo "bench-api-designs: machine load while measuring: $$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) on $$(nproc) CPUs"

# Regenerates deepcopy functions and CRDs from api/v1alpha1 with the pinned controller-gen.
CONTROLLER_GEN := .cache/bin/controller-gen
$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o ../../$(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

generate: $(CONTROLLER_GEN)
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd

clean:
	rm -rf bin out
