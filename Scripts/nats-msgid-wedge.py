#!/usr/bin/env python3
"""Reproduces the nats-server defect that decides the supported releases (docs/OPERATIONS.md §20).

Starts a 3-node cluster on loopback with the given nats-server, creates an R3 stream, publishes
with the right Nats-Expected-Last-Sequence but a stale Nats-Expected-Last-Msg-Id (answered
10070, as it should be), then checks that the stream still takes writes. 2.14.0 and later
print RESULT WEDGED (every replica logs "critical write error: last msgid mismatch");
2.10.26, 2.11.11 and 2.12.8 print RESULT OK.

Usage: Scripts/nats-msgid-wedge.py PATH-TO-nats-server [BASE-PORT]
"""
import json, os, shutil, socket, subprocess, sys, tempfile, time

BIN = sys.argv[1]
base = int(sys.argv[2]) if len(sys.argv) > 2 else 24000
d = tempfile.mkdtemp(prefix="wedge")
procs = []
cports = [base + i for i in range(3)]
rports = [base + 10 + i for i in range(3)]
routes = ",".join(f"nats://127.0.0.1:{p}" for p in rports)
for i in range(3):
    procs.append(subprocess.Popen([BIN, "-js", "-a", "127.0.0.1", "-p", str(cports[i]), "-sd", f"{d}/s{i}", "-n", f"n{i}",
        "--cluster_name", "w", "--cluster", f"nats://127.0.0.1:{rports[i]}", "--routes", routes],
        stdout=subprocess.DEVNULL, stderr=open(f"{d}/log{i}", "w")))

class C:
    def __init__(self, port):
        for _ in range(100):
            try:
                self.s = socket.create_connection(("127.0.0.1", port)); break
            except OSError: time.sleep(0.1)
        self.buf = b""
        self.line()
        self.s.sendall(b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _R.* 1\r\n')
        self.n = 0
    def line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        l, self.buf = self.buf.split(b"\r\n", 1); return l
    def read(self, n):
        while len(self.buf) < n + 2: self.buf += self.s.recv(65536)
        d, self.buf = self.buf[:n], self.buf[n+2:]; return d
    def req(self, subj, payload=b"", hdrs=None, timeout=5):
        self.n += 1; inbox = f"_R.{self.n}"
        if hdrs:
            h = "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
            hb = h.encode()
            self.s.sendall(f"HPUB {subj} {inbox} {len(hb)} {len(hb)+len(payload)}\r\n".encode() + hb + payload + b"\r\n")
        else:
            self.s.sendall(f"PUB {subj} {inbox} {len(payload)}\r\n".encode() + payload + b"\r\n")
        self.s.settimeout(timeout)
        try:
            while True:
                l = self.line()
                if l.startswith(b"PING"): self.s.sendall(b"PONG\r\n"); continue
                parts = l.split()
                if parts[0] == b"MSG":
                    data = self.read(int(parts[-1]))
                    if parts[1].decode() == inbox: return data
                elif parts[0] == b"HMSG":
                    data = self.read(int(parts[-1]))
                    if parts[1].decode() == inbox: return data
        except socket.timeout:
            return b"TIMEOUT"

try:
    c = C(cports[0])
    for _ in range(100):
        r = c.req("$JS.API.STREAM.CREATE.W", json.dumps({"name": "W", "subjects": ["w.>"], "num_replicas": 3, "storage": "file"}).encode())
        if b'"error"' not in r and r != b"TIMEOUT": break
        time.sleep(0.3)
    print("create:", r[:120])
    print(c.req("w.a", b"1", [("Nats-Msg-Id", "a"), ("Nats-Expected-Last-Sequence", "0")]))
    print(c.req("w.a", b"2", [("Nats-Msg-Id", "b"), ("Nats-Expected-Last-Sequence", "1"), ("Nats-Expected-Last-Msg-Id", "a")]))
    print("stale:", c.req("w.a", b"3", [("Nats-Msg-Id", "c"), ("Nats-Expected-Last-Sequence", "2"), ("Nats-Expected-Last-Msg-Id", "a")]))
    ok = 0
    for i in range(5):
        r = c.req("w.a", str(10+i).encode(), [("Nats-Msg-Id", f"z{i}")], timeout=3)
        print("after:", r[:100]); ok += (b'"seq"' in r and b"error" not in r)
    info = c.req("$JS.API.STREAM.INFO.W")
    print("info state:", json.loads(info).get("state", {}).get("messages") if info != b"TIMEOUT" else info)
    print("RESULT", "OK" if ok == 5 else "WEDGED")
    for i in range(3):
        crit = [l for l in open(f"{d}/log{i}") if "critical" in l.lower() or "mismatch" in l.lower()]
        if crit: print(f"n{i}:", crit[:2])
finally:
    for p in procs: p.kill()
    for p in procs: p.wait()
    shutil.rmtree(d, ignore_errors=True)
