"""keel ui under test: starting `keel ui` (a free port, or a given one),
headless Chromium (DOM dumps and screenshots), plain HTTP fetches, and a
clean stop by signal. PASS/FAIL lines come from report.py."""
import os, re, shutil, signal, subprocess, tempfile, urllib.error, urllib.request


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Ui:
    """`keel ui --port PORT ARGS...` with env (PORT 0: any free port); .line is
    the first line it printed, .base its URL (None when it did not start)."""

    def __init__(self, keel, env, tmp, port=0, args=()):
        self.tmp = tmp
        self.proc = subprocess.Popen([keel, "ui", "--port", str(port)] + list(args), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.line = self.proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:(\d+)/)", self.line)
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

    def stop(self, sig=signal.SIGTERM):
        """Sends sig; returns the exit status (-1 when it had to be killed)."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1
