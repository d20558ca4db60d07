#!/usr/bin/env bash
# The Debian package end to end on this machine: build it with CPack from BUILD_DIR, install it
# with dpkg, check the unit (systemd-analyze verify, where systemd is there to ask), start the
# installed binary the way the unit's ExecStart does (as the package's user, with its config),
# use it with awscli, stop it by its PID, and purge the package: nothing of it may remain.
#
#   package_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  $sudo dpkg --purge objectcache >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

$sudo dpkg --purge objectcache >/dev/null 2>&1 || true
(cd "$build" && cpack -G DEB -B "$work/deb" >/dev/null)
deb=$(ls "$work"/deb/objectcache_*.deb)
$sudo dpkg -i "$deb" >/dev/null

unit=/usr/lib/systemd/system/objectcache.service
[ -x /usr/bin/objectcache ] || fail "no /usr/bin/objectcache"
[ -f "$unit" ] || fail "no $unit"
[ -f /etc/objectcache/objectcache.toml ] || fail "no default config"
getent passwd objectcache >/dev/null || fail "no objectcache user"
[ "$(stat -c %U /var/lib/objectcache)" = objectcache ] || fail "/var/lib/objectcache not the user's"
[ "$(stat -c %a /etc/objectcache/credentials.toml)" = 640 ] || fail "credentials readable by all"
for line in UMask=0077 CapabilityBoundingSet= PrivateUsers=yes ProtectProc=invisible \
  ProtectKernelLogs=yes NoNewPrivileges=yes; do
  grep -qx "$line" "$unit" || fail "the unit lacks $line"
done
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify: $out"
  echo "systemd-analyze verify: ok${out:+ ($out)}"
fi

# A tenant, then the unit's ExecStart as the unit's user (setpriv execs it: $pid is the
# server's), on a free port of loopback.
cat <<'TOML' | $sudo tee /etc/objectcache/credentials.toml >/dev/null
[tenants.ci.keys]
AKPACKAGETEST = "package-test-secret-0123"
TOML
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$exec_start" ] || fail "no ExecStart in $unit"
port_file=/var/lib/objectcache/port
$sudo rm -f "$port_file"
# shellcheck disable=SC2086  # ExecStart is a command line
$sudo setpriv --reuid objectcache --regid objectcache --init-groups -- $exec_start --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --port-file "$port_file" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -s "$port_file" ] && break; sleep 0.1; done
[ -s "$port_file" ] || { cat "$work/serve.log"; fail "the installed server did not start"; }
endpoint="http://127.0.0.1:$(cat "$port_file")"
export AWS_ACCESS_KEY_ID=AKPACKAGETEST AWS_SECRET_ACCESS_KEY=package-test-secret-0123
export AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
aws=(aws --endpoint-url "$endpoint")
head -c 3000000 /dev/urandom >"$work/in.bin"
"${aws[@]}" s3 mb s3://package-test >/dev/null
"${aws[@]}" s3 cp "$work/in.bin" s3://package-test/in.bin >/dev/null
"${aws[@]}" s3 cp s3://package-test/in.bin "$work/out.bin" >/dev/null
cmp "$work/in.bin" "$work/out.bin" || fail "the bytes came back different"
"${aws[@]}" s3 ls s3://package-test | grep -q in.bin || fail "not listed"
[ -d /var/lib/objectcache/store/tenants/ci ] || fail "the tenant's store is not under /var/lib"
grep -q '"msg"' "$work/serve.log" || fail "the default config's JSON logs are missing"
kill "$pid"
wait "$pid" || fail "the server did not stop cleanly"
pid=""

$sudo dpkg --purge objectcache >/dev/null
for path in /usr/bin/objectcache "$unit" /etc/objectcache /var/lib/objectcache \
  /usr/share/doc/objectcache; do
  [ ! -e "$path" ] || fail "$path remains after purge"
done
! getent passwd objectcache >/dev/null || fail "the objectcache user remains after purge"
echo "package_test: ok ($(basename "$deb"))"
