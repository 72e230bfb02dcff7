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
#     temporary root) and its gpucheck --version answers;
#   - each wheel holds the archive's binary, the man page and completions and
#     the manylinux_2_28 tag; twine check --strict accepts its metadata; pip
#     installs it into a fresh venv, where gpucheck runs as the archive's does
#     and judges that venv's Python (aarch64: pip --platform into a folder,
#     run under qemu); uv pip installs it and uvx runs it (uv from PyPI).
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
# jsonschema validates the JSON reports; twine checks the wheels' metadata
# (with readme_renderer's Markdown support, for the README as description);
# uv installs them as pip does.
"$PY" -c 'import jsonschema, twine, cmarkgfm' 2>/dev/null ||
    .tools/venv/bin/pip install --quiet jsonschema twine 'readme_renderer[md]'
.tools/venv/bin/uv --version >/dev/null 2>&1 || .tools/venv/bin/pip install --quiet uv
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
    for target in $TARGETS; do
        want+="gpucheck-$version-$target.tar.gz gpucheck_$version-1_$(deb_arch "$target").deb $(wheel_name "$target") "
    done
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

# Usage: binary_runs TARGET [BINARY] (default: the archive's).
binary_runs() {
    local target=$1 bin=${2:-$WORK/$1/gpucheck-$version-$1/gpucheck} out rc
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

wheel_name() { echo "gpucheck-$version-py3-none-manylinux_2_28_${1%%-*}.whl"; }
# The wheel's files, modes and WHEEL tag; its binary is the archive's, byte for byte.
wheel_complete() {
    local target=$1
    "$PY" - "$OUT/$(wheel_name "$target")" "$WORK/$target/gpucheck-$version-$target/gpucheck" "$version" "${target%%-*}" <<'EOF' ||
import sys, zipfile
path, binary, version, arch = sys.argv[1:5]
whl = zipfile.ZipFile(path)
data, info = f"gpucheck-{version}.data", f"gpucheck-{version}.dist-info"
want = sorted([f"{data}/scripts/gpucheck", f"{data}/data/share/man/man1/gpucheck.1",
    f"{data}/data/share/bash-completion/completions/gpucheck",
    f"{data}/data/share/zsh/site-functions/_gpucheck",
    f"{data}/data/share/fish/vendor_completions.d/gpucheck.fish",
    f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD",
    f"{info}/licenses/LICENSE-MIT", f"{info}/licenses/LICENSE-APACHE"])
assert sorted(whl.namelist()) == want, whl.namelist()
wheel = whl.read(f"{info}/WHEEL").decode()
assert f"Tag: py3-none-manylinux_2_28_{arch}\n" in wheel, wheel
assert "Root-Is-Purelib: false\n" in wheel, wheel
assert (whl.getinfo(f"{data}/scripts/gpucheck").external_attr >> 16) & 0o777 == 0o755
assert whl.read(f"{data}/scripts/gpucheck") == open(binary, "rb").read(), "not the archive's binary"
EOF
        fail "the wheel's contents"
}
wheels_metadata() {
    "$ROOT/.tools/venv/bin/twine" check --strict "$OUT"/*.whl >"$WORK/twine.log" 2>&1 ||
        fail "twine check: $(cat "$WORK/twine.log")"
}
# pip install into a fresh venv; its gpucheck answers, run without
# activation, and judges the venv's Python. aarch64: pip installs it for that
# platform into a folder (pip puts no foreign wheel in this machine's venv)
# and qemu runs it.
wheel_pip_installs() {
    local target=$1 whl venv=$WORK/pip-$1 bin out
    whl=$OUT/$(wheel_name "$target")
    if [[ $target == "$(uname -m)"-* ]]; then
        python3 -m venv "$venv" || fail "python3 -m venv"
        "$venv/bin/pip" install --quiet --no-index "$whl" || fail "pip install $whl"
        bin=$venv/bin/gpucheck
        [[ -s $venv/share/man/man1/gpucheck.1 && -s $venv/share/bash-completion/completions/gpucheck ]] ||
            fail "no man page or completions under $venv/share"
        out=$(env -i PATH=/usr/bin:/bin "$bin" --only torch.import --json - 2>/dev/null) || true
        "$PY" -c 'import json,sys; r=json.loads(sys.argv[1])["results"][0]; assert r["facts"]["python"] == sys.argv[2], r["facts"]' \
            "$out" "$venv/bin/python" || fail "torch.import did not judge $venv/bin/python"
    else
        "$PY" -m pip install --quiet --no-index --no-deps --only-binary=:all: \
            --platform "manylinux_2_28_${target%%-*}" --target "$venv" "$whl" || fail "pip install --platform"
        bin=$venv/bin/gpucheck
    fi
    [[ -x $bin ]] || fail "pip installed no executable $bin"
    binary_runs "$target" "$bin"
}
# uv pip install into a uv venv, and uvx running it from the wheel.
wheel_uv_installs() {
    local target=$1 whl venv=$WORK/uv-$1 out uv=$ROOT/.tools/venv/bin/uv
    whl=$OUT/$(wheel_name "$target")
    export UV_CACHE_DIR=$WORK/uv-cache
    "$uv" venv --quiet "$venv" || fail "uv venv"
    VIRTUAL_ENV=$venv "$uv" pip install --quiet --offline "$whl" || fail "uv pip install"
    out=$(env -i PATH=/usr/bin:/bin "$venv/bin/gpucheck" --version) || fail "gpucheck --version"
    [[ $out == "gpucheck $version" ]] || fail "--version: $out"
    out=$("$ROOT/.tools/venv/bin/uvx" --offline --from "$whl" gpucheck --version) || fail "uvx gpucheck --version"
    [[ $out == "gpucheck $version" ]] || fail "uvx: $out"
    # uvx's environment is a throwaway one in uv's cache: not the training Python.
    out=$("$ROOT/.tools/venv/bin/uvx" --offline --from "$whl" gpucheck --only torch.import --json - 2>/dev/null) || true
    "$PY" -c 'import json,sys; r=json.loads(sys.argv[1])["results"][0]; assert "archive-v0" not in r["facts"].get("python", ""), r["facts"]' \
        "$out" || fail "uvx judged its own throwaway environment's Python"
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
    t "$target: the wheel holds the archive's binary, man page and completions, tagged manylinux_2_28" wheel_complete "$target"
    t "$target: pip installs the wheel; its gpucheck runs (--version, list, explain, quick JSON)" wheel_pip_installs "$target"
done
t "twine check --strict accepts the wheels' metadata" wheels_metadata
t "x86_64-unknown-linux-gnu: uv pip installs the wheel and uvx runs it" wheel_uv_installs x86_64-unknown-linux-gnu
t "promtool check metrics accepts --prom's output (Debian's promtool)" promtool_lints_metrics

echo
summary release || exit 1

bash scripts/test-contrib.sh "$WORK/x86_64-unknown-linux-gnu/gpucheck-$version-x86_64-unknown-linux-gnu/gpucheck"
