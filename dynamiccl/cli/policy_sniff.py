"""What a policy the user names is: a built-in, a checkpoint, or a shipped file told from its first bytes.

``show`` and ``evaluate`` accept two text formats (a ``.dccl`` file, NVIDIA's example-tuner CSV).
Anything that is neither used to reach the CSV parser and be reported as a CSV with a bad first
line; a folder as a missing file. The first bytes say what a file is, so the message names that
(a folder, a zip archive, a binary file, a damaged ``.dccl``) and what to give instead.
:func:`load_policy_arg` loads any ``--policy`` argument with the same care.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from dynamiccl.cli.common import UserError, read_head
from dynamiccl.files import not_regular_message

#: Bytes read to decide (a CSV's header comments fit in them).
SNIFF_BYTES = 4096
ZIP_MAGIC = b"PK\x03\x04"
_TEXT_BYTES = frozenset(range(32, 127)) | frozenset(b"\t\n\r\f")
_GIVE = "give a .dccl file written by `dynamiccl export` or NVIDIA's example-tuner CSV"


def policy_file_kind(path: str | Path, give: str = _GIVE) -> Literal["dccl", "csv"]:
    """``"dccl"`` or ``"csv"`` (which parser reads the file), or one UserError naming what it is
    and ``give`` (what the command takes instead)."""
    from dynamiccl.plugin import policy_file as pf
    path = Path(path)
    head = read_head(path, "policy file", SNIFF_BYTES, missing="export one with `dynamiccl export`")
    if head.startswith(b"\xef\xbb\xbf" + pf.MAGIC.encode()):
        raise UserError(f"{path} starts with a UTF-8 byte-order mark (an editor saved it so), which "
                        "the plugin refuses; re-export it, or save it without the mark")
    if head.startswith(pf.MAGIC.encode()) and b"\r\n" in head:
        raise UserError(f"{path} has Windows (CRLF) line endings, which the plugin refuses; re-export "
                        "it, or convert it back (dos2unix)")
    if head.startswith(pf.MAGIC.encode()):
        return "dccl"
    if not head:
        raise UserError(f"{path} is empty; {give}")
    if head.startswith(ZIP_MAGIC):
        raise UserError(f"{path} is a zip archive (a checkpoint of `dynamiccl train`?), not a policy "
                        f"file; turn a checkpoint into one with `dynamiccl export --policy {path} "
                        "--topology NAME -o policy.dccl`")
    if b"\0" in head or sum(b not in _TEXT_BYTES for b in head) > len(head) // 10:
        raise UserError(f"{path} is a binary file, not a policy file; {give}")
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"[")):
        raise UserError(f"{path} is JSON (measurement records, an evidence file or a report?), not a "
                        f"policy file; {give}")
    if path.suffix == pf.SUFFIX:
        raise UserError(f"{path} does not start with the '{pf.MAGIC} <version>' line, so it is not "
                        "a DynamICCL policy file (or its start is damaged); re-export it")
    first = next((line.strip() for line in head.decode("latin-1").splitlines()
                  if line.strip() and not line.lstrip().startswith("#")), None)
    if first is not None and "," not in first:
        raise UserError(f"{path} is neither a DynamICCL policy file (no '{pf.MAGIC}' first line) "
                        f"nor NVIDIA example-tuner CSV (its first rule line has no commas); {give}")
    return "csv"


def load_policy_arg(name_or_path: str, **kwargs: Any) -> Any:
    """``agents.policies.registry.load_policy`` for a name the user typed: a name that is no policy, or a
    file that is no checkpoint (a policy file, a truncated zip), is one UserError naming it."""
    import zipfile

    from dynamiccl.agents.policies.deployed import is_policy_file
    from dynamiccl.agents.policies.registry import BUILTIN, load_policy

    path = Path(name_or_path)
    special = not_regular_message(path, "checkpoint or policy file")
    if special:  # reading a FIFO blocks, /dev/zero never ends
        raise UserError(special)
    builtin = name_or_path.strip().lower() in BUILTIN
    names_something = builtin or path.exists() or path.with_suffix(".zip").exists()
    if not names_something and _looks_like_path(name_or_path):
        raise UserError(f"{name_or_path} does not exist; give the path of a checkpoint, its run "
                        f"folder or an exported policy file, or a built-in policy ({', '.join(BUILTIN)})")
    if not builtin and is_policy_file(path):
        policy_file_kind(path)  # a file that is no shipped policy is named for what it is
    try:
        return load_policy(name_or_path, **kwargs)
    except zipfile.BadZipFile:
        raise UserError(f"{name_or_path} is not a checkpoint written by `dynamiccl train` (not a zip "
                        "file)") from None
    except ValueError as exc:
        if names_something:  # the name was fine: whatever failed is not the user's doing
            raise
        raise UserError(str(exc)) from None


def _looks_like_path(text: str) -> bool:
    """A name with a folder or a suffix (``runs/x``, ``model.zip``) was meant as a file, so a missing
    one is reported as a missing file rather than as an unknown built-in name."""
    return any(sep in text for sep in (os.sep, os.altsep) if sep) or bool(Path(text).suffix)
