# invoice-reminder as a container image.
#
#   docker build -t invoice-reminder:local .
#   docker run --rm invoice-reminder:local --help
#
# Two stages: the builder compiles a release binary (dependencies first, in a
# layer of their own, so editing src/ does not rebuild them); the runtime
# stage is Debian slim with the binary and config/ only. Migrations are
# embedded in the binary by sqlx::migrate!, and TLS is rustls, so the image
# needs neither a migrations directory nor OpenSSL.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /build

# 1. Dependencies only: the manifest, the lock file and empty targets. This
#    layer is rebuilt when Cargo.toml or Cargo.lock change, not when src/ does.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin invoice-reminder \
    && rm -rf src

# 2. The real sources. COPY keeps the files' old modification times, which
#    are older than the placeholder build, so touch them to make cargo
#    rebuild the crate itself (and re-embed the migrations).
COPY src ./src
COPY migrations ./migrations
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --bin invoice-reminder


FROM debian:bookworm-slim AS runtime

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin app

# The defaults are compiled into the binary; config/ is copied as the
# documented starting point, and compose points INVOICE_REMINDER_CONFIG at
# config/docker.toml.
WORKDIR /app
COPY --from=builder /build/target/release/invoice-reminder /usr/local/bin/invoice-reminder
COPY config ./config

USER app
# `run` shuts down gracefully on SIGTERM (the default stop signal); give it
# longer than shutdown.timeout to do so (compose: stop_grace_period).
ENTRYPOINT ["invoice-reminder"]
CMD ["run"]
