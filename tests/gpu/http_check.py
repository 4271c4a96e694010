#!/usr/bin/env python3
"""http_check.py - every route of `rapid serve --device cuda`, driven by a raw-HTTP client of
Python's standard library, for the GPU machine (which has Python but no Node.js for the
e2e suite): status codes, body shapes, SSE framing, streaming == non-streaming greedy text,
the same text twice (determinism), errors in the API's shape, a client that goes away.

Usage: python3 tests/gpu/http_check.py RAPID_BINARY [DEVICE]   (DEVICE default cuda)
Exit status 0 when every check passed; each failure is printed.
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

FAILS = []
PASSED = [0]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if cond:
        PASSED[0] += 1
    else:
        FAILS.append(what)


def start(binary, device, extra=()):
    cache = tempfile.mkdtemp(prefix="rapid-gpu-check-")
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    p = subprocess.Popen([binary, "serve", "--device", device, "--port", "0", *extra], stderr=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env, text=True)
    deadline = time.time() + 120
    lines = []
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on http://([\d.]+):(\d+)", line)
        if m:
            return p, int(m.group(2)), lines
    p.kill()
    raise SystemExit("the server did not start:\n" + "".join(lines))


def request(port, method, path, body=None, headers=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, dict(r.getheaders()), raw


def sse_events(raw):
    """The data payloads of an event stream, strictly framed (every event ends with a blank line)."""
    text = raw.decode("utf-8")
    check(text.endswith("\n\n"), "stream ends with a blank line")
    out = []
    for block in text.split("\n\n")[:-1]:
        data = [l[5:].lstrip(" ") for l in block.split("\n") if l.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


def chat(port, stream, msg="Write a Python function that adds two numbers.", n=48):
    body = {"messages": [{"role": "user", "content": msg}], "max_tokens": n, "temperature": 0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return request(port, "POST", "/v1/chat/completions", body)


def main():
    binary = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cuda"
    p, port, lines = start(binary, device)
    check(any(("device " + device) in l for l in lines), "the start lines name the device: " + "".join(lines[:3]))
    try:
        st, _, raw = request(port, "GET", "/health")
        check(st == 200, "GET /health 200")
        st, _, raw = request(port, "GET", "/v1/models")
        check(st == 200 and json.loads(raw)["data"][0]["id"], "GET /v1/models")
        st, _, raw = chat(port, False)
        body = json.loads(raw) if st == 200 else {}
        text = body.get("choices", [{}])[0].get("message", {}).get("content", "")
        check(st == 200 and len(text) > 0, "chat completion: %r" % text[:80])
        check(body.get("usage", {}).get("completion_tokens", 0) > 0, "chat usage")
        st2, _, raw2 = chat(port, False)
        text2 = json.loads(raw2)["choices"][0]["message"]["content"] if st2 == 200 else None
        check(text2 == text, "the same greedy text twice")
        st, hd, raw = chat(port, True)
        check(st == 200 and "text/event-stream" in hd.get("Content-Type", ""), "streaming chat: event stream")
        ev = sse_events(raw)
        check(ev and ev[-1] == "[DONE]", "streaming chat ends with [DONE]")
        streamed = ""
        usage = None
        for e in ev[:-1]:
            j = json.loads(e)
            for ch in j.get("choices", []):
                streamed += ch.get("delta", {}).get("content") or ""
            usage = j.get("usage") or usage
        check(streamed == text, "streaming text == non-streaming text")
        check(usage and usage.get("completion_tokens", 0) > 0, "streamed usage")
        st, _, raw = request(port, "POST", "/v1/completions",
                             {"prompt": "def fib(n):", "max_tokens": 32, "temperature": 0})
        check(st == 200 and json.loads(raw)["choices"][0]["text"] != "", "completions")
        st, _, raw = request(port, "POST", "/v1/messages",
                             {"max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}]})
        check(st == 200 and json.loads(raw)["content"][0]["type"] == "text", "anthropic messages")
        st, _, raw = request(port, "POST", "/v1/messages",
                             {"max_tokens": 32, "stream": True, "messages": [{"role": "user", "content": "Hi"}]})
        check(st == 200 and "message_stop" in raw.decode(), "anthropic messages stream")
        st, _, raw = request(port, "POST", "/v1/responses", {"input": "Say hello.", "max_output_tokens": 32})
        check(st == 200 and json.loads(raw)["status"] in ("completed", "incomplete"), "responses")
        st, _, raw = request(port, "POST", "/v1/responses",
                             {"input": "Say hello.", "max_output_tokens": 32, "stream": True})
        check(st == 200 and ("response.completed" in raw.decode() or "response.incomplete" in raw.decode()),
              "responses stream")
        st, _, raw = request(port, "POST", "/v1/chat/completions", b"{not json")
        check(st == 400 and "error" in json.loads(raw), "malformed JSON is a 400 in the API's shape")
        # Concurrent streams: each gets its own greedy text, the same as alone.
        conns = []
        for i in range(8):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/chat/completions",
                      body=json.dumps({"messages": [{"role": "user", "content": "Count to %d." % (i + 3)}],
                                       "max_tokens": 40, "temperature": 0}),
                      headers={"Content-Type": "application/json"})
            conns.append(c)
        batch = []
        for c in conns:
            r = c.getresponse()
            batch.append(json.loads(r.read())["choices"][0]["message"]["content"] if r.status == 200 else None)
            c.close()
        alone = []
        for i in range(8):
            st, _, raw = request(port, "POST", "/v1/chat/completions",
                                 {"messages": [{"role": "user", "content": "Count to %d." % (i + 3)}],
                                  "max_tokens": 40, "temperature": 0})
            alone.append(json.loads(raw)["choices"][0]["message"]["content"] if st == 200 else "")
        check(batch == alone, "8 concurrent requests give the texts they give alone")
        # A client that goes away mid-stream: the server goes on serving.
        s = socket.create_connection(("127.0.0.1", port))
        b = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 400,
                        "stream": True}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(b) + b)
        s.recv(100)
        s.close()
        st, _, raw = request(port, "GET", "/health")
        check(st == 200, "serving after a client went away")
        st, _, raw = request(port, "GET", "/metrics")
        check(st == 200 and b"rapid_" in raw, "GET /metrics")
    finally:
        p.terminate()
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = -9
        check(rc == 0, "the server exits cleanly on SIGTERM (status %d)" % rc)
    print("%d passed, %d failed" % (PASSED[0], len(FAILS)))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
