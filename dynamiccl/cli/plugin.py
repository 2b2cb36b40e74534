"""``dynamiccl plugin path|build``: where the NCCL tuner plugin is, and (re)building it.

``path`` is what goes into ``NCCL_TUNER_PLUGIN``: the library ``build`` made last (while its sources
are unchanged), else the package's build, else one it builds into the user cache. ``build`` compiles
it with the machine's C compiler (``cc``, or ``$CC``) and prints the path of the result.
"""

from __future__ import annotations

import argparse

from dynamiccl.cli.common import UserError


def _run(args: argparse.Namespace) -> int:
    from dynamiccl.plugin import build as plugin
    try:
        if args.action == "build":
            path = plugin.build(cc=args.cc, force=args.force)
            plugin.remember_build(path)
        else:
            path = plugin.library_path()
    except plugin.PluginError as exc:
        raise UserError(str(exc)) from None
    print(path)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from dynamiccl.plugin.policy_format import POLICY_ENV

    parser = subparsers.add_parser(
        "plugin", help="print the tuner plugin's path, or build it",
        description="The DynamICCL NCCL tuner plugin (libnccl-tuner-dynamiccl.so). Use it as\n"
                    f"  NCCL_TUNER_PLUGIN=$(dynamiccl plugin path) {POLICY_ENV}=policy.dccl "
                    "torchrun ...",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("path", "build"),
                        help="path: print the library to load (building it if needed); "
                             "build: (re)compile it with the C compiler")
    parser.add_argument("--cc", default=None, help="C compiler for build (default: $CC or cc)")
    parser.add_argument("--force", action="store_true", help="rebuild even if a build exists")
    parser.set_defaults(func=_run)
