"""Page: what the store comes from: run, config, versions, profiles, skipped validation."""

from __future__ import annotations

import json
from typing import Any

import dash
import yaml
from dash import html

from dashboard.data import cached_layout, fetch
from dashboard.ui import fmt, table

dash.register_page(__name__, path="/run", name="Run info", title="sgdsim: run info", order=5)


@cached_layout
def layout(**_: Any) -> html.Div:
    runs = fetch("SELECT created_utc, sgdsim_version, config_json FROM runs ORDER BY created_utc")
    profiles = fetch(
        "SELECT profile_id, source, model, hardware, device, batch_size, image_size, "
        "param_count, tf_version, host, runs, untraced_step_s, node_cores FROM profiles "
        "ORDER BY profile_id"
    )
    skipped = fetch(
        "SELECT model, network, policy, workers, reason FROM measurements "
        "WHERE status <> 'ok' ORDER BY model, network, policy, workers"
    )
    run_rows = [[str(c), v] for c, v, _ in runs.iter_rows()]
    config = json.loads(runs["config_json"][-1]) if runs.height else {}
    profile_rows = [
        [
            r["profile_id"],
            r["source"],
            r["device"],
            r["batch_size"],
            f"{r['image_size']} px",
            f"{r['param_count']:,}",
            r["tf_version"],
            r["host"],
            r["runs"],
            fmt(r["untraced_step_s"] * 1e3, ".1f"),
            fmt(r["node_cores"], "d"),
        ]
        for r in profiles.iter_rows(named=True)
    ]
    return html.Div(
        [
            html.H2("Run info"),
            html.H3("Runs"),
            table(["published (UTC)", "sgdsim version"], run_rows, "run-runs"),
            html.H3("Profiles"),
            table(
                [
                    "profile",
                    "source",
                    "device",
                    "batch",
                    "image size",
                    "parameters",
                    "TensorFlow",
                    "host",
                    "runs",
                    "untraced step (ms)",
                    "cores",
                ],
                profile_rows,
                "run-profiles",
            ),
            html.H3("Skipped validation points"),
            table(
                ["model", "network", "policy", "N", "reason"],
                [list(r) for r in skipped.iter_rows()],
                "run-skipped",
            )
            if skipped.height
            else html.P("None: every validation point was measured.", id="run-skipped"),
            html.H3("Config"),
            html.Pre(yaml.safe_dump(config, sort_keys=False), id="run-config"),
        ]
    )
