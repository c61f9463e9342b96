#!/usr/bin/env python3
"""A tiny OTLP/HTTP sink for bench/trace_cost.sh (part of BENCHMARKS.md, issue 26).

Answers 200 (an empty ExportTraceServiceResponse) to every POST /v1/traces and counts the
requests and the bytes of their bodies; GET /stats answers {"requests": N, "bytes": B}. It
decodes nothing: it stands for a collector that costs the node nothing beyond the export.

usage: otlp_sink.py PORT   (listens on 127.0.0.1:PORT until killed)
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTS = {"requests": 0, "bytes": 0}
LOCK = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.split("?")[0] == "/v1/traces":
            with LOCK:
                COUNTS["requests"] += 1
                COUNTS["bytes"] += len(body)
            self.answer(200, b"", "application/x-protobuf")
        else:
            self.answer(404, b"", "text/plain")

    def do_GET(self):
        if self.path == "/stats":
            with LOCK:
                text = json.dumps(COUNTS).encode()
            self.answer(200, text, "application/json")
        else:
            self.answer(404, b"", "text/plain")

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)
    server.daemon_threads = True
    server.serve_forever()
