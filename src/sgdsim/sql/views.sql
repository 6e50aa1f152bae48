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
