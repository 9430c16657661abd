r"""A warm ClientApp process for a Flower SuperNode: every message of the node runs in one long-lived process.

Flower 1.42's SuperNode hands each message to a *task* that some process must claim from its Runtime API. With
``--isolation subprocess`` (the default) the SuperNode's SuperExec starts a fresh ``flwr-clientapp`` process per
message, which imports torch, Lightning and fedhet and rebuilds the client (seconds of CPU per message, minutes under
load). With ``--isolation process`` nothing is started: this process claims the node's tasks instead, and runs each
in-process with the same Flower calls ``flwr-clientapp`` makes (pull the message, context and app; run the
``ClientApp``; push the reply and the context back), keeping the loaded app (per FAB) and the built client (per run,
:func:`~fedhet.integrations.flower.apps.cached_node_client`) across messages:

.. code-block:: bash

    flower-supernode --insecure --superlink 127.0.0.1:9092 --port 9094 --isolation process \
      --node-config 'client-id="client_000"' &
    python -m fedhet.integrations.flower.node --runtime-api-address 127.0.0.1:9094 --insecure

The client's personal state still travels in the node's ``Context.state``, as with a process per message. This
module uses Flower's Runtime API client and task calls (``flwr.supernode.runtime.run_clientapp``), which are
internal to Flower: it is written for flwr 1.42.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import httpx
from flwr.app import Message
from flwr.app.error import Error
from flwr.cli.install import install_from_fab
from flwr.clientapp import ClientApp
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.config import get_project_config, get_project_dir
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
from flwr.supercore.retry import RetryInvoker, exponential, make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

log = logging.getLogger(__name__)


def _client(
    address: str, root_certificates: str | None, *interceptors: Any, retries: RetryInvoker | None = None
) -> RuntimeHttpClient:
    return cast(
        RuntimeHttpClient,
        RuntimeHttpClient.from_server_address(
            server_address=address,
            insecure=root_certificates is None,
            root_certificates=root_certificates,
            interceptors=list(interceptors),
            retry_invoker=retries or make_simple_http_retry_invoker(),
        ),
    )


def _refused(error: Exception) -> bool:
    return isinstance(error, httpx.HTTPStatusError) and error.response.status_code < 500


def _task_retries() -> RetryInvoker:
    """Retries of one task's calls: a lost connection or a server error a few times, a refusal (4xx) never.

    Flower's own invoker answers a refused task token by interrupting the process, which here serves every task.
    """
    return RetryInvoker(
        lambda: exponential(max_delay=10),
        (httpx.TransportError, httpx.HTTPStatusError),
        max_tries=8,
        max_time=120,
        should_giveup=_refused,
    )


class AppCache:
    """The ``ClientApp`` of each FAB this process ran, loaded (installed and imported) once per FAB.

    Two FABs may hold a module of the same name (every copy of ``examples/flower_app`` has ``fedhet_app``): a FAB
    not seen before is imported afresh, not taken from ``sys.modules``.
    """

    def __init__(self) -> None:
        self._apps: dict[str, ClientApp] = {}
        self._load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)

    def __call__(self, fab_id: str, fab_version: str, fab_hash: str, fab_content: bytes) -> ClientApp:
        """The app of the FAB ``fab_hash``, installed and imported the first time."""
        if fab_hash not in self._apps:
            install_from_fab(fab_content, skip_prompt=True)
            app_dir = get_project_dir(fab_id, fab_version, fab_hash)
            reference = get_project_config(app_dir)["tool"]["flwr"]["app"]["components"]["clientapp"]
            sys.modules.pop(reference.partition(":")[0], None)  # another FAB's module of the same name
            importlib.invalidate_caches()
            self._apps[fab_hash] = self._load(fab_id, fab_version, fab_hash)
        return self._apps[fab_hash]


def _since(started: float) -> float:
    return time.perf_counter() - started


def run_task(address: str, token: str, root_certificates: str | None, apps: AppCache) -> bool:
    """Run one claimed task: the message through its ``ClientApp``, the reply and the context pushed back.

    Returns:
        whether the app answered (``False``: it raised, and the reply is Flower's error message).

    """
    client = _client(
        address,
        root_certificates,
        RuntimeVersionHttpInterceptor("flwr-clientapp"),
        RuntimeTokenHttpInterceptor(token),
        retries=_task_retries(),
    )
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    heartbeat.start()
    message = context = reply = None
    status, details = SubStatus.FAILED, "ClientApp task failed"
    started = time.perf_counter()
    try:
        message, context, run, fab = pull_task_input(client)
        app = apps(run.fab_id, run.fab_version, fab.hash_str, fab.content)
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
        meta = message.metadata
        log.info("%s message of round %s answered in %.3f s", meta.message_type, meta.group_id, _since(started))
    except Exception as error:  # noqa: BLE001 - answered as flwr-clientapp answers: an error reply, the node goes on
        log.exception("ClientApp raised an exception")
        details = f"{type(error)}:<'{error}'>"
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details), reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
            push_task_output(client=client, context=context, sub_status=status, details=details)
        finally:
            heartbeat.stop()
            client.close()
    return status == SubStatus.COMPLETED


def serve(
    address: str,
    root_certificates: str | None = None,
    poll_s: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Claim the SuperNode's ClientApp tasks at ``address`` (its Runtime API) and run them here, until ``stop()``.

    Args:
        address: the SuperNode's Runtime API, ``host:port`` (its ``--port``).
        root_certificates: the CA certificate (PEM file) of the Runtime API's TLS; ``None``: no TLS.
        poll_s: how long to wait between two claims when the node has no task.
        stop: called between tasks; ``True`` ends the loop.

    """
    import fedhet.integrations.flower.engine  # noqa: F401 - torch, Lightning and fedhet, before the first message
    import fedhet.integrations.flower.records  # noqa: F401

    acquirer = _client(address, root_certificates, RuntimeVersionHttpInterceptor("SuperExec"))
    apps = AppCache()
    log.info("fedhet ClientApp process: claiming the tasks of the SuperNode at %s", address)
    while not stop():
        claimed = acquirer.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP]))
        if claimed.HasField("task") and claimed.token:
            try:
                run_task(address, claimed.token, root_certificates, apps)
            except Exception:  # noqa: BLE001 - the SuperNode could not be told; its task expiry answers the server
                log.exception("task %d of run %d lost", claimed.task.task_id, claimed.task.run_id)
        else:
            time.sleep(poll_s)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m fedhet.integrations.flower.node``: :func:`serve` a SuperNode started with ``--isolation process``."""
    parser = argparse.ArgumentParser(prog="python -m fedhet.integrations.flower.node", description=main.__doc__)
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API (its --port)")
    tls = parser.add_mutually_exclusive_group(required=True)
    tls.add_argument("--insecure", action="store_true", help="no TLS (a test on one machine)")
    tls.add_argument("--root-certificates", help="the Runtime API's CA certificate (PEM file)")
    parser.add_argument("--poll-s", type=float, default=0.2, help="seconds between two claims while idle")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per poll of the SuperNode
    serve(args.runtime_api_address, None if args.insecure else args.root_certificates, args.poll_s)


if __name__ == "__main__":
    main()
