"""JupyterLab as students and instructors get it from ``make lab``, driven by headless Chromium.

One server for the module, started by ``scripts/lab.sh`` (the script ``make lab`` runs, with the
same environment and flags, plus ``--no-browser``, a free port on 127.0.0.1 and a token) on a
copy of the course: *Validate* saves the notebook it checks, and the checkout must stay clean.
The user's own Jupyter folders are replaced by empty ones, so what is tested is what the
project environment brings (the default viewer of Markdown, the nbgrader extensions).

- Formgrader lists every assignment of ``solutions/`` and its pages answer, with no error in
  the server log (a missing ``alembic`` on PATH made ``/formgrader/api/assignments`` a 500);
- an exercise notebook with its answers filled in runs, and *Validate* reports success;
- a chapter (``book/*.md``) opens as a notebook on a double click;
- a hand-in that tries to run script (``handin_injections``), collected and graded with
  ``normedu collect`` and ``normedu autograde``, runs none in Formgrader's grading view nor in
  its feedback page, and makes no request to the server's API; an honest hand-in's formula,
  table and plot still show (issue 47).

The server is always stopped, kernels first. Without ``/usr/bin/chromium`` these tests skip
(under ``CI=true`` they fail).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from site_helpers import REPO, dead_port, launch_context, require_chromium, toc_docnames

#: One group: under pytest-xdist the three tests share one server (a module fixture per worker
#: would start a second JupyterLab).
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("lab")]

#: What of the checkout the course copy needs: nbgrader's configuration and folders, the
#: chapters, and the script that starts JupyterLab. ``normedu`` is linked, not copied.
COURSE = ("nbgrader_config.py", "_toc.yml", "book", "solutions", "exercises", "scripts")
START_TIMEOUT_S = 120
VALIDATE_TIMEOUT_MS = 90_000


def assignments(root: Path) -> list[str]:
    """Assignment ids as nbgrader's source folder holds them: ``solutions/<id>/*.ipynb``."""
    return sorted(p.name for p in (root / "solutions").iterdir() if any(p.glob("*.ipynb")))


def solved_release(root: Path, assignment: str) -> Path:
    """Write the student notebook of ``assignment`` with every answer cell solved.

    The answers are the instructor's solution cells (the same ``grade_id``) without nbgrader's
    solution delimiters: what a student who got everything right hands in.
    """
    name = f"{assignment}.ipynb"
    solution = json.loads((root / "solutions" / assignment / name).read_text())
    answers = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in solution["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution")
    }
    release = root / "exercises" / assignment / name
    nb = json.loads(release.read_text())
    filled = 0
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            lines = answers[grade_id].splitlines()
            cell["source"] = "\n".join(
                line for line in lines if not re.match(r"\s*#+ (BEGIN|END) SOLUTION", line)
            )
            filled += 1
    assert filled == len(answers) > 0, f"{assignment}: answer cells do not match the solution"
    release.write_text(json.dumps(nb, indent=1))
    return release


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    root: Path  # the course copy the server runs in
    url: str  # http://127.0.0.1:<port>/
    token: str
    log: Path

    def page(self, path: str) -> str:
        """The URL of a page, with the token (the server turns it into a login cookie)."""
        return f"{self.url}{path}?token={self.token}"

    def api(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path, method=method, headers={"Authorization": f"token {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:  # not listening (yet)
            return 0, b""

    def wait_for_kernel(self, path: str, timeout_s: float = 60) -> None:
        """Until the server's kernel of the notebook at ``path`` has started and is idle."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, body = self.api("api/sessions")
            states = [
                s["kernel"]["execution_state"]
                for s in (json.loads(body) if status == 200 else [])
                if s.get("path") == path and s.get("kernel")
            ]
            if states == ["idle"]:
                return
            time.sleep(0.25)
        raise TimeoutError(f"no idle kernel for {path} after {timeout_s} s")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _stop(proc: subprocess.Popen, lab: Lab) -> None:
    """Shut the kernels down through the API, then the server (its whole process group)."""
    if proc.poll() is None:
        status, body = lab.api("api/kernels")
        if status == 200:
            for kernel in json.loads(body):
                lab.api(f"api/kernels/{kernel['id']}", method="DELETE")
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[Lab]:
    require_chromium()
    base = tmp_path_factory.mktemp("lab")
    root = base / "course"
    root.mkdir()
    for name in COURSE:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        else:
            shutil.copy2(src, root / name)
    (root / "normedu").symlink_to(REPO / "normedu")  # the course's own package, as in a clone
    home = {k: base / k for k in ("config", "settings", "workspaces", "runtime")}
    for d in home.values():
        d.mkdir()
    env = {
        **os.environ,
        "VENV": str(Path(sys.executable).parent.parent),  # the project environment
        "JUPYTER_CONFIG_DIR": str(home["config"]),
        "JUPYTERLAB_SETTINGS_DIR": str(home["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(home["workspaces"]),
        "JUPYTER_RUNTIME_DIR": str(home["runtime"]),
    }
    lab = Lab(
        root=root,
        url=f"http://127.0.0.1:{free_port()}/",
        token=secrets.token_hex(16),
        log=base / "server.log",
    )
    port = lab.url.rsplit(":", 1)[1].strip("/")
    cmd = [
        str(root / "scripts" / "lab.sh"),
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={lab.token}",
    ]
    with lab.log.open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while lab.api("api/status")[0] != 200:
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited ({proc.returncode}):\n{lab.log_text()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not answer in {START_TIMEOUT_S} s")
            time.sleep(0.5)
        yield lab
    finally:
        _stop(proc, lab)


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    # Nothing leaves the machine: Formgrader's page asks a CDN for MathJax, which fails at
    # once through a dead proxy instead of waiting on the network.
    with sync_playwright() as pw, dead_port() as port:
        context = launch_context(pw, lab.root.parent / "chromium", dead_proxy=port)
        context.set_default_timeout(60_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def tab(browser):
    """The one tab the three tests load their pages in, as an instructor's browser would: a
    new tab is a new renderer process that compiles JupyterLab's scripts again (about 1 CPU-s
    per test). A notebook left edited asks before the next page replaces it: leave."""
    page = browser.new_page()
    page.on("dialog", lambda d: d.accept())
    yield page
    page.close()


def test_formgrader_lists_every_assignment(lab, tab):
    page = tab
    page.goto(lab.page("formgrader/manage_assignments"))
    page.wait_for_function(
        "() => !document.body.innerText.includes('Loading, please wait')"
        " && document.querySelectorAll('td.name').length > 0"
    )
    shown = sorted(page.locator("td.name").all_inner_texts())
    warnings = page.locator(".alert-warning").all_inner_texts()
    assert [s.strip() for s in shown] == assignments(lab.root)
    assert not warnings, f"Formgrader warns: {warnings}"
    # The pages an instructor grades and gives feedback from.
    first = assignments(lab.root)[0]
    for path in (
        "formgrader/gradebook",
        f"formgrader/gradebook/{first}",
        "formgrader/manage_students",
        f"formgrader/manage_submissions/{first}",
        f"formgrader/api/submissions/{first}",
        "formgrader/api/students",
    ):
        status, _ = lab.api(path)
        assert status == 200, f"{path}: HTTP {status}"
    errors = [
        line for line in lab.log_text().splitlines() if re.search(r"\b5\d\d (GET|POST)\b", line)
    ]
    assert not errors, "server errors:\n" + "\n".join(errors)
    assert "Traceback" not in lab.log_text(), lab.log_text()[-4000:]


def test_solved_exercise_runs_and_validates(lab, tab):
    # The assignment quickest to run: the one with the fewest cells.
    assignment = min(
        assignments(lab.root),
        key=lambda a: len(
            json.loads((lab.root / "exercises" / a / f"{a}.ipynb").read_text())["cells"]
        ),
    )
    path = solved_release(lab.root, assignment).relative_to(lab.root).as_posix()
    page = tab
    page.goto(lab.page(f"lab/tree/{path}"))
    notebook = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    notebook.locator(".jp-Cell").first.wait_for()
    lab.wait_for_kernel(path)
    try:
        notebook.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        # Every code cell shows an execution count once the kernel has run it.
        page.wait_for_function(
            """() => {
              const prompts = [...document.querySelectorAll(
                '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')];
              return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.innerText));
            }""",
            timeout=VALIDATE_TIMEOUT_MS,
        )
        errors = notebook.locator('[data-mime-type="application/vnd.jupyter.stderr"]')
        assert errors.count() == 0, errors.all_inner_texts()
        notebook.locator(".validate-button").click()
        result = page.locator(".jp-Dialog-content")
        result.locator(".validation-success, .validation-failed, .validation-error").first.wait_for(
            timeout=VALIDATE_TIMEOUT_MS
        )
        text = result.inner_text()
        page.keyboard.press("Escape")  # close the dialog, as the student would
        result.wait_for(state="detached")
    except Exception:
        page.screenshot(path=lab.root.parent / "validate-failure.png")
        raise
    # It says what it checked: the visible tests; the hidden ones run at grading.
    assert "The visible tests pass. The hidden tests" in text and "Success!" not in text, text


def test_chapter_opens_as_a_notebook(lab, tab):
    # The smallest page (after the root page) that holds code, double-clicked in the file
    # browser: every page is the same kind of MyST notebook, and a small one renders quickly.
    pages = toc_docnames(REPO / "_toc.yml")[1:]
    with_code = [d for d in pages if "```{code-cell}" in (REPO / f"{d}.md").read_text()]
    docname = min(with_code, key=lambda d: (REPO / f"{d}.md").stat().st_size)
    folder, name = docname.rsplit("/", 1)
    page = tab
    if "/lab/" in page.url:
        # JupyterLab is open in the tab already: walk its file browser there, as a reader
        # would, instead of loading the whole application again.
        page.locator(".jp-BreadCrumbs-home").first.click()
        page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{folder}$")).dblclick()
    else:
        page.goto(lab.page(f"lab/tree/{folder}"))
    page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{name}\.md$")).dblclick()
    page.locator(".lm-TabBar-tab", has_text=f"{name}.md").wait_for()
    current = page.locator("#jp-main-dock-panel .jp-MainAreaWidget:not(.lm-mod-hidden)")
    current.locator(".jp-Notebook, .jp-FileEditor").first.wait_for()
    editors = current.locator(".jp-FileEditor").count()
    if not editors:
        current.locator(".jp-Cell").nth(1).wait_for()
    cells = current.locator(".jp-Cell").count()
    assert cells > 1 and editors == 0, f"{name}.md did not open as a notebook"


#: What a page runs or loads from a hand-in, read in the page: the names the injection
#: vectors record (``window.pwned``), and elements that run script when clicked or loaded.
_ACTIVE = """() => ({
  ran: window.pwned || [],
  active: [...document.querySelectorAll(
      'a[href], form, iframe, object, embed, base, meta[http-equiv], svg script')]
    .map(e => e.outerHTML.slice(0, 80))
    .filter(h => /javascript:|data:text|<iframe|<object|<embed|<base|<form|refresh|<script/i
      .test(h)),
})"""


def _look(page, url: str) -> dict:
    """Load ``url``, let the page's events fire (image errors, toggles, fetches), and read
    what ran. Returns ``_ACTIVE``'s answer plus the requests the page made."""
    requests = []

    def record(request):
        requests.append(request.url)

    page.on("request", record)
    try:
        page.goto(url)
        page.wait_for_load_state("load")
        page.wait_for_timeout(1500)
        seen = page.evaluate(_ACTIVE)
    finally:
        page.remove_listener("request", record)
    return {**seen, "requests": [u for u in requests if "pwned" in u]}


def test_formgrader_and_feedback_show_hand_ins_inert(lab, tab):
    """Issue 47: the instructor opens a hostile hand-in in Formgrader's grading view (served
    from the Jupyter server's origin, where a script could call the REST API) and its feedback
    page: no vector of ``handin_injections`` runs or requests anything, the page says in one
    line what it left out, and the file as handed in is unchanged. An honest hand-in keeps its
    formula (typeset offline on the feedback page), table and plot."""
    import nbformat
    from handin_injections import honest_cells, injection_cells, script_for, with_cells
    from nbgrader.api import Gradebook

    from normedu.cli import main
    from normedu.course.cohort import submission, write_demo_assignment, write_submission

    root, name = lab.root, "inert_demo"
    write_demo_assignment(root, name)
    shutil.copytree(REPO / "assets" / "mathjax", root / "assets" / "mathjax", dirs_exist_ok=True)
    course = ["--root", str(root)]
    assert main([*course, "release", name]) == 0
    src = nbformat.read(root / "solutions" / name / f"{name}.ipynb", as_version=4)
    rel = nbformat.read(root / "exercises" / name / f"{name}.ipynb", as_version=4)
    correct = submission(src, rel, "correct")
    inbox = root.parent / "inbox"
    write_submission(inbox / "mallory.ipynb", with_cells(correct, injection_cells(), widgets=True))
    write_submission(inbox / "honest.ipynb", with_cells(correct, honest_cells()))
    assert main([*course, "collect", name, str(inbox)]) == 0
    assert main([*course, "autograde", name, "--jobs", "1"]) == 0
    assert main([*course, "feedback", name]) == 0
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        ids = {s: gb.find_submission_notebook(name, name, s).id for s in ("mallory", "honest")}

    views = {
        "formgrader": lambda s: lab.page(f"formgrader/submissions/{ids[s]}/"),
        "feedback": lambda s: (root / "feedback" / s / name / f"{name}.html").as_uri(),
    }
    for where, url in views.items():
        seen = _look(tab, url("mallory"))
        assert seen == {"ran": [], "active": [], "requests": []}, f"{where}: {seen}"
        note = tab.locator("p", has_text="Shown inert")
        assert note.count() == 1 and re.search(r"\d+ scripts", note.inner_text()), where
        seen = _look(tab, url("honest"))
        assert seen == {"ran": [], "active": [], "requests": []}, f"{where}: {seen}"
        plot = tab.locator("img[src^='data:image/png']")
        assert plot.count() == 1 and plot.evaluate("i => i.naturalWidth") == 48, where
        assert tab.locator(".text_cell_render td").all_inner_texts() == ["2", "3"], where
        assert tab.locator("p", has_text="Shown inert").count() == 0, where
        if where == "feedback":  # the course's MathJax, offline, under the page's policy
            tab.locator("mjx-container").nth(1).wait_for()
        else:  # Formgrader's MathJax comes from a CDN (none here): the TeX is intact
            assert r"\frac{1}{D}\sum_{j=1}^{D} x_{ij}" in tab.inner_text("body"), where
    assert "pwned" not in lab.log_text()  # no request for the API reached the server
    # Defence in depth: a script that got past the cleaning into a feedback page (put there by
    # hand) is still refused by the page's Content-Security-Policy.
    page = root / "feedback" / "mallory" / name / f"{name}.html"
    forged = page.with_name("forged.html")
    script = script_for("past_the_cleaning")
    forged.write_text(
        page.read_text().replace(
            "</body>", f'<script>{script}</script><img src=x onerror="{script}"></body>'
        )
    )
    assert _look(tab, forged.as_uri())["ran"] == []
    # Nothing lost: the hand-in on disk is as handed in, script and all.
    handed_in = (inbox / "mallory.ipynb").read_bytes()
    assert (root / "submitted" / "mallory" / name / f"{name}.ipynb").read_bytes() == handed_in
    assert b"<script>" in handed_in
