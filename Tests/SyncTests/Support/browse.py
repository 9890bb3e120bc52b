#!/usr/bin/env python3
"""Drives headless Chromium through the DevTools protocol on a pipe (no network port, no
packages): opens a URL, optionally runs a script, waits until a JavaScript condition is true,
then prints the page's DOM, and optionally saves a screenshot.

usage: browse.py CHROMIUM URL CONDITION [--ready CONDITION] [--run JS] [--screenshot FILE] [--timeout SECONDS] [--profile DIR]
With --ready, "ready" is written to stderr once that condition holds (the page is loaded and live).
Exit status: 0 with the DOM on stdout; 1 when the condition never held (the DOM so far on
stdout, the reason on stderr)."""
import base64, ctypes, json, os, subprocess, sys, tempfile, time

def main():
    args = sys.argv[1:]
    chromium, url, condition = args[0], args[1], args[2]
    run = screenshot = ready = profile = None
    timeout = 20.0
    rest = args[3:]
    while rest:
        flag, value = rest[0], rest[1]
        rest = rest[2:]
        if flag == "--run": run = value
        elif flag == "--screenshot": screenshot = value
        elif flag == "--ready": ready = value
        elif flag == "--profile": profile = value
        elif flag == "--timeout": timeout = float(value)
    # The caller's directory when given (a test removes it even when it fails), else a new one.
    profile = profile or tempfile.mkdtemp(prefix="sst-chromium-")
    os.makedirs(profile, exist_ok=True)
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    def child_fds():
        # Through high numbers first: a pipe end may already be 3 or 4.
        a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
        high_a, high_b = os.dup2(a, 100), os.dup2(b, 101)
        os.dup2(high_a, 3)
        os.dup2(high_b, 4)
        # Chromium dies with this script, even when the script is killed (PR_SET_PDEATHSIG, SIGKILL).
        try: ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
        except Exception: pass
    proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                             "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
                            preexec_fn=child_fds, close_fds=False,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_chrome_r); os.close(from_chrome_w)
    writer = os.fdopen(to_chrome_w, "wb", buffering=0)
    reader = os.fdopen(from_chrome_r, "rb", buffering=0)
    buffered = b""
    next_id = [0]
    def send(method, params=None, session=None):
        next_id[0] += 1
        message = {"id": next_id[0], "method": method, "params": params or {}}
        if session: message["sessionId"] = session
        writer.write(json.dumps(message).encode() + b"\0")
        return next_id[0]
    def call(method, params=None, session=None):
        nonlocal buffered
        wanted = send(method, params, session)
        deadline = time.time() + 30
        while time.time() < deadline:
            while b"\0" not in buffered:
                chunk = reader.read(65536)
                if not chunk: raise SystemExit("chromium closed the pipe")
                buffered += chunk
            raw, buffered = buffered.split(b"\0", 1)
            message = json.loads(raw)
            if message.get("id") == wanted:
                if "error" in message: raise SystemExit("%s: %s" % (method, message["error"]))
                return message.get("result", {})
        raise SystemExit("no answer to " + method)
    try:
        target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        call("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 860, "deviceScaleFactor": 1, "mobile": False}, session)
        call("Page.enable", {}, session)
        call("Page.navigate", {"url": url}, session)
        def evaluate(expression):
            result = call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, session)
            return result.get("result", {}).get("value")
        if run:
            deadline = time.time() + 10
            while time.time() < deadline and evaluate("document.readyState") != "complete":
                time.sleep(0.05)
            evaluate(run)
        held = False
        deadline = time.time() + timeout
        if ready:
            while time.time() < deadline:
                try:
                    if evaluate("Boolean(" + ready + ")"):
                        sys.stderr.write("ready\n")
                        sys.stderr.flush()
                        break
                except SystemExit:
                    pass
                time.sleep(0.1)
        while time.time() < deadline:
            try:
                if evaluate("Boolean(" + condition + ")"):
                    held = True
                    break
            except SystemExit:
                pass
            time.sleep(0.1)
        sys.stdout.write(evaluate("document.documentElement.outerHTML") or "")
        if screenshot:
            data = call("Page.captureScreenshot", {"format": "png"}, session)["data"]
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(data))
        if not held:
            sys.stderr.write("the condition never held within %ss: %s\n" % (timeout, condition))
            return 1
        return 0
    finally:
        try: send("Browser.close")
        except Exception: pass
        try: proc.wait(timeout=5)
        except Exception: proc.kill()
        subprocess.run(["rm", "-rf", profile])

if __name__ == "__main__":
    sys.exit(main())
