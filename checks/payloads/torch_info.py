"""gpucheck payload: what the PyTorch of this Python can do with CUDA.

Run by gpucheck (torch.import and the torch.* checks) with the Python that
will train. Prints exactly one result line on stdout:

    GPUCHECK_TORCH_INFO {json}

so that anything torch or its plugins print cannot break parsing. Progress
goes to stderr as "GPUCHECK_TORCH_STAGE <what>" lines, so a hang can be
named. Every query is wrapped: on a CPU-only box, or with a broken driver,
the payload still prints its result and exits 0.
"""

import json
import os
import sys
import time

MARK = "GPUCHECK_TORCH_INFO "
STAGE = "GPUCHECK_TORCH_STAGE "

# Libraries worth reporting when torch maps them: the CUDA driver and
# runtime, NCCL, cuDNN and the CUDA math libraries.
LIB_PREFIXES = (
    "libcuda.so",
    "libcudart.so",
    "libnccl.so",
    "libcudnn.so",
    "libcublas.so",
    "libcublasLt.so",
    "libnvrtc.so",
    "libnvJitLink.so",
    "libcusparse.so",
    "libcufft.so",
    "libcurand.so",
    "libcusolver.so",
    "libnvidia-ml.so",
)


def stage(what):
    sys.stderr.write(STAGE + what + "\n")
    sys.stderr.flush()


def emit(info):
    # One line, ASCII only, flushed: the marker must be at the start of a line.
    sys.stdout.write("\n" + MARK + json.dumps(info, ensure_ascii=True) + "\n")
    sys.stdout.flush()


def describe(exc):
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return "%s: %s" % (type(exc).__name__, first) if first else type(exc).__name__


def loaded_libraries():
    seen = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                name = os.path.basename(path)
                if name.startswith(LIB_PREFIXES) and path not in seen:
                    seen.append(path)
    except OSError:
        pass
    return seen


def version_string(v):
    """NCCL's version as "2.27.7" from a tuple (torch >= 2.x) or an int."""
    if isinstance(v, (tuple, list)):
        return ".".join(str(p) for p in v)
    if isinstance(v, int):
        if v >= 20900:  # NCCL >= 2.9: major*10000 + minor*100 + patch
            return "%d.%d.%d" % (v // 10000, (v % 10000) // 100, v % 100)
        return "%d.%d.%d" % (v // 1000, (v % 1000) // 100, v % 100)
    return str(v)


def main():
    info = {
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "errors": {},
    }

    stage("import torch")
    started = time.perf_counter()
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as e:
        if getattr(e, "name", None) == "torch":
            info["not_installed"] = True
        info["import_error"] = describe(e)
        emit(info)
        return
    except BaseException as e:  # OSError (missing .so), ImportError (symbols), ...
        info["import_error"] = describe(e)
        emit(info)
        return
    info["import_time_s"] = round(time.perf_counter() - started, 3)

    def query(key, fn):
        try:
            info[key] = fn()
        except BaseException as e:  # never let one query end the payload
            info["errors"][key] = describe(e)

    query("torch_version", lambda: str(torch.__version__))
    query("torch_path", lambda: os.path.dirname(torch.__file__))
    query("cuda_build", lambda: torch.version.cuda)

    stage("torch.cuda.is_available")
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        query("cuda_available", lambda: bool(torch.cuda.is_available()))
    info["cuda_warnings"] = [str(w.message).strip() for w in caught][:5]

    def arch_list():
        archs = list(torch.cuda.get_arch_list())
        if not archs and hasattr(torch._C, "_cuda_getArchFlags"):
            # Older torch returns [] from get_arch_list when CUDA is unavailable.
            flags = torch._C._cuda_getArchFlags() or ""
            archs = flags.split()
        return archs

    query("arch_list", arch_list)

    if info.get("cuda_available"):
        stage("torch.cuda.device_count")
        query("device_count", lambda: int(torch.cuda.device_count()))
        devices = []
        for i in range(info.get("device_count") or 0):
            stage("torch.cuda.get_device_properties(%d)" % i)
            try:
                p = torch.cuda.get_device_properties(i)
                devices.append(
                    {"index": i, "name": p.name, "capability": [p.major, p.minor]}
                )
            except BaseException as e:
                info["errors"]["device_%d" % i] = describe(e)
        info["devices"] = devices
    else:
        info["device_count"] = 0
        if info.get("cuda_build"):
            # torch.cuda.init() raises with the reason is_available() hides.
            stage("torch.cuda.init")
            try:
                torch.cuda.init()
            except BaseException as e:
                info["unavailable_reason"] = describe(e)

    stage("cudnn")
    query("cudnn_version", lambda: torch.backends.cudnn.version())

    stage("torch.distributed")

    def nccl_available():
        import torch.distributed as dist

        return bool(dist.is_available() and dist.is_nccl_available())

    query("nccl_available", nccl_available)
    if info.get("nccl_available"):
        query("nccl_version", lambda: version_string(torch.cuda.nccl.version()))

    info["loaded_libraries"] = loaded_libraries()
    emit(info)


if __name__ == "__main__":
    main()
