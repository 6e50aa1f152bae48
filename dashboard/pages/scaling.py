"""Page: predicted throughput vs workers for one model, hardware, mode and policy,
one line per network."""

from __future__ import annotations

from typing import Any

import dash
import polars as pl
from dash import Input, Output, State, callback, dcc, html

from dashboard.analysis import default_networks
from dashboard.data import (
    DEFAULT_MODE,
    cached_layout,
    distinct,
    fetch,
    network_names,
    pick,
    pick_policy,
    search,
)
from dashboard.export import export_bar, register_export
from dashboard.figures import METRICS, colors_for, scaling_figure
from dashboard.ui import (
    POLICY_LABEL,
    control,
    dropdown,
    register_mode_policies,
    register_url_sync,
    url_sync,
)

dash.register_page(__name__, path="/scaling", name="Scaling", title="sgdsim: scaling", order=1)

#: Query value of an empty network selection (an absent key means :func:`default_networks`).
NO_NETWORK = "none"


def rows(
    model: str | None,
    hardware: str | None,
    mode: str | None,
    policy: str | None,
    networks: list[str] | None,
) -> pl.DataFrame:
    """Predictions of one curve per selected network, with speedup and efficiency."""
    return fetch(
        "SELECT p.*, s.speedup, s.efficiency FROM predictions p LEFT JOIN scaling s "
        "ON s.model = p.model AND s.hardware = p.hardware AND s.network = p.network "
        "AND s.policy = p.policy AND s.mode = p.mode AND s.workers = p.workers "
        "WHERE p.model = ? AND p.hardware = ? AND p.mode = ? AND p.policy = ? "
        "AND list_contains(?, p.network) ORDER BY p.bandwidth_bps, p.workers",
        [model or "", hardware or "", mode or "", policy or "", list(networks or [])],
    )


@cached_layout
def layout(
    model: str | None = None,
    hardware: str | None = None,
    mode: str | None = None,
    policy: str | None = None,
    networks: str | None = None,
    metric: str | None = None,
    y: str | None = None,
    **_: Any,
) -> html.Div:
    models, hws, modes = distinct("model"), distinct("hardware"), distinct("mode")
    mode = pick(mode, modes, DEFAULT_MODE)
    policies, policy = pick_policy(policy, mode)
    nets = network_names()
    if networks is None:
        chosen = default_networks(nets)
    elif networks == NO_NETWORK:
        chosen = []
    else:
        chosen = [n for n in networks.split(",") if n in nets]
    model, hardware = pick(model, models), pick(hardware, hws)
    metric = pick(metric, list(METRICS), "samples_per_s") or "samples_per_s"
    logy = ["log"] if y == "log" else []
    # the figure comes with the layout: no callback round trip or empty first draw
    fig, message, query = update_scaling(model, hardware, mode, policy, chosen, metric, logy)
    return html.Div(
        [
            *url_sync("scaling", query),
            html.H2("Throughput vs workers"),
            html.P(
                "Solid: the prediction; shaded: its uncertainty (the store's band edges "
                "steps_per_s_lo / _hi when it has them, else mean ± standard deviation over "
                "the simulation's replications); dotted: ideal linear scaling from N = 1; "
                "star: the best N of each network."
            ),
            html.Div(
                [
                    control("Model", dropdown("scaling-model", models, model)),
                    control("Hardware", dropdown("scaling-hardware", hws, hardware)),
                    control("SGD mode", dropdown("scaling-mode", modes, mode)),
                    control(POLICY_LABEL, dropdown("scaling-policy", policies, policy)),
                ],
                className="controls",
            ),
            html.Div(
                [
                    control(
                        "Networks", dcc.Checklist(nets, chosen, id="scaling-networks", inline=True)
                    ),
                    control(
                        "Metric",
                        dcc.RadioItems(
                            [{"label": v, "value": k} for k, v in METRICS.items()],
                            metric,
                            id="scaling-metric",
                            inline=True,
                        ),
                    ),
                    control(
                        "Axis",
                        dcc.Checklist(
                            [{"label": "logarithmic y", "value": "log"}],
                            logy,
                            id="scaling-logy",
                            inline=True,
                        ),
                    ),
                ],
                className="controls",
            ),
            html.P(message, id="scaling-empty", className="empty"),
            dcc.Graph(id="scaling-graph", figure=fig, config={"displaylogo": False}),
            export_bar("scaling-export"),
        ]
    )


@callback(
    Output("scaling-graph", "figure"),
    Output("scaling-empty", "children"),
    Output("scaling-query", "data"),
    Input("scaling-model", "value"),
    Input("scaling-hardware", "value"),
    Input("scaling-mode", "value"),
    Input("scaling-policy", "value"),
    Input("scaling-networks", "value"),
    Input("scaling-metric", "value"),
    Input("scaling-logy", "value"),
    prevent_initial_call=True,
)
def update_scaling(
    model: str | None,
    hardware: str | None,
    mode: str | None,
    policy: str | None,
    networks: list[str] | None,
    metric: str,
    logy: list[str] | None = None,
) -> Any:
    """Figure, empty-state message and URL query for the selected curve."""
    nets = network_names()
    df = rows(model, hardware, mode, policy, networks)
    title = f"{model} on {hardware} ({mode}, {policy})"
    if not networks:
        message = "No network selected: tick one or more networks above."
    elif df.is_empty():
        message = "No predictions for this model, hardware, mode and policy."
    else:
        message = ""
    log = "log" in (logy or [])
    fig = scaling_figure(df, title, metric, colors_for(nets), log)
    query = search(
        model=model,
        hardware=hardware,
        mode=mode,
        policy=policy,
        networks=(
            NO_NETWORK
            if not networks
            else (None if set(networks) == set(default_networks(nets)) else networks)
        ),
        metric=metric,
        y="log" if log else None,
    )
    return fig, message, query


register_export(
    "scaling-export",
    [
        State("scaling-model", "value"),
        State("scaling-hardware", "value"),
        State("scaling-mode", "value"),
        State("scaling-policy", "value"),
        State("scaling-networks", "value"),
    ],
    rows,
    lambda model, hardware, mode, policy, _n: f"sgdsim-scaling-{model}-{hardware}-{mode}-{policy}",
)

register_mode_policies("scaling")
register_url_sync("scaling")
