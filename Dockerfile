# syntax=docker/dockerfile:1
#
# placement-oracle container image.
#
#   docker build -t placement-oracle:latest .
#
# Base images are referenced by tag for readability. In production pin them by
# digest (e.g. `rust:1-bookworm@sha256:...`) so rebuilds are reproducible, and
# let a bot (Renovate/Dependabot) bump the digests.

# ---------------------------------------------------------------------------
# Builder. CI replays this stage without Docker (.ci/docker-context.sh, on
# exactly the files it COPYs): keep to the forms that script understands, or
# teach it new ones.
# ---------------------------------------------------------------------------
FROM rust:1-bookworm AS builder

WORKDIR /app

# Never let sqlx macros try to reach a database at compile time. (If
# sqlx::query! macros are adopted, commit the .sqlx/ directory from
# `cargo sqlx prepare` and COPY it below.)
ENV SQLX_OFFLINE=true \
    CARGO_TERM_COLOR=never

# 1. Dependency layer: build all dependencies against a dummy main. Cargo loads
#    every target the manifest declares and every workspace member, so the
#    [[bench]] files and the members' whole folders must be here already
#    (tests/api/packaging.rs checks it); the layer is therefore reused only as
#    long as Cargo.toml, Cargo.lock, benches/, sdk/rust/, integrations/rio-rs/
#    and bench/fleet/ do not change: a change to the Rust SDK, the rio-rs
#    integration or the fleet generator rebuilds the dependencies too.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
# The workspace's other members (the Rust SDK, the rio-rs integration): cargo loads every
# member's manifest and targets (it builds neither here).
COPY sdk/rust ./sdk/rust
COPY integrations/rio-rs ./integrations/rio-rs
COPY bench/fleet ./bench/fleet
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && cargo build --release --locked \
 && rm -rf src

# 2. The crate itself. migrations/ is embedded into the binary by
#    sqlx::migrate!; openapi/ ships with the crate's sources. Both must exist
#    in the build context.
COPY src ./src
COPY migrations ./migrations
COPY openapi ./openapi
# COPY keeps source mtimes, which may be older than the dummy build's output;
# touch main.rs so cargo rebuilds the binary instead of reusing the dummy.
RUN touch src/main.rs \
 && cargo build --release --locked --bin placement-oracle

# ---------------------------------------------------------------------------
# Runtime: distroless "cc" = glibc + libgcc + CA certs, no shell, no package
# manager. The builder is bookworm, so glibc versions match debian12.
# ---------------------------------------------------------------------------
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="placement-oracle" \
      org.opencontainers.image.description="Placement / rebalancing / connection-balancing oracle (HTTP)" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"

# Only the binary; root-owned and read-only to the service user.
COPY --from=builder /app/target/release/placement-oracle /placement-oracle

# Containers must listen on all interfaces (the binary defaults to loopback).
ENV ORACLE_LISTEN=0.0.0.0:8080 \
    ORACLE_LOG_FORMAT=json

EXPOSE 8080

# "nonroot" in distroless is uid/gid 65532. Use the numeric form so Kubernetes
# `runAsNonRoot: true` can verify the user without an explicit runAsUser.
USER 65532:65532

# No HEALTHCHECK: distroless has no shell, curl or wget to run one. Liveness and
# readiness are left to the orchestrator (k8s httpGet probes on /healthz and
# /readyz; see deploy/). The service shuts down gracefully on SIGTERM.
ENTRYPOINT ["/placement-oracle"]
CMD ["serve"]
