"""Writing vector files, schemas, pcaps and key files whole or not at all: each is written to a temporary file
beside it and renamed into place only once every one of them is complete, so an exception or Ctrl-C leaves the
previous files as they were."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pecore.tools.vectors.documents import VectorFile, dumps


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def temp_beside(path: Path) -> Path:
    """A new empty file next to `path` (same directory, so renaming it onto `path` is atomic), with the mode
    a plain open() would give."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


class Staged:
    """Files written beside their targets and renamed into place together by commit(); on any exception
    (Ctrl-C included) inside ``with``, the temporary files go and the targets stay as they were."""

    def __init__(self) -> None:
        self.pending: List[Tuple[Path, Path]] = []

    def path_for(self, target: "os.PathLike[str] | str") -> Path:
        tmp = temp_beside(Path(target))
        self.pending.append((tmp, Path(target)))
        return tmp

    def text(self, target: "os.PathLike[str] | str", text: str) -> None:
        with open(self.path_for(target), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    def commit(self) -> List[Path]:
        done = []
        for tmp, target in self.pending:
            os.replace(tmp, target)
            done.append(target)
        self.pending = []
        return done

    def discard(self) -> None:
        for tmp, _ in self.pending:
            tmp.unlink(missing_ok=True)
        self.pending = []

    def __enter__(self) -> "Staged":
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()  # after commit() there is nothing left to discard


def write_text(path: "os.PathLike[str] | str", text: str) -> None:
    """Write one file whole or not at all (temporary file beside it, then a rename)."""
    with Staged() as st:
        st.text(path, text)
        st.commit()


def write_vector_files(files: Sequence[VectorFile], out: "os.PathLike[str] | str", schemas: Dict[str, dict],
                       pcap: bool = True, stale: Sequence[Path] = ()) -> List[Path]:
    """Write vector files, their schemas and (optionally) the pcaps and key files; returns the paths.

    Every file is written beside its target first; only when all are complete are they renamed into place
    (and the `stale` files that none of them replaces removed), so a failure leaves the old set untouched."""
    out = Path(out)
    with Staged() as st:
        for name, schema in schemas.items():
            st.text(out / "schema" / name, dumps_schema(schema))
        for vf in files:
            st.text(out / vf.name, dumps(vf.doc))
            if pcap:
                for stem, packets, keys in vf.pcaps:
                    write_pcap(out / "pcap", stem, packets, keys, st)
        written = st.commit()
    for old in stale:
        if old not in written:
            old.unlink(missing_ok=True)
    return written


def dumps_schema(schema: dict) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=True) + "\n"


def write_pcap(directory: Path, stem: str, packets: List[Tuple[int, bytes]], keys: str,
               staged: Optional[Staged] = None) -> List[Path]:
    """A raw-IP pcap (frame timestamps = tcId seconds, so frame ↔ tcId) and its key file, renamed into place
    when complete (by `staged`'s commit when given)."""
    from pecore.capture import LINKTYPE_RAW, CaptureWriter

    with Staged() as own:
        st = staged or own
        pcap_path = directory / f"{stem}.pcap"
        with CaptureWriter(st.path_for(pcap_path), LINKTYPE_RAW, "pcap", snaplen=65535) as w:
            for tc, pkt in packets:
                w.write(pkt, (tc, 0))
        key_path = directory / f"{stem}.keys"
        st.text(key_path, keys)
        if staged is None:
            own.commit()
    return [pcap_path, key_path]
