"""Running tshark on the project's dissectors from the tests.

tshark run as root ignores WIRESHARK_PLUGIN_DIR and the personal plugin folder
(../shared/spec/conventions.md §3.2), so as root every run goes through
``runuser -u nobody`` with WIRESHARK_PLUGIN_DIR pointing at the plugin built
from this tree: the tests exercise the build under test, never whatever is in
the global folder.  Files tshark reads must therefore be readable by
``nobody``: use :func:`shared_dir` for captures, key files and profiles.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
PLUGIN_NAME = "psp_eesp.so"
# cmake -S dissectors/plugin -B build/plugin puts the module where WIRESHARK_PLUGIN_DIR expects it.
PLUGIN_DIRS = {
    "plain": BUILD / "plugin" / "plugins",
    "asan": BUILD / "plugin-asan" / "plugins",
}
LUA_DIR = ROOT / "dissectors" / "lua"
LUA_MODULE_DIR = BUILD / "lua"  # pelua.so
EMPTY_PLUGIN_DIR = BUILD / "no-plugins"  # WIRESHARK_PLUGIN_DIR with nothing in it: no C plugins at all

TSHARK = shutil.which("tshark") or "/usr/bin/tshark"


def plugin_path(flavour: str = "plain") -> Path:
    return PLUGIN_DIRS[flavour] / "4.0" / "epan" / PLUGIN_NAME


def available() -> Optional[str]:
    """None when tshark and the built plugin are there, else why not (for skip messages)."""
    if not Path(TSHARK).exists():
        return "tshark is not installed (bash scripts/install.sh installs it)"
    if not plugin_path().exists():
        return f"the plugin is not built ({plugin_path()}; bash scripts/install.sh builds it)"
    return None


def shared_dir(prefix: str = "pe-tshark-") -> Path:
    """A fresh directory that an unprivileged tshark can read and write."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o777)
    return d


def _as_user() -> List[str]:
    # An absolute path: tshark runs with an empty environment, whose PATH lacks /usr/sbin.
    runuser = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/runuser"
    return [runuser, "-u", "nobody", "--"] if os.geteuid() == 0 else []


def run(
    args: Sequence[str],
    *,
    plugin: Optional[str] = "plain",
    lua_scripts: Sequence[Path] = (),
    profile: Optional[Path] = None,
    env: Optional[Dict[str, str]] = None,
    check: bool = True,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """Run tshark with our plugin (``plugin="plain"``/``"asan"``) or none (``plugin=None``).

    ``profile``: a directory used as WIRESHARK_CONFIG_DIR (UAT files go there) and HOME.
    """
    home = profile or shared_dir("pe-home-")
    try:
        return _run(args, home, plugin, lua_scripts, env, check, timeout)
    finally:
        if profile is None:
            shutil.rmtree(home, ignore_errors=True)


def _run(args, home, plugin, lua_scripts, env, check, timeout) -> subprocess.CompletedProcess:
    plugin_dir = PLUGIN_DIRS[plugin] if plugin else EMPTY_PLUGIN_DIR
    if plugin is None:
        (EMPTY_PLUGIN_DIR / "4.0" / "epan").mkdir(parents=True, exist_ok=True)
    e = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "WIRESHARK_CONFIG_DIR": str(home),
        "WIRESHARK_PLUGIN_DIR": str(plugin_dir),
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        "LUA_CPATH_5_2": f"{LUA_MODULE_DIR}/?.so;;",
    }
    if env:
        e.update(env)
    cmd = [*_as_user(), "env", *(f"{k}={v}" for k, v in e.items()), TSHARK]
    for script in lua_scripts:
        cmd += ["-X", f"lua_script:{script}"]
    cmd += list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={})
    if check and proc.returncode != 0:
        raise AssertionError(f"tshark failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return proc


def fields(capture: Path, names: Sequence[str], *, extra: Sequence[str] = (), **kw) -> List[List[str]]:
    """``-T fields`` output: one list per packet, one string per field (occurrences joined by ',')."""
    args = ["-n", "-r", str(capture), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for n in names:
        args += ["-e", n]
    proc = run([*args, *extra], **kw)
    return [line.split("\t") for line in proc.stdout.splitlines()]


def packets_json(capture: Path, *, extra: Sequence[str] = (), **kw) -> list:
    """``-T json`` output, parsed."""
    proc = run(["-n", "-r", str(capture), "-T", "json", *extra], **kw)
    return json.loads(proc.stdout or "[]")
