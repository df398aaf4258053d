#!/usr/bin/env bash
# The main job: install what quorum needs, build it, and run `quorum demo`
# (3 members at etcd 3.4.23 -> keys written -> rolled to 3.5.30 -> verified -> cleaned up).
# Extra arguments go to `quorum demo` (see `quorum demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
cargo build --release --locked -p quorum
# Where cargo put it: ./target, or $CARGO_TARGET_DIR when that is set.
exec "${CARGO_TARGET_DIR:-./target}/release/quorum" demo "$@"
