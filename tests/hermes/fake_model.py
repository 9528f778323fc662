"""A scripted OpenAI-compatible model for the Hermes end-to-end tests.

The server is ``tests.fakes.fake_openai.FakeOpenAI`` (``GET /v1/models``, ``POST
/v1/chat/completions`` with SSE when ``stream: true``, everything else 404: Hermes
probes ``/api/show`` for Ollama); this module only adds the script, :meth:`FakeModel.plan`,
as its responder. The reply is chosen by keywords in the last user message:

- ``DANGER <path>``  tool call ``terminal {"command": "rm -rf <path>"}`` (needs approval)
- ``CLARIFY``        tool call ``clarify {question, choices: [staging, production]}``
- ``MEDIA <path>``   the text ``Here is your report.`` and a ``MEDIA:<path>`` line
- ``SLOW``           a long reply, one word every 0.2 s (for cancelling)
- anything else      ``Hello from fake model! You said: <text>``, streamed in small pieces

After a tool result the reply quotes it (``Tool said: ...``). Every request is
recorded (``requests``) so tests can check the model and reasoning Hermes sent.
"""

from __future__ import annotations

import re
from typing import Optional

from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCall, last_role, last_user_text, text_of

MODELS = ("fake-model", "fake-model-2")
SLOW_WORDS = 400
SLOW_DELAY = 0.2


class FakeModel(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__(responder=self.plan, models=MODELS)

    def plan(self, req: dict) -> Reply:
        if last_role(req) == "tool":
            result = text_of(req["messages"][-1].get("content"), " ")[:300]
            return _reply(_pieces(f"Tool said: {result}"))
        # Hermes folds a message that interrupted a turn into the next user message
        # ("SLOW story please" ... "hello again"): the script answers the newest line
        # (Hermes's own bracketed notes, which may span lines, are not what the user typed)
        typed = re.sub(r"\[[^\]]*\]", "", last_user_text(req, " "), flags=re.S)
        lines = [ln.strip() for ln in typed.splitlines() if ln.strip()]
        user = lines[-1] if lines else ""
        if "DANGER" in user:
            target = (re.search(r"DANGER\s+(\S+)", user) or [None, "/tmp/nothing-here"])[1]
            return _reply([], ToolCall("terminal", {"command": f"rm -rf {target}"}))
        if "CLARIFY" in user:
            return _reply([], ToolCall("clarify", {"question": "Deploy to staging or production?",
                                                   "choices": ["staging", "production"]}))
        if "MEDIA" in user:
            path = (re.search(r"MEDIA\s+(\S+)", user) or [None, "/tmp/none.pdf"])[1]
            return _reply(_pieces("Here is your report.") + [f"\nMEDIA:{path}"])
        if "SLOW" in user:
            return _reply([("w%d " % i) for i in range(SLOW_WORDS)], delay=SLOW_DELAY)
        said = user.strip()[:200]
        return _reply(_pieces(f"Hello from fake model! You said: {said}"))


def _reply(pieces: list[str], tool: Optional[ToolCall] = None, delay: float = 0.0) -> Reply:
    return Reply(text="".join(pieces), chunks=pieces, tool_calls=[tool] if tool else [], chunk_delay=delay,
                 usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]
