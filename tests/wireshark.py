"""Running tshark on the project's dissectors from the tests.

tshark run as root ignores WIRESHARK_PLUGIN_DIR and the personal plugin folder
(docs/wireshark.md, Install the plugin), so as root every run goes through
``runuser -u nobody`` with WIRESHARK_PLUGIN_DIR pointing at the plugin built
from this tree: the tests exercise the build under test, never whatever is in
the global folder.  Files tshark reads must therefore be readable by
``nobody``: use :func:`shared_dir` for captures, key files and profiles.

The same helpers serve Wireshark 4.0, 4.4 and 4.6 (scripts/wireshark-chroot.sh runs them in
Debian chroots): the plugin folder is named after the major.minor of the tshark under test, the
Lua C module path variable after its Lua, and booleans are given as 1/0 whatever the release
prints (4.4 prints True/False).
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

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


@functools.lru_cache(maxsize=None)
def versions() -> Tuple[Optional[str], Optional[str]]:
    """(Wireshark major.minor, Lua major.minor) of the tshark under test; None where unknown."""
    if not Path(TSHARK).exists():
        return None, None
    out = subprocess.run([TSHARK, "--version"], capture_output=True, text=True,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}).stdout
    ws = re.search(r"\(Wireshark\) (\d+\.\d+)\.", out)
    lua = re.search(r"\bwith Lua\s+(\d+\.\d+)", out)  # the version line wraps anywhere
    return (ws.group(1) if ws else None), (lua.group(1) if lua else None)


def ws_version() -> str:
    """major.minor of the tshark under test: plugins load only from plugins/<major.minor>/."""
    v = versions()[0]
    if v is None:
        raise RuntimeError(f"cannot tell the Wireshark version of {TSHARK}")
    return v


def lua_cpath_var() -> str:
    """The variable the Lua of this tshark reads its C module path from (LUA_CPATH_5_2, LUA_CPATH_5_4)."""
    lua = versions()[1] or "5.2"
    return "LUA_CPATH_" + lua.replace(".", "_")


def plugin_path(flavour: str = "plain") -> Path:
    """Where the build of ``flavour`` puts the module for this tshark's Wireshark."""
    base = PLUGIN_DIRS[flavour]
    v = versions()[0]
    if v is None:  # no tshark to ask: the one version folder the build made
        found = sorted(base.glob(f"*/epan/{PLUGIN_NAME}"))
        if len(found) == 1:
            return found[0]
        v = "unknown"
    return base / v / "epan" / PLUGIN_NAME


def prints_true_false() -> bool:
    """tshark 4.4+ prints FT_BOOLEAN fields as True/False in -T fields and -T json (4.0: 1/0)."""
    v = versions()[0]
    return v is not None and tuple(int(x) for x in v.split(".")) >= (4, 4)


def available() -> Optional[str]:
    """None when tshark and the built plugin are there, else why not (for skip messages)."""
    if not Path(TSHARK).exists():
        return "tshark is not installed (bash scripts/install.sh installs it)"
    if not plugin_path().exists():
        return f"the plugin is not built ({plugin_path()}; bash scripts/install.sh builds it)"
    return None


def shared_dir(prefix: str = "pe-tshark-") -> Path:
    """A fresh directory that an unprivileged tshark can read and write, removed when the test run ends (it is
    world-writable and often holds keys: none may outlive the run, whether its test removed it or not)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o777)
    atexit.register(shutil.rmtree, d, ignore_errors=True)
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
        (EMPTY_PLUGIN_DIR / ws_version() / "epan").mkdir(parents=True, exist_ok=True)
    cpath = lua_cpath_var()
    e = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "WIRESHARK_CONFIG_DIR": str(home),
        "WIRESHARK_PLUGIN_DIR": str(plugin_dir),
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        cpath: f"{LUA_MODULE_DIR}/?.so;;",
    }
    if env:
        e.update(env)
        # Callers name the Lua 5.2 variable (Wireshark 4.0); it means the C path of whatever Lua this
        # tshark has, which would ignore LUA_CPATH_5_2 and find pelua through the default set above.
        if "LUA_CPATH_5_2" in env and cpath != "LUA_CPATH_5_2":
            e[cpath] = e.pop("LUA_CPATH_5_2")
    cmd = [*_as_user(), "env", *(f"{k}={v}" for k, v in e.items()), TSHARK]
    for script in lua_scripts:
        cmd += ["-X", f"lua_script:{script}"]
    cmd += list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={})
    if check and proc.returncode != 0:
        raise AssertionError(f"tshark failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return proc


@functools.lru_cache(maxsize=None)
def _boolean_fields(plugin: Optional[str], lua_scripts: Tuple[str, ...]) -> FrozenSet[str]:
    # -G must come before the -X lua_script options run() would put first.
    args = ["-G", "fields", *[a for s in lua_scripts for a in ("-X", f"lua_script:{s}")]]
    out = run(args, plugin=plugin).stdout
    return frozenset(line.split("\t")[2] for line in out.splitlines()
                     if line.startswith("F\t") and line.split("\t")[3:4] == ["FT_BOOLEAN"])


def boolean_fields(plugin: Optional[str] = "plain", lua_scripts: Sequence[Path] = ()) -> FrozenSet[str]:
    """The FT_BOOLEAN fields tshark knows with this plugin and these Lua scripts."""
    # The ASan build registers the same fields, but loads only with its runtime preloaded.
    return _boolean_fields("plain" if plugin == "asan" else plugin, tuple(str(s) for s in lua_scripts))


_AS_DIGIT = {"True": "1", "False": "0"}


def bool_text(value: str, sep: Optional[str] = None) -> str:
    """A boolean field's text as 4.0 prints it: True/False -> 1/0 (each occurrence when ``sep`` joins several)."""
    if sep is None:
        return _AS_DIGIT.get(value, value)
    return sep.join(_AS_DIGIT.get(v, v) for v in value.split(sep))


def normalise_field_rows(rows: List[List[str]], names: Sequence[str], sep: str, *, plugin: Optional[str] = "plain",
                         lua_scripts: Sequence[Path] = ()) -> List[List[str]]:
    """``-T fields`` rows with every boolean field in 4.0's 1/0 form (a no-op before 4.4)."""
    if not prints_true_false():
        return rows
    bools = boolean_fields(plugin, lua_scripts)
    cols = [i for i, n in enumerate(names) if n in bools]
    for row in rows:
        for i in cols:
            if i < len(row):
                row[i] = bool_text(row[i], sep)
    return rows


def normalise_json(node, bools: FrozenSet[str]):
    """``-T json`` with every boolean field in 4.0's "1"/"0" form (in place; returned for convenience)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in bools and isinstance(v, str):
                node[k] = bool_text(v)
            elif k in bools and isinstance(v, list) and all(isinstance(x, str) for x in v):
                node[k] = [bool_text(x) for x in v]
            else:
                normalise_json(v, bools)
    elif isinstance(node, list):
        for v in node:
            normalise_json(v, bools)
    return node


def fields(capture: Path, names: Sequence[str], *, extra: Sequence[str] = (), **kw) -> List[List[str]]:
    """``-T fields`` output: one list per packet, one string per field (occurrences joined by ',').
    Boolean fields read 1/0 on every release."""
    args = ["-n", "-r", str(capture), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    for n in names:
        args += ["-e", n]
    proc = run([*args, *extra], **kw)
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    return normalise_field_rows(rows, names, ",", plugin=kw.get("plugin", "plain"),
                                lua_scripts=kw.get("lua_scripts", ()))


def packets_json(capture: Path, *, extra: Sequence[str] = (), **kw) -> list:
    """``-T json`` output, parsed; boolean fields read "1"/"0" on every release."""
    proc = run(["-n", "-r", str(capture), "-T", "json", *extra], **kw)
    pkts = json.loads(proc.stdout or "[]")
    if prints_true_false():
        normalise_json(pkts, boolean_fields(kw.get("plugin", "plain"), kw.get("lua_scripts", ())))
    return pkts
