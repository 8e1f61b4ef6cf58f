#!/usr/bin/env bash
# Make sure the system tools named on the command line are on PATH.
# Missing ones are installed with apt-get when we are root on a Debian-like system;
# otherwise we stop with one line saying what to install.
# Two names are build inputs rather than commands: `libev` (the headers bjoern compiles
# against, checked as ev.h) and `cc` (a C compiler).
#   usage: scripts/ensure-tools.sh wrk curl h2load redis-server libev cc chromium valgrind
#          nginx haproxy (and h2spec, autobahn: see below)
#
# nginx and haproxy (for `bench cluster`) are servers: Debian's packages start a system daemon
# on port 80 (nginx) or with /etc/haproxy's config as they install. bench runs both
# unprivileged from its own config instead, so the install runs with a policy-rc.d that
# refuses every service start (the Debian policy interface, exit status 101: "action
# forbidden"), removed afterwards unless one was already there; a daemon that started anyway
# is stopped, and the service is disabled so that it does not start at the next boot.
set -euo pipefail

# `h2spec` (the HTTP/2 conformance tool, github.com/summerwind/h2spec) is no apt package: it is
# built from its module with the Go toolchain (`go install`), when `go` is on PATH or in
# /usr/local/go/bin. It is optional: without Go the script says so in one line and goes on
# (the h2spec tests then skip, saying the same).   usage: scripts/ensure-tools.sh h2spec
H2SPEC_MODULE=github.com/summerwind/h2spec/cmd/h2spec@latest
install_h2spec() {
    local go bin
    go=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
    if [ -z "$go" ]; then
        echo "note: no Go toolchain to build h2spec (https://go.dev/dl/): the h2spec tests will skip" >&2
        return 0
    fi
    if [ "$(id -u)" -eq 0 ]; then bin=/usr/local/bin; else bin="$("$go" env GOPATH)/bin"; fi
    echo "installing h2spec with go install into $bin" >&2
    GOBIN="$bin" "$go" install "$H2SPEC_MODULE" >&2
}

# `autobahn` (Autobahn|Testsuite, the WebSocket conformance suite, github.com/crossbario/
# autobahn-testsuite) is on PyPI for Python 2.7 only: it is installed with a Python 2.7 found
# on PATH (python2.7) or in pyenv (~/.pyenv/versions/2.7.*), by `pip install --target` into
# AUTOBAHN_DIR (default ~/.cache/toyservers/autobahntestsuite-VERSION), beside a `wstest` script
# that runs it (its zope package is a namespace package: the folder must be added with
# site.addsitedir, which reads .pth files, not put on PYTHONPATH). It is optional: without
# Python 2.7, or when pip fails (no network), the script says so in one line and goes on (the
# Autobahn tests then skip).
#   usage: scripts/ensure-tools.sh autobahn
AUTOBAHN_VERSION=25.10.1
AUTOBAHN_DIR=${AUTOBAHN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/toyservers/autobahntestsuite-$AUTOBAHN_VERSION}
find_python27() {
    local candidate
    for candidate in "$(command -v python2.7 || true)" \
                     "${PYENV_ROOT:-$HOME/.pyenv}"/versions/2.7*/bin/python2.7; do
        # a pyenv shim is on PATH even when no 2.7 is active: ask the interpreter itself
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (2, 7)' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}
install_autobahn() {
    local python work
    python=$(find_python27) || {
        echo "note: no Python 2.7 for Autobahn|Testsuite (python2.7, or pyenv install 2.7.18): the Autobahn tests will skip" >&2
        return 0
    }
    echo "installing autobahntestsuite $AUTOBAHN_VERSION with $python into $AUTOBAHN_DIR (about 90 s)" >&2
    work="$AUTOBAHN_DIR.partial"
    rm -rf "$work" && mkdir -p "$work"
    "$python" -m pip install -q --disable-pip-version-check --no-warn-script-location \
        --target "$work/site" "autobahntestsuite==$AUTOBAHN_VERSION" 2>&1 \
        | grep -v -e DEPRECATION -e "^$" >&2 || true
    if [ ! -d "$work/site/autobahntestsuite" ]; then  # no network, say: optional, so go on
        echo "note: pip could not install autobahntestsuite (see above): the Autobahn tests will skip" >&2
        rm -rf "$work"
        return 0
    fi
    cat > "$work/wstest" <<WSTEST
#!/bin/sh
# Autobahn|Testsuite's wstest, on the Python 2.7 that installed it (scripts/ensure-tools.sh).
exec "$python" -c 'import site, sys; site.addsitedir(sys.argv[1]); del sys.argv[1]; sys.argv[0] = "wstest"; from autobahntestsuite.wstest import run; sys.exit(run())' "$AUTOBAHN_DIR/site" "\$@"
WSTEST
    chmod +x "$work/wstest"
    rm -rf "$AUTOBAHN_DIR" && mv "$work" "$AUTOBAHN_DIR"
}

package_for() {
    case "$1" in
        wrk) echo wrk ;;
        curl) echo curl ;;
        h2load) echo nghttp2-client ;;
        redis-server) echo redis-server ;;
        taskset) echo util-linux ;;
        libev) echo libev-dev ;;
        cc) echo gcc ;;
        chromium) echo chromium ;;
        valgrind) echo valgrind ;;
        *) echo "$1" ;;
    esac
}

present() {
    case "$1" in
        h2spec) command -v h2spec >/dev/null 2>&1 || [ -x "$(go env GOPATH 2>/dev/null)/bin/h2spec" ] ;;
        autobahn) [ -x "$AUTOBAHN_DIR/wstest" ] ;;
        libev) [ -e /usr/include/ev.h ] || [ -e /usr/local/include/ev.h ] ;;
        nginx | haproxy) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

# A server package installed here is for bench: stop a daemon it started despite the policy
# (by the pid its pidfile names, and only when that process is the daemon in question: a stale
# pidfile names someone else), and keep it from starting at the next boot, which the package
# enabled. Nothing is done to a package that was installed before.
quiet_service() {
    local name=$1 pidfile=$2 pid
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now --quiet "$name" 2>/dev/null || true
    elif command -v update-rc.d >/dev/null 2>&1; then
        update-rc.d "$name" disable >/dev/null 2>&1 || true
    fi
    [ -r "$pidfile" ] || return 0
    pid=$(head -n1 "$pidfile" | tr -dc 0-9)
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 0
    echo "stopping the system $name daemon (pid $pid) the package started" >&2
    kill "$pid"
}

missing=()
for tool in "$@"; do
    if [ "$tool" = h2spec ]; then
        present h2spec || install_h2spec || exit 1
        continue
    fi
    if [ "$tool" = autobahn ]; then
        present autobahn || install_autobahn || exit 1
        continue
    fi
    present "$tool" || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

packages=()
for tool in "${missing[@]}"; do packages+=("$(package_for "$tool")"); done

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${packages[*]} with apt-get (for ${missing[*]})" >&2
    export DEBIAN_FRONTEND=noninteractive
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\n# no service starts while scripts/ensure-tools.sh installs\nexit 101\n' \
            >"$policy"
        chmod 755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq >/dev/null
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${packages[@]}" >/dev/null
    for tool in "${missing[@]}"; do
        case "$tool" in
            nginx | haproxy) quiet_service "$tool" "/run/$tool.pid" ;;
        esac
    done
    for tool in "${missing[@]}"; do
        present "$tool" || { echo "error: apt-get installed ${packages[*]} but '$tool' is still missing" >&2; exit 1; }
    done
else
    echo "error: missing ${missing[*]}: install the package(s) ${packages[*]} (e.g. 'sudo apt-get install ${packages[*]}') and run make again" >&2
    exit 1
fi
