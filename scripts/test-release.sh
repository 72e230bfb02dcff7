#!/usr/bin/env bash
# Builds the release (scripts/release.sh OUTDIR) and tests what it wrote:
#   - SHA256SUMS verifies every archive and package;
#   - each archive holds the binary, man page, completions, README and licences;
#   - each binary is dynamically linked to glibc and needs no symbol version
#     newer than the baseline, read from the ELF's version needs (readelf -V);
#   - the x86_64 binary runs here, the aarch64 one under qemu user emulation
#     (Debian's qemu-user and libc6-arm64-cross): --version, list, explain and
#     the quick profile's JSON (validated against schema/report.schema.json);
#   - each .deb has its control fields and files, unpacks (dpkg-deb -x into a
#     temporary root) and its gpucheck --version answers.
# Then lints --prom's output with promtool check metrics, Prometheus's own
# linter (tests/formats.rs promtool_accepts_the_metrics, ignored in plain
# cargo test): promtool comes from Debian's prometheus package, downloaded
# and unpacked here (19 MB, a few seconds), not installed: that package is a
# whole server with a user and a service.
# Then runs scripts/test-contrib.sh against the x86_64 release binary.
# Usage: scripts/test-release.sh [OUTDIR]  (default: a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GLIBC_BASELINE=2.28
# The aarch64 glibc that qemu runs the aarch64 binary with: the dynamic
# loader and every library from this one sysroot (libc6-arm64-cross).
ARM64_SYSROOT=/usr/aarch64-linux-gnu
TARGETS=${GPUCHECK_RELEASE_TARGETS:-"x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu"}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OUT=${1:-$WORK/dist}

need_debs=()
command -v qemu-aarch64 >/dev/null || need_debs+=(qemu-user)
[[ -e $ARM64_SYSROOT/lib/ld-linux-aarch64.so.1 ]] || need_debs+=(libc6-arm64-cross)
[[ -e $ARM64_SYSROOT/lib/libgcc_s.so.1 ]] || need_debs+=(libgcc-s1-arm64-cross)
if [[ $TARGETS == *aarch64* && ${#need_debs[@]} -gt 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_debs[@]}" >/dev/null
fi

start=$SECONDS
GPUCHECK_RELEASE_TARGETS=$TARGETS bash scripts/release.sh "$OUT"
echo "release.sh took $((SECONDS - start)) s"
PY=$ROOT/.tools/venv/bin/python
"$PY" -c 'import jsonschema' 2>/dev/null || .tools/venv/bin/pip install --quiet jsonschema
version=$(cargo pkgid -p gpucheck | sed 's/.*[#@]//')

# shellcheck source=scripts/lib/harness.sh
source "$ROOT/scripts/lib/harness.sh"

deb_arch() { case $1 in x86_64-*) echo amd64 ;; aarch64-*) echo arm64 ;; esac }
elf_machine() { case $1 in x86_64-*) echo "Advanced Micro Devices X86-64" ;; aarch64-*) echo AArch64 ;; esac }
# Runs a binary for TARGET on this machine, killed after 120 s.
# Under qemu, LD_LIBRARY_PATH pins the libraries to the loader's sysroot: -L
# only redirects the loader, which then takes the libraries from the host's
# /etc/ld.so.cache, and that lists Debian's multiarch libc6:arm64 in
# /usr/lib/aarch64-linux-gnu once anything installed it (release.sh's
# libstd-rust-web-dev:arm64 does). A loader and a libc from different glibc
# builds disagree on the loader's private data (its thread-stack cache): the
# first pthread_create loops forever, so every run of the checks hung, while
# --version, list and explain, which start no thread, answered.
run_for() {
    local target=$1
    shift
    case $target in
    "$(uname -m)"-*) timeout -s KILL 120 "$@" ;;
    aarch64-*) timeout -s KILL 120 qemu-aarch64 -L "$ARM64_SYSROOT" \
        -E LD_LIBRARY_PATH="$ARM64_SYSROOT/lib" "$@" ;;
    *) fail "cannot run $target binaries here" ;;
    esac
}

sums_verify() {
    (cd "$OUT" && sha256sum --strict --quiet -c SHA256SUMS) || fail "sha256sum -c SHA256SUMS"
    local listed
    listed=$(awk '{print $2}' "$OUT/SHA256SUMS" | sort | tr '\n' ' ')
    local want=""
    for target in $TARGETS; do want+="gpucheck-$version-$target.tar.gz gpucheck_$version-1_$(deb_arch "$target").deb "; done
    want=$(tr ' ' '\n' <<<"$want" | sed '/^$/d' | sort | tr '\n' ' ')
    [[ $listed == "$want" ]] || fail "SHA256SUMS lists: $listed; want: $want"
}

archive_complete() {
    local target=$1 name=gpucheck-$version-$1
    local want got
    want=$(printf '%s\n' "$name/" "$name/LICENSE-APACHE" "$name/LICENSE-MIT" "$name/README.md" \
        "$name/completions/" "$name/completions/_gpucheck" "$name/completions/gpucheck.bash" \
        "$name/completions/gpucheck.fish" "$name/gpucheck" "$name/gpucheck.1" | sort)
    got=$(tar -tzf "$OUT/$name.tar.gz" | sort)
    [[ $got == "$want" ]] || fail "archive holds: $(echo $got)"
    mkdir -p "$WORK/$target" && tar -xzf "$OUT/$name.tar.gz" -C "$WORK/$target"
    bash -n "$WORK/$target/$name/completions/gpucheck.bash" || fail "bash completion does not parse"
    grep -q '^\.TH' "$WORK/$target/$name/gpucheck.1" || fail "gpucheck.1 is no man page"
}

# The GLIBC_x.y versions the binary needs, newest last.
glibc_needs() {
    readelf -V --wide "$1" | grep -o 'Name: GLIBC_[0-9.]*' | sed 's/Name: GLIBC_//' | sort -uV
}
elf_glibc_baseline() {
    local target=$1 bin=$WORK/$1/gpucheck-$version-$1/gpucheck newest
    readelf -h "$bin" | grep -q "Machine: *$(elf_machine "$target")" || fail "not an $(elf_machine "$target") ELF"
    readelf -d "$bin" | grep -q 'NEEDED.*\[libc\.so\.6\]' || fail "not dynamically linked to glibc"
    readelf -l "$bin" | grep -q 'Requesting program interpreter' || fail "no ELF interpreter (static?)"
    newest=$(glibc_needs "$bin" | tail -n 1)
    [[ -n $newest ]] || fail "no GLIBC version needs found"
    echo "    $target needs GLIBC $(glibc_needs "$bin" | tr '\n' ' ')"
    [[ $(printf '%s\n%s\n' "$newest" "$GLIBC_BASELINE" | sort -V | tail -n 1) == "$GLIBC_BASELINE" ]] ||
        fail "needs GLIBC_$newest, newer than the $GLIBC_BASELINE baseline"
}

binary_runs() {
    local target=$1 bin=$WORK/$1/gpucheck-$version-$1/gpucheck out rc
    out=$(run_for "$target" "$bin" --version) || fail "--version failed"
    [[ $out == "gpucheck $version" ]] || fail "--version: $out"
    out=$(run_for "$target" "$bin" list) || fail "list failed"
    grep -q '^ *gpu\.ecc  *gpu  *quick ' <<<"$out" || fail "list has no gpu.ecc"
    out=$(run_for "$target" "$bin" explain gpu.ecc) || fail "explain failed"
    grep -qi 'ECC' <<<"$out" || fail "explain gpu.ecc: $out"
    rc=0
    run_for "$target" "$bin" --profile quick --json - >"$WORK/$target.json" 2>/dev/null || rc=$?
    [[ $rc != 137 ]] || fail "--profile quick --json -: killed after 120 s (hung)"
    [[ $rc == 0 || $rc == 1 || $rc == 137 ]] || fail "--profile quick --json -: exit $rc"
    "$PY" - "$WORK/$target.json" "$ROOT/schema/report.schema.json" "${target%%-*}" <<'EOF' || fail "the JSON report does not validate"
import json, sys, jsonschema
report, schema = (json.load(open(p)) for p in sys.argv[1:3])
jsonschema.validate(report, schema)
assert report["profile"] == "quick"
# The run happened on the target's architecture (qemu reports aarch64).
assert report["host"]["arch"] == sys.argv[3], report["host"]["arch"]
assert report["results"], "no check ran"
EOF
}

deb_installs() {
    local target=$1 arch deb info root=$WORK/deb-$1 out
    arch=$(deb_arch "$target")
    deb=$OUT/gpucheck_$version-1_$arch.deb
    info=$(dpkg-deb --info "$deb") || fail "dpkg-deb --info"
    grep -q "^ Package: gpucheck$" <<<"$info" || fail "Package field"
    grep -q "^ Version: $version-1$" <<<"$info" || fail "Version field"
    grep -q "^ Architecture: $arch$" <<<"$info" || fail "Architecture field"
    grep -q "^ Depends: libc6 (>= $GLIBC_BASELINE)$" <<<"$info" || fail "Depends field"
    mkdir -p "$root" && dpkg-deb -x "$deb" "$root"
    local f
    for f in usr/bin/gpucheck usr/share/man/man1/gpucheck.1.gz usr/share/bash-completion/completions/gpucheck \
        usr/share/zsh/vendor-completions/_gpucheck usr/share/fish/vendor_completions.d/gpucheck.fish \
        usr/share/doc/gpucheck/README.md usr/share/doc/gpucheck/LICENSE-MIT usr/share/doc/gpucheck/LICENSE-APACHE; do
        [[ -s $root/$f ]] || fail "the package has no $f"
    done
    out=$(run_for "$target" "$root/usr/bin/gpucheck" --version) || fail "gpucheck --version failed"
    [[ $out == "gpucheck $version" ]] || fail "gpucheck --version: $out"
}

# promtool on PATH, or else unpacked from Debian's prometheus package.
promtool_lints_metrics() {
    local dir=$WORK/prometheus
    if ! command -v promtool >/dev/null; then
        apt-cache show prometheus >/dev/null 2>&1 || apt-get update -qq
        (cd "$WORK" && apt-get download -qq -o APT::Sandbox::User=root prometheus) || fail "apt-get download prometheus"
        dpkg-deb -x "$WORK"/prometheus_*.deb "$dir" || fail "cannot unpack the prometheus package"
    fi
    local out
    out=$(PATH=$PATH:$dir/usr/bin cargo test --locked --test formats -- --ignored --exact promtool_accepts_the_metrics 2>&1) ||
        fail "promtool check metrics rejects --prom's output: $out"
    # Not a filter that matched nothing.
    grep -q '^test result: ok\. 1 passed' <<<"$out" || fail "promtool_accepts_the_metrics did not run: $out"
}

t "SHA256SUMS verifies every archive and package" sums_verify
for target in $TARGETS; do
    t "$target: the archive holds binary, man page, completions, README, licences" archive_complete "$target"
    t "$target: dynamically linked, needs glibc <= $GLIBC_BASELINE (ELF version needs)" elf_glibc_baseline "$target"
    t "$target: --version, list, explain and --profile quick --json - (schema-valid) run" binary_runs "$target"
    t "$target: the .deb unpacks and its gpucheck --version answers" deb_installs "$target"
done
t "promtool check metrics accepts --prom's output (Debian's promtool)" promtool_lints_metrics

echo
summary release || exit 1

bash scripts/test-contrib.sh "$WORK/x86_64-unknown-linux-gnu/gpucheck-$version-x86_64-unknown-linux-gnu/gpucheck"
