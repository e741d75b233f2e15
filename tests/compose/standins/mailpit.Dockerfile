# A mail catcher standing in for axllent/mailpit: SMTP on 1025, the part of
# Mailpit's HTTP API that check.sh reads on 8025 (catcher.py).
ARG BASE
FROM ${BASE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
COPY catcher.py /usr/local/bin/
EXPOSE 1025 8025
USER nobody
CMD ["python3", "-u", "/usr/local/bin/catcher.py"]
