#!/usr/bin/env bash
# The whole test suite, on a fresh machine: creates the test virtual
# environment (.venv: pinned torch from PyPI and the JUnit XSD validator;
# the JSON Schema is checked in Rust) and Debian's chromium (the HTML
# report's browser tests, as root with apt-get) when missing, then builds gpucheck and
# its fake driver libraries and runs every test. Needs: Rust (cargo), a C compiler (cc), python3 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cc >/dev/null || { echo "test.sh: a C compiler (cc) is needed for the fake driver libraries" >&2; exit 2; }
bash scripts/setup-venv.sh
bash scripts/setup-chromium.sh
cargo test --workspace --locked "$@"
# tests/job_user.rs creates a second user and starts a rank as it: root only,
# so a plain `cargo test` ignores it and this runs it where it runs as root.
if [ "$(id -u)" = 0 ]; then
    cargo test --locked --test job_user -- --ignored
fi
# tests/html.rs renders the HTML report in a headless chromium: ignored by a
# plain `cargo test`, run here where scripts/setup-chromium.sh installed it.
if command -v chromium >/dev/null; then
    cargo test --locked --test html -- --ignored
fi
