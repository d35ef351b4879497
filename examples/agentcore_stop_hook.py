"""A stop hook that ends a task's Amazon Bedrock AgentCore runtime session when its stop mark is set.

The stop mark is the guard's: every worker refuses the task's next model call and tool execution. An agent hosted
in an AgentCore Runtime runs in a session of its own, which the mark does not end. This hook calls
``StopRuntimeSession`` (through boto3) once, from the process that set the mark: ``loopguard stop``, ``loopguard
serve`` (its API and console) or your own code through ``agents_loopguard.ops.stops.request_stop``.

What a runtime stop does, and what it does not undo:

* it ends the session: the agent's process stops, and a model call or tool call running in it is cut off;
* it does not undo anything committed: a refund the receiver accepted stays accepted, and nothing is rolled back;
* a write that was in flight when the session ended stays ``unknown`` in the ledger; nothing sends it again until
  someone asks the receiver (``loopguard reconcile``, or the console's reconcile form);
* it does not stop other workers of the same task (the stop mark does), and it does not clear the stop mark.

Use it in one of three ways:

* in the process that runs the agents: ``register_stop_hook(AgentCoreStopHook(ARN), task_id="ticket-981")``;
* for ``loopguard stop`` / ``loopguard serve``: ``LOOPGUARD_STOP_HOOKS=agentcore_stop_hook:stop_hook`` with this
  folder on ``PYTHONPATH`` and ``AGENTCORE_RUNTIME_ARN`` set (the session id is derived from the task id, the same
  way the application derives it when it invokes the runtime: :func:`session_id_for`);
* from an installed package: an ``agents_loopguard.stop_hooks`` entry point naming such a function.

Run ``python examples/agentcore_stop_hook.py`` to see the request it sends, against botocore's ``Stubber`` (no AWS
account needed); ``--live ARN`` sends it for real with your AWS credentials.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Any

from agents_loopguard.ops.stops import StopEvent

__all__ = ["AgentCoreStopHook", "session_id_for", "stop_hook"]

ARN_ENV = "AGENTCORE_RUNTIME_ARN"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def session_id_for(task_id: str) -> str:
    """The AgentCore runtime session id of a task (33 to 256 characters): derived, so every process agrees.

    >>> session_id_for("ticket-981")
    'loopguard-9590ab543d7e85e8deed019ad4bdc4e691f003c1'
    """
    return f"loopguard-{_digest(task_id)}"


class AgentCoreStopHook:
    """``hook(event)``: ``StopRuntimeSession`` for the event's task. A session that is already gone is fine."""

    def __init__(
        self,
        agent_runtime_arn: str,
        *,
        client: Any = None,
        qualifier: str | None = None,
        session_id: Any = session_id_for,
        region_name: str | None = None,
    ) -> None:
        self.agent_runtime_arn = agent_runtime_arn
        self.qualifier = qualifier
        self.session_id = session_id
        self.region_name = region_name
        self._client = client

    @property
    def client(self) -> Any:
        """The boto3 ``bedrock-agentcore`` client (made on first use)."""
        if self._client is None:
            import boto3

            self._client = boto3.client("bedrock-agentcore", region_name=self.region_name)
        return self._client

    def request(self, task_id: str) -> dict[str, Any]:
        """The ``StopRuntimeSession`` parameters for ``task_id``; the client token makes a retry idempotent."""
        request = {
            "agentRuntimeArn": self.agent_runtime_arn,
            "runtimeSessionId": self.session_id(task_id),
            "clientToken": f"loopguard-stop-{_digest(task_id)}",
        }
        if self.qualifier:
            request["qualifier"] = self.qualifier
        return request

    def __call__(self, event: StopEvent) -> dict[str, Any] | None:
        client = self.client
        try:
            answer: dict[str, Any] = client.stop_runtime_session(**self.request(event.task_id))
        except client.exceptions.ResourceNotFoundException:
            return None  # no such session any more: there is nothing left to stop
        return answer


def stop_hook(event: StopEvent) -> dict[str, Any] | None:
    """The hook for ``LOOPGUARD_STOP_HOOKS=agentcore_stop_hook:stop_hook`` (reads ``AGENTCORE_RUNTIME_ARN``)."""
    arn = os.environ.get(ARN_ENV)
    if not arn:
        raise RuntimeError(f"set {ARN_ENV} to the agent runtime's ARN")
    return AgentCoreStopHook(arn, qualifier=os.environ.get("AGENTCORE_QUALIFIER") or None)(event)


def main() -> None:
    from agents_loopguard import Budget, Guard, MemoryStore
    from agents_loopguard.ops.stops import register_stop_hook, request_stop

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--live", metavar="ARN", help="call AgentCore for real (needs AWS credentials)")
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    args = parser.parse_args()
    arn = args.live or "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/support-agent-AbCdEf1234"
    store = MemoryStore()
    Guard(budget=Budget(model_turns=6, tool_executions=4), store=store, task_id="ticket-981")
    hook = AgentCoreStopHook(arn, region_name=args.region)
    stubber = None
    if not args.live:
        import boto3
        from botocore.stub import Stubber

        client = boto3.client(
            "bedrock-agentcore", region_name=args.region, aws_access_key_id="x", aws_secret_access_key="x"
        )
        stubber = Stubber(client)
        session = session_id_for("ticket-981")
        stubber.add_response(
            "stop_runtime_session", {"runtimeSessionId": session[:100], "statusCode": 200}, hook.request("ticket-981")
        )
        stubber.activate()
        hook = AgentCoreStopHook(arn, client=client)
    register_stop_hook(hook, task_id="ticket-981")
    first = request_stop(store, "ticket-981", reason="customer closed the ticket", who="ana", now=time.time())
    print(f"stop mark set by this call: {first.newly_set}; hooks: {[(r.hook, r.ok, r.error) for r in first.hooks]}")
    print(f"StopRuntimeSession request: {hook.request('ticket-981')}")
    again = request_stop(store, "ticket-981", reason="again", who="bob")
    print(f"second stop: set by this call: {again.newly_set}; hooks run: {len(again.hooks)} (the mark was there)")
    if stubber is not None:
        stubber.assert_no_pending_responses()
    sys.exit(0 if first.hooks and all(r.ok for r in first.hooks) else 1)


if __name__ == "__main__":
    main()
