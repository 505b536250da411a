"""cffi API-mode build of the C core into ``pecore._native``.

The declarations are not written here: pecore/_cdef.py reads them from the
core's public headers (core/include/pe/*.h) at build time.  The extension
compiles the very same ``core/src/**/*.c`` files that the static library
(core/CMakeLists.txt) is built from.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import shlex
import subprocess
import tempfile
import sysconfig

from cffi import FFI

ROOT = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CORE = os.path.join(ROOT, "core")


def _load_cdef_reader():
    """pecore/_cdef.py, by path: this script runs before pecore is importable (setuptools execs it by file)."""
    spec = importlib.util.spec_from_file_location("_pe_cdef", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                           "_cdef.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cdef = _load_cdef_reader()
INCLUDE = os.path.join(CORE, "include")
HEADERS = _cdef.header_names(INCLUDE)
# What the extension has beyond the core's headers: OpenSSL's version (for --version), the callback pecore/capture.py
# defines, and the one function set_source below defines.
EXTRA_CDEF = r"""
const char *OpenSSL_version(int t);
#define OPENSSL_VERSION ...
extern "Python" int pe_py_progress(void *, uint64_t, uint64_t, uint64_t);
const pe_parallel_ops *pe_py_parallel_ops(int protocol, int decrypt); /* protocol: 0 PSP, 1 EESP, 2 ESP */
"""

NEEDS = (
    "building psp-eesp compiles its C core, which needs a C compiler and the OpenSSL 3 development headers:\n"
    "  Debian/Ubuntu:  apt-get install build-essential libssl-dev\n"
    "  Fedora/RHEL:    dnf install gcc openssl-devel\n"
    "  macOS:          xcode-select --install; brew install openssl@3 pkg-config\n"
    "(headers outside the default paths: set PKG_CONFIG_PATH so that `pkg-config openssl` finds them, or CFLAGS)"
)


def _openssl_flags() -> tuple:
    """(include dirs, library dirs) from pkg-config, when it knows OpenSSL; the defaults otherwise."""
    try:
        p = subprocess.run(["pkg-config", "--cflags-only-I", "--libs-only-L", "openssl"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return [], []
    if p.returncode != 0:
        return [], []
    words = shlex.split(p.stdout)
    return [w[2:] for w in words if w.startswith("-I")], [w[2:] for w in words if w.startswith("-L")]


def check_build_needs(include_dirs=(), cc=None) -> None:
    """Fail early, with what to install, when no compiler or no OpenSSL 3 headers are there.

    Without this, pip shows a compiler error about openssl/core_names.h deep in its log.
    """
    cc = shlex.split(cc or os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    flags = [f"-I{d}" for d in include_dirs] + shlex.split(os.environ.get("CFLAGS", ""))
    probe = "#include <openssl/core_names.h>\n#include <openssl/evp.h>\n"
    try:
        p = subprocess.run([*cc, *flags, "-E", "-x", "c", "-"], input=probe, capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SystemExit(f"psp-eesp: no working C compiler ({' '.join(cc)}: {e}).\n{NEEDS}") from None
    if p.returncode != 0:
        missing = "OpenSSL 3 headers not found" if "openssl" in p.stderr else "the C compiler failed"
        raise SystemExit(f"psp-eesp: {missing} ({p.stderr.strip().splitlines()[0] if p.stderr.strip() else ''}).\n"
                         f"{NEEDS}")


def ipsec_mb_found(cc=None) -> bool:
    """True when intel-ipsec-mb's header and library link here (the fast backend, pe/backend.h).

    PE_IPSEC_MB=0 builds without it.  Without it the core is whole on OpenSSL; the build says so once.
    """
    if os.environ.get("PE_IPSEC_MB") == "0":
        return False
    cc = shlex.split(cc or os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    probe = "#include <intel-ipsec-mb.h>\nint main(void) { return imb_get_version() == 0; }\n"
    try:
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([*cc, *shlex.split(os.environ.get("CFLAGS", "")), "-x", "c", "-", "-o",
                                os.path.join(d, "probe"), "-lIPSec_MB"], input=probe, capture_output=True, text=True,
                               timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


_ssl_include, _ssl_libdirs = _openssl_flags()
if os.environ.get("PE_SKIP_BUILD_CHECK") != "1":
    check_build_needs(_ssl_include)
IPSEC_MB = ipsec_mb_found()
if not IPSEC_MB:
    print("psp-eesp: intel-ipsec-mb not found, building the OpenSSL crypto backend only "
          "(Debian/Ubuntu: apt-get install libipsec-mb-dev; Fedora: dnf install intel-ipsec-mb-devel)")

# Link-time optimisation, as core/CMakeLists.txt's PE_LTO: PE_LTO=0 builds without it.  The link compiles the
# code again, so it is given the optimisation level too.
_LTO = [] if os.environ.get("PE_LTO") == "0" else ["-flto=auto"]

ffibuilder = FFI()
ffibuilder.cdef(_cdef.generate(INCLUDE) + EXTRA_CDEF)
ffibuilder.set_source(
    "pecore._native",
    "\n".join(
        ["#include <openssl/crypto.h>"]
        + [f'#include "{h}"' for h in HEADERS]
        + [  # cffi cannot take the address of a const object: the six transforms by protocol and direction
            "static const pe_parallel_ops *pe_py_parallel_ops(int protocol, int decrypt)",
            "{ return protocol == 2 ? (decrypt ? &pe_esp_parallel_decap : &pe_esp_parallel_encap)",
            "       : protocol == 1 ? (decrypt ? &pe_eesp_parallel_decap : &pe_eesp_parallel_encap)",
            "                       : (decrypt ? &pe_psp_parallel_decap : &pe_psp_parallel_encap); }",
        ]
    ),
    sources=sorted(glob.glob(os.path.join(CORE, "src", "**", "*.c"), recursive=True)),
    include_dirs=[INCLUDE, os.path.join(CORE, "src"), *_ssl_include],
    library_dirs=_ssl_libdirs,
    libraries=["crypto", *(["IPSec_MB"] if IPSEC_MB else [])],
    define_macros=[("PE_HAVE_IPSEC_MB", None)] if IPSEC_MB else [],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wno-unused-parameter", "-pthread", *_LTO]
    + (os.environ.get("PE_EXTRA_CFLAGS", "").split()),
    extra_link_args=["-pthread", *(["-O2", *_LTO] if _LTO else [])] + os.environ.get("PE_EXTRA_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
