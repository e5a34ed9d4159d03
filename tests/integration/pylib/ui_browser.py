"""keel ui under test: PASS/FAIL lines, starting `keel ui` on a free port,
headless Chromium (DOM dumps and screenshots), plain HTTP fetches, and a
clean SIGTERM stop."""
import os, re, shutil, signal, subprocess, tempfile, urllib.error, urllib.request


class Checks:
    def __init__(self):
        self.failed = False

    def ok(self, name, cond, why=""):
        if cond:
            print("PASS " + name)
        else:
            self.failed = True
            print("FAIL %s: %s" % (name, str(why)[:600]))


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Ui:
    """`keel ui --port 0` with env; .base is its URL (None when it did not start)."""

    def __init__(self, keel, env, tmp):
        self.tmp = tmp
        self.proc = subprocess.Popen([keel, "ui", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        m = re.search(r"(http://127\.0\.0\.1:(\d+)/)", self.proc.stdout.readline())
        self.base = m.group(1) if m else None

    def fetch(self, path):
        """(status, body) over plain HTTP."""
        try:
            with urllib.request.urlopen(self.base + path, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def _chrome(self, extra, path):
        prof = tempfile.mkdtemp(dir=self.tmp)
        cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + prof] + extra + [self.base + path]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=90)

    def dom(self, path):
        return self._chrome(["--dump-dom"], path).stdout

    def screenshot(self, path, out, size="1280,1400"):
        if os.path.exists(out):
            os.remove(out)
        self._chrome(["--screenshot=" + out, "--window-size=" + size], path)
        return os.path.exists(out) and os.path.getsize(out) > 5000

    def stop(self):
        """SIGTERM; returns the exit status (-1 when it had to be killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1
