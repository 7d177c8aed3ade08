# flux-deploy-notifier. Two commands set everything up on a fresh machine
# with Go 1.26: `make run` and `make test`.

GO        ?= go
BIN       := bin/flux-deploy-notifier
DATA      ?= ./data
LISTEN    ?= 127.0.0.1:8080
SCENARIO  ?= clean
MAILTO    ?= dev@localhost
# make run needs no cluster: off unless asked (CLUSTER=auto reads $$KUBECONFIG).
CLUSTER   ?= off
# Fuzz budgets are counts of executions, not durations: Go 1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when a
# -fuzztime duration ends with a worker mid-input on a busy machine
# (golang/go#75804, fixed in Go 1.27; it failed make test here once). A
# count has no deadline to race. 20000x is 1 to 5 s a target on 2 cores.
FUZZTIME  ?= 20000x
FUZZLONG  ?= 1000000x
IMAGE     ?= flux-deploy-notifier:dev
# docker or podman.
ENGINE    ?= docker
# Flux controllers whose module zips carry the CRDs the cluster tests install.
FLUX_KC   ?= v1.9.6
FLUX_SC   ?= v1.9.1
FLUX_NC   ?= v1.9.3
FLUX_HC   ?= v1.6.4
# prometheus-operator, whose module zip carries the ServiceMonitor and
# PrometheusRule CRDs the manifests' optional components are checked against.
PROM_OP   ?= v0.88.0

# Native fuzz targets, as package:target, or package:target@COUNT for one
# whose every input is a whole history (FuzzOracle: a simulated Flux).
FUZZ_TARGETS := \
	./internal/api:FuzzWireString \
	./internal/cluster:FuzzWatchStream \
	./internal/rollout:FuzzOracle@2000x \
	./internal/flux:FuzzDecode \
	./internal/flux:FuzzDecodePlain \
	./internal/flux:FuzzParseRevision \
	./internal/flux:FuzzParsePruneMessage \
	./internal/flux:FuzzParseRemediation \
	./internal/store:FuzzDecodeEvidence \
	./internal/signature:FuzzSignature

.PHONY: all build run sample test test-short unit-short hygiene browser postgres testbin e2ebin e2e vet unit fuzz-short fuzz bench bench-fleet mail-preview ui-preview manifests-check image image-scratch podman image-test clean

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/flux-deploy-notifier

# The embedded default: state in $(DATA), a development token generated on
# first run and printed, mails to $(MAILTO) written as .eml files to
# $(DATA)/mail, no cluster and no SMTP needed. In another terminal,
# `make sample` posts a rollout and prints its verdict.
run: build
	$(BIN) serve --listen $(LISTEN) --data-dir $(DATA) \
		--hmac-token-file $(DATA)/dev-token --generate-token --log-format text \
		--mail-to $(MAILTO) --external-url http://$(LISTEN) --cluster=$(CLUSTER)

sample: build
	$(BIN) sample --url http://$(LISTEN) --token-file $(DATA)/dev-token --scenario $(SCENARIO)

# make test runs in phases and says when each ends. While make testbin
# builds the test binaries in the background (logged to bin/testbin.log:
# ten minutes and more the first time), it runs what needs none of them:
# vet, the tests in -short (each test that needs a built binary skips
# itself there, clustertest.Binary) and the fuzz targets. Then, the
# binaries built, the packages whose tests need them, whole. The
# background build runs at the lowest CPU and I/O priority: it takes only
# what the foreground phases leave, so that on a cold machine vet and the
# short tests have the cores to themselves and a first result comes early
# (docs/ci.md), while the whole run takes no longer: the cores stay busy.
IONICE := $(if $(shell command -v ionice 2>/dev/null),ionice -c 3)
BIN_TEST_PKGS = $$($(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/\/internal\/cluster\/clustertest( |$$)/ {print $$1}')
test: browser postgres bin/staticcheck bin/github-openapi.json
	@set -e; start=$$(date +%s); mkdir -p bin; \
	phase() { echo "== make test: $$1 at +$$(( $$(date +%s) - start )) s"; }; \
	setsid nice -n 19 $(IONICE) $(MAKE) --no-print-directory testbin > bin/testbin.log 2>&1 & tb=$$!; \
	trap 'kill -- -$$tb 2>/dev/null || true' EXIT; \
	echo "== make test: building the test binaries in the background (bin/testbin.log)"; \
	$(MAKE) --no-print-directory hygiene; \
	$(MAKE) --no-print-directory vet; phase "vet passed"; \
	$(MAKE) --no-print-directory unit-short; phase "tests that need no built binary passed (go test -short)"; \
	$(MAKE) --no-print-directory fuzz-short; phase "fuzz targets passed"; \
	wait $$tb || { tail -n 40 bin/testbin.log; echo "make testbin failed (bin/testbin.log)"; exit 1; }; \
	trap - EXIT; phase "test binaries built"; \
	FDN_REQUIRE_BROWSER=1 $(GO) test -race -count=1 $(BIN_TEST_PKGS); \
	phase "tests on the built binaries passed: make test passed"

# No build output is committed: a tracked file outside testdata/ and
# docs/images/ that is a compiled binary (ELF) or larger than 1 MB fails
# make test, named (a 26 MB fdn-fleet was committed once).
hygiene:
	@command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1 || exit 0; \
	bad=$$(git ls-files | grep -v -e '^testdata/' -e '/testdata/' -e '^docs/images/' | while read -r f; do \
		[ -f "$$f" ] || continue; \
		if [ "$$(stat -c %s "$$f")" -gt 1048576 ] || [ "$$(head -c 4 "$$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then echo "  $$f"; fi; \
	done); \
	if [ -n "$$bad" ]; then echo "tracked files that are build outputs or over 1 MB (keep them out of git, or under testdata/ or docs/images/):"; echo "$$bad"; exit 1; fi

# The unit tests alone, without the test binaries (a few minutes): every
# test but those on the real kube-apiserver, kustomize and promtool.
test-short: vet unit-short

unit-short: postgres bin/github-openapi.json
	FDN_REQUIRE_BROWSER=1 $(GO) test -race -short -count=1 ./...

# GitHub's OpenAPI description (npm's @octokit/openapi), which the forge
# contract server checks every request and answer against
# (internal/channel/forge/forgetest): GitHub itself cannot be reached from tests.
OCTOKIT_OPENAPI := 23.0.2
bin/github-openapi.json: Makefile
	@command -v npm >/dev/null || { \
		echo "installing npm for GitHub's OpenAPI description"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm; \
		else sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm; fi; }
	@mkdir -p bin/.octokit
	cd bin/.octokit && npm pack --silent @octokit/openapi@$(OCTOKIT_OPENAPI) >/dev/null && \
		tar xzf octokit-openapi-$(OCTOKIT_OPENAPI).tgz package/generated/api.github.com.json
	mv bin/.octokit/package/generated/api.github.com.json $@ && touch $@
	rm -rf bin/.octokit

# The status pages' tests drive a real headless Chromium (Debian's
# chromium); installed here when missing, and required by the tests then.
browser:
	@command -v chromium >/dev/null || { \
		echo "installing chromium for the status page tests"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
		else sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; fi; }

# The PostgreSQL store's tests run a real server (Debian's postgresql:
# initdb and postgres, internal/store/pgtest); installed here when missing.
postgres:
	@{ command -v pg_config >/dev/null && [ -x "$$(pg_config --bindir)/initdb" ]; } || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		echo "installing postgresql for the PostgreSQL store's tests"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
		else sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; fi; }

# The real kube-apiserver and etcd the cluster tests run, built from their Go
# modules (tools/, pinned there; rebuilt only when a pin changes: about ten
# minutes on 2 cores the first time), and the Flux CRDs from the controllers'
# module zips.
testbin: bin/kube-apiserver bin/etcd bin/crds/.stamp bin/crds/monitoring/.stamp bin/promtool bin/kustomize bin/gitea

# The version ldflags make the apiserver report v1.37.2, not v0.0.0-master,
# which clients such as kubectl cannot parse.
KUBE_VERSION_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.37.2 \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37

bin/kube-apiserver: tools/kube-apiserver/go.mod tools/kube-apiserver/go.sum
	cd tools/kube-apiserver && $(GO) build -ldflags "$(KUBE_VERSION_LDFLAGS)" -o ../../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver

bin/etcd: tools/etcd/go.mod tools/etcd/go.sum
	cd tools/etcd && $(GO) build -o ../../bin/etcd go.etcd.io/etcd/server/v3

bin/crds/.stamp: Makefile
	@mkdir -p bin/crds
	@kc=$$($(GO) mod download -json github.com/fluxcd/kustomize-controller@$(FLUX_KC) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	sc=$$($(GO) mod download -json github.com/fluxcd/source-controller@$(FLUX_SC) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	nc=$$($(GO) mod download -json github.com/fluxcd/notification-controller@$(FLUX_NC) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	hc=$$($(GO) mod download -json github.com/fluxcd/helm-controller@$(FLUX_HC) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$kc" -a -n "$$sc" -a -n "$$nc" -a -n "$$hc" || { echo "could not download the Flux controllers' modules"; exit 1; }; \
	for f in $$kc/config/crd/bases/*.yaml $$sc/config/crd/bases/*.yaml $$nc/config/crd/bases/*.yaml $$hc/config/crd/bases/*.yaml; do \
		install -m 644 $$f bin/crds/; done
	@touch $@

bin/crds/monitoring/.stamp: Makefile
	@mkdir -p bin/crds/monitoring
	@po=$$($(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROM_OP) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -n "$$po" || { echo "could not download prometheus-operator's module"; exit 1; }; \
	for k in servicemonitors prometheusrules; do \
		install -m 644 $$po/example/prometheus-operator-crd/monitoring.coreos.com_$$k.yaml bin/crds/monitoring/; done
	@touch $@

# promtool, which unit-tests the alert rules of
# manifests/components/prometheusrule (pinned in tools/promtool; without
# Prometheus's service discoveries, which it does not need: about two
# minutes on 2 cores the first time).
bin/promtool: tools/promtool/go.mod tools/promtool/go.sum
	cd tools/promtool && $(GO) build -tags remove_all_sd -o ../../bin/promtool github.com/prometheus/prometheus/cmd/promtool

# kustomize, which builds manifests/ for the manifests' tests as `kubectl
# apply -k` would (pinned in tools/kustomize; under a minute).
bin/kustomize: tools/kustomize/go.mod tools/kustomize/go.sum
	cd tools/kustomize && $(GO) build -o ../../bin/kustomize sigs.k8s.io/kustomize/kustomize/v5

# The Flux controllers the end-to-end tests run, built from their Go modules
# (tools/, pinned there; rebuilt only when a pin changes: about eight minutes
# for the three on 2 cores with an empty build cache, measured: 3, 2.3 and 3).
e2ebin: testbin bin/kustomize-controller bin/notification-controller bin/helm-controller

bin/kustomize-controller: tools/kustomize-controller/go.mod tools/kustomize-controller/go.sum
	cd tools/kustomize-controller && $(GO) build -trimpath -o ../../bin/kustomize-controller github.com/fluxcd/kustomize-controller

bin/notification-controller: tools/notification-controller/go.mod tools/notification-controller/go.sum
	cd tools/notification-controller && $(GO) build -trimpath -o ../../bin/notification-controller github.com/fluxcd/notification-controller

# helm-controller v1.6.4 (tools/helm-controller carries the replace lines
# of its own go.mod, without which its dependencies do not resolve).
# A real Gitea (v1.27.3, SQLite through cgo) for the forge's tests
# (internal/channel/forge/gitea): about seven minutes on 2 cores the first time.
# Built without bindata, it reads its locales and templates from
# bin/gitea-assets, copied from its module.
bin/gitea: tools/gitea/go.mod tools/gitea/go.sum
	cd tools/gitea && CGO_ENABLED=1 $(GO) build -trimpath -tags 'sqlite sqlite_unlock_notify' -o ../../bin/gitea gitea.dev
	@dir=$$(cd tools/gitea && $(GO) list -m -f '{{.Dir}}' gitea.dev); test -n "$$dir" || { echo "could not find Gitea's module"; exit 1; }; \
	rm -rf bin/gitea-assets && mkdir -p bin/gitea-assets && cp -r $$dir/options $$dir/templates bin/gitea-assets/ && chmod -R u+w bin/gitea-assets

# Jaeger v1.75.0 (tools/jaeger), to receive the traces of the trace tests
# (issue 55: not yet in any test target).
bin/jaeger: tools/jaeger/go.mod tools/jaeger/go.sum
	cd tools/jaeger && $(GO) build -trimpath -o ../../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger

bin/helm-controller: tools/helm-controller/go.mod tools/helm-controller/go.sum
	cd tools/helm-controller && $(GO) build -trimpath -o ../../bin/helm-controller github.com/fluxcd/helm-controller

# The service against real kustomize-controller and notification-controller
# on the real kube-apiserver, mailing a real SMTP server: every scenario of
# internal/e2e, in parallel (about a minute once the binaries are built).
E2E_TIMEOUT ?= 20m
e2e: e2ebin browser
	$(GO) test -race -tags e2e -count=1 -v -parallel 13 -timeout $(E2E_TIMEOUT) -run '^TestFlux$$' ./internal/e2e/

# go vet, and staticcheck with every check (tools/staticcheck pins it; built
# in seconds), over the build tags the tests use too.
vet: bin/staticcheck
	@unformatted=$$(gofmt -l cmd internal templates); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags fdn_verify ./cmd/flux-deploy-notifier/
	$(GO) vet -tags e2e ./internal/e2e/
	$(GO) vet -tags image ./internal/imagetest/
	bin/staticcheck -checks all ./...
	bin/staticcheck -checks all -tags e2e ./internal/e2e/
	bin/staticcheck -checks all -tags image ./internal/imagetest/

bin/staticcheck: tools/staticcheck/go.mod tools/staticcheck/go.sum
	cd tools/staticcheck && $(GO) build -o ../../bin/staticcheck honnef.co/go/tools/cmd/staticcheck

unit: bin/github-openapi.json
	FDN_REQUIRE_BROWSER=1 $(GO) test -race -count=1 ./...

# A short run of every fuzz target, on top of their seed corpora that
# `make unit` already ran.
fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; n=$(FUZZTIME); \
		case $$name in *@*) [ "$(FUZZTIME)" = "$(FUZZLONG)" ] || n=$${name##*@}; name=$${name%%@*};; esac; \
		echo "fuzz $$name ($$n)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $$n $$pkg; \
	done

fuzz:
	$(MAKE) fuzz-short FUZZTIME=$(FUZZLONG)

# Go benchmarks of the engine, the webhook and the cluster reader (on the
# test kube-apiserver), then the load generator: the real webhook stack
# against a bare read-and-decode handler over loopback, each in its own
# process, in the same run; and the PostgreSQL store against both (a
# server started for the run: make postgres installs it).
# The reference load stream (fdnload, kept beside the project: its README
# says what it sends) runs after the load generator's own runs, against the
# real binary's serve, on bbolt and PostgreSQL (cmd/fdn-loadgen, -reference).
# Without its source, make bench says so and runs the rest.
FDNLOAD ?= ../shared/tools/fdnload
bench: testbin postgres build
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	$(GO) build -o bin/fdn-loadgen ./cmd/fdn-loadgen
	@if [ -f $(FDNLOAD)/main.go ]; then \
		$(GO) build -C $(FDNLOAD) -o $(CURDIR)/bin/fdnload . && \
		bin/fdn-loadgen -reference bin/fdnload -binary $(BIN); \
	else \
		echo "make bench: the reference stream is not at FDNLOAD=$(FDNLOAD): its runs are skipped"; \
		bin/fdn-loadgen; \
	fi

# The fleet of design.md against the real binary, one simulated day at a
# time: memory, data size, ingest, /verdict and /rollouts latency, and the
# time to ready after a restart (see cmd/fdn-fleet), with three HelmReleases
# in each application layer (FLEET="-releases 0" for none; FLEET="-github"
# adds a forge: every verdict a deployment in a stand-in for GitHub;
# FLEET="-postgres" keeps the state in PostgreSQL, outside the cgroup). The full run
# (30 days) takes about 35 minutes on 2 cores; FLEET="-days 5" for a
# shorter one. As
# root, the service runs in a 256 MiB memory cgroup, as in its pod. Then the
# same fleet's 8,500 Kustomizations on the test kube-apiserver, read by the
# real binary with cluster access, as the Deployment runs it (about 4
# minutes; BenchmarkServeClusterFleet).
FLEET ?= $(if $(filter 0,$(shell id -u)),-memory-limit 256)
bench-fleet: build testbin postgres
	$(GO) build -o bin/fdn-fleet ./cmd/fdn-fleet
	bin/fdn-fleet -binary $(BIN) $(FLEET)
	$(GO) test -run '^$$' -bench BenchmarkServeClusterFleet -benchtime 1x -timeout 30m ./cmd/flux-deploy-notifier

# Every mail of the example rollouts as .eml and .html in out/mail-preview,
# with PNG screenshots (600 px, light and dark) when chromium is installed
# (Debian: apt-get install chromium).
mail-preview:
	$(GO) run ./cmd/fdn-mail-preview -out out/mail-preview

# Screenshots of the status pages (the example rollouts), light and dark,
# 1280 and 390 px wide, in out/ui-preview.
ui-preview: browser
	$(GO) run ./cmd/fdn-ui-preview -out out/ui-preview

# manifests/ (the components and the tenant example too) built by kustomize
# and applied with server-side dry-run to the real kube-apiserver of make
# testbin, with the Flux and the Prometheus Operator's CRDs installed, and
# promtool's tests of the alert rules; `make unit` runs it too.
manifests-check: testbin
	$(GO) test -count=1 -run 'TestManifests|TestAlertRules' ./cmd/flux-deploy-notifier

# The canonical multi-stage build (golang, then distroless nonroot); needs a
# registry to pull the base images from.
image:
	$(ENGINE) build -t $(IMAGE) .

# The image from local files only, no registry: the static binary built
# here, alone in an image FROM scratch, user 65532. Root certificates are
# inside the binary; it needs no shell and no /etc/passwd.
image-scratch:
	mkdir -p out/image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o out/image/flux-deploy-notifier ./cmd/flux-deploy-notifier
	printf '%s\n' 'FROM scratch' 'COPY flux-deploy-notifier /flux-deploy-notifier' 'USER 65532:65532' 'EXPOSE 8080' \
		'VOLUME ["/data"]' 'ENTRYPOINT ["/flux-deploy-notifier"]' \
		'CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/data", "--hmac-token-file", "/etc/flux-deploy-notifier/token"]' \
		> out/image/Containerfile
	$(ENGINE) $(ENGINE_FLAGS) build -t $(IMAGE) out/image

# podman and runc (Debian's), installed when missing: runc, because crun
# cannot set rlimits in these sandboxes.
podman:
	@{ command -v podman && command -v runc; } >/dev/null || { \
		echo "installing podman and runc for the image test"; \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc; \
		else sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc; fi; }

# The scratch image run as manifests/deployment.yaml runs it (internal/imagetest).
image-test: ENGINE := podman
image-test: ENGINE_FLAGS = --runtime $$(command -v runc)
image-test: podman image-scratch
	FDN_IMAGE=$(IMAGE) FDN_IMAGE_BINARY=$(CURDIR)/out/image/flux-deploy-notifier $(GO) test -tags image -count=1 -v ./internal/imagetest

# Keeps the test binaries, which take long to build; `rm -rf bin` drops them.
clean:
	rm -rf out bin/flux-deploy-notifier bin/fdn-loadgen
