#!/usr/bin/env python3
"""Slow senders of request heads, and fresh clients beside them (issues 47 and 48's loads).

Two modes, run as two processes by run.sh so that the fresh clients' latency is not
measured behind the slow clients' loop:

  slow_senders.py slow PORT N LOAD READY_FILE STOP_FILE
  slow_senders.py fresh PORT FRESH PATH [tls]

`slow` opens N connections to 127.0.0.1:PORT (non-blocking connects, at most 256 in
flight; spread over source addresses 127.0.0.1 .. 127.0.0.K when N needs more than one
address's ephemeral ports) and, as each connects, sends
  LOAD=head:      `GET /i.html HTTP/1.1\\r\\nHost: x\\r\\n`, then one more header byte every
                  2 s (`X-a: b\\r\\n` over and over), never ending the head;
  LOAD=byte:      `G`, then nothing;
  LOAD=tls-hello: `16 03 01 02 00`, the header of a TLS handshake record that announces a
                  512-byte ClientHello, then nothing (a stalled handshake);
  LOAD=tls-head:  a TLS handshake (Python's ssl module, no certificate check; the handshakes
                  run concurrently, each stepped in the epoll loop as OpenSSL asks to read
                  or write), and once it completes, LOAD=head's bytes over TLS: the GET
                  line and Host, then one header byte every 2 s, each in its own record.
When all N have connected (for tls-head: and each has finished its handshake, or no
handshake has finished for 2 s: a server that handshakes only as many as it has threads
leaves the rest waiting; theirs finish later, when the server gets to them, and they
dribble from then on) it writes READY_FILE, and it goes on (dribbling, and noting every
connection the server closes or resets) until STOP_FILE exists. Then prints one line:
connected, still open, closed by the server, how many of those got a response first (and
how many of them a 408), the median seconds from connect to close, and the connects that
failed; for tls-head also the handshakes finished when READY_FILE was written and by the
end. A connection is connected once TCP is (a handshake the server closes counts as
closed by the server).

`fresh` makes FRESH requests for PATH, one every 0.5 s (open loop: each starts on time
whether or not the ones before it have been answered), each on a new connection with
`Connection: close` and a 5 s limit for the whole response (connect included; with `tls`
over HTTPS: a new TCP connection and a full TLS handshake each, no session resumption,
both inside the limit), and returns when the last one's limit is up, (FRESH - 1) / 2 + 5 s
after the first, on every server. Prints one line: answered (status 200 within 5 s),
failed, p50 / p99 / max latency (ms) of the answered ones.
"""
import errno
import os
import resource
import select
import socket
import ssl
import sys
import threading
import time

hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
IP_BIND_ADDRESS_NO_PORT = 24  # Linux: the port is chosen at connect(), per destination
HEAD = b"GET /i.html HTTP/1.1\r\nHost: x\r\n"
DRIBBLE = b"X-a: b\r\n"
PERIOD = 2.0  # seconds between a head dribbler's bytes
TICK = 0.01  # the dribble schedule's slot: PERIOD / TICK slots, sockets spread over them
HANDSHAKE_QUIET = 2.0  # tls-head: READY once no handshake has finished for this long
# What each load sends once connected (tls-head: once its handshake has finished).
FIRST = {"head": HEAD, "byte": b"G", "tls-hello": b"\x16\x03\x01\x02\x00", "tls-head": HEAD}


def client_context():
    """A TLS client that takes the run's self-signed certificate without checking it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def slow(port, n, load, ready_file, stop_file):
    first = FIRST[load]
    tls = client_context() if load == "tls-head" else None
    dribbles = load in ("head", "tls-head")
    sources = 1 + n // 20000  # about 28,000 ephemeral ports per source address
    ep = select.epoll()
    socks = {}  # fd -> socket (an SSLSocket for tls-head)
    t_conn = {}  # fd -> monotonic time connected
    handshaking = set()  # tls-head: fds whose handshake has not finished
    handshaken = 0  # tls-head: handshakes finished
    last_progress = time.monotonic()  # last connect or finished handshake
    closed_at = {}  # fd -> seconds from connect to the server's close or reset
    responded = {}  # fd -> first bytes the server sent (a response before closing)
    pos = {}  # fd -> next index into DRIBBLE
    failed = 0

    def close_one(fd, now):
        if fd in closed_at:
            return
        closed_at[fd] = now - t_conn[fd]
        handshaking.discard(fd)
        try:
            ep.unregister(fd)
        except OSError:
            pass

    def step_handshake(fd, now):
        # One step of a non-blocking handshake: wait for what OpenSSL wants, or done.
        nonlocal handshaken, last_progress
        try:
            socks[fd].do_handshake()
        except ssl.SSLWantReadError:
            ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
            return
        except ssl.SSLWantWriteError:
            ep.modify(fd, select.EPOLLOUT)
            return
        except OSError:  # the server closed or reset it, or answered with an alert
            close_one(fd, now)
            return
        handshaking.discard(fd)
        handshaken += 1
        last_progress = now
        try:
            socks[fd].send(first)
        except OSError:
            close_one(fd, now)
            return
        ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)

    def on_event(fd, ev, now):
        if fd in closed_at:
            return
        if fd in handshaking:
            step_handshake(fd, now)
            return
        try:
            d = socks[fd].recv(4096)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return  # nothing to read yet (TLS: a record that was not application data)
        except OSError:
            d = b""
        if d:
            responded.setdefault(fd, d[:64])
            return
        close_one(fd, now)

    # Connect phase: at most 256 connects in flight; tls-head's handshakes are not counted
    # there, and the phase lasts until they have all finished or stopped finishing.
    pending = {}  # fd -> (socket, started)
    started = 0
    deadline = time.monotonic() + 60

    def connecting():
        if started < n or pending:
            return True
        return bool(handshaking) and time.monotonic() - last_progress < HANDSHAKE_QUIET

    while connecting() and time.monotonic() < deadline:
        while started < n and len(pending) < 256:
            s = socket.socket()
            s.setblocking(False)
            if sources > 1:
                s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
                s.bind((f"127.0.0.{1 + started % sources}", 0))
            rc = s.connect_ex(("127.0.0.1", port))
            started += 1
            if rc not in (0, errno.EINPROGRESS):
                failed += 1
                s.close()
                continue
            pending[s.fileno()] = (s, time.monotonic())
            ep.register(s.fileno(), select.EPOLLOUT)
        for fd, ev in ep.poll(0.1):
            now = time.monotonic()
            if fd in pending:
                s, _ = pending.pop(fd)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    failed += 1
                    ep.unregister(fd)
                    s.close()
                    continue
                last_progress = now
                if tls:
                    # The SSLSocket takes over the same descriptor, registration and all.
                    socks[fd] = tls.wrap_socket(
                        s, server_hostname="localhost", do_handshake_on_connect=False
                    )
                    t_conn[fd] = now
                    pos[fd] = 0
                    handshaking.add(fd)
                    step_handshake(fd, now)
                    continue
                try:
                    s.send(first)
                except OSError:
                    failed += 1
                    ep.unregister(fd)
                    s.close()
                    continue
                socks[fd] = s
                t_conn[fd] = now
                pos[fd] = 0
                ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
            else:
                on_event(fd, ev, now)
    for fd, (s, _) in pending.items():  # never connected within the minute
        failed += 1
        ep.unregister(fd)
        s.close()
    handshaken_at_ready = handshaken
    with open(ready_file, "w") as f:
        f.write(f"{len(socks)}\n")

    # Hold phase: each head dribbler sends its next byte every PERIOD s, the sockets spread
    # over the period's slots (a tls-head one from when its handshake has finished); every
    # close or reset from the server is noted.
    slots = int(PERIOD / TICK)
    wheel = [[] for _ in range(slots)]
    for i, fd in enumerate(socks):
        wheel[i % slots].append(fd)
    t0 = time.monotonic()
    tick = 0
    while not os.path.exists(stop_file):
        nxt = t0 + (tick + 1) * TICK
        while True:
            wait = nxt - time.monotonic()
            for fd, ev in ep.poll(max(0.0, wait)):
                on_event(fd, ev, time.monotonic())
            if wait <= 0:
                break
        if dribbles:
            now = time.monotonic()
            for fd in wheel[tick % slots]:
                if fd in closed_at or fd in handshaking:
                    continue
                try:
                    socks[fd].send(DRIBBLE[pos[fd] : pos[fd] + 1])
                    pos[fd] = (pos[fd] + 1) % len(DRIBBLE)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass  # the same byte again next time round
                except OSError:
                    close_one(fd, now)
        tick += 1
    for fd, ev in ep.poll(0):
        on_event(fd, ev, time.monotonic())

    got408 = sum(1 for d in responded.values() if d.startswith(b"HTTP/1.1 408"))
    ct = sorted(closed_at.values())
    med = f"{ct[len(ct) // 2]:.1f}" if ct else "-"
    hs = f" handshaken={handshaken_at_ready} handshaken_end={handshaken}" if tls else ""
    print(
        f"connected={len(socks)} open={len(socks) - len(closed_at)} "
        f"closed={len(closed_at)} responded={len(responded)} r408={got408} "
        f"closed_after_s_p50={med} connect_failed={failed}{hs}"
    )
    for s in socks.values():
        s.close()


def fresh(port, count, path, tls):
    req = f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode()
    ctx = client_context() if tls else None
    lat = []

    def one():
        t0 = time.monotonic()

        def left():
            return max(0.01, 5 - (time.monotonic() - t0))

        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            data = b""
            try:
                c.settimeout(left())
                if ctx:
                    # The handshake, inside the limit (each of its reads gets what is left).
                    c = ctx.wrap_socket(c, server_hostname="localhost")
                c.settimeout(left())
                c.sendall(req)
                while True:
                    try:
                        b = c.recv(65536)
                    except ssl.SSLEOFError:
                        break  # TCP closed without close_notify: the response is what came
                    if not b:
                        break
                    data += b
                    c.settimeout(left())
            finally:
                c.close()
            took = time.monotonic() - t0
            if data.startswith(b"HTTP/1.1 200") and took <= 5:
                lat.append(took * 1000)
        except OSError:
            pass

    # Open loop: the k-th request starts at k x 0.5 s whether or not the ones before it
    # have been answered, so the phase lasts the same for every server.
    start = time.monotonic()
    threads = []
    for k in range(count):
        time.sleep(max(0, start + k * 0.5 - time.monotonic()))
        t = threading.Thread(target=one)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    # End at the same moment on every server, the last request's limit, so that the slow
    # clients are counted after the same time.
    time.sleep(max(0, start + (count - 1) * 0.5 + 5 - time.monotonic()))
    lat.sort()

    def pct(p):
        if not lat:
            return "-"
        return f"{lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))]:.1f}"

    print(
        f"fresh_answered={len(lat)} fresh_failed={count - len(lat)} "
        f"p50_ms={pct(50)} p99_ms={pct(99)} max_ms={pct(100)}"
    )


if __name__ == "__main__":
    a = sys.argv
    if len(a) == 7 and a[1] == "slow" and a[4] in FIRST:
        slow(int(a[2]), int(a[3]), a[4], a[5], a[6])
    elif len(a) in (5, 6) and a[1] == "fresh" and a[5:] in ([], ["tls"]):
        fresh(int(a[2]), int(a[3]), a[4], a[5:] == ["tls"])
    else:
        sys.exit(__doc__)
