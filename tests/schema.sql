-- Normalised description of a migrated pgtasks schema ({schema} = its name).
-- Regenerate with: python3 scripts/dump-schema
column jobs.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column jobs.task_name text NOT NULL
column jobs.queue text NOT NULL
column jobs.priority integer NOT NULL DEFAULT 0
column jobs.args jsonb NOT NULL
column jobs.kwargs jsonb NOT NULL
column jobs.status text NOT NULL DEFAULT 'pending'::text
column jobs.attempts integer NOT NULL DEFAULT 0
column jobs.max_attempts integer NOT NULL
column jobs.run_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.locked_at timestamp with time zone
column jobs.locked_by bigint
column jobs.last_error text
column jobs.result jsonb
column jobs.idempotency_key text
column jobs.created_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.updated_at timestamp with time zone NOT NULL DEFAULT now()
column jobs.finished_at timestamp with time zone
column jobs.cancel_requested boolean NOT NULL DEFAULT false
column jobs.meta jsonb NOT NULL DEFAULT '{}'::jsonb
column jobs.started_at timestamp with time zone
column jobs.attempt_errors jsonb
column jobs.limit_groups text[]
column jobs.limit_key text
column jobs.unique_key text
column jobs.unique_window tstzrange
column jobs.workflow_id bigint
column jobs.workflow_step text
column jobs.next_ids bigint[]
column jobs.prev_ids bigint[]
column jobs.waiting_for integer
column jobs.input_mode text
column limits.name text NOT NULL
column limits.concurrency integer
column limits.rate_count integer
column limits.rate_period double precision
column limits.burst double precision NOT NULL DEFAULT 1
column limits.tokens double precision NOT NULL DEFAULT 1
column limits.refilled_at timestamp with time zone NOT NULL DEFAULT now()
column limits.updated_at timestamp with time zone NOT NULL DEFAULT now()
column migrations.version integer NOT NULL
column migrations.name text NOT NULL
column migrations.applied_at timestamp with time zone NOT NULL DEFAULT now()
column periodic.name text NOT NULL
column periodic.processed_until timestamp with time zone NOT NULL
column periodic.last_tick timestamp with time zone
column periodic.last_job_id bigint
column periodic.created_at timestamp with time zone NOT NULL DEFAULT now()
column periodic.updated_at timestamp with time zone NOT NULL DEFAULT now()
column queue_pauses.queue text NOT NULL
column queue_pauses.paused_at timestamp with time zone NOT NULL DEFAULT now()
column worker_history.worker_id bigint NOT NULL
column worker_history.hostname text NOT NULL
column worker_history.pid integer NOT NULL
column worker_history.queues text[]
column worker_history.concurrency integer NOT NULL
column worker_history.started_at timestamp with time zone NOT NULL
column worker_history.heartbeat_at timestamp with time zone NOT NULL
column worker_history.removed_at timestamp with time zone NOT NULL DEFAULT now()
column workers.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column workers.hostname text NOT NULL
column workers.pid integer NOT NULL
column workers.queues text[]
column workers.concurrency integer NOT NULL
column workers.started_at timestamp with time zone NOT NULL DEFAULT now()
column workers.heartbeat_at timestamp with time zone NOT NULL DEFAULT now()
column workers.task_names text[]
column workflows.id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
column workflows.kind text NOT NULL
column workflows.created_at timestamp with time zone NOT NULL DEFAULT now()
column workflows.on_error jsonb
column workflows.error_job_id bigint
constraint jobs.jobs_attempts_check CHECK (((attempts >= 0) AND (attempts <= max_attempts)))
constraint jobs.jobs_limit_groups_check CHECK (((limit_groups IS NULL) OR (cardinality(limit_groups) <= 8))) NOT VALID
constraint jobs.jobs_max_attempts_check CHECK ((max_attempts >= 1))
constraint jobs.jobs_meta_check CHECK ((jsonb_typeof(meta) = 'object'::text))
constraint jobs.jobs_pkey PRIMARY KEY (id)
constraint jobs.jobs_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'done'::text, 'failed'::text, 'cancelled'::text])))
constraint jobs.jobs_unique_window_check CHECK (((unique_window IS NULL) OR ((unique_key IS NOT NULL) AND (NOT isempty(unique_window)))))
constraint limits.limits_burst_check CHECK ((burst >= (1)::double precision))
constraint limits.limits_burst_range_check CHECK (((burst >= (1)::double precision) AND (burst <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_concurrency_check CHECK (((concurrency IS NULL) OR (concurrency >= 1)))
constraint limits.limits_pkey PRIMARY KEY (name)
constraint limits.limits_rate_count_check CHECK (((rate_count IS NULL) OR (rate_count >= 1)))
constraint limits.limits_rate_period_check CHECK (((rate_period IS NULL) OR (rate_period > (0)::double precision)))
constraint limits.limits_rate_period_range_check CHECK (((rate_period IS NULL) OR ((rate_period >= (0.001)::double precision) AND (rate_period <= ('10000000000'::numeric)::double precision))))
constraint limits.limits_refilled_at_check CHECK (isfinite(refilled_at))
constraint limits.limits_tokens_check CHECK (((tokens >= (0)::double precision) AND (tokens <= ('1000000000'::numeric)::double precision)))
constraint limits.limits_updated_at_check CHECK (isfinite(updated_at))
constraint migrations.migrations_pkey PRIMARY KEY (version)
constraint periodic.periodic_pkey PRIMARY KEY (name)
constraint queue_pauses.queue_pauses_pkey PRIMARY KEY (queue)
constraint worker_history.worker_history_pkey PRIMARY KEY (worker_id)
constraint workers.workers_pkey PRIMARY KEY (id)
constraint workflows.workflows_kind_check CHECK ((kind = ANY (ARRAY['chain'::text, 'group'::text, 'chord'::text])))
constraint workflows.workflows_pkey PRIMARY KEY (id)
index CREATE INDEX jobs_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) WHERE (status = 'pending'::text)
index CREATE INDEX jobs_finished_idx ON {schema}.jobs USING btree (finished_at) WHERE (status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text]))
index CREATE UNIQUE INDEX jobs_idempotency_key_key ON {schema}.jobs USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL)
index CREATE INDEX jobs_limited_claim_idx ON {schema}.jobs USING btree (priority DESC, run_at, id) WHERE ((status = 'pending'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_limited_running_idx ON {schema}.jobs USING btree (id) WHERE ((status = 'running'::text) AND (limit_groups IS NOT NULL))
index CREATE INDEX jobs_pending_queue_idx ON {schema}.jobs USING btree (queue, run_at) WHERE ((status = 'pending'::text) AND (attempts >= 0))
index CREATE UNIQUE INDEX jobs_pkey ON {schema}.jobs USING btree (id)
index CREATE INDEX jobs_running_idx ON {schema}.jobs USING btree (locked_by) WHERE (status = 'running'::text)
index CREATE UNIQUE INDEX jobs_unique_active_idx ON {schema}.jobs USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (unique_window IS NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text])))
index CREATE UNIQUE INDEX jobs_unique_window_idx ON {schema}.jobs USING btree (unique_key, unique_window) WHERE (unique_window IS NOT NULL)
index CREATE INDEX jobs_waiting_idx ON {schema}.jobs USING btree (queue) WHERE (status = 'waiting'::text)
index CREATE INDEX jobs_workflow_idx ON {schema}.jobs USING btree (workflow_id, id) WHERE (workflow_id IS NOT NULL)
index CREATE UNIQUE INDEX limits_pkey ON {schema}.limits USING btree (name)
index CREATE UNIQUE INDEX migrations_pkey ON {schema}.migrations USING btree (version)
index CREATE UNIQUE INDEX periodic_pkey ON {schema}.periodic USING btree (name)
index CREATE UNIQUE INDEX queue_pauses_pkey ON {schema}.queue_pauses USING btree (queue)
index CREATE UNIQUE INDEX worker_history_pkey ON {schema}.worker_history USING btree (worker_id)
index CREATE INDEX worker_history_removed_at_idx ON {schema}.worker_history USING btree (removed_at)
index CREATE UNIQUE INDEX workers_pkey ON {schema}.workers USING btree (id)
index CREATE UNIQUE INDEX workflows_pkey ON {schema}.workflows USING btree (id)
storage jobs fillfactor=80, autovacuum_vacuum_scale_factor=0.02, autovacuum_analyze_scale_factor=0.02
storage periodic fillfactor=50
trigger CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON {schema}.jobs REFERENCING NEW TABLE AS inserted_jobs FOR EACH STATEMENT WHEN ((current_setting('pgtasks.self_notified'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION {schema}.notify_jobs_inserted()
trigger CREATE TRIGGER jobs_workflow_job_ended AFTER UPDATE OF status ON {schema}.jobs FOR EACH ROW WHEN (((new.workflow_id IS NOT NULL) AND (new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION {schema}.workflow_job_ended()
trigger CREATE TRIGGER workers_record_removed AFTER DELETE ON {schema}.workers REFERENCING OLD TABLE AS removed_workers FOR EACH STATEMENT EXECUTE FUNCTION {schema}.record_removed_workers()
statistics jobs.jobs_queue_status_stats (m) ON queue, status
function claim_limited() cddda0e7b81d4b84b0be35ded98cfc96
function claim_limited_jobs() 47feec3114fd275a4935e4cbaecd5489
function notify_jobs_inserted() d475aca2db2bb1c80f5853a155e44e39
function record_removed_workers() 2fd7e0646ed6ae3ca7a59ef936d10f05
function workflow_job_ended() a2398aaa2b0b9b0b9549b8f8e0768712
