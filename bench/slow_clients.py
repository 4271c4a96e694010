#!/usr/bin/env python3
"""bench/slow_clients.py - how many slow clients it takes to deny service.

Starts `rapid serve` (the bundled model, a free port, FLAGS after --), then for each count K:
opens K connections from 127.0.0.1 that send a partial request head
("GET /health HTTP/1.1\\r\\nX-a: " and nothing more: a slowloris client), with --kind line
half a request line ("GET /hea"), or with --kind body a whole head announcing a 1000-byte
body and none of it, and keeps them open,
then sends one normal GET /health from 127.0.0.1 and one from 127.0.0.2 (another loopback
address) on fresh connections, each with a 5 s limit, and prints what each got: the status
(200, or 503 with Retry-After: the server's visible busy answer) or the failure (reset,
timeout). The slow connections are closed before the next K. Nothing is timed but the
5 s limit of each normal request.

Usage: bench/slow_clients.py [--binary build/rapid] [--counts 100,500,...] [-- FLAGS...]
"""
import argparse
import os
import re
import resource
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def normal_request(port, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
        m = re.match(rb"HTTP/1\.\d (\d+)", data)
        if not m:
            return "closed without an answer" if not data else "garbage"
        st = m.group(1).decode()
        if st == "503":
            ra = re.search(rb"(?i)\r\nretry-after: *(\d+)", data)
            st += " (Retry-After: %s)" % (ra.group(1).decode() if ra else "none")
        return st
    except socket.timeout:
        return "no answer in 5 s"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "rapid"))
    ap.add_argument("--counts", default="100,500,1000,1100,2000,4000")
    ap.add_argument("--kind", choices=["head", "line", "body"], default="head")
    ap.add_argument("flags", nargs="*")
    a = ap.parse_args()
    counts = [int(x) for x in a.counts.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(counts) + 256)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    env = dict(os.environ, RAPID_MODELS=os.path.join(ROOT, "models"))
    proc = subprocess.Popen([a.binary, "serve", "--port", "0", "--ctx", "512", "--no-disk-cache", "-q"] + a.flags,
                            stderr=subprocess.PIPE, env=env)
    port = None
    for line in proc.stderr:
        m = re.search(rb"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    assert port, "the server did not start"
    print("binary %s, slow %s, flags %s, open files limit %d" % (a.binary, a.kind, " ".join(a.flags) or "(none)",
                                                       resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    print("| slow connections from 127.0.0.1 | GET /health from 127.0.0.1 | from 127.0.0.2 |")
    print("|---|---|---|")
    try:
        for k in counts:
            slow = []
            opened = 0
            for _ in range(k):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(2)
                try:
                    s.connect(("127.0.0.1", port))
                    if a.kind == "head":
                        s.sendall(b"GET /health HTTP/1.1\r\nX-a: ")
                    elif a.kind == "line":
                        s.sendall(b"GET /hea")
                    else:
                        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
                    opened += 1
                except OSError:
                    pass
                slow.append(s)
            time.sleep(0.5)  # let the server accept (and police) them
            a1 = normal_request(port, "127.0.0.1")
            a2 = normal_request(port, "127.0.0.2")
            print("| %d | %s | %s |" % (k, a1, a2), flush=True)
            for s in slow:
                s.close()
            time.sleep(1.0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
