"""Enqueue a few example jobs for ``examples/worker.py`` (see README.md).

    python examples/producer.py [--server 127.0.0.1:7700] [--count 5]
"""

from __future__ import annotations

import argparse
import os

from sepp import Client, EnqueueRequest, Payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("SEPP_SERVER", "127.0.0.1:7700"),
                        help="gRPC HOST:PORT of sepp serve (default: $SEPP_SERVER, else 127.0.0.1:7700)")
    parser.add_argument("--count", type=int, default=5, help="welcome jobs to enqueue")
    args = parser.parse_args()

    with Client(args.server) as client:
        # Welcome mails: a JSON payload plus a typed custom map (int stays int, bool stays bool).
        for user_id in range(1, args.count + 1):
            req = EnqueueRequest("emails", "welcome", payload=Payload.json({"user_id": user_id}),
                                 custom={"locale": "en-US", "user_id": user_id, "vip": user_id % 2 == 0})
            print("welcome  ", client.enqueue(req).job_id)

        # A blocking job (runs in the worker's thread pool), with high priority.
        req = EnqueueRequest("emails", "thumbnail", payload=Payload.json({"image": "cat.png"}), priority=9)
        print("thumbnail", client.enqueue(req).job_id)

        # A scheduled job: invisible to workers for 5 seconds.
        req = EnqueueRequest("emails", "welcome", payload=Payload.json({"user_id": 99})).with_delay(5.0)
        print("scheduled", client.enqueue(req).job_id, "(runs in 5 s)")

        # A job whose handler always fails: retried with backoff (1 s, 2 s), then dead-lettered
        # with reason ATTEMPTS_EXHAUSTED after its 3rd attempt.
        req = EnqueueRequest("emails", "flaky", payload=Payload.json({"why": "demo"}), max_attempts=3)
        print("flaky    ", client.enqueue(req).job_id, "(fails 3 times, then dead-letters)")

        # A job type no handler exists for: dead-lettered at once, with reason
        # "NACK_DEAD_LETTER: no handler registered for job type 'unknown'".
        print("unknown  ", client.enqueue(EnqueueRequest("emails", "unknown")).job_id)


if __name__ == "__main__":
    main()
