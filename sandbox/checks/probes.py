"""The programs `sbx selftest` runs inside sandboxes, each printing what it found.

Kept apart from the checks that judge their output (`sandbox/checks/selftest.py`), so
each file reads on its own: here, what a hostile program would try.
"""

NETWORK_PROBE = r"""
import json, os, socket
def attempt(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
try:
    socket.getaddrinfo("example.com", 443)
    dns = "resolved"
except OSError as exc:
    dns = str(exc)
print(json.dumps({"interfaces": sorted(os.listdir("/sys/class/net")),
                  "public": attempt("1.1.1.1", 443), "gateway": attempt(GATEWAY, 2375),
                  "metadata": attempt("169.254.169.254", 80), "dns": dns}))
"""

INTERFACES_PROBE = (
    'import json, os\nprint(json.dumps({"interfaces": sorted(os.listdir("/sys/class/net"))}))'
)

PRIVILEGE_PROBE = r"""
import ctypes, json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
try:
    os.setuid(0); setuid = "became root"
except OSError as exc:
    setuid = exc.strerror
def write(path):
    try:
        open(path, "w").write("x"); return "written"
    except OSError as exc:
        return exc.strerror
HOST_PATHS = ("/host", "/var/run", "/root", "/home", "/etc/docker")
root = [l.split() for l in open("/proc/mounts") if l.split()[1] == "/"]
mounts = [l.split()[1] for l in open("/proc/mounts")
          if l.split()[1:3] != ["/home/user", "tmpfs"]]  # sbx's own scratch home, not the host's
print(json.dumps({"uid": os.getuid(), "capeff": status["CapEff"].strip(),
                  "capbnd": status["CapBnd"].strip(),
                  "nnp": ctypes.CDLL(None).prctl(39, 0, 0, 0, 0), "setuid": setuid,
                  "root_write": write("/data/selftest"),
                  "root_ro": bool(root) and "ro" in root[-1][3].split(","),
                  "docker_sock": os.path.exists("/var/run/docker.sock"),
                  "host_mounts": [m for m in mounts if m.startswith(HOST_PATHS)],
                  "env": sorted(os.environ)}))
"""

FORK_PROBE = """
import os, time
children = 0
try:
    for _ in range(LIMIT):
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        children += 1
except OSError as exc:
    print("stopped", children, exc.strerror)
else:
    print("unbounded", children)
"""

CPU_PROBE = """
import multiprocessing, time
def spin():
    end = time.time() + 1.5
    while time.time() < end:
        pass
workers = [multiprocessing.Process(target=spin) for _ in range(2)]
[w.start() for w in workers]
[w.join() for w in workers]
"""

ARTIFACT_PROBE = """
import os
os.symlink("/etc/passwd", "/output/passwd")
os.mkfifo("/output/fifo")
open("/output/big.bin", "wb").write(b"x" * (LIMIT + 1))
open("/output/ok.txt", "w").write("ok")
"""

PROTOCOL_PROBE = r"""
import json, os
def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
def uid_of(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Uid:"):
            return int(line.split()[1])
def parent_of(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[1])
facts = {"descriptors": {}, "memory": {}, "signals": {}, "uids": {"code": os.getuid()}}
zygote = os.getppid()  # forks the interpreters; the runner, which holds the stream, is its parent
for name, pid in (("init", 1), ("runner", parent_of(zygote)), ("zygote", zygote)):
    if name != "zygote":
        for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY)):
            path = f"/proc/{pid}/fd/{fd}"
            facts["descriptors"][f"{name} fd {fd}"] = attempt(lambda: os.close(os.open(path, mode)))
    facts["memory"][name] = attempt(lambda: open(f"/proc/{pid}/mem", "rb").close())
    facts["signals"][name] = attempt(lambda: os.kill(pid, 0))
    facts["uids"][name] = uid_of(pid)
print(json.dumps(facts))
"""

MOUNTINFO_PROBE = r"""
import json
lines = open("/proc/self/mountinfo").read().splitlines()
print(json.dumps({"lines": len(lines), "host": [line for line in lines if HOST_MARKERS]}))
"""
