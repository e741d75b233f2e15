#!/bin/sh
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  cd /var/lib/redis
  exec setpriv --reuid=redis --regid=redis --init-groups \
    redis-server --protected-mode no "$@"
fi
exec "$@"
