#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this).
# Installs what it needs first (idempotent), so it passes on a fresh Debian machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Installs (the first time), then installs again (a no-op that checks everything is in
# place), both traced with `bash -x` while every core is busy: the set-up must not flake.
./scripts/check-install.sh 2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# --all-features compiles in the failpoints the crash tests need.
if cargo nextest --version >/dev/null 2>&1; then
    # Test binaries side by side, each test in a process of its own (.config/nextest.toml:
    # as many at once as `cargo test` runs in one binary). Doc tests are cargo test's.
    cargo nextest run --workspace --all-features --locked
    cargo test --workspace --all-features --locked --doc
else
    cargo test --workspace --all-features --locked
fi
