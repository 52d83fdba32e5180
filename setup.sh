#!/usr/bin/env bash
# Set up sbx on a Debian machine, idempotently: Docker engine, debootstrap, PostgreSQL's
# binaries (for the service tests), chromium (for the web page's tests), Node with the
# sign-in tests' OpenID Connect provider, a venv with sbx, and the offline sandbox image.
# Run as root (or with sudo). Safe to run again: each step
# is skipped when already done, and the image build is a no-op when its recipe is unchanged.
set -euo pipefail
cd "$(dirname "$0")"

say() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (sudo bash setup.sh): it installs packages and starts dockerd" >&2
  exit 1
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
# PostgreSQL's binaries for the service tests' throwaway clusters (no server is started here).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
# Debian's chromium for the web page's browser tests (Playwright drives it; it never downloads
# a browser of its own here).
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
# Node and npm for the sign-in tests' OpenID Connect provider (tests/oidc, npm ci below).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' >/dev/null 2>&1 \
  || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# gVisor: register Debian's runsc with dockerd (ptrace platform; its KVM platform hangs on
# these machines). --network=none: gVisor then never touches the host network stack.
register_runsc() {
  python3 - <<'PY'
import json, os, sys
path = "/etc/docker/daemon.json"
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
wanted = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
if config.get("runtimes", {}).get("runsc") == wanted:
    sys.exit(1)  # already registered: nothing to reload
config.setdefault("runtimes", {})["runsc"] = wanted
os.makedirs("/etc/docker", exist_ok=True)
with open(path, "w") as handle:
    json.dump(config, handle, indent=2)
PY
}

docker_up() { [ -S /var/run/docker.sock ] && python3 - <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(3)
s.connect("/var/run/docker.sock")
s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
sys.exit(0 if b"OK" in s.recv(4096) else 1)
PY
}

if register_runsc; then
  say "registered the runsc (gVisor) runtime in /etc/docker/daemon.json"
  if docker_up; then
    pkill -HUP -x dockerd || true
    sleep 2
  fi
fi

if ! docker_up; then
  say "starting dockerd (log: /var/log/sbx-dockerd.log)"
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start docker
  else
    setsid nohup dockerd >/var/log/sbx-dockerd.log 2>&1 < /dev/null &
  fi
  for _ in $(seq 1 60); do docker_up && break; sleep 1; done
  docker_up || { echo "setup.sh: dockerd did not come up; see /var/log/sbx-dockerd.log" >&2; exit 1; }
fi

if [ ! -x .venv/bin/sbx ] || [ pyproject.toml -nt .venv/.sbx-installed ]; then
  say "installing sbx into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.sbx-installed
fi

# The web sign-in tests' OpenID Connect provider (panva's oidc-provider), pinned by its lock
# file; installed once into tests/oidc/node_modules (not tracked by git).
if [ ! -d tests/oidc/node_modules/oidc-provider ]; then
  say "installing the tests' OpenID Connect provider (npm ci in tests/oidc)"
  (cd tests/oidc && npm ci --no-audit --no-fund)
fi

say "building the sandbox image (a no-op when the recipe is unchanged)"
.venv/bin/sbx image build
