"""What a file handed over as a shipped policy is, told from its first bytes.

``show`` and ``evaluate`` accept two text formats (a ``.dccl`` file, NVIDIA's example-tuner CSV).
Anything that is neither used to reach the CSV parser and be reported as a CSV with a bad first
line; a folder as a missing file. The first bytes say what a file is, so the message names that
(a folder, a zip archive, a binary file, a damaged ``.dccl``) and what to give instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from dynamiccl.cli.common import UserError
from dynamiccl.files import not_regular_message

#: Bytes read to decide (a CSV's header comments fit in them).
SNIFF_BYTES = 4096
ZIP_MAGIC = b"PK\x03\x04"
_TEXT_BYTES = frozenset(range(32, 127)) | frozenset(b"\t\n\r\f")
_GIVE = "give a .dccl file written by `dynamiccl export` or NVIDIA's example-tuner CSV"


def policy_file_kind(path: str | Path) -> Literal["dccl", "csv"]:
    """``"dccl"`` or ``"csv"`` (which parser reads the file), or one UserError naming what it is."""
    from dynamiccl import policy_file as pf

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a policy file; give the file inside it")
    special = not_regular_message(path, "policy file")
    if special:  # reading a FIFO blocks, /dev/zero never ends
        raise UserError(special)
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except FileNotFoundError:
        raise UserError(f"{path}: no such policy file; export one with `dynamiccl export`") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied; make it readable") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if head.startswith(pf.MAGIC.encode()):
        return "dccl"
    if not head:
        raise UserError(f"{path} is empty; {_GIVE}")
    if head.startswith(ZIP_MAGIC):
        raise UserError(f"{path} is a zip archive (a checkpoint of `dynamiccl train`?), not a policy "
                        f"file; turn a checkpoint into one with `dynamiccl export --policy {path} "
                        "--topology NAME -o policy.dccl`")
    if b"\0" in head or sum(b not in _TEXT_BYTES for b in head) > len(head) // 10:
        raise UserError(f"{path} is a binary file, not a policy file; {_GIVE}")
    if path.suffix == pf.SUFFIX:
        raise UserError(f"{path} does not start with the '{pf.MAGIC} <version>' line, so it is not "
                        "a DynamICCL policy file (or its start is damaged); re-export it")
    first = next((line.strip() for line in head.decode("latin-1").splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), None)
    if first is not None and "," not in first:
        raise UserError(f"{path} is neither a DynamICCL policy file (no '{pf.MAGIC}' first line) "
                        f"nor NVIDIA example-tuner CSV (its first rule line has no commas); {_GIVE}")
    return "csv"
