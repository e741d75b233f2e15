# invoice-reminder as a container image.
#
#   docker build -t invoice-reminder:local .      # BuildKit: DOCKER_BUILDKIT=1 with older clients
#   docker run --rm invoice-reminder:local --help
#
# Two stages: the builder compiles a release binary from the whole build
# context (.dockerignore is an allowlist), with BuildKit cache mounts for the
# cargo registry and the target directory, so a rebuild after editing src/
# recompiles only the crate and nothing here can drift from Cargo.toml (a
# new [[bench]] or [[example]] is simply in the context). The runtime stage
# is Debian slim with the binary only: migrations and the default settings
# are compiled in, TLS is rustls, so it needs no files and no OpenSSL.
#
# RUN --mount needs BuildKit, whose built-in frontend reads this file (no
# `# syntax=` line: that would fetch a frontend image from a registry).
#
# The bases are build args defaulting to the official images. On a machine
# without a registry, tests/compose/check.sh builds this file unchanged with
# local stand-ins: --build-arg RUST_IMAGE=... --build-arg RUNTIME_IMAGE=...

ARG RUST_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /build
COPY . .
# The binary is copied out of the cache-mounted target directory, which is
# not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/build/target \
    cargo build --release --locked --bin invoice-reminder \
    && cp target/release/invoice-reminder invoice-reminder


FROM ${RUNTIME_IMAGE} AS runtime

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin app

# The defaults are compiled into the binary; config/ is copied as the
# documented starting point, and compose points INVOICE_REMINDER_CONFIG at
# config/docker.toml.
WORKDIR /app
COPY --from=builder /build/invoice-reminder /usr/local/bin/invoice-reminder
COPY config ./config

USER app
# /healthz, /readyz and /metrics when http.listen is set (config/docker.toml).
EXPOSE 9464
# `run` shuts down gracefully on SIGTERM (the default stop signal); give it
# longer than shutdown.timeout to do so (compose: stop_grace_period).
ENTRYPOINT ["invoice-reminder"]
CMD ["run"]
