# syntax=docker/dockerfile:1
#
# The consul-elector operator image, built from a clean clone with `docker build .`
# (or `make image`). Two stages:
#
#   builder  the official Rust image on Debian bookworm compiles the operator (glibc, ring).
#   runtime  gcr.io/distroless/cc-debian12:nonroot: the same glibc generation (Debian 12) and
#            libgcc_s the binary links against, CA certificates for Consul over TLS, tzdata,
#            no shell and no package manager; runs as the numeric non-root user 65532.
#
# Why glibc and not a static musl binary: musl's allocator is slow under tokio's many threads,
# and ring, rustls and every other dependency build unchanged against glibc; the distroless
# "cc" image exists for exactly this case.
#
# Dependency caching uses a dummy-source layer rather than cargo-chef or BuildKit cache
# mounts: the first cargo build compiles every dependency from Cargo.toml, Cargo.lock and stub
# sources only, so that layer is reused until a manifest or the lock file changes. It is a
# plain image layer, so it needs no extra tool inside the image (cargo-chef would have to be
# installed from crates.io on every cold build) and, unlike a cache mount, it is exported by
# `docker buildx build --cache-to type=gha` in CI.
#
# testkit (the workspace's test infrastructure) is never built into the image: only its
# Cargo.toml is copied, because cargo loads every workspace member's manifest and --locked
# checks Cargo.lock against all of them; a stub lib.rs gives it the one target a manifest
# needs. `cargo build -p consul-elector --bin consul-elector` never compiles dev-dependencies.

# The project's MSRV is 1.89; CI and the developers' machines use 1.95. Override with
# `--build-arg RUST_VERSION=1.9x`.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
WORKDIR /build
ENV CARGO_TERM_COLOR=never \
    CARGO_INCREMENTAL=0

# Dependency layer: manifests, the lock file and stub sources.
COPY Cargo.toml Cargo.lock ./
COPY testkit/Cargo.toml testkit/Cargo.toml
RUN mkdir -p src testkit/src \
    && printf 'fn main() {}\n' > src/main.rs \
    && : > src/lib.rs \
    && : > testkit/src/lib.rs \
    && cargo build --release --locked -p consul-elector --bin consul-elector \
    && cargo clean --release --locked -p consul-elector \
    && rm -r src

# The operator itself. `cargo clean -p consul-elector` above dropped the stub's artifacts and
# fingerprints, so this build compiles the real sources whatever their timestamps (COPY keeps
# the build context's mtimes, which can be older than the stub's). Running `crd` proves the
# binary is the operator, not the stub.
COPY src src
RUN cargo build --release --locked -p consul-elector --bin consul-elector \
    && ./target/release/consul-elector crd | grep -q '^kind: CustomResourceDefinition$'

FROM gcr.io/distroless/cc-debian12:nonroot

# Set by `make image` from Cargo.toml and git; the defaults describe a plain `docker build .`.
ARG VERSION=0.1.0
ARG REVISION=unknown

LABEL org.opencontainers.image.title="consul-elector" \
      org.opencontainers.image.description="Kubernetes operator that elects one leader pod per LeaderElection through Consul sessions and KV locks" \
      org.opencontainers.image.source="https://github.com/consul-elector/consul-elector" \
      org.opencontainers.image.url="https://github.com/consul-elector/consul-elector" \
      org.opencontainers.image.documentation="https://github.com/consul-elector/consul-elector#readme" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="consul-elector" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=builder /build/target/release/consul-elector /usr/local/bin/consul-elector

# Numeric, so the kubelet can verify `runAsNonRoot: true` without an /etc/passwd lookup.
USER 65532:65532

# /metrics, /livez and /readyz (`consul-elector run --metrics-addr`, default 0.0.0.0:8080).
EXPOSE 8080

ENTRYPOINT ["/usr/local/bin/consul-elector"]
CMD ["run"]
