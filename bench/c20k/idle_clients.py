#!/usr/bin/env python3
"""Idle keep-alive clients for bench/c20k/run.sh.

Opens N connections to PORT, spread over source addresses 127.0.0.1 .. 127.0.0.K (loopback
has about 28,000 ephemeral ports per source address), each sending one keep-alive request as
it connects; then reads every 200. Then writes "ready" to READY_FILE and waits until GO_FILE exists; then sends
the next request on every connection and counts the 200s. Prints its figures as key=value.

    idle_clients.py PORT N SOURCES READY_FILE GO_FILE
"""
import os
import resource
import select
import socket
import sys
import time

port, n, sources = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ready_file, go_file = sys.argv[4], sys.argv[5]
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
REQ = b"GET /1b HTTP/1.1\r\nHost: localhost\r\n\r\n"


def round_trip(conns, label, sent=False):
    """Sends REQ on every connection (unless `sent`), reads one response each; prints the
    counts of 200s and of failures, and the seconds it took."""
    t0 = time.time()
    ep = select.epoll()
    pending = {}
    for c in conns:
        try:
            if not sent:
                c.send(REQ)
            ep.register(c.fileno(), select.EPOLLIN)
            pending[c.fileno()] = (c, b"")
        except OSError:
            pass
    ok = 0
    failed = len(conns) - len(pending)
    deadline = t0 + 120
    while pending and time.time() < deadline:
        for fd, _ in ep.poll(1.0):
            c, buf = pending[fd]
            try:
                d = c.recv(4096)
            except OSError:
                d = b""
            if not d:
                failed += 1
                ep.unregister(fd)
                del pending[fd]
                continue
            buf += d
            if b"\r\n\r\n" in buf:
                head, _, body = buf.partition(b"\r\n\r\n")
                if len(body) >= 1:
                    ok += head.startswith(b"HTTP/1.1 200")
                    failed += not head.startswith(b"HTTP/1.1 200")
                    ep.unregister(fd)
                    del pending[fd]
                    continue
            pending[fd] = (c, buf)
    failed += len(pending)
    print(f"{label}_ok={ok} {label}_failed={failed} {label}_secs={time.time() - t0:.1f}", flush=True)
    return ok, failed


conns = []
t0 = time.time()
for i in range(n):
    c = socket.socket()
    c.bind((f"127.0.0.{1 + i % sources}", 0))
    c.setblocking(True)
    c.settimeout(30)
    c.connect(("127.0.0.1", port))
    # The first request at once, as real clients send it (a connection that says nothing
    # holds a worker until Timeout under every threaded MPM).
    c.sendall(REQ)
    c.setblocking(False)
    conns.append(c)
print(f"connected={len(conns)} connect_secs={time.time() - t0:.1f}", flush=True)
round_trip(conns, "first", sent=True)
with open(ready_file, "w") as f:
    f.write("ready\n")
while not os.path.exists(go_file):
    time.sleep(0.2)
# Connections the server closed while we waited read as EOF here.
round_trip(conns, "next")
