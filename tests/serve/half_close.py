#!/usr/bin/env python3
"""half_close.py PORT PATH BODY [TIMEOUT]: sends one POST, then shutdown(SHUT_WR)
as `nc -N` and some proxies do, and prints what comes back (status line and body,
chunked transfer decoded) until the server closes or TIMEOUT seconds pass."""
import socket
import sys

port, path, body = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 60
s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
          b"Connection: close\r\n\r\n%s" % (path.encode(), len(body), body))
s.shutdown(socket.SHUT_WR)
raw = b""
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        raw += chunk
except socket.timeout:
    pass
head, _, rest = raw.partition(b"\r\n\r\n")
if b"transfer-encoding: chunked" in head.lower():
    out = b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out, rest = out + rest[:n], rest[n + 2:]
    rest = out
print(head.split(b"\r\n")[0].decode() if head else "NO ANSWER")
sys.stdout.write(rest.decode("utf-8", "replace"))
