# PostgreSQL from Debian's packages, standing in for the official postgres
# image where it cannot be pulled: POSTGRES_PASSWORD (required), POSTGRES_USER
# and POSTGRES_DB on first start, data in PGDATA, pg_isready on the PATH,
# TCP only once the database is created (as the official entrypoint does).
ARG BASE
FROM ${BASE}
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/no-main.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["postgres-entrypoint.sh"]
CMD ["postgres"]
