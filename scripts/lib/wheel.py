"""Writes a Python wheel that carries the gpucheck binary, as scripts/release.sh
builds it (the same glibc 2.28 binary as the archives and .debs), so that
`pip install gpucheck` / `uv pip install` / `pipx` / `uvx` put `gpucheck` on
an environment's PATH, the way ruff and uv ship their Rust binaries.

The wheel format (PEP 427, the binary distribution format of
packaging.python.org) with Core Metadata 2.1:
  gpucheck-V.data/scripts/gpucheck             -> <env>/bin/gpucheck (mode 755)
  gpucheck-V.data/data/share/man/man1/gpucheck.1
  gpucheck-V.data/data/share/bash-completion/completions/gpucheck
  gpucheck-V.data/data/share/zsh/site-functions/_gpucheck
  gpucheck-V.data/data/share/fish/vendor_completions.d/gpucheck.fish
  gpucheck-V.dist-info/{METADATA,WHEEL,RECORD,licenses/LICENSE-*}
Tag: py3-none-manylinux_2_28_<arch> (any Python; glibc >= 2.28). Entries are
sorted and dated SOURCE_DATE_EPOCH, so a rebuild is byte-identical.

Usage: wheel.py OUTDIR VERSION ARCH BINARY COMPLETIONS_DIR REPO_ROOT SUMMARY
(ARCH: x86_64 or aarch64; COMPLETIONS_DIR holds gpucheck.bash, _gpucheck and
gpucheck.fish; the man page and README come from REPO_ROOT; SUMMARY is
Cargo.toml's description). Prints the wheel's path.
"""

import base64
import hashlib
import os
import sys
import time
import zipfile

# The glibc baseline of scripts/release.sh's build, as a manylinux tag (PEP 600).
GLIBC_TAG = "manylinux_2_28"
# The earliest date a zip entry can carry.
ZIP_EPOCH = 315532800  # 1980-01-01


def metadata(version, summary, readme):
    head = [
        "Metadata-Version: 2.1",
        "Name: gpucheck",
        f"Version: {version}",
        f"Summary: {summary}",
        "License: MIT OR Apache-2.0",
        "Keywords: gpu,cuda,nccl,pytorch,ddp,nvidia,healthcheck",
        "Classifier: Environment :: Console",
        "Classifier: Environment :: GPU :: NVIDIA CUDA",
        "Classifier: License :: OSI Approved :: MIT License",
        "Classifier: License :: OSI Approved :: Apache Software License",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: Rust",
        "Classifier: Topic :: System :: Monitoring",
        "Description-Content-Type: text/markdown; charset=UTF-8",
    ]
    return "\n".join(head) + "\n\n" + readme


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{name},sha256={digest.decode()},{len(data)}"


def main(out_dir, version, arch, binary, completions, root, summary):
    tag = f"py3-none-{GLIBC_TAG}_{arch}"
    data = f"gpucheck-{version}.data"
    info = f"gpucheck-{version}.dist-info"
    read = lambda path: open(path, "rb").read()
    share = f"{data}/data/share"
    files = [
        (f"{data}/scripts/gpucheck", read(binary), 0o755),
        (f"{share}/man/man1/gpucheck.1", read(os.path.join(root, "man/gpucheck.1")), 0o644),
        (f"{share}/bash-completion/completions/gpucheck",
         read(os.path.join(completions, "gpucheck.bash")), 0o644),
        (f"{share}/zsh/site-functions/_gpucheck",
         read(os.path.join(completions, "_gpucheck")), 0o644),
        (f"{share}/fish/vendor_completions.d/gpucheck.fish",
         read(os.path.join(completions, "gpucheck.fish")), 0o644),
    ]
    for licence in ("LICENSE-MIT", "LICENSE-APACHE"):
        files.append((f"{info}/licenses/{licence}", read(os.path.join(root, licence)), 0o644))
    readme = read(os.path.join(root, "README.md")).decode()
    files.append((f"{info}/METADATA", metadata(version, summary, readme).encode(), 0o644))
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: gpucheck scripts/lib/wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )
    files.append((f"{info}/WHEEL", wheel.encode(), 0o644))
    files.sort(key=lambda f: f[0])
    record = [record_line(name, body) for name, body, _ in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))

    stamp = max(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())), ZIP_EPOCH)
    date = time.gmtime(stamp)[:6]
    path = os.path.join(out_dir, f"gpucheck-{version}-{tag}.whl")
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED) as whl:
        for name, body, mode in files:
            entry = zipfile.ZipInfo(name, date_time=date)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, body, compresslevel=9)
    os.replace(path + ".tmp", path)
    print(path)


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__.split("\n\n")[-1].strip())
    main(*sys.argv[1:])
