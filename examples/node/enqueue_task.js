// Enqueue a Python task (sepp.App, @app.task) from Node.js: the task's job type plus its
// arguments as the documented JSON payload (docs/tasks.md "The payload"):
//
//   {"args": [positional, ...], "kwargs": {"name": value, ...}}   encoding application/json
//
//   cd examples/node && npm ci && node enqueue_task.js QUEUE JOB_TYPE [ARG ...]
//
// Each ARG is parsed as JSON when it can be (3 → 3, '"x"' → "x", '{"a":1}' → an object),
// else sent as a string. Prints the job id. SEPP_SERVER (default 127.0.0.1:7700) and
// SEPP_TOKEN (role produce) as for the worker example.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO = path.resolve(__dirname, '..', '..', 'proto');
const SERVER = process.env.SEPP_SERVER || '127.0.0.1:7700';
const TOKEN = process.env.SEPP_TOKEN || '';

const [queue, jobType, ...rawArgs] = process.argv.slice(2);
if (!queue || !jobType) {
  console.error('usage: node enqueue_task.js QUEUE JOB_TYPE [ARG ...]');
  process.exit(2);
}
const parse = (text) => { try { return JSON.parse(text); } catch { return text; } };
const payload = { args: rawArgs.map(parse), kwargs: {} };

const loaded = protoLoader.loadSync('sepp/api/v1/producer.proto', {
  includeDirs: [PROTO], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const { ProducerService } = grpc.loadPackageDefinition(loaded).sepp.api.v1;
const client = new ProducerService(SERVER, grpc.credentials.createInsecure());
const md = new grpc.Metadata();
if (TOKEN) md.add('authorization', `Bearer ${TOKEN}`);

const request = {
  queue,
  job_type: jobType,
  payload: { data: Buffer.from(JSON.stringify(payload), 'utf8'), encoding: 'application/json' },
};
client.Enqueue(request, md, { deadline: new Date(Date.now() + 10_000) }, (err, ack) => {
  if (err) {
    console.error(`enqueue failed: ${err.message}`);
    process.exit(1);
  }
  console.log(ack.job_id);
  client.close();
});
