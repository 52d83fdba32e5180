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

# SBX_SETUP_ONLY=engine runs the engine step alone (its test does; so may an operator).
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
if [ ${#missing[@]} -gt 0 ] && [ "${SBX_SETUP_ONLY:-}" != engine ]; then
  say "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# ---------------------------------------------------------------- the engine
# sbx talks to the engine DOCKER_HOST names (the docker SDK reads it too), else the default
# socket, and setup.sh touches that engine alone. It signals or starts only a dockerd it can
# name by a pid file: for the default socket, dockerd's own /var/run/docker.pid; for another
# unix socket, the dockerd setup.sh starts for it, with its own config, pid file, data and
# exec roots in SBX_DOCKERD_STATE (default: sbx-dockerd beside the socket), no bridge and no
# iptables rules (the host's network belongs to the first engine). A tcp:// engine is only
# probed: setup.sh neither configures nor starts a remote one. Never a signal by name.
DEFAULT_SOCKET=/var/run/docker.sock
engine="${DOCKER_HOST:-unix://$DEFAULT_SOCKET}"
case "$engine" in
  unix://*) socket="${engine#unix://}" ;;
  tcp://*) socket="" ;;
  *) echo "setup.sh: DOCKER_HOST=$engine: only unix:// and tcp:// engines are supported" >&2
     exit 1 ;;
esac
if [ -z "$socket" ]; then
  config="" pidfile="" log="" start_args=()
elif [ "$(realpath -m "$socket")" = "$(realpath -m "$DEFAULT_SOCKET")" ]; then
  config=/etc/docker/daemon.json pidfile=/var/run/docker.pid log=/var/log/sbx-dockerd.log
  start_args=()
else
  state="${SBX_DOCKERD_STATE:-$(dirname "$socket")/sbx-dockerd}"
  config="$state/daemon.json" pidfile="$state/dockerd.pid" log="$state/dockerd.log"
  start_args=(--config-file "$config" --data-root "$state/data" --exec-root "$state/exec"
              --bridge=none --iptables=false)
  mkdir -p "$state"
fi

# GET PATH from the engine (a unix socket, or a tcp address in plain HTTP): the body on
# stdout, success on a 200.
engine_get() {
  python3 - "$engine" "$1" <<'PY' 2>/dev/null
import socket, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
if url.scheme == "unix":
    s, address = socket.socket(socket.AF_UNIX), url.path
else:
    s, address = socket.socket(), (url.hostname, url.port or 2375)
s.settimeout(3)
s.connect(address)
s.sendall(f"GET {sys.argv[2]} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
reply = b""
while chunk := s.recv(65536):
    reply += chunk
head, _, body = reply.partition(b"\r\n\r\n")
sys.stdout.write(body.decode("utf-8", "replace"))
sys.exit(0 if head.split(b" ")[1:2] == [b"200"] else 1)
PY
}
docker_up() { engine_get /_ping >/dev/null; }
runsc_listed() {
  engine_get /info | python3 -c \
    'import json, sys; sys.exit("runsc" not in json.load(sys.stdin).get("Runtimes", {}))'
}

# The pid of the dockerd this engine's pid file names, if that process is a dockerd.
managed_pid() {
  local pid
  [ -n "$pidfile" ] && [ -s "$pidfile" ] || return 1
  pid="$(tr -dc 0-9 < "$pidfile")"
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && echo "$pid"
}

# gVisor: register Debian's runsc in this engine's config (ptrace platform; its KVM platform
# hangs on these machines). --network=none: gVisor then never touches the host network stack.
register_runsc() {
  python3 - "$config" <<'PY'
import json, os, sys
path = sys.argv[1]
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
wanted = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
if config.get("runtimes", {}).get("runsc") == wanted:
    sys.exit(1)  # already registered: nothing to reload
config.setdefault("runtimes", {})["runsc"] = wanted
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as handle:
    json.dump(config, handle, indent=2)
PY
}

# Wait until the engine answers (`docker_up`) or lists runsc (`runsc_listed`), at most 60 s.
wait_until() {
  for _ in $(seq 1 120); do "$1" && return 0; sleep 0.5; done
  return 1
}

if [ -n "$config" ] && register_runsc; then
  say "registered the runsc (gVisor) runtime in $config"
  if docker_up; then
    if pid="$(managed_pid)"; then
      kill -HUP "$pid"  # dockerd reloads its runtimes from the config file
      wait_until runsc_listed || say "the engine at $engine did not list runsc after a reload"
    else
      say "reload the engine at $engine to enable runsc: no dockerd pid file setup.sh knows"
    fi
  fi
fi

if ! docker_up; then
  if [ -z "$socket" ]; then
    echo "setup.sh: the engine at $engine does not answer; setup.sh starts only a local engine" \
      "on a unix socket: start that one yourself, or unset DOCKER_HOST" >&2
    exit 1
  fi
  say "starting dockerd at $socket (log: $log)"
  if [ "$config" = /etc/docker/daemon.json ] && command -v systemctl >/dev/null 2>&1 \
      && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start docker
  else
    setsid nohup dockerd -H "unix://$socket" --pidfile "$pidfile" "${start_args[@]}" \
      >"$log" 2>&1 < /dev/null &
  fi
  wait_until docker_up || { echo "setup.sh: dockerd did not come up; see $log" >&2; exit 1; }
fi
[ "${SBX_SETUP_ONLY:-}" = engine ] && exit 0

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
