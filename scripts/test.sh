#!/usr/bin/env bash
# The whole test suite, on a fresh machine: creates the test virtual
# environment (.venv: pinned torch from PyPI and the JUnit XSD validator;
# the JSON Schema is checked in Rust) when missing, then builds gpucheck and
# its fake driver libraries and runs every test. Needs: Rust (cargo), a C compiler (cc), python3 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cc >/dev/null || { echo "test.sh: a C compiler (cc) is needed for the fake driver libraries" >&2; exit 2; }
bash scripts/setup-venv.sh
cargo test --workspace --locked "$@"
# tests/job_user.rs creates a second user and starts a rank as it: root only,
# so a plain `cargo test` ignores it and this runs it where it runs as root.
if [ "$(id -u)" = 0 ]; then
    cargo test --locked --test job_user -- --ignored
fi
