#!/bin/sh
# systemd-verify.sh: check the shipped systemd units with systemd-analyze.
#
#   Scripts/service/storesync-hubd.service          user unit
#   Scripts/service/storesync-hubd.socket           socket unit (user and system)
#   Scripts/service/storesync-hubd-system.service   system unit, installed as storesync-hubd.service
#   Scripts/service/storesync-hubd-system.socket.conf  drop-in, installed as storesync-hubd.socket.d/system.conf
#
# Usage: systemd-verify.sh [REPO_ROOT] [HUBD]
#   REPO_ROOT  default: the git work tree containing the current directory, else "."
#   HUBD       the executable to put in ExecStart= (the units name /usr/local/bin/hubd and
#              %h/.local/bin/hubd, which need not exist here). Default: REPO_ROOT/.build/debug/hubd;
#              if that is missing, a stub executable is used (the units' syntax is still checked).
#
# The units are copied, under their installed names, into a temporary directory with
# ExecStart= pointing at HUBD, then:
#   1. systemd-analyze verify (system units) and systemd-analyze --user verify (user units):
#      any message about these units, or a non-zero status, is a failure;
#   2. systemd-analyze security --offline=true: each service's overall exposure must not exceed
#      SYSTEM_MAX_EXPOSURE / USER_MAX_EXPOSURE (tenths; defaults 10 and 20, i.e. 1.0 and 2.0;
#      measured with systemd 252: 0.5 and 1.0). Skipped (with a note) when
#      this systemd-analyze has no --offline (systemd < 250).
#
# Exit status: 0 all checks passed; 1 a check failed (the reasons are printed);
# 77 skipped: systemd-analyze is not installed (e.g. macOS).
# It runs no service and needs neither root nor a running systemd.

set -u

root=${1:-$(git rev-parse --show-toplevel 2>/dev/null || echo .)}
hubd=${2:-$root/.build/debug/hubd}
dir=$root/Scripts/service
SYSTEM_MAX_EXPOSURE=${SYSTEM_MAX_EXPOSURE:-10}
USER_MAX_EXPOSURE=${USER_MAX_EXPOSURE:-20}

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd-verify: SKIP: systemd-analyze is not installed"
    exit 77
fi
for f in storesync-hubd.service storesync-hubd.socket storesync-hubd-system.service storesync-hubd-system.socket.conf; do
    if [ ! -f "$dir/$f" ]; then
        echo "systemd-verify: FAIL: $dir/$f is missing"
        exit 1
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/storesync-units.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/system/storesync-hubd.socket.d" "$tmp/user" "$tmp/runtime"
chmod 0700 "$tmp/runtime"

case $hubd in /*) ;; *) hubd=$(pwd)/$hubd ;; esac
if [ ! -x "$hubd" ]; then
    echo "systemd-verify: note: $hubd is not an executable; using a stub for ExecStart="
    hubd=$tmp/hubd
    printf '#!/bin/sh\nexit 0\n' > "$hubd"
    chmod 0755 "$hubd"
fi
case $hubd in *[!A-Za-z0-9_./+-]*)
    echo "systemd-verify: FAIL: the path $hubd has characters this script does not put in a unit file"
    exit 1 ;;
esac

status=0
fail() {
    echo "systemd-verify: FAIL: $*"
    status=1
}

# Installed names; only the first word of ExecStart= changes.
sed "s#^ExecStart=/usr/local/bin/hubd #ExecStart=$hubd #" "$dir/storesync-hubd-system.service" \
    > "$tmp/system/storesync-hubd.service"
cp "$dir/storesync-hubd.socket" "$tmp/system/storesync-hubd.socket"
cp "$dir/storesync-hubd-system.socket.conf" "$tmp/system/storesync-hubd.socket.d/system.conf"
sed "s#^ExecStart=%h/.local/bin/hubd #ExecStart=$hubd #" "$dir/storesync-hubd.service" \
    > "$tmp/user/storesync-hubd.service"
cp "$dir/storesync-hubd.socket" "$tmp/user/storesync-hubd.socket"
for f in "$tmp/system/storesync-hubd.service" "$tmp/user/storesync-hubd.service"; do
    grep -q "^ExecStart=$hubd " "$f" || fail "could not point ExecStart= at $hubd in $f (did its first word change?)"
done

# systemd-analyze verify exits 0 even after warnings such as "Unknown key", so its output
# counts too. Lines about other units on this host (pulled in as dependencies) are only shown.
verify() { # SCOPE-FLAG DIR
    label=${1:---system}
    out=$(cd "$2" && XDG_RUNTIME_DIR=$tmp/runtime systemd-analyze $1 --man=no verify \
        storesync-hubd.service storesync-hubd.socket 2>&1)
    rc=$?
    # Name the files as they are in the repository (line numbers are unchanged).
    mine=$(printf '%s\n' "$out" | grep -e storesync -e "$tmp" | sed \
        -e "s|$tmp/system/storesync-hubd.service|$dir/storesync-hubd-system.service|g" \
        -e "s|$tmp/system/storesync-hubd.socket.d/system.conf|$dir/storesync-hubd-system.socket.conf|g" \
        -e "s|$tmp/system/storesync-hubd.socket|$dir/storesync-hubd.socket|g" \
        -e "s|$tmp/user/storesync-hubd|$dir/storesync-hubd|g" || true)
    other=$(printf '%s\n' "$out" | grep -v -e storesync -e "$tmp" -e '^$' || true)
    if [ $rc -ne 0 ] || [ -n "$mine" ]; then
        fail "systemd-analyze $label verify exited $rc and reported:"
        printf '%s\n' "${mine:-(nothing about these units)}" | sed 's/^/    /'
    else
        echo "systemd-verify: ok: systemd-analyze $label verify"
    fi
    if [ -n "$other" ]; then
        echo "systemd-verify: note: systemd-analyze $label verify, about other units of this host:"
        printf '%s\n' "$other" | sed 's/^/    /'
    fi
}
verify "" "$tmp/system"
verify --user "$tmp/user"

# Exposure scores (offline: from the files, no manager needed).
if systemd-analyze security --help 2>/dev/null | grep -q -- --offline; then
    security() { # SCOPE-FLAG DIR MAX
        out=$(cd "$2" && XDG_RUNTIME_DIR=$tmp/runtime systemd-analyze $1 security --offline=true \
            --threshold="$3" storesync-hubd.service 2>&1)
        rc=$?
        level=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for storesync-hubd.service: \([0-9.]*\).*/\1/p')
        label=${1:---system}
        limit=$(echo "$3" | awk '{ printf "%.1f", $1 / 10 }')
        if [ -z "$level" ]; then
            fail "systemd-analyze $label security gave no exposure level (exit $rc):"
            printf '%s\n' "$out" | tail -n 5 | sed 's/^/    /'
        elif [ $rc -ne 0 ]; then
            fail "$label unit: exposure $level is above $limit; the exposed settings:"
            printf '%s\n' "$out" | grep '✗' | sed 's/^/    /'
        else
            echo "systemd-verify: ok: $label unit exposure $level (limit $limit)"
        fi
    }
    security "" "$tmp/system" "$SYSTEM_MAX_EXPOSURE"
    security --user "$tmp/user" "$USER_MAX_EXPOSURE"
else
    echo "systemd-verify: note: this systemd-analyze has no security --offline (systemd < 250); exposure not checked"
fi

[ $status -eq 0 ] && echo "systemd-verify: all units verify cleanly"
exit $status
