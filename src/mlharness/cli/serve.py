"""``mlharness serve``: one SUT node for ``mlharness run --backend remote``."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
import threading
import time
from pathlib import Path

from mlharness.backends import prepare_process
from mlharness.cli.render import console_err
from mlharness.cli.spec_flags import TABLE_KEYS, add_flag, run_settings
from mlharness.errors import ConfigError, HarnessError
from mlharness.options import parse_scalar
from mlharness.protocol.token import TOKEN_ENV, read_token
from mlharness.serve import DEFAULT_MAX_BATCH
from mlharness.serve.connections import (DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS,
                                         default_max_connections)
from mlharness.spec import RunSpec

EXAMPLES = """\
examples:
  mlharness serve -b demo --port 8101                        # node 1 (the demo ships its model)
  mlharness serve -b demo --port 8102                        # node 2
  mlharness run -b demo -s Server --target-qps 300 --backend remote \\
      --endpoint http://127.0.0.1:8101 --endpoint http://127.0.0.1:8102

  mlharness serve -b resnet50 --model resnet50_v1.onnx --dataset imagenet-val \\
      --host 0.0.0.0 --port 8101 --threads 16 --workers 2 \\
      --token-file node.token                                  # on each SUT machine
  mlharness run ... --backend remote --token-file node.token --endpoint http://sut-a:8101 ...

Beyond loopback a node needs a token (--token-file or $MLHARNESS_NODE_TOKEN); the run sends the
same one.

The node holds the dataset (same --dataset on every node and on the LoadGen machine) and answers
batches of sample indices. GET /health and GET /ready probe it; SIGTERM or Ctrl-C drains it
(finishes the batches it holds, refuses new ones with 503) and exits 0. Details:
docs/distributed.md.
"""


#: the RunSpec settings a node takes (its flags are RunSpec's, cli/spec_flags.py)
NODE_SETTINGS = ("benchmark", "model", "dataset", "vocab", "max_samples", "cache_dir", "backend",
                 "precision", "threads", "device", "task_option", "backend_option")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="run one SUT node for --backend remote (HTTP)",
        description="Serve one benchmark's backend over HTTP: the node holds the dataset, takes "
                    "batches of sample indices from `mlharness run --backend remote` and returns "
                    "the responses in the task's encoding.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    settings = run_settings()
    what = p.add_argument_group("what to serve")
    add_flag(what, settings["benchmark"], required=True,
             help="demo, resnet50, retinanet, bert-99, bert-99.9")
    for name in ("model", "dataset", "vocab"):
        add_flag(what, settings[name])
    add_flag(what, settings["max_samples"],
             help="only the first N samples (give the run the same value)")
    add_flag(what, settings["cache_dir"])
    how = p.add_argument_group("how to run it")
    add_flag(how, settings["backend"], help="{default} (default), noop, or module:Class")
    for name in ("precision", "threads", "device"):
        add_flag(how, settings[name])
    how.add_argument("--workers", type=int, default=1, metavar="N",
                     help="batches run at once on this node, each on a thread (default 1; "
                          "then batches predicted under 5 ms run on the server's event loop)")
    how.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH, metavar="N",
                     help=f"largest batch this node takes; bigger requests get 413 (default "
                          f"{DEFAULT_MAX_BATCH})")
    for name in ("task_option", "backend_option"):
        add_flag(how, settings[name])
    net = p.add_argument_group("network")
    net.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (default 127.0.0.1; 0.0.0.0 for other machines)")
    net.add_argument("--port", type=int, required=True, help="TCP port")
    net.add_argument("--name", help="node name for logs and sut_name (default: host name)")
    net.add_argument("--max-connections", type=int, metavar="N",
                     help=f"connections held at once; more are answered 503 and closed "
                          f"(default {DEFAULT_MAX_CONNECTIONS}, or half the open-file limit "
                          f"when that is lower: {default_max_connections()} here)")
    net.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
                     metavar="S", help="seconds a connection has to send a request's line and "
                     "headers, the first one included, before it is closed (default "
                     f"{DEFAULT_HEADER_TIMEOUT_S:g})")
    net.add_argument("--token-file", type=Path, metavar="PATH",
                     help=f"file holding the token every request but GET /health must carry "
                          f"(or set ${TOKEN_ENV}); required to listen beyond loopback")
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    # lazy: serve.app (fastapi) and serve.node (sut.assemble) stay out of `mlharness --help`
    from mlharness.serve.app import NodeState, serve
    from mlharness.serve.node import Node

    if args.backend in ("remote", "ray"):
        raise ConfigError(f"a node cannot use --backend {args.backend}",
                          hint="a node runs the model itself: onnxruntime, noop, ...")
    if args.workers < 1:
        raise ConfigError("--workers must be >= 1",
                          hint="1 (default); short batches run on the event loop anyway")
    if args.max_batch < 1:
        raise ConfigError("--max-batch must be >= 1", hint=f"default {DEFAULT_MAX_BATCH}")
    if not 0 < args.port < 65536:
        raise ConfigError(f"port {args.port} is out of range", hint="use 1024-65535")
    if args.max_connections is not None and not 1 <= args.max_connections <= 1_000_000:
        raise ConfigError(f"--max-connections {args.max_connections} is out of range",
                          hint=f"1 to 1000000 (default {default_max_connections()} here)")
    if not 0 < args.header_timeout <= 3600:
        raise ConfigError(f"--header-timeout {args.header_timeout:g} is out of range",
                          hint=f"a number of seconds above 0, at most 3600 (default "
                               f"{DEFAULT_HEADER_TIMEOUT_S:g})")
    token = read_token(args.token_file)
    if token is None and not _loopback(args.host):
        raise ConfigError(f"listening on {args.host} without a token would let anyone on the "
                          "network use this node",
                          hint=f"set ${TOKEN_ENV} or pass --token-file PATH (and give the run "
                               "the same token), or listen on 127.0.0.1")
    given = {name: getattr(args, name) for name in NODE_SETTINGS
             if getattr(args, name) is not None}
    spec = RunSpec(**{name: {k: parse_scalar(v) for k, v in value} if name in TABLE_KEYS
                      else value for name, value in given.items()})
    prepare_process(spec.backend)  # before the node's threads start (OpenVINO: one malloc arena)
    name = args.name or f"{socket.gethostname()}:{args.port}"
    state = NodeState(lambda: Node(spec, name), args.workers, token, args.max_batch)
    url = f"http://{args.host}:{args.port}"
    sock = _listen(args.host, args.port)

    def listening() -> None:
        console_err.print(f"node listening on {url} — loading {args.benchmark} "
                          f"({spec.backend}); GET /ready answers 200 once loaded", highlight=False)

    def announce_ready() -> None:
        while state.status == "loading":
            time.sleep(0.1)
        if state.status == "ready":
            console_err.print(f"ready: {url} serves {args.benchmark} "
                              f"({state.node.total if state.node else '?'} samples)",
                              highlight=False)

    threading.Thread(target=announce_ready, daemon=True).start()
    try:
        serve(state, sock, listening, args.max_connections, args.header_timeout)
    finally:
        sock.close()
    if state.failure is not None:
        if isinstance(state.failure, HarnessError):
            raise state.failure
        raise HarnessError(f"node failed to load: {state.failure}",
                           hint="run the same settings with `mlharness run` to see the problem")
    console_err.print(f"node {url} drained and stopped", highlight=False)
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on HOST:PORT, or one clear line when the port is taken."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}: {exc.strerror}",
                          hint="give --host an address of this machine, e.g. 0.0.0.0") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is in use",
                              hint="pick a free --port, or stop what listens there") from exc
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                          hint="give --host an address of this machine and a free --port") from exc
    sock.set_inheritable(True)
    return sock
