"""What the README's first five minutes show on a phone, as a newcomer reads it (headless Chromium
against a real bridge with the demo agent): the approval card's expiry keeps its time of day in one
piece at 390 px ("(05:11 AM)", never "(05:11" with "AM)" on the next line)."""

from __future__ import annotations

import re

import pytest

from bridge_core.model.commands import Origin, SendMessage

from .conftest import shot
from .test_web_ui import expect, open_session

pytestmark = pytest.mark.browser


async def test_the_approval_cards_time_of_day_never_breaks_on_a_phone(ui):
    cid = ui.svc.bridge.create_conversation("First steps").conversation_id
    page = await ui.page(width=390, height=844)
    await open_session(page, cid)
    await ui.svc.bridge.execute(SendMessage(text="/approve make deploy", conversation_id=cid), Origin(surface="pheby"))
    expiry = page.locator("section.approval.pending .expiry time.until")
    await expect(expiry).to_contain_text(re.compile(r"denied automatically in .+ \(.+\)"))
    when = re.search(r"\((.+)\)$", await expiry.text_content()).group(1)
    # a 12-hour clock ("05:11 AM") keeps its parts together; a 24-hour one has no space at all
    assert re.fullmatch(r"\d{1,2}:\d{2}(\u00a0[^\s]+)?", when), repr(when)
    await shot(page, "60-phone-approval-expiry")
