#!/usr/bin/env bash
# Make sure the system tools named on the command line are on PATH.
# Missing ones are installed with apt-get when we are root on a Debian-like system;
# otherwise we stop with one line saying what to install.
# Two names are build inputs rather than commands: `libev` (the headers bjoern compiles
# against, checked as ev.h) and `cc` (a C compiler).
#   usage: scripts/ensure-tools.sh wrk curl h2load redis-server libev cc chromium
set -euo pipefail

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
        *) echo "$1" ;;
    esac
}

present() {
    case "$1" in
        libev) [ -e /usr/include/ev.h ] || [ -e /usr/local/include/ev.h ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

missing=()
for tool in "$@"; do
    present "$tool" || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0

packages=()
for tool in "${missing[@]}"; do packages+=("$(package_for "$tool")"); done

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${packages[*]} with apt-get (for ${missing[*]})" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq "${packages[@]}" >/dev/null
    for tool in "${missing[@]}"; do
        present "$tool" || { echo "error: apt-get installed ${packages[*]} but '$tool' is still missing" >&2; exit 1; }
    done
else
    echo "error: missing ${missing[*]}: install the package(s) ${packages[*]} (e.g. 'sudo apt-get install ${packages[*]}') and run make again" >&2
    exit 1
fi
