# Warren's build. `make build` leaves bin/warren (CLI and server) and
# bin/warren-agent (static, runs inside every sandbox). runsc is built once
# into the cache outside the checkout (scripts/build-runsc.sh).
GO ?= go
CACHE_DIR ?= /var/cache/warren
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/warrenhq/warren/internal/daemon.Version=$(VERSION)

.PHONY: build runsc test test-unit bench clean up fmt vet

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/warren ./cmd/warren
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w -X main.version=$(VERSION)' -o bin/warren-agent ./cmd/warren-agent

runsc:
	CACHE_DIR=$(CACHE_DIR) scripts/build-runsc.sh

# The whole suite, as CI runs it (needs root for the integration tests).
test:
	scripts/test.sh

test-unit:
	$(GO) test -short ./...

# The benchmark suite (as root): every target of DESIGN.md beside raw runsc,
# measured in the same run. Writes bench-results.json, prints a Markdown
# table and updates docs/benchmarks.md. About 2 minutes on a quiet 2-core host (5-10 when loaded).
bench: build runsc
	WARREN_BENCH=1 WARREN_BIN=$(CURDIR)/bin WARREN_CACHE_DIR=$(CACHE_DIR) CACHE_DIR=$(CACHE_DIR) \
		$(GO) test -count=1 -timeout 30m -run '^TestBench$$' -v ./integration/

up:
	scripts/up.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
