"""The console in a real headless Chromium (Debian's ``chromium``, driven through Playwright's Python API).

An operator logs in, sees the pending approval in the inbox (a tool argument holding ``<script>`` shows as text and
runs nothing), approves it with a note, and watches the task resume from another OS process - a guarded Agents SDK
run with a ScriptedModel (``examples/console_approval.py``) - with its counters continuing from the pause.

``.ci/run`` installs ``chromium``. With ``LOOPGUARD_SCREENSHOTS=DIR`` the screenshots of the inbox and of the task
page are saved there (``LOOPGUARD_SCREENSHOTS=docs/img`` made the ones in the docs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents_loopguard.server import create_app
from agents_loopguard.store.sql import SQLStore
from tests.support.live_server import LiveServer
from tests.support.server_env import CONFIG, SECRETS

pytestmark = pytest.mark.slow  # chromium, a live server and the example as a process

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "console_approval.py"
ATTACK = (
    "Broken on arrival. <script>window.__pwned = 1; alert('pwned')</script> <img src=x onerror=\"window.__pwned=2\">"
)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'console.db'}"


def example(*args: str) -> subprocess.Popen[str]:
    """The approvals example as its own OS process."""
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.timeout(240)
def test_log_in_approve_in_the_inbox_and_watch_another_process_resume(chromium: Any, db: str, tmp_path: Path) -> None:
    paused = finished(example("pause", "--db", db, "--task", "ticket-981", "--note", ATTACK, "--json"))
    assert (paused["status"], paused["counters"]["models"], paused["counters"]["tools"]) == ("needs_human", 2, 1)
    worker = example("resume", "--db", db, paused["pause_id"], "--wait", "180", "--json")  # waits for the decision
    store = SQLStore(db)
    try:
        with LiveServer(create_app(store, CONFIG)) as server:
            context = chromium.new_context(
                timezone_id="Asia/Tokyo", locale="en-US", viewport={"width": 1280, "height": 900}
            )
            page = context.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

            page.goto(f"{server.url}/")
            assert page.url.startswith(f"{server.url}/login")
            page.fill("input[name=token]", SECRETS["ana"])
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/")

            card = page.locator(f"[data-pause='{paused['pause_id']}']")
            assert card.locator("td.tool").first.inner_text() == "refund"
            assert card.locator("code", has_text="refund-order-42").count() == 1
            arguments = card.locator("pre.args").inner_text()
            assert "<script>window.__pwned = 1; alert('pwned')</script>" in arguments  # shown as text
            assert '<img src=x onerror=\\"window.__pwned=2\\">' in arguments
            assert page.evaluate("window.__pwned") is None and dialogs == []  # and nothing ran
            assert page.evaluate("document.querySelectorAll('script').length") == 1  # console.js only
            assert page.evaluate("document.querySelectorAll('main img').length") == 0
            budget = card.locator(".meters").inner_text()
            assert "2 of 6 used" in budget and "4 left" in budget  # model turns, as the pause left them
            stamp = card.locator("time").first
            assert "GMT+9" in stamp.inner_text() and stamp.get_attribute("datetime", timeout=5000).endswith("Z")
            shots = os.environ.get("LOOPGUARD_SCREENSHOTS")
            page.screenshot(path=str(Path(shots or tmp_path) / "console-inbox.png"), full_page=True)

            card.locator("textarea[name=why]").fill("photo shows the damage; refund approved")
            card.locator("button[value=approve]").click()
            page.wait_for_url(f"{server.url}/")
            assert "call-refund approved" in page.locator(".note-ok").inner_text()
            assert page.locator(".empty").inner_text().startswith("Nothing waits for a decision")

            resumed = finished(worker)  # another OS process resumed the pause after the click
            assert resumed["pid"] not in (os.getpid(), paused["pid"])
            assert (resumed["status"], resumed["reason"]) == ("completed", "validated_done")
            assert resumed["decided_by"] == "ana" and resumed["decisions"] == {"call-refund": "approve"}
            assert (resumed["counters"]["models"], resumed["counters"]["tools"]) == (3, 2)  # 2 -> 3, 1 -> 2

            page.goto(f"{server.url}/tasks/ticket-981")
            assert page.locator(".title-row .badge").first.inner_text() == "completed"
            assert "3 of 6 used" in page.locator(".meters").inner_text()
            page.screenshot(path=str(Path(shots or tmp_path) / "console-task.png"), full_page=True)
            transition = page.locator("section", has_text="Transitions").locator("tbody tr").first.inner_text()
            assert "resume" in transition and "worker-2" in transition
            page.goto(f"{server.url}/pauses/{paused['pause_id']}")
            assert "decided by ana" in page.locator("main").inner_text()
            assert page.evaluate("window.__pwned") is None and dialogs == []
            context.close()
    finally:
        if worker.poll() is None:
            worker.kill()
        store.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", ["/", "/pauses/{pause_id}"], ids=["inbox", "pause"])
def test_on_a_phone_no_column_of_a_pending_call_is_cut(chromium: Any, db: str, path: str) -> None:
    """A 390 px viewport (a phone): every cell of a pending call, the call id last, lies inside the page."""
    paused = finished(example("pause", "--db", db, "--task", "ticket-390", "--note", "refund it", "--json"))
    store = SQLStore(db)
    try:
        with LiveServer(create_app(store, CONFIG)) as server:
            context = chromium.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
            page = context.new_page()
            answers: list[tuple[int, str]] = []
            page.on("response", lambda response: answers.append((response.status, response.url)))
            page.goto(f"{server.url}/login")
            page.fill("input[name=token]", SECRETS["ana"])
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/")
            page.goto(server.url + path.format(pause_id=paused["pause_id"]))
            call = page.locator("table.calls td.call code").first
            assert call.inner_text() == "call-refund"
            width = page.evaluate("document.documentElement.clientWidth")
            for cell in page.locator("table.calls td").all():
                box = cell.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, cell.inner_text()
            cut = page.evaluate(
                "[...document.querySelectorAll('.card')].filter(c => c.scrollWidth > c.clientWidth + 1).length"
            )
            assert cut == 0, "a card scrolls sideways: a column is cut off"
            icon = page.evaluate("document.querySelector('link[rel=icon]').href")
            assert context.request.get(icon).status == 200  # the page names its icon, and it is there
            assert any("favicon" in url for _, url in answers)  # the browser asked for the icon
            assert [a for a in answers if a[0] >= 400] == []  # no 404 (the favicon was one on every page)
            context.close()
    finally:
        store.close()
