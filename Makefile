# flux-deploy-notifier. Two commands set everything up on a fresh machine
# with Go 1.26: `make run` and `make test`.

GO        ?= go
BIN       := bin/flux-deploy-notifier
DATA      ?= ./data
LISTEN    ?= 127.0.0.1:8080
SCENARIO  ?= clean
MAILTO    ?= dev@localhost
FUZZTIME  ?= 3s
FUZZLONG  ?= 2m
IMAGE     ?= flux-deploy-notifier:dev

# Native fuzz targets, as package:target.
FUZZ_TARGETS := \
	./internal/flux:FuzzDecode \
	./internal/flux:FuzzParseRevision \
	./internal/flux:FuzzParsePruneMessage \
	./internal/webhook:FuzzSignature

.PHONY: all build run sample test vet unit fuzz-short fuzz bench mail-preview image clean

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
		--mail-to $(MAILTO) --external-url http://$(LISTEN)

sample: build
	$(BIN) sample --url http://$(LISTEN) --token-file $(DATA)/dev-token --scenario $(SCENARIO)

test: vet unit fuzz-short

vet:
	@unformatted=$$(gofmt -l cmd internal templates); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# A short run of every fuzz target, on top of their seed corpora that
# `make unit` already ran.
fuzz-short:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

fuzz:
	$(MAKE) fuzz-short FUZZTIME=$(FUZZLONG)

# Go benchmarks of the engine and the webhook, then the load generator: the
# real webhook stack against a bare read-and-decode handler over loopback,
# each in its own process, in the same run.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/...
	$(GO) build -o bin/fdn-loadgen ./cmd/fdn-loadgen
	bin/fdn-loadgen

# Every mail of the example rollouts as .eml and .html in out/mail-preview,
# with PNG screenshots (600 px, light and dark) when chromium is installed
# (Debian: apt-get install chromium).
mail-preview:
	$(GO) run ./cmd/fdn-mail-preview -out out/mail-preview

# Needs a container engine (docker or podman); none runs on the dev VMs.
image:
	docker build -t $(IMAGE) .

clean:
	rm -rf bin out
