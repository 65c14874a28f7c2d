"""What the Svix SDK suites share: checks with a closing count, a webhook receiver on
127.0.0.1, and Svix's verifier applied to the svix-* headers alone."""
import http.server
import threading
import time

from svix.webhooks import Webhook, WebhookVerificationError

PATIENCE_S = 20

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} {name}{'' if ok else ': ' + str(detail)}", flush=True)


class Receiver:
    """A webhook receiver on 127.0.0.1 that keeps what it gets and answers `status`."""

    def __init__(self, status=200):
        self.requests, self.status = [], status
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.requests.append((headers, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, n):
        deadline = time.monotonic() + PATIENCE_S
        while len(self.requests) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.requests) >= n

    def ids(self):
        return [h.get("svix-id") for h, _ in self.requests]


def verifies(secret, headers, body):
    """Svix's verifier on the svix-* headers alone."""
    only_svix = {k: v for k, v in headers.items() if k.startswith("svix-")}
    try:
        Webhook(secret).verify(body, only_svix)
        return True
    except WebhookVerificationError:
        return False


def eventually(get, ok):
    """`get()` until `ok` holds of its answer (an attempt is recorded just after the receiver
    saw it), or its last answer when patience runs out."""
    deadline = time.monotonic() + PATIENCE_S
    value = get()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = get()
    return value


def settle(seconds=0.3):
    """Room for a delivery that should not happen to show up before the test says it did not."""
    time.sleep(seconds)


