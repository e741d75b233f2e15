# The builder stage's base, standing in for the official rust image: this
# machine's toolchain (rustc's sysroot, without its docs) at /usr/local/rust,
# gcc and make (tikv-jemalloc-sys runs make), CARGO_HOME=/usr/local/cargo
# as in the official image. The crates of Cargo.lock are vendored in
# /usr/local/cargo/vendor and used through CARGO_HOME's config.toml, so the
# project's Dockerfile builds unchanged with no network.
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc make libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY toolchain/ /usr/local/rust/
COPY vendor/ /usr/local/cargo/vendor/
COPY cargo-config.toml /usr/local/cargo/config.toml
