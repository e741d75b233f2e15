#!/usr/bin/env python3
"""A mail catcher standing in for Mailpit where its image cannot be pulled.

SMTP on port 1025 accepts every message (no auth, no TLS, like Mailpit's
defaults); HTTP on port 8025 answers the part of Mailpit's API that
tests/compose/check.sh reads:

  GET    /api/v1/messages?start=N&limit=N   newest first, Mailpit's shape
  DELETE /api/v1/messages                   delete every message
  GET    /livez, /readyz                    200

Each message keeps its Message-ID header without the angle brackets, as
Mailpit's MessageID field does. Standard library only (Debian's python3).
"""

import email.parser
import email.policy
import email.utils
import json
import signal
import sys
import socketserver
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

LOCK = threading.Lock()
MESSAGES = []  # oldest first


def address(value):
    name, addr = email.utils.parseaddr(value or "")
    return {"Name": name, "Address": addr}


def store(raw, envelope_from, recipients):
    headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)
    message_id = (headers.get("Message-ID") or "").strip().strip("<>")
    summary = {
        "ID": uuid.uuid4().hex,
        "MessageID": message_id,
        "Read": False,
        "From": address(headers.get("From") or envelope_from),
        "To": [address(a) for a in headers.get_all("To", [])] or [address(r) for r in recipients],
        "Cc": [],
        "Bcc": [],
        "ReplyTo": [address(a) for a in headers.get_all("Reply-To", [])],
        "Subject": str(headers.get("Subject") or ""),
        "Created": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "Tags": [],
        "Size": len(raw),
        "Attachments": 0,
        "Snippet": "",
    }
    with LOCK:
        MESSAGES.append(summary)


class Smtp(socketserver.StreamRequestHandler):
    """RFC 5321's minimum: HELO/EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    def reply(self, line):
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self):
        self.reply("220 catcher ESMTP")
        sender, recipients = None, []
        while True:
            line = self.rfile.readline()
            if not line:
                return
            verb = line.decode("latin-1").strip()
            upper = verb.upper()
            if upper.startswith("EHLO"):
                self.reply("250-catcher")
                self.reply("250-8BITMIME")
                self.reply("250-SMTPUTF8")
                self.reply("250 SIZE 0")
            elif upper.startswith("HELO"):
                self.reply("250 catcher")
            elif upper.startswith("MAIL FROM:"):
                sender, recipients = verb[10:].split(" ")[0].strip("<>"), []
                self.reply("250 OK")
            elif upper.startswith("RCPT TO:"):
                recipients.append(verb[8:].split(" ")[0].strip("<>"))
                self.reply("250 OK")
            elif upper == "DATA":
                if sender is None or not recipients:
                    self.reply("503 need MAIL and RCPT first")
                    continue
                self.reply("354 end with <CRLF>.<CRLF>")
                lines = []
                while True:
                    data = self.rfile.readline()
                    if not data:
                        return
                    if data in (b".\r\n", b".\n"):
                        break
                    lines.append(data[1:] if data.startswith(b"..") else data)
                store(b"".join(lines), sender, recipients)
                sender, recipients = None, []
                self.reply("250 OK: queued")
            elif upper == "RSET":
                sender, recipients = None, []
                self.reply("250 OK")
            elif upper == "NOOP":
                self.reply("250 OK")
            elif upper == "QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("502 command not implemented")


class Api(BaseHTTPRequestHandler):
    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path in ("/livez", "/readyz"):
            self.send_json(200, "ok")
            return
        if url.path != "/api/v1/messages":
            self.send_json(404, {"error": "not found"})
            return
        query = parse_qs(url.query)
        start = int(query.get("start", ["0"])[0])
        limit = int(query.get("limit", ["50"])[0])
        with LOCK:
            newest_first = list(reversed(MESSAGES))
        page = newest_first[start : start + limit]
        self.send_json(200, {
            "total": len(newest_first),
            "unread": len(newest_first),
            "count": len(page),
            "messages_count": len(newest_first),
            "start": start,
            "tags": [],
            "messages": page,
        })

    def do_DELETE(self):
        if urlparse(self.path).path != "/api/v1/messages":
            self.send_json(404, {"error": "not found"})
            return
        with LOCK:
            MESSAGES.clear()
        self.send_json(200, "ok")

    def log_message(self, *args):
        pass


class SmtpServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


if __name__ == "__main__":
    # PID 1 in a container: without a handler SIGTERM would be ignored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    smtp = SmtpServer(("0.0.0.0", 1025), Smtp)
    threading.Thread(target=smtp.serve_forever, daemon=True).start()
    ThreadingHTTPServer(("0.0.0.0", 8025), Api).serve_forever()
