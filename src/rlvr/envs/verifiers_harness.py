"""The harness every seat of an adapted verifiers environment plays with (``env.name: verifiers``).

A verifiers (v1) harness is the agent program that talks to the model: it sends the conversation to
the rollout's interception endpoint, an OpenAI-style server that verifiers runs on 127.0.0.1 and
that records every turn on the episode's trace. This one is the plainest harness: one chat call per
turn, made in this process (no subprocess, no sandbox, no package installs), the system prompt kept
as a system message. The interception server answers the call with rlvr's policy
(:mod:`rlvr.envs.verifiers_env`). verifiers finds harnesses by module name, so the adapter registers
this module as ``rlvr_policy``.
"""

from __future__ import annotations

from typing import Any

import httpx
import verifiers.v1 as vf
from openai import AsyncOpenAI
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult

HARNESS_ID = "rlvr_policy"
_HTTP: httpx.AsyncClient | None = None


def _http() -> httpx.AsyncClient:
    """One HTTP client for every turn (all on the adapter's one event loop). A client per turn cost
    21 ms each, most of a turn's time: loading the CA bundle for a TLS context that a call to
    127.0.0.1 over plain HTTP never uses (``verify=False`` loads none)."""
    global _HTTP
    if _HTTP is None:
        _HTTP = httpx.AsyncClient(verify=False, timeout=None)
    return _HTTP


class RlvrPolicyHarnessConfig(vf.HarnessConfig):
    id: str = HARNESS_ID


class RlvrPolicyHarness(vf.Harness[RlvrPolicyHarnessConfig]):
    """One chat call per turn to the interception endpoint; verifiers resumes it with the whole
    conversation for the next turn."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: Any,
        data: Any,
        tool_interception_url: str | None = None,
    ) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0, http_client=_http())
        reply = await client.chat.completions.create(model=ctx.model, messages=messages)
        return ProgramResult(exit_code=0, stdout=reply.choices[0].message.content or "", stderr="")


__all__ = ["RlvrPolicyHarness"]
