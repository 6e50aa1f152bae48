"""Page: where the time goes, the bottleneck against N and a simulated execution timeline."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from pathlib import Path
from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.analysis import with_bottleneck
from dashboard.data import (
    DEFAULT_MODE,
    cached_layout,
    distinct,
    fetch,
    network_names,
    pick,
    pick_policy,
    search,
    trace_files,
    trace_path,
)
from dashboard.export import export_bar, register_export
from dashboard.figures import (
    bottleneck_figure,
    empty_figure,
    step_windows,
    timeline_figure,
    timeline_spans,
)
from dashboard.ui import (
    POLICY_LABEL,
    control,
    dropdown,
    register_mode_policies,
    register_url_sync,
    url_sync,
)

dash.register_page(
    __name__, path="/time", name="Where the time goes", title="sgdsim: where the time goes", order=2
)

#: Step choice that draws the whole trace.
ALL_STEPS = "all"


def rows(
    model: str | None,
    hardware: str | None,
    network: str | None,
    mode: str | None,
    policy: str | None,
) -> pl.DataFrame:
    """Predictions of one curve with their bottleneck."""
    df = fetch(
        "SELECT * FROM predictions WHERE model = ? AND hardware = ? AND network = ? "
        "AND mode = ? AND policy = ? ORDER BY workers",
        [model or "", hardware or "", network or "", mode or "", policy or ""],
    )
    return with_bottleneck(df)


def default_trace(
    traces: list[str], model: str | None, hardware: str | None, network: str | None
) -> str | None:
    """The first trace of the selected model, hardware and network, else the first trace.
    Trace paths are ``{hardware}/{model}/{network}/{policy}/{mode}/w{N}.json``."""
    for t in traces:
        if t.split("/")[:3] == [hardware, model, network]:
            return t
    return traces[0] if traces else None


@cached_layout
def layout(
    model: str | None = None,
    hardware: str | None = None,
    network: str | None = None,
    mode: str | None = None,
    policy: str | None = None,
    trace: str | None = None,
    step: str | None = None,
    **_: Any,
) -> html.Div:
    models, hws, nets = distinct("model"), distinct("hardware"), network_names()
    modes = distinct("mode")
    traces = trace_files()
    if traces and not (model or hardware or network):
        # nothing chosen: start at the first traced grid point, so both figures agree
        parts = traces[0].split("/")
        if len(parts) >= 5:
            hardware, model, network, policy, mode = parts[:5]
    model, hardware, network = pick(model, models), pick(hardware, hws), pick(network, nets)
    mode = pick(mode, modes, DEFAULT_MODE)
    policies, policy = pick_policy(policy, mode)
    trace = pick(trace, traces, default_trace(traces, model, hardware, network))
    # the figures come with the layout: no callback round trip or empty first draw
    timeline, steps, step = update_timeline(trace, step)
    curve = (model, hardware, network, mode, policy)
    return html.Div(
        [
            *url_sync("time", update_query(*curve, trace, step)),
            html.H2("Where the time goes"),
            html.P(
                "Against N: how busy the parameter server's link is in each direction, the "
                "share of its time a worker waits on communication, and how busy the PS CPU "
                "is (the rate over the CPU bound, when the profile measured CPU); the hover "
                "names the bottleneck."
            ),
            html.Div(
                [
                    control("Model", dropdown("time-model", models, model)),
                    control("Hardware", dropdown("time-hardware", hws, hardware)),
                    control("Network", dropdown("time-network", nets, network)),
                    control("SGD mode", dropdown("time-mode", modes, mode)),
                    control(POLICY_LABEL, dropdown("time-policy", policies, policy)),
                ],
                className="controls",
            ),
            dcc.Graph(
                id="time-bottleneck",
                figure=update_bottleneck(*curve),
                config={"displaylogo": False},
            ),
            export_bar("time-export"),
            html.H3("Timeline of a simulated run"),
            html.P(
                "Each worker's compute, parameter pulls and gradient pushes, and the PS's "
                "updates, from the synthetic trace the pipeline writes for the grid points "
                "listed in simulation.chrome_traces. Grey: the worker waits (for parameters, "
                "for its updates, or between steps). The same file opens in Perfetto "
                "(ui.perfetto.dev, Open trace file) or chrome://tracing."
            ),
            html.Div(
                [
                    control(
                        "Trace",
                        dcc.Dropdown(
                            traces,
                            trace,
                            id="time-trace",
                            clearable=False,
                            placeholder="no traces: list grid points in simulation.chrome_traces",
                        ),
                    ),
                    control(
                        "Step of worker 0",
                        dcc.Dropdown(steps, step, id="time-step", clearable=False),
                    ),
                    html.Button(
                        "Download trace (Chrome JSON)", id="time-trace-download-button", n_clicks=0
                    ),
                    dcc.Download(id="time-trace-download"),
                ],
                className="controls",
            ),
            dcc.Graph(id="time-timeline", figure=timeline, config={"displaylogo": False}),
        ]
    )


@callback(
    Output("time-bottleneck", "figure"),
    Input("time-model", "value"),
    Input("time-hardware", "value"),
    Input("time-network", "value"),
    Input("time-mode", "value"),
    Input("time-policy", "value"),
    prevent_initial_call=True,
)
def update_bottleneck(
    model: str | None,
    hardware: str | None,
    network: str | None,
    mode: str | None,
    policy: str | None,
) -> Any:
    """Bottleneck figure of the selected curve."""
    title = f"{model} on {hardware}, {network} ({mode}, {policy})"
    return bottleneck_figure(rows(model, hardware, network, mode, policy), title)


@callback(
    Output("time-query", "data"),
    Input("time-model", "value"),
    Input("time-hardware", "value"),
    Input("time-network", "value"),
    Input("time-mode", "value"),
    Input("time-policy", "value"),
    Input("time-trace", "value"),
    Input("time-step", "value"),
    prevent_initial_call=True,
)
def update_query(*values: str | None) -> str:
    """URL query of the page's selection."""
    keys = ("model", "hardware", "network", "mode", "policy", "trace", "step")
    return search(**dict(zip(keys, values, strict=True)))


@functools.lru_cache(maxsize=4)
def _load(path: str, _mtime: float) -> tuple[pl.DataFrame, str]:
    """Spans and title of a trace file (cached while the file is unchanged)."""
    data = json.loads(Path(path).read_text())
    meta = data.get("otherData", {})
    title = (
        f"{meta.get('model', '?')} on {meta.get('hardware', '?')}, {meta.get('network', '?')}, "
        f"N = {meta.get('workers', '?')} ({meta.get('mode', '?')}, {meta.get('policy', '?')})"
    )
    return timeline_spans(data), title


def load_trace(trace: str) -> tuple[pl.DataFrame, str]:
    """Spans (:func:`dashboard.figures.timeline_spans`) and title of a listed trace."""
    path = trace_path(trace)
    return _load(str(path), path.stat().st_mtime)


@callback(
    Output("time-timeline", "figure"),
    Output("time-step", "options"),
    Output("time-step", "value"),
    Input("time-trace", "value"),
    Input("time-step", "value"),
    prevent_initial_call=True,
)
def update_timeline(trace: str | None, step: str | None) -> Any:
    """Gantt chart of the selected trace file, one step of worker 0 (the chosen one,
    else the middle one) or all; the trace's steps as choices."""
    if not trace:
        empty = empty_figure(
            "No synthetic traces in this store's results/: list grid points in "
            "simulation.chrome_traces and rerun the pipeline."
        )
        return empty, [ALL_STEPS], ALL_STEPS
    spans, title = load_trace(trace)
    windows = step_windows(spans)
    options = [ALL_STEPS] + [str(k + 1) for k in range(len(windows))]
    step = pick(step, options, str((len(windows) + 1) // 2) if windows else ALL_STEPS)
    if step and step != ALL_STEPS:
        k = int(step)
        fig = timeline_figure(spans, f"{title}: step {k} of worker 0", windows[k - 1])
    else:
        fig = timeline_figure(spans, title)
    return fig, options, step


@callback(
    Output("time-trace-download", "data"),
    Input("time-trace-download-button", "n_clicks"),
    State("time-trace", "value"),
    prevent_initial_call=True,
)
def download_trace(_n: int, trace: str | None) -> Any:
    """The selected trace file, for Perfetto or chrome://tracing."""
    if not trace:
        return dash.no_update
    path = trace_path(trace)
    return dcc.send_file(str(path), filename="sgdsim-" + trace.replace("/", "-"))


register_export(
    "time-export",
    [
        State("time-model", "value"),
        State("time-hardware", "value"),
        State("time-network", "value"),
        State("time-mode", "value"),
        State("time-policy", "value"),
    ],
    rows,
    lambda *key: "sgdsim-bottleneck-" + "-".join(str(k) for k in key),
)

register_mode_policies("time")
register_url_sync("time")


def _warm_up() -> None:
    """Parse the store's traces once, so the page's first visit does not wait for it."""
    for t in trace_files():
        with contextlib.suppress(OSError, ValueError):  # a trace being rewritten: on the visit
            load_trace(t)


threading.Thread(target=_warm_up, name="sgdsim-trace-warm-up", daemon=True).start()
