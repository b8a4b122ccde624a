"""Screenshots of the MLflow UI for a hyperparameter sweep logged by xmr (pictures for the docs).

A sweep is one parent run with its trials as child runs (tag ``mlflow.parentRunId``), all in one
experiment such as ``xmr/tune/clip_m``. The script starts a real ``mlflow server`` on the sqlite
store (bound to 127.0.0.1 on a free port, stopped again at the end), opens the experiment's runs
table in headless Chromium, expands every sweep so its trials show under the parent row, shows
the swept params and the chosen metric columns, and saves a full-page screenshot. Optionally it
also opens one run's artifact page with a PNG artifact (the Pareto plot) selected.

Extra tools (not xmr dependencies, so not in pyproject.toml):

    apt-get install -y chromium       # Debian/Ubuntu: /usr/bin/chromium
    pip install playwright            # the Python driver; its own browser download is not needed

(Where Playwright's own browser can be downloaded, ``python -m playwright install chromium``
works as well; pass ``--chromium ''`` to use it.)

Usage, from the repository root:

    python bench/screenshot_mlflow_ui.py --tracking-db mlflow.db --experiment xmr/tune/clip_m \\
        --out bench/mlflow_sweep.png \\
        --artifacts-run-name clip_m-demo \\
        --artifact pareto_test_recall_t2i_at_10_vs_test_bias_at_10.png \\
        --out-artifact bench/mlflow_pareto.png \\
        --metrics test/bias_at_10,test/recall_t2i_at_10

    # no sweep at hand: build a small synthetic store in DIR and screenshot that
    python bench/screenshot_mlflow_ui.py --demo-store /tmp/xmr_mlflow_demo

Param columns default to the params whose values differ between the trials (``--params`` to
choose); metric columns default to the trials' metrics (at most 6; ``--metrics`` to choose). One
run takes about 20-30 s, most of it the server start. Chromium runs with
``--disable-background-networking`` and friends, so it works on a machine with no internet.

The server needs no artifact flags: experiments that xmr creates on a sqlite store record a
``file://`` artifact location, which the server reads itself (``--serve-artifacts`` and
``--artifacts-destination`` only matter for ``mlflow-artifacts:/`` locations).

MLflow UI details this relies on (checked against MLflow 3.17; the ``SEL_*`` constants below):
the runs page needs ``?workflowType=machine_learning`` (MLflow 3 otherwise opens the GenAI
overview); the "MLflow Assistant" side panel that opens on a first visit is closed; parent rows
are expanded with the +/- button of the run-name cell; columns are ticked in the "Columns"
popover (an Ant Design tree with a search box); column widths are fitted by double-clicking the
AG Grid header edges. Children only nest under their parent while the table is unfiltered and
sorted by creation time, so the script neither filters nor sorts. When a step no longer matches,
the script warns and still saves what the page shows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page, Playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = {"width": 1600, "height": 1000}
MAX_WIDTH, MAX_HEIGHT = 2400, 8000  # px; the viewport grows to fit the runs table up to these
MAX_DEFAULT_METRICS = 6
# Attribute columns MLflow shows by default that say nothing about a sweep (they eat the width).
HIDDEN_ATTRIBUTE_COLUMNS = ("Dataset", "Source", "Models")
SERVER_START_TIMEOUT_S = 180.0
UI_TIMEOUT_MS = 60_000
PARENT_TAG = "mlflow.parentRunId"

# MLflow 3.x UI hooks this script relies on (see the module docstring).
SEL_ROW = ".ag-row[row-id]"
SEL_PINNED_ROW = ".ag-pinned-left-cols-container .ag-row[row-id='{run_id}']"
SEL_EXPANDER = "button[data-component-id*='runnamecellrenderer']"
SEL_ASSISTANT_CLOSE = "button[data-component-id='mlflow.assistant.chat_panel.close']"
SEL_COLUMN_POPOVER = "[data-component-id='mlflow.experiment_page.runs_table.column_selector']"
SEL_TREE_NODE = ".du-bois-light-tree-treenode"
SEL_TREE_TITLE = ".du-bois-light-tree-title"
SEL_TREE_CHECKBOX = ".du-bois-light-tree-checkbox"
CHECKED_CLASS = "du-bois-light-tree-treenode-checkbox-checked"

DEMO_EXPERIMENT = "xmr/tune/clip_m"
DEMO_PARENT = "clip_m-demo"
DEMO_ARTIFACT = "pareto_test_recall_t2i_at_10_vs_test_bias_at_10.png"
DEMO_METRICS = "test/bias_at_10,test/recall_t2i_at_10"


STARTED = time.monotonic()


def log(message: str) -> None:
    elapsed = time.monotonic() - STARTED
    print(f"[screenshot_mlflow_ui {elapsed:5.1f}s] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The tracking store
# --------------------------------------------------------------------------------------------


def make_demo_store(directory: Path) -> Path:
    """A small sqlite store shaped like an ``xmr tune`` sweep; returns the database path.

    Experiment ``xmr/tune/clip_m`` (artifacts in ``mlartifacts/`` beside the db, as xmr does),
    parent run ``clip_m-demo`` with a Pareto PNG and ``trials.csv``, and four child trials over
    ``eval.clip_m`` in {0, 8, 16, 32}. Reuses the store when the parent run already exists.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import mlflow

    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    db = directory / "mlflow.db"
    uri = f"sqlite:///{db}"
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(DEMO_EXPERIMENT)
    if experiment is None:
        location = (directory / "mlartifacts" / DEMO_EXPERIMENT.replace("/", "_")).as_uri()
        experiment_id = client.create_experiment(DEMO_EXPERIMENT, artifact_location=location)
    else:
        experiment_id = experiment.experiment_id
        found = client.search_runs(
            [experiment_id], filter_string=f"attributes.run_name = '{DEMO_PARENT}'"
        )
        if found:
            log(f"demo store {db} already holds run {DEMO_PARENT}; reusing it")
            return db

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=experiment_id)
    trials: list[dict[str, float]] = []
    tags = {"xmr.command": "tune", "xmr.sweep_id": DEMO_PARENT}
    with mlflow.start_run(run_name=DEMO_PARENT, tags=tags) as parent:
        mlflow.log_params({"model.family": "clip"})
        for i, clip_m in enumerate((0, 8, 16, 32)):
            metrics = {
                "test/bias_at_10": round(0.31 - 0.0062 * clip_m, 4),
                "test/recall_t2i_at_10": round(0.624 - 0.0021 * clip_m - 1e-5 * clip_m**2, 4),
                "test/recall_i2t_at_10": round(0.611 - 0.0017 * clip_m, 4),
            }
            with mlflow.start_run(
                run_name=f"trial-{i}",
                parent_run_id=parent.info.run_id,
                nested=True,
                tags={"xmr.sweep_id": DEMO_PARENT, "xmr.trial": str(i)},
            ):
                mlflow.log_params({"eval.clip_m": clip_m, "model.family": "clip"})
                mlflow.log_metrics(metrics)
            trials.append({"eval.clip_m": clip_m, **metrics})
        best = max(trials, key=lambda t: t["test/recall_t2i_at_10"] - t["test/bias_at_10"])
        mlflow.log_metrics({f"best/{k}": v for k, v in best.items() if k.startswith("test/")})

        with tempfile.TemporaryDirectory() as tmp:
            table = Path(tmp) / "trials.csv"
            keys = list(trials[0])
            lines = [",".join(keys)] + [",".join(str(t[k]) for k in keys) for t in trials]
            table.write_text("\n".join(lines) + "\n")
            mlflow.log_artifact(str(table))

            fig, ax = plt.subplots(figsize=(6, 4.5), dpi=100)
            xs = [t["test/bias_at_10"] for t in trials]
            ys = [t["test/recall_t2i_at_10"] for t in trials]
            ax.plot(xs, ys, "o-", color="tab:blue")
            for t, x, y in zip(trials, xs, ys, strict=True):
                ax.annotate(
                    f"clip_m={t['eval.clip_m']:g}",
                    (x, y),
                    xytext=(5, 5),
                    textcoords="offset points",
                )
            ax.set_xlabel("test/bias_at_10 (lower is better)")
            ax.set_ylabel("test/recall_t2i_at_10")
            ax.set_title("clip_m-demo: Pareto front")
            ax.margins(x=0.15, y=0.12)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            plot = Path(tmp) / DEMO_ARTIFACT
            fig.savefig(plot)
            plt.close(fig)
            mlflow.log_artifact(str(plot))
    log(f"demo store written to {db}")
    return db


class Sweep:
    """What the screenshots need from the store: ids, the parents, the columns to show."""

    def __init__(self, db: Path, experiment_name: str) -> None:
        import mlflow

        self.uri = f"sqlite:///{db.resolve()}"
        self.client = mlflow.MlflowClient(self.uri)
        experiment = self.client.get_experiment_by_name(experiment_name)
        if experiment is None:
            names = [e.name for e in self.client.search_experiments()]
            raise SystemExit(f"no experiment {experiment_name!r} in {db}; it holds {names}")
        self.experiment_id: str = experiment.experiment_id
        self.artifact_location: str = experiment.artifact_location
        self.runs = self.client.search_runs([self.experiment_id], max_results=1000)
        self.children = [r for r in self.runs if PARENT_TAG in r.data.tags]
        self.parent_ids = sorted({r.data.tags[PARENT_TAG] for r in self.children})

    def varying_params(self) -> list[str]:
        """Params whose value differs between the child runs (the swept ones)."""
        keys = sorted({k for r in self.children for k in r.data.params})
        return [k for k in keys if len({r.data.params.get(k) for r in self.children}) > 1]

    def child_metrics(self) -> list[str]:
        return sorted({k for r in self.children for k in r.data.metrics})

    def run_id_by_name(self, name: str) -> str:
        quote = '"' if "'" in name else "'"
        found = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"attributes.run_name = {quote}{name}{quote}",
            order_by=["attributes.start_time DESC"],
        )
        if not found:
            raise SystemExit(f"no run named {name!r} in experiment {self.experiment_id}")
        if len(found) > 1:
            log(f"{len(found)} runs are named {name!r}; using the newest")
        return found[0].info.run_id

    def check_artifact(self, run_id: str, artifact: str) -> None:
        parent = str(Path(artifact).parent)
        listed = self.client.list_artifacts(run_id, None if parent == "." else parent)
        paths = [f.path for f in listed]
        if artifact not in paths:
            raise SystemExit(f"run {run_id} has no artifact {artifact!r}; found {paths}")


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def mlflow_server(db: Path, log_path: Path) -> Iterator[str]:
    """``mlflow server`` on the sqlite store at 127.0.0.1:<free port>; yields its base URL.

    No artifact flags: for experiments whose artifact_location is a local ``file://`` URI the
    server reads the files itself (``/get-artifact``), which is what the UI asks for.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{db.resolve()}",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    started = time.monotonic()
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        while not _healthy(url):
            if process.poll() is not None:
                raise SystemExit(
                    f"mlflow server exited with {process.returncode}; log {log_path}:\n"
                    + _tail(log_path)
                )
            if time.monotonic() - started > SERVER_START_TIMEOUT_S:
                raise SystemExit(
                    f"mlflow server not healthy after {SERVER_START_TIMEOUT_S:.0f} s; "
                    f"log {log_path}:\n" + _tail(log_path)
                )
            time.sleep(0.5)
        log(f"mlflow server up at {url} after {time.monotonic() - started:.1f} s")
        yield url
    finally:
        _stop(process)


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server (it stops its own workers); SIGKILL to its group if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log("mlflow server ignored SIGTERM; killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    # Workers left behind in the server's own session (it was started with a new one).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)


# --------------------------------------------------------------------------------------------
# The browser
# --------------------------------------------------------------------------------------------

INSTALL_HINT = (
    "install the browser tools first:\n"
    "    apt-get install -y chromium        # or your distribution's chromium package\n"
    "    pip install playwright"
)


def import_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit(
            f"the Python package `playwright` is not installed; {INSTALL_HINT}"
        ) from None
    return sync_playwright


def find_chromium(explicit: str | None) -> str | None:
    """The Chromium binary to drive; None means Playwright's own downloaded browser."""
    if explicit is not None:
        if explicit == "":
            return None
        path = shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
        if path is None:
            raise SystemExit(f"--chromium {explicit!r} not found; {INSTALL_HINT}")
        return path
    for name in (os.environ.get("CHROMIUM", ""), *CHROMIUM_CANDIDATES):
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def launch(playwright: Playwright, chromium: str | None) -> Browser:
    try:
        return playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, headless=True
        )
    except Exception as error:
        where = chromium or "Playwright's own Chromium (none found on PATH)"
        first = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise SystemExit(f"could not start {where}: {first}\n{INSTALL_HINT}") from error


def warn(message: str) -> None:
    log(f"WARNING: {message}")


def close_assistant(page: Page, wait_ms: int = 3000) -> None:
    """MLflow 3 opens its 'MLflow Assistant' side panel on first visit; it covers the page."""
    button = page.locator(SEL_ASSISTANT_CLOSE)
    with contextlib.suppress(Exception):
        button.first.wait_for(state="visible", timeout=wait_ms)
    if button.count() and button.first.is_visible():
        button.first.click()


def expand_parents(page: Page, sweep: Sweep) -> None:
    """Click the +/- toggle of each parent row so its trials show beneath it."""
    for parent_id in sweep.parent_ids:
        row = page.locator(SEL_PINNED_ROW.format(run_id=parent_id))
        if not row.count():
            warn(f"parent run {parent_id} is not in the table (filtered out, or not loaded)")
            continue
        child = next(r.info.run_id for r in sweep.children if r.data.tags[PARENT_TAG] == parent_id)
        child_row = page.locator(SEL_PINNED_ROW.format(run_id=child))
        if child_row.count():
            continue  # already expanded
        toggle = row.locator(SEL_EXPANDER)
        if not toggle.count():
            warn(f"no expand toggle ({SEL_EXPANDER}) in the row of parent {parent_id}")
            continue
        toggle.first.click()
        try:
            child_row.wait_for(timeout=10_000)
        except Exception:
            warn(f"the trials of parent {parent_id} did not appear after expanding it")


def check_nesting(page: Page, sweep: Sweep) -> None:
    """Warn when the trials do not show right under their parent row."""
    order = page.evaluate(
        """() => Array.from(document.querySelectorAll(
                '.ag-pinned-left-cols-container .ag-row[row-id]'))
            .sort((a, b) => +a.getAttribute('row-index') - +b.getAttribute('row-index'))
            .map(r => r.getAttribute('row-id'))"""
    )
    for parent_id in sweep.parent_ids:
        kids = {r.info.run_id for r in sweep.children if r.data.tags[PARENT_TAG] == parent_id}
        if parent_id not in order:
            continue
        start = order.index(parent_id) + 1
        if set(order[start : start + len(kids)]) != kids:
            warn(f"the trials of {parent_id} are not all listed under it in the screenshot")


def set_columns(page: Page, show: Sequence[str], hide: Sequence[str]) -> None:
    """Tick ``show`` and untick ``hide`` in the runs table's "Columns" selector."""
    button = page.get_by_role("button", name="Columns", exact=True)
    if not button.count():
        warn("no 'Columns' button above the runs table; columns left as they are")
        return
    button.first.click()
    popover = page.locator(SEL_COLUMN_POPOVER)
    try:
        popover.wait_for(timeout=10_000)
    except Exception:
        warn(f"the column selector ({SEL_COLUMN_POPOVER}) did not open")
        return
    search = popover.get_by_placeholder("Search columns")
    for name, wanted in [*((n, True) for n in show), *((n, False) for n in hide)]:
        if search.count():
            search.fill(name)
        exact = re.compile(f"^{re.escape(name)}$")
        nodes = popover.locator(SEL_TREE_NODE).filter(
            has=page.locator(SEL_TREE_TITLE, has_text=exact)
        )
        try:
            nodes.first.wait_for(timeout=3000)
        except Exception:
            if wanted:
                warn(f"column {name!r} is not offered by the column selector")
            continue
        for i in range(nodes.count()):
            node = nodes.nth(i)
            if (CHECKED_CLASS in (node.get_attribute("class") or "")) != wanted:
                node.locator(SEL_TREE_CHECKBOX).click()
    if search.count():
        search.fill("")
    page.keyboard.press("Escape")
    with contextlib.suppress(Exception):
        popover.wait_for(state="hidden", timeout=5000)


def _header(page: Page, name: str) -> Locator:
    """The header cell of a param or metric column (col-id ``params.`name``` / ``metrics.`…```)."""
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return page.locator(f'.ag-header-cell[col-id$=".`{quoted}`"]')


def autosize_columns(page: Page, names: Sequence[str]) -> None:
    """Double-click each shown column's header edge: AG Grid then fits the column to its name
    and values (MLflow prints metrics at full float precision, so these get ~130 px).

    Not a mouse drag: a drag that lands as a click sorts by that column, and MLflow only nests
    child runs under their parent while the table is sorted by creation time."""
    for name in names:
        handle = _header(page, name).locator(".ag-header-cell-resize")
        if handle.count():
            with contextlib.suppress(Exception):
                handle.first.dblclick(timeout=3000)


def fit_viewport_to_table(page: Page) -> None:
    """Grow the viewport until the runs table needs no scrolling (a full-page shot would not
    show what is scrolled away inside the table), then scroll the table back to its start."""
    for _ in range(3):
        extra = page.evaluate(
            """() => {
                const body = document.querySelector('.ag-body-viewport');
                const center = document.querySelector('.ag-center-cols-viewport');
                return {
                    w: center ? Math.max(0, center.scrollWidth - center.clientWidth) : 0,
                    h: body ? Math.max(0, body.scrollHeight - body.clientHeight) : 0,
                };
            }"""
        )
        size = page.viewport_size or VIEWPORT
        width = min(MAX_WIDTH, size["width"] + int(extra["w"]) + (8 if extra["w"] else 0))
        height = min(MAX_HEIGHT, size["height"] + int(extra["h"]) + (16 if extra["h"] else 0))
        if (width, height) == (size["width"], size["height"]):
            break
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(500)
    page.evaluate(
        """() => {
            for (const sel of ['.ag-body-horizontal-scroll-viewport', '.ag-center-cols-viewport',
                               '.ag-header-viewport', '.ag-body-viewport']) {
                const el = document.querySelector(sel);
                if (el) { el.scrollLeft = 0; el.scrollTop = 0; }
            }
        }"""
    )


def settle(page: Page) -> None:
    # Not "networkidle": the MLflow UI keeps a connection open, so that never comes.
    page.wait_for_timeout(1000)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    page.mouse.move(0, VIEWPORT["height"] - 1)
    page.wait_for_timeout(500)


def screenshot_runs(
    page: Page,
    base: str,
    sweep: Sweep,
    columns: Sequence[str],
    out: Path,
) -> None:
    # workflowType: MLflow 3 opens experiments on its GenAI overview otherwise. No search filter
    # or sort: MLflow nests child runs only in the unfiltered table sorted by creation time.
    url = f"{base}/#/experiments/{sweep.experiment_id}/runs?workflowType=machine_learning"
    log(f"opening {url}")
    page.goto(url)
    page.wait_for_selector(SEL_ROW, timeout=UI_TIMEOUT_MS)
    close_assistant(page)
    fit_viewport_to_table(page)  # rows of a long table are only made once scrolled into view
    expand_parents(page, sweep)
    set_columns(page, columns, HIDDEN_ATTRIBUTE_COLUMNS)
    fit_viewport_to_table(page)
    autosize_columns(page, columns)
    fit_viewport_to_table(page)
    check_nesting(page, sweep)
    settle(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    log(f"wrote {out}")


def screenshot_artifact(
    page: Page, base: str, sweep: Sweep, run_id: str, artifact: str, out: Path
) -> None:
    path = urllib.parse.quote(artifact)
    url = (
        f"{base}/#/experiments/{sweep.experiment_id}/runs/{run_id}/artifacts/{path}"
        "?workflowType=machine_learning"
    )
    log(f"opening {url}")
    page.set_viewport_size(VIEWPORT)
    page.goto(url)
    close_assistant(page, wait_ms=1000)  # closed on the runs page already, normally
    try:
        page.wait_for_function(
            """() => Array.from(document.images).some(
                i => i.src.startsWith('blob:') && i.complete && i.naturalWidth > 0)""",
            timeout=UI_TIMEOUT_MS,
        )
    except Exception:
        warn(f"no loaded image on the artifact page of {artifact!r}; saving the page anyway")
    settle(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    log(f"wrote {out}")


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def split_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tracking-db", type=Path, help="the sqlite store (mlflow.db)")
    parser.add_argument("--experiment", help="experiment name, e.g. xmr/tune/clip_m")
    parser.add_argument("--out", type=Path, help="PNG of the runs table")
    parser.add_argument("--artifacts-run-name", help="run whose artifact page to shoot as well")
    parser.add_argument("--artifact", help="artifact path (a PNG) of that run")
    parser.add_argument("--out-artifact", type=Path, help="PNG of the artifact page")
    parser.add_argument("--metrics", help="comma-separated metric columns to show")
    parser.add_argument(
        "--params", help="comma-separated param columns (default: the params the trials vary)"
    )
    parser.add_argument(
        "--chromium",
        help="Chromium binary (default: $CHROMIUM, else chromium on PATH; '' = Playwright's own)",
    )
    parser.add_argument(
        "--demo-store",
        type=Path,
        metavar="DIR",
        help="build a synthetic sweep store in DIR and screenshot it (fills the other defaults)",
    )
    args = parser.parse_args(argv)
    if args.demo_store is not None:
        demo = args.demo_store.resolve()
        args.experiment = args.experiment or DEMO_EXPERIMENT
        args.out = args.out or demo / "mlflow_sweep.png"
        args.artifacts_run_name = args.artifacts_run_name or DEMO_PARENT
        args.artifact = args.artifact or DEMO_ARTIFACT
        args.out_artifact = args.out_artifact or demo / "mlflow_pareto.png"
        args.metrics = args.metrics or DEMO_METRICS
    else:
        missing = [
            f"--{n}"
            for n in ("tracking-db", "experiment", "out")
            if not getattr(args, n.replace("-", "_"))
        ]
        if missing:
            parser.error(f"{', '.join(missing)} required (or --demo-store DIR)")
    shot = (args.artifacts_run_name, args.artifact, args.out_artifact)
    if any(shot) and not all(shot):
        parser.error("--artifacts-run-name, --artifact and --out-artifact go together")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    # A SIGTERM unwinds like Ctrl-C, so the server is stopped in any case.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sync_playwright = import_playwright()
    chromium = find_chromium(args.chromium)
    if args.demo_store is not None:
        args.tracking_db = make_demo_store(args.demo_store)
    db: Path = args.tracking_db.resolve()
    if not db.is_file():
        raise SystemExit(f"no sqlite store at {db}")
    sweep = Sweep(db, args.experiment)
    if not sweep.children:
        warn(f"experiment {args.experiment!r} has no child runs (tag {PARENT_TAG})")
    params = split_list(args.params)
    params = sweep.varying_params() if params is None else params
    metrics = split_list(args.metrics)
    if metrics is None:
        metrics = sweep.child_metrics()
        if len(metrics) > MAX_DEFAULT_METRICS:
            log(f"showing {MAX_DEFAULT_METRICS} of {len(metrics)} metrics; choose with --metrics")
            metrics = metrics[:MAX_DEFAULT_METRICS]
    log(f"experiment {sweep.experiment_id}, artifacts at {sweep.artifact_location}")
    log(
        f"{len(sweep.parent_ids)} sweep(s), {len(sweep.children)} trial(s); "
        f"columns: params {params}, metrics {metrics}"
    )
    artifact_run = None
    if args.artifacts_run_name:
        artifact_run = sweep.run_id_by_name(args.artifacts_run_name)
        sweep.check_artifact(artifact_run, args.artifact)

    with sync_playwright() as playwright:
        browser = launch(playwright, chromium)  # before the server: fails fast without a browser
        try:
            with (
                tempfile.TemporaryDirectory(prefix="mlflow-ui-shot-") as tmp,
                mlflow_server(db, Path(tmp) / "server.log") as base,
            ):
                page = browser.new_page(viewport=VIEWPORT)
                screenshot_runs(page, base, sweep, [*params, *metrics], args.out)
                if artifact_run is not None:
                    screenshot_artifact(
                        page, base, sweep, artifact_run, args.artifact, args.out_artifact
                    )
        finally:
            browser.close()
    log(f"done in {time.monotonic() - STARTED:.1f} s")


if __name__ == "__main__":
    main()
