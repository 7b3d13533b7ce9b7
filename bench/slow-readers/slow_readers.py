#!/usr/bin/env python3
"""N slow readers of a large file, and fresh clients beside them (issue 46's load).

Usage: slow_readers.py PORT N PATH FRESH

Each of N clients connects with an 8 KiB receive buffer (set before connect, so the window
it offers is that small too), sends `GET PATH`, and then reads 4 KiB a second (their turns
spread over the second). After a 5 s warm-up, FRESH fresh clients, one every 0.5 s, each
connect anew, request /1b and wait up to 5 s for the whole response. Prints one line:
how many downloads received bytes during the fresh phase, how many the server closed, the
fresh clients answered, and their latencies (p50, p99, max; connect included).
"""
import socket
import sys
import threading
import time

port, n, path, fresh = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
req = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()

conns = []
for i in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    s.settimeout(30)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(req)
    except OSError as e:
        print(f"connect {i}: {e}", file=sys.stderr)
        s.close()
        continue
    s.setblocking(False)
    conns.append(s)

got = [0] * len(conns)
closed = [False] * len(conns)
stop = False


def reader():
    start = time.monotonic()
    m = len(conns)
    nxt = [start + i / max(m, 1) for i in range(m)]
    while not stop:
        now = time.monotonic()
        for i, s in enumerate(conns):
            if closed[i] or now < nxt[i]:
                continue
            nxt[i] += 1.0
            try:
                b = s.recv(4096)
                if not b:
                    closed[i] = True
                got[i] += len(b)
            except BlockingIOError:
                pass
            except OSError:
                closed[i] = True
        time.sleep(0.01)


t = threading.Thread(target=reader)
t.start()
time.sleep(5)

before = list(got)
lat = []
answered = 0
for k in range(fresh):
    t0 = time.monotonic()
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        c.settimeout(max(0.01, 5 - (time.monotonic() - t0)))
        c.sendall(b"GET /1b HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            b = c.recv(65536)
            if not b:
                break
            data += b
        c.close()
        if data.startswith(b"HTTP/1.1 200") and time.monotonic() - t0 <= 5:
            answered += 1
            lat.append((time.monotonic() - t0) * 1000)
    except OSError:
        pass
    time.sleep(max(0, 0.5 - (time.monotonic() - t0)))
after = list(got)
stop = True
t.join()

receiving = sum(1 for a, b in zip(after, before) if a > b)
lat.sort()


def pct(p):
    if not lat:
        return float("nan")
    return lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))]


print(
    f"connected={len(conns)} receiving={receiving} closed={sum(closed)} "
    f"fresh_answered={answered}/{fresh} p50_ms={pct(50):.1f} p99_ms={pct(99):.1f} "
    f"max_ms={(lat[-1] if lat else float('nan')):.1f}"
)
for s in conns:
    s.close()
