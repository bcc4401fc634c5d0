// A sepp worker in Node.js: the worker protocol of docs/other-languages.md, step by step,
// over @grpc/grpc-js with the .proto files of this repository (proto/).
//
//   cd examples/node && npm ci && node worker.js
//
// It works the same jobs as the Python example worker (examples/worker.py), so
// `python examples/producer.py` feeds it. Settings come from the environment:
//   SEPP_SERVER       gRPC HOST:PORT of sepp serve (default 127.0.0.1:7700)
//   SEPP_TOKEN        a token with role `work`, when the server has tokens
//   SEPP_QUEUES       queues to work, comma-separated, first = most wanted (default emails)
//   SEPP_CONCURRENCY  jobs run at once (default 4)
//   SEPP_LEASE        lease length asked for, seconds (default 30); extended every third
// One line per job outcome goes to stdout; the log goes to stderr. SIGINT or SIGTERM stops
// it gracefully: no new jobs, running ones finish, then it tells the server it stopped.
'use strict';

const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO = path.resolve(__dirname, '..', '..', 'proto');
const SERVER = process.env.SEPP_SERVER || '127.0.0.1:7700';
const TOKEN = process.env.SEPP_TOKEN || '';
const QUEUES = (process.env.SEPP_QUEUES || 'emails').split(',').filter(Boolean);
const CONCURRENCY = Number(process.env.SEPP_CONCURRENCY || 4);
const LEASE = Number(process.env.SEPP_LEASE || 30);
const POLL_WAIT = 5; // seconds a Reserve long-polls when nothing is ready (the server allows up to 30)
const WORKER_ID = `${os.hostname()}:${process.pid}`;
const CLIENT_VERSION = 'sepp-node-example/0.1.0';

// ------------------------------------------------------------------ 1. connect

const loaded = protoLoader.loadSync('sepp/api/v1/worker.proto', {
  includeDirs: [PROTO], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const { WorkerService } = grpc.loadPackageDefinition(loaded).sepp.api.v1;
const client = new WorkerService(SERVER, grpc.credentials.createInsecure(), {
  // Jobs can be large: accept what the server may send (its max_message_bytes, 16 MiB by default).
  'grpc.max_receive_message_length': 16 * 1024 * 1024,
});

// The token travels as `authorization: Bearer <secret>` on every call.
function metadata() {
  const md = new grpc.Metadata();
  if (TOKEN) md.add('authorization', `Bearer ${TOKEN}`);
  return md;
}

function call(method, request, timeoutSeconds) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + timeoutSeconds * 1000);
    client[method](request, metadata(), { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

const seconds = (s) => ({ seconds: Math.floor(s), nanos: Math.round((s % 1) * 1e9) });

// ------------------------------------------------------------------ error details

// A failed call carries a google.rpc.Status in the `grpc-status-details-bin` trailer; its
// details hold an ErrorInfo (domain "sepp") whose `reason` says what went wrong
// (LEASE_EXPIRED, LEASE_MISMATCH, JOB_NOT_FOUND, UNAUTHENTICATED, …: docs/errors.md).
const errorTypes = new protobuf.Root();
errorTypes.resolvePath = (origin, target) =>
  target.startsWith('google/protobuf/') ? target : path.join(PROTO, target); // protobufjs bundles google/protobuf
errorTypes.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
const Status = errorTypes.lookupType('google.rpc.Status');
const ErrorInfo = errorTypes.lookupType('google.rpc.ErrorInfo');

function errorReason(err) {
  const raw = err && err.metadata && err.metadata.get('grpc-status-details-bin')[0];
  if (!raw) return '';
  for (const detail of Status.decode(raw).details) {
    if (detail.type_url.endsWith('/google.rpc.ErrorInfo')) return ErrorInfo.decode(detail.value).reason;
  }
  return '';
}

// ------------------------------------------------------------------ handlers

class Retry extends Error {
  constructor(message, afterSeconds) { super(message); this.afterSeconds = afterSeconds; }
}
class DeadLetter extends Error {}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const log = (...args) => console.error(new Date().toISOString(), `[${WORKER_ID}]`, ...args);

// A handler gets the job (with `json()`, `custom` and a live `cancelRequested`); returning
// acks it, throwing nacks it: Retry(after) for a fixed delay, DeadLetter to give up now, any
// other error to retry with the queue's backoff (dead-lettered once max_attempts is spent).
const handlers = {
  async welcome(job) {
    const { user_id: userId } = job.json();
    await sleep(200); // pretend to send a mail
    if (userId == null) throw new DeadLetter('no user id');
    log(`sent welcome mail to user ${userId}${job.custom.vip ? ' (vip)' : ''}`);
  },
  async thumbnail(job) {
    if (job.attempt === 1 && job.custom.busy) throw new Retry('image service busy', 2);
    await sleep(500);
  },
  async reminder(job) {
    log(`sent reminder ${job.id}: ${job.payload.data.length ? job.json() : '(no text)'}`);
  },
  async flaky(job) {
    throw new Error(`the flaky service failed (attempt ${job.attempt} of ${job.max_attempts})`);
  },
  // Long work that checks for an admin's cancel (`sepp jobs cancel ID`) between its steps.
  async report(job) {
    for (let step = 0; step < 600; step += 1) {
      if (job.cancelRequested) return 'cancelled';
      await sleep(100);
    }
    return 'done';
  },
};

// ------------------------------------------------------------------ 2. reserve, 3. run, 4. settle

const running = new Set();
let stopping = false;
let slotFreed = () => {};

function customValues(custom) {
  const out = {};
  for (const [key, value] of Object.entries(custom)) {
    const v = value[value.kind];
    // int64 arrives as a string (longs: String): a Number when exact, else a BigInt.
    out[key] = value.kind === 'int_value' ? (Number.isSafeInteger(Number(v)) ? Number(v) : BigInt(v)) : v;
  }
  return out;
}

async function settle(job, outcome) {
  const base = { job_id: job.id, lease_id: job.lease_id, worker_id: WORKER_ID };
  try {
    if (outcome.kind === 'ack') {
      await call('Ack', base, 10);
      return 'completed';
    }
    const response = await call('Nack', { ...base, ...outcome.directive, error: outcome.error }, 10);
    return `${outcome.kind} -> ${response.state.toLowerCase()}`;
  } catch (err) {
    // LEASE_EXPIRED / LEASE_MISMATCH: the lease ran out and the job may run elsewhere; this
    // delivery's outcome is refused. Anything else (the server unreachable): the job comes
    // back after its lease. A worker may also re-send the same ack: it is idempotent.
    return `not settled (${errorReason(err) || err.code}: ${err.details})`;
  }
}

function keepLease(job) {
  // Extend every third of the lease, by a whole lease: two thirds of slack absorb a slow call.
  const timer = setInterval(async () => {
    try {
      const response = await call('ExtendLease', {
        job_id: job.id, lease_id: job.lease_id, extend_by: seconds(LEASE), worker_id: WORKER_ID,
      }, LEASE / 3);
      if (response.cancel_requested) job.cancelRequested = true;
    } catch (err) {
      const reason = errorReason(err);
      if (['LEASE_EXPIRED', 'LEASE_MISMATCH', 'JOB_NOT_FOUND'].includes(reason)) {
        job.leaseLost = true;
        clearInterval(timer);
      } // else a transport error: the next tick tries again
    }
  }, (LEASE / 3) * 1000);
  return () => clearInterval(timer);
}

async function run(reservation) {
  const job = {
    ...reservation.job,
    lease_id: reservation.lease_id,
    attempt: reservation.attempt,
    custom: customValues(reservation.job.custom),
    cancelRequested: reservation.job.cancel_requested,
    leaseLost: false,
    json() { return JSON.parse(this.payload.data.toString('utf8')); },
  };
  const stopKeeping = keepLease(job);
  const started = Date.now();
  let outcome;
  try {
    const handler = handlers[job.job_type];
    if (!handler) {
      // An unknown type is dead-lettered at once; skipping it would hold it until its lease ran out.
      outcome = { kind: 'dead_letter', directive: { dead_letter: `no handler registered for job type '${job.job_type}'` } };
    } else if ((await handler(job)) === 'cancelled') {
      // A nack of a job with a cancel request makes it CANCELLED; release keeps the attempt.
      outcome = { kind: 'release', directive: { release: {} }, error: { message: 'cancelled by admin' } };
    } else {
      outcome = { kind: 'ack' };
    }
  } catch (err) {
    const error = { message: `${err.name}: ${err.message}`, detail: err.stack || '' };
    if (err instanceof Retry) outcome = { kind: 'retry_after', directive: { retry_after: seconds(err.afterSeconds) }, error };
    else if (err instanceof DeadLetter) outcome = { kind: 'dead_letter', directive: { dead_letter: err.message }, error };
    else outcome = { kind: 'retry', directive: { retry: {} }, error };
  }
  stopKeeping();
  const result = await settle(job, outcome);
  const ms = Date.now() - started;
  console.log(`${job.id} ${job.job_type} attempt=${job.attempt}/${job.max_attempts} ${result} ${ms}ms`
    + (outcome.error ? ` error=${JSON.stringify(outcome.error.message)}` : ''));
}

function start(reservation) {
  const task = run(reservation).finally(() => {
    running.delete(task);
    slotFreed();
  });
  running.add(task);
}

async function release(reservation) {
  // Jobs reserved while stopping go back at once, the attempt not spent.
  await call('Nack', { job_id: reservation.job.id, lease_id: reservation.lease_id, release: {}, worker_id: WORKER_ID }, 10)
    .catch((err) => log(`release of ${reservation.job.id} failed (${errorReason(err) || err.code}); it returns after its lease`));
}

async function reserveLoop() {
  let backoff = 0.05;
  while (!stopping) {
    const room = CONCURRENCY - running.size;
    if (room <= 0) {
      await new Promise((resolve) => { slotFreed = resolve; });
      continue;
    }
    let response;
    try {
      response = await call('Reserve', {
        queues: QUEUES, max_jobs: room, lease_duration: seconds(LEASE), wait: seconds(POLL_WAIT),
        worker_id: WORKER_ID, concurrency: CONCURRENCY, client_version: CLIENT_VERSION, host: os.hostname(),
      }, POLL_WAIT + 10);
      backoff = 0.05;
    } catch (err) {
      const reason = errorReason(err);
      if (reason === 'UNAUTHENTICATED' || reason === 'PERMISSION_DENIED') {
        // A refused token does not get better by retrying: stop, and say why.
        log(`reserve refused (${reason}: ${err.details}); stopping`);
        process.exitCode = 2;
        stopping = true;
        break;
      }
      if (!stopping) log(`reserve failed (${reason || err.code}: ${err.details}); retrying in ${backoff}s`);
      await sleep(backoff * 1000);
      backoff = Math.min(backoff * 2, 2);
      continue;
    }
    for (const reservation of response.reservations) {
      if (stopping) await release(reservation);
      else start(reservation);
    }
  }
}

// ------------------------------------------------------------------ 5. stop

async function stop(signal) {
  if (stopping) process.exit(1); // a second signal: leave now (held jobs come back after their lease)
  stopping = true;
  log(`${signal}: stopping; ${running.size} job(s) running`);
  slotFreed();
  // End this worker's long-poll at once instead of waiting it out (it answers no jobs, or
  // jobs it had already leased, which reserveLoop gives back).
  await call('StopReserving', { worker_id: WORKER_ID }, 5).catch(() => {});
  await loop;
  await Promise.allSettled([...running]);
  // The session is over: `sepp workers list` and the Workers page show it stopped at once.
  await call('StopReserving', { worker_id: WORKER_ID, stopped: true }, 2).catch(() => {});
  client.close();
  log('stopped');
}

process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));
log(`worker ${WORKER_ID}: queues=${QUEUES.join(',')} concurrency=${CONCURRENCY} lease=${LEASE}s target=${SERVER}`
  + ` handlers=${Object.keys(handlers).sort().join(',')}`);
const loop = reserveLoop().then(() => {
  if (process.exitCode === 2) client.close(); // refused: nothing runs, nothing to stop
});
