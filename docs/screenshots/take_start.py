"""Retake the README's first-five-minutes screenshots (docs/screenshots/start-*.png).

    ~/.cache/agent-bridge/venv/bin/python docs/screenshots/take_start.py

from the repository root: it runs `agent-bridge serve` (``python -m cli serve``) with a
fresh HOME on the default ports, takes the login link from `agent-bridge lvmh open`, and
walks the README's steps in headless Chromium (desktop 1280x800, phone 390x844), the way
tests/browser drives it. Then Ctrl-C (SIGINT) stops the bridge, and the two terminals are
drawn as an image (the HOME shown as /home/you, the link's token masked). Nothing secret
reaches a picture: the token lives in the fragment, which the web UI drops on load.
"""

from __future__ import annotations

import asyncio
import base64
import html
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("AGENT_BRIDGE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
DESKTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}
TIMEOUT_MS = 20_000
STOP_LINE = "  Ctrl-C stops it"
COLUMNS = 150  # the terminal image wraps longer lines at a space, indented


def env_for(home: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PHEBY_SECRET", "LVMH_TOKEN", "AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG")}
    return {**env, "HOME": home, "PYTHONUNBUFFERED": "1"}


class Bridge:
    """`agent-bridge serve` in a fresh HOME; its terminal (stdout and stderr, in order) kept as lines."""

    def __init__(self, home: str):
        self.env = env_for(home)
        self.proc = subprocess.Popen([sys.executable, "-m", "cli", "serve"], cwd=ROOT, env=self.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")),
                                       daemon=True)
        self.reader.start()
        self.wait_for(lambda: STOP_LINE + "\n" in self.lines, "the banner")

    def wait_for(self, cond, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.proc.poll() is not None and not cond():
                raise SystemExit(f"agent-bridge serve exited ({self.proc.returncode}):\n{''.join(self.lines)}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no {what} after {timeout} s:\n{''.join(self.lines)}")
            time.sleep(0.05)

    def command(self, *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=self.env, text=True,
                              capture_output=True, check=True).stdout

    def stop(self) -> list[str]:
        before = len(self.lines)
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        self.reader.join(30)
        return self.lines[before:]


def terminal_html(banner: list[str], link_out: str, stopped: list[str], home: str) -> str:
    def shown(text: str) -> str:
        text = text.replace(home, "/home/you")
        text = re.sub(r"(#token=)\S+", lambda m: m.group(1) + "•" * 24, text)
        text = text.rstrip("\n")
        lead = text[:len(text) - len(text.lstrip())]
        wrapped = textwrap.wrap(text.strip(), COLUMNS, initial_indent=lead, subsequent_indent=lead + "  ",
                                break_on_hyphens=False, break_long_words=False)
        return html.escape("\n".join(wrapped) or text)

    prompt = '<span class="p">you@laptop:~/agent-bridge$</span> '
    rows = [prompt + "pip install . &amp;&amp; agent-bridge serve",
            '<span class="m">… pip\'s output (about 30 s) …</span>']
    rows += [shown(line) for line in banner]
    rows += ['', '<span class="m">── a second terminal ──</span>', prompt + "agent-bridge lvmh open"]
    rows += [shown(line) for line in link_out.splitlines()]
    rows += ['', '<span class="m">── the first terminal, when you are done ──</span>', "^C"]
    rows += [shown(line) for line in stopped]
    return ("<!doctype html><meta charset=utf-8><style>body{margin:0;background:#1e1e2e}"
            "pre{margin:0;padding:18px 22px;color:#e6e6ef;font:13.5px/1.5 'DejaVu Sans Mono',monospace;"
            "white-space:pre-wrap;overflow-wrap:anywhere}.p{color:#8bd5a0}.m{color:#9a9ab0}</style>"
            f"<pre>{chr(10).join(rows)}</pre>")


def data_uri(path: Path, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def framed_html(shot: Path, title: str, address: str) -> str:
    """A screenshot inside a plain browser frame: the tab shows the page's title, the bar its address."""
    icon = data_uri(ROOT / "lvmh_adapter" / "web" / "icon.svg", "image/svg+xml")
    return ("<!doctype html><meta charset=utf-8><style>body{margin:0;font:13px system-ui,sans-serif;background:#dee1e6}"
            ".tabs{height:34px;display:flex;align-items:flex-end;padding-left:10px}"
            ".tab{background:#fff;border-radius:8px 8px 0 0;padding:8px 14px;width:300px;display:flex;gap:8px;"
            "align-items:center;color:#1f1f1f;white-space:nowrap;overflow:hidden}.tab img{width:16px;height:16px}"
            ".bar{background:#fff;padding:6px 12px;border-bottom:1px solid #c9ccd1}"
            ".url{background:#f1f3f4;border-radius:14px;padding:5px 14px;color:#444}"
            "img.page{display:block}</style>"
            f"<div class=tabs><div class=tab><img src='{icon}' alt=''>{html.escape(title)}</div></div>"
            f"<div class=bar><div class=url>{html.escape(address)}</div></div>"
            f"<img class=page src='{data_uri(shot, 'image/png')}' alt=''>")


async def walk(link: str, tmp: Path) -> None:
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=TIMEOUT_MS)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        desk = await (await browser.new_context(viewport=DESKTOP, service_workers="block")).new_page()
        await desk.goto(link)
        await expect(desk.locator("#conn")).to_contain_text("live")
        await expect(desk.locator(".empty-list")).to_be_visible()
        await desk.screenshot(path=str(OUT / "start-1-empty.png"))

        await desk.click("#start-btn")  # "New conversation", then "Start" in its dialog
        await desk.click("#new-create")
        box = desk.locator("#prompt-input")
        await box.type("Hello, agent")
        await box.press("Enter")
        await expect(desk.locator(".msg-assistant").last).to_have_text(re.compile("Echo: Hello, agent"))
        await expect(desk.locator('.settled[data-settled="done"]')).to_have_count(1)
        await box.blur()
        await desk.screenshot(path=str(OUT / "start-2-reply.png"))

        await box.type("/approve make deploy")
        await box.press("Enter")
        allow = desk.get_by_role("button", name="Allow once")
        await expect(allow).to_be_visible()
        await expect(desk.locator(".session-item")).to_contain_text("1 approval")
        await box.blur()
        raw = tmp / "approval.png"
        await desk.screenshot(path=str(raw))
        address = desk.url.split("://", 1)[1]
        framer = await (await browser.new_context(viewport={"width": DESKTOP["width"], "height": 100})).new_page()
        await framer.set_content(framed_html(raw, await desk.title(), address), wait_until="load")
        await framer.screenshot(path=str(OUT / "start-3-approval.png"), full_page=True)

        phone_ctx = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, service_workers="block")
        phone = await phone_ctx.new_page()
        await phone.goto(link)  # a phone opens the list first, then the conversation
        await expect(phone.locator("#conn")).to_contain_text("live")
        await phone.locator(".session-item").first.click()
        await expect(phone.get_by_role("button", name="Allow once")).to_be_visible()
        await phone.screenshot(path=str(OUT / "start-3-approval-phone.png"))

        await allow.click()
        await expect(desk.locator(".msg-assistant").last).to_have_text(re.compile("Ran: make deploy"))
        await expect(desk.locator('.settled[data-settled="done"]')).to_have_count(2)
        await desk.screenshot(path=str(OUT / "start-4-approved.png"))
        await browser.close()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="agent-bridge-start-") as tmp:
        home = os.path.join(tmp, "home")
        os.mkdir(home)
        bridge = Bridge(home)
        try:
            banner = list(bridge.lines)
            link_out = bridge.command("lvmh", "open")
            link = re.search(r"http://\S+#token=\S+", link_out).group(0)
            asyncio.run(walk(link, Path(tmp)))
        finally:
            stopped = bridge.stop()
        stopped = [line for line in stopped if "agent_bridge" not in line or "shutting down" in line]
        page = terminal_html(banner, link_out, stopped, home)
        for secret in Path(home, ".agent-bridge", "secrets").glob("*"):
            if secret.read_text().strip() in page:
                raise SystemExit(f"{secret.name} would show in the terminal image")
        asyncio.run(draw_terminal(page))
    for name in sorted(OUT.glob("start-*.png")):
        print(name.relative_to(ROOT))
    return 0


async def draw_terminal(page_html: str) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = await (await browser.new_context(viewport={"width": DESKTOP["width"], "height": 100})).new_page()
        await page.set_content(page_html)
        await page.screenshot(path=str(OUT / "start-0-terminal.png"), full_page=True)
        await browser.close()


if __name__ == "__main__":
    sys.exit(main())
