"""The vector families register with pecore's vector tooling (pecore never imports pypsp or pyeesp): in one
process by importing a family, across packages through the ``psp_eesp.vectors`` entry points, so that either
CLI checks any family's files (vectors/README.md)."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO_ROOT

PSP_FILE = str(REPO_ROOT / "vectors" / "psp_v0_test.json")
ESP_FILE = str(REPO_ROOT / "vectors" / "esp_aes-gcm-16_test.json")


def check_with_pyeesp(pythonpath: str, file: str = PSP_FILE) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, "-m", "pyeesp", "vectors", "check", file, "-q"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=str(REPO_ROOT))


def fake_install(tmp_path, entry_points: str):
    """A dist-info that offers entry points, as `pip install` of this project writes one."""
    info = tmp_path / "psp_eesp_fake-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: psp-eesp-fake\nVersion: 0\n")
    (info / "entry_points.txt").write_text(entry_points)
    return str(tmp_path)


def test_the_other_cli_finds_a_family_through_its_entry_point(tmp_path):
    eps = "[psp_eesp.vectors]\npsp = pypsp.tools.vectors:FAMILY\neesp = pyeesp.tools.vectors:FAMILY\n"
    p = check_with_pyeesp(os.pathsep.join([fake_install(tmp_path, eps), str(REPO_ROOT)]))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "passed" in p.stdout and "not checked" not in p.stdout


def test_the_esp_family_through_its_entry_point(tmp_path):
    """The ESP files through the EESP CLI: found by pyproject's entry point (as an install offers it)."""
    eps = "[psp_eesp.vectors]\nesp = pyesp.tools.vectors:FAMILY\n"
    p = check_with_pyeesp(os.pathsep.join([fake_install(tmp_path, eps), str(REPO_ROOT)]), ESP_FILE)
    assert p.returncode == 0 and "passed" in p.stdout and "not checked" not in p.stdout, p.stdout + p.stderr


def test_pyproject_offers_every_family():
    text = (REPO_ROOT / "pyproject.toml").read_text()
    block = text.split('[project.entry-points."psp_eesp.vectors"]', 1)[1].split("[", 1)[0]
    offered = {line.split("=")[0].strip(): line.split("=", 1)[1].strip().strip('"')
               for line in block.splitlines() if "=" in line}
    assert offered == {"psp": "pypsp.tools.vectors:FAMILY", "eesp": "pyeesp.tools.vectors:FAMILY",
                       "esp": "pyesp.tools.vectors:FAMILY"}


def test_without_the_entry_point_the_family_is_unknown(tmp_path):
    """What the entry point adds: the EESP CLI alone imports no PSP code (and a stale entry point is ignored)."""
    eps = "[psp_eesp.vectors]\npsp = pypsp.tools.gone:FAMILY\n"
    # (entry_points() is a dict of groups before Python 3.10 and in 3.10-3.11 iterates as one; select() is 3.10+)
    installed = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m\n"
         "eps = m.entry_points()\n"
         "eps = eps.select(group='psp_eesp.vectors') if hasattr(eps, 'select') else eps.get('psp_eesp.vectors', [])\n"
         "print(any(e.value.startswith('pypsp.tools') for e in eps))"],
        capture_output=True, text=True, cwd=str(tmp_path), check=True).stdout.strip()
    if installed == "True":
        return  # this environment installed the project with its entry points: nothing to show here
    p = check_with_pyeesp(os.pathsep.join([fake_install(tmp_path, eps), str(REPO_ROOT)]))
    assert p.returncode == 1 and "unknown schema 'psp_packet_test_schema_v1.json'" in p.stdout, p.stdout + p.stderr


def test_families_register_on_import():
    # (an install made before the esp entry point existed offers only psp and eesp; a newer one all three)
    code = ("import pecore.tools.vectors as v, pypsp.tools.vectors, pyeesp.tools.vectors; "
            "print(sorted(set(v.families()) - {'esp'}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO_ROOT),
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert p.returncode == 0 and p.stdout.strip() == "['eesp', 'psp']", p.stdout + p.stderr
    code = "import pecore.tools.vectors as v, pyesp.tools.vectors; print('esp' in v.families())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO_ROOT),
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert p.returncode == 0 and p.stdout.strip() == "True", p.stdout + p.stderr
