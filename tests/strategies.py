"""Hypothesis strategies for the shared events, used by every codec's round-trip tests."""

from __future__ import annotations

import string

from hypothesis import strategies as st

from bridge_core.model import events as ev

text = st.text(max_size=40)
ids = st.text(alphabet=string.hexdigits.lower(), min_size=1, max_size=32)
opt_ids = st.none() | ids
ts = st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False)

attachment = st.builds(
    ev.Attachment, attachment_id=ids, filename=text, mime_type=text, size=st.integers(0, 10**9),
    kind=st.sampled_from(["image", "document", "audio", "video", "voice"]), inline_image=st.booleans(),
    conversation_id=ids, message_id=opt_ids, created_at=ts, expires_at=st.none() | ts,
)

EVENT_STRATEGIES = {
    ev.ConversationCreated: st.builds(ev.ConversationCreated, conversation_id=ids, name=text, ts=ts),
    ev.ConversationRenamed: st.builds(ev.ConversationRenamed, conversation_id=ids, name=text, ts=ts),
    ev.ConversationUpdated: st.builds(ev.ConversationUpdated, conversation_id=ids, name=text, ts=ts),
    ev.ConversationDeleted: st.builds(ev.ConversationDeleted, conversation_id=ids, ts=ts),
    ev.UserMessageSent: st.builds(ev.UserMessageSent, conversation_id=ids, message_id=ids, text=text, ts=ts),
    ev.RunStarted: st.builds(ev.RunStarted, conversation_id=ids, run_id=ids, message_id=ids, request_id=opt_ids, ts=ts),
    ev.InterimMessage: st.builds(ev.InterimMessage, conversation_id=ids, run_id=ids, text=text, ts=ts),
    ev.MessageCompleted: st.builds(ev.MessageCompleted, conversation_id=ids, message_id=ids, text=text,
                                   kind=st.sampled_from(["normal", "notice"]), ts=ts),
    ev.ToolStarted: st.builds(ev.ToolStarted, conversation_id=ids, run_id=opt_ids, call_id=ids, tool_name=text,
                              args=st.dictionaries(text, text | st.integers()), ts=ts),
    ev.ToolProgress: st.builds(ev.ToolProgress, conversation_id=ids, run_id=opt_ids, call_id=ids, tool_name=text, partial=text, ts=ts),
    ev.ToolFinished: st.builds(ev.ToolFinished, conversation_id=ids, run_id=opt_ids, call_id=ids, tool_name=text,
                               status=st.sampled_from(["completed", "failed", "cancelled"]),
                               duration_ms=st.none() | st.integers(0, 10**7), error=st.none() | text, ts=ts),
    ev.RunFinished: st.builds(ev.RunFinished, conversation_id=ids, run_id=ids,
                              status=st.sampled_from(["completed", "failed", "cancelled"]), error=st.none() | text, ts=ts),
    ev.ApprovalRequested: st.builds(ev.ApprovalRequested, conversation_id=ids, run_id=opt_ids, approval_id=ids,
                                    session_key=text, command=text, description=text, ts=ts),
    ev.ApprovalResolved: st.builds(ev.ApprovalResolved, conversation_id=ids, run_id=opt_ids, approval_id=ids,
                                   choice=st.sampled_from(ev.APPROVAL_CHOICES), request_id=opt_ids, ts=ts),
    ev.ClarifyRequested: st.builds(ev.ClarifyRequested, conversation_id=ids, run_id=opt_ids, clarify_id=ids,
                                   session_key=text, question=text, choices=st.none() | st.tuples(text, text), ts=ts),
    ev.ClarifyResolved: st.builds(ev.ClarifyResolved, conversation_id=ids, run_id=opt_ids, clarify_id=ids, response=text, ts=ts),
    ev.AttachmentAdded: st.builds(ev.AttachmentAdded, conversation_id=ids, attachment=attachment, ts=ts),
    ev.Notification: st.builds(ev.Notification, conversation_id=opt_ids, message_id=ids, text=text, ts=ts),
    ev.ModelChanged: st.builds(ev.ModelChanged, model=text, provider=st.none() | text,
                               scope=st.sampled_from(["conversation", "global"]), conversation_id=opt_ids, ts=ts),
    ev.ReasoningChanged: st.builds(ev.ReasoningChanged, effort=st.sampled_from(ev.REASONING_EFFORTS), enabled=st.booleans(),
                                   scope=st.sampled_from(["conversation", "global"]), ts=ts),
    ev.YoloChanged: st.builds(ev.YoloChanged, enabled=st.booleans(), scope=st.sampled_from(["conversation", "global"]), ts=ts),
}
