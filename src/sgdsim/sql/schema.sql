-- sgdsim store: base tables. Loaded by sgdsim.store.publish from Parquet shards.
-- Units are in column names: _us microseconds, _s seconds, _bytes / bytes bytes,
-- _bps bit/s, _Bps bytes/s. Times of trace rows are relative to the first event
-- of their traced step.

CREATE TABLE profiles (
    profile_id            VARCHAR PRIMARY KEY, -- '{hardware}/{model}'
    source                VARCHAR NOT NULL,    -- profile (the configured grid) | imported (sgdsim import)
    model                 VARCHAR NOT NULL,    -- zoo name, e.g. MobileNetV2
    hardware              VARCHAR NOT NULL,    -- hardware entry of the config
    device                VARCHAR NOT NULL,    -- cpu | gpu: where the worker computed
    batch_size            INTEGER NOT NULL,    -- samples per step
    image_size            INTEGER NOT NULL,    -- input height = width, pixels
    classes               INTEGER NOT NULL,    -- output classes
    ps_tasks              INTEGER NOT NULL DEFAULT 1, -- PS tasks (shards) of the profiled cluster
    tf_version            VARCHAR NOT NULL,    -- TensorFlow that took the profile
    host                  VARCHAR NOT NULL,    -- node name of the profiling host
    param_count           BIGINT NOT NULL,     -- trainable parameters
    param_bytes           BIGINT NOT NULL,     -- bytes of trainable parameters
    runs                  INTEGER NOT NULL DEFAULT 1, -- independent runs (fresh PS and worker processes) pooled
    traced_steps          INTEGER NOT NULL,    -- steps traced with FULL_TRACE, all runs
    untraced_step_s       DOUBLE NOT NULL,     -- median wall time of an untraced step
    untraced_step_iqr_s   DOUBLE NOT NULL,     -- interquartile range of untraced step times
    traced_step_s         DOUBLE NOT NULL,     -- median wall time of a traced step
    tracing_factor        DOUBLE NOT NULL,     -- median untraced / mean traced: scales traced durations
    profile_bandwidth_Bps DOUBLE NOT NULL,     -- bandwidth fitted to the profile's pulls (all shards: the worker's link)
    profile_latency_s     DOUBLE NOT NULL,     -- intercept of that fit (software delay)
    profile_fit_rms_s     DOUBLE NOT NULL,     -- RMS residual of that fit
    replay_step_s         DOUBLE NOT NULL,     -- simulated N=1 step on the profile's network
    compute_s             DOUBLE NOT NULL,     -- calibrated compute time of one step
    overhead_s            DOUBLE NOT NULL,     -- calibrated per-step overhead between steps
    pull_start_s          DOUBLE NOT NULL,     -- calibrated delay from step start to first pull landing
    trace_span_s          DOUBLE NOT NULL,     -- median span of a traced step (first to last event)
    trace_span_iqr_s      DOUBLE NOT NULL,     -- interquartile range of that span
    worker_busy_s         DOUBLE NOT NULL,     -- median union of worker op intervals (traced)
    worker_cpu_s          DOUBLE,              -- median CPU seconds (all threads) of the worker process per untraced step
    ps_cpu_s              DOUBLE,              -- median CPU seconds of all PS processes per untraced step
    node_cores            INTEGER,             -- cores the profiled node gave the processes
    rpc_rtt_s             DOUBLE,              -- round trip of one small tensor PS -> worker, session cost subtracted
    session_call_s        DOUBLE,              -- median untraced Session.run of a worker-local tensor
    dispatch_s            DOUBLE,              -- median traced step's call time before its first op
    return_s              DOUBLE,              -- median traced step's call time after its last op (return + trace collection)
    probe_dispatch_s      DOUBLE,              -- the same before the first op of a traced one-tensor PS probe
    probe_return_s        DOUBLE,              -- and after its last (return, almost no trace to collect)
    host_cpu_busy         DOUBLE,              -- share of the node's CPU time busy over the profile's runs (NULL: not recorded)
    host_cpu_steal        DOUBLE               -- share the hypervisor stole over them: a profile above 5 % ran slower than on a quiet host
);

CREATE TABLE profile_steps (
    profile_id      VARCHAR NOT NULL,
    step            INTEGER NOT NULL,  -- traced step index k
    span_us         BIGINT NOT NULL,   -- first to last event of the step, any device
    worker_busy_us  BIGINT NOT NULL,   -- union of the worker's op intervals
    worker_idle_us  BIGINT NOT NULL,   -- worker span minus busy time
    pull_end_us     BIGINT NOT NULL,   -- last pull arrival
    pull_bytes      BIGINT NOT NULL,   -- bytes pulled (PS -> worker)
    push_bytes      BIGINT NOT NULL    -- bytes pushed (worker -> PS)
);

CREATE TABLE ops (
    profile_id VARCHAR NOT NULL,
    step       INTEGER NOT NULL,   -- traced step index k
    role       VARCHAR NOT NULL,   -- worker | ps
    device     VARCHAR NOT NULL,   -- TensorFlow device name
    name       VARCHAR NOT NULL,   -- op (node) name
    op_type    VARCHAR NOT NULL,   -- kernel type, e.g. _MklNativeConv2D
    start_us   BIGINT NOT NULL,    -- start, µs after the step's first event
    dur_us     BIGINT NOT NULL,    -- duration, µs
    inputs     VARCHAR[] NOT NULL  -- input node names (control inputs included)
);

CREATE TABLE transfers (
    profile_id VARCHAR NOT NULL,
    step       INTEGER NOT NULL,
    direction  VARCHAR NOT NULL,   -- pull (PS -> worker) | push (worker -> PS)
    tensor     VARCHAR NOT NULL,   -- rendezvous key edge_N_<producer>
    src_device VARCHAR NOT NULL,
    dst_device VARCHAR NOT NULL,
    src_op     VARCHAR,            -- op that produced the tensor on the sender
    recv_node  VARCHAR,            -- _Recv node on the receiver
    bytes      BIGINT NOT NULL,    -- tensor size, bytes
    start_us   BIGINT NOT NULL,
    dur_us     BIGINT NOT NULL,
    ps_task    INTEGER            -- PS task (shard) at the PS end: source of a pull, destination of a push
);

CREATE TABLE params (
    profile_id        VARCHAR NOT NULL,
    variable          VARCHAR NOT NULL, -- variable name
    bytes             BIGINT NOT NULL,  -- variable size, bytes
    shard             VARCHAR NOT NULL, -- device TensorFlow placed it on, e.g. /job:ps/task:1
    ps_task           INTEGER,          -- its PS task (shard) index; NULL if not on a PS
    trainable         BOOLEAN NOT NULL,
    first_consumer_op VARCHAR,          -- first worker op (forward) reading it
    gradient_op       VARCHAR,          -- worker op producing its gradient
    gradient_tensor   VARCHAR,          -- transfers.tensor of the push carrying the gradient
    pull_tensor       VARCHAR,          -- transfers.tensor of the pull carrying the variable
    update_op         VARCHAR,          -- PS op applying the update
    first_use_us      DOUBLE,           -- median start of the first consumer, µs after step start
    gradient_ready_us DOUBLE,           -- median end of the gradient producer, µs after step start
    update_us         DOUBLE,           -- median traced duration of the update op, µs
    update_iqr_us     DOUBLE            -- interquartile range of that duration, µs
);

CREATE TABLE predictions (
    model            VARCHAR NOT NULL,
    hardware         VARCHAR NOT NULL,
    network          VARCHAR NOT NULL,  -- network entry of the config
    bandwidth_bps    DOUBLE NOT NULL,   -- NIC capacity per direction, bit/s
    latency_s        DOUBLE NOT NULL,   -- per-message latency
    mode             VARCHAR NOT NULL,  -- async, sync_ps or allreduce
    batch_size       INTEGER NOT NULL,
    workers          INTEGER NOT NULL,  -- N
    steps_per_worker INTEGER NOT NULL,
    warmup_steps     INTEGER NOT NULL,
    policy           VARCHAR NOT NULL,  -- transmission policy (e.g. tf_default); allreduce: fusion rule
    workers_per_node INTEGER NOT NULL,  -- co-located workers sharing a node's cores
    ps_discipline    VARCHAR NOT NULL,  -- fair | fifo: how the PS NIC serves workers
    steps_per_s      DOUBLE NOT NULL,   -- worker steps per second, all workers (mean of replications)
    samples_per_s    DOUBLE NOT NULL,   -- steps_per_s * batch_size
    mean_step_s      DOUBLE NOT NULL,   -- mean step time of one worker
    ps_down_util     DOUBLE NOT NULL,   -- busy fraction of the PS NIC, PS -> workers (allreduce: a node's NIC)
    ps_up_util       DOUBLE NOT NULL,   -- busy fraction of the PS NIC, workers -> PS (allreduce: a node's NIC)
    blocked_fraction DOUBLE NOT NULL,   -- share of worker time waiting on communication
    sim_time_s       DOUBLE NOT NULL,   -- simulated time span
    bytes_pulled     DOUBLE NOT NULL,   -- bytes carried PS -> workers in the run
    bytes_pushed     DOUBLE NOT NULL,   -- bytes carried workers -> PS in the run
    events           BIGINT NOT NULL,   -- events the simulator processed
    sim_wall_s       DOUBLE NOT NULL,   -- simulator wall time (the phase band's runs included)
    seed             BIGINT NOT NULL,   -- seed of the first replication's random Generator
    replications     INTEGER NOT NULL,  -- runs averaged (seeds seed, seed+1, ...)
    steps_per_s_std  DOUBLE NOT NULL,   -- standard deviation of steps_per_s over replications
    sim_steps_per_s  DOUBLE,            -- simulated steps/s before the CPU bound
    cpu_bound_steps_per_s DOUBLE,       -- utilization-law bound from the profile's CPU seconds per step (NULL: not measured)
    pull_gap_s       DOUBLE,            -- per-pull round trip of one-at-a-time policies (tictac, fifo_random)
    compute_slots    DOUBLE,            -- co-located workers computing at full speed at once (NULL: cores not shared)
    steps_per_s_lo   DOUBLE,            -- phase band, lower end: workers in lockstep (NULL: no band)
    steps_per_s_hi   DOUBLE,            -- phase band, upper end: the bottleneck bound, min(N X(1), PS NIC, CPU)
    start_window_s   DOUBLE,            -- async: workers after the first start within this many s of it (NULL: over one step, launched independently)
    protocol         VARCHAR,           -- steady: simulated until the batch-means rule converged (simulation.steady); steps: steps_per_worker steps (NULL: written before protocols)
    converged        BOOLEAN,           -- steady: the rule held before max_s (first replication)
    steps_per_s_half_width DOUBLE,      -- steady: half-width of the first replication's confidence interval, steps/s
    rel_half_width   DOUBLE,            -- steady: steps_per_s_half_width / that replication's estimate
    window_s         DOUBLE,            -- steady: seconds of the first replication's scored window
    steps_per_s_windows DOUBLE[],       -- steady: steps/s of each batch of that window
    phase_distance   DOUBLE,            -- steady: median distance from a step end to the nearest other worker's, in steps (0 in phase, 0.5 a pair alternating)
    joins_path       VARCHAR,           -- async N > 1: the joins JSON whose join delays and two-way share the point took (networks[].joins; NULL: none)
    joins_bandwidth_bps DOUBLE          -- with joins_path: the rate that file was captured at, bit/s (bandwidth_bps, or networks[].joins_bandwidth_bps where it differs)
);

-- One row per measured validation run: real TensorFlow training, asynchronous
-- or synchronous through one PS, or by ring all-reduce among the N workers,
-- each host in its own network namespace on this node, every host's NIC
-- shaped to bandwidth_bps per direction (sgdsim.testbed).
CREATE TABLE measurements (
    model            VARCHAR NOT NULL,
    hardware         VARCHAR NOT NULL,  -- hardware entry whose thread settings the processes used
    network          VARCHAR NOT NULL,  -- validation.networks entry
    bandwidth_bps    DOUBLE NOT NULL,   -- NIC rate per direction (tc tbf), bit/s
    latency_s        DOUBLE NOT NULL,   -- one-way delay added by netem, s
    mode             VARCHAR NOT NULL DEFAULT 'async', -- async | sync_ps (SyncReplicasOptimizer) | allreduce (MultiWorkerMirroredStrategy, RING)
    policy           VARCHAR NOT NULL,  -- pull order: tf_default, or tictac / fifo_random enforced; allreduce: the fusion rule (single)
    workers          INTEGER NOT NULL,  -- N
    batch_size       INTEGER NOT NULL,
    duration_s       DOUBLE NOT NULL,   -- configured measurement seconds after warm-up
    warmup_s         DOUBLE NOT NULL,   -- seconds left out after the last worker's warm-up steps
    warmup_steps     INTEGER,           -- steps each worker ran before the window could start
    min_steps        INTEGER,           -- steps each worker ran after warm-up, at least
    mtu              INTEGER,           -- MTU of the emulated links, bytes
    queue            VARCHAR,           -- how each emulated NIC queues: fair (per peer host) | fifo
    episodes         INTEGER,           -- episodes of the run, each from its start offsets
    status           VARCHAR NOT NULL,  -- ok | skipped
    reason           VARCHAR NOT NULL,  -- why skipped, or why run on loopback ('' otherwise)
    loopback         BOOLEAN NOT NULL,  -- run unshaped on 127.0.0.1 (no root)
    steps_per_s      DOUBLE,            -- steps/s of all workers together (NULL when skipped)
    samples_per_s    DOUBLE,            -- steps_per_s * batch_size
    steps_per_s_windows DOUBLE[],       -- steps_per_s of each episode (one episode: of equal consecutive sub-windows)
    steps_per_s_std  DOUBLE,            -- standard deviation over those episodes (sub-windows)
    start_offsets_s  DOUBLE[][],        -- per episode, each worker's start offset, s
    per_worker_steps_per_s DOUBLE[],    -- each worker's steps/s
    window_s         DOUBLE,            -- seconds of the common window measured
    step_end_times   DOUBLE[][],        -- per worker, every step end, s since the window started
    background_busy  DOUBLE,            -- share of this machine's CPU busy in the second before the run
    cpu_busy         DOUBLE,            -- share of this machine's CPU time busy over the window
    cpu_steal        DOUBLE,            -- share of it the hypervisor stole over the window
    worker_cpu_s_per_step DOUBLE,       -- CPU seconds of the worker processes (all threads) per step over the window
    ps_cpu_s_per_step DOUBLE,           -- CPU seconds of the PS process per step over the window
    other_cpu_s_per_step DOUBLE,        -- the node's busy CPU seconds charged to neither, per step (kernel softirqs of the emulated network, other load)
    shaper_drops     BIGINT,            -- packets the tc tbf shapers dropped over the run
    protocol         VARCHAR,           -- episodes (drawn start phases) | steady (run until converged)
    buffer_bytes     BIGINT,            -- queue limit of every emulated NIC, bytes (fifo: the FIFO; fair: each per-peer queue)
    congestion_control VARCHAR,         -- TCP congestion control of every emulated host (cubic, bbr, ...)
    settle_s         DOUBLE,            -- steady: seconds after the last worker's warm-up before the window
    converged        BOOLEAN,           -- steady: the batch-means rule held before max_s
    steps_per_s_half_width DOUBLE,      -- steady: half-width of the confidence interval of steps_per_s
    rel_half_width   DOUBLE,            -- steady: steps_per_s_half_width / steps_per_s
    target_rel_half_width DOUBLE,       -- steady: the rule's bound on rel_half_width
    batches          INTEGER,           -- steady: batches of the window (steps_per_s_windows are their rates)
    confidence       DOUBLE,            -- steady: confidence level of the interval
    max_s            DOUBLE,            -- steady: bound on the window, s
    steps_in_window  INTEGER[],         -- steady: step ends of each worker inside the window
    phase_distance   DOUBLE,            -- steady, N > 1: median time from a step end to another worker's nearest, in steps (0 in phase, 1/N evenly spread)
    allreduces_per_step INTEGER,        -- allreduce: all-reduce ops in the traced step (1: every gradient in one pack, fusion single)
    runs             INTEGER,           -- launches (fresh processes) averaged into steps_per_s
    run_steps_per_s  DOUBLE[],          -- each launch's steps/s
    run_step_end_times DOUBLE[][][]     -- runs > 1: each launch's step_end_times (the first is step_end_times)
);

-- One row per prediction of a measured point, for the testbed's placement: all
-- N workers on one node sharing its cores (workers_per_node = N).
CREATE TABLE testbed_predictions (
    model            VARCHAR NOT NULL,
    hardware         VARCHAR NOT NULL,  -- hardware entry of the profile
    network          VARCHAR NOT NULL,  -- validation.networks entry
    bandwidth_bps    DOUBLE NOT NULL,   -- NIC rate per direction, bit/s
    predicted_bandwidth_Bps DOUBLE NOT NULL, -- capacity the simulator used, bytes/s
    batch_size       INTEGER NOT NULL,
    workers          INTEGER NOT NULL,  -- N
    workers_per_node INTEGER NOT NULL,  -- = N: every worker on the testbed's node
    steps_per_worker INTEGER NOT NULL,
    warmup_steps     INTEGER NOT NULL,
    mode             VARCHAR NOT NULL DEFAULT 'async', -- async | sync_ps | allreduce
    policy           VARCHAR NOT NULL,  -- transmission policy; allreduce: the fusion rule (single)
    steps_per_s      DOUBLE NOT NULL,   -- predicted steps/s, all workers (mean of replications)
    samples_per_s    DOUBLE NOT NULL,
    mean_step_s      DOUBLE NOT NULL,
    ps_down_util     DOUBLE NOT NULL,
    ps_up_util       DOUBLE NOT NULL,
    blocked_fraction DOUBLE NOT NULL,
    sim_time_s       DOUBLE NOT NULL,
    bytes_pulled     DOUBLE NOT NULL,
    bytes_pushed     DOUBLE NOT NULL,
    events           BIGINT NOT NULL,
    sim_wall_s       DOUBLE NOT NULL,
    seed             BIGINT NOT NULL,
    replications     INTEGER NOT NULL,
    steps_per_s_std  DOUBLE NOT NULL,
    sim_steps_per_s  DOUBLE,            -- simulated steps/s before the CPU bound
    cpu_bound_steps_per_s DOUBLE,       -- utilization-law bound from the profile's CPU seconds per step (NULL: not measured)
    pull_gap_s       DOUBLE,            -- per-pull round trip of one-at-a-time policies (tictac, fifo_random)
    compute_slots    DOUBLE,            -- workers computing at full speed at once on the node's cores left by the PS, RPC and network work
    steps_per_s_lo   DOUBLE,            -- phase band, lower end: workers in lockstep (NULL: no band)
    steps_per_s_hi   DOUBLE,            -- phase band, upper end: the bottleneck bound, min(N X(1), PS NIC, CPU)
    start_window_s   DOUBLE,            -- async: workers after the first start within this many s of it (validation.start_window_s; NULL: over one step)
    network_cpu_s_per_byte DOUBLE,      -- kernel CPU s per byte the testbed adds to loopback (calibrated)
    pull_join_delay_s DOUBLE,           -- how late the PS serves a step that starts while it sends to another worker (calibrated)
    push_join_delay_s DOUBLE,           -- how late a backward pass's pushes get their share while the PS receives another worker's (calibrated)
    pull_join_delays_s DOUBLE[],        -- mean pull join delay joining k = 1, 2, ... other workers' transfers, s (training capture; the last for more)
    pull_join_sd_s   DOUBLE[],          -- their standard deviations, s (each join's delay is drawn from a gamma with that mean and sd; through a FIFO port from the captured joins themselves, so a mean may be < 0: the joiner favoured)
    push_join_delays_s DOUBLE[],        -- the same for pushes, s
    push_join_sd_s   DOUBLE[],          -- their standard deviations, s
    two_way_share    DOUBLE[],          -- [pull, push]: what a PS NIC direction carries while the other carries data, over its rate alone, at this N (the model's training capture; NULL: none)
    message_overhead_s DOUBLE,          -- software cost of one ring message at this point's N, added to the latency to make alpha (calibrated; 0 at N = 1 and without allreduce points)
    sync_step_s      DOUBLE,            -- allreduce: the all-reduce path's own step, one worker alone (profile_allreduce), s
    profile_compute_s DOUBLE,           -- allreduce: the PS profile's compute per step it replaces, s
    start_offsets_s  DOUBLE[][],        -- the measured episodes' start offsets, simulated one run each
    protocol         VARCHAR,           -- steady when simulated until the measurement's rule converged (NULL: episodes)
    converged        BOOLEAN,           -- steady: the batch-means rule held before max_s
    steps_per_s_half_width DOUBLE,      -- steady: half-width of the confidence interval of steps_per_s
    rel_half_width   DOUBLE,            -- steady: steps_per_s_half_width / steps_per_s
    window_s         DOUBLE,            -- steady: seconds of the scored window
    steps_per_s_windows DOUBLE[],       -- steady: steps/s of each batch
    steps_in_window  INTEGER[],         -- steady: step ends of each worker inside the window
    step_end_times   DOUBLE[][],        -- steady: per worker, every simulated step end, s since the window started
    phase_distance   DOUBLE,            -- steady, N > 1: as measurements.phase_distance, of the first simulated run
    steps_per_s_by_phase DOUBLE[],      -- steady async, N = 2: steps/s of the pair at phases 0-0.1, ... 0.4-0.5, run from every start phase (NULL where never)
    profile_only_steps_per_s DOUBLE,    -- async, N > 1, predicted with the model's training capture: the same point predicted without it, from the one-worker profile and the network's calibration alone (pull race join, CPU per byte), as a user who cannot train the model at N would predict it (NULL otherwise)
    profile_only_phase_distance DOUBLE, -- steady: phase_distance of that prediction's first run
    capture_steps_per_s DOUBLE,         -- async, N > 1, N captured running the step's skeleton (validation.join_calibration): that capture's own steps/s (all workers), a calibration run, not the point's measurement (NULL otherwise)
    capture_phase_distance DOUBLE,      -- that capture's phase_distance (0 in phase, 1/N evenly spread)
    skeleton_steps_per_s DOUBLE,        -- that capture simulated: the same joins and two-way share, no CPU shared (its workers wait out the compute); against capture_steps_per_s, how well the simulator's network dynamics reproduce a run they were calibrated from
    skeleton_phase_distance DOUBLE,     -- steady: phase_distance of that simulation's first run
    calibration_cpu_steal DOUBLE        -- the larger share of the node's CPU the hypervisor stole during the network's calibration and the model's join captures (NULL: not recorded)
);

-- One row per steady asynchronous point with N > 1: a diagnostic replay of its
-- prediction started from the phases the measured workers left warm-up with
-- (rule replay_testbed; reads the measurement, so it is no prediction). Its error
-- is what is left of the point's error without the launch: the step model and how
-- the phases move after warm-up.
CREATE TABLE testbed_replays (
    model            VARCHAR NOT NULL,
    hardware         VARCHAR NOT NULL,
    network          VARCHAR NOT NULL,
    mode             VARCHAR NOT NULL,
    policy           VARCHAR NOT NULL,
    workers          INTEGER NOT NULL,
    replay_status    VARCHAR NOT NULL,  -- ok | skipped
    replay_reason    VARCHAR NOT NULL,  -- why skipped ('' when ok)
    replay_after_step INTEGER,          -- the warm-up step whose ends give the phases (the last one)
    replay_offsets_s DOUBLE[][],        -- per launch, each worker's phase: its end of that step less the earliest, s
    replay_steps_per_s DOUBLE,          -- steps/s simulated from those phases (mean over the launches), all workers
    replay_phase_distance DOUBLE        -- as measurements.phase_distance, of the first replayed launch
);

-- Price per node-hour of each hardware and network entry priced in the
-- config's cost: (entries without a price are absent; none = no cost shown).
CREATE TABLE prices (
    kind          VARCHAR NOT NULL,  -- hardware | network
    name          VARCHAR NOT NULL,  -- entry name
    per_node_hour DOUBLE NOT NULL,   -- price of one node for one hour, in currency
    currency      VARCHAR NOT NULL   -- cost.currency, e.g. USD
);

CREATE TABLE runs (
    created_utc TIMESTAMP NOT NULL,     -- when publish ran
    sgdsim_version VARCHAR NOT NULL,
    config_json VARCHAR NOT NULL        -- the validated config the results come from
);

CREATE TABLE store_info (
    schema_version INTEGER NOT NULL     -- sgdsim.store.SCHEMA_VERSION of the code that wrote the store
);
