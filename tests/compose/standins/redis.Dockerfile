# Redis from Debian's packages, standing in for the official redis image:
# `redis-server ARGS` runs with protected mode off, as the official entrypoint
# starts it without a configuration file, so other containers may connect;
# redis-cli is on the PATH for the healthcheck.
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
COPY redis-entrypoint.sh /usr/local/bin/
EXPOSE 6379
ENTRYPOINT ["redis-entrypoint.sh"]
CMD ["redis-server"]
