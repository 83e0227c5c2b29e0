"""Starts a gpusampler-server binary on the CPU backend on loopback ports for the stress
scripts (call_storm.py, fair_share.py): its ports come from --port-file, its output goes to
a log file in a fresh temporary directory."""
import os
import subprocess
import sys
import tempfile
import time


def start(server: str, extra, prefix: str = "gpusampler-stress-"):
    """(process, gRPC port, its directory); exits with the log if the server does not start."""
    d = tempfile.mkdtemp(prefix=prefix)
    port_file = os.path.join(d, "ports")
    log = open(os.path.join(d, "log"), "wb")
    proc = subprocess.Popen(
        [server, "--device", "cpu", "--address", "127.0.0.1:0", "--metrics-address",
         "127.0.0.1:0", "--port-file", port_file] + list(extra),
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(port_file) and open(port_file).read().endswith("\n"):
            return proc, int(open(port_file).read().split()[0]), d
        if proc.poll() is not None:
            sys.exit(open(os.path.join(d, "log")).read())
        time.sleep(0.05)
    proc.kill()
    sys.exit("server did not start")
