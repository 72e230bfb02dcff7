#!/usr/bin/env bash
# Release archives and Debian packages: scripts/release.sh [OUTDIR] (default dist/).
#
# For each target (x86_64 and aarch64 Linux, glibc), builds gpucheck against the
# glibc 2.28 baseline (Ubuntu 20.04, RHEL 8 and every newer CUDA image) with
# cargo-zigbuild, and writes to OUTDIR:
#   gpucheck-<version>-<target>.tar.gz  binary, man page, shell completions, README, licences
#   gpucheck_<version>-1_<arch>.deb     the same files where Debian puts them (cargo-deb)
#   gpucheck-<version>-py3-none-manylinux_2_28_<arch>.whl
#                                       the same binary as a Python wheel (pip install):
#                                       <env>/bin/gpucheck, the man page and completions
#                                       under <env>/share (scripts/lib/wheel.py)
#   SHA256SUMS                          sha256sum -c SHA256SUMS verifies all of them
# The binary stays dynamically linked to glibc: it loads libnvidia-ml, libcuda
# and libnccl at run time.
#
# Installs what it needs, once: cargo-zigbuild and cargo-deb (crates.io, into
# ~/.cargo/bin), zig (PyPI's ziglang, into .tools/venv). The aarch64 Rust
# standard library comes from rustup where it is installed
# (rustup target add aarch64-unknown-linux-gnu), else from Debian's rustc-web
# with libstd-rust-web-dev:arm64 (installed here with apt-get when run as root);
# with neither, aarch64 is skipped with the reason.
# GPUCHECK_RELEASE_TARGETS="x86_64-unknown-linux-gnu" limits the targets: every
# target takes over 15 minutes on 2 cores (aarch64 the longer), one target
# about half; run with all targets, the script says so first.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${1:-dist}
# The oldest glibc the binaries may need (RHEL 8 ships 2.28, Ubuntu 20.04 2.31).
GLIBC_BASELINE=2.28
TARGETS=${GPUCHECK_RELEASE_TARGETS:-"x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu"}
TOOLS=.tools
ZIG_PYTHON=$TOOLS/venv/bin/python
ASSETS=target/release-assets

say() { echo "release.sh: $*" >&2; }

ensure_tools() {
    if ! cargo-zigbuild --version >/dev/null 2>&1; then
        say "installing cargo-zigbuild from crates.io"
        cargo install cargo-zigbuild --locked
    fi
    if ! cargo deb --version >/dev/null 2>&1; then
        say "installing cargo-deb from crates.io"
        cargo install cargo-deb --locked
    fi
    if ! "$ZIG_PYTHON" -m ziglang version >/dev/null 2>&1; then
        say "installing zig (PyPI ziglang) into $TOOLS/venv"
        python3 -m venv "$TOOLS/venv"
        "$TOOLS/venv/bin/pip" install --quiet ziglang
    fi
    export CARGO_ZIGBUILD_PYTHON_PATH=$PWD/$ZIG_PYTHON
}

# Prints the rustc to build TARGET with ("" for the default toolchain), or
# fails with the reason on stderr.
rustc_for() {
    local target=$1
    if rustup target list --installed 2>/dev/null | grep -qx "$target"; then
        echo ""
        return
    fi
    [[ $target == aarch64-unknown-linux-gnu ]] || { say "no Rust standard library for $target"; return 1; }
    if [[ ! -d /usr/lib/rustlib/$target/lib ]] && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        say "installing Debian's rustc-web and its arm64 standard library"
        {
            dpkg --add-architecture arm64
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                rustc-web libstd-rust-web-dev libstd-rust-web-dev:arm64
        } >&2 || true
    fi
    if [[ -x /usr/bin/rustc && -d /usr/lib/rustlib/$target/lib ]]; then
        echo /usr/bin/rustc
        return
    fi
    say "skipping $target: no Rust standard library for it (rustup cannot download it here; Debian's libstd-rust-web-dev:arm64 is not installed)"
    return 1
}

build() {
    local target=$1 rustc=$2
    say "building $target against glibc $GLIBC_BASELINE"
    if [[ -n $rustc ]]; then
        RUSTC=$rustc cargo zigbuild --release --locked --target "$target.$GLIBC_BASELINE"
    else
        cargo zigbuild --release --locked --target "$target.$GLIBC_BASELINE"
    fi
}

# Completions and the man page, architecture-independent: made once with a
# binary this machine runs.
make_assets() {
    local bin=$1
    rm -rf "$ASSETS" && mkdir -p "$ASSETS/completions"
    "$bin" completions bash >"$ASSETS/completions/gpucheck.bash"
    "$bin" completions zsh >"$ASSETS/completions/_gpucheck"
    "$bin" completions fish >"$ASSETS/completions/gpucheck.fish"
    gzip -9n <man/gpucheck.1 >"$ASSETS/gpucheck.1.gz"
}

archive() {
    local target=$1 version=$2
    local name=gpucheck-$version-$target
    local stage=target/release-stage/$name
    rm -rf "$stage" && mkdir -p "$stage/completions"
    install -m 755 "target/$target/release/gpucheck" "$stage/gpucheck"
    install -m 644 man/gpucheck.1 README.md LICENSE-MIT LICENSE-APACHE "$stage/"
    install -m 644 "$ASSETS"/completions/* "$stage/completions/"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        -C target/release-stage -cf - "$name" | gzip -9n >"$OUT/$name.tar.gz"
    say "wrote $OUT/$name.tar.gz"
}

main() {
    if [[ -z ${GPUCHECK_RELEASE_TARGETS:-} ]]; then
        say "building every target ($TARGETS): over 15 minutes on 2 cores; for this" \
            "machine's alone: GPUCHECK_RELEASE_TARGETS=$(uname -m)-unknown-linux-gnu" \
            "bash scripts/release.sh"
    fi
    mkdir -p "$OUT"
    ensure_tools
    SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
    export SOURCE_DATE_EPOCH
    local version
    version=$(cargo pkgid -p gpucheck | sed 's/.*[#@]//')
    rm -f "$OUT"/gpucheck-"$version"-*.tar.gz "$OUT"/gpucheck_"$version"-*.deb \
        "$OUT"/gpucheck-"$version"-*.whl "$OUT/SHA256SUMS"
    local target rustc built=()
    for target in $TARGETS; do
        rustc=$(rustc_for "$target") || continue
        build "$target" "$rustc"
        built+=("$target")
    done
    [[ ${#built[@]} -gt 0 ]] || { say "nothing built"; exit 1; }
    make_assets "$(host_binary "${built[@]}")"
    for target in "${built[@]}"; do
        archive "$target" "$version"
        cargo deb --no-build --no-strip --locked --target "$target" --output "$OUT" >/dev/null
        say "wrote $(ls "$OUT"/gpucheck_"$version"-*_"$(deb_arch "$target")".deb)"
        say "wrote $("$ZIG_PYTHON" scripts/lib/wheel.py "$OUT" "$version" "${target%%-*}" \
            "target/$target/release/gpucheck" "$ASSETS/completions" . "$(summary)")"
    done
    (cd "$OUT" && sha256sum -- *.tar.gz *.deb *.whl >SHA256SUMS)
    say "wrote $OUT/SHA256SUMS"
}

# A built binary this machine can run (for the completions).
host_binary() {
    local target
    for target in "$@"; do
        if [[ $target == "$(uname -m)"-* ]]; then
            echo "target/$target/release/gpucheck"
            return
        fi
    done
    cargo build --release --locked --quiet >&2
    echo target/release/gpucheck
}

# Cargo.toml's description, the wheel's Summary.
summary() {
    sed -n 's/^description = "\(.*\)"$/\1/p' Cargo.toml | head -n 1
}

deb_arch() {
    case $1 in
    x86_64-*) echo amd64 ;;
    aarch64-*) echo arm64 ;;
    *) echo "$1" ;;
    esac
}

main
