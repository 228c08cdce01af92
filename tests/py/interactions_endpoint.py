"""An HTTP interactions endpoint as a bot author writes one, verifying the
platform's Ed25519 signatures with PyNaCl (tests/egress.rs).

    python interactions_endpoint.py VERIFY_KEY_HEX [hang]

Listens on 127.0.0.1 (a free port, printed as `port=N` on stdout), checks
X-Signature-Ed25519 over X-Signature-Timestamp + body, answers 401 to a bad
or missing signature, 200 {"type":1} to a PING, and 200 with a message to
anything else (with `hang`: answers anything else only after 10 s, an
endpoint too slow for the 3-second rule). Each request it verified or
refused is logged to stderr.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

KEY = VerifyKey(bytes.fromhex(sys.argv[1]))
HANG = len(sys.argv) > 2 and sys.argv[2] == "hang"


class Endpoint(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        sig = self.headers.get("X-Signature-Ed25519", "")
        ts = self.headers.get("X-Signature-Timestamp", "")
        try:
            KEY.verify(ts.encode() + body, bytes.fromhex(sig))
        except (BadSignatureError, ValueError):
            sys.stderr.write("endpoint: refused a bad signature\n")
            self.answer(401, {"error": "invalid request signature"})
            return
        sys.stderr.write("endpoint: verified a signature\n")
        data = json.loads(body)
        if data.get("type") == 1:
            self.answer(200, {"type": 1})
        else:
            if HANG:
                time.sleep(10)
            name = data.get("data", {}).get("name", "")
            self.answer(200, {"type": 4, "data": {"content": f"pong from http ({name})"}})

    def answer(self, status, obj):
        out = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
print(f"port={server.server_address[1]}", flush=True)
server.serve_forever()
