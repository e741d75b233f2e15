# What tests/compose/check.sh reads from outside the containers: the mail
# catcher's HTTP API (Mailpit's, on the published port), the product's own
# `audit --json` and `resolve`, and job_runs through psql in the postgres
# container. Sourced by check.sh, which defines compose, app, fail and say.

# shellcheck shell=bash

probe_http() { # URL: 200 or not
  python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

targets_up() { # PROMETHEUS_URL N: exactly N scrape targets, all up
  python3 - "$1" "$2" <<'EOF'
import json, sys, urllib.request
try:
    targets = json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/targets", timeout=5))
except Exception:
    sys.exit(1)
active = targets["data"]["activeTargets"]
sys.exit(0 if len(active) == int(sys.argv[2]) and all(t["health"] == "up" for t in active) else 1)
EOF
}

# Every message's Message-ID in the catcher, one a line (without <>), read
# page by page as Mailpit serves them.
catcher_ids() {
  python3 - "$catcher" <<'EOF'
import json, sys, urllib.request
start, total = 0, None
while total is None or start < total:
    url = f"{sys.argv[1]}/api/v1/messages?start={start}&limit=1000"
    page = json.load(urllib.request.urlopen(url, timeout=10))
    total = page.get("messages_count", page["total"])
    if not page["messages"]:
        break
    for m in page["messages"]:
        print(m["MessageID"].strip("<>"))
    start += len(page["messages"])
EOF
}

catcher_count() {
  python3 - "$catcher" <<'EOF'
import json, sys, urllib.request
page = json.load(urllib.request.urlopen(f"{sys.argv[1]}/api/v1/messages?limit=1", timeout=10))
print(page.get("messages_count", page["total"]))
EOF
}

mail_arrived_since() { # BEFORE N: at least N more messages than BEFORE
  [ "$(catcher_count)" -ge $(($1 + $2)) ]
}

check_no_message_id_twice() { # WHEN
  local twice
  twice=$(catcher_ids | sort | uniq -d)
  [ -z "$twice" ] || fail "$1: the catcher received a Message-ID twice: $(echo "$twice" | head -n 5 | tr '\n' ' ')"
}

sql() { compose exec -T postgres psql -U postgres -d invoice_reminder -Atqc "$1"; }

sent_rows() { sql "SELECT count(*) FROM invoice_reminder.reminders WHERE status = 'sent'"; }

# The open (unfinished) tick: "RUN_ID HOSTNAME" (replica_id is hostname-pid,
# and a container's hostname is its short id).
open_run() {
  sql "SELECT id || ' ' || regexp_replace(replica_id, '-[0-9]+$', '')
         FROM invoice_reminder.job_runs WHERE finished_at IS NULL ORDER BY id DESC LIMIT 1"
}
run_started_after() { # RUN HOSTNAME: a later tick by another replica
  [ "$(sql "SELECT count(*) FROM invoice_reminder.job_runs
              WHERE id > $1 AND replica_id NOT LIKE '$2-%'")" -gt 0 ]
}
run_finished() { [ "$(sql "SELECT finished_at IS NOT NULL FROM invoice_reminder.job_runs WHERE id = $1")" = t ]; }
run_outcome() { sql "SELECT coalesce(outcome, 'none') FROM invoice_reminder.job_runs WHERE id = $1"; }

# audit's report (--json) in a file; its path on stdout. Empty when audit
# could not run (it exits 1 on duplicates, with the report).
audit_report() {
  local file
  file=$(mktemp -p "$scratch" audit.XXXXXX)
  app audit --json >"$file" 2>/dev/null || true
  echo "$file"
}

# A field of audit's report: duplicates, unknown, missing, sending, failed.
audit_field() { # FIELD [REPORT_FILE]
  local file=${2:-$(audit_report)}
  python3 - "$1" "$file" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
print({
    "duplicates": len(r["duplicates"]),
    "unknown": len(r["unknown"]),
    "missing": r["missing_count"],
    "sending": r["counts"].get("sending", 0),
    "failed": len(r["failed"]),
}[sys.argv[1]])
EOF
}

unknown_rows() { audit_field unknown; }

# Quiet: every owed invoice has its reminder, and every row still 'sending'
# is an unknown one (its run has ended), waiting for an operator.
settled_and_owed_none() {
  local json
  json=$(audit_report)
  [ -s "$json" ] || return 1
  [ "$(audit_field missing "$json")" = 0 ] &&
    [ "$(audit_field sending "$json")" = "$(audit_field unknown "$json")" ]
}

# Done: every owed invoice has its reminder, sent (nothing being sent,
# unknown or waiting for a retry).
all_mailed() {
  local json
  json=$(audit_report)
  [ -s "$json" ] || return 1
  [ "$(audit_field missing "$json")" = 0 ] &&
    [ "$(audit_field sending "$json")" = 0 ] &&
    [ "$(audit_field failed "$json")" = 0 ]
}

# Settles every unknown row as the operator would: each stored Message-ID
# looked up in the catcher; found: resolve --sent, not found: --resend.
# Sets settled_sent and settled_resend (rows).
settle_unknown() { # WHEN
  local plan sent_ids resend_ids report caught
  report=$(audit_report)
  caught=$(mktemp -p "$scratch" caught.XXXXXX)
  catcher_ids >"$caught"
  plan=$(python3 -c '
import json, sys
report = json.load(open(sys.argv[1]))
caught = set(open(sys.argv[2]).read().split())
sent, resend, rows_sent, rows_resend = [], [], 0, 0
for mail in report["unknown_mails"]:
    if mail["message_id"] is None:
        sys.exit("an unknown row without a stored Message-ID: reminders %s" % mail["reminder_ids"])
    first = str(mail["reminder_ids"][0])
    if mail["message_id"].strip("<>") in caught:
        sent.append(first); rows_sent += len(mail["reminder_ids"])
    else:
        resend.append(first); rows_resend += len(mail["reminder_ids"])
print(rows_sent, rows_resend)
print(" ".join(sent))
print(" ".join(resend))' "$report" "$caught") || fail "$1: cannot settle the unknown rows"
  settled_sent=$(sed -n 1p <<<"$plan" | cut -d' ' -f1)
  settled_resend=$(sed -n 1p <<<"$plan" | cut -d' ' -f2)
  sent_ids=$(sed -n 2p <<<"$plan")
  resend_ids=$(sed -n 3p <<<"$plan")
  # One call each: resolve takes --sent or --resend, not both.
  # shellcheck disable=SC2086 # ids are numbers
  [ -z "$sent_ids" ] || app resolve --sent $sent_ids >/dev/null || fail "$1: resolve --sent failed"
  # shellcheck disable=SC2086
  [ -z "$resend_ids" ] || app resolve --resend $resend_ids >/dev/null || fail "$1: resolve --resend failed"
}

# Every owed invoice mailed exactly once: nothing missing or unknown or
# failed, audit finds no duplicate, the catcher holds as many messages as
# there are sent rows, and no Message-ID twice. With "handed-back", owed
# invoices without a reminder are allowed (a stop hands the rest back).
check_exactly_once() { # WHEN [handed-back]
  local json n fields=(duplicates unknown missing failed)
  [ "${2:-}" != handed-back ] || fields=(duplicates unknown failed)
  json=$(audit_report)
  [ -s "$json" ] || fail "$1: audit failed"
  for field in "${fields[@]}"; do
    n=$(audit_field "$field" "$json")
    [ "$n" = 0 ] || fail "$1: audit reports $n $field"
  done
  check_no_message_id_twice "$1"
  local sent mailed
  sent=$(sent_rows)
  mailed=$(catcher_count)
  [ "$sent" = "$mailed" ] || fail "$1: $sent sent rows but $mailed messages in the catcher"
}
