"""Argument groups several subcommands share, so every command spells them the same way."""

from __future__ import annotations

import argparse

from dynamiccl.cli.main import UserError
from dynamiccl.config_loader import ConfigError
from dynamiccl.knobs import parse_enum
from dynamiccl.nccl import Collective
from dynamiccl.topology import Topology, load_topology
from dynamiccl.units import parse_size


def add_topology_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--topology", required=required, metavar="NAME|FILE.yaml",
                        help="a preset (see `dynamiccl topologies`) or a topology YAML file")
    parser.add_argument("--nodes", type=int, metavar="N", help="resize the preset to N nodes")
    parser.add_argument("--gpus-per-node", type=int, metavar="G",
                        help="resize the preset to G GPUs per node")


def topology_from_args(args: argparse.Namespace) -> Topology:
    try:
        return load_topology(args.topology, nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    except ConfigError as exc:
        raise UserError(str(exc)) from None


def collective_arg(text: str) -> Collective:
    try:
        return Collective(parse_enum(Collective, text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
