-- sgdsim store: analysis views over the base tables.

-- Speedup and parallel efficiency of each grid point against N = 1 of the same
-- model, hardware, network, policy and mode.
CREATE VIEW scaling AS
SELECT
    p.model, p.hardware, p.network, p.bandwidth_bps, p.policy, p.mode, p.workers,
    p.steps_per_s, p.samples_per_s,
    p.steps_per_s / b.steps_per_s AS speedup,
    p.steps_per_s / b.steps_per_s / p.workers AS efficiency
FROM predictions p
JOIN predictions b
  ON b.workers = 1 AND b.model = p.model AND b.hardware = p.hardware
 AND b.network = p.network AND b.policy = p.policy AND b.mode = p.mode;

-- Throughput of each policy relative to fifo_random (one tensor at a time in a
-- random order, the baseline of TicTac's evaluation) and to tf_default, at the
-- same model, hardware, network, mode and N. NULL where the baseline was not
-- simulated.
CREATE VIEW policy_gain AS
SELECT
    p.model, p.hardware, p.network, p.mode, p.workers, p.policy, p.steps_per_s,
    p.steps_per_s / r.steps_per_s AS gain_vs_fifo_random,
    p.steps_per_s / d.steps_per_s AS gain_vs_tf_default
FROM predictions p
LEFT JOIN predictions r
  ON r.policy = 'fifo_random' AND r.model = p.model AND r.hardware = p.hardware
 AND r.network = p.network AND r.mode = p.mode AND r.workers = p.workers
LEFT JOIN predictions d
  ON d.policy = 'tf_default' AND d.model = p.model AND d.hardware = p.hardware
 AND d.network = p.network AND d.mode = p.mode AND d.workers = p.workers;

-- Predicted against measured throughput at every measured validation point:
-- signed and absolute percentage error of the prediction, and whether the
-- measurement lies inside the predicted phase band.
CREATE VIEW validation AS
SELECT
    m.model, m.hardware, m.network, m.bandwidth_bps, m.mode, m.policy, m.workers, m.loopback,
    m.steps_per_s AS measured_steps_per_s,
    m.steps_per_s_std AS measured_steps_per_s_std,
    p.steps_per_s AS predicted_steps_per_s,
    100 * (p.steps_per_s - m.steps_per_s) / m.steps_per_s AS error_pct,
    100 * abs(p.steps_per_s - m.steps_per_s) / m.steps_per_s AS ape_pct,
    m.cpu_busy, m.cpu_steal, m.shaper_drops,
    -- CPU seconds per step: measured over the window (worker and PS processes, if
    -- any, and the node's rest), and what the model charges (the profile's worker and PS
    -- CPU and the network's calibrated kernel CPU: node_cores / cpu_bound); a
    -- CPU-bound point predicted too fast shows the first above the second
    m.worker_cpu_s_per_step AS measured_worker_cpu_s_per_step,
    m.ps_cpu_s_per_step AS measured_ps_cpu_s_per_step,
    m.other_cpu_s_per_step AS measured_other_cpu_s_per_step,
    m.worker_cpu_s_per_step + coalesce(m.ps_cpu_s_per_step, 0) + m.other_cpu_s_per_step
        AS measured_cpu_s_per_step,
    pf.node_cores / p.cpu_bound_steps_per_s AS modelled_cpu_s_per_step,
    p.steps_per_s_lo AS predicted_lo_steps_per_s,
    p.steps_per_s_hi AS predicted_hi_steps_per_s,
    -- inside the phase band (workers in lockstep … bottleneck bound); NULL: no band
    m.steps_per_s BETWEEN p.steps_per_s_lo AND p.steps_per_s_hi AS inside_band,
    -- steady, N > 1: how far apart the workers stepped (0 in phase, 1/N evenly spread)
    m.phase_distance AS measured_phase_distance,
    p.phase_distance AS predicted_phase_distance,
    -- spread of the prediction over its runs' start phases (0: one run): how
    -- much one launch of the job may differ from the expected value
    p.steps_per_s_std AS predicted_steps_per_s_std,
    -- each launch's steps/s where a point was launched several times (runs > 1;
    -- measured_steps_per_s is their mean); NULL or one value: one launch
    m.run_steps_per_s AS measured_run_steps_per_s,
    -- steady: whether the measured rate met the rule (its batch-means interval
    -- within steady.rel_half_width) before steady.max_s cut the window, the
    -- interval's half-width (steps/s; of several launches, the mean's over them),
    -- and the error beyond that interval: what of ape_pct the measurement's own
    -- uncertainty cannot explain
    m.converged AS measured_converged,
    m.steps_per_s_half_width AS measured_steps_per_s_half_width,
    -- (greatest skips a NULL: no interval must stay NULL, not 0)
    CASE WHEN m.steps_per_s_half_width IS NOT NULL THEN
        100 * greatest(abs(p.steps_per_s - m.steps_per_s) - m.steps_per_s_half_width, 0)
        / m.steps_per_s END AS ape_beyond_interval_pct,
    -- steady, one launch: the measured rate of each batch of its window, steps/s,
    -- in time order; a significant trend across them says the workers were still
    -- moving when the window ended (sgdsim.protocol.batch_trend; NULL otherwise)
    CASE WHEN m.protocol = 'steady' AND coalesce(m.runs, 1) = 1
        THEN m.steps_per_s_windows END AS measured_batch_steps_per_s,
    -- steady async, N > 1: the prediction replayed from the measured workers'
    -- phases after warm-up (a diagnostic that reads the measurement): error_pct
    -- without the launch's part (the step model and the phases' later moves)
    r.replay_steps_per_s AS replayed_steps_per_s,
    100 * (r.replay_steps_per_s - m.steps_per_s) / m.steps_per_s AS replayed_error_pct,
    r.replay_phase_distance AS replayed_phase_distance,
    -- async, N > 1, predicted with the model's training capture at N: the
    -- prediction without it (the one-worker profile and the network's calibration)
    p.profile_only_steps_per_s,
    100 * (p.profile_only_steps_per_s - m.steps_per_s) / m.steps_per_s AS profile_only_error_pct,
    100 * abs(p.profile_only_steps_per_s - m.steps_per_s) / m.steps_per_s AS profile_only_ape_pct,
    -- the hypervisor's steal over each input of the point: a profile, calibration
    -- or measurement above 5 % ran slower than on a quiet host (sgdsim.hostcpu)
    pf.host_cpu_steal AS profile_cpu_steal,
    p.calibration_cpu_steal,
    greatest(m.cpu_steal, pf.host_cpu_steal, p.calibration_cpu_steal) AS max_cpu_steal
FROM measurements m
JOIN testbed_predictions p
  ON p.model = m.model AND p.hardware = m.hardware AND p.network = m.network
 AND p.mode = m.mode AND p.policy = m.policy AND p.workers = m.workers
LEFT JOIN profiles pf ON pf.profile_id = m.hardware || '/' || m.model
LEFT JOIN testbed_replays r
  ON r.model = m.model AND r.hardware = m.hardware AND r.network = m.network
 AND r.mode = m.mode AND r.policy = m.policy AND r.workers = m.workers
 AND r.replay_status = 'ok'
WHERE m.status = 'ok';

-- Mean absolute percentage error (MAPE) and maximum error per model, mode,
-- policy and network, over the measured worker counts.
CREATE VIEW validation_summary AS
SELECT
    model, hardware, mode, policy, network, count(*) AS points,
    avg(ape_pct) AS mape_pct,
    max(ape_pct) AS max_ape_pct
FROM validation
GROUP BY model, hardware, mode, policy, network;

-- MAPE and maximum error per mode over every measured point of that mode.
CREATE VIEW validation_by_mode AS
SELECT
    mode, count(*) AS points,
    avg(ape_pct) AS mape_pct,
    max(ape_pct) AS max_ape_pct
FROM validation
GROUP BY mode;

-- SGD modes compared at the same model, hardware, network and N: one row per
-- mode, with that mode's best policy (for allreduce: its best fusion rule) by
-- samples/s, the fastest mode of the point, how much faster it is than this
-- mode (fastest_ratio = fastest / this samples/s, fastest_gain_pct = 100 ×
-- (ratio − 1)), and the fastest mode's lead over the runner-up (lead_ratio,
-- lead_pct; NULL with one mode). Ties go to the policy, then the mode, first
-- in alphabetical order.
CREATE VIEW mode_comparison AS
WITH best AS (
    SELECT
        model, hardware, network, bandwidth_bps, workers, mode, policy,
        steps_per_s, samples_per_s,
        count(*) OVER (PARTITION BY model, hardware, network, workers, mode) AS policies_compared
    FROM predictions
    QUALIFY row_number() OVER (
        PARTITION BY model, hardware, network, workers, mode
        ORDER BY samples_per_s DESC, policy
    ) = 1
),
ranked AS (
    SELECT
        *,
        row_number() OVER (
            PARTITION BY model, hardware, network, workers ORDER BY samples_per_s DESC, mode
        ) AS mode_rank,
        count(*) OVER (PARTITION BY model, hardware, network, workers) AS modes_compared
    FROM best
)
SELECT
    r.model, r.hardware, r.network, r.bandwidth_bps, r.workers, r.mode, r.policy,
    r.policies_compared, r.steps_per_s, r.samples_per_s, r.mode_rank, r.modes_compared,
    f.mode AS fastest_mode, f.policy AS fastest_policy,
    f.samples_per_s AS fastest_samples_per_s,
    f.samples_per_s / nullif(r.samples_per_s, 0) AS fastest_ratio,
    100 * (f.samples_per_s / nullif(r.samples_per_s, 0) - 1) AS fastest_gain_pct,
    s.mode AS runner_up_mode, s.policy AS runner_up_policy,
    f.samples_per_s / nullif(s.samples_per_s, 0) AS lead_ratio,
    100 * (f.samples_per_s / nullif(s.samples_per_s, 0) - 1) AS lead_pct
FROM ranked r
JOIN ranked f
  ON f.mode_rank = 1 AND f.model = r.model AND f.hardware = r.hardware
 AND f.network = r.network AND f.workers = r.workers
LEFT JOIN ranked s
  ON s.mode_rank = 2 AND s.model = r.model AND s.hardware = r.hardware
 AND s.network = r.network AND s.workers = r.workers;
